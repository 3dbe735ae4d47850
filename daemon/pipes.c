/* pipes.c — the activity of foxd's control connections. See pipes.h. */
#include <stdlib.h>

#include "common/error.h"
#include "daemon/pipes.h"

#define FIRST_CAP 64

/* nng numbers pipes in sequence: a multiplicative hash spreads them over the table. */
static uint32_t
home_of(const fox_pipes *t, uint32_t id)
{
    return (id * 2654435761u) & (t->cap - 1);
}

static fox_pipe_slot *
find(fox_pipes *t, uint32_t id)
{
    for (uint32_t i = home_of(t, id);; i = (i + 1) & (t->cap - 1)) {
        if (t->slots[i].id == id)
            return &t->slots[i];
        if (t->slots[i].id == 0)
            return NULL;
    }
}

static void
place(fox_pipes *t, fox_pipe_slot s)
{
    uint32_t i = home_of(t, s.id);
    while (t->slots[i].id != 0)
        i = (i + 1) & (t->cap - 1);
    t->slots[i] = s;
}

static int
grow(fox_pipes *t)
{
    fox_pipe_slot *old = t->slots;
    uint32_t old_cap = t->cap;
    fox_pipe_slot *fresh = calloc((size_t)old_cap * 2, sizeof *fresh);
    if (!fresh)
        return FOX_ENOMEM;
    t->slots = fresh;
    t->cap = old_cap * 2;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i].id != 0)
            place(t, old[i]);
    free(old);
    return FOX_OK;
}

int
fox_pipes_init(fox_pipes *t)
{
    t->slots = calloc(FIRST_CAP, sizeof *t->slots);
    if (!t->slots)
        return FOX_ENOMEM;
    t->cap = FIRST_CAP;
    t->used = 0;
    pthread_mutex_init(&t->lock, NULL);
    return FOX_OK;
}

void
fox_pipes_fini(fox_pipes *t)
{
    if (!t->slots)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->slots);
    t->slots = NULL;
}

static int
count_peer(const fox_pipes *t, uint64_t peer)
{
    int n = 0;
    for (uint32_t i = 0; i < t->cap; i++)
        n += t->slots[i].id != 0 && t->slots[i].peer == peer;
    return n;
}

int
fox_pipes_add(fox_pipes *t, uint32_t id, uint64_t peer, int peer_max, int64_t now_ms)
{
    int rv = FOX_OK;
    pthread_mutex_lock(&t->lock);
    if (!find(t, id)) {
        if (peer != 0 && peer_max > 0 && count_peer(t, peer) >= peer_max)
            rv = FOX_EBUSY;
        else if (2 * (t->used + 1) > t->cap)
            rv = grow(t);
        if (rv == FOX_OK) {
            place(t, (fox_pipe_slot){id, 0, now_ms, now_ms, peer});
            t->used++;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return rv;
}

void
fox_pipes_remove(fox_pipes *t, uint32_t id)
{
    pthread_mutex_lock(&t->lock);
    fox_pipe_slot *s = find(t, id);
    if (s) {
        /* Linear probing: re-place the rest of the run so that no lookup stops at the hole. */
        uint32_t i = (uint32_t)(s - t->slots);
        t->slots[i].id = 0;
        t->used--;
        for (i = (i + 1) & (t->cap - 1); t->slots[i].id != 0; i = (i + 1) & (t->cap - 1)) {
            fox_pipe_slot moved = t->slots[i];
            t->slots[i].id = 0;
            place(t, moved);
        }
    }
    pthread_mutex_unlock(&t->lock);
}

void
fox_pipes_begin(fox_pipes *t, uint32_t id)
{
    pthread_mutex_lock(&t->lock);
    fox_pipe_slot *s = find(t, id);
    if (s)
        s->in_flight++;
    pthread_mutex_unlock(&t->lock);
}

void
fox_pipes_end(fox_pipes *t, uint32_t id, int64_t now_ms)
{
    pthread_mutex_lock(&t->lock);
    fox_pipe_slot *s = find(t, id);
    if (s) {
        if (s->in_flight > 0)
            s->in_flight--;
        s->last_ms = now_ms;
    }
    pthread_mutex_unlock(&t->lock);
}

int
fox_pipes_expired(fox_pipes *t, int64_t now_ms, int64_t idle_ms, int64_t age_ms, uint32_t *out,
                  int max)
{
    int n = 0;
    pthread_mutex_lock(&t->lock);
    for (uint32_t i = 0; i < t->cap && n < max; i++) {
        const fox_pipe_slot *s = &t->slots[i];
        if (s->id == 0 || s->in_flight > 0)
            continue;
        if ((idle_ms > 0 && now_ms - s->last_ms >= idle_ms) ||
            (age_ms > 0 && now_ms - s->born_ms >= age_ms))
            out[n++] = s->id;
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}
