/*
 * answer.c — results of the read-only commands (the data gathered here,
 * rendered by render.c), trainer commands from requests, STATUS= lines and
 * the Prometheus textfile. See answer.h.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "daemon/answer.h"
#include "daemon/render.h"
#include "gpu/engine.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"

/* The snapshot handed to a renderer, or NULL when out of memory. */
static fox_snapshot *
snapshot_of(fox_trainer *t)
{
    fox_snapshot *s = malloc(sizeof *s);
    if (s)
        fox_trainer_snapshot(t, s);
    return s;
}

/* Members the snapshot's engine holds (its configuration's before there is one). */
static int
members_of(const fox_snapshot *s)
{
    return s->info.n_members > 0 ? s->info.n_members : s->cfg.members;
}

/* What one member's part of a per-member read is built from. */
typedef struct member_read {
    fox_trainer *t;
    const fox_snapshot *s;
    const int *idx; /* isv_read: the slots asked for */
    int n;
} member_read;
typedef cJSON *(*member_fn)(const member_read *m, int member);

static cJSON *
isv_of(const member_read *m, int member)
{
    float isv[FOX_ISV_TOTAL_DIM];
    fox_trainer_read_isv(m->t, member, isv, FOX_ISV_TOTAL_DIM);
    return fox_render_isv_read(m->s, m->idx, m->n, isv);
}

static cJSON *
flags_of(const member_read *m, int member)
{
    int flags[FOX_SENTINEL_SLOTS];
    fox_trainer_read_flags(m->t, member, flags, FOX_SENTINEL_SLOTS);
    return fox_render_nan_flags(flags, m->s->cfg.halt_rule);
}

/*
 * A read of per-member memory (isv_read, nan_flags): with args.member, that
 * member's, marked "member"; without it, member 0's as before populations
 * existed and, where the engine holds more than one, every member's under
 * "members", each in the same shape.
 */
static cJSON *
by_member(const member_read *m, const fox_request *req, member_fn fn, int *status, char *msg,
          size_t len)
{
    int members = members_of(m->s);
    if (req->member >= 0 && (*status = fox_member_check(req->member, members, msg, len)))
        return NULL;
    cJSON *o = fn(m, req->member >= 0 ? req->member : 0);
    if (!o)
        return NULL;
    if (req->member >= 0) {
        cJSON_AddNumberToObject(o, "member", req->member);
        return o;
    }
    if (members < 2)
        return o;
    cJSON *a = cJSON_AddArrayToObject(o, "members");
    for (int k = 0; k < members; k++) {
        cJSON *e = a ? fn(m, k) : NULL;
        if (!e) {
            cJSON_Delete(o);
            return NULL;
        }
        /* The step is the reply's own; each member's part says whose it is instead. */
        cJSON_DeleteItemFromObjectCaseSensitive(e, "as_of_step");
        cJSON_AddNumberToObject(e, "member", k);
        cJSON_AddItemToArray(a, e);
    }
    return o;
}

static cJSON *
isv_read_json(fox_trainer *t, const fox_request *req, int *status, char *msg, size_t len)
{
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
    fox_snapshot *s = snapshot_of(t);
    if (!s)
        return NULL;
    member_read m = {.t = t, .s = s, .idx = idx, .n = n};
    cJSON *o = by_member(&m, req, isv_of, status, msg, len);
    free(s);
    return o;
}

static cJSON *
config_get_json(fox_trainer *t, const fox_request *req, int *status, char *msg, size_t len)
{
    fox_snapshot *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    int idx[FOX_PROTO_MAX_KEYS];
    /* Resolve every key first: an unknown one fails the request, not half of it. */
    for (int k = 0; k < req->n_keys; k++) {
        idx[k] = fox_conf_key_index(req->keys[k]);
        if (idx[k] < 0) {
            free(s);
            *status = fox_errf(msg, len, FOX_ENOENT, "unknown config key '%.128s'", req->keys[k]);
            return NULL;
        }
    }
    fox_trainer_snapshot(t, s);
    cJSON *o = fox_render_config(&s->cfg, idx, req->n_keys);
    free(s);
    return o;
}

