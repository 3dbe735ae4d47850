/*
 * walk.h — the walk-forward driver shared by `foxd --once` and the trainer
 * thread (internal to daemon/): it begins each selected fold, runs its
 * epochs in chunks of steps and closes epochs and folds, reporting through
 * callbacks (render.c turns the reports into JSON).
 *
 * One advance call does a bounded piece of work (begin a fold, or run at
 * most `chunk` steps and close what they complete), so the caller can look
 * at commands and signals between calls. What it does not do: threads,
 * locks, sockets, printing. It runs on the engine's owning thread.
 */
#ifndef FOX_DAEMON_WALK_H
#define FOX_DAEMON_WALK_H

#include "gpu/engine.h"

typedef struct fox_walk_sink {
    void (*fold_begin)(void *arg, int fold);
    void (*chunk_done)(void *arg, const fox_step_stats *st);
    void (*epoch_end)(void *arg, const fox_epoch_report *rep);
    void (*fold_end)(void *arg, const fox_fold_report *rep);
    void *arg;
} fox_walk_sink;

typedef struct fox_walk {
    int folds_mask; /* folds still to run, bit k = fold k */
    int epochs, steps_per_epoch;
    int fold;  /* fold in progress, -1 between folds */
    int epoch; /* epochs completed in the fold */
    int step_in_epoch;
    int done; /* every selected fold closed */
    int stop_on_halt; /* train.stop_on_halt: a halt ends the walk (0 after init: go on) */
    int halted;       /* folds closed by a halt so far */
} fox_walk;

/* Plan a walk over folds_mask (validated against n_folds by fox_walk_check). */
void fox_walk_init(fox_walk *w, int folds_mask, int epochs, int steps_per_epoch);

/* Refuse a plan the engine cannot run (fold beyond n_folds, empty mask, ...). */
int fox_walk_check(int folds_mask, int epochs, int steps_per_epoch, int n_folds, char *err,
                   size_t errlen);

/*
 * Do the next piece of work: begin the next fold when between folds, or run
 * up to chunk steps of the current epoch and close the epoch (and the fold)
 * they complete. Returns FOX_OK (w->done once the last fold closed) or the
 * engine's status (fox_engine_errmsg says why; FOX_EHALT for a halt).
 *
 * A halt closes its fold unless w->stop_on_halt: the sink's fold_end gets
 * the report of the epochs it finished, marked halted, w->halted counts it
 * and w->fold is -1, so that the next call begins the next fold (whose
 * begin_fold resets the stability state). FOX_EHALT is still returned, for
 * the caller to say so. With stop_on_halt the fold stays open and halted,
 * as any other failure leaves it.
 */
int fox_walk_advance(fox_walk *w, fox_engine *e, int chunk, const fox_walk_sink *sink);

#endif
