/*
 * pipes.h — the activity of foxd's control connections (internal to
 * daemon/): for each open pipe of the REP socket, when it last finished a
 * request, how many of its requests are in flight and when it connected, so
 * that the loop can close the ones idle longer than daemon.idle_timeout_s
 * and, between two requests, the ones older than
 * daemon.max_connection_age_s.
 *
 * A connection that finished the SP handshake and then sends nothing would
 * otherwise hold its descriptor for the daemon's life; the per-listener cap
 * (daemon.max_connections) only bounds how many there are. A pipe with a
 * request in flight is never idle, however long the trainer takes. A
 * client that asks something every few seconds is never idle either; the
 * age limit frees its slot now and then for others, and nng clients dial
 * again by themselves.
 *
 * A pipe carries its peer (a tcp or tls address, an ipc uid), hashed, so
 * that one peer can be held to a part of a listener's connections. The
 * events listener keeps a table of its own for that count alone: its
 * pipes are never swept.
 *
 * Threads: nng's threads add and remove pipes (pipe notifications) and
 * begin requests (the receive callback); the loop ends them and sweeps.
 * Every call takes the table's lock; the lookups are a hash on the pipe id.
 */
#ifndef FOX_DAEMON_PIPES_H
#define FOX_DAEMON_PIPES_H

#include <pthread.h>
#include <stdint.h>

typedef struct fox_pipe_slot {
    uint32_t id; /* nng_pipe_id; 0 = free */
    int in_flight;
    int64_t last_ms; /* monotonic: connected, or its last reply left */
    int64_t born_ms; /* monotonic: connected */
    uint64_t peer;   /* the peer's address, hashed; 0 = not counted (ipc) */
} fox_pipe_slot;

typedef struct fox_pipes {
    pthread_mutex_t lock;
    fox_pipe_slot *slots;
    uint32_t cap; /* a power of two; at most half of it used */
    uint32_t used;
} fox_pipes;

int fox_pipes_init(fox_pipes *t);
void fox_pipes_fini(fox_pipes *t);

/*
 * A pipe opened at now_ms from peer (0: not counted). FOX_EBUSY, the pipe
 * not added, when peer_max pipes from peer are in the table already
 * (peer_max <= 0: no limit); counting them walks the table, which the
 * connection cap keeps small. FOX_ENOMEM when the table cannot grow (the
 * pipe is then neither timed out nor counted).
 */
int fox_pipes_add(fox_pipes *t, uint32_t id, uint64_t peer, int peer_max, int64_t now_ms);
/* A pipe closed; an id never added is ignored. */
void fox_pipes_remove(fox_pipes *t, uint32_t id);

/* A request arrived on the pipe: it is busy until the matching fox_pipes_end. */
void fox_pipes_begin(fox_pipes *t, uint32_t id);
/* A request's reply left (or was dropped) at now_ms: the idle time counts from here. */
void fox_pipes_end(fox_pipes *t, uint32_t id, int64_t now_ms);

/*
 * The ids of up to max pipes with nothing in flight and either no activity
 * for idle_ms or longer or connected age_ms or longer ago (0: either limit
 * off), into out; returns how many. The caller closes them after this
 * returns (closing one calls back into fox_pipes_remove).
 */
int fox_pipes_expired(fox_pipes *t, int64_t now_ms, int64_t idle_ms, int64_t age_ms, uint32_t *out,
                      int max);

#endif
