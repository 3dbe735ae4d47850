/*
 * server.c — foxd's serving mode: the libuv loop thread, the nng REP and PUB
 * sockets, authentication, request de-duplication, signals, timers
 * (watchdog, STATUS, Prometheus textfile) and the orderly shutdown.
 *
 * Threads (DESIGN.md "Threads and data flow"):
 *   - nng's threads run the aio callbacks: they only move a finished receive
 *     onto the inbox and wake the loop (uv_async_send coalesces, so the wake
 *     handler drains the whole inbox), or re-arm a receive after a send;
 *   - the trainer thread (trainer.c) hands completed commands to the outbox
 *     the same way, and publishes events itself (publishing is locked);
 *   - the probe thread dials our own ipc endpoints now and then (nng #1518:
 *     a listener can stop accepting; two failures in a row re-listen);
 *   - the loop thread owns everything else and sends every reply.
 *
 * What it does not do: parse JSON (proto/), build results (answer.c) or
 * touch the engine (trainer.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <uv.h>

#include "daemon/answer.h"
#include "daemon/foxd.h"
#include "common/fsutil.h"
#include "common/hash.h"
#include "common/log.h"
#include "daemon/notify.h"
#include "daemon/trainer.h"
#include "common/clock.h"

#define DEDUP_SLOTS      1024
#define DEDUP_TTL_MS     (10 * 60 * 1000) /* an id may be reused after this long */
#define STATUS_PERIOD_MS 5000
#define STOP_EXTEND_USEC 120000000ULL /* asked for while the stop checkpoint is written */
#define LINGER_MS        1000         /* wait for the last replies to leave before closing */

enum { W_RECV = 0, W_BUSY, W_SEND };
enum { T_IPC = 0, T_TCP, T_TLS };

typedef struct server server;

/* One in-flight request: nng's demo/async work item (STYLE.md). */
typedef struct work {
    _Atomic int state;
    nng_aio *aio;
    nng_ctx ctx;
    nng_msg *msg; /* the request, while BUSY */
    server *srv;
    struct work *next; /* inbox, or a dedup entry's waiters */
} work;

/* A remembered mutating request: its reply, or the works waiting for it. */
typedef struct dentry {
    int used;
    uint64_t key;
    int64_t id;
    int64_t when_ms;
    char *reply; /* NULL while the trainer has it */
    int ok;      /* the reply's "ok" */
    work *waiters;
} dentry;

typedef struct endpoint {
    char url[FOX_URL_MAX];
    int transport; /* T_* */
    int lock_fd;   /* ipc: flock held for the daemon's life */
    nng_listener l;
    int open;
    int probe_failures; /* loop thread */
} endpoint;

struct server {
    fox_dconf d;
    uv_loop_t loop;
    uv_async_t wake;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t t_watchdog, t_status, t_metrics, t_linger;

    nng_socket rep, pub;
    int rep_open, pub_open;
    endpoint eps[FOX_DCONF_MAX_LISTEN];
    int n_eps;
    endpoint pub_ep;
    nng_tls_config *tls;

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
    dentry dedup[DEDUP_SLOTS];

    uint64_t watchdog_usec;
    int stopping; /* shutdown begun: no new mutating commands */
    int closing;  /* the trainer is done: tearing down */
    int64_t linger_until;
    int exit_code;
    int signals;

    pthread_t probe_thread;
    int probe_running;
    pthread_mutex_t probe_lock;
    pthread_cond_t probe_cond;
    int probe_quit;
};

static void begin_shutdown(server *s, const char *why);

/* ------------------------------------------------------------------ events */

