/*
 * server.c — foxd's serving mode: the libuv loop thread, the nng REP and PUB
 * sockets, authorization, signals, timers (watchdog, STATUS, Prometheus
 * textfile) and the orderly shutdown. Where it listens is endpoints.c, the
 * memory of mutating requests dedup.c.
 *
 * Threads (docs/design.md, "Threads and data flow"):
 *   - nng's threads run the aio callbacks: they only move a finished receive
 *     onto the inbox and wake the loop (uv_async_send coalesces, so the wake
 *     handler drains the whole inbox), or re-arm a receive after a send;
 *   - the trainer thread (trainer.c) hands completed commands to the outbox
 *     the same way, and publishes events itself (publishing is locked);
 *   - the probe thread (endpoints.c) dials our own ipc endpoints now and
 *     then, since an nng 1.5.2 listener can stop accepting; two failures in
 *     a row make the loop listen again;
 *   - the loop thread owns everything else and sends every reply.
 *
 * What it does not do: parse JSON (proto/), build results (answer.c) or
 * touch the engine (trainer.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <uv.h>

#include "common/clock.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "daemon/answer.h"
#include "daemon/dedup.h"
#include "daemon/endpoints.h"
#include "daemon/fdreserve.h"
#include "daemon/metrics_http.h"
#include "daemon/foxd.h"
#include "daemon/notify.h"
#include "daemon/render.h"
#include "daemon/trainer.h"

#define STATUS_PERIOD_MS 5000
#define STOP_EXTEND_USEC 120000000ULL /* asked for while the stop checkpoint is written */
#define LINGER_MS        1000         /* wait for the last replies to leave before closing */
#define STATE_LOCK       "foxd.lock"  /* the state directory's lock file */
#define STATE_SCAN_DEPTH 3            /* levels of the state directory searched for stale temps */
#define MMAP_THRESHOLD   (128 * 1024) /* malloc blocks from this size go back to the system on free */
#define METRICS_HTTP_MS  1000         /* age at most of what /metrics serves */
#define REFUSAL_LOG_MS   1000         /* at most one line about refused requests this often */
#define IDLE_SWEEP_MIN_MS  100          /* idle connections are looked for at most this often */
#define IDLE_SWEEP_MAX_MS  5000         /* and at least this often */

enum { W_RECV = 0, W_BUSY, W_SEND };

typedef struct server server;

/* One in-flight request: nng's demo/async work item (STYLE.md). */
typedef struct fox_work {
    _Atomic int state;
    nng_aio *aio;
    nng_ctx ctx;
    nng_msg *msg; /* the request, while BUSY */
    uint32_t pipe_id; /* the connection it came by: busy (pipes.h) until the reply leaves */
    server *srv;
    struct fox_work *next; /* inbox, or a dedup entry's waiters */
} work;

struct server {
    fox_dconf d;
    uv_loop_t loop;
    uv_async_t wake;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t t_watchdog, t_status, t_metrics, t_linger, t_http, t_idle;

    nng_socket rep, pub;
    int rep_open, pub_open;
    fox_endpoints ends;
    fox_metrics_http *http; /* /metrics, when daemon.metrics_listen is set */

    work *works;
    int n_works;

    pthread_mutex_t lock; /* inbox, outbox, relisten */
    work *in_head, *in_tail;
    fox_tcmd *out_head, *out_tail;
    int relisten_mask; /* endpoints the probe found deaf */

    pthread_mutex_t pub_lock;
    uint64_t seq;

    fox_trainer *trainer;
    fox_counters counters;
    fox_dedup dedup;
    int state_lock_fd; /* flock on the state directory, held for the daemon's life */

    int64_t refusal_logged_ms; /* when the last refusal was logged */
    long refusals_unlogged;    /* refusals since then, not logged */

    uint64_t watchdog_usec;
    int stopping; /* shutdown begun: no new mutating commands */
    int closing;  /* the trainer is done: tearing down */
    int64_t linger_until;
    int exit_code;
    int signals;
};

static void begin_shutdown(server *s, const char *why);

/* ------------------------------------------------------------------ events */

