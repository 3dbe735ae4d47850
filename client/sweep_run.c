/*
 * sweep_run.c — a sweep's jobs over foxd endpoints: one thread per
 * endpoint takes the next pending job, sets its config, runs its fold from a
 * fresh engine and polls `status` until the op ends; the main thread shows
 * the progress of the whole sweep. See sweep_run.h.
 *
 * A daemon that stops answering loses only the job it was running: the job
 * goes back to the queue for another endpoint (or the same one once it
 * answers again) and fails only after sweep_run_opts.attempts such losses.
 * A daemon busy with something else (ESTATE, EBUSY) is left alone for a
 * while. What it does not do: run two jobs on one daemon at a time.
 */
#include <ctype.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/print.h"
#include "client/sweep_run.h"
#include "common/clock.h"

/* Engine creation (CUDA context, data) may take a while on a loaded host. */
#define LONG_CALL_MS 120000
#define POLL_MS 300
#define BUSY_BACKOFF_S 5
#define DOWN_RETRY_S 2

typedef enum { JOB_OK, JOB_FAILED, JOB_LOST, JOB_BUSY, JOB_STOPPED } job_outcome;

typedef struct sweep_ctx {
    foxctl_opts *o;
    sweep_plan *p;
    const sweep_run_opts *ro;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_up;          /* endpoints answering now */
    double last_up;    /* monotonic seconds when one last answered */
    int n_done_here;   /* jobs finished by this invocation, for the time left */
    double wall_sum;
    int give_up;       /* no endpoint for wait_s: the workers stop */
    int write_errors;
} sweep_ctx;

typedef struct worker {
    sweep_ctx *ctx;
    const char *url;
    foxctl_conn conn;
    int up;
    cJSON *found; /* the daemon's values of the keys the sweep sets, as first seen (owned) */
} worker;

static double
now_s(void)
{
    return (double)fox_mono_ms() / 1000.0;
}

static int
finished(const sweep_ctx *c)
{
    for (int i = 0; i < c->p->n_jobs; i++)
        if (c->p->jobs[i].state == SWEEP_PENDING || c->p->jobs[i].state == SWEEP_RUNNING)
            return 0;
    return 1;
}

static int
stopping(const sweep_ctx *c)
{
    return foxctl_interrupted || c->give_up;
}

/* Sleep up to s seconds, waking early when the sweep ends. */
static void
nap(sweep_ctx *c, int s)
{
    for (int i = 0; i < s * 10; i++) {
        pthread_mutex_lock(&c->mu);
        int end = finished(c) || stopping(c);
        pthread_mutex_unlock(&c->mu);
        if (end)
            return;
        usleep(100000);
    }
}

/* With c->mu held: wait up to ms for a job's state to change (c->cv), or less. */
static void
wait_change(sweep_ctx *c, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)ms * 1000000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

/* The next pending job, or NULL once none is pending or running (or the sweep stops). */
static sweep_job *
take_job(sweep_ctx *c)
{
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (stopping(c) || finished(c)) {
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        for (int i = 0; i < c->p->n_jobs; i++) {
            sweep_job *j = &c->p->jobs[i];
            /* A pack runs as its lead: its members go with it. */
            if (j->state == SWEEP_PENDING && j->lead == i) {
                for (int k = i; k >= 0; k = c->p->jobs[k].next) {
                    c->p->jobs[k].state = SWEEP_RUNNING;
                    c->p->jobs[k].started = now_s();
                }
                pthread_mutex_unlock(&c->mu);
                return j;
            }
        }
        /* Every job left runs elsewhere; one may come back if its daemon dies. */
        wait_change(c, 1000);
    }
}

static void
set_up(worker *w, int up)
{
    sweep_ctx *c = w->ctx;
    pthread_mutex_lock(&c->mu);
    if (up != w->up)
        c->n_up += up ? 1 : -1;
    if (up)
        c->last_up = now_s();
    w->up = up;
    pthread_mutex_unlock(&c->mu);
}

static void
set_timeout(foxctl_conn *conn, int ms)
{
    conn->timeout_ms = ms;
    nng_socket_set_ms(conn->req, NNG_OPT_SENDTIMEO, ms);
    nng_socket_set_ms(conn->req, NNG_OPT_RECVTIMEO, ms);
}