/* Publish one event; any thread. seq is taken under the lock so it is monotonic on the wire. */
static void
publish_event(void *arg, const char *type, cJSON *data)
{
    server *s = arg;
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
    s->counters.requests++;
    if (!ok)
        s->counters.errors++;
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

typedef struct peer {
    int transport;          /* T_*, -1 when unknown (pipe gone) */
    uint64_t uid, gid, pid; /* ipc */
    char addr[64];          /* tcp/tls: the address without the port */
} peer;

static void
peer_of(server *s, nng_msg *m, peer *p)
{
    nng_pipe pipe = nng_msg_get_pipe(m);
    nng_listener l = nng_pipe_listener(pipe);
    nng_sockaddr sa;
    memset(p, 0, sizeof *p);
    p->transport = -1;
    for (int i = 0; i < s->n_eps; i++)
        if (s->eps[i].open && nng_listener_id(s->eps[i].l) == nng_listener_id(l))
            p->transport = s->eps[i].transport;
    if (p->transport == T_IPC) {
        if (nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_UID, &p->uid) != 0 ||
            nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_GID, &p->gid) != 0 ||
            nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_PID, &p->pid) != 0)
            p->transport = -1;
    } else if (p->transport >= 0 && nng_pipe_get_addr(pipe, NNG_OPT_REMADDR, &sa) == 0) {
        if (sa.s_family == NNG_AF_INET)
            inet_ntop(AF_INET, &sa.s_in.sa_addr, p->addr, sizeof p->addr);
        else if (sa.s_family == NNG_AF_INET6)
            inet_ntop(AF_INET6, sa.s_in6.sa_addr, p->addr, sizeof p->addr);
    }
}

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
authorize(server *s, const peer *p, const fox_request *req, char *msg, size_t len)
{
    if (p->transport < 0)
        return fox_errf(msg, len, FOX_EPERM, "the connection closed before its peer was known");
    if (s->d.token[0]) {
        if (!req->token)
            return fox_errf(msg, len, FOX_EPERM, "%s needs the token", fox_cmd_name(req->cmd));
        if (!token_equal(s->d.token, req->token))
            return fox_errf(msg, len, FOX_EPERM, "wrong token");
    }
    if (p->transport == T_IPC && p->uid != 0 && p->uid != (uint64_t)geteuid() &&
        p->gid != (uint64_t)getegid())
        return fox_errf(msg, len, FOX_EPERM, "uid %llu may not run %s", (unsigned long long)p->uid,
                         fox_cmd_name(req->cmd));
    return FOX_OK;
}

/* ------------------------------------------------------------------ dedup */

/*
 * A client is its uid+pid on ipc (stable across the reconnect after which a
 * REQ resends) and its address on tcp; the key also covers the request
 * bytes, so only a true resend matches.
 */
static uint64_t
dedup_key(const peer *p, const char *body, size_t len)
{
    char who[96];
    if (p->transport == T_IPC)
        snprintf(who, sizeof who, "ipc:%llu:%llu", (unsigned long long)p->uid,
                 (unsigned long long)p->pid);
    else
        snprintf(who, sizeof who, "net:%s", p->addr);
    return fox_fnv1a(fox_fnv1a_str(FOX_FNV_OFFSET, who), body, len);
}

static dentry *
dedup_find(server *s, uint64_t key, int64_t id)
{
    int64_t now = fox_mono_ms();
    for (int i = 0; i < DEDUP_SLOTS; i++) {
        dentry *e = &s->dedup[i];
        if (e->used && e->key == key && e->id == id &&
            (!e->reply || now - e->when_ms < DEDUP_TTL_MS))
            return e;
    }
    return NULL;
}

/* A slot for a new entry: a free one, else the oldest answered one. */
static dentry *
dedup_insert(server *s, uint64_t key, int64_t id)
{
    dentry *victim = NULL;
    for (int i = 0; i < DEDUP_SLOTS; i++) {
        dentry *e = &s->dedup[i];
        if (!e->used) {
            victim = e;
            break;
        }
        if (e->reply && (!victim || e->when_ms < victim->when_ms))
            victim = e;
    }
    if (!victim)
        return NULL;
    free(victim->reply);
    memset(victim, 0, sizeof *victim);
    victim->used = 1;
    victim->key = key;
    victim->id = id;
    victim->when_ms = fox_mono_ms();
    return victim;
}

