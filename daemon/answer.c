/*
 * answer.c — results of the read-only commands, trainer commands from
 * requests, STATUS= lines and the Prometheus textfile. See answer.h.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/answer.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "common/clock.h"
#include "daemon/walk.h"

#ifndef FOX_VERSION
#define FOX_VERSION "0.0.0"
#endif

#define STALE_MS_MIN 30000

int
fox_answer_healthy(const fox_snapshot *s, int64_t now_ms, int64_t stale_ms)
{
    if (stale_ms < STALE_MS_MIN)
        stale_ms = STALE_MS_MIN;
    if (s->phase[0] && now_ms < s->phase_until_ms)
        return 1;
    return now_ms - s->beat_ms < stale_ms;
}

static cJSON *
status_json(fox_trainer *t, const fox_counters *n)
{
    fox_snapshot *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    fox_trainer_snapshot(t, s);
    int64_t now = fox_mono_ms();
    char fp[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "state", fox_tstate_name(s->state));
    cJSON_AddBoolToObject(o, "healthy", fox_answer_healthy(s, now, 0));
    cJSON_AddNumberToObject(o, "as_of_step", (double)s->total_steps);
    cJSON_AddNumberToObject(o, "age_ms", (double)(now - s->as_of_ms));
    cJSON_AddNumberToObject(o, "heartbeat_age_ms", (double)(now - s->beat_ms));
    if (s->phase[0])
        cJSON_AddStringToObject(o, "phase", s->phase);
    cJSON_AddNumberToObject(o, "fold", s->fold);
    cJSON_AddNumberToObject(o, "epoch", s->epoch);
    cJSON_AddNumberToObject(o, "step", (double)s->step);
    cJSON_AddNumberToObject(o, "total_steps", (double)s->total_steps);
    fox_walk_json_num(o, "loss", s->loss);
    fox_walk_json_num(o, "epsilon", s->epsilon);
    fox_walk_json_num(o, "steps_per_sec", s->steps_per_sec);
    cJSON *run = cJSON_AddObjectToObject(o, "run");
    cJSON_AddNumberToObject(run, "op_id", (double)s->op_id);
    cJSON_AddItemToObject(run, "folds", fox_walk_mask_json(s->run_mask));
    cJSON_AddItemToObject(run, "folds_left", fox_walk_mask_json(s->folds_left));
    cJSON_AddNumberToObject(run, "epochs", s->epochs);
    cJSON_AddNumberToObject(run, "steps_per_epoch", s->steps_per_epoch);
    cJSON *done = cJSON_AddArrayToObject(run, "folds_done");
    for (int i = 0; i < s->n_done; i++)
        cJSON_AddItemToArray(done, fox_walk_fold_json(&s->done[i]));
    if (s->state == FOX_TSTATE_HALTED)
        cJSON_AddStringToObject(o, "halt_reason", s->halt_reason);
    cJSON *ops = cJSON_AddArrayToObject(o, "ops");
    for (int i = 0; i < s->n_ops; i++) {
        cJSON *op = cJSON_CreateObject();
        cJSON_AddNumberToObject(op, "op_id", (double)s->ops[i].op_id);
        cJSON_AddStringToObject(op, "cmd", fox_cmd_name(s->ops[i].cmd));
        cJSON_AddStringToObject(op, "state",
                                !s->ops[i].done                 ? "running"
                                : s->ops[i].status == FOX_OK    ? "done"
                                : s->ops[i].status == FOX_EHALT ? "halted"
                                                                : "failed");
        if (s->ops[i].done && s->ops[i].status != FOX_OK) {
            cJSON_AddStringToObject(op, "code", fox_proto_code_name(s->ops[i].status));
            cJSON_AddStringToObject(op, "message", s->ops[i].message);
        }
        cJSON_AddItemToArray(ops, op);
    }
    cJSON *eng = cJSON_AddObjectToObject(o, "engine");
    cJSON_AddStringToObject(eng, "backend", s->info.backend ? s->info.backend : "?");
    cJSON_AddNumberToObject(eng, "n_params", (double)s->info.n_params);
    cJSON_AddNumberToObject(eng, "n_envs", s->info.n_envs);
    cJSON_AddNumberToObject(eng, "batch", s->info.batch);
    cJSON_AddNumberToObject(eng, "n_bars", s->info.n_bars);
    snprintf(fp, sizeof fp, "%016" PRIx64, s->info.fingerprint);
    cJSON_AddStringToObject(eng, "fingerprint", fp);
    cJSON_AddNumberToObject(o, "queue", fox_trainer_queued(t));
    cJSON_AddNumberToObject(o, "uptime_s", (double)(now - n->start_ms) / 1000.0);
    free(s);
    return o;
}

static cJSON *
isv_read_json(fox_trainer *t, const fox_request *req, int *status, char *msg, size_t len)
{
    float isv[FOX_ISV_TOTAL_DIM];
    int idx[FOX_PROTO_MAX_SLOTS];
    int n = req->n_slots;

    /* Resolve every entry first: a bad one fails the request, not half of it. */
    if (n == 0) {
        n = FOX_ISV_TOTAL_DIM;
        for (int i = 0; i < n; i++)
            idx[i] = i;
    }
    for (int i = 0; req->n_slots && i < n; i++) {
        const fox_slot_ref *r = &req->slots[i];
        if (r->name) {
            idx[i] = fox_isv_index(r->name);
            if (idx[i] < 0) {
                *status = fox_errf(msg, len, FOX_ENOENT, "no ISV slot named '%.64s'", r->name);
                return NULL;
            }
        } else if (r->index >= FOX_ISV_TOTAL_DIM) {
            *status = fox_errf(msg, len, FOX_EINVAL, "ISV slot %d is outside [0, %d)", r->index,
                                FOX_ISV_TOTAL_DIM);
            return NULL;
        } else {
            idx[i] = r->index;
        }
    }
    fox_trainer_read_isv(t, isv, FOX_ISV_TOTAL_DIM);
    fox_snapshot *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    fox_trainer_snapshot(t, s);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "as_of_step", (double)s->total_steps);
    cJSON *a = cJSON_AddArrayToObject(o, "slots");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", idx[i]);
        cJSON_AddStringToObject(e, "name", fox_isv_name(idx[i]));
        fox_walk_json_num(e, "value", isv[idx[i]]);
        cJSON_AddItemToArray(a, e);
    }
    free(s);
    return o;
}

