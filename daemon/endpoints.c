/*
 * endpoints.c — listeners, ipc locks, TLS, peers and the self-probe of
 * foxd. See endpoints.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "common/clock.h"
#include "common/dial.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "daemon/endpoints.h"

static int
scheme_of(const char *url)
{
    if (!strncmp(url, "ipc://", 6))
        return FOX_TRANSPORT_IPC;
    if (!strncmp(url, "tcp://", 6) || !strncmp(url, "tcp4://", 7) || !strncmp(url, "tcp6://", 7))
        return FOX_TRANSPORT_TCP;
    if (!strncmp(url, "tls+tcp://", 10) || !strncmp(url, "tls+tcp4://", 11) ||
        !strncmp(url, "tls+tcp6://", 11))
        return FOX_TRANSPORT_TLS;
    return -1;
}

/*
 * tcp://127.0.0.1:5555, tcp://localhost:5555, tcp://[::1]:5555 stay on this
 * machine. The host must be an address literal (or "localhost"): a name
 * such as "127.example.com" may resolve anywhere.
 */
int
fox_endpoints_is_loopback(const char *url)
{
    const char *h = strstr(url, "://");
    char host[FOX_URL_MAX];
    struct in_addr a4;
    struct in6_addr a6;
    if (!h)
        return 0;
    h += 3;
    if (h[0] == '[') {
        size_t n = strcspn(h + 1, "]");
        if (h[1 + n] != ']' || n >= sizeof host)
            return 0;
        memcpy(host, h + 1, n);
        host[n] = 0;
        return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    const char *colon = strrchr(h, ':');
    size_t n = colon ? (size_t)(colon - h) : strlen(h);
    if (n >= sizeof host)
        return 0;
    memcpy(host, h, n);
    host[n] = 0;
    if (strcmp(host, "localhost") == 0)
        return 1;
    return inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/*
 * What to do about a sockets' directory foxd refuses. Under /tmp anyone may
 * make foxd's default directory first; a private one avoids the race.
 */
#define SQUAT_HINT                                                                                 \
    "remove it; under systemd let RuntimeDirectory= make a fresh one at each start, elsewhere "    \
    "set daemon.runtime_dir (or --listen and --pub) to a directory only foxd's user can write"

int
fox_endpoints_secure_dir(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        char parent[FOX_PATH_MAX];
        if (errno != ENOENT)
            return fox_errf(err, errlen, FOX_EIO, "%s: %s", path, strerror(errno));
        snprintf(parent, sizeof parent, "%s", path);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = 0;
            if (fox_mkdir_p(parent, 0755, err, errlen) != FOX_OK)
                return FOX_EIO;
        }
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return fox_errf(err, errlen, FOX_EIO, "mkdir %s: %s", path, strerror(errno));
        if (lstat(path, &st) != 0)
            return fox_errf(err, errlen, FOX_EIO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return fox_errf(err, errlen, FOX_EPERM,
                        "%s is not a directory (a symlink?); refusing it: %s", path, SQUAT_HINT);
    if (st.st_uid != geteuid() && st.st_uid != 0)
        return fox_errf(err, errlen, FOX_EPERM,
                        "%s belongs to uid %u, not to foxd's uid %u: another user could swap "
                        "its sockets; %s",
                        path, (unsigned)st.st_uid, (unsigned)geteuid(), SQUAT_HINT);
    if (st.st_mode & 022)
        return fox_errf(err, errlen, FOX_EPERM,
                        "%s is writable by %s (mode %03o): another user could swap its sockets; "
                        "chmod go-w it if it is yours, else %s",
                        path, (st.st_mode & 002) ? "everyone" : "its group",
                        (unsigned)(st.st_mode & 0777), SQUAT_HINT);
    return FOX_OK;
}

/*
 * Take the flock of an ipc endpoint before anything listens on it: a second
 * foxd must never reach nng_listen on a live path (nng 1.5.2 would deafen
 * the first). With the lock held, a socket file left behind is stale.
 */
static int
lock_ipc(fox_endpoint *ep, char *err, size_t errlen)
{
    const char *path = ep->url + 6;
    char lockpath[FOX_URL_MAX + 8], dir[FOX_URL_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        int rv = fox_endpoints_secure_dir(dir, err, errlen);
        if (rv != FOX_OK)
            return rv;
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
make_tls(fox_endpoints *set, char *err, size_t errlen)
{
    int rv;
    char *cert, *key;
    if (set->tls)
        return FOX_OK;
    if (!set->d->tls_cert[0] || !set->d->tls_key[0] || !set->d->tls_ca[0])
        return fox_errf(err, errlen, FOX_EINVAL,
                        "tls+tcp:// needs daemon.tls.cert, daemon.tls.key and daemon.tls.ca "
                        "(clients must present a certificate signed by that CA)");
    if (!(cert = read_file(set->d->tls_cert, err, errlen)))
        return FOX_EIO;
    if (!(key = read_file(set->d->tls_key, err, errlen))) {
        free(cert);
        return FOX_EIO;
    }
    if ((rv = nng_tls_config_alloc(&set->tls, NNG_TLS_MODE_SERVER)) != 0 ||
        (rv = nng_tls_config_own_cert(set->tls, cert, key, NULL)) != 0 ||
        (rv = nng_tls_config_ca_file(set->tls, set->d->tls_ca)) != 0 ||
        (rv = nng_tls_config_auth_mode(set->tls, NNG_TLS_AUTH_MODE_REQUIRED)) != 0) {
        fox_errf(err, errlen, FOX_EINVAL, "TLS setup (%s, %s, %s): %s", set->d->tls_cert,
                 set->d->tls_key, set->d->tls_ca, nng_strerror(rv));
        rv = FOX_EINVAL;
    }
    memset(key, 0, strlen(key));
    free(cert);
    free(key);
    return rv;
}

int
fox_endpoint_listen(fox_endpoints *set, nng_socket sock, fox_endpoint *ep, char *err, size_t errlen)
{
    int rv;
    if ((rv = nng_listener_create(&ep->l, sock, ep->url)) != 0)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: %s", ep->url, nng_strerror(rv));
    rv = nng_listener_set_size(ep->l, NNG_OPT_RECVMAXSZ, (size_t)set->d->recv_max);
    if (rv == 0 && ep->transport == FOX_TRANSPORT_IPC)
        rv = nng_listener_set_int(ep->l, NNG_OPT_IPC_PERMISSIONS, set->d->ipc_mode);
    if (rv == 0 && ep->transport == FOX_TRANSPORT_TLS) /* made by prepare_endpoint */
        rv = nng_listener_set_ptr(ep->l, NNG_OPT_TLS_CONFIG, set->tls);
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
prepare_endpoint(fox_endpoints *set, fox_endpoint *ep, const char *url, char *err, size_t errlen)
{
    memset(ep, 0, sizeof *ep);
    ep->lock_fd = -1;
    snprintf(ep->url, sizeof ep->url, "%s", url);
    ep->transport = scheme_of(url);
    if (ep->transport < 0)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: endpoints are ipc://, tcp:// or tls+tcp://",
                        url);
    if (ep->transport == FOX_TRANSPORT_TCP && !fox_endpoints_is_loopback(url) &&
        !set->d->allow_insecure_remote)
        return fox_errf(err, errlen, FOX_EPERM,
                        "%s listens beyond loopback without TLS: use tls+tcp:// or set "
                        "daemon.allow_insecure_remote",
                        url);
    /*
     * Plain tcp:// has no peer credentials: without a token every local user
     * (and beyond loopback, everyone) could run, save and shut down. The PUB
     * endpoint only sends events, so it needs no token.
     */
    if (ep->transport == FOX_TRANSPORT_TCP && ep != &set->pub && !set->d->token[0]) {
        if (!set->d->allow_tcp_without_token)
            return fox_errf(err, errlen, FOX_EPERM,
                            "%s has no authentication: set daemon.token_file (or use ipc:// or "
                            "tls+tcp://), or accept the risk with "
                            "daemon.allow_tcp_without_token",
                            url);
        fox_log(FOX_LOG_WARNING,
                "INSECURE: %s accepts mutating commands from anyone who can connect "
                "(daemon.allow_tcp_without_token is set and there is no token)",
                url);
    }
    if (ep->transport == FOX_TRANSPORT_TLS)
        return make_tls(set, err, errlen);
    if (ep->transport == FOX_TRANSPORT_IPC)
        return lock_ipc(ep, err, errlen);
    return FOX_OK;
}

/* The self-probe's bound on each of its dial, send and receive. */
#define PROBE_MS 3000

/*
 * Dial our own ipc endpoint afresh and ask for the version; 0 when it
 * answered. The dial is bounded too: a wedged listener lets the connection
 * open and never finishes nng's 10 s handshake. The socket lives as long as the probe thread: only the dialer
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
    if ((rv = fox_dialer_start_within(dl, PROBE_MS)) == 0 &&
        (rv = nng_send(sock, (void *)req, strlen(req), 0)) == 0 &&
        (rv = nng_recv(sock, &reply, &len, NNG_FLAG_ALLOC)) == 0)
        nng_free(reply, len);
    nng_dialer_close(dl);
    return rv;
}

static void *
probe_main(void *arg)
{
    fox_endpoints *set = arg;
    nng_socket sock;
    if (nng_req0_open(&sock) != 0) {
        fox_log(FOX_LOG_WARNING, "self-probe disabled: no REQ socket");
        return NULL;
    }
    nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, PROBE_MS);
    nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, PROBE_MS);
    nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += set->d->probe_ms / 1000;
        ts.tv_nsec += (long)(set->d->probe_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&set->probe_lock);
        while (!set->probe_quit &&
               pthread_cond_timedwait(&set->probe_cond, &set->probe_lock, &ts) != ETIMEDOUT)
            ;
        int quit = set->probe_quit;
        pthread_mutex_unlock(&set->probe_lock);
        if (quit)
            break;
        int deaf = 0;
        for (int i = 0; i < set->n_eps; i++)
            if (set->eps[i].transport == FOX_TRANSPORT_IPC &&
                probe_once(sock, set->eps[i].url) != 0)
                deaf |= 1 << i;
        set->report(set->report_arg, deaf);
    }
    nng_close(sock);
    return NULL;
}

void
fox_endpoints_probe_start(fox_endpoints *set, fox_probe_report report, void *arg)
{
    int any_ipc = 0;
    for (int i = 0; i < set->n_eps; i++)
        any_ipc |= set->eps[i].transport == FOX_TRANSPORT_IPC;
    if (!any_ipc || set->d->probe_ms <= 0)
        return;
    set->report = report;
    set->report_arg = arg;
    pthread_mutex_init(&set->probe_lock, NULL);
    pthread_cond_init(&set->probe_cond, NULL);
    if (pthread_create(&set->probe_thread, NULL, probe_main, set) == 0)
        set->probe_running = 1;
}

void
fox_endpoints_probe_stop(fox_endpoints *set)
{
    if (!set->probe_running)
        return;
    pthread_mutex_lock(&set->probe_lock);
    set->probe_quit = 1;
    pthread_cond_signal(&set->probe_cond);
    pthread_mutex_unlock(&set->probe_lock);
    pthread_join(set->probe_thread, NULL);
    set->probe_running = 0;
}

void
fox_endpoints_relisten(fox_endpoints *set, nng_socket sock, int deaf)
{
    for (int i = 0; i < set->n_eps; i++) {
        fox_endpoint *ep = &set->eps[i];
        if (ep->transport != FOX_TRANSPORT_IPC)
            continue;
        if (!(deaf & (1 << i))) {
            ep->probe_failures = 0;
            continue;
        }
        if (++ep->probe_failures < 2)
            continue;
        char err[512];
        fox_log(FOX_LOG_WARNING, "%s does not answer its own probe; listening again", ep->url);
        nng_listener_close(ep->l);
        ep->open = 0;
        unlink(ep->url + 6);
        if (fox_endpoint_listen(set, sock, ep, err, sizeof err) != FOX_OK)
            fox_log(FOX_LOG_ERR, "%s", err);
        ep->probe_failures = 0;
    }
}

/* ------------------------------------------------------- connection caps */

#define CAP_LOG_MS 1000 /* at most one line about refused connections this often */
#define PEER_SHARE 4    /* one peer may hold this fraction of a listener's connections */

/*
 * Who is at the other end of a pipe, hashed with FNV-1a: a tcp or tls
 * peer's address (not its port), an ipc peer's uid; 0 when nng cannot say
 * it, which leaves the connection uncounted. On ipc the kernel names the
 * user, and one user is one neighbour however many processes it runs.
 */
static uint64_t
peer_key(nng_pipe p, int transport)
{
    nng_sockaddr sa;
    uint64_t uid;
    const uint8_t *b;
    size_t len;
    uint16_t family;
    if (transport == FOX_TRANSPORT_IPC) {
        if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) != 0)
            return 0;
        family = NNG_AF_IPC;
        b = (const uint8_t *)&uid;
        len = sizeof uid;
    } else if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0) {
        return 0;
    } else if (sa.s_family == NNG_AF_INET) {
        family = NNG_AF_INET;
        b = (const uint8_t *)&sa.s_in.sa_addr;
        len = sizeof sa.s_in.sa_addr;
    } else if (sa.s_family == NNG_AF_INET6) {
        family = NNG_AF_INET6;
        b = sa.s_in6.sa_addr;
        len = sizeof sa.s_in6.sa_addr;
    } else {
        return 0;
    }
    uint64_t h = 14695981039346656037ull ^ family;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h | 1;
}

static fox_endpoint *
endpoint_of_pipe(fox_endpoints *set, nng_pipe p)
{
    int id = nng_listener_id(nng_pipe_listener(p));
    if (id <= 0)
        return NULL; /* a dialed pipe (the probe's socket is its own) */
    for (int i = 0; i < set->n_eps; i++)
        if (nng_listener_id(set->eps[i].l) == id)
            return &set->eps[i];
    return nng_listener_id(set->pub.l) == id ? &set->pub : NULL;
}

static void
on_pipe(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    fox_endpoints *set = arg;
    fox_endpoint *ep = endpoint_of_pipe(set, p);
    if (!ep)
        return;
    /* Events pipes are counted per peer but never timed out (endpoints.h): a table of their own. */
    fox_pipes *table = ep == &set->pub ? &set->subscribers : &set->pipes;
    /* nng reports the removal of every pipe that saw ADD_PRE, closed there or not. */
    if (ev == NNG_PIPE_EV_REM_POST) {
        atomic_fetch_sub(&ep->pipes, 1);
        fox_pipes_remove(table, nng_pipe_id(p));
        return;
    }
    int n = atomic_fetch_add(&ep->pipes, 1) + 1;
    int cap = atomic_load(&set->cap);
    if (n <= cap) {
        int peer_max = cap / PEER_SHARE > 0 ? cap / PEER_SHARE : 1;
        int rv = fox_pipes_add(table, nng_pipe_id(p), peer_key(p, ep->transport), peer_max,
                               fox_mono_ms());
        if (rv == FOX_ENOMEM)
            fox_log(FOX_LOG_WARNING, "%s: out of memory; connection %u is outside the limits",
                    ep->url, (unsigned)nng_pipe_id(p));
        if (rv != FOX_EBUSY)
            return;
    }
    nng_pipe_close(p);
    int64_t now = fox_mono_ms();
    int64_t last = atomic_load(&set->cap_logged_ms);
    if (now - last >= CAP_LOG_MS && atomic_compare_exchange_strong(&set->cap_logged_ms, &last, now))
        fox_log(FOX_LOG_WARNING,
                "%s: %d connections open; closing new ones (daemon.max_connections, this "
                "listener's share of the descriptors, or a quarter of that from one peer)",
                ep->url, n - 1);
}

int
fox_endpoints_limit_pipes(fox_endpoints *set, nng_socket sock)
{
    int rv = nng_pipe_notify(sock, NNG_PIPE_EV_ADD_PRE, on_pipe, set);
    if (rv == 0)
        rv = nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, on_pipe, set);
    return rv;
}