/* --------------------------------------------------------------- requests */

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
    rv = fox_proto_parse_request(req, body, len, msg, sizeof msg);
    if (rv != FOX_OK) {
        reply_error(s, w, req->has_id, req->id, rv, msg);
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

    peer p;
    peer_of(s, w->msg, &p);
    if ((rv = authorize(s, &p, req, msg, sizeof msg)) != FOX_OK) {
        fox_log(FOX_LOG_NOTICE, "refused %s: %s", fox_cmd_name(req->cmd), msg);
        reply_error(s, w, 1, req->id, rv, msg);
        goto out;
    }

    /* A resend of a command we have (or are) answering gets that answer, never a second run. */
    uint64_t key = dedup_key(&p, body, len);
    dentry *e = dedup_find(s, key, req->id);
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
    e = dedup_insert(s, key, req->id);
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
    dentry *e = c->ctx;
    if (e) {
        char *r;
        if (c->status == FOX_OK) {
            r = fox_proto_reply_ok(1, e->id, c->result);
            c->result = NULL;
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
        cJSON *ck = cJSON_GetObjectItemCaseSensitive(c->result, "checkpoint_error");
        if (ck || (c->result == NULL && c->status != FOX_OK))
            s->exit_code = FOX_EXIT_ERROR;
        s->closing = 1;
        s->linger_until = fox_mono_ms() + LINGER_MS;
        uv_timer_start(&s->t_linger, on_linger, 0, 10);
    }
    cJSON_Delete(c->result);
    cJSON_Delete(c->values);
    free(c);
}

/* --------------------------------------------------------------- listeners */

static int
scheme_of(const char *url)
{
    if (!strncmp(url, "ipc://", 6))
        return T_IPC;
    if (!strncmp(url, "tcp://", 6) || !strncmp(url, "tcp4://", 7) || !strncmp(url, "tcp6://", 7))
        return T_TCP;
    if (!strncmp(url, "tls+tcp://", 10) || !strncmp(url, "tls+tcp4://", 11) ||
        !strncmp(url, "tls+tcp6://", 11))
        return T_TLS;
    return -1;
}

/* tcp://127.0.0.1:5555, tcp://localhost:5555, tcp://[::1]:5555 stay on this machine. */
static int
is_loopback(const char *url)
{
    const char *h = strstr(url, "://") + 3;
    return !strncmp(h, "127.", 4) || !strncmp(h, "localhost:", 10) || !strncmp(h, "[::1]:", 6);
}

/*
 * Take the flock of an ipc endpoint before anything listens on it: a second
 * foxd must never reach nng_listen on a live path (nng #1518 would deafen
 * the first). With the lock held, a socket file left behind is stale.
 */
static int
lock_ipc(endpoint *ep, char *err, size_t errlen)
{
    const char *path = ep->url + 6;
    char lockpath[FOX_URL_MAX + 8], dir[FOX_URL_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (fox_mkdir_p(dir, 0750, err, errlen) != FOX_OK)
            return FOX_EIO;
    }
    snprintf(lockpath, sizeof lockpath, "%s.lock", path);
    ep->lock_fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (ep->lock_fd < 0)
        return fox_errf(err, errlen, FOX_EIO, "%s: %s", lockpath, strerror(errno));
    if (flock(ep->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(ep->lock_fd);
        ep->lock_fd = -1;
        if (e == EWOULDBLOCK)
            return fox_errf(err, errlen, FOX_EBUSY,
                             "%s is in use by another foxd (lock %s held); not listening on it",
                             ep->url, lockpath);
        return fox_errf(err, errlen, FOX_EIO, "flock %s: %s", lockpath, strerror(e));
    }
    unlink(path);
    return FOX_OK;
}

static char *
read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fox_errf(err, errlen, FOX_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = calloc(1, 1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf && n == 0) {
        free(buf);
        buf = NULL;
        fox_errf(err, errlen, FOX_EIO, "%s: empty", path);
    }
    return buf;
}

static int
make_tls(server *s, char *err, size_t errlen)
{
    int rv;
    char *cert, *key;
    if (s->tls)
        return FOX_OK;
    if (!s->d.tls_cert[0] || !s->d.tls_key[0] || !s->d.tls_ca[0])
        return fox_errf(err, errlen, FOX_EINVAL,
                         "tls+tcp:// needs daemon.tls.cert, daemon.tls.key and daemon.tls.ca "
                         "(clients must present a certificate signed by that CA)");
    if (!(cert = read_file(s->d.tls_cert, err, errlen)))
        return FOX_EIO;
    if (!(key = read_file(s->d.tls_key, err, errlen))) {
        free(cert);
        return FOX_EIO;
    }
    if ((rv = nng_tls_config_alloc(&s->tls, NNG_TLS_MODE_SERVER)) != 0 ||
        (rv = nng_tls_config_own_cert(s->tls, cert, key, NULL)) != 0 ||
        (rv = nng_tls_config_ca_file(s->tls, s->d.tls_ca)) != 0 ||
        (rv = nng_tls_config_auth_mode(s->tls, NNG_TLS_AUTH_MODE_REQUIRED)) != 0) {
        fox_errf(err, errlen, FOX_EINVAL, "TLS setup (%s, %s, %s): %s", s->d.tls_cert,
                  s->d.tls_key, s->d.tls_ca, nng_strerror(rv));
        rv = FOX_EINVAL;
    }
    memset(key, 0, strlen(key));
    free(cert);
    free(key);
    return rv;
}

/* Create and start the listener of ep on sock, RECVMAXSZ set before it starts. */
static int
open_listener(server *s, nng_socket sock, endpoint *ep, char *err, size_t errlen)
{
    int rv;
    if ((rv = nng_listener_create(&ep->l, sock, ep->url)) != 0)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: %s", ep->url, nng_strerror(rv));
    rv = nng_listener_set_size(ep->l, NNG_OPT_RECVMAXSZ, (size_t)s->d.recv_max);
    if (rv == 0 && ep->transport == T_IPC)
        rv = nng_listener_set_int(ep->l, NNG_OPT_IPC_PERMISSIONS, s->d.ipc_mode);
    if (rv == 0 && ep->transport == T_TLS) /* made by prepare_endpoint */
        rv = nng_listener_set_ptr(ep->l, NNG_OPT_TLS_CONFIG, s->tls);
    if (rv == 0)
        rv = nng_listener_start(ep->l, 0);
    if (rv != 0) {
        nng_listener_close(ep->l);
        return fox_errf(err, errlen, FOX_EIO, "listen %s: %s", ep->url, nng_strerror(rv));
    }
    ep->open = 1;
    fox_log(FOX_LOG_INFO, "listening on %s", ep->url);
    return FOX_OK;
}

/* Check one endpoint URL against the remote-access rules, and lock it if ipc. */
static int
prepare_endpoint(server *s, endpoint *ep, const char *url, char *err, size_t errlen)
{
    memset(ep, 0, sizeof *ep);
    ep->lock_fd = -1;
    snprintf(ep->url, sizeof ep->url, "%s", url);
    ep->transport = scheme_of(url);
    if (ep->transport < 0)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: endpoints are ipc://, tcp:// or tls+tcp://",
                         url);
    if (ep->transport == T_TCP && !is_loopback(url) && !s->d.allow_insecure_remote)
        return fox_errf(err, errlen, FOX_EPERM,
                         "%s listens beyond loopback without TLS: use tls+tcp:// or set "
                         "daemon.allow_insecure_remote",
                         url);
    if (ep->transport == T_TLS)
        return make_tls(s, err, errlen);
    if (ep->transport == T_IPC)
        return lock_ipc(ep, err, errlen);
    return FOX_OK;
}

/* -------------------------------------------------------------- self-probe */

/*
 * Dial our own ipc endpoint afresh and ask for the version; 0 when it
 * answered. The socket lives as long as the probe thread: only the dialer
 * (and so the connection) is new each time, since socket churn is where nng
 * 1.5.2 keeps its open/close races.
 */
static int
probe_once(nng_socket sock, const char *url)
{
    nng_dialer dl;
    char *reply = NULL;
    size_t len = 0;
    int rv;
    const char *req = "{\"v\":1,\"id\":0,\"cmd\":\"version\"}";

    if ((rv = nng_dialer_create(&dl, sock, url)) != 0)
        return rv;
    if ((rv = nng_dialer_start(dl, 0)) == 0 &&
        (rv = nng_send(sock, (void *)req, strlen(req), 0)) == 0 &&
        (rv = nng_recv(sock, &reply, &len, NNG_FLAG_ALLOC)) == 0)
        nng_free(reply, len);
    nng_dialer_close(dl);
    return rv;
}

static void *
probe_main(void *arg)
{
    server *s = arg;
    nng_socket sock;
    if (nng_req0_open(&sock) != 0) {
        fox_log(FOX_LOG_WARNING, "self-probe disabled: no REQ socket");
        return NULL;
    }
    nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, 3000);
    nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, 3000);
    nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += s->d.probe_ms / 1000;
        ts.tv_nsec += (long)(s->d.probe_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&s->probe_lock);
        while (!s->probe_quit &&
               pthread_cond_timedwait(&s->probe_cond, &s->probe_lock, &ts) != ETIMEDOUT)
            ;
        int quit = s->probe_quit;
        pthread_mutex_unlock(&s->probe_lock);
        if (quit)
            break;
        int deaf = 0;
        for (int i = 0; i < s->n_eps; i++)
            if (s->eps[i].transport == T_IPC && probe_once(sock, s->eps[i].url) != 0)
                deaf |= 1 << i;
        pthread_mutex_lock(&s->lock);
        s->relisten_mask = deaf;
        pthread_mutex_unlock(&s->lock);
        wake_loop(s);
    }
    nng_close(sock);
    return NULL;
}

