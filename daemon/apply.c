/*
 * apply.c — the trainer's commands: what each mutating request does to the
 * engine and the walk, applied on the trainer thread between chunks, and the
 * typed result it fills. The thread, its queue, its chunks and the walk's
 * sink are trainer.c's; the state both share is trainer_impl.h's.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "daemon/fdreserve.h"
#include "daemon/trainer_impl.h"
#include "gpu/sentinel.h"
#include "proto/proto.h"

static int
wrong_state(fox_trainer *t, fox_tcmd *c)
{
    return fox__trainer_refuse(c, FOX_ESTATE, "%s is not allowed while %s", fox_cmd_name(c->cmd),
                               fox_tstate_name(t->state));
}

/* Replace the engine by one for cfg; on failure the old one stays. */
static int
replace_engine(fox_trainer *t, const fox_config *cfg, fox_tcmd *c)
{
    fox_engine *e;
    int rv = fox__trainer_make_engine(t, cfg, &e, c->message, sizeof c->message);
    if (rv != FOX_OK)
        return c->status = rv;
    fox__trainer_install_engine(t, cfg, e);
    return FOX_OK;
}

/* Keys the trainer reads itself: changing them needs no new engine. */
static int
needs_new_engine(const fox_config *a, const fox_config *b)
{
    fox_config x;
    memcpy(&x, b, sizeof x);
    x.epochs = a->epochs;
    x.steps_per_epoch = a->steps_per_epoch;
    x.folds_mask = a->folds_mask;
    return memcmp(&x, a, sizeof x) != 0;
}

/*
 * A config_set that would replace an engine holding training is refused
 * unless forced: the new engine starts from the seed, and the training is
 * gone for good once a stop checkpoint or a run follows. The refusal names
 * each key of the request that recreates the engine on its own.
 */
static int
refuse_discard(fox_trainer *t, fox_tcmd *c, int64_t held)
{
    char keys[512] = "";
    size_t n = 0;
    int count = 0;
    for (const cJSON *it = c->values->child; it && n < sizeof keys; it = it->next) {
        fox_config one = t->cfg;
        char msg[256];
        if (fox_conf_set_json(&one, NULL, it->string, it, msg, sizeof msg) == FOX_OK &&
            needs_new_engine(&t->cfg, &one))
            n += (size_t)snprintf(keys + n, sizeof keys - n, "%s%s", count++ ? ", " : "",
                                  it->string);
    }
    return fox__trainer_refuse(
        c, FOX_ESTATE,
        "config_set %s: %s the engine, which would discard its %lld train steps; "
        "save a checkpoint first if they matter, then send it again with force "
        "(foxctl config set --force)",
        keys, count > 1 ? "these keys recreate" : "this key recreates", (long long)held);
}

/*
 * The parameters' digest (fox_engine_params_digest), as hex: what
 * checkpoint_save wrote and checkpoint_load restored can be compared from
 * outside. "" when unavailable.
 */
static void
params_digest(fox_engine *e, char out[17])
{
    uint64_t h;
    out[0] = 0;
    if (fox_engine_params_digest(e, 0, &h) == FOX_OK)
        snprintf(out, 17, "%016llx", (unsigned long long)h);
}

typedef struct ckpt_job {
    fox_engine *engine;
    const char *path;
} ckpt_job;

static int
write_checkpoint(void *arg)
{
    ckpt_job *j = arg;
    return fox_engine_checkpoint_save(j->engine, j->path);
}

static int
save_checkpoint(fox_trainer *t, const char *path, char *msg, size_t len)
{
    /* A client may name a subdirectory of the state directory: make it. */
    char dir[FOX_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (fox_mkdir_p(dir, 0750, msg, len) != FOX_OK)
            return FOX_EIO;
    }
    fox__trainer_set_phase(t, "checkpoint");
    /* A connection flood may hold every other descriptor: write from the reserve. */
    ckpt_job j = {t->engine, path};
    int rv = fox_fd_reserve_run(write_checkpoint, &j, t->own_table);
    fox__trainer_set_phase(t, NULL);
    if (rv != FOX_OK) {
        snprintf(msg, len, "%s", fox_engine_errmsg(t->engine));
        fox_log(FOX_LOG_ERR, "checkpoint %s: %s", path, msg);
        return rv;
    }
    pthread_mutex_lock(&t->slock);
    t->snap.checkpoints_total++;
    pthread_mutex_unlock(&t->slock);
    fox_log(FOX_LOG_INFO, "checkpoint saved to %s", path);
    return FOX_OK;
}

/* -------------------------------------------------------------- commands */

