/*
 * sweep.h — `foxctl sweep` (internal to client/): a grid of jobs (folds ×
 * seeds × configurations) run on one or several foxd endpoints, or planned
 * for a Slurm array of `foxd --once` tasks, and the one table gathered from
 * the jobs' results.
 *
 * A sweep lives in a directory: plan.json (the spec and its jobs), one
 * jobs/<id>.json per finished job, written as the job finishes (atomically,
 * so that a half-written file never counts), and summary.json with the
 * table. Running the same spec into the same directory again skips the
 * finished jobs; nothing finished is lost when a daemon or the client dies.
 *
 * A job is one fold of one configuration with one seed, trained from a fresh
 * engine (`run` with fresh:true, or `foxd --once`), so that its result
 * depends on its configuration alone, not on the daemon it ran on.
 */
#ifndef FOX_CLIENT_SWEEP_H
#define FOX_CLIENT_SWEEP_H

#include <stdint.h>

#include "client/commands.h"

/* sweep [SPEC.json] [--endpoints URL,...] [--slurm] [--gather DIR] [grid options] */
int foxctl_cmd_sweep(foxctl_opts *o, int argc, char **argv);

typedef enum { SWEEP_PENDING, SWEEP_RUNNING, SWEEP_DONE, SWEEP_FAILED } sweep_state;

typedef struct sweep_job {
    char id[64];      /* c<config>-s<seed>-f<fold>: also the name of its result file */
    int config;       /* index into the plan's configurations */
    uint64_t seed;
    int fold;
    cJSON *values;    /* every config key the job sets, train.seed included (owned) */
    sweep_state state;
    int attempts;     /* tries lost with their daemon */
    double started;   /* monotonic seconds, while running */
} sweep_job;

typedef struct sweep_plan {
    char dir[1024];
    cJSON *spec;      /* the normalized spec (owned) */
    int epochs, steps_per_epoch; /* 0: the daemon's config */
    int n_configs;
    char (*labels)[256]; /* per configuration: "key=value ..." of its grid values */
    sweep_job *jobs;
    int n_jobs;
} sweep_plan;

/* Endpoints, attempts and patience of a sweep over daemons. */
typedef struct sweep_run_opts {
    char **endpoints;
    int n_endpoints;
    int attempts;     /* a job lost with this many daemons fails */
    int wait_s;       /* no endpoint answering this long ends the sweep */
} sweep_run_opts;

/*
 * Run the plan's unfinished jobs over the endpoints, one job at a time on
 * each, writing each result as it arrives. Returns foxctl's exit status.
 */
int foxctl_sweep_run(foxctl_opts *o, sweep_plan *p, const sweep_run_opts *ro);

/* Write dir/jobs/<id>.json (or <id>.failed.json) atomically. FOXCTL_OK or FOXCTL_EREPLY. */
int foxctl_sweep_write_job(const sweep_plan *p, const sweep_job *j, cJSON *record, int failed);

#endif