/* On the loop: re-listen where the probe failed twice in a row. */
static void
apply_probe(server *s, int deaf)
{
    for (int i = 0; i < s->n_eps; i++) {
        endpoint *ep = &s->eps[i];
        if (ep->transport != T_IPC)
            continue;
        if (!(deaf & (1 << i))) {
            ep->probe_failures = 0;
            continue;
        }
        if (++ep->probe_failures < 2 || s->closing)
            continue;
        char err[512];
        fox_log(FOX_LOG_WARNING, "%s does not answer its own probe; listening again (nng #1518)",
                ep->url);
        nng_listener_close(ep->l);
        ep->open = 0;
        unlink(ep->url + 6);
        if (open_listener(s, s->rep, ep, err, sizeof err) != FOX_OK)
            fox_log(FOX_LOG_ERR, "%s", err);
        ep->probe_failures = 0;
    }
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
    if (deaf != -1)
        apply_probe(s, deaf);
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
        fox_answer_ckpt_path(&s->d, NULL, c->path, sizeof c->path, msg, sizeof msg) != FOX_OK)
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
    if (fox_answer_healthy(snap, fox_mono_ms(), (int64_t)(s->watchdog_usec / 1000)))
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
on_metrics(uv_timer_t *h)
{
    server *s = h->data;
    char err[512];
    fox_snapshot *snap = malloc(sizeof *snap);
    if (!snap)
        return;
    fox_trainer_snapshot(s->trainer, snap);
    char *text = fox_answer_prometheus(snap, &s->counters);
    /* Atomic rename, no fsync: node_exporter must never read half a file; a crash may lose one. */
    if (text &&
        fox_write_atomic(s->d.metrics_textfile, text, strlen(text), 0644, 0, err, sizeof err) != FOX_OK)
        fox_log(FOX_LOG_WARNING, "metrics textfile: %s", err);
    free(text);
    free(snap);
}