static cJSON *
isv_list_json(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "total", FOX_ISV_TOTAL_DIM);
    cJSON *a = cJSON_AddArrayToObject(o, "slots");
    for (int k = 0; k < fox_isv_named_count(); k++) {
        const fox_isv_slot_info *si = fox_isv_named(k);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", si->index);
        cJSON_AddStringToObject(e, "name", si->name);
        cJSON_AddStringToObject(e, "reset", fox_isv_rule_name(si->rule));
        if (si->rule == FOX_ISV_VALUE)
            cJSON_AddNumberToObject(e, "reset_value", si->value);
        cJSON_AddStringToObject(e, "doc", si->doc);
        cJSON_AddItemToArray(a, e);
    }
    return o;
}

static cJSON *
nan_flags_json(fox_trainer *t)
{
    int flags[FOX_SENTINEL_SLOTS];
    fox_trainer_read_flags(t, flags, FOX_SENTINEL_SLOTS);
    cJSON *o = cJSON_CreateObject();
    cJSON *fired = cJSON_AddArrayToObject(o, "fired");
    cJSON *all = cJSON_AddArrayToObject(o, "flags");
    int count = 0;
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        cJSON_AddItemToArray(all, cJSON_CreateNumber(flags[i]));
        if (!flags[i])
            continue;
        count++;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "slot", i);
        cJSON_AddStringToObject(e, "name", fox_sentinel_name(i));
        cJSON_AddStringToObject(e, "buffer", fox_sentinel_buffer(i));
        cJSON_AddBoolToObject(e, "halts", fox_sentinel_is_halt(i));
        cJSON_AddItemToArray(fired, e);
    }
    cJSON_AddNumberToObject(o, "count", count);
    return o;
}

