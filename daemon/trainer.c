/*
 * trainer.c — the trainer thread: engine owner, snapshot publisher, walker
 * in chunks; the commands it applies between chunks are apply.c's. See
 * trainer.h for the contract.
 *
 * Locks: qlock guards the command queue; slock guards the snapshot and the
 * engine pointer as seen by other threads (the ISV/flag readers). The
 * trainer holds slock only to copy a few kilobytes or to swap engines, never
 * across an engine call that trains, so readers never wait on training.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "daemon/cpus.h"
#include "daemon/fdreserve.h"
#include "daemon/record.h"
#include "daemon/render.h"
#include "daemon/trainer_impl.h"
#include "daemon/walk.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "proto/proto.h"

/* A long phase (engine creation, data load, checkpoint) may take this long before the watchdog
 * stops vouching. */
#define PHASE_MS     600000
#define IDLE_WAIT_MS 1000 /* idle/paused: the heartbeat still beats this often */

/* ---------------------------------------------------------------- helpers */

static void
emit(fox_trainer *t, const fox_tevent *ev)
{
    if (t->hooks.event)
        t->hooks.event(t->hooks.arg, ev);
}

void
fox__trainer_complete(fox_trainer *t, fox_tcmd *c)
{
    t->hooks.done(t->hooks.arg, c);
}

int
fox__trainer_refuse(fox_tcmd *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->message, sizeof c->message, fmt, ap);
    va_end(ap);
    c->status = status;
    return status;
}

void
fox__trainer_set_phase(fox_trainer *t, const char *name)
{
    pthread_mutex_lock(&t->slock);
    snprintf(t->snap.phase, sizeof t->snap.phase, "%s", name ? name : "");
    t->snap.phase_until_ms = name ? fox_mono_ms() + PHASE_MS : 0;
    t->snap.beat_ms = fox_mono_ms();
    pthread_mutex_unlock(&t->slock);
}

/* Copy the trainer's view into the snapshot. */
void
fox__trainer_publish(fox_trainer *t)
{
    fox_engine_info info;
    fox_engine_get_info(t->engine, &info);
    pthread_mutex_lock(&t->slock);
    fox_snapshot *s = &t->snap;
    int64_t now = fox_mono_ms();
    s->as_of_ms = now;
    s->beat_ms = now;
    s->state = t->state;
    s->info = info;
    s->cfg = t->cfg;
    s->fold = t->walking ? t->walk.fold : info.fold;
    s->epoch = info.epoch;
    s->step = info.step;
    s->total_steps = info.total_steps;
    s->folds_left = t->walking ? t->walk.folds_mask : 0;
    s->loss = t->last.loss;
    s->epsilon = t->last.epsilon;
    s->grad_norm = t->last.grad_norm;
    s->steps_per_sec = t->rate;
    for (int k = 0; k < info.n_members; k++) {
        fox_halt_info hi;
        const volatile int *flags = fox_engine_member_flags(t->engine, k);
        fox_engine_member_halt_info(t->engine, k, &hi);
        s->member_halted[k] = hi.reason != FOX_HALT_NONE;
        s->member_flags[k] = flags ? __builtin_popcountll(fox_sentinel_mask(flags)) : 0;
    }
    pthread_mutex_unlock(&t->slock);
}

void
fox__trainer_set_state(fox_trainer *t, int state)
{
    if (state == t->state)
        return;
    int prev = t->state;
    t->state = state;
    fox__trainer_publish(t);
    fox_tevent ev = {.type = FOX_TEVENT_STATE};
    ev.u.state.state = state;
    ev.u.state.prev = prev;
    ev.u.state.fold = t->walking ? t->walk.fold : -1;
    emit(t, &ev);
    fox_log(FOX_LOG_INFO, "state %s -> %s", fox_tstate_name(prev), fox_tstate_name(state));
}

