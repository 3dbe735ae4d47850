/* dedup.c — the memory of mutating requests. See dedup.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/hash.h"
#include "daemon/dedup.h"

uint64_t
fox_dedup_key(const fox_peer *p, const char *body, size_t len)
{
    char who[96];
    if (p->transport == FOX_TRANSPORT_IPC)
        snprintf(who, sizeof who, "ipc:%llu:%llu", (unsigned long long)p->uid,
                 (unsigned long long)p->pid);
    else
        snprintf(who, sizeof who, "net:%s", p->addr);
    return fox_fnv1a(fox_fnv1a_str(FOX_FNV_OFFSET, who), body, len);
}

fox_dedup_entry *
fox_dedup_find(fox_dedup *t, uint64_t key, int64_t id)
{
    int64_t now = fox_mono_ms();
    for (int i = 0; i < FOX_DEDUP_SLOTS; i++) {
        fox_dedup_entry *e = &t->slots[i];
        if (e->used && e->key == key && e->id == id &&
            (!e->reply || now - e->when_ms < FOX_DEDUP_TTL_MS))
            return e;
    }
    return NULL;
}

fox_dedup_entry *
fox_dedup_insert(fox_dedup *t, uint64_t key, int64_t id)
{
    fox_dedup_entry *victim = NULL;
    for (int i = 0; i < FOX_DEDUP_SLOTS; i++) {
        fox_dedup_entry *e = &t->slots[i];
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

void
fox_dedup_fini(fox_dedup *t)
{
    for (int i = 0; i < FOX_DEDUP_SLOTS; i++) {
        free(t->slots[i].reply);
        t->slots[i].reply = NULL;
    }
}
