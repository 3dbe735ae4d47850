/*
 * conn.c — foxctl's REQ and SUB sockets, TLS client setup and the private
 * foxd of `run --spawn`. See conn.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "client/conn.h"
#include "common/dial.h"
#include "common/fsutil.h"

static int errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

void
foxctl_default_url(char *buf, size_t len)
{
    char dir[512];
    struct stat st;
    const char *env = getenv("FOXD_URL");
    if (env && env[0]) {
        snprintf(buf, len, "%s", env);
        return;
    }
    /* A user's own foxd first; else the system service's. */
    if (fox_proto_default_runtime_dir(dir, sizeof dir) == FOX_OK) {
        snprintf(buf, len, "ipc://%s/foxd.sock", dir);
        if (stat(buf + 6, &st) == 0)
            return;
    }
    snprintf(buf, len, "ipc:///run/foxd/foxd.sock");
}

static int
tls_config(nng_tls_config **out, const foxctl_tls *tls, char *err, size_t errlen)
{
    int rv;
    *out = NULL;
    if (!tls || (!tls->cert && !tls->ca))
        return FOXCTL_OK;
    if (!tls->cert != !tls->key)
        return errf(err, errlen, FOXCTL_USAGE, "--cert and --key go together");
    if ((rv = nng_tls_config_alloc(out, NNG_TLS_MODE_CLIENT)) != 0)
        return errf(err, errlen, FOXCTL_USAGE, "TLS: %s", nng_strerror(rv));
    if (tls->cert) {
        /* nng wants the certificate and key in one file or as two PEM strings: read both. */
        char *pem[2] = {NULL, NULL};
        const char *paths[2] = {tls->cert, tls->key};
        for (int i = 0; i < 2; i++) {
            FILE *f = fopen(paths[i], "rb");
            pem[i] = calloc(1, 1 << 20);
            if (!f || !pem[i] || fread(pem[i], 1, (1 << 20) - 1, f) == 0) {
                if (f)
                    fclose(f);
                free(pem[0]);
                free(pem[1]);
                return errf(err, errlen, FOXCTL_USAGE, "%s: cannot read", paths[i]);
            }
            fclose(f);
        }
        rv = nng_tls_config_own_cert(*out, pem[0], pem[1], NULL);
        free(pem[0]);
        free(pem[1]);
        if (rv != 0)
            return errf(err, errlen, FOXCTL_USAGE, "TLS certificate %s / key %s: %s", tls->cert,
                        tls->key, nng_strerror(rv));
    }
    if (tls->ca) {
        if ((rv = nng_tls_config_ca_file(*out, tls->ca)) != 0)
            return errf(err, errlen, FOXCTL_USAGE, "TLS CA %s: %s", tls->ca, nng_strerror(rv));
        nng_tls_config_auth_mode(*out, NNG_TLS_AUTH_MODE_REQUIRED);
    } else {
        nng_tls_config_auth_mode(*out, NNG_TLS_AUTH_MODE_NONE);
    }
    if (tls->server_name && (rv = nng_tls_config_server_name(*out, tls->server_name)) != 0)
        return errf(err, errlen, FOXCTL_USAGE, "TLS server name: %s", nng_strerror(rv));
    return FOXCTL_OK;
}

