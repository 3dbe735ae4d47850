/*
 * trainer_types.h — what the trainer says, as data (internal to daemon/):
 * its states, the snapshot that `status` and `metrics` show, a command on
 * its way to the trainer and back with its typed result, and the events it
 * publishes. trainer.c fills them, render.c and record.c turn them into JSON
 * and files, answer.c and the server read them; none of those needs the
 * trainer thread itself, so they stand on this header instead of trainer.h.
 *
 * Plain data and two pure functions over it: any thread may call them.
 */
#ifndef FOX_DAEMON_TRAINER_TYPES_H
#define FOX_DAEMON_TRAINER_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "daemon/conf.h"
#include "gpu/engine.h"

typedef enum {
    FOX_TSTATE_STARTING = 0,
    FOX_TSTATE_IDLE,
    FOX_TSTATE_TRAINING,
    FOX_TSTATE_PAUSED,
    FOX_TSTATE_HALTED,
    FOX_TSTATE_STOPPING,
    FOX_TSTATE_COUNT
} fox_tstate;

const char *fox_tstate_name(int state);

#define FOX_RECENT_EPOCHS 64 /* epoch reports kept for `metrics` */
#define FOX_MAX_FOLDS     31
#define FOX_RECENT_OPS    16 /* long operations kept for `status` */

/* What `status` and `metrics` show: a copy made under the trainer's lock. */
typedef struct fox_snapshot {
    int state;
    int64_t as_of_ms;       /* monotonic time of publication */
    int64_t beat_ms;        /* trainer heartbeat (monotonic) */
    int64_t phase_until_ms; /* a declared long phase (create, load, checkpoint) ends by */
    char phase[32];         /* its name, "" when none */

    /* the run in progress (or the last one) */
    int64_t op_id;   /* of the run / start_fold, 0 when none */
    int run_mask;    /* folds of the run */
    int folds_left;  /* folds not yet finished */
    int fold, epoch; /* fold in progress (-1 none), epochs completed in it */
    int epochs, steps_per_epoch;
    int64_t step;        /* train steps in the fold */
    int64_t total_steps; /* since the engine was created */
    float loss, epsilon, grad_norm;
    double steps_per_sec; /* of the last chunk */
    int n_done;           /* fold reports of the run so far */
    fox_fold_report done[FOX_MAX_FOLDS];
    char halt_reason[512]; /* when halted */

    /* the engine */
    fox_engine_info info; /* info.backend points at a static string */
    /* each member of info.n_members: halted in the fold (0/1), sentinel flags set */
    int member_halted[FOX_MEMBERS_MAX], member_flags[FOX_MEMBERS_MAX];
    fox_config cfg;

    /* the last long operations (run, start_fold, checkpoint_save), newest last */
    int n_ops;
    struct fox_op_record {
        int64_t op_id;
        int cmd;
        int done;   /* 0 running, 1 finished */
        int status; /* when done */
        char message[160];
    } ops[FOX_RECENT_OPS];

    /* counters since start */
    int64_t epochs_total, folds_total, halts_total, checkpoints_total;
    int n_recent; /* recent epoch reports, oldest first */
    fox_epoch_report recent[FOX_RECENT_EPOCHS];
} fox_snapshot;

/*
 * What a command that succeeded says, as data: render.c turns it into the
 * reply's result. Which fields mean something depends on the command; every
 * success carries the trainer's state after it, except checkpoint_save,
 * which is answered before its work is done.
 */
typedef struct fox_tresult {
    int state;                               /* FOX_TSTATE_* after the command */
    int engine_recreated;                    /* config_set (the keys are the command's values) */
    int folds_mask, epochs, steps_per_epoch; /* run, start_fold: the plan accepted */
    uint64_t cleared;                        /* nan_flags: slots any member set before the clear */
    char params_digest[17];                  /* checkpoint_save/load: see params_digest */
    int checkpoint_saved;                    /* shutdown: the stop checkpoint is at path */
    int checkpoint_failed;                   /* shutdown: it was asked for and not saved */
    int checkpoint_kept; /* shutdown: not saved, as the engine holds no training and path exists */
    char checkpoint_error[1024];             /* shutdown: why not */
    char run_dir[FOX_PATH_MAX];              /* run, start_fold: the run directory */
    int fault_next_fold; /* inject_fault: `step` counts from the next fold's start, not now */
} fox_tresult;