static int
apply_config_set(fox_trainer *t, fox_tcmd *c)
{
    fox_config cfg;
    if (t->state != FOX_TSTATE_IDLE)
        return wrong_state(t, c);
    memcpy(&cfg, &t->cfg, sizeof cfg);
    for (const cJSON *it = c->values->child; it; it = it->next) {
        int rv = fox_conf_set_json(&cfg, NULL, it->string, it, c->message, sizeof c->message);
        if (rv != FOX_OK)
            return c->status = rv;
    }
    if (cfg.fault_kind != FOX_FAULT_NONE && !cfg.debug_enable)
        return fox__trainer_refuse(c, FOX_EPERM, "fault injection needs debug.enable");
    if (fox_config_validate(&cfg, c->message, sizeof c->message) != FOX_OK)
        return c->status = FOX_EINVAL;
    int fresh = needs_new_engine(&t->cfg, &cfg);
    int64_t held = fox__trainer_held_steps(t, t->engine);
    if (fresh && held > 0 && !c->force)
        return refuse_discard(t, c, held);
    fox_engine *e = NULL;
    int rv;
    if (fresh &&
        (rv = fox__trainer_make_engine(t, &cfg, &e, c->message, sizeof c->message)) != FOX_OK)
        return c->status = rv;
    /*
     * Kept for the next start before it takes effect: a change the next
     * start would not see leaves it a model that no longer fits the stop
     * checkpoint, so a change that cannot be kept is not made at all.
     */
    char msg[512];
    if ((rv = fox_conf_save_overrides(&t->d, c->values, msg, sizeof msg)) != FOX_OK) {
        fox_engine_destroy(e);
        return fox__trainer_refuse(
            c, rv, "config not changed: it could not be kept for the next start: %s", msg);
    }
    if (fresh) {
        fox__trainer_install_engine(t, &cfg, e);
        if (held > 0)
            fox_log(FOX_LOG_NOTICE,
                    "config set (forced): a new engine replaced one holding %lld steps",
                    (long long)held);
    }
    t->cfg = cfg;
    fox__trainer_publish(t);
    c->result.engine_recreated = fresh;
    return FOX_OK;
}

static int
apply_run(fox_trainer *t, fox_tcmd *c)
{
    if (t->state != FOX_TSTATE_IDLE && t->state != FOX_TSTATE_HALTED)
        return wrong_state(t, c);
    int mask = c->cmd == FOX_CMD_START_FOLD ? 1 << c->fold
               : c->folds_mask              ? c->folds_mask
                                            : t->cfg.folds_mask;
    int epochs = c->epochs ? c->epochs : t->cfg.epochs;
    int steps = c->steps_per_epoch ? c->steps_per_epoch : t->cfg.steps_per_epoch;
    int rv = fox_walk_check(mask, epochs, steps, t->cfg.n_folds, c->message, sizeof c->message);
    if (rv != FOX_OK)
        return c->status = rv;
    /*
     * Weights, replay and random streams carry over from run to run; a fresh
     * run starts from the engine the config alone defines, so that its result
     * is the one `foxd --once` gives for the same config and folds.
     */
    if (c->fresh && replace_engine(t, &t->cfg, c) != FOX_OK)
        return c->status;
    char root[FOX_PATH_MAX + 8];
    snprintf(root, sizeof root, "%s/runs", t->d.state_dir);
    if ((rv = fox_record_open(&t->record, &t->d, root, &t->cfg, c->message, sizeof c->message)) !=
        FOX_OK)
        return c->status = rv;
    fox_record_attach(t->record, t->engine);
    snprintf(t->run_dir, sizeof t->run_dir, "%s", fox_record_dir(t->record));
    snprintf(c->result.run_dir, sizeof c->result.run_dir, "%s", t->run_dir);
    fox_walk_init(&t->walk, mask, epochs, steps);
    t->walk.stop_on_halt = t->cfg.stop_on_halt;
    t->walking = 1;
    t->run_cmd = c->cmd;
    t->run_op = c->op_id = fox__trainer_op_begin(t, c->cmd);
    pthread_mutex_lock(&t->slock);
    t->snap.op_id = t->run_op;
    t->snap.run_mask = mask;
    t->snap.epochs = epochs;
    t->snap.steps_per_epoch = steps;
    t->snap.n_done = 0;
    t->snap.halt_reason[0] = 0;
    pthread_mutex_unlock(&t->slock);
    c->result.folds_mask = mask;
    c->result.epochs = epochs;
    c->result.steps_per_epoch = steps;
    fox_log(FOX_LOG_INFO,
            "op %lld: %s accepted (folds 0x%x, %d epochs x %d steps), run directory %s",
            (long long)c->op_id, fox_cmd_name(c->cmd), mask, epochs, steps, t->run_dir);
    fox__trainer_set_state(t, FOX_TSTATE_TRAINING);
    return FOX_OK;
}