/*
 * One request: JOB_OK with *rep filled, JOB_LOST when the daemon did not
 * answer, JOB_BUSY for ESTATE/EBUSY, else JOB_FAILED with the reason in msg.
 */
static job_outcome
ask(worker *w, const char *cmd, cJSON *args, int timeout_ms, fox_reply *rep, char *msg, size_t len)
{
    char err[512];
    set_timeout(&w->conn, timeout_ms);
    int rv = foxctl_call(&w->conn, cmd, args, rep, err, sizeof err);
    if (rv != FOXCTL_OK) {
        snprintf(msg, len, "%s", err);
        return JOB_LOST;
    }
    if (rep->ok)
        return JOB_OK;
    snprintf(msg, len, "%s: %s: %s", cmd, rep->code_name, rep->message);
    int busy = !strcmp(rep->code_name, "ESTATE") || !strcmp(rep->code_name, "EBUSY");
    fox_reply_fini(rep);
    return busy ? JOB_BUSY : JOB_FAILED;
}

/* A run directory named by foxd for the run, wherever it says it: status's run, or a fold. */
static const char *
reported_run_dir(const cJSON *run, const cJSON *folds)
{
    static const char *const names[] = {"run_dir", "dir"};
    for (size_t i = 0; i < 2; i++) {
        const char *d = foxctl_jstr(run, names[i], NULL);
        if (d)
            return d;
        for (const cJSON *f = folds ? folds->child : NULL; f; f = f->next)
            if ((d = foxctl_jstr(f, names[i], NULL)))
                return d;
    }
    return NULL;
}

/* Poll status until op ends: its fold objects into record. */
static job_outcome
wait_op(worker *w, int64_t op, cJSON *record, char *msg, size_t len)
{
    const foxctl_opts *o = w->ctx->o;
    for (;;) {
        fox_reply rep;
        if (foxctl_interrupted)
            return JOB_STOPPED;
        usleep(POLL_MS * 1000);
        job_outcome out = ask(w, "status", NULL, o->timeout_ms, &rep, msg, len);
        if (out != JOB_OK)
            return out == JOB_BUSY ? JOB_LOST : out;
        char st[16] = "";
        const cJSON *ops = cJSON_GetObjectItemCaseSensitive(rep.result, "ops");
        for (const cJSON *it = ops ? ops->child : NULL; it; it = it->next)
            if (foxctl_jnum(it, "op_id", 0) == (double)op) {
                snprintf(st, sizeof st, "%s", foxctl_jstr(it, "state", "running"));
                snprintf(msg, len, "%s", foxctl_jstr(it, "message", ""));
            }
        if (!st[0]) {
            /* A restarted daemon numbers its ops afresh: ours is gone with the old one. */
            snprintf(msg, len, "%s no longer knows op %lld (restarted?)", w->url, (long long)op);
            fox_reply_fini(&rep);
            return JOB_LOST;
        }
        if (!strcmp(st, "running")) {
            fox_reply_fini(&rep);
            continue;
        }
        const cJSON *run = cJSON_GetObjectItemCaseSensitive(rep.result, "run");
        const cJSON *folds = cJSON_GetObjectItemCaseSensitive(run, "folds_done");
        int64_t run_op = (int64_t)foxctl_jnum(run, "op_id", 0);
        if (run_op != op) {
            /* Another run on the daemon replaced ours: its folds must not be taken for this job's. */
            snprintf(msg, len, "%s ran op %lld after op %lld, whose folds are gone", w->url,
                     (long long)run_op, (long long)op);
            fox_reply_fini(&rep);
            return JOB_LOST;
        }
        if (folds) {
            cJSON_AddItemToObject(record, "folds", cJSON_Duplicate(folds, 1));
            const char *dir = reported_run_dir(run, folds);
            if (dir && !cJSON_GetObjectItemCaseSensitive(record, "run_dir"))
                cJSON_AddStringToObject(record, "run_dir", dir);
        }
        fox_reply_fini(&rep);
        if (!strcmp(st, "done"))
            return JOB_OK;
        if (!msg[0])
            snprintf(msg, len, "op %lld %s", (long long)op, st);
        return JOB_FAILED;
    }
}

/*
 * One job (or a pack, as its lead: foxctl_sweep_run_values, the members'
 * values of the keys they hold apart as lists) on this worker's daemon:
 * config, fresh run, wait.
 */
