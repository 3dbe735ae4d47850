/*
 * dedup.h — the memory of mutating requests (internal to daemon/): a REQ
 * socket resends a request after a reconnect, and a resent `run` must get
 * the first run's answer, never start a second run. Each entry remembers a
 * request by its sender, its id and its bytes, and holds either its reply
 * or the requests waiting for that reply.
 *
 * Called on the loop thread only.
 */
#ifndef FOX_DAEMON_DEDUP_H
#define FOX_DAEMON_DEDUP_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/endpoints.h"

#define FOX_DEDUP_SLOTS  1024
#define FOX_DEDUP_TTL_MS (10 * 60 * 1000) /* an id may be reused after this long */

struct fox_work; /* the server's in-flight request */

typedef struct fox_dedup_entry {
    int used;
    uint64_t key;
    int64_t id;
    int64_t when_ms;
    char *reply; /* NULL while the trainer has the command */
    int ok;      /* the reply's "ok" */
    struct fox_work *waiters;
} fox_dedup_entry;

typedef struct fox_dedup {
    fox_dedup_entry slots[FOX_DEDUP_SLOTS];
} fox_dedup;

/*
 * The key of a request: its sender is its uid+pid on ipc (stable across the
 * reconnect after which a REQ resends) and its address on tcp; the key also
 * covers the request bytes, so that only a true resend matches.
 */
uint64_t fox_dedup_key(const fox_peer *p, const char *body, size_t len);

/* The entry of (key, id): one still waiting, or one answered within the TTL; NULL if none. */
fox_dedup_entry *fox_dedup_find(fox_dedup *t, uint64_t key, int64_t id);

/* A fresh entry for (key, id): a free slot, else the oldest answered one; NULL when all wait. */
fox_dedup_entry *fox_dedup_insert(fox_dedup *t, uint64_t key, int64_t id);

/* Free the remembered replies. */
void fox_dedup_fini(fox_dedup *t);

#endif