/* Publish one event; any thread. seq is taken under the lock so it is monotonic on the wire. */
static void
publish_event(server *s, const char *type, cJSON *data)
{
    pthread_mutex_lock(&s->pub_lock);
    char *ev = fox_proto_event(++s->seq, fox_wall_ms(), type, data);
    if (ev && s->pub_open) {
        /* PUB never blocks: a slow subscriber loses the oldest events and sees a seq gap. */
        int rv = nng_send(s->pub, ev, strlen(ev), NNG_FLAG_NONBLOCK);
        if (rv != 0 && rv != NNG_EAGAIN)
            fox_log(FOX_LOG_DEBUG, "event %s not sent: %s", type, nng_strerror(rv));
    }
    s->counters.events++;
    pthread_mutex_unlock(&s->pub_lock);
    free(ev);
}

/* The trainer's events hook: render the event and publish it. */
static void
trainer_event(void *arg, const fox_tevent *ev)
{
    publish_event(arg, fox_render_event_name(ev), fox_render_event(ev));
}

/* ------------------------------------------------------------ nng callbacks */

static void
wake_loop(server *s)
{
    uv_async_send(&s->wake);
}

static void
work_cb(void *arg)
{
    work *w = arg;
    server *s = w->srv;
    int rv = nng_aio_result(w->aio);

    switch (atomic_load(&w->state)) {
    case W_RECV:
        if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
            return; /* shutting down */
        if (rv != 0) {
            nng_ctx_recv(w->ctx, w->aio);
            return;
        }
        w->msg = nng_aio_get_msg(w->aio);
        w->pipe_id = nng_pipe_id(nng_msg_get_pipe(w->msg));
        fox_pipes_begin(&s->ends.pipes, w->pipe_id);
        atomic_store(&w->state, W_BUSY);
        pthread_mutex_lock(&s->lock);
        w->next = NULL;
        if (s->in_tail)
            s->in_tail->next = w;
        else
            s->in_head = w;
        s->in_tail = w;
        pthread_mutex_unlock(&s->lock);
        wake_loop(s);
        return;
    case W_SEND:
        if (rv != 0)
            nng_msg_free(nng_aio_get_msg(w->aio)); /* not sent: still ours */
        if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
            atomic_store(&w->state, W_RECV);
            return;
        }
        atomic_store(&w->state, W_RECV);
        nng_ctx_recv(w->ctx, w->aio);
        return;
    default:
        return;
    }
}

/* The trainer's done hook: enqueue, wake. */
static void
trainer_done(void *arg, fox_tcmd *c)
{
    server *s = arg;
    pthread_mutex_lock(&s->lock);
    c->next = NULL;
    if (s->out_tail)
        s->out_tail->next = c;
    else
        s->out_head = c;
    s->out_tail = c;
    pthread_mutex_unlock(&s->lock);
    wake_loop(s);
}

/* ---------------------------------------------------------------- replies */

/* Send reply (a copy is made) on w's context. */
static void
send_reply(server *s, work *w, const char *reply, int ok)
{
    nng_msg *m = w->msg;
    w->msg = NULL;
    fox_pipes_end(&s->ends.pipes, w->pipe_id, fox_mono_ms());
    s->counters.requests++;
    if (!ok)
        s->counters.errors++;
    /* A large request's buffer is not kept for a small reply: it would stay allocated. */
    if (m && nng_msg_capacity(m) > FOX_PROTO_MAX_MSG) {
        nng_msg_free(m);
        m = NULL;
    }
    if (!m && nng_msg_alloc(&m, 0) != 0)
        goto fail;
    nng_msg_clear(m);
    if (nng_msg_append(m, reply, strlen(reply)) != 0) {
        nng_msg_free(m);
        goto fail;
    }
    nng_aio_set_msg(w->aio, m);
    atomic_store(&w->state, W_SEND);
    nng_ctx_send(w->ctx, w->aio);
    return;
fail:
    /* Out of memory: drop this reply (the client times out) and keep serving. */
    fox_log(FOX_LOG_ERR, "reply dropped: out of memory");
    atomic_store(&w->state, W_RECV);
    nng_ctx_recv(w->ctx, w->aio);
}

static void
reply_error(server *s, work *w, int has_id, int64_t id, int status, const char *msg)
{
    char *r = fox_proto_reply_error(has_id, id, status, msg);
    fox_log(FOX_LOG_DEBUG, "request %lld: %s %s", has_id ? (long long)id : -1LL,
            fox_proto_code_name(status), msg);
    send_reply(s, w,
               r ? r
                 : "{\"v\":1,\"id\":null,\"ok\":false,\"error\":{\"code\":\"EINTERNAL\","
                   "\"message\":\"out of memory\"}}",
               0);
    free(r);
}

/* -------------------------------------------------------------- the peers */