static job_outcome
run_job(worker *w, sweep_job *j, cJSON *record, char *msg, size_t len)
{
    const sweep_plan *p = w->ctx->p;
    fox_reply rep;
    cJSON *args = cJSON_CreateObject();
    cJSON_AddItemToObject(args, "values", foxctl_sweep_run_values(p, j));
    /* The fresh run below replaces the engine whatever it holds: the keys may recreate it now. */
    cJSON_AddTrueToObject(args, "force");
    job_outcome out = ask(w, "config_set", args, LONG_CALL_MS, &rep, msg, len);
    if (out != JOB_OK)
        return out;
    fox_reply_fini(&rep);
    /* The effective config: the daemon's own keys beside the job's, for the record. */
    if (ask(w, "config_get", NULL, w->ctx->o->timeout_ms, &rep, msg, len) == JOB_OK) {
        const cJSON *vals = cJSON_GetObjectItemCaseSensitive(rep.result, "values");
        if (vals)
            cJSON_AddItemToObject(record, "effective_config", cJSON_Duplicate(vals, 1));
        fox_reply_fini(&rep);
    }
    args = cJSON_CreateObject();
    cJSON *folds = cJSON_AddArrayToObject(args, "folds");
    cJSON_AddItemToArray(folds, cJSON_CreateNumber(j->fold));
    if (p->epochs)
        cJSON_AddNumberToObject(args, "epochs", p->epochs);
    if (p->steps_per_epoch)
        cJSON_AddNumberToObject(args, "steps_per_epoch", p->steps_per_epoch);
    cJSON_AddTrueToObject(args, "fresh");
    if ((out = ask(w, "run", args, LONG_CALL_MS, &rep, msg, len)) != JOB_OK)
        return out;
    int64_t op = (int64_t)foxctl_jnum(rep.result, "op_id", 0);
    /* The run's answer names its run directory: the job's checkpoints and curves are there. */
    const char *dir = foxctl_jstr(rep.result, "run_dir", NULL);
    if (dir && dir[0])
        cJSON_AddStringToObject(record, "run_dir", dir);
    fox_reply_fini(&rep);
    out = wait_op(w, op, record, msg, len);
    if (out == JOB_STOPPED) {
        /* Interrupted: the sweep stops the run it started, then keeps what finished. */
        if (ask(w, "stop", NULL, w->ctx->o->timeout_ms, &rep, msg, len) == JOB_OK)
            fox_reply_fini(&rep);
    }
    return out;
}

/* The kind of a member's halt as a fold object's "halted" names it. */
static const char *
halt_kind(const char *member_halt)
{
    return !strcmp(member_halt, "nan") ? "halt_nan" : "halt_grad_collapse";
}

/*
 * Fold object f of a packed run as member k's job sees it: the policy's
 * figures are member k's own (its chosen epoch, validation and test Sharpe,
 * SE, turnover, band), those a member's report does not carry are null
 * unless k is the run's lead, the paired differences with the baselines go
 * (they are the lead's), and a member that halted is marked as a fold
 * halted alone would be. The baselines are the run's: they do not learn.
 */
static cJSON *
member_fold(const cJSON *f, int k)
{
    static const char *const lead_only[] = {
        "test_sharpe_gross", "test_max_drawdown", "test_sharpe_last", "test_sharpe_mean",
        "select_score",      "oracle_fraction",   "final_loss"};
    static const char *const own[][2] = {
        {"best_epoch", "epoch"},        {"best_val_sharpe", "val_sharpe"},
        {"test_sharpe", "test_sharpe"}, {"test_sharpe_se", "test_sharpe_se"},
        {"test_turnover", "turnover"},  {"band", "band"}};
    cJSON *o = cJSON_Duplicate(f, 1);
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(f, "members");
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(members, "each"), k);
    if (!o || !m)
        return o;
    cJSON_DeleteItemFromObjectCaseSensitive(o, "members");
    if (foxctl_jnum(members, "lead", 0) != k) {
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, own[i][1]);
            cJSON_ReplaceItemInObjectCaseSensitive(o, own[i][0],
                                                   v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
        }
        for (size_t i = 0; i < sizeof lead_only / sizeof lead_only[0]; i++)
            cJSON_ReplaceItemInObjectCaseSensitive(o, lead_only[i], cJSON_CreateNull());
        cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "baselines");
        for (cJSON *it = b ? b->child : NULL; it; it = it->next) {
            cJSON_DeleteItemFromObjectCaseSensitive(it, "policy_diff");
            cJSON_DeleteItemFromObjectCaseSensitive(it, "policy_diff_se");
        }
    }
    const char *halt = foxctl_jstr(m, "halt", NULL);
    if (halt && !cJSON_GetObjectItemCaseSensitive(o, "halted")) {
        cJSON *h = cJSON_AddObjectToObject(o, "halted");
        const char *slot = foxctl_jstr(m, "halt_slot", NULL);
        cJSON_AddStringToObject(h, "kind", halt_kind(halt));
        cJSON_AddNumberToObject(h, "step", foxctl_jnum(m, "halt_step", -1));
        cJSON *slots = cJSON_AddArrayToObject(h, "slots");
        if (slot)
            cJSON_AddItemToArray(slots, cJSON_CreateString(slot));
    }
    return o;
}