static cJSON *
sentinel_list_json(void)
{
    char rule[256];
    cJSON *o = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(o, "slots");
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "slot", i);
        cJSON_AddStringToObject(e, "name", fox_sentinel_name(i));
        cJSON_AddStringToObject(e, "buffer", fox_sentinel_buffer(i));
        cJSON_AddStringToObject(e, "kind", fox_sentinel_kind_name(fox_sentinel_kind(i)));
        if (fox_sentinel_rule_text(i, rule, sizeof rule) == 0)
            cJSON_AddStringToObject(e, "rule", rule);
        cJSON_AddBoolToObject(e, "halts", fox_sentinel_is_halt(i));
        cJSON_AddStringToObject(e, "doc", fox_sentinel_doc(i));
        cJSON_AddItemToArray(a, e);
    }
    return o;
}

static cJSON *
config_get_json(fox_trainer *t, const fox_request *req, int *status, char *msg, size_t len)
{
    fox_snapshot *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    fox_trainer_snapshot(t, s);
    cJSON *o = cJSON_CreateObject();
    cJSON *v = cJSON_AddObjectToObject(o, "values");
    if (req->n_keys == 0) {
        for (int i = 0; i < fox_config_key_count(); i++)
            cJSON_AddItemToObject(v, fox_config_key_name(i), fox_conf_key_json(&s->cfg, i));
    }
    for (int k = 0; k < req->n_keys; k++) {
        int i = fox_conf_key_index(req->keys[k]);
        if (i < 0) {
            *status = fox_errf(msg, len, FOX_ENOENT, "unknown config key '%.128s'", req->keys[k]);
            cJSON_Delete(o);
            o = NULL;
            break;
        }
        cJSON_AddItemToObject(v, fox_config_key_name(i), fox_conf_key_json(&s->cfg, i));
    }
    free(s);
    return o;
}

static cJSON *
metrics_json(fox_trainer *t, const fox_counters *n)
{
    fox_snapshot *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    fox_trainer_snapshot(t, s);
    cJSON *o = cJSON_CreateObject();
    cJSON *c = cJSON_AddObjectToObject(o, "counters");
    cJSON_AddNumberToObject(c, "total_steps", (double)s->total_steps);
    cJSON_AddNumberToObject(c, "epochs", (double)s->epochs_total);
    cJSON_AddNumberToObject(c, "folds", (double)s->folds_total);
    cJSON_AddNumberToObject(c, "halts", (double)s->halts_total);
    cJSON_AddNumberToObject(c, "checkpoints", (double)s->checkpoints_total);
    cJSON_AddNumberToObject(c, "requests", (double)n->requests);
    cJSON_AddNumberToObject(c, "request_errors", (double)n->errors);
    cJSON_AddNumberToObject(c, "dedup_hits", (double)n->dedup_hits);
    cJSON_AddNumberToObject(c, "busy", (double)n->busy);
    cJSON_AddNumberToObject(c, "events", (double)n->events);
    fox_walk_json_num(o, "steps_per_sec", s->steps_per_sec);
    fox_walk_json_num(o, "loss", s->loss);
    cJSON *e = cJSON_AddArrayToObject(o, "epochs");
    for (int i = 0; i < s->n_recent; i++)
        cJSON_AddItemToArray(e, fox_walk_epoch_json(&s->recent[i]));
    cJSON *f = cJSON_AddArrayToObject(o, "folds");
    for (int i = 0; i < s->n_done; i++)
        cJSON_AddItemToArray(f, fox_walk_fold_json(&s->done[i]));
    free(s);
    return o;
}