/* Compare in time independent of where the strings differ. */
static int
token_equal(const char *want, const char *got)
{
    size_t wl = strlen(want), gl = strlen(got);
    unsigned diff = wl != gl;
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
    return diff == 0;
}

/* May this peer change state? FOX_EPERM with a reason if not. */
static int
authorize(server *s, const fox_peer *p, const fox_request *req, char *msg, size_t len)
{
    if (p->transport < 0)
        return fox_errf(msg, len, FOX_EPERM, "the connection closed before its peer was known");
    if (s->d.token[0]) {
        if (!req->token)
            return fox_errf(msg, len, FOX_EPERM, "%s needs the token", fox_cmd_name(req->cmd));
        if (!token_equal(s->d.token, req->token))
            return fox_errf(msg, len, FOX_EPERM, "wrong token");
    }
    if (p->transport == FOX_TRANSPORT_IPC && p->uid != 0 && p->uid != (uint64_t)geteuid() &&
        p->gid != (uint64_t)getegid() && !fox_uid_in_group(p->uid, (uint64_t)getegid()))
        return fox_errf(msg, len, FOX_EPERM, "uid %llu may not run %s", (unsigned long long)p->uid,
                        fox_cmd_name(req->cmd));
    return FOX_OK;
}

/*
 * Log a refused mutating request, at most once per REFUSAL_LOG_MS: a client
 * hammering with a wrong token must not flood the journal. The next line
 * says how many were left out.
 */
static void
log_refusal(server *s, const fox_request *req, const char *msg)
{
    int64_t now = fox_mono_ms();
    if (s->refusal_logged_ms && now - s->refusal_logged_ms < REFUSAL_LOG_MS) {
        s->refusals_unlogged++;
        return;
    }
    if (s->refusals_unlogged)
        fox_log(FOX_LOG_NOTICE, "refused %s: %s (%ld more refusals not logged)",
                fox_cmd_name(req->cmd), msg, s->refusals_unlogged);
    else
        fox_log(FOX_LOG_NOTICE, "refused %s: %s", fox_cmd_name(req->cmd), msg);
    s->refusal_logged_ms = now;
    s->refusals_unlogged = 0;
}

/* --------------------------------------------------------------- requests */

/* Answer a request that may not change state, and log it (rate-limited). */
static void
refuse(server *s, work *w, const fox_request *req, int status, const char *msg)
{
    log_refusal(s, req, msg);
    reply_error(s, w, 1, req->id, status, msg);
}