int
fox_endpoints_set_budget(fox_endpoints *set, int budget)
{
    /*
     * Equal shares, so that a flood on one listener leaves the others their
     * connections: the operator's ipc socket stays open under a tcp flood,
     * or under one on /metrics.
     */
    int listeners = set->n_eps + 1 + (set->d->metrics_listen[0] != 0);
    int share = budget < 0 ? set->d->max_connections : budget / listeners;
    if (share < 1)
        share = 1;
    if (share > set->d->max_connections)
        share = set->d->max_connections;
    atomic_store(&set->cap, share);
    return share;
}

#define IDLE_BATCH 256 /* connections closed per sweep at most; the next sweep takes the rest */

void
fox_endpoints_close_idle(fox_endpoints *set)
{
    uint32_t ids[IDLE_BATCH];
    int n = fox_pipes_expired(&set->pipes, fox_mono_ms(), (int64_t)set->d->idle_timeout_s * 1000,
                              (int64_t)set->d->max_connection_age_s * 1000, ids, IDLE_BATCH);
    for (int i = 0; i < n; i++) {
        nng_pipe p = {.id = ids[i]};
        nng_pipe_close(p);
        /* A pipe nng has already let go of stays out of the next sweep all the same. */
        fox_pipes_remove(&set->pipes, ids[i]);
    }
    if (n)
        fox_log(FOX_LOG_INFO,
                "closed %d control connection(s) idle for %d s (daemon.idle_timeout_s) or "
                "connected %d s ago (daemon.max_connection_age_s)",
                n, set->d->idle_timeout_s, set->d->max_connection_age_s);
}

