/*
 * conn.h — foxctl's connections (internal to client/): one REQ socket for
 * commands, one SUB socket for events, optional mutual TLS, and the private
 * foxd of `run --spawn`.
 *
 * The REQ socket never resends on its own (NNG_OPT_REQ_RESENDTIME is
 * infinite): a command runs once or the client says it does not know. Every
 * failure to reach foxd is reported as FOXCTL_NODAEMON so that scripts can
 * tell "foxd is not there" from "foxd said no". Single-threaded.
 */
#ifndef FOXCTL_CONN_H
#define FOXCTL_CONN_H

#include <stdint.h>
#include <sys/types.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "proto/proto.h"

/* foxctl's exit statuses. */
enum {
    FOXCTL_OK = 0,
    FOXCTL_EREPLY = 1, /* foxd answered with an error (or the run failed) */
    FOXCTL_USAGE = 2,
    FOXCTL_NODAEMON = 3,  /* nothing answered at the URL within the timeout */
    FOXCTL_EBADREPLY = 4, /* the answer broke the protocol */
    FOXCTL_HALTED = 5,    /* the run halted (stability system) */
    FOXCTL_INTERRUPTED = 130
};

typedef struct foxctl_tls {
    const char *cert, *key, *ca, *server_name;
} foxctl_tls;

typedef struct foxctl_conn {
    nng_socket req;
    int open;
    const char *url;
    const char *token;
    int timeout_ms;
    nng_tls_config *tls;
} foxctl_conn;

/* Dial url (foxd must be listening). FOXCTL_NODAEMON or FOXCTL_USAGE with a message. */
int foxctl_open(foxctl_conn *c, const char *url, const char *token, int timeout_ms,
                const foxctl_tls *tls, char *err, size_t errlen);
void foxctl_close(foxctl_conn *c);

/*
 * Send one command (args owned, may be NULL) and wait for its reply. On
 * FOXCTL_OK *rep holds a parsed reply (ok or not: check rep->ok); release it
 * with fox_reply_fini. Otherwise FOXCTL_NODAEMON / FOXCTL_EBADREPLY with err.
 */
int foxctl_call(foxctl_conn *c, const char *cmd, cJSON *args, fox_reply *rep, char *err,
                size_t errlen);

/* Subscribe to every event at url. */
int foxctl_sub_open(nng_socket *sub, const char *url, const foxctl_tls *tls, char *err,
                    size_t errlen);
/* Next event within timeout_ms: FOXCTL_OK, or -1 on timeout, FOXCTL_NODAEMON when closed. */
int foxctl_sub_next(nng_socket sub, int timeout_ms, fox_event *ev);

/*
 * Start a private foxd (posix_spawn: never fork once nng runs) on ipc sockets
 * in a fresh directory under $TMPDIR, with extra arguments appended. Fills
 * dir, url and pub_url; its stderr goes to dir/foxd.log.
 */
int foxctl_spawn(pid_t *pid, char *dir, size_t dirlen, char *url, char *pub_url, size_t urllen,
                 char *const extra[], int n_extra, char *err, size_t errlen);
/* Remove the spawned daemon's directory. */
void foxctl_spawn_cleanup(const char *dir);

/* Default control URL: $FOXD_URL, else the runtime directory's socket (see proto.h). */
void foxctl_default_url(char *buf, size_t len);

/* End of a SUB socket's use (see conn.c: nng_close may hang there). */
void foxctl_sub_release(nng_socket sub);

#endif