/* Keep an epoch or fold report in state_dir/metrics.jsonl, one JSON object per line. */
static void
metrics_line(fox_trainer *t, const fox_tevent *ev)
{
    char err[256];
    char *s = fox_render_metrics_line(ev, t->run_op, fox_wall_ms());
    if (s && fox_append_line(t->metrics_path, s, err, sizeof err) != FOX_OK)
        fox_log(FOX_LOG_WARNING, "metrics: %s", err);
    free(s);
}

/*
 * What a chunk (an ISV sample, now and then), an epoch's end, a fold's end
 * or the walk's end leaves on disk: metrics.jsonl's line and the run
 * directory's records, written from the descriptor reserve (fdreserve.h)
 * so that a connection flood cannot cost one. st is the chunk's stats and
 * ev NULL for a chunk; part is the fold a walk's end cut short, or NULL.
 */
typedef struct records_job {
    fox_trainer *t;
    const fox_step_stats *st;
    const fox_tevent *ev;
    const fox_fold_report *part;
} records_job;

static int
run_records_job(void *arg)
{
    records_job *j = arg;
    fox_trainer *t = j->t;
    if (!j->ev) {
        fox_record_chunk(t->record, t->engine, j->st);
        return FOX_OK;
    }
    switch (j->ev->type) {
    case FOX_TEVENT_EPOCH_END:
        metrics_line(t, j->ev);
        fox_record_epoch(t->record, t->engine, j->ev->u.epoch_end.report, t->run_op);
        break;
    case FOX_TEVENT_FOLD_END:
        metrics_line(t, j->ev);
        fox_record_fold(t->record, t->engine, j->ev->u.fold_end.report, t->run_op);
        break;
    default:
        fox_record_close(t->record, t->engine, j->part);
    }
    return FOX_OK;
}

/*
 * Whether the reserve's writes may run on a thread with a descriptor table
 * of its own (fox_fd_reserve_run): they read the engine, and under the CUDA
 * backend that calls into the driver, whose descriptors must stay in the
 * process's one table. There the writes keep the reserve given back around
 * them on the trainer thread.
 */
static int
own_table_ok(fox_engine *e)
{
    fox_engine_info info;
    if (!e)
        return 0;
    fox_engine_get_info(e, &info);
    return info.backend && strcmp(info.backend, "cpu") == 0;
}

static void
write_records(fox_trainer *t, const fox_step_stats *st, const fox_tevent *ev,
              const fox_fold_report *part)
{
    records_job j = {t, st, ev, part};
    fox_fd_reserve_run(run_records_job, &j, t->own_table);
}

/* A long operation starts: status lists it until FOX_RECENT_OPS newer ones pushed it out. */
int64_t
fox__trainer_op_begin(fox_trainer *t, int cmd)
{
    int64_t op = ++t->next_op;
    pthread_mutex_lock(&t->slock);
    fox_snapshot *s = &t->snap;
    if (s->n_ops == FOX_RECENT_OPS) {
        memmove(s->ops, s->ops + 1, (FOX_RECENT_OPS - 1) * sizeof s->ops[0]);
        s->n_ops--;
    }
    memset(&s->ops[s->n_ops], 0, sizeof s->ops[0]);
    s->ops[s->n_ops].op_id = op;
    s->ops[s->n_ops].cmd = cmd;
    s->n_ops++;
    pthread_mutex_unlock(&t->slock);
    return op;
}

/*
 * An op finished: the op_done event is its completion (LONG commands), status
 * keeps a record. ev carries what the op's result shows (its folds or path).
 */
void
fox__trainer_op_done(fox_trainer *t, fox_tevent *ev, int64_t op, int cmd, int status,
                     const char *msg)
{
    pthread_mutex_lock(&t->slock);
    for (int i = 0; i < t->snap.n_ops; i++) {
        if (t->snap.ops[i].op_id != op)
            continue;
        t->snap.ops[i].done = 1;
        t->snap.ops[i].status = status;
        snprintf(t->snap.ops[i].message, sizeof t->snap.ops[i].message, "%s", msg ? msg : "");
    }
    pthread_mutex_unlock(&t->slock);
    ev->type = FOX_TEVENT_OP_DONE;
    ev->u.op_done.op_id = op;
    ev->u.op_done.cmd = cmd;
    ev->u.op_done.status = status;
    ev->u.op_done.message = msg;
    emit(t, ev);
}

