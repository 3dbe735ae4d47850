/*
 * record.c — the run directory. See record.h for what it holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "daemon/record.h"
#include "daemon/render.h"
#include "gpu/isv.h"


/* The ISV signals isv.csv keeps: the scales and bounds the stability system steers by. */
static const int isv_slots[] = {FOX_ISV_Q_ABS_REF,     FOX_ISV_H_S2_RMS_EMA,
                                FOX_ISV_GRAD_NORM_EMA, FOX_ISV_GRAD_NORM_SLOW_EMA,
                                FOX_ISV_GRAD_CLIP,     FOX_ISV_GRAD_CLIP_BOUND};
#define N_ISV_SLOTS ((int)(sizeof isv_slots / sizeof isv_slots[0]))

/* One pass's equity curve: (bar, cumulative net log return) per step. */
typedef struct curve {
    int n, cap;
    int *bar;
    double *cum;
} curve;

struct fox_record {
    char dir[FOX_PATH_MAX];
    int warned;           /* a write failed: said once, then quiet */
    cJSON *folds;         /* fold objects reported so far */
    curve epoch_test;     /* the latest greedy test pass: the epoch being closed */
    curve chosen;         /* that of the fold's chosen epoch */
    curve buy_hold;       /* the latest buy-and-hold test pass: the fold's baseline */
    double last_val, last_test; /* Sharpe of the fold's last epoch so far */
    int isv_steps;              /* run.isv_steps */
    int backtest;               /* a backtest's record: no fold table */
    int owns_log;               /* foxd.log is this record's copy of the log */
    int isv_fold;               /* fold and step of isv.csv's last row */
    int64_t isv_step;
};

static void
curve_push(curve *c, int bar, double cum)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 1024;
        int *b = realloc(c->bar, (size_t)cap * sizeof *b);
        double *v = b ? realloc(c->cum, (size_t)cap * sizeof *v) : NULL;
        if (b)
            c->bar = b;
        if (!b || !v)
            return; /* out of memory: the curve stays shorter, training goes on */
        c->cum = v;
        c->cap = cap;
    }
    c->bar[c->n] = bar;
    c->cum[c->n++] = cum;
}

/*
 * A pass steps bar by bar: a bar that does not follow the last one kept
 * starts a new pass (another epoch, another fold), which replaces the old.
 */
static void
curve_capture(curve *c, int bar, double cum)
{
    if (c->n && bar != c->bar[c->n - 1] + 1)
        c->n = 0;
    curve_push(c, bar, cum);
}

static void
curve_copy(curve *dst, const curve *src)
{
    dst->n = 0;
    for (int i = 0; i < src->n; i++)
        curve_push(dst, src->bar[i], src->cum[i]);
}

static void
curve_free(curve *c)
{
    free(c->bar);
    free(c->cum);
    memset(c, 0, sizeof *c);
}

/*
 * The test passes the equity picture needs, as the engine makes them: the
 * greedy one of every epoch, and the buy-and-hold one among the baselines a
 * fold (or backtest) measures once. Nothing is evaluated for the record.
 */
static void
on_eval_bar(void *arg, fox_split split, fox_policy policy, int bar, double cum_net)
{
    fox_record *r = arg;
    if (split != FOX_SPLIT_TEST)
        return;
    if (policy == FOX_POLICY_GREEDY)
        curve_capture(&r->epoch_test, bar, cum_net);
    else if (policy == FOX_POLICY_BUY_HOLD)
        curve_capture(&r->buy_hold, bar, cum_net);
}

/* A write failed: say so once per run, with the reason; the run goes on. */
static void
write_failed(fox_record *r, const char *what)
{
    if (r->warned++)
        return;
    fox_log(FOX_LOG_WARNING, "run directory %s: %s (later failures are not logged)", r->dir, what);
}