static int
dial(nng_socket sock, const char *url, nng_tls_config *tls, int timeout_ms, char *err,
     size_t errlen)
{
    nng_dialer d;
    int rv;
    if ((rv = nng_dialer_create(&d, sock, url)) != 0)
        return errf(err, errlen, FOXCTL_USAGE, "%s: %s", url, nng_strerror(rv));
    if (tls && (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tls)) != 0)
        return errf(err, errlen, FOXCTL_USAGE, "%s: TLS: %s", url, nng_strerror(rv));
    /* Synchronous: an absent daemon is an error now, not a silent retry loop. */
    if ((rv = fox_dialer_start_within(d, timeout_ms)) != 0) {
        if (rv == NNG_ETIMEDOUT)
            return errf(err, errlen, FOXCTL_NODAEMON,
                        "the foxd at %s did not complete the connection within %d ms (stopped "
                        "or hung?)",
                        url, timeout_ms);
        /*
         * Our own check of the server's certificate fails with ECRYPTO or
         * EPEERAUTH (wrong --server-name, or --ca not the one that signed
         * it); foxd refusing our certificate shows as the connection cut.
         */
        if (!strncmp(url, "tls", 3) && (rv == NNG_ECRYPTO || rv == NNG_EPEERAUTH))
            return errf(err, errlen, FOXCTL_NODAEMON,
                        "%s: the server's certificate did not verify (%s): check --server-name "
                        "(a name in that certificate) and --ca (the CA that signed it)",
                        url, nng_strerror(rv));
        if (!strncmp(url, "tls", 3) && (rv == NNG_ECONNSHUT || rv == NNG_ECLOSED))
            return errf(err, errlen, FOXCTL_NODAEMON,
                        "%s: TLS handshake refused by foxd (%s): check the client certificate "
                        "(--cert, --key), which foxd's daemon.tls.ca must have signed",
                        url, nng_strerror(rv));
        return errf(err, errlen, FOXCTL_NODAEMON, "no foxd at %s (%s)", url, nng_strerror(rv));
    }
    return FOXCTL_OK;
}

/* Root, this user and the service's own user "foxd" may serve a socket we hand a token to. */
static int
trusted_uid(uid_t uid)
{
    struct passwd pw, *found = NULL;
    char buf[1024];
    if (uid == 0 || uid == geteuid())
        return 1;
    return getpwnam_r("foxd", &pw, buf, sizeof buf, &found) == 0 && found && found->pw_uid == uid;
}

/*
 * Before a token goes over ipc, make sure the socket is foxd's: owned by a
 * trusted user, in a directory a trusted user owns and nobody else may
 * write to. Otherwise another local user could have put their own listener
 * there (in a /tmp directory they created first) and would read the token.
 */
static int
check_ipc_owner(const char *url, char *err, size_t errlen)
{
    const char *path = url + 6;
    char dir[PATH_MAX];
    struct stat st, dst;
    snprintf(dir, sizeof dir, "%s", path);
    if (stat(path, &st) != 0)
        return errf(err, errlen, FOXCTL_NODAEMON, "no foxd at %s (%s)", url, strerror(errno));
    if (stat(dirname(dir), &dst) != 0)
        return errf(err, errlen, FOXCTL_NODAEMON, "%s: %s", dir, strerror(errno));
    if (!trusted_uid(st.st_uid))
        return errf(err, errlen, FOXCTL_NODAEMON,
                    "%s belongs to uid %u (not you, root or foxd): not sending it the token", path,
                    (unsigned)st.st_uid);
    if (!trusted_uid(dst.st_uid) || (dst.st_mode & 022))
        return errf(err, errlen, FOXCTL_NODAEMON,
                    "%s is owned by uid %u with mode %03o: another user could have put the "
                    "socket there; not sending it the token",
                    dir, (unsigned)dst.st_uid, (unsigned)(dst.st_mode & 0777));
    return FOXCTL_OK;
}

int
foxctl_open(foxctl_conn *c, const char *url, const char *token, int timeout_ms,
            const foxctl_tls *tls, char *err, size_t errlen)
{
    int rv;
    memset(c, 0, sizeof *c);
    c->url = url;
    c->token = token;
    c->timeout_ms = timeout_ms;
    if (token && !strncmp(url, "ipc://", 6) &&
        (rv = check_ipc_owner(url, err, errlen)) != FOXCTL_OK)
        return rv;
    if ((rv = tls_config(&c->tls, tls, err, errlen)) != FOXCTL_OK)
        return rv;
    if ((rv = nng_req0_open(&c->req)) != 0)
        return errf(err, errlen, FOXCTL_USAGE, "req socket: %s", nng_strerror(rv));
    c->open = 1;
    /* No silent resend: a REQ would otherwise repeat a command after a reconnect. */
    nng_socket_set_ms(c->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_ms(c->req, NNG_OPT_SENDTIMEO, timeout_ms);
    nng_socket_set_ms(c->req, NNG_OPT_RECVTIMEO, timeout_ms);
    nng_socket_set_size(c->req, NNG_OPT_RECVMAXSZ, 0); /* ISV and config dumps are large */
    return dial(c->req, url, c->tls, timeout_ms, err, errlen);
}

void
foxctl_close(foxctl_conn *c)
{
    if (c->open)
        nng_close(c->req);
    c->open = 0;
    if (c->tls)
        nng_tls_config_free(c->tls);
    c->tls = NULL;
}

/* Ids are random so that two foxctl runs never look like one client's resend. */
static int64_t
new_id(void)
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
        x = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
    return (int64_t)(x & FOX_PROTO_MAX_ID);
}