/* The walk ended (done, stopped or halted): complete its op. Called after the
 * state change, so that a client seeing op_done finds status agreeing. */
void
fox__trainer_end_walk(fox_trainer *t, int status, const char *msg)
{
    if (!t->walking)
        return;
    t->walking = 0;
    fox_tevent ev = {0};
    pthread_mutex_lock(&t->slock);
    ev.u.op_done.n_folds = t->snap.n_done;
    memcpy(t->done_copy, t->snap.done, (size_t)t->snap.n_done * sizeof t->done_copy[0]);
    pthread_mutex_unlock(&t->slock);
    ev.u.op_done.folds = t->done_copy;
    /* A fold cut short keeps its finished epochs in the record's summary. */
    fox_fold_report part;
    int cut_short = status != FOX_OK && t->walk.fold >= 0 &&
                    fox_engine_fold_report(t->engine, &part) == FOX_OK && part.epochs_done > 0;
    fox__trainer_set_phase(t, "record");
    write_records(t, NULL, &ev, cut_short ? &part : NULL);
    fox__trainer_set_phase(t, NULL);
    t->record = NULL;
    fox_log(FOX_LOG_INFO, "op %lld: run directory %s", (long long)t->run_op, t->run_dir);
    ev.u.op_done.run_dir = t->run_dir;
    fox__trainer_op_done(t, &ev, t->run_op, t->run_cmd, status, msg);
}

/* ------------------------------------------------------------ walk sink */

static void
on_fold_begin(void *arg, int fold)
{
    fox_trainer *t = arg;
    fox_tevent ev = {.type = FOX_TEVENT_FOLD_BEGIN};
    ev.u.fold_begin.fold = fold;
    ev.u.fold_begin.epochs = t->walk.epochs;
    ev.u.fold_begin.steps_per_epoch = t->walk.steps_per_epoch;
    emit(t, &ev);
    fox_log(FOX_LOG_INFO, "op %lld: fold %d begins", (long long)t->run_op, fold);
}

static void
on_chunk(void *arg, const fox_step_stats *st)
{
    fox_trainer *t = arg;
    t->last = *st;
    if (t->record)
        write_records(t, st, NULL, NULL);
}

static void
on_epoch_end(void *arg, const fox_epoch_report *r)
{
    fox_trainer *t = arg;
    pthread_mutex_lock(&t->slock);
    fox_snapshot *s = &t->snap;
    if (s->n_recent == FOX_RECENT_EPOCHS) {
        memmove(s->recent, s->recent + 1, (FOX_RECENT_EPOCHS - 1) * sizeof s->recent[0]);
        s->n_recent--;
    }
    s->recent[s->n_recent++] = *r;
    s->epochs_total++;
    pthread_mutex_unlock(&t->slock);

    fox_tevent ev = {.type = FOX_TEVENT_EPOCH_END};
    ev.u.epoch_end.report = r;
    ev.u.epoch_end.epochs = t->walk.epochs;
    write_records(t, NULL, &ev, NULL);
    emit(t, &ev);
    fox_log(FOX_LOG_INFO,
            "fold %d epoch %d/%d: loss %.4g val Sharpe %.3f test Sharpe %.3f %.0f steps/s", r->fold,
            r->epoch + 1, t->walk.epochs, r->mean_loss, r->val.sharpe, r->test.sharpe,
            r->steps_per_sec);
}