static int
apply_inject(fox_trainer *t, fox_tcmd *c)
{
    static const char *const kinds[] = {"none", "nan", "inf", "huge"};
    int kind = FOX_FAULT_NONE;
    if (!t->cfg.debug_enable)
        return fox__trainer_refuse(c, FOX_EPERM,
                                   "inject_fault needs debug.enable in the configuration");
    for (int k = FOX_FAULT_NAN; k <= FOX_FAULT_HUGE; k++)
        if (strcmp(c->fault_kind, kinds[k]) == 0)
            kind = k;
    /*
     * Armed on the live engine, whose trained weights stay. Outside a fold
     * (idle, halted, or a run between two folds) the next train step comes
     * after the next fold's reset, so `step` counts from that fold's start.
     */
    int next_fold =
        (t->state != FOX_TSTATE_TRAINING && t->state != FOX_TSTATE_PAUSED) || t->walk.fold < 0;
    char msg[160];
    if (c->fault_member >= 0 && fox_member_check(c->fault_member, t->cfg.members, msg, sizeof msg))
        return fox__trainer_refuse(c, FOX_EINVAL, "%s", msg);
    int rv = fox_engine_inject_fault(t->engine, c->fault_member, c->fault_buffer, kind,
                                     c->fault_step, next_fold);
    if (rv != FOX_OK)
        return fox__trainer_refuse(c, rv, "%s", fox_engine_errmsg(t->engine));
    c->result.fault_next_fold = next_fold;
    return FOX_OK;
}

/*
 * A backtest on an engine of its own (the training engine and its fold stay
 * as they are): the daemon's configuration with the command's data, the
 * checkpoint's policy over the bars, the record under <state>/runs.
 */
static int
apply_backtest(fox_trainer *t, fox_tcmd *c)
{
    fox_config cfg = t->cfg;
    fox_dconf d = t->d;
    fox_engine *e = NULL;
    fox_record *rec = NULL;
    char root[FOX_PATH_MAX + 8];
    int rv;
    if (c->data[0] && (rv = fox_config_set(&cfg, "data.source", c->data, c->message,
                                           sizeof c->message)) != FOX_OK)
        return c->status = rv;
    if ((rv = fox__trainer_make_engine(t, &cfg, &e, c->message, sizeof c->message)) != FOX_OK)
        return c->status = rv;
    d.run_dir[0] = 0;
    snprintf(d.run_name, sizeof d.run_name, "backtest");
    snprintf(root, sizeof root, "%s/runs", t->d.state_dir);
    if ((rv = fox_engine_load_policy(e, c->path, c->val_from ? c->val_from : -1,
                                     c->bars_from ? c->bars_from : -1, c->bars_to)) != FOX_OK)
        fox__trainer_refuse(c, rv, "%s", fox_engine_errmsg(e));
    else if ((rv = fox_record_open(&rec, &d, root, &cfg, c->message, sizeof c->message)) != FOX_OK)
        c->status = rv;
    else if (fox_record_attach(rec, e), (rv = fox_record_backtest(rec, e, &c->backtest)) != FOX_OK)
        fox__trainer_refuse(c, rv, "%s", fox_engine_errmsg(e));
    if (rec)
        fox_log(FOX_LOG_INFO, "backtest of %s: run directory %s", c->path, fox_record_dir(rec));
    fox_record_close(rec, rv == FOX_OK ? e : NULL, NULL);
    fox_engine_destroy(e);
    return rv;
}