/* ------------------------------------------------------------------- peers */

void
fox_endpoints_peer_of(const fox_endpoints *set, nng_msg *m, fox_peer *p)
{
    nng_pipe pipe = nng_msg_get_pipe(m);
    nng_listener l = nng_pipe_listener(pipe);
    nng_sockaddr sa;
    memset(p, 0, sizeof *p);
    p->transport = -1;
    for (int i = 0; i < set->n_eps; i++)
        if (set->eps[i].open && nng_listener_id(set->eps[i].l) == nng_listener_id(l))
            p->transport = set->eps[i].transport;
    if (p->transport == FOX_TRANSPORT_IPC) {
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

int
fox_uid_in_group(uint64_t uid, uint64_t gid)
{
    struct passwd pw, *found = NULL;
    char buf[4096];
    gid_t groups[256];
    int n = (int)(sizeof groups / sizeof groups[0]);
    if (getpwuid_r((uid_t)uid, &pw, buf, sizeof buf, &found) != 0 || !found)
        return 0;
    if ((uint64_t)found->pw_gid == gid)
        return 1;
    /* A user in more groups than fit is judged on the ones that do. */
    getgrouplist(found->pw_name, found->pw_gid, groups, &n);
    for (int i = 0; i < n && i < (int)(sizeof groups / sizeof groups[0]); i++)
        if ((uint64_t)groups[i] == gid)
            return 1;
    return 0;
}

/* ----------------------------------------------------------------- set up */

int
fox_endpoints_prepare(fox_endpoints *set, const fox_dconf *d, char *err, size_t errlen)
{
    int rv;
    memset(set, 0, sizeof *set);
    set->d = d;
    atomic_store(&set->cap, d->max_connections);
    set->pub.lock_fd = -1;
    if (fox_pipes_init(&set->pipes) != FOX_OK || fox_pipes_init(&set->subscribers) != FOX_OK)
        return fox_errf(err, errlen, FOX_ENOMEM, "out of memory");
    for (int i = 0; i < d->n_listen; i++)
        if ((rv = prepare_endpoint(set, &set->eps[set->n_eps++], d->listen[i], err, errlen)) !=
            FOX_OK)
            return rv;
    return prepare_endpoint(set, &set->pub, d->pub, err, errlen);
}

void
fox_endpoints_fini(fox_endpoints *set)
{
    if (set->tls)
        nng_tls_config_free(set->tls);
    set->tls = NULL;
    for (int i = 0; i < set->n_eps; i++)
        if (set->eps[i].lock_fd >= 0)
            close(set->eps[i].lock_fd);
    if (set->pub.lock_fd >= 0)
        close(set->pub.lock_fd);
    set->n_eps = 0;
    set->pub.lock_fd = -1;
    fox_pipes_fini(&set->pipes);
    fox_pipes_fini(&set->subscribers);
}