/*
 * The record of job m of the pack led by j: the run's record with member
 * m->member's fold objects, and where it came from ("packed").
 */
static cJSON *
member_record(const sweep_job *j, const sweep_job *m, const cJSON *record)
{
    cJSON *r = cJSON_Duplicate(record, 1);
    const cJSON *folds = cJSON_GetObjectItemCaseSensitive(record, "folds");
    if (!r || !folds)
        return r;
    cJSON *mine = cJSON_CreateArray();
    for (const cJSON *f = folds->child; f; f = f->next)
        cJSON_AddItemToArray(mine, member_fold(f, m->member));
    cJSON_ReplaceItemInObjectCaseSensitive(r, "folds", mine);
    cJSON *pk = cJSON_AddObjectToObject(r, "packed");
    cJSON_AddStringToObject(pk, "run", j->id);
    cJSON_AddNumberToObject(pk, "members", j->members);
    cJSON_AddNumberToObject(pk, "member", m->member);
    return r;
}

/*
 * Write the result file of job j and of every member of its pack, each
 * from its own copy of the run's record. FOXCTL_OK or FOXCTL_EREPLY.
 */
static int
write_pack(const sweep_plan *p, const sweep_job *j, const cJSON *record, int failed)
{
    int rv = FOXCTL_OK;
    for (int k = (int)(j - p->jobs); k >= 0; k = p->jobs[k].next) {
        cJSON *r =
            j->members > 1 ? member_record(j, &p->jobs[k], record) : cJSON_Duplicate(record, 1);
        if (!r || foxctl_sweep_write_job(p, &p->jobs[k], r, failed) != FOXCTL_OK)
            rv = FOXCTL_EREPLY;
        cJSON_Delete(r);
    }
    return rv;
}