static void
on_fold_end(void *arg, const fox_fold_report *r)
{
    fox_trainer *t = arg;
    pthread_mutex_lock(&t->slock);
    if (t->snap.n_done < FOX_MAX_FOLDS)
        t->snap.done[t->snap.n_done++] = *r;
    t->snap.folds_total++;
    pthread_mutex_unlock(&t->slock);
    fox_tevent ev = {.type = FOX_TEVENT_FOLD_END};
    ev.u.fold_end.report = r;
    write_records(t, NULL, &ev, NULL);
    emit(t, &ev);
}

/* ------------------------------------------------------------- the engine */

int
fox__trainer_make_engine(fox_trainer *t, const fox_config *cfg, fox_engine **out, char *err,
                         size_t errlen)
{
    fox_engine *e = NULL;
    int rv;
    fox__trainer_set_phase(t, "create");
    err[0] = 0;
    if ((rv = fox_engine_create(&e, cfg, err, errlen)) != FOX_OK) {
        if (!err[0])
            snprintf(err, errlen, "%s", fox_strerror(rv));
    } else if ((rv = fox_engine_load_data(e)) != FOX_OK) {
        snprintf(err, errlen, "%s", fox_engine_errmsg(e));
        fox_engine_destroy(e);
        e = NULL;
    }
    fox__trainer_set_phase(t, NULL);
    *out = e;
    return rv;
}

/*
 * Steps of training the engine holds: those the checkpoint it last loaded
 * brought (a resume, checkpoint_load) and those it ran since. 0 for an
 * engine as its configuration alone defines it, which a new engine
 * reproduces from the seed, so replacing it loses nothing.
 */
int64_t
fox__trainer_held_steps(const fox_trainer *t, const fox_engine *e)
{
    fox_engine_info info;
    fox_engine_get_info(e, &info);
    return t->held_base + info.total_steps - t->held_from;
}

/* The engine has just loaded a checkpoint: what it holds is that checkpoint's training. */
void
fox__trainer_note_loaded(fox_trainer *t, const fox_engine *e)
{
    fox_engine_info info;
    fox_engine_get_info(e, &info);
    t->held_base = info.step;
    t->held_from = info.total_steps;
}

/* Put e, made for cfg, in the place of the engine, which is destroyed. */
void
fox__trainer_install_engine(fox_trainer *t, const fox_config *cfg, fox_engine *e)
{
    pthread_mutex_lock(&t->slock);
    fox_engine *old = t->engine;
    t->engine = e;
    pthread_mutex_unlock(&t->slock);
    /* Once per engine: asking the backend costs a device synchronization on CUDA. */
    t->own_table = own_table_ok(e);
    fox_engine_destroy(old);
    t->held_base = t->held_from = 0;
    t->cfg = *cfg;
    fox__trainer_publish(t);
}

/* ----------------------------------------------------------------- chunks */

/*
 * The fold stopped: a halt of the stability system (FOX_EHALT) or an engine
 * failure. Counted, logged and published as a halt event; reason gets its
 * text. The walk may already have closed the fold and gone on (fox_walk_advance).
 */
static void
announce_halt(fox_trainer *t, int rv, char *reason, size_t len)
{
    const char *why = fox_engine_errmsg(t->engine);
    fox_halt_info hi;
    snprintf(reason, len, "%s", why && why[0] ? why : fox_strerror(rv));
    fox_engine_halt_info(t->engine, &hi);
    int fold = rv == FOX_EHALT ? hi.fold : t->walk.fold;
    pthread_mutex_lock(&t->slock);
    snprintf(t->snap.halt_reason, sizeof t->snap.halt_reason, "%s", reason);
    t->snap.halts_total++;
    pthread_mutex_unlock(&t->slock);
    fox_log(rv == FOX_EHALT ? FOX_LOG_WARNING : FOX_LOG_ERR, "fold %d halted: %s", fold, reason);
    fox_tevent ev = {.type = FOX_TEVENT_HALT};
    ev.u.halt.fold = fold;
    ev.u.halt.epoch = t->walk.epoch; /* epochs the fold closed (kept when the walk closes it) */
    ev.u.halt.status = rv;
    ev.u.halt.reason = reason;
    ev.u.halt.info = &hi;
    emit(t, &ev);
}