static cJSON *
version_json(fox_trainer *t, const fox_dconf *d)
{
    fox_snapshot *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    fox_trainer_snapshot(t, s);
    char fp[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", FOX_VERSION);
    cJSON_AddNumberToObject(o, "protocol", FOX_PROTO_VERSION);
    cJSON_AddStringToObject(o, "backend", s->info.backend ? s->info.backend : "?");
    snprintf(fp, sizeof fp, "%016" PRIx64, s->info.fingerprint);
    cJSON_AddStringToObject(o, "fingerprint", fp);
    cJSON_AddStringToObject(o, "events", d->pub);
    free(s);
    return o;
}

cJSON *
fox_answer_read(fox_trainer *t, const fox_dconf *d, const fox_counters *n, const fox_request *req,
                int *status, char *msg, size_t len)
{
    cJSON *r = NULL;
    *status = FOX_OK;
    msg[0] = 0;
    switch (req->cmd) {
    case FOX_CMD_VERSION:
        r = version_json(t, d);
        break;
    case FOX_CMD_STATUS:
        r = status_json(t, n);
        break;
    case FOX_CMD_CONFIG_GET:
        r = config_get_json(t, req, status, msg, len);
        break;
    case FOX_CMD_ISV_READ:
        r = isv_read_json(t, req, status, msg, len);
        break;
    case FOX_CMD_ISV_LIST:
        r = isv_list_json();
        break;
    case FOX_CMD_NAN_FLAGS:
        r = nan_flags_json(t);
        break;
    case FOX_CMD_SENTINEL_LIST:
        r = sentinel_list_json();
        break;
    case FOX_CMD_METRICS:
        r = metrics_json(t, n);
        break;
    default:
        *status =
            fox_errf(msg, len, FOX_EINTERNAL, "%s is not a read command", fox_cmd_name(req->cmd));
        return NULL;
    }
    if (!r && *status == FOX_OK)
        *status = fox_errf(msg, len, FOX_EINTERNAL, "out of memory");
    return r;
}

/* --------------------------------------------------------- mutating requests */

int
fox_answer_ckpt_path(const fox_dconf *d, const char *path, char *out, size_t len, char *msg,
                     size_t msglen)
{
    size_t sl = strlen(d->state_dir);
    if (!path)
        path = "foxd.ckpt";
    /* Clients name files; they do not get to write or read anywhere else. */
    for (const char *p = path; *p; p++)
        if ((p == path || p[-1] == '/') && p[0] == '.' && p[1] == '.' && (p[2] == '/' || !p[2]))
            return fox_errf(msg, msglen, FOX_EPERM, "checkpoint path '%.256s' contains '..'",
                             path);
    if (path[0] == '/') {
        if (strncmp(path, d->state_dir, sl) != 0 || path[sl] != '/')
            return fox_errf(msg, msglen, FOX_EPERM,
                             "checkpoint paths must lie inside the state directory %s",
                             d->state_dir);
        if (snprintf(out, len, "%s", path) >= (int)len)
            return fox_errf(msg, msglen, FOX_EINVAL, "checkpoint path too long");
        return FOX_OK;
    }
    if (snprintf(out, len, "%s/%s", d->state_dir, path) >= (int)len)
        return fox_errf(msg, msglen, FOX_EINVAL, "checkpoint path too long");
    return FOX_OK;
}

int
fox_answer_tcmd(const fox_dconf *d, const fox_request *req, fox_tcmd *c, char *msg, size_t len)
{
    c->cmd = req->cmd;
    c->folds_mask = req->folds_mask;
    c->fold = req->fold;
    c->epochs = req->epochs;
    c->steps_per_epoch = req->steps_per_epoch;
    c->clear = req->clear;
    c->checkpoint = req->checkpoint;
    c->fault_step = req->fault_step;
    if (req->fault_buffer)
        snprintf(c->fault_buffer, sizeof c->fault_buffer, "%s", req->fault_buffer);
    if (req->fault_kind)
        snprintf(c->fault_kind, sizeof c->fault_kind, "%s", req->fault_kind);
    if (req->values && !(c->values = cJSON_Duplicate(req->values, 1)))
        return fox_errf(msg, len, FOX_EINTERNAL, "out of memory");
    if (req->cmd == FOX_CMD_CHECKPOINT_SAVE || req->cmd == FOX_CMD_CHECKPOINT_LOAD ||
        (req->cmd == FOX_CMD_SHUTDOWN && req->checkpoint && d->checkpoint_on_stop))
        return fox_answer_ckpt_path(d, req->path, c->path, sizeof c->path, msg, len);
    return FOX_OK;
}

/* ------------------------------------------------------- systemd, Prometheus */

void
fox_answer_status_line(const fox_snapshot *s, char *buf, size_t len)
{
    if (s->state == FOX_TSTATE_TRAINING || s->state == FOX_TSTATE_PAUSED)
        snprintf(buf, len, "%s: fold %d epoch %d/%d step %" PRId64 " loss %.4g, %.0f steps/s",
                 fox_tstate_name(s->state), s->fold, s->epoch + 1, s->epochs, s->step,
                 (double)s->loss, s->steps_per_sec);
    else if (s->state == FOX_TSTATE_HALTED)
        snprintf(buf, len, "halted: %.200s", s->halt_reason);
    else
        snprintf(buf, len, "%s (%s backend, %" PRId64 " steps so far)", fox_tstate_name(s->state),
                 s->info.backend ? s->info.backend : "?", s->total_steps);
}

char *
fox_answer_prometheus(const fox_snapshot *s, const fox_counters *n)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return NULL;
    int64_t now = fox_mono_ms();
#define GAUGE(name, help, fmt, v)                                                                  \
    fprintf(f,                                                                                     \
            "# HELP foxd_" name " " help "\n# TYPE foxd_" name " gauge\nfoxd_" name " " fmt "\n",  \
            v)
#define COUNTER(name, help, v)                                                                     \
    fprintf(f,                                                                                     \
            "# HELP foxd_" name " " help "\n# TYPE foxd_" name " counter\nfoxd_" name " %" PRId64  \
            "\n",                                                                                  \
            (int64_t)(v))
    fprintf(f, "# HELP foxd_state 1 for the state foxd is in\n# TYPE foxd_state gauge\n");
    for (int i = 0; i < FOX_TSTATE_COUNT; i++)
        fprintf(f, "foxd_state{state=\"%s\"} %d\n", fox_tstate_name(i), s->state == i);
    GAUGE("healthy", "1 while the trainer heartbeat is fresh", "%d", fox_answer_healthy(s, now, 0));
    GAUGE("heartbeat_age_seconds", "age of the trainer heartbeat", "%.3f",
          (double)(now - s->beat_ms) / 1000.0);
    GAUGE("fold", "fold in progress (-1 none)", "%d", s->fold);
    GAUGE("epoch", "epochs completed in the fold", "%d", s->epoch);
    GAUGE("loss", "loss of the last train step", "%.9g", isfinite(s->loss) ? (double)s->loss : NAN);
    GAUGE("steps_per_second", "train steps per second of the last chunk", "%.3f", s->steps_per_sec);
    if (s->n_recent > 0) {
        const fox_epoch_report *r = &s->recent[s->n_recent - 1];
        GAUGE("val_sharpe", "validation Sharpe of the last epoch", "%.6g", r->val.sharpe);
        GAUGE("test_sharpe", "test Sharpe of the last epoch", "%.6g", r->test.sharpe);
    }
    COUNTER("train_steps_total", "train steps since the engine was created", s->total_steps);
    COUNTER("epochs_total", "epochs completed", s->epochs_total);
    COUNTER("folds_total", "folds completed", s->folds_total);
    COUNTER("halts_total", "folds halted by the stability system", s->halts_total);
    COUNTER("checkpoints_total", "checkpoints saved", s->checkpoints_total);
    COUNTER("requests_total", "requests answered", n->requests);
    COUNTER("request_errors_total", "requests answered with an error", n->errors);
    COUNTER("events_total", "events published", n->events);
#undef GAUGE
#undef COUNTER
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
