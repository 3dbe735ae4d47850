/*
 * trainer_impl.h — the trainer's state and the helpers that trainer.c (the
 * thread, its chunks and its walk sink) and apply.c (the commands applied
 * between chunks) both call. Nothing outside daemon/trainer.c and
 * daemon/apply.c includes it; everything here runs on the trainer thread
 * unless its comment says otherwise.
 */
#ifndef FOX_DAEMON_TRAINER_IMPL_H
#define FOX_DAEMON_TRAINER_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/record.h"
#include "daemon/trainer.h"
#include "daemon/walk.h"

struct fox_trainer {
    pthread_t thread;
    int joinable;

    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    fox_tcmd *qhead, *qtail;
    int qlen, qmax;
    int closed;  /* no more commands accepted */
    int started; /* start-up finished (start_rv valid) */
    int start_rv;
    char start_err[1024];

    pthread_mutex_t slock;
    fox_snapshot snap;
    fox_engine *engine; /* swapped under slock; used freely by the trainer */
    int own_table;      /* the engine's writes may take a private descriptor table (own_table_ok) */
    int64_t held_base;  /* training a checkpoint brought into the engine (held_steps) */
    int64_t held_from;  /* the engine's total_steps when it did */

    /* trainer-thread state */
    fox_config cfg;
    fox_dconf d;
    fox_trainer_hooks hooks;
    int state;
    int quit;
    fox_walk walk;
    fox_walk_sink sink;
    int walking;
    int run_cmd; /* FOX_CMD_RUN or FOX_CMD_START_FOLD */
    int64_t next_op;
    int64_t run_op;
    int chunk; /* steps in the next chunk (adapts to the speed) */
    fox_step_stats last;
    double rate;
    int64_t last_step_event_ms;
    char metrics_path[FOX_PATH_MAX + 32];
    fox_fold_report done_copy[FOX_MAX_FOLDS]; /* the folds an op_done event shows */
    fox_record *record;                       /* the run directory of the walk */
    char run_dir[FOX_PATH_MAX];               /* its path, for the op_done event */
};

/* Hand a finished command back through the done hook. */
void fox__trainer_complete(fox_trainer *t, fox_tcmd *c);

/* Fail c with status and a formatted message; returns status. */
int fox__trainer_refuse(fox_tcmd *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Name the long phase the trainer is in (NULL: none), for the watchdog. */
void fox__trainer_set_phase(fox_trainer *t, const char *name);

/* Copy the trainer's view into the snapshot. */
void fox__trainer_publish(fox_trainer *t);

/* Change state, publish it and emit the state event. */
void fox__trainer_set_state(fox_trainer *t, int state);

/* A long operation starts; returns its op id. */
int64_t fox__trainer_op_begin(fox_trainer *t, int cmd);

/* A long operation finished: record it and emit its op_done event, ev. */
void fox__trainer_op_done(fox_trainer *t, fox_tevent *ev, int64_t op, int cmd, int status,
                          const char *msg);

/* The walk ended (done, stopped or halted): complete its op. */
void fox__trainer_end_walk(fox_trainer *t, int status, const char *msg);

/* Create an engine for cfg and load its data; err gets the reason of a failure. */
int fox__trainer_make_engine(fox_trainer *t, const fox_config *cfg, fox_engine **out, char *err,
                             size_t errlen);

/* Steps of training the engine e holds (0: what its configuration alone defines). */
int64_t fox__trainer_held_steps(const fox_trainer *t, const fox_engine *e);

/* The engine e has just loaded a checkpoint: what it holds is that checkpoint's training. */
void fox__trainer_note_loaded(fox_trainer *t, const fox_engine *e);

/* Put e, made for cfg, in the place of the engine, which is destroyed. */
void fox__trainer_install_engine(fox_trainer *t, const fox_config *cfg, fox_engine *e);

/* Apply one command (apply.c); LONG ones may keep working after completing c. */
void fox__trainer_apply(fox_trainer *t, fox_tcmd *c);

#endif