/* A mutating command on its way to the trainer and back. */
typedef struct fox_tcmd {
    int cmd;                                       /* FOX_CMD_* */
    int folds_mask, fold, epochs, steps_per_epoch; /* run, start_fold (0 = config's) */
    int fresh;                                     /* run: start from a new engine */
    int force; /* config_set: recreate the engine even when it holds training */
    int clear;                                     /* nan_flags */
    int checkpoint;                                /* shutdown */
    char path[FOX_PATH_MAX]; /* checkpoint_save/load: absolute, resolved by the server */
    char fault_buffer[128];  /* inject_fault */
    char fault_kind[8];
    int fault_step;
    int fault_member; /* inject_fault: the member it arms; -1 every member */
    cJSON *values; /* config_set: owned */
    char data[FOX_PATH_MAX]; /* backtest: the bars ("" = the config's data) */
    int bars_from, bars_to;  /* backtest: 0 = the first / last bar with features */
    int val_from;            /* backtest: the first validation bar; 0 = the default */
    cJSON *backtest;         /* backtest: its result (owned) */

    /* filled by the trainer */
    int status;         /* FOX_OK or FOX_E* */
    char message[1024]; /* error text */
    fox_tresult result; /* when status is FOX_OK */
    int64_t op_id;      /* LONG commands: the op completing later by event */
    int exit_after;     /* shutdown: the loop should now stop serving */

    void *ctx; /* the server's pending reply (opaque here) */
    struct fox_tcmd *next;
} fox_tcmd;

/*
 * What the trainer tells subscribers, as data: render.c names each type and
 * turns the fields into the event's JSON. Pointers in an event live only
 * for the call of the events hook.
 */
typedef enum {
    FOX_TEVENT_STATE = 0, /* the state changed */
    FOX_TEVENT_OP_DONE,   /* a long operation finished */
    FOX_TEVENT_FOLD_BEGIN,
    FOX_TEVENT_STEP, /* progress within an epoch, throttled by daemon.step_event_ms */
    FOX_TEVENT_EPOCH_END,
    FOX_TEVENT_FOLD_END,
    FOX_TEVENT_HALT, /* the fold stopped: the stability system or an engine failure */
    FOX_TEVENT_COUNT
} fox_tevent_type;

typedef struct fox_tevent {
    int type; /* fox_tevent_type */
    union {
        struct {
            int state, prev, fold;
        } state;
        struct {
            int64_t op_id;
            int cmd, status;
            const char *message;
            const fox_fold_report *folds; /* a walk's folds done (run, start_fold) */
            int n_folds;
            const char *path;    /* checkpoint_save */
            const char *run_dir; /* run, start_fold: the run directory (NULL: none) */
        } op_done;
        struct {
            int fold, epochs, steps_per_epoch;
        } fold_begin;
        struct {
            int fold, epoch, epochs, step_in_epoch, steps_per_epoch;
            int64_t step;
            float loss;
            double steps_per_sec;
        } step;
        struct {
            const fox_epoch_report *report;
            int epochs; /* of the walk */
        } epoch_end;
        struct {
            const fox_fold_report *report;
        } fold_end;
        struct {
            int fold, epoch, status;
            const char *reason;
            const fox_halt_info *info;
        } halt;
    } u;
} fox_tevent;

/*
 * Whether member (a request's args.member) is one of a population of
 * `members`: FOX_OK, or FOX_EINVAL with msg naming the member and the range.
 */
int fox_member_check(int member, int members, char *msg, size_t len);

/* Whether the snapshot's heartbeat vouches for a live trainer now (watchdog, status). */
int fox_trainer_healthy(const fox_snapshot *s, int64_t now_ms, int64_t stale_ms);

#endif