static void
path_of(const fox_record *r, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void
path_of(const fox_record *r, char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(buf, len, "%s/", r->dir);
    va_start(ap, fmt);
    vsnprintf(buf + n, len - (size_t)n, fmt, ap);
    va_end(ap);
}

static void
append(fox_record *r, const char *name, const char *header, const char *line)
{
    char path[FOX_PATH_MAX + 64], err[FOX_PATH_MAX + 128];
    path_of(r, path, sizeof path, "%s", name);
    if (header && access(path, F_OK) != 0 && fox_append_line(path, header, err, sizeof err) != 0)
        write_failed(r, err);
    else if (fox_append_line(path, line, err, sizeof err) != 0)
        write_failed(r, err);
}

/* A JSON document into the run directory, replacing what was there. */
static void
write_json(fox_record *r, const char *name, const cJSON *doc)
{
    char path[FOX_PATH_MAX + 64], err[FOX_PATH_MAX + 128];
    char *text = cJSON_Print(doc);
    path_of(r, path, sizeof path, "%s", name);
    if (!text || fox_write_atomic(path, text, strlen(text), 0640, 0, err, sizeof err) != FOX_OK)
        write_failed(r, text ? err : "out of memory");
    free(text);
}

/*
 * Make a fresh run directory <root>/<leaf>, or <leaf>-2, -3, ... when that
 * name is taken, into r->dir; the root and its parents first, as needed. mkdirat under a descriptor of the root never
 * follows a symlink planted where the directory goes (it fails with EEXIST
 * and the next name is tried), and the new entry is checked with
 * AT_SYMLINK_NOFOLLOW to be a directory of ours. A root that others may
 * write to without the sticky bit is refused: there another user could
 * swap the new directory for a symlink after it is made.
 */
static int
make_fresh(fox_record *r, const char *key, const char *root, const char *leaf, char *err,
           size_t errlen)
{
    /* Room for the longest suffix: a path cut short would land in an ancestor. */
    if (strlen(root) + 1 + strlen(leaf) + sizeof "-1000" > sizeof r->dir)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "%s: '%.64s...' (%zu bytes) leaves no room for the run's name in %zu",
                        key, root, strlen(root), sizeof r->dir - 1);
    if (fox_mkdir_p(root, 0750, err, errlen) != FOX_OK)
        return FOX_EIO;
    struct stat st;
    char name[FOX_PATH_MAX];
    int rv = FOX_OK, fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        rv = fox_errf(err, errlen, FOX_EIO, "%s %s: %s", key, root, strerror(errno));
        goto out;
    }
    if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX)) {
        rv = fox_errf(err, errlen, FOX_EPERM,
                      "%s %s is writable by %s (mode %03o) and not sticky: another user could "
                      "put a symlink in place of the run directory; chmod go-w it or pick "
                      "another %s",
                      key, root, (st.st_mode & 002) ? "everyone" : "its group",
                      (unsigned)(st.st_mode & 0777), key);
        goto out;
    }
    snprintf(name, sizeof name, "%s", leaf);
    for (int k = 2; mkdirat(fd, name, 0750) != 0; k++) {
        if (errno != EEXIST || k > 1000) {
            rv = fox_errf(err, errlen, FOX_EIO, "run directory %s/%s: %s", root, name,
                          strerror(errno));
            goto out;
        }
        snprintf(name, sizeof name, "%s-%d", leaf, k);
    }
    if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid()) {
        rv = fox_errf(err, errlen, FOX_EPERM, "run directory %s/%s was replaced as it was made",
                      root, name);
        goto out;
    }
    /* The length was checked above: this cannot be cut. */
    if (snprintf(r->dir, sizeof r->dir, "%s/%s", root, name) >= (int)sizeof r->dir)
        rv = fox_errf(err, errlen, FOX_EINTERNAL, "run directory %s/%s: too long", root, name);
out:
    if (fd >= 0)
        close(fd);
    return rv;
}

