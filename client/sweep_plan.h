/*
 * sweep_plan.h — a sweep's plan as data (internal to client/): its jobs,
 * their states and packs, and the JSON files of its directory (sweep.h describes
 * them): read whole, written atomically, a job's result file among them.
 * sweep.c builds and gathers the plan, sweep_run.c runs its jobs over
 * daemons; both stand on this file, and it on neither.
 *
 * Single thread at a time: sweep_run.c's threads take the plan under their
 * own lock. Functions return foxctl's exit status (conn.h) unless they say
 * otherwise.
 */
#ifndef FOX_CLIENT_SWEEP_PLAN_H
#define FOX_CLIENT_SWEEP_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

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
    /*
     * Packing (sweep.c): jobs that differ only in their seed and their
     * values of the member keys (common/member_keys.h) train as the
     * members of one engine. lead is the index of the job whose run trains
     * this one (its own index when it runs alone or leads), member its
     * place in that run, next the pack's next job (-1: the last), members
     * on a lead the pack's size.
     */
    int lead, member, next, members;
} sweep_job;

typedef struct sweep_plan {
    char dir[1024];
    cJSON *spec;      /* the normalized spec (owned) */
    int epochs, steps_per_epoch; /* 0: the daemon's config */
    int n_configs;
    char (*labels)[256]; /* per configuration: "key=value ..." of its grid values */
    sweep_job *jobs;
    int n_jobs;
    int packs;        /* runs of more than one job (plan_pack) */
} sweep_plan;

/* A config value as --set text: cJSON prints numbers as the shortest text that reads back. */
void foxctl_sweep_value_text(const cJSON *v, char *buf, size_t len);

/*
 * The values of array a as the comma list a member key takes in config_set
 * ("0.001,0.0003"): the wire carries one value a key. NULL when out of memory.
 */
cJSON *foxctl_sweep_list_text(const cJSON *a);

/*
 * The config values the run of job j sets: its own, and where it leads a
 * pack engine.members, with each member key whose values differ among the
 * pack's jobs as the list of them in member order (foxctl_sweep_list_text). train.seed stays one
 * value where the seeds run on from the lead's by one (member k takes
 * train.seed + k). A plan that packs sets engine.members on every run, so
 * that a run alone does not train the members a pack left on its daemon.
 * NULL when out of memory; the caller owns it.
 */
cJSON *foxctl_sweep_run_values(const sweep_plan *p, const sweep_job *j);

/* Whether the jobs of the pack led by j set key to different values (train.seed: seeds). */
int foxctl_sweep_pack_apart(const sweep_plan *p, const sweep_job *j, const char *key);

/* The JSON document of file path, or NULL with err set (the path and why). */
cJSON *foxctl_sweep_read_json(const char *path, char *err, size_t errlen);

/* doc written to path atomically, with a last newline. FOXCTL_OK or FOXCTL_EREPLY. */
int foxctl_sweep_write_json(const char *path, const cJSON *doc);

/* Write dir/jobs/<id>.json (or <id>.failed.json) atomically. FOXCTL_OK or FOXCTL_EREPLY. */
int foxctl_sweep_write_job(const sweep_plan *p, const sweep_job *j, cJSON *record, int failed);

#endif