cJSON *
fox_answer_read(fox_trainer *t, const fox_dconf *d, const fox_counters *n, const fox_request *req,
                int *status, char *msg, size_t len)
{
    cJSON *r = NULL;
    fox_snapshot *s = NULL;
    *status = FOX_OK;
    msg[0] = 0;
    switch (req->cmd) {
    case FOX_CMD_VERSION:
        if ((s = snapshot_of(t)))
            r = fox_render_version(s, d);
        break;
    case FOX_CMD_STATUS:
        if ((s = snapshot_of(t)))
            r = fox_render_status(s, fox_trainer_queued(t), n, fox_mono_ms());
        break;
    case FOX_CMD_CONFIG_GET:
        r = config_get_json(t, req, status, msg, len);
        break;
    case FOX_CMD_ISV_READ:
        r = isv_read_json(t, req, status, msg, len);
        break;
    case FOX_CMD_ISV_LIST:
        r = fox_render_isv_list();
        break;
    case FOX_CMD_NAN_FLAGS:
        if ((s = snapshot_of(t))) {
            member_read m = {.t = t, .s = s};
            r = by_member(&m, req, flags_of, status, msg, len);
        }
        break;
    case FOX_CMD_SENTINEL_LIST:
        if ((s = snapshot_of(t)))
            r = fox_render_sentinel_list(s->cfg.halt_rule);
        break;
    case FOX_CMD_METRICS:
        if ((s = snapshot_of(t)))
            r = fox_render_metrics(s, n);
        break;
    default:
        *status =
            fox_errf(msg, len, FOX_EINTERNAL, "%s is not a read command", fox_cmd_name(req->cmd));
        return NULL;
    }
    free(s);
    if (!r && *status == FOX_OK)
        *status = fox_errf(msg, len, FOX_EINTERNAL, "out of memory");
    return r;
}

/* --------------------------------------------------------- mutating requests */

/* The engine key that names a data file. */
#define DATA_KEY "data.source"

static int
has_dotdot(const char *path)
{
    for (const char *p = path; *p; p++)
        if ((p == path || p[-1] == '/') && p[0] == '.' && p[1] == '.' && (p[2] == '/' || !p[2]))
            return 1;
    return 0;
}

int
fox_answer_data_path(const fox_dconf *d, const char *path, char *out, size_t len, char *msg,
                     size_t msglen)
{
    char joined[FOX_PATH_MAX * 2], real[PATH_MAX], real_dir[PATH_MAX];
    size_t dl = strlen(d->data_dir);
    struct stat st;
    if (has_dotdot(path))
        return fox_errf(msg, msglen, FOX_EPERM, "%s '%.256s' contains '..'", DATA_KEY, path);
    if (path[0] == '/' && (strncmp(path, d->data_dir, dl) != 0 || path[dl] != '/'))
        return fox_errf(msg, msglen, FOX_EPERM,
                        "%s: clients may name files inside the data directory %s only", DATA_KEY,
                        d->data_dir);
    snprintf(joined, sizeof joined, path[0] == '/' ? "%s" : "%s/%s",
             path[0] == '/' ? path : d->data_dir, path);
    if (!realpath(d->data_dir, real_dir))
        return fox_errf(msg, msglen, FOX_ENOENT, "the data directory %s: %s", d->data_dir,
                        strerror(errno));
    if (!realpath(joined, real))
        return fox_errf(msg, msglen, errno == ENOENT ? FOX_ENOENT : FOX_EIO,
                        "%s '%.256s' in %s: %s", DATA_KEY, path, d->data_dir, strerror(errno));
    dl = strlen(real_dir);
    if (strncmp(real, real_dir, dl) != 0 || real[dl] != '/')
        return fox_errf(msg, msglen, FOX_EPERM, "%s '%.256s' leads out of the data directory %s",
                        DATA_KEY, path, d->data_dir);
    if (stat(real, &st) != 0 || !S_ISREG(st.st_mode))
        return fox_errf(msg, msglen, FOX_EPERM, "%s '%.256s' is not a regular file", DATA_KEY,
                        path);
    if (st.st_size > (off_t)d->data_max_mb << 20)
        return fox_errf(msg, msglen, FOX_EINVAL, "%s '%.256s' is larger than %d MiB (daemon.data_max_mb)",
                        DATA_KEY, path, d->data_max_mb);
    if (snprintf(out, len, "%s", real) >= (int)len)
        return fox_errf(msg, msglen, FOX_EINVAL, "%s: path too long", DATA_KEY);
    return FOX_OK;
}

/* A client's data.source, replaced in values by the real path it resolves to. */
static int
resolve_data_source(const fox_dconf *d, cJSON *values, char *msg, size_t len)
{
    char real[FOX_PATH_MAX];
    cJSON *v = cJSON_GetObjectItemCaseSensitive(values, DATA_KEY);
    /* A generator's name reads no file. */
    if (!cJSON_IsString(v) || fox_engine_source_is_generator(v->valuestring))
        return FOX_OK;
    int rv = fox_answer_data_path(d, v->valuestring, real, sizeof real, msg, len);
    if (rv != FOX_OK)
        return rv;
    cJSON *r = cJSON_CreateString(real);
    if (!r || !cJSON_ReplaceItemInObjectCaseSensitive(values, DATA_KEY, r))
        return fox_errf(msg, len, FOX_EINTERNAL, "out of memory");
    return FOX_OK;
}

/*
 * Whether rel (relative to the state directory) names a checkpoint file:
 * components of letters, digits and "._+-" that do not start with a dot
 * (no "..", no hidden or temp files), the last ending in ".ckpt"; with
 * bare, one component only. The state directory also holds the daemon's
 * own files (foxd.overrides.json, metrics.jsonl, data/, runs/): a client's
 * checkpoint must never land on one of them.
 */