int
fox_record_open(fox_record **out, const fox_dconf *d, const char *default_root,
                const fox_config *cfg, char *err, size_t errlen)
{
    *out = NULL;
    fox_record *r = calloc(1, sizeof *r);
    if (!r)
        return fox_errf(err, errlen, FOX_ENOMEM, "run directory: out of memory");
    r->isv_steps = d->run_isv_steps > 0 ? d->run_isv_steps : 1;
    r->isv_fold = -1;
    int rv = FOX_OK;
    if (d->run_dir[0]) {
        snprintf(r->dir, sizeof r->dir, "%s", d->run_dir);
        rv = fox_mkdir_p(r->dir, 0750, err, errlen);
    } else {
        char stamp[32], leaf[sizeof stamp + sizeof d->run_name];
        const char *root = d->run_root[0] ? d->run_root : default_root;
        fox_utc_stamp(stamp, sizeof stamp, "");
        snprintf(leaf, sizeof leaf, "%s%s%s", stamp, d->run_name[0] ? "-" : "", d->run_name);
        rv = make_fresh(r, d->run_root[0] ? "run.root" : "the default run root", root, leaf,
                        err, errlen);
    }
    if (rv != FOX_OK) {
        free(r);
        return rv;
    }
    /* The path printed and handed to clients is absolute: it is read from elsewhere. */
    char abs[PATH_MAX];
    if (realpath(r->dir, abs) && strlen(abs) < sizeof r->dir)
        snprintf(r->dir, sizeof r->dir, "%s", abs);
    r->folds = cJSON_CreateArray();
    cJSON *conf = fox_render_config(cfg, NULL, 0);
    if (!r->folds || !conf) {
        cJSON_Delete(conf);
        fox_record_close(r, NULL, NULL);
        return fox_errf(err, errlen, FOX_ENOMEM, "run directory: out of memory");
    }
    /* The values object alone: flat dotted keys, which --config reads back. */
    write_json(r, "config.json", cJSON_GetObjectItemCaseSensitive(conf, "values"));
    cJSON_Delete(conf);
    char log[FOX_PATH_MAX + 16];
    path_of(r, log, sizeof log, "foxd.log");
    /* A backtest beside a paused run leaves the log's copy to the run. */
    int copy = fox_log_copy_to(log);
    if (copy < 0)
        write_failed(r, "cannot open foxd.log");
    r->owns_log = copy == 0;
    if (r->warned) {
        fox_errf(err, errlen, FOX_EIO, "run directory %s: cannot write there", r->dir);
        fox_record_close(r, NULL, NULL);
        return FOX_EIO;
    }
    *out = r;
    return FOX_OK;
}

const char *
fox_record_dir(const fox_record *r)
{
    return r->dir;
}

void
fox_record_attach(fox_record *r, fox_engine *e)
{
    fox_engine_set_eval_hook(e, on_eval_bar, r);
}

void
fox_record_note(fox_record *r, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (r)
        fox_log_copy_line(line);
}

void
fox_record_chunk(fox_record *r, fox_engine *e, const fox_step_stats *st)
{
    const volatile float *isv = r ? fox_engine_isv(e) : NULL;
    fox_engine_info info;
    char header[512], line[512];
    if (!isv)
        return;
    fox_engine_get_info(e, &info);
    if (info.fold == r->isv_fold && st->step - r->isv_step < r->isv_steps)
        return;
    r->isv_fold = info.fold;
    r->isv_step = st->step;
    int n = snprintf(header, sizeof header, "fold,step,total_steps");
    for (int i = 0; i < N_ISV_SLOTS; i++)
        n += snprintf(header + n, sizeof header - (size_t)n, ",%s", fox_isv_name(isv_slots[i]));
    n = snprintf(line, sizeof line, "%d,%lld,%lld", info.fold, (long long)st->step,
                 (long long)info.total_steps);
    for (int i = 0; i < N_ISV_SLOTS; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, ",%.9g", (double)isv[isv_slots[i]]);
    append(r, "isv.csv", header, line);
}

