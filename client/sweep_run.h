/*
 * sweep_run.h — a sweep's jobs over foxd endpoints (internal to client/;
 * sweep_run.c says how). sweep.c calls it once the plan is built.
 */
#ifndef FOX_CLIENT_SWEEP_RUN_H
#define FOX_CLIENT_SWEEP_RUN_H

#include "client/ask.h"
#include "client/sweep_plan.h"

/* Endpoints, attempts and patience of a sweep over daemons. */
typedef struct sweep_run_opts {
    char **endpoints;
    int n_endpoints;
    int attempts;     /* a job lost with this many daemons fails */
    int wait_s;       /* no endpoint answering this long ends the sweep */
} sweep_run_opts;

/*
 * FOXCTL_OK when no two of ro's endpoints name the same daemon by the same
 * address once normalized (scheme and host in lower case, an ipc:// path
 * with its directory resolved); else FOXCTL_USAGE with both named on
 * stderr. Two workers on one daemon would set each other's config between
 * a job's config_set and its run, and record one job's result as another's.
 * One daemon reached by two different addresses (ipc and tcp) is not seen.
 */
int foxctl_sweep_check_endpoints(const sweep_run_opts *ro);

/*
 * Run the plan's unfinished jobs over the endpoints, one job at a time on
 * each, writing each result as it arrives. Returns foxctl's exit status.
 */
int foxctl_sweep_run(foxctl_opts *o, sweep_plan *p, const sweep_run_opts *ro);

#endif