int
foxctl_call(foxctl_conn *c, const char *cmd, cJSON *args, fox_reply *rep, char *err, size_t errlen)
{
    int64_t id = new_id();
    char *req = fox_proto_request(id, cmd, args, c->token);
    char *buf = NULL;
    size_t len = 0;
    int rv;
    memset(rep, 0, sizeof *rep);
    if (!req)
        return errf(err, errlen, FOXCTL_USAGE, "out of memory");
    rv = nng_send(c->req, req, strlen(req), 0);
    free(req);
    if (rv != 0)
        return errf(err, errlen, FOXCTL_NODAEMON, "%s: send: %s", c->url, nng_strerror(rv));
    rv = nng_recv(c->req, &buf, &len, NNG_FLAG_ALLOC);
    if (rv == NNG_ETIMEDOUT)
        return errf(err, errlen, FOXCTL_NODAEMON, "%s: no answer within %d ms", c->url,
                    c->timeout_ms);
    if (rv != 0)
        return errf(err, errlen, FOXCTL_NODAEMON, "%s: %s", c->url, nng_strerror(rv));
    rv = fox_proto_parse_reply(rep, buf, len, err, errlen);
    nng_free(buf, len);
    if (rv != FOX_OK)
        return FOXCTL_EBADREPLY;
    if (!rep->has_id || rep->id != id) {
        fox_reply_fini(rep);
        return errf(err, errlen, FOXCTL_EBADREPLY, "reply id does not match the request");
    }
    return FOXCTL_OK;
}

int
foxctl_sub_open(nng_socket *sub, const char *url, const foxctl_tls *tls, char *err, size_t errlen)
{
    nng_tls_config *cfg = NULL;
    int rv;
    if ((rv = tls_config(&cfg, tls, err, errlen)) != FOXCTL_OK)
        return rv;
    if ((rv = nng_sub0_open(sub)) != 0) {
        if (cfg)
            nng_tls_config_free(cfg);
        return errf(err, errlen, FOXCTL_USAGE, "sub socket: %s", nng_strerror(rv));
    }
    nng_socket_set(*sub, NNG_OPT_SUB_SUBSCRIBE, "", 0);
    nng_socket_set_size(*sub, NNG_OPT_RECVMAXSZ, 0);
    /* A deeper queue than the default 16 makes gaps rarer when the terminal is slow. */
    nng_socket_set_int(*sub, NNG_OPT_RECVBUF, 1024);
    rv = dial(*sub, url, cfg, 0, err, errlen);
    if (cfg)
        nng_tls_config_free(cfg);
    if (rv != FOXCTL_OK)
        nng_close(*sub);
    return rv;
}

/*
 * nng 1.5.2's nng_close can block forever on a SUB socket whose pipe is being
 * torn down (seen in the integration test: `watch` hung in nng_close after its
 * last event). foxctl exits right after, which releases the socket, so the
 * socket is left to the exit.
 */
void
foxctl_sub_release(nng_socket sub)
{
    (void)sub;
}