/* The sidecar of a checkpoint: what `foxctl checkpoint list` shows of it. */
/* [begin, end) as a JSON pair. */
static void
add_bars(cJSON *o, const char *key, int begin, int end)
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    cJSON_AddItemToArray(a, cJSON_CreateNumber(begin));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(end));
}

static void
sidecar(fox_record *r, fox_engine *e, const char *name, int fold, int epoch, double val_sharpe,
        double test_sharpe)
{
    char json[FOX_PATH_MAX];
    fox_engine_info info;
    fox_engine_get_info(e, &info);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "fold", fold);
    cJSON_AddNumberToObject(o, "epoch", epoch);
    cJSON_AddNumberToObject(o, "step", (double)info.step);
    fox_render_num(o, "val_sharpe", val_sharpe);
    fox_render_num(o, "test_sharpe", test_sharpe);
    /* The bars the figures were measured on: a backtest of them reproduces the figures. */
    add_bars(o, "val_bars", info.val_begin, info.val_end);
    add_bars(o, "test_bars", info.test_begin, info.test_end);
    cJSON_AddNumberToObject(o, "time_ms", (double)fox_wall_ms());
    snprintf(json, sizeof json, "%.*s.json", (int)(strlen(name) - 5), name);
    write_json(r, json, o);
    cJSON_Delete(o);
}

static void
save_checkpoint(fox_record *r, fox_engine *e, const char *name)
{
    char path[FOX_PATH_MAX + 64];
    path_of(r, path, sizeof path, "%s", name);
    if (fox_engine_checkpoint_save(e, path) != FOX_OK)
        write_failed(r, fox_engine_errmsg(e));
}

/* An epoch or fold report as metrics.jsonl's line. */
static void
metrics_line(fox_record *r, const fox_tevent *ev, int64_t op_id)
{
    char *s = fox_render_metrics_line(ev, op_id, fox_wall_ms());
    if (s)
        append(r, "metrics.jsonl", NULL, s);
    free(s);
}

/*
 * A population's epoch (engine.members > 1) as a line of members.csv: how
 * many members train, and the lowest, highest and mean test Sharpe among
 * those that do, for foxplot's band over seeds. One member writes nothing.
 */
static void
members_line(fox_record *r, const fox_epoch_report *rep)
{
    char line[256];
    double lo = NAN, hi = NAN, sum = 0.0;
    int n = 0, training = 0;
    if (rep->n_members < 2)
        return;
    for (int k = 0; k < rep->n_members; k++) {
        double x = rep->members[k].test_sharpe;
        training += rep->members[k].training;
        if (!rep->members[k].training || !isfinite(x))
            continue;
        if (!n || x < lo)
            lo = x;
        if (!n || x > hi)
            hi = x;
        sum += x;
        n++;
    }
    snprintf(line, sizeof line, "%d,%d,%d,%d,%.9g,%.9g,%.9g", rep->fold, rep->epoch, rep->n_members,
             training, lo, hi, n ? sum / n : NAN);
    append(r, "members.csv",
           "fold,epoch,members,training,test_sharpe_min,test_sharpe_max,test_sharpe_mean", line);
}