/* The outcome of job j's run for j and every member of its pack: records, states, messages. */
static void
finish_job(worker *w, sweep_job *j, job_outcome out, cJSON *record, const char *msg)
{
    sweep_ctx *c = w->ctx;
    double wall = now_s() - j->started;
    cJSON_AddStringToObject(record, "endpoint", w->url);
    cJSON_AddNumberToObject(record, "wall_s", round(wall * 1000.0) / 1000.0);
    if (out == JOB_FAILED)
        cJSON_AddStringToObject(record, "error", msg);
    int wrote = out == JOB_OK || out == JOB_FAILED ? write_pack(c->p, j, record, out == JOB_FAILED)
                                                   : FOXCTL_OK;
    pthread_mutex_lock(&c->mu);
    if (wrote != FOXCTL_OK)
        c->write_errors++;
    switch (out) {
    case JOB_OK:
        j->state = SWEEP_DONE;
        c->n_done_here += j->members;
        c->wall_sum += wall * j->members;
        break;
    case JOB_FAILED:
        j->state = SWEEP_FAILED;
        fprintf(stderr, "%ssweep: job %s failed on %s: %s\n", isatty(2) ? "\n" : "", j->id,
                w->url, msg);
        break;
    case JOB_LOST:
        j->state = ++j->attempts >= c->ro->attempts ? SWEEP_FAILED : SWEEP_PENDING;
        fprintf(stderr, "%ssweep: job %s lost with %s (%s); %s\n", isatty(2) ? "\n" : "", j->id,
                w->url, msg,
                j->state == SWEEP_FAILED ? "no tries left" : "queued again");
        if (j->state == SWEEP_FAILED) {
            cJSON_AddStringToObject(record, "error", msg);
            write_pack(c->p, j, record, 1);
        }
        break;
    case JOB_BUSY:
    case JOB_STOPPED:
        j->state = SWEEP_PENDING;
        break;
    }
    /* The pack's members share its lead's fate. */
    for (int k = j->next; k >= 0; k = c->p->jobs[k].next)
        c->p->jobs[k].state = j->state;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/*
 * The daemon's values of the keys the sweep's jobs set (every job sets the
 * same keys), so that the sweep can leave its config as it found it.
 */
static void
remember_config(worker *w)
{
    fox_reply rep;
    char msg[512];
    cJSON *args = cJSON_CreateObject();
    cJSON *keys = cJSON_AddArrayToObject(args, "keys");
    for (const cJSON *v = w->ctx->p->jobs[0].values->child; v; v = v->next)
        cJSON_AddItemToArray(keys, cJSON_CreateString(v->string));
    /* A plan that packs sets engine.members beside the jobs' keys (a sweep that sets it packs
     * nothing). */
    if (w->ctx->p->packs)
        cJSON_AddItemToArray(keys, cJSON_CreateString("engine.members"));
    if (ask(w, "config_get", args, w->ctx->o->timeout_ms, &rep, msg, sizeof msg) != JOB_OK)
        return;
    w->found = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(rep.result, "values"), 1);
    fox_reply_fini(&rep);
    /* A member key's list comes as an array and goes back as its text. */
    for (cJSON *v = w->found ? w->found->child : NULL, *next; v; v = next) {
        next = v->next;
        if (cJSON_IsArray(v))
            cJSON_ReplaceItemInObjectCaseSensitive(w->found, v->string, foxctl_sweep_list_text(v));
    }
}

/* Put back what remember_config saw; a later sweep or run then starts from it. */
static void
restore_config(worker *w)
{
    fox_reply rep;
    char msg[512];
    if (!w->found || !w->conn.open)
        return;
    cJSON *args = cJSON_CreateObject();
    cJSON_AddItemToObject(args, "values", cJSON_Duplicate(w->found, 1));
    /* The engine holds a job's training, which the sweep keeps in its records, not there. */
    cJSON_AddTrueToObject(args, "force");
    /* After an interrupt the stopped run needs a chunk to end: try for a few seconds. */
    job_outcome out = JOB_BUSY;
    for (int i = 0; i < 20 && out == JOB_BUSY; i++) {
        out = ask(w, "config_set", cJSON_Duplicate(args, 1), LONG_CALL_MS, &rep, msg, sizeof msg);
        if (out == JOB_BUSY)
            usleep(250000);
    }
    if (out == JOB_OK)
        fox_reply_fini(&rep);
    else
        fprintf(stderr, "sweep: %s: could not restore its config (%s)\n", w->url, msg);
    cJSON_Delete(args);
}

static void *
worker_main(void *arg)
{
    worker *w = arg;
    sweep_ctx *c = w->ctx;
    char err[512];
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int end = finished(c) || stopping(c);
        pthread_mutex_unlock(&c->mu);
        if (end)
            break;
        if (!w->conn.open) {
            if (foxctl_open(&w->conn, w->url, c->o->token, c->o->timeout_ms, &c->o->tls, err,
                            sizeof err) != FOXCTL_OK) {
                foxctl_close(&w->conn);
                set_up(w, 0);
                nap(c, DOWN_RETRY_S);
                continue;
            }
        }
        fox_reply rep;
        /* Dialing succeeds before a daemon answers: only an answer counts as up. */
        if (ask(w, "version", NULL, c->o->timeout_ms, &rep, err, sizeof err) != JOB_OK) {
            foxctl_close(&w->conn);
            set_up(w, 0);
            nap(c, DOWN_RETRY_S);
            continue;
        }
        fox_reply_fini(&rep);
        set_up(w, 1);
        if (!w->found)
            remember_config(w);
        sweep_job *j = take_job(c);
        if (!j)
            break;
        char msg[1024] = "";
        cJSON *record = cJSON_CreateObject();
        job_outcome out = run_job(w, j, record, msg, sizeof msg);
        finish_job(w, j, out, record, msg);
        cJSON_Delete(record);
        if (out == JOB_LOST) {
            foxctl_close(&w->conn);
            set_up(w, 0);
            nap(c, DOWN_RETRY_S);
        } else if (out == JOB_BUSY) {
            nap(c, BUSY_BACKOFF_S);
        } else if (out == JOB_STOPPED) {
            break;
        }
    }
    restore_config(w);
    cJSON_Delete(w->found);
    if (w->conn.open)
        foxctl_close(&w->conn);
    return NULL;
}

