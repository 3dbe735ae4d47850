/*
 * trainer.h — the trainer thread of foxd (internal to daemon/): it owns the
 * engine (and so the GPU context), runs the walk-forward in chunks of steps,
 * applies mutating commands between chunks, and publishes a snapshot of its
 * state that any thread may copy without waiting on training.
 *
 * Threads: fox_trainer_start/stop and fox_trainer_submit are called from the
 * loop thread; the snapshot, ISV and flag readers from any thread. Completed
 * commands come back through the done callback (called on the trainer
 * thread; it must only enqueue and wake the loop, as an nng aio callback
 * does). Events go out through the events callback, also on the trainer
 * thread.
 *
 * States: starting → idle → training(fold, epoch) ⇄ paused → idle | halted;
 * halted → idle (stop or reset_fold) or training (run, start_fold); any
 * state → stopping on shutdown.
 *
 * What it does not do: sockets, JSON, authentication. The commands it
 * receives are already validated by proto/ and checked by the server; its
 * results and events are typed data (trainer_types.h) that render.c turns
 * into JSON.
 */
#ifndef FOX_DAEMON_TRAINER_H
#define FOX_DAEMON_TRAINER_H

#include <stddef.h>

#include "daemon/conf.h"
#include "daemon/trainer_types.h"
#include "gpu/engine.h"

typedef struct fox_trainer fox_trainer;

typedef struct fox_trainer_hooks {
    void (*done)(void *arg, fox_tcmd *c);           /* a command completed */
    void (*event)(void *arg, const fox_tevent *ev); /* an event to publish */
    void *arg;
} fox_trainer_hooks;

/*
 * Start the thread: it creates the engine for cfg and loads the data, then
 * waits for commands. Blocks until that start-up finished; on failure the
 * thread is gone, err says why and the return is its status.
 */
int fox_trainer_start(fox_trainer **out, const fox_config *cfg, const fox_dconf *d,
                      const fox_trainer_hooks *hooks, char *err, size_t errlen);

/*
 * Hand a command over (ownership passes; it comes back through hooks.done).
 * FOX_EBUSY when the queue is full, FOX_ESTATE once stopping: the caller
 * keeps the command then.
 */
int fox_trainer_submit(fox_trainer *t, fox_tcmd *c);

/* Join the thread (after a shutdown command completed) and free everything. */
void fox_trainer_destroy(fox_trainer *t);

/* Copy the snapshot; never waits on training. */
void fox_trainer_snapshot(fox_trainer *t, fox_snapshot *out);

/*
 * Copy member's ISV (n floats) or sentinel flags (n ints) from the engine's
 * mapped memory; returns how many were copied (the engine's size if
 * smaller). Without an engine or such a member the ISV reads NaN and the
 * flags 0: the caller checks the member against the population first.
 */
int fox_trainer_read_isv(fox_trainer *t, int member, float *out, int n);
int fox_trainer_read_flags(fox_trainer *t, int member, int *out, int n);

/* Queue length, for status. */
int fox_trainer_queued(fox_trainer *t);

#endif