void
fox_record_epoch(fox_record *r, fox_engine *e, const fox_epoch_report *rep, int64_t op_id)
{
    char name[64], line[512];
    if (!r)
        return;
    fox_tevent ev = {.type = FOX_TEVENT_EPOCH_END};
    ev.u.epoch_end.report = rep;
    metrics_line(r, &ev, op_id);
    const fox_step_stats *l = &rep->last;
    snprintf(line, sizeof line,
             "%d,%d,%lld,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g", rep->fold,
             rep->epoch, (long long)l->step, (double)l->loss, rep->mean_loss,
             (double)l->loss_c51, (double)l->loss_iqn, (double)l->loss_aux, (double)l->grad_norm,
             (double)l->epsilon, rep->val.sharpe, rep->test.sharpe, rep->val.sharpe_se,
             rep->test.sharpe_se);
    /* The standard errors come last, so that readers of the first twelve columns read on. */
    append(r, "epochs.csv",
           "fold,epoch,step,loss,mean_loss,loss_c51,loss_iqn,loss_aux,grad_norm,epsilon,"
           "val_sharpe,test_sharpe,val_sharpe_se,test_sharpe_se",
           line);
    members_line(r, rep);
    /* This epoch became the fold's choice: keep its weights and its test equity. */
    fox_fold_report fr;
    if (fox_engine_fold_report(e, &fr) == FOX_OK && fr.best_epoch == rep->epoch) {
        snprintf(name, sizeof name, "fold%d-chosen.ckpt", rep->fold);
        save_checkpoint(r, e, name);
        sidecar(r, e, name, rep->fold, rep->epoch, rep->val.sharpe, rep->test.sharpe);
        curve_copy(&r->chosen, &r->epoch_test);
    }
    r->last_val = rep->val.sharpe;
    r->last_test = rep->test.sharpe;
}

/*
 * The baselines of a fold report (a fold's or a backtest's), as measured by
 * the engine on its test split, into <prefix>-baselines.csv: one row each,
 * named as in the fold object, with the same numbers (printed to round-trip).
 */
static void
write_baselines(fox_record *r, const char *prefix, const fox_fold_report *rep)
{
    char path[FOX_PATH_MAX + 64], err[FOX_PATH_MAX + 128], text[2048];
    int n = snprintf(text, sizeof text, "baseline,sharpe,sharpe_se,sharpe_gross,turnover,"
                                        "max_drawdown,total_return,bars,lookback\n");
    for (int p = 0; p < FOX_POLICY_COUNT; p++) {
        const fox_eval_result *b = &rep->test_policy[p];
        const char *name = fox_render_baseline_name((fox_policy)p);
        if (!name || (p == FOX_POLICY_ORACLE && !rep->has_oracle) ||
            (p == FOX_POLICY_RULE && !rep->has_rule))
            continue;
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "%s,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%d,", name, b->sharpe,
                      b->sharpe_se, b->sharpe_gross, b->turnover, b->max_drawdown,
                      b->total_return, b->bars);
        if (p == FOX_POLICY_TREND)
            n += snprintf(text + n, sizeof text - (size_t)n, "%d", rep->trend_k);
        n += snprintf(text + n, sizeof text - (size_t)n, "\n");
    }
    path_of(r, path, sizeof path, "%s-baselines.csv", prefix);
    if (fox_write_atomic(path, text, (size_t)n, 0640, 0, err, sizeof err) != FOX_OK)
        write_failed(r, err);
}

/*
 * The equity curves of the chosen policy and buy-and-hold, a row per test
 * bar; where the series has times, each bar's time (unix seconds) comes
 * last, so that the picture's axis can read in dates and the first three
 * columns stay where programs already read them.
 */
static void
write_equity(fox_record *r, fox_engine *e, const char *prefix)
{
    char path[FOX_PATH_MAX + 64];
    fox_engine_info info;
    fox_engine_get_info(e, &info);
    const double *times = fox_engine_bar_times(e);
    path_of(r, path, sizeof path, "%s-equity.csv", prefix);
    FILE *f = fopen(path, "w");
    if (!f) {
        write_failed(r, strerror(errno));
        return;
    }
    /* Both passes step over the same test bars, so their rows line up. */
    fprintf(f, "bar,policy,buy_and_hold%s\n", times ? ",time" : "");
    for (int i = 0; i < r->chosen.n && i < r->buy_hold.n && r->chosen.bar[i] == r->buy_hold.bar[i];
         i++) {
        int bar = r->chosen.bar[i];
        fprintf(f, "%d,%.9g,%.9g", bar, r->chosen.cum[i], r->buy_hold.cum[i]);
        /* A bar past the series has no time: the field stays empty, which the picture skips. */
        if (times && bar >= 0 && bar < info.n_bars)
            fprintf(f, ",%.17g", times[bar]);
        else if (times)
            fputc(',', f);
        fputc('\n', f);
    }
    if (fclose(f) != 0)
        write_failed(r, strerror(errno));
}

