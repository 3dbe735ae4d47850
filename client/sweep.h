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
 * depends on its configuration alone, not on the daemon it ran on. Over
 * daemons, jobs that differ only in their seed and their values of the
 * member keys (common/member_keys.h) on the same data run as the members of
 * one engine (engine.members), each member the run of its seed and values
 * alone, and the run's result is split back into one per job.
 */
#ifndef FOX_CLIENT_SWEEP_H
#define FOX_CLIENT_SWEEP_H

#include "client/ask.h"

/* sweep [SPEC.json] [--endpoints URL,...] [--slurm] [--gather DIR] [grid options] */
int foxctl_cmd_sweep(foxctl_opts *o, int argc, char **argv);

#endif