/* Apply one command; LONG ones may keep working after completing c. */
void
fox__trainer_apply(fox_trainer *t, fox_tcmd *c)
{
    int rv = FOX_OK;
    c->status = FOX_OK;
    switch (c->cmd) {
    case FOX_CMD_CONFIG_SET:
        apply_config_set(t, c);
        break;
    case FOX_CMD_RUN:
    case FOX_CMD_START_FOLD:
        apply_run(t, c);
        break;
    case FOX_CMD_PAUSE:
        if (t->state != FOX_TSTATE_TRAINING)
            wrong_state(t, c);
        else
            fox__trainer_set_state(t, FOX_TSTATE_PAUSED);
        break;
    case FOX_CMD_RESUME:
        if (t->state != FOX_TSTATE_PAUSED)
            wrong_state(t, c);
        else
            fox__trainer_set_state(t, FOX_TSTATE_TRAINING);
        break;
    case FOX_CMD_STOP:
        if (t->state != FOX_TSTATE_TRAINING && t->state != FOX_TSTATE_PAUSED &&
            t->state != FOX_TSTATE_HALTED) {
            wrong_state(t, c);
            break;
        }
        fox__trainer_set_state(t, FOX_TSTATE_IDLE);
        fox__trainer_end_walk(t, FOX_ESTATE, "stopped by request");
        break;
    case FOX_CMD_RESET_FOLD:
        if (t->state == FOX_TSTATE_TRAINING) {
            fox__trainer_refuse(c, FOX_ESTATE,
                                "reset_fold is not allowed while training: pause first");
            break;
        }
        if ((rv = fox_engine_reset_for_fold(t->engine)) != FOX_OK) {
            fox__trainer_refuse(c, rv, "%s", fox_engine_errmsg(t->engine));
            break;
        }
        if (t->state == FOX_TSTATE_HALTED) {
            fox__trainer_set_state(t, FOX_TSTATE_IDLE);
            fox__trainer_end_walk(t, FOX_ESTATE, "halted, then reset");
        }
        fox__trainer_publish(t);
        break;
    case FOX_CMD_NAN_FLAGS: {
        /* What any member had set: the clear below clears every member's. */
        uint64_t before = 0;
        const volatile int *f;
        for (int k = 0; (f = fox_engine_member_flags(t->engine, k)); k++)
            before |= fox_sentinel_mask(f);
        if ((rv = fox_engine_clear_flags(t->engine)) != FOX_OK) {
            fox__trainer_refuse(c, rv, "%s", fox_engine_errmsg(t->engine));
            break;
        }
        c->result.cleared = before;
        break;
    }
    case FOX_CMD_CHECKPOINT_SAVE: {
        char msg[1024];
        c->op_id = fox__trainer_op_begin(t, c->cmd);
        params_digest(t->engine, c->result.params_digest); /* what the save below writes */
        int64_t op = c->op_id;
        char path[FOX_PATH_MAX];
        snprintf(path, sizeof path, "%s", c->path);
        fox__trainer_complete(t, c); /* answered now; completion is the op_done event */
        msg[0] = 0;
        rv = save_checkpoint(t, path, msg, sizeof msg);
        fox_tevent ev = {0};
        ev.u.op_done.path = path;
        fox__trainer_op_done(t, &ev, op, FOX_CMD_CHECKPOINT_SAVE, rv, msg);
        return;
    }
    case FOX_CMD_CHECKPOINT_LOAD:
        if (t->state == FOX_TSTATE_TRAINING) {
            fox__trainer_refuse(c, FOX_ESTATE,
                                "checkpoint_load is not allowed while training: pause first");
            break;
        }
        fox__trainer_set_phase(t, "checkpoint");
        rv = fox_engine_checkpoint_load(t->engine, c->path);
        fox__trainer_set_phase(t, NULL);
        if (rv != FOX_OK) {
            fox__trainer_refuse(c, rv, "%s", fox_engine_errmsg(t->engine));
            break;
        }
        fox__trainer_note_loaded(t, t->engine);
        fox__trainer_publish(t);
        params_digest(t->engine, c->result.params_digest);
        fox_log(FOX_LOG_INFO, "checkpoint loaded from %s", c->path);
        break;
    case FOX_CMD_INJECT_FAULT:
        apply_inject(t, c);
        break;
    case FOX_CMD_BACKTEST:
        if (t->state == FOX_TSTATE_TRAINING) {
            fox__trainer_refuse(c, FOX_ESTATE,
                                "backtest is not allowed while training: pause first");
            break;
        }
        fox__trainer_set_phase(t, "backtest");
        apply_backtest(t, c);
        fox__trainer_set_phase(t, NULL);
        break;
    case FOX_CMD_SHUTDOWN: {
        char msg[1024] = "";
        fox__trainer_set_state(t, FOX_TSTATE_STOPPING);
        fox__trainer_end_walk(t, FOX_ESTATE, "daemon shutting down");
        if (c->checkpoint && c->path[0] && fox__trainer_held_steps(t, t->engine) == 0 &&
            access(c->path, F_OK) == 0) {
            /* An engine that holds no training (a forced config_set made it) never
             * overwrites the checkpoint a trained one left. */
            c->result.checkpoint_kept = 1;
            fox_log(FOX_LOG_NOTICE,
                    "stop checkpoint not written: the engine holds no training, %s is kept",
                    c->path);
        } else if (c->checkpoint && c->path[0]) {
            rv = save_checkpoint(t, c->path, msg, sizeof msg);
            if (rv == FOX_OK)
                c->result.checkpoint_saved = 1;
            else
                c->result.checkpoint_failed = 1;
            snprintf(c->result.checkpoint_error, sizeof c->result.checkpoint_error, "%s", msg);
        }
        c->status = FOX_OK;
        c->exit_after = 1;
        t->quit = 1;
        pthread_mutex_lock(&t->qlock);
        t->closed = 1;
        pthread_mutex_unlock(&t->qlock);
        break;
    }
    default:
        fox__trainer_refuse(c, FOX_EINTERNAL, "%s is not a trainer command", fox_cmd_name(c->cmd));
        break;
    }
    c->result.state = t->state;
    fox__trainer_complete(t, c);
}
