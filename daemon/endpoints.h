/*
 * endpoints.h — where foxd listens (internal to daemon/): the endpoint URLs
 * checked against the remote-access rules, the flock of each ipc path, the
 * TLS configuration of tls+tcp://, the nng listeners, who is at the other
 * end of a message, and the self-probe that finds a deaf ipc listener.
 *
 * The self-probe exists because nng 1.5.2 can leave an ipc listener that no
 * longer accepts connections while the process lives on; a thread dials
 * each ipc endpoint now and then and reports the ones that did not answer,
 * and the loop listens on them again after two failures in a row.
 *
 * Threads: everything but the probe runs on the loop thread (or before it
 * starts). The probe thread only dials and calls its report callback.
 */
#ifndef FOX_DAEMON_ENDPOINTS_H
#define FOX_DAEMON_ENDPOINTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "daemon/conf.h"
#include "daemon/pipes.h"

enum { FOX_TRANSPORT_IPC = 0, FOX_TRANSPORT_TCP, FOX_TRANSPORT_TLS };

typedef struct fox_endpoint {
    char url[FOX_URL_MAX];
    int transport; /* FOX_TRANSPORT_* */
    int lock_fd;   /* ipc: flock held for the daemon's life */
    nng_listener l;
    int open;
    int probe_failures; /* loop thread */
    _Atomic int pipes;  /* connections open now (nng threads) */
} fox_endpoint;

/* Called on the probe thread with the endpoints (bit i: eps[i]) that did not answer. */
typedef void (*fox_probe_report)(void *arg, int deaf_mask);

typedef struct fox_endpoints {
    const fox_dconf *d;
    fox_endpoint eps[FOX_DCONF_MAX_LISTEN]; /* the REP socket's */
    int n_eps;
    fox_endpoint pub; /* the PUB socket's */
    nng_tls_config *tls;
    _Atomic int64_t cap_logged_ms; /* last "connection refused" log line */
    _Atomic int cap;               /* connections per listener (fox_endpoints_set_budget) */
    fox_pipes pipes;               /* the control connections' activity (pipes.h) */
    fox_pipes subscribers;         /* the events connections' peers; never swept */

    pthread_t probe_thread;
    int probe_running;
    pthread_mutex_t probe_lock;
    pthread_cond_t probe_cond;
    int probe_quit;
    fox_probe_report report;
    void *report_arg;
} fox_endpoints;

/*
 * Check d's listen and pub URLs and take every ipc lock, before any socket
 * exists: a second foxd must never reach nng_listen on a live path (the
 * listener fault above would deafen the first). FOX_EINVAL for a bad URL or
 * TLS setup, FOX_EPERM for plain tcp:// beyond loopback without
 * daemon.allow_insecure_remote or a plain tcp:// control endpoint without a
 * token (unless daemon.allow_tcp_without_token), FOX_EBUSY for an ipc path another foxd
 * holds; err says which.
 */
int fox_endpoints_prepare(fox_endpoints *set, const fox_dconf *d, char *err, size_t errlen);

/* Whether a tcp:// URL's host is a loopback address literal or "localhost". */
int fox_endpoints_is_loopback(const char *url);

/*
 * Make sure path is a directory only foxd's user controls before a socket or
 * lock goes in it: created 0700 when missing (its parents 0755); refused
 * (FOX_EPERM) when it is not a directory, is owned by another user than
 * foxd's or root, or group or others may write to it. Another local user
 * could otherwise pre-create it, swap the socket for one of theirs and
 * collect the tokens clients send.
 */
int fox_endpoints_secure_dir(const char *path, char *err, size_t errlen);

/* Create and start ep's listener on sock, RECVMAXSZ and permissions set before it starts. */
int fox_endpoint_listen(fox_endpoints *set, nng_socket sock, fox_endpoint *ep, char *err,
                        size_t errlen);

/*
 * Count the connections of sock's listeners and close at once any beyond
 * set->cap on one listener, or beyond a quarter of it from one peer (a tcp
 * or tls address, an ipc uid), so that a flood of idle clients cannot use
 * up the descriptors nor one neighbour lock out the others, on the control
 * listeners and the events listener alike; and keep the activity of each
 * control connection in set->pipes. (Connections that never finish the SP
 * handshake are nng's: it drops one after 10 s without progress.)
 */
int fox_endpoints_limit_pipes(fox_endpoints *set, nng_socket sock);

/*
 * Share budget connections equally among every listener of both sockets
 * and the /metrics one when daemon.metrics_listen is set, each share no
 * more than daemon.max_connections (-1: no budget, the setting alone), and
 * return the share: the caller hands it to /metrics (metrics_http.h). Call
 * it once the listeners are up; until then daemon.max_connections alone
 * applies.
 */
int fox_endpoints_set_budget(fox_endpoints *set, int budget);

/*
 * On the loop: close the control connections (the REP socket's) that have
 * had no request in flight for daemon.idle_timeout_s, or that have none in
 * flight now and connected daemon.max_connection_age_s ago, so that clients
 * who keep asking cannot hold a listener's share for good. The events socket's
 * are never timed out: a subscriber sends nothing by design, so silence
 * says nothing about it; the cap and the per-peer share bound them.
 */
void fox_endpoints_close_idle(fox_endpoints *set);

/* Who sent a message: the transport it came by and, on ipc, the peer's credentials. */
typedef struct fox_peer {
    int transport;          /* FOX_TRANSPORT_*, -1 when unknown (pipe gone) */
    uint64_t uid, gid, pid; /* ipc */
    char addr[64];          /* tcp/tls: the address without the port */
} fox_peer;

void fox_endpoints_peer_of(const fox_endpoints *set, nng_msg *m, fox_peer *p);

/*
 * Whether user uid belongs to group gid, as its primary group or one of its
 * supplementary groups in the user database (the kernel gives an ipc peer's
 * primary gid only; `usermod -aG foxd` adds a supplementary one).
 */
int fox_uid_in_group(uint64_t uid, uint64_t gid);

/*
 * Start the probe thread when an ipc endpoint exists and d->probe_ms > 0;
 * report is called after every round. Stop joins it (a no-op when it never
 * started).
 */
void fox_endpoints_probe_start(fox_endpoints *set, fox_probe_report report, void *arg);
void fox_endpoints_probe_stop(fox_endpoints *set);

/* On the loop: listen again on sock where the probe failed twice in a row. */
void fox_endpoints_relisten(fox_endpoints *set, nng_socket sock, int deaf_mask);

/* Free the TLS configuration and release the ipc locks (after the sockets closed). */
void fox_endpoints_fini(fox_endpoints *set);

#endif