static void
close_handle(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/*
 * The trainer has stopped. Once the last replies have left (or LINGER_MS
 * passed), tear down in the order nng 1.5.2 and libuv need: trainer joined,
 * probe joined, every aio stopped, sockets closed, queues drained, handles
 * closed (uv_run then returns).
 */
static void
finish_close(server *s)
{
    int sending = 0;
    for (int i = 0; i < s->n_works; i++)
        sending += atomic_load(&s->works[i].state) == W_SEND;
    if (sending && fox_mono_ms() < s->linger_until)
        return;
    uv_timer_stop(&s->t_linger);

    fox_trainer_destroy(s->trainer);
    s->trainer = NULL;
    if (s->probe_running) {
        pthread_mutex_lock(&s->probe_lock);
        s->probe_quit = 1;
        pthread_cond_signal(&s->probe_cond);
        pthread_mutex_unlock(&s->probe_lock);
        pthread_join(s->probe_thread, NULL);
        s->probe_running = 0;
    }
    for (int i = 0; i < s->n_works; i++)
        nng_aio_stop(s->works[i].aio);
    nng_close(s->rep);
    s->rep_open = 0;
    pthread_mutex_lock(&s->pub_lock);
    nng_close(s->pub);
    s->pub_open = 0;
    pthread_mutex_unlock(&s->pub_lock);

    /* Nothing can enqueue now; what is left is dropped. */
    for (work *w = s->in_head; w; w = w->next)
        nng_msg_free(w->msg), w->msg = NULL;
    s->in_head = s->in_tail = NULL;
    for (fox_tcmd *c = s->out_head, *next; c; c = next) {
        next = c->next;
        cJSON_Delete(c->result);
        cJSON_Delete(c->values);
        free(c);
    }
    s->out_head = s->out_tail = NULL;
    uv_walk(&s->loop, close_handle, NULL);
}

/* ------------------------------------------------------------------- main */

static int
setup(server *s, const fox_config *cfg, char *err, size_t errlen)
{
    int rv;
    if (fox_mkdir_p(s->d.state_dir, 0750, err, errlen) != FOX_OK ||
        fox_mkdir_p(s->d.runtime_dir, 0750, err, errlen) != FOX_OK)
        return FOX_EIO;

    /* Every endpoint is checked and locked before any socket exists. */
    for (int i = 0; i < s->d.n_listen; i++)
        if ((rv = prepare_endpoint(s, &s->eps[s->n_eps++], s->d.listen[i], err, errlen)) != FOX_OK)
            return rv;
    if ((rv = prepare_endpoint(s, &s->pub_ep, s->d.pub, err, errlen)) != FOX_OK)
        return rv;

    if ((rv = nng_pub0_open(&s->pub)) != 0)
        return fox_errf(err, errlen, FOX_EIO, "pub socket: %s", nng_strerror(rv));
    s->pub_open = 1;
    if ((rv = open_listener(s, s->pub, &s->pub_ep, err, errlen)) != FOX_OK)
        return rv;

    fox_trainer_hooks hooks = {trainer_done, publish_event, s};
    fox_log(FOX_LOG_INFO, "starting the trainer (engine and data)");
    if ((rv = fox_trainer_start(&s->trainer, cfg, &s->d, &hooks, err, errlen)) != FOX_OK)
        return rv;

    if ((rv = nng_rep0_open(&s->rep)) != 0)
        return fox_errf(err, errlen, FOX_EIO, "rep socket: %s", nng_strerror(rv));
    s->rep_open = 1;
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
    for (int i = 0; i < s->n_eps; i++)
        if ((rv = open_listener(s, s->rep, &s->eps[i], err, errlen)) != FOX_OK)
            return rv;
    for (int i = 0; i < s->n_works; i++) {
        atomic_store(&s->works[i].state, W_RECV);
        nng_ctx_recv(s->works[i].ctx, s->works[i].aio);
    }

    int any_ipc = 0;
    for (int i = 0; i < s->n_eps; i++)
        any_ipc |= s->eps[i].transport == T_IPC;
    if (any_ipc && s->d.probe_ms > 0) {
        pthread_mutex_init(&s->probe_lock, NULL);
        pthread_cond_init(&s->probe_cond, NULL);
        if (pthread_create(&s->probe_thread, NULL, probe_main, s) == 0)
            s->probe_running = 1;
    }
    return FOX_OK;
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
        fprintf(stderr, "foxd: out of memory\n");
        return FOX_EXIT_ERROR;
    }
    s->d = *d;
    s->counters.start_ms = fox_mono_ms();
    s->exit_code = FOX_EXIT_OK;
    /* Asked once, before any thread: sd_watchdog_enabled reads the environment. */
    s->watchdog_usec = fox__watchdog_usec();
    signal(SIGPIPE, SIG_IGN);
    if (d->log_file[0]) {
        int fd = open(d->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (fd < 0) {
            fprintf(stderr, "foxd: %s: %s\n", d->log_file, strerror(errno));
            free(s);
            return FOX_EXIT_USAGE;
        }
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->pub_lock, NULL);
    uv_loop_init(&s->loop);
    uv_async_init(&s->loop, &s->wake, on_wake);
    s->wake.data = s;
    s->relisten_mask = -1;

    int rv = setup(s, cfg, err, sizeof err);
    if (rv != FOX_OK) {
        fox_log(FOX_LOG_ERR, "%s", err);
        fprintf(stderr, "foxd: %s\n", err);
        /* Tear down what exists: same order as a normal stop. */
        if (s->trainer) {
            fox_tcmd *c = calloc(1, sizeof *c);
            c->cmd = FOX_CMD_SHUTDOWN;
            if (fox_trainer_submit(s->trainer, c) != FOX_OK)
                free(c);
        }
        fox_trainer_destroy(s->trainer);
        for (int i = 0; s->works && i < s->n_works; i++)
            if (s->works[i].aio)
                nng_aio_stop(s->works[i].aio);
        for (int i = 0; s->works && i < s->n_works; i++)
            if (s->works[i].aio)
                nng_aio_free(s->works[i].aio);
        if (s->tls)
            nng_tls_config_free(s->tls);
        if (s->rep_open)
            nng_close(s->rep);
        if (s->pub_open)
            nng_close(s->pub);
        /* Drop what the failed start left on the outbox (the shutdown's completion). */
        for (fox_tcmd *c = s->out_head, *next; c; c = next) {
            next = c->next;
            cJSON_Delete(c->result);
            free(c);
        }
        uv_walk(&s->loop, close_handle, NULL);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        uv_loop_close(&s->loop);
        free(s->works);
        free(s);
        return rv == FOX_EINVAL || rv == FOX_EPERM || rv == FOX_EBUSY ? FOX_EXIT_USAGE
                                                                      : FOX_EXIT_ERROR;
    }

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

    fox_snapshot *snap = malloc(sizeof *snap);
    if (snap) {
        char line[320];
        fox_trainer_snapshot(s->trainer, snap);
        fox_answer_status_line(snap, line, sizeof line);
        fox__notify("READY=1\nSTATUS=%s", line);
        fox_log(FOX_LOG_NOTICE, "ready: %s; pid %d", line, (int)getpid());
        free(snap);
    }
    publish_event(s, "ready", NULL);

    uv_run(&s->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&s->loop) != 0)
        fox_log(FOX_LOG_WARNING, "event loop closed with handles open");
    for (int i = 0; i < s->n_works; i++)
        nng_aio_free(s->works[i].aio);
    for (int i = 0; i < DEDUP_SLOTS; i++)
        free(s->dedup[i].reply);
    if (s->tls)
        nng_tls_config_free(s->tls);
    for (int i = 0; i < s->n_eps; i++)
        if (s->eps[i].lock_fd >= 0)
            close(s->eps[i].lock_fd);
    if (s->pub_ep.lock_fd >= 0)
        close(s->pub_ep.lock_fd);
    fox_log(FOX_LOG_NOTICE, "stopped");
    int code = s->exit_code;
    free(s->works);
    free(s);
    return code;
}