int
foxctl_sub_next(nng_socket sub, int timeout_ms, fox_event *ev)
{
    char *buf = NULL;
    size_t len = 0;
    char err[256];
    nng_socket_set_ms(sub, NNG_OPT_RECVTIMEO, timeout_ms);
    for (;;) {
        int rv = nng_recv(sub, &buf, &len, NNG_FLAG_ALLOC);
        if (rv == NNG_ETIMEDOUT)
            return -1;
        if (rv != 0)
            return FOXCTL_NODAEMON;
        rv = fox_proto_parse_event(ev, buf, len, err, sizeof err);
        nng_free(buf, len);
        if (rv == FOX_OK)
            return FOXCTL_OK;
        fox_event_fini(ev); /* not an event of ours: skip it */
    }
}

/* ------------------------------------------------------------- run --spawn */

int
foxctl_spawn(pid_t *pid, char *dir, size_t dirlen, char *url, char *pub_url, size_t urllen,
             char *const extra[], int n_extra, char *err, size_t errlen)
{
    char foxd[PATH_MAX], log[PATH_MAX + 16], state[PATH_MAX + 16], rt[PATH_MAX + 32];
    const char *tmp = getenv("TMPDIR");
    int rv;

    snprintf(dir, dirlen, "%s/foxctl-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return errf(err, errlen, FOXCTL_USAGE, "mkdtemp %s: %s", dir, strerror(errno));
    snprintf(url, urllen, "ipc://%s/foxd.sock", dir);
    snprintf(pub_url, urllen, "ipc://%s/events.sock", dir);
    snprintf(log, sizeof log, "%s/foxd.log", dir);
    snprintf(state, sizeof state, "daemon.state_dir=%s/state", dir);
    snprintf(rt, sizeof rt, "daemon.runtime_dir=%s", dir);
    fox_find_program("foxd", "FOXD", foxd, sizeof foxd);

    char **argv = calloc((size_t)n_extra + 16, sizeof *argv);
    if (!argv)
        return errf(err, errlen, FOXCTL_USAGE, "out of memory");
    int a = 0;
    argv[a++] = foxd;
    argv[a++] = "--listen";
    argv[a++] = url;
    argv[a++] = "--pub";
    argv[a++] = pub_url;
    argv[a++] = "--set";
    argv[a++] = state;
    argv[a++] = "--set";
    argv[a++] = rt;
    /* No metrics textfile timer and no self-probe for a private daemon. */
    argv[a++] = "--set";
    argv[a++] = "daemon.metrics_interval_ms=0";
    argv[a++] = "--set";
    argv[a++] = "daemon.probe_ms=0";
    for (int i = 0; i < n_extra; i++)
        argv[a++] = extra[i];
    argv[a] = NULL;

    /*
     * fork and exec rather than posix_spawn, for the one thing posix_spawn
     * cannot do: the private daemon gets SIGTERM when foxctl dies, however it
     * dies (a kill -9, a lost terminal), and stops as it does for systemd;
     * without it, an orphaned foxd would train on with no one to read it.
     */
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) /* foxctl died before the signal was asked for */
            _exit(127);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0 && fd != STDERR_FILENO) {
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        fd = open("/dev/null", O_WRONLY);
        if (fd >= 0 && fd != STDOUT_FILENO) {
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
        execvp(foxd, argv);
        /* Into foxd.log, which foxctl shows when the daemon exits before answering. */
        fprintf(stderr, "foxctl: cannot start %s: %s\n", foxd, strerror(errno));
        _exit(127);
    }
    rv = child < 0 ? errno : 0;
    free(argv);
    if (rv != 0) {
        foxctl_spawn_cleanup(dir);
        return errf(err, errlen, FOXCTL_USAGE, "cannot start %s: %s", foxd, strerror(rv));
    }
    *pid = child;
    return FOXCTL_OK;
}

void
foxctl_spawn_cleanup(const char *dir)
{
    /* Only what foxd and foxctl put there; nothing else is ours to delete. */
    const char *names[] = {"foxd.sock",        "foxd.sock.lock", "events.sock",
                           "events.sock.lock", "foxd.log",       "state/metrics.jsonl",
                           "state/foxd.prom",  "state/foxd.ckpt", "state/foxd.lock"};
    char p[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/state", dir);
    rmdir(p);
    rmdir(dir);
}