static void
handle_request(server *s, work *w)
{
    char msg[1024];
    fox_request *req = malloc(sizeof *req);
    size_t len = nng_msg_len(w->msg);
    const char *body = nng_msg_body(w->msg);
    int rv;

    if (!req) {
        reply_error(s, w, 0, 0, FOX_EINTERNAL, "out of memory");
        return;
    }
    /*
     * Authenticate as early as the request allows: the size, the bytes and
     * the shape (proto.h) before anything is built, then the envelope; a
     * command that changes state shows its token (and, on ipc, its peer)
     * before any work on its arguments. nan_flags changes state only with
     * args.clear, so it is authorized once that is read.
     */
    rv = fox_proto_parse_envelope(req, body, len, msg, sizeof msg);
    if (rv != FOX_OK) {
        reply_error(s, w, req->has_id, req->id, rv, msg);
        goto out;
    }
    fox_peer p = {.transport = -1};
    int authorized = 0;
    if (fox_cmd_kind_of(req->cmd) != FOX_KIND_READ) {
        fox_endpoints_peer_of(&s->ends, w->msg, &p);
        if ((rv = authorize(s, &p, req, msg, sizeof msg)) != FOX_OK) {
            refuse(s, w, req, rv, msg);
            goto out;
        }
        authorized = 1;
    }
    if ((rv = fox_proto_parse_args(req, msg, sizeof msg)) != FOX_OK) {
        reply_error(s, w, 1, req->id, rv, msg);
        goto out;
    }

    if (!fox_request_is_mutating(req)) {
        int status;
        cJSON *result =
            fox_answer_read(s->trainer, &s->d, &s->counters, req, &status, msg, sizeof msg);
        if (!result) {
            reply_error(s, w, 1, req->id, status, msg);
        } else {
            char *r = fox_proto_reply_ok(1, req->id, result);
            if (r)
                send_reply(s, w, r, 1);
            else
                reply_error(s, w, 1, req->id, FOX_EINTERNAL, "out of memory");
            free(r);
        }
        goto out;
    }
    if (!authorized) {
        fox_endpoints_peer_of(&s->ends, w->msg, &p);
        if ((rv = authorize(s, &p, req, msg, sizeof msg)) != FOX_OK) {
            refuse(s, w, req, rv, msg);
            goto out;
        }
    }

    /* A resend of a command we have (or are) answering gets that answer, never a second run. */
    uint64_t key = fox_dedup_key(&p, body, len);
    fox_dedup_entry *e = fox_dedup_find(&s->dedup, key, req->id);
    if (e) {
        s->counters.dedup_hits++;
        if (e->reply) {
            send_reply(s, w, e->reply, e->ok);
        } else {
            w->next = e->waiters;
            e->waiters = w;
        }
        goto out;
    }
    if (s->stopping) {
        reply_error(s, w, 1, req->id, FOX_ESTATE, "foxd is shutting down");
        goto out;
    }
    fox_tcmd *c = calloc(1, sizeof *c);
    if (!c) {
        reply_error(s, w, 1, req->id, FOX_EINTERNAL, "out of memory");
        goto out;
    }
    if ((rv = fox_answer_tcmd(&s->d, req, c, msg, sizeof msg)) != FOX_OK) {
        cJSON_Delete(c->values);
        free(c);
        reply_error(s, w, 1, req->id, rv, msg);
        goto out;
    }
    e = fox_dedup_insert(&s->dedup, key, req->id);
    if (!e) {
        cJSON_Delete(c->values);
        free(c);
        s->counters.busy++;
        reply_error(s, w, 1, req->id, FOX_EBUSY, "too many commands in flight");
        goto out;
    }
    c->ctx = e;
    e->waiters = w;
    w->next = NULL;
    if (req->cmd == FOX_CMD_SHUTDOWN)
        begin_shutdown(s, "shutdown command");
    if ((rv = fox_trainer_submit(s->trainer, c)) != FOX_OK) {
        e->used = 0;
        cJSON_Delete(c->values);
        free(c);
        if (rv == FOX_EBUSY)
            s->counters.busy++;
        reply_error(s, w, 1, req->id, rv,
                    rv == FOX_EBUSY ? "the trainer's command queue is full; try again"
                                    : "foxd is shutting down");
        goto out;
    }
out:
    fox_request_fini(req);
    free(req);
}

static void finish_close(server *s);

static void
on_linger(uv_timer_t *h)
{
    finish_close(h->data);
}

static void
handle_done(server *s, fox_tcmd *c)
{
    fox_dedup_entry *e = c->ctx;
    if (e) {
        char *r;
        if (c->status == FOX_OK) {
            r = fox_proto_reply_ok(1, e->id, fox_render_result(c));
        } else {
            r = fox_proto_reply_error(1, e->id, c->status, c->message);
        }
        e->reply = r;
        e->ok = c->status == FOX_OK;
        e->when_ms = fox_mono_ms();
        for (work *w = e->waiters, *next; w; w = next) {
            next = w->next;
            if (r)
                send_reply(s, w, r, c->status == FOX_OK);
            else
                reply_error(s, w, 1, e->id, FOX_EINTERNAL, "out of memory");
        }
        e->waiters = NULL;
        if (!r)
            e->used = 0;
    }
    if (c->exit_after) {
        /* The trainer has stopped: a failed stop checkpoint makes the exit status say so. */
        if (c->result.checkpoint_failed || c->status != FOX_OK)
            s->exit_code = FOX_EXIT_ERROR;
        s->closing = 1;
        s->linger_until = fox_mono_ms() + LINGER_MS;
        uv_timer_start(&s->t_linger, on_linger, 0, 10);
    }
    cJSON_Delete(c->values);
    cJSON_Delete(c->backtest);
    free(c);
}

/* ------------------------------------------------------------ loop handlers */

static void
on_wake(uv_async_t *h)
{
    server *s = h->data;
    pthread_mutex_lock(&s->lock);
    work *in = s->in_head;
    fox_tcmd *out = s->out_head;
    int deaf = s->relisten_mask;
    s->in_head = s->in_tail = NULL;
    s->out_head = s->out_tail = NULL;
    s->relisten_mask = -1;
    pthread_mutex_unlock(&s->lock);

    while (in) {
        work *next = in->next;
        handle_request(s, in);
        in = next;
    }
    while (out) {
        fox_tcmd *next = out->next;
        handle_done(s, out);
        out = next;
    }
    if (deaf != -1 && !s->closing)
        fox_endpoints_relisten(&s->ends, s->rep, deaf);
}