/* The walk stops at a halted or failed fold. */
static void
halt(fox_trainer *t, int rv)
{
    char reason[512];
    announce_halt(t, rv, reason, sizeof reason);
    fox__trainer_set_state(t, FOX_TSTATE_HALTED);
    fox__trainer_end_walk(t, rv, reason);
}

static void
run_chunk(fox_trainer *t)
{
    int64_t t0 = fox_mono_ms();
    int in_fold = t->walk.fold >= 0;
    int64_t step0 = t->last.step, epochs0 = t->walk.epoch;
    int rv = fox_walk_advance(&t->walk, t->engine, t->chunk, &t->sink);
    int64_t dt = fox_mono_ms() - t0;
    if (rv == FOX_EHALT && t->walk.fold < 0) {
        /* The walk closed the halted fold and goes on to the next (train.stop_on_halt=0). */
        char reason[512];
        announce_halt(t, rv, reason, sizeof reason);
        in_fold = 0;
    } else if (rv != FOX_OK) {
        halt(t, rv);
        return;
    }
    /* Size the next chunk to about chunk_ms, so that a command waits no longer than that
     * whatever the speed; a chunk that also closed an epoch (evaluation) says nothing of it. */
    if (in_fold && t->walk.epoch == epochs0 && t->walk.fold >= 0) {
        double n = (double)(t->last.step - step0);
        t->rate = n / (dt > 0 ? dt / 1000.0 : 1e-3);
        int want = (int)(t->rate * t->d.chunk_ms / 1000.0);
        t->chunk = want < 1 ? 1 : want > t->d.chunk_steps ? t->d.chunk_steps : want;
    }
    fox__trainer_publish(t);
    int64_t now = fox_mono_ms();
    if (t->d.step_event_ms >= 0 && now - t->last_step_event_ms >= t->d.step_event_ms) {
        t->last_step_event_ms = now;
        fox_tevent ev = {.type = FOX_TEVENT_STEP};
        ev.u.step.fold = t->walk.fold;
        ev.u.step.epoch = t->walk.epoch;
        ev.u.step.epochs = t->walk.epochs;
        ev.u.step.step_in_epoch = t->walk.step_in_epoch;
        ev.u.step.steps_per_epoch = t->walk.steps_per_epoch;
        ev.u.step.step = t->last.step;
        ev.u.step.loss = t->last.loss;
        ev.u.step.steps_per_sec = t->rate;
        emit(t, &ev);
    }
    if (t->walk.done) {
        fox__trainer_set_state(t, FOX_TSTATE_IDLE);
        if (t->walk.halted > 0) {
            /* The run's op reports the halts: foxctl run exits with its halted status. */
            char msg[96];
            snprintf(msg, sizeof msg, "%d of the run's folds halted (their fold objects say how)",
                     t->walk.halted);
            fox__trainer_end_walk(t, FOX_EHALT, msg);
        } else {
            fox__trainer_end_walk(t, FOX_OK, NULL);
        }
    }
}

/* ----------------------------------------------------------------- thread */

static fox_tcmd *
pop(fox_trainer *t)
{
    pthread_mutex_lock(&t->qlock);
    fox_tcmd *c = t->qhead;
    if (c) {
        t->qhead = c->next;
        if (!t->qhead)
            t->qtail = NULL;
        t->qlen--;
        c->next = NULL;
    }
    pthread_mutex_unlock(&t->qlock);
    return c;
}