static void
fmt_duration(char *buf, size_t len, double s)
{
    if (s < 90)
        snprintf(buf, len, "%.0fs", s);
    else if (s < 5400)
        snprintf(buf, len, "%.0fm%02.0fs", floor(s / 60), fmod(s, 60));
    else
        snprintf(buf, len, "%.0fh%02.0fm", floor(s / 3600), fmod(floor(s / 60), 60));
}

/* One line of the whole sweep's progress; on a terminal it replaces the last one. */
static void
show_progress(sweep_ctx *c, int tty, char *last, size_t lastlen)
{
    int n[4] = {0, 0, 0, 0};
    double running_for = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->p->n_jobs; i++) {
        n[c->p->jobs[i].state]++;
        if (c->p->jobs[i].state == SWEEP_RUNNING)
            running_for += now_s() - c->p->jobs[i].started;
    }
    int up = c->n_up, here = c->n_done_here;
    double mean = here ? c->wall_sum / here : 0;
    pthread_mutex_unlock(&c->mu);
    char left[64] = "time left unknown";
    if (here > 0) {
        /* The jobs not yet started, plus what the running ones still need, over the daemons up. */
        double work = mean * (n[SWEEP_PENDING] + n[SWEEP_RUNNING]) - running_for;
        char d[32];
        fmt_duration(d, sizeof d, fmax(work, 0) / (up > 0 ? up : 1));
        snprintf(left, sizeof left, "~%s left", d);
    }
    char line[256];
    snprintf(line, sizeof line, "sweep: %d/%d done, %d running, %d failed; %d/%d endpoints up; %s",
             n[SWEEP_DONE], c->p->n_jobs, n[SWEEP_RUNNING], n[SWEEP_FAILED], up,
             c->ro->n_endpoints, left);
    if (tty) {
        fprintf(stderr, "\r\033[K%s", line);
    } else if (strcmp(line, last) != 0) {
        /* Logs get a line when something changed, not a line a second. */
        char a[256], b[256];
        snprintf(a, sizeof a, "%s", line);
        snprintf(b, sizeof b, "%s", last);
        char *ta = strstr(a, "; ~"), *tb = strstr(b, "; ~");
        if (ta)
            *ta = 0;
        if (tb)
            *tb = 0;
        if (strcmp(a, b) != 0)
            fprintf(stderr, "%s\n", line);
    }
    snprintf(last, lastlen, "%s", line);
}

/*
 * path without empty and "." components, each ".." taking away the one
 * before it where there is one.
 */
static void
clean_path(const char *path, char *out, size_t len)
{
    size_t n = 0;
    if (*path == '/' && len > 1)
        out[n++] = '/';
    out[n] = 0;
    for (const char *c = path; *c;) {
        size_t k = strcspn(c, "/");
        const char *last = strrchr(out, '/');
        last = last ? last + 1 : out;
        if (k == 2 && !strncmp(c, "..", 2) && *last && strcmp(last, "..") != 0) {
            char *slash = strrchr(out, '/');
            n = slash ? (size_t)(slash - out) + (slash == out) : 0;
            out[n] = 0;
        } else if (k > 0 && !(k == 1 && *c == '.') && n + k + 2 < len) {
            n += (size_t)snprintf(out + n, len - n, "%s%.*s", n && out[n - 1] != '/' ? "/" : "",
                                  (int)k, c);
        }
        c += k + (c[k] == '/');
    }
}

/*
 * url as one text per address: the scheme and, for tcp, the host in lower
 * case without a trailing '/'; for ipc, the path with its directory
 * resolved (".", "..", "//" and links) where it exists, else cleaned as
 * text, the socket itself being maybe not there yet.
 */