void
fox_record_fold(fox_record *r, fox_engine *e, const fox_fold_report *rep, int64_t op_id)
{
    char name[64];
    if (!r)
        return;
    fox_tevent ev = {.type = FOX_TEVENT_FOLD_END};
    ev.u.fold_end.report = rep;
    metrics_line(r, &ev, op_id);
    cJSON_AddItemToArray(r->folds, fox_render_fold(rep));
    snprintf(name, sizeof name, "fold%d-last.ckpt", rep->fold);
    save_checkpoint(r, e, name);
    sidecar(r, e, name, rep->fold, rep->epochs_done - 1, r->last_val, r->last_test);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "fold%d", rep->fold);
    write_baselines(r, prefix, rep);
    write_equity(r, e, prefix);
    r->chosen.n = 0;
}

int
fox_record_backtest(fox_record *r, fox_engine *e, cJSON **result)
{
    fox_fold_report rep;
    fox_engine_info info;
    *result = NULL;
    r->backtest = 1;
    int rv = fox_engine_backtest(e, &rep);
    if (rv != FOX_OK)
        return rv;
    curve_copy(&r->chosen, &r->epoch_test);
    write_baselines(r, "backtest", &rep);
    write_equity(r, e, "backtest");
    fox_engine_get_info(e, &info);
    cJSON *o = cJSON_CreateObject();
    add_bars(o, "bars", info.test_begin, info.test_end);
    add_bars(o, "val_bars", info.val_begin, info.val_end);
    /* The fold object, as a fold's table block shows it: the policy and every baseline. */
    cJSON_AddItemToObject(o, "fold", fox_render_fold(&rep));
    cJSON_AddItemToObject(o, "policy", fox_render_eval(&rep.test_at_best));
    cJSON_AddStringToObject(o, "run_dir", r->dir);
    write_json(r, "backtest.json", o);
    *result = o;
    return FOX_OK;
}

/*
 * A line foxplot wrote on its stderr, into the log with a time and a level:
 * its closing line where the pictures are, at info; anything else (a file
 * it refused, what gnuplot said) is a warning.
 */
static void
plot_said(void *arg, const char *line)
{
    (void)arg;
    if (!line[0])
        return;
    fox_log(strncmp(line, "foxplot: pictures in ", 21) ? FOX_LOG_WARNING : FOX_LOG_INFO, "%s",
            line);
}

int
fox_record_plot(const char *dir)
{
    char prog[FOX_PATH_MAX];
    fox_find_program("foxplot", "FOXPLOT", prog, sizeof prog);
    char *argv[] = {prog, (char *)dir, NULL};
    int st = fox_run_program(argv, plot_said, NULL);
    if (st < 0)
        fox_log(FOX_LOG_WARNING, "no pictures: cannot run %s: %s", prog, strerror(errno));
    return st == 0 ? 0 : -1;
}

void
fox_record_close(fox_record *r, fox_engine *e, const fox_fold_report *partial)
{
    if (!r)
        return;
    if (r->folds && !r->backtest) {
        if (partial)
            cJSON_AddItemToArray(r->folds, fox_render_fold(partial));
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddItemReferenceToObject(doc, "folds", r->folds);
        write_json(r, "folds.json", doc);
        cJSON_Delete(doc);
    }
    if (e) {
        fox_engine_set_eval_hook(e, NULL, NULL);
        fox_record_plot(r->dir);
    }
    if (r->owns_log)
        fox_log_copy_to(NULL);
    cJSON_Delete(r->folds);
    curve_free(&r->epoch_test);
    curve_free(&r->chosen);
    curve_free(&r->buy_hold);
    free(r);
}