static void
wait_for_work(fox_trainer *t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += IDLE_WAIT_MS / 1000;
    pthread_mutex_lock(&t->qlock);
    while (!t->qhead && !t->quit) {
        if (pthread_cond_timedwait(&t->qcond, &t->qlock, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&t->qlock);
    /* Idle and paused are healthy: keep the heartbeat fresh for the watchdog. */
    pthread_mutex_lock(&t->slock);
    t->snap.beat_ms = fox_mono_ms();
    pthread_mutex_unlock(&t->slock);
}

/*
 * Resume from the checkpoint a stop left (SIGTERM saves state_dir/foxd.ckpt):
 * weights, Adam state, ISV and the fold position come back, the state stays
 * idle. A missing file is a fresh start. One that cannot be loaded (corrupt,
 * or made for another model layout) is an error that stops the start: a
 * silent fresh start would throw the run's training away unnoticed.
 */
static int
resume(fox_trainer *t, fox_engine *e, char *err, size_t errlen)
{
    char path[FOX_PATH_MAX + 16];
    if (!t->d.resume)
        return FOX_OK;
    snprintf(path, sizeof path, "%s/foxd.ckpt", t->d.state_dir);
    if (access(path, F_OK) != 0)
        return FOX_OK;
    int rv = fox_engine_checkpoint_load(e, path);
    if (rv != FOX_OK)
        return fox_errf(err, errlen, rv,
                        "cannot resume: %s. Start with the configuration that wrote it, move "
                        "the file away, or set daemon.resume=false to start fresh",
                        fox_engine_errmsg(e));
    fox_engine_info info;
    fox_engine_get_info(e, &info);
    fox__trainer_note_loaded(t, e);
    fox_log(FOX_LOG_NOTICE, "resumed from %s: fold %d, %d epochs done, step %lld", path, info.fold,
            info.epoch, (long long)info.step);
    return FOX_OK;
}

static void *
trainer_main(void *arg)
{
    fox_trainer *t = arg;
    fox_engine *e = NULL;
    char err[1024];
    /* Before the engine exists: the threads it starts (BLAS, CUDA) inherit the training CPUs. */
    fox_cpus_leave_control();
    int rv = fox__trainer_make_engine(t, &t->cfg, &e, err, sizeof err);
    if (rv == FOX_OK && (rv = resume(t, e, err, sizeof err)) != FOX_OK) {
        fox_engine_destroy(e);
        e = NULL;
    }

    pthread_mutex_lock(&t->slock);
    t->engine = e;
    pthread_mutex_unlock(&t->slock);
    t->own_table = own_table_ok(e);
    if (rv == FOX_OK) {
        t->state = FOX_TSTATE_IDLE;
        fox__trainer_publish(t);
    }
    pthread_mutex_lock(&t->qlock);
    t->started = 1;
    t->start_rv = rv;
    snprintf(t->start_err, sizeof t->start_err, "%s", err);
    pthread_cond_broadcast(&t->qcond);
    pthread_mutex_unlock(&t->qlock);
    if (rv != FOX_OK)
        return NULL;

    while (!t->quit) {
        fox_tcmd *c;
        while (!t->quit && (c = pop(t)))
            fox__trainer_apply(t, c);
        if (t->quit)
            break;
        if (t->state == FOX_TSTATE_TRAINING)
            run_chunk(t);
        else
            wait_for_work(t);
    }

    /* Whatever is still queued will never run: say so. */
    fox_tcmd *c;
    while ((c = pop(t))) {
        fox__trainer_refuse(c, FOX_ESTATE, "foxd is shutting down");
        fox__trainer_complete(t, c);
    }
    pthread_mutex_lock(&t->slock);
    e = t->engine; /* config_set may have replaced the first one */
    t->engine = NULL;
    pthread_mutex_unlock(&t->slock);
    fox_engine_destroy(e);
    return NULL;
}

int
fox_trainer_start(fox_trainer **out, const fox_config *cfg, const fox_dconf *d,
                  const fox_trainer_hooks *hooks, char *err, size_t errlen)
{
    fox_trainer *t = calloc(1, sizeof *t);
    *out = NULL;
    if (!t)
        return fox_errf(err, errlen, FOX_ENOMEM, "out of memory");
    pthread_mutex_init(&t->qlock, NULL);
    pthread_mutex_init(&t->slock, NULL);
    pthread_cond_init(&t->qcond, NULL);
    memcpy(&t->cfg, cfg, sizeof t->cfg);
    t->d = *d;
    t->hooks = *hooks;
    t->qmax = d->queue_depth;
    t->state = FOX_TSTATE_STARTING;
    t->chunk = 1; /* the first chunk measures the speed */
    t->sink = (fox_walk_sink){on_fold_begin, on_chunk, on_epoch_end, on_fold_end, t};
    t->snap.fold = -1;
    t->snap.cfg = *cfg;
    snprintf(t->metrics_path, sizeof t->metrics_path, "%s/metrics.jsonl", d->state_dir);

    if (pthread_create(&t->thread, NULL, trainer_main, t) != 0) {
        fox_trainer_destroy(t);
        return fox_errf(err, errlen, FOX_EINTERNAL, "cannot start the trainer thread");
    }
    t->joinable = 1;
    pthread_mutex_lock(&t->qlock);
    while (!t->started)
        pthread_cond_wait(&t->qcond, &t->qlock);
    pthread_mutex_unlock(&t->qlock);
    if (t->start_rv != FOX_OK) {
        int rv = t->start_rv;
        fox_errf(err, errlen, rv, "%s", t->start_err);
        fox_trainer_destroy(t);
        return rv;
    }
    *out = t;
    return FOX_OK;
}

int
fox_trainer_submit(fox_trainer *t, fox_tcmd *c)
{
    int rv = FOX_OK;
    pthread_mutex_lock(&t->qlock);
    if (t->closed)
        rv = FOX_ESTATE;
    else if (t->qlen >= t->qmax && c->cmd != FOX_CMD_SHUTDOWN) /* a stop must always get in */
        rv = FOX_EBUSY;
    if (rv == FOX_OK) {
        c->next = NULL;
        if (t->qtail)
            t->qtail->next = c;
        else
            t->qhead = c;
        t->qtail = c;
        t->qlen++;
        pthread_cond_signal(&t->qcond);
    }
    pthread_mutex_unlock(&t->qlock);
    return rv;
}

void
fox_trainer_destroy(fox_trainer *t)
{
    if (!t)
        return;
    if (t->joinable)
        pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->qlock);
    pthread_mutex_destroy(&t->slock);
    pthread_cond_destroy(&t->qcond);
    free(t);
}

void
fox_trainer_snapshot(fox_trainer *t, fox_snapshot *out)
{
    pthread_mutex_lock(&t->slock);
    memcpy(out, &t->snap, sizeof *out);
    pthread_mutex_unlock(&t->slock);
}

int
fox_trainer_read_isv(fox_trainer *t, int member, float *out, int n)
{
    if (n > FOX_ISV_TOTAL_DIM)
        n = FOX_ISV_TOTAL_DIM;
    pthread_mutex_lock(&t->slock);
    const volatile float *isv = t->engine ? fox_engine_member_isv(t->engine, member) : NULL;
    for (int i = 0; i < n; i++)
        out[i] = isv ? isv[i] : NAN;
    pthread_mutex_unlock(&t->slock);
    return n;
}

int
fox_trainer_read_flags(fox_trainer *t, int member, int *out, int n)
{
    if (n > FOX_SENTINEL_SLOTS)
        n = FOX_SENTINEL_SLOTS;
    pthread_mutex_lock(&t->slock);
    const volatile int *f = t->engine ? fox_engine_member_flags(t->engine, member) : NULL;
    for (int i = 0; i < n; i++)
        out[i] = f ? f[i] : 0;
    pthread_mutex_unlock(&t->slock);
    return n;
}

int
fox_trainer_queued(fox_trainer *t)
{
    pthread_mutex_lock(&t->qlock);
    int n = t->qlen;
    pthread_mutex_unlock(&t->qlock);
    return n;
}