static int
is_ckpt_name(const char *rel, int bare)
{
    size_t n = strlen(rel);
    if (n < 6 || strcmp(rel + n - 5, ".ckpt") != 0 || rel[n - 6] == '/')
        return 0;
    for (const char *p = rel; *p; p++) {
        if (*p == '/') {
            if (bare)
                return 0;
            continue;
        }
        if ((p == rel || p[-1] == '/') && *p == '.')
            return 0;
        if (!isalnum((unsigned char)*p) && !strchr("._+-", *p))
            return 0;
    }
    return 1;
}

int
fox_answer_ckpt_path(const fox_dconf *d, const char *path, int write, char *out, size_t len,
                     char *msg, size_t msglen)
{
    size_t sl = strlen(d->state_dir);
    const char *rel = path ? path : "foxd.ckpt";
    /* Clients name files; they do not get to write or read anywhere else. */
    if (has_dotdot(rel))
        return fox_errf(msg, msglen, FOX_EPERM, "checkpoint path '%.256s' contains '..'", rel);
    if (rel[0] == '/') {
        if (strncmp(rel, d->state_dir, sl) != 0 || rel[sl] != '/')
            return fox_errf(msg, msglen, FOX_EPERM,
                            "checkpoint paths must lie inside the state directory %s",
                            d->state_dir);
        rel += sl + 1;
    }
    if (!is_ckpt_name(rel, write))
        return fox_errf(msg, msglen, FOX_EPERM,
                        "checkpoint '%.256s': %s ending in .ckpt, of letters, digits and "
                        "'._+-', not starting with '.'",
                        rel, write ? "a file name (no '/')" : "a path");
    if (snprintf(out, len, "%s/%s", d->state_dir, rel) >= (int)len)
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
    c->fresh = req->fresh;
    c->force = req->force;
    c->clear = req->clear;
    c->checkpoint = req->checkpoint;
    c->fault_step = req->fault_step;
    c->fault_member = req->member;
    if (req->fault_buffer)
        snprintf(c->fault_buffer, sizeof c->fault_buffer, "%s", req->fault_buffer);
    if (req->fault_kind)
        snprintf(c->fault_kind, sizeof c->fault_kind, "%s", req->fault_kind);
    c->bars_from = req->bars_from;
    c->bars_to = req->bars_to;
    c->val_from = req->val_from;
    /* A backtest's bars come under the same rule as data.source: the data directory only. */
    if (req->data && fox_engine_source_is_generator(req->data)) {
        if (snprintf(c->data, sizeof c->data, "%s", req->data) >= (int)sizeof c->data)
            return fox_errf(msg, len, FOX_EINVAL, "backtest: data path too long");
    } else if (req->data) {
        int rv = fox_answer_data_path(d, req->data, c->data, sizeof c->data, msg, len);
        if (rv != FOX_OK)
            return rv;
    }
    if (req->values && !(c->values = cJSON_Duplicate(req->values, 1)))
        return fox_errf(msg, len, FOX_EINTERNAL, "out of memory");
    if (c->values) {
        int rv = resolve_data_source(d, c->values, msg, len);
        if (rv != FOX_OK)
            return rv;
    }
    if (req->cmd == FOX_CMD_CHECKPOINT_LOAD || req->cmd == FOX_CMD_BACKTEST)
        return fox_answer_ckpt_path(d, req->path, 0, c->path, sizeof c->path, msg, len);
    if (req->cmd == FOX_CMD_CHECKPOINT_SAVE ||
        (req->cmd == FOX_CMD_SHUTDOWN && req->checkpoint && d->checkpoint_on_stop))
        return fox_answer_ckpt_path(d, req->path, 1, c->path, sizeof c->path, msg, len);
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
    GAUGE("healthy", "1 while the trainer heartbeat is fresh", "%d",
          fox_trainer_healthy(s, now, 0));
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
    /*
     * The population member by member, one family each with a member label,
     * so that a dashboard sees a member halt or fire flags while the fold
     * goes on under engine.quorum.
     */
    fprintf(f, "# HELP foxd_member_halted 1 for a member halted in the fold\n"
               "# TYPE foxd_member_halted gauge\n");
    for (int k = 0; k < s->info.n_members; k++)
        fprintf(f, "foxd_member_halted{member=\"%d\"} %d\n", k, s->member_halted[k]);
    fprintf(f, "# HELP foxd_member_flags_set sentinel flags set for a member\n"
               "# TYPE foxd_member_flags_set gauge\n");
    for (int k = 0; k < s->info.n_members; k++)
        fprintf(f, "foxd_member_flags_set{member=\"%d\"} %d\n", k, s->member_flags[k]);
    if (s->n_recent > 0) {
        const fox_epoch_report *r = &s->recent[s->n_recent - 1];
        fprintf(f, "# HELP foxd_member_test_sharpe test Sharpe of a member in the last epoch\n"
                   "# TYPE foxd_member_test_sharpe gauge\n");
        for (int k = 0; k < r->n_members; k++)
            fprintf(f, "foxd_member_test_sharpe{member=\"%d\"} %.6g\n", k,
                    r->members[k].test_sharpe);
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