static void
begin_shutdown(server *s, const char *why)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    fox_log(FOX_LOG_NOTICE, "shutting down (%s)", why);
    fox__notify("STOPPING=1\nEXTEND_TIMEOUT_USEC=%llu", (unsigned long long)STOP_EXTEND_USEC);
}

static void
on_signal(uv_signal_t *h, int signum)
{
    server *s = h->data;
    if (signum == SIGHUP) {
        if (s->d.log_file[0]) {
            int fd = open(s->d.log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
            if (fd >= 0) {
                dup2(fd, STDERR_FILENO);
                close(fd);
            }
            fox_log(FOX_LOG_INFO, "SIGHUP: log file %s reopened", s->d.log_file);
        } else {
            fox_log(FOX_LOG_INFO, "SIGHUP: logging to stderr, nothing to reopen");
        }
        return;
    }
    if (s->signals++ > 0) {
        /* A second SIGTERM/SIGINT: the operator will not wait for the checkpoint. */
        fox_log(FOX_LOG_WARNING, "second signal: exiting without a checkpoint");
        _exit(FOX_EXIT_INTERRUPT);
    }
    if (s->stopping)
        return;
    begin_shutdown(s, signum == SIGTERM ? "SIGTERM" : "SIGINT");
    /* Finish the chunk, checkpoint, stop: the trainer does it between chunks. */
    fox_tcmd *c = calloc(1, sizeof *c);
    char msg[256];
    if (!c)
        _exit(FOX_EXIT_ERROR);
    c->cmd = FOX_CMD_SHUTDOWN;
    c->checkpoint = s->d.checkpoint_on_stop;
    if (c->checkpoint &&
        fox_answer_ckpt_path(&s->d, NULL, 1, c->path, sizeof c->path, msg, sizeof msg) != FOX_OK)
        c->path[0] = 0;
    if (fox_trainer_submit(s->trainer, c) != FOX_OK)
        free(c); /* a shutdown is already on its way */
}

static void
on_watchdog(uv_timer_t *h)
{
    server *s = h->data;
    fox_snapshot *snap = malloc(sizeof *snap);
    if (!snap)
        return;
    fox_trainer_snapshot(s->trainer, snap);
    /* Vouch for the daemon only while the trainer shows progress (or a declared long phase). */
    if (fox_trainer_healthy(snap, fox_mono_ms(), (int64_t)(s->watchdog_usec / 1000)))
        fox__notify("WATCHDOG=1");
    else
        fox_log(FOX_LOG_WARNING, "trainer heartbeat is stale: not pinging the watchdog");
    free(snap);
}

static void
on_status(uv_timer_t *h)
{
    server *s = h->data;
    char line[320];
    fox_snapshot *snap = malloc(sizeof *snap);
    if (!snap)
        return;
    fox_trainer_snapshot(s->trainer, snap);
    fox_answer_status_line(snap, line, sizeof line);
    if (s->stopping)
        fox__notify("STATUS=stopping: %s\nEXTEND_TIMEOUT_USEC=%llu", line,
                    (unsigned long long)STOP_EXTEND_USEC);
    else
        fox__notify("STATUS=%s", line);
    free(snap);
}

static void
on_idle(uv_timer_t *h)
{
    server *s = h->data;
    fox_endpoints_close_idle(&s->ends);
}

/* The Prometheus text of now (malloc'd), or NULL when out of memory. */
static char *
prometheus_text(server *s)
{
    fox_snapshot *snap = malloc(sizeof *snap);
    if (!snap)
        return NULL;
    fox_trainer_snapshot(s->trainer, snap);
    char *text = fox_answer_prometheus(snap, &s->counters);
    free(snap);
    return text;
}

static void
on_metrics(uv_timer_t *h)
{
    server *s = h->data;
    char err[512];
    char *text = prometheus_text(s);
    /* Atomic rename, no fsync: node_exporter must never read half a file; a crash may lose one. */
    if (text && fox_write_atomic(s->d.metrics_textfile, text, strlen(text), 0644, 0, err,
                                 sizeof err) != FOX_OK)
        fox_log(FOX_LOG_WARNING, "metrics textfile: %s", err);
    free(text);
}

/* Hand /metrics the current text (the loop owns the counters it reads). */
static void
on_http_metrics(uv_timer_t *h)
{
    server *s = h->data;
    char *text = prometheus_text(s);
    if (text)
        fox_metrics_http_publish(s->http, text);
    free(text);
}

static void
close_handle(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/*
 * Tear down what exists of s, in the order nng 1.5.2 and libuv need: trainer
 * stopped and joined, probe joined, every aio stopped, sockets closed,
 * queues drained, handles closed (uv_run then returns). Safe on a half-built
 * server, as a failed setup leaves it: each step looks at what was made.
 * free_server finishes once the loop has closed the handles.
 */
static void
close_all(server *s)
{
    if (s->trainer && !s->closing) {
        /* A setup that failed after the trainer started: the join needs it told to stop. */
        fox_tcmd *c = calloc(1, sizeof *c);
        if (!c) {
            /* Without its command the trainer never stops, and the join would wait forever. */
            fox_log(FOX_LOG_ERR, "out of memory: cannot stop the trainer");
            _exit(FOX_EXIT_ERROR);
        }
        c->cmd = FOX_CMD_SHUTDOWN;
        if (fox_trainer_submit(s->trainer, c) != FOX_OK)
            free(c);
    }
    fox_trainer_destroy(s->trainer);
    s->trainer = NULL;
    fox_endpoints_probe_stop(&s->ends);
    for (int i = 0; s->works && i < s->n_works; i++)
        if (s->works[i].aio)
            nng_aio_stop(s->works[i].aio);
    if (s->rep_open)
        nng_close(s->rep);
    s->rep_open = 0;
    fox_metrics_http_stop(s->http);
    s->http = NULL;
    pthread_mutex_lock(&s->pub_lock);
    if (s->pub_open)
        nng_close(s->pub);
    s->pub_open = 0;
    pthread_mutex_unlock(&s->pub_lock);

    /* Nothing can enqueue now; what is left is dropped (a failed start's stop among it). */
    for (work *w = s->in_head; w; w = w->next)
        nng_msg_free(w->msg), w->msg = NULL;
    s->in_head = s->in_tail = NULL;
    for (fox_tcmd *c = s->out_head, *next; c; c = next) {
        next = c->next;
        cJSON_Delete(c->values);
        cJSON_Delete(c->backtest);
        free(c);
    }
    s->out_head = s->out_tail = NULL;
    uv_walk(&s->loop, close_handle, NULL);
}

/* After close_all and the uv_run that closed the handles: the loop, the aios, the tables, s. */
static void
free_server(server *s)
{
    if (uv_loop_close(&s->loop) != 0)
        fox_log(FOX_LOG_WARNING, "event loop closed with handles open");
    for (int i = 0; s->works && i < s->n_works; i++)
        if (s->works[i].aio)
            nng_aio_free(s->works[i].aio);
    fox_dedup_fini(&s->dedup);
    fox_endpoints_fini(&s->ends);
    if (s->state_lock_fd >= 0)
        close(s->state_lock_fd);
    free(s->works);
    free(s);
}

/* The trainer has stopped: once the last replies have left (or LINGER_MS passed), tear down. */
static void
finish_close(server *s)
{
    int sending = 0;
    for (int i = 0; i < s->n_works; i++)
        sending += atomic_load(&s->works[i].state) == W_SEND;
    if (sending && fox_mono_ms() < s->linger_until)
        return;
    uv_timer_stop(&s->t_linger);
    close_all(s);
}

/* ------------------------------------------------------------------- main */

/* The probe's report, on its thread: hand the deaf endpoints to the loop. */
static void
probe_report(void *arg, int deaf_mask)
{
    server *s = arg;
    pthread_mutex_lock(&s->lock);
    s->relisten_mask = deaf_mask;
    pthread_mutex_unlock(&s->lock);
    wake_loop(s);
}

static int
setup(server *s, const fox_config *cfg, char *err, size_t errlen)
{
    int rv;
    if (fox_mkdir_p(s->d.state_dir, 0750, err, errlen) != FOX_OK)
        return FOX_EIO;
    /*
     * Two daemons on one state directory would overwrite each other's
     * checkpoints, overrides and metrics, each losing the other's updates:
     * the first holds the lock, a second refuses to start.
     */
    char msg[FOX_PATH_MAX + 128];
    if ((rv = fox_lock_dir(s->d.state_dir, STATE_LOCK, &s->state_lock_fd, msg, sizeof msg)) !=
        FOX_OK)
        return fox_errf(err, errlen, rv, "daemon.state_dir %s%s", msg,
                        rv == FOX_EBUSY ? ": stop that foxd or pick another daemon.state_dir" : "");
    int stale = 0;
    fox_remove_stale_temps(s->d.state_dir, STATE_SCAN_DEPTH, &stale);
    if (stale)
        fox_log(FOX_LOG_NOTICE, "removed %d temp file(s) a crash left in %s", stale,
                s->d.state_dir);
    if ((rv = fox_endpoints_secure_dir(s->d.runtime_dir, err, errlen)) != FOX_OK)
        return rv;

    /* Every endpoint is checked and locked before any socket exists. */
    if ((rv = fox_endpoints_prepare(&s->ends, &s->d, err, errlen)) != FOX_OK)
        return rv;

    if ((rv = nng_pub0_open(&s->pub)) != 0)
        return fox_errf(err, errlen, FOX_EIO, "pub socket: %s", nng_strerror(rv));
    s->pub_open = 1;
    if ((rv = fox_endpoints_limit_pipes(&s->ends, s->pub)) != 0)
        return fox_errf(err, errlen, FOX_EIO, "pub socket: %s", nng_strerror(rv));
    if ((rv = fox_endpoint_listen(&s->ends, s->pub, &s->ends.pub, err, errlen)) != FOX_OK)
        return rv;

    fox_trainer_hooks hooks = {trainer_done, trainer_event, s};
    fox_log(FOX_LOG_INFO, "starting the trainer (engine and data)");
    if ((rv = fox_trainer_start(&s->trainer, cfg, &s->d, &hooks, err, errlen)) != FOX_OK)
        return rv;

    if ((rv = nng_rep0_open(&s->rep)) != 0)
        return fox_errf(err, errlen, FOX_EIO, "rep socket: %s", nng_strerror(rv));
    s->rep_open = 1;
    if ((rv = fox_endpoints_limit_pipes(&s->ends, s->rep)) != 0)
        return fox_errf(err, errlen, FOX_EIO, "rep socket: %s", nng_strerror(rv));
    nng_socket_set_size(s->rep, NNG_OPT_RECVMAXSZ, (size_t)s->d.recv_max);
    s->n_works = s->d.workers;
    s->works = calloc((size_t)s->n_works, sizeof *s->works);
    if (!s->works)
        return fox_errf(err, errlen, FOX_ENOMEM, "out of memory");
    for (int i = 0; i < s->n_works; i++) {
        work *w = &s->works[i];
        w->srv = s;
        if ((rv = nng_aio_alloc(&w->aio, work_cb, w)) != 0 ||
            (rv = nng_ctx_open(&w->ctx, s->rep)) != 0)
            return fox_errf(err, errlen, FOX_EIO, "nng context: %s", nng_strerror(rv));
    }
    for (int i = 0; i < s->ends.n_eps; i++)
        if ((rv = fox_endpoint_listen(&s->ends, s->rep, &s->ends.eps[i], err, errlen)) != FOX_OK)
            return rv;
    for (int i = 0; i < s->n_works; i++) {
        atomic_store(&s->works[i].state, W_RECV);
        nng_ctx_recv(s->works[i].ctx, s->works[i].aio);
    }

    if (s->d.metrics_listen[0]) {
        if (!fox_endpoints_is_loopback(s->d.metrics_listen) && !s->d.allow_insecure_remote)
            return fox_errf(err, errlen, FOX_EPERM,
                            "daemon.metrics_listen %s is beyond loopback: /metrics has no "
                            "authentication (set daemon.allow_insecure_remote to allow it)",
                            s->d.metrics_listen);
        if ((rv = fox_metrics_http_start(&s->http, &s->loop, &s->d, err, errlen)) != FOX_OK)
            return rv;
    }
    fox_endpoints_probe_start(&s->ends, probe_report, s);
    return FOX_OK;
}

/*
 * How often to look for idle or old connections: a quarter of the shorter
 * limit, so one is closed at most a quarter late, but not more often than
 * IDLE_SWEEP_MIN_MS nor less often than IDLE_SWEEP_MAX_MS. 0 (no timer)
 * when neither limit is on.
 */
static uint64_t
idle_sweep_ms(int idle_timeout_s, int max_age_s)
{
    int shorter = idle_timeout_s <= 0                             ? max_age_s
                  : max_age_s <= 0 || idle_timeout_s < max_age_s ? idle_timeout_s
                                                                  : max_age_s;
    uint64_t ms = (uint64_t)shorter * 1000 / 4;
    if (shorter <= 0)
        return 0;
    return ms < IDLE_SWEEP_MIN_MS ? IDLE_SWEEP_MIN_MS : ms > IDLE_SWEEP_MAX_MS ? IDLE_SWEEP_MAX_MS : ms;
}

static void
start_timer(server *s, uv_timer_t *t, uv_timer_cb cb, uint64_t period_ms)
{
    uv_timer_init(&s->loop, t);
    t->data = s;
    if (period_ms > 0)
        uv_timer_start(t, cb, period_ms, period_ms);
}

int
fox_serve_main(const fox_config *cfg, const fox_dconf *d)
{
    char err[1024];
    server *s = calloc(1, sizeof *s);
    if (!s) {
        fox_log(FOX_LOG_ERR, "out of memory");
        return FOX_EXIT_ERROR;
    }
    s->d = *d;
    s->counters.start_ms = fox_mono_ms();
    s->exit_code = FOX_EXIT_OK;
    /* Asked once, before any thread: sd_watchdog_enabled reads the environment. */
    s->watchdog_usec = fox__watchdog_usec();
    signal(SIGPIPE, SIG_IGN);
    /*
     * glibc raises its mmap threshold to the largest block freed so far, so
     * after a few big requests such blocks come from the heap and are never
     * given back. A fixed threshold returns every large request's memory.
     */
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    long fds = fox_fd_raise_limit();
    fox_fd_reserve_take();
    if (d->log_file[0]) {
        int fd = open(d->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (fd < 0) {
            fox_log(FOX_LOG_ERR, "log file %s: %s", d->log_file, strerror(errno));
            free(s);
            return FOX_EXIT_USAGE;
        }
        dup2(fd, STDERR_FILENO);
        close(fd);
        fox__journal_off();
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->pub_lock, NULL);
    uv_loop_init(&s->loop);
    uv_async_init(&s->loop, &s->wake, on_wake);
    s->wake.data = s;
    s->relisten_mask = -1;
    /* No lock yet: a setup that fails before taking one closes none. */
    s->ends.pub.lock_fd = -1;
    s->state_lock_fd = -1;

    int rv = setup(s, cfg, err, sizeof err);
    if (rv != FOX_OK) {
        /* Once: under systemd stderr is the journal too. */
        fox_log(FOX_LOG_ERR, "%s", err);
        close_all(s);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        free_server(s);
        return rv == FOX_EINVAL || rv == FOX_EPERM || rv == FOX_EBUSY ? FOX_EXIT_USAGE
                                                                      : FOX_EXIT_ERROR;
    }

    /* Every fixed descriptor is open now: what is left below the limit is the connections'. */
    int budget = fox_fd_connection_budget(fds);
    int share = fox_endpoints_set_budget(&s->ends, budget);
    if (s->http)
        fox_metrics_http_set_cap(s->http, share);

    uv_signal_init(&s->loop, &s->sig_term);
    uv_signal_init(&s->loop, &s->sig_int);
    uv_signal_init(&s->loop, &s->sig_hup);
    s->sig_term.data = s->sig_int.data = s->sig_hup.data = s;
    uv_signal_start(&s->sig_term, on_signal, SIGTERM);
    uv_signal_start(&s->sig_int, on_signal, SIGINT);
    uv_signal_start(&s->sig_hup, on_signal, SIGHUP);
    start_timer(s, &s->t_watchdog, on_watchdog, s->watchdog_usec / 2000);
    start_timer(s, &s->t_status, on_status, STATUS_PERIOD_MS);
    start_timer(s, &s->t_metrics, on_metrics, (uint64_t)d->metrics_interval_ms);
    start_timer(s, &s->t_linger, NULL, 0);
    start_timer(s, &s->t_http, on_http_metrics, s->http ? METRICS_HTTP_MS : 0);
    start_timer(s, &s->t_idle, on_idle, idle_sweep_ms(d->idle_timeout_s, d->max_connection_age_s));
    if (s->http)
        on_http_metrics(&s->t_http);

    fox_snapshot *snap = malloc(sizeof *snap);
    if (snap) {
        char line[320];
        fox_trainer_snapshot(s->trainer, snap);
        fox_answer_status_line(snap, line, sizeof line);
        fox__notify("READY=1\nSTATUS=%s", line);
        fox_log(FOX_LOG_NOTICE, "ready: %s; pid %d, %ld descriptors, %d for connections", line,
                (int)getpid(), fds, budget);
        free(snap);
    }
    publish_event(s, "ready", NULL);

    uv_run(&s->loop, UV_RUN_DEFAULT);
    int code = s->exit_code;
    free_server(s);
    fox_log(FOX_LOG_NOTICE, "stopped");
    return code;
}