static void
endpoint_key(const char *url, char *out, size_t len)
{
    const char *sep = strstr(url, "://");
    size_t n = 0;
    if (!sep) {
        snprintf(out, len, "%s", url);
        return;
    }
    for (const char *c = url; c < sep && n + 1 < len; c++)
        out[n++] = (char)tolower((unsigned char)*c);
    out[n] = 0;
    const char *rest = sep + 3;
    if (!strcmp(out, "ipc")) {
        char clean[PATH_MAX], dir[PATH_MAX], real[PATH_MAX];
        clean_path(rest, clean, sizeof clean);
        snprintf(dir, sizeof dir, "%s", clean);
        const char *slash = strrchr(clean, '/');
        if (realpath(dirname(dir), real))
            snprintf(out + n, len - n, "://%s%s%s", real, strcmp(real, "/") ? "/" : "",
                     slash ? slash + 1 : clean);
        else
            snprintf(out + n, len - n, "://%s", clean);
        return;
    }
    snprintf(out + n, len - n, "://");
    for (n = strlen(out); *rest && n + 1 < len; rest++)
        out[n++] = (char)tolower((unsigned char)*rest);
    while (n > 0 && out[n - 1] == '/')
        n--;
    out[n] = 0;
}

int
foxctl_sweep_check_endpoints(const sweep_run_opts *ro)
{
    char a[PATH_MAX + 16], b[PATH_MAX + 16];
    for (int i = 0; i < ro->n_endpoints; i++) {
        endpoint_key(ro->endpoints[i], a, sizeof a);
        for (int k = 0; k < i; k++) {
            endpoint_key(ro->endpoints[k], b, sizeof b);
            if (!strcmp(a, b)) {
                fprintf(stderr,
                        "foxctl: sweep: --endpoints: '%s' and '%s' are the same daemon (%s); "
                        "list each daemon once: a daemon runs one job at a time\n",
                        ro->endpoints[k], ro->endpoints[i], a);
                return FOXCTL_USAGE;
            }
        }
    }
    return FOXCTL_OK;
}

int
foxctl_sweep_run(foxctl_opts *o, sweep_plan *p, const sweep_run_opts *ro)
{
    sweep_ctx c = {.o = o, .p = p, .ro = ro, .last_up = now_s()};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    worker *w = calloc((size_t)ro->n_endpoints, sizeof *w);
    pthread_t *th = calloc((size_t)ro->n_endpoints, sizeof *th);
    if (!w || !th) {
        free(w);
        free(th);
        return FOXCTL_USAGE;
    }
    for (int i = 0; i < ro->n_endpoints; i++) {
        w[i].ctx = &c;
        w[i].url = ro->endpoints[i];
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    int tty = isatty(STDERR_FILENO);
    char last[256] = "";
    for (;;) {
        show_progress(&c, tty, last, sizeof last);
        pthread_mutex_lock(&c.mu);
        int end = finished(&c) || foxctl_interrupted;
        if (!end && c.n_up == 0 && now_s() - c.last_up > ro->wait_s) {
            c.give_up = 1;
            fprintf(stderr, "\nsweep: no endpoint has answered for %d s; stopping (finished jobs "
                            "are kept)\n", ro->wait_s);
        }
        end = end || c.give_up;
        /* The progress again after a while, or as soon as a job ends: the sweep ends with its
         * last job, not up to a second later. */
        if (!end)
            wait_change(&c, tty ? 250 : 1000);
        pthread_mutex_unlock(&c.mu);
        if (end)
            break;
    }
    for (int i = 0; i < ro->n_endpoints; i++)
        pthread_join(th[i], NULL);
    show_progress(&c, tty, last, sizeof last);
    if (tty)
        fputc('\n', stderr);
    int failed = 0, left = 0;
    for (int i = 0; i < p->n_jobs; i++) {
        failed += p->jobs[i].state == SWEEP_FAILED;
        left += p->jobs[i].state == SWEEP_PENDING || p->jobs[i].state == SWEEP_RUNNING;
    }
    free(w);
    free(th);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    if (foxctl_interrupted)
        return FOXCTL_INTERRUPTED;
    if (c.write_errors || failed)
        return FOXCTL_EREPLY;
    return left ? FOXCTL_NODAEMON : FOXCTL_OK;
}
