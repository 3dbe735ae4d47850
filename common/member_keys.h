/*
 * member_keys.h — the engine keys a population's members may hold apart.
 *
 * Each of these keys takes one value (every member's) or a comma list of
 * engine.members values, member k taking the k-th (gpu/config.c). The
 * engine and foxctl's sweep both need the list: the engine to give each
 * member its own values, the sweep to know which jobs can train as the
 * members of one engine (jobs that differ in these keys alone). foxctl
 * links no engine, so the list lives here, where both can read it.
 */
#ifndef FOX_MEMBER_KEYS_H
#define FOX_MEMBER_KEYS_H

#include <string.h>

/* train.seed first: a list of it replaces train.seed + k, the members' default seeds. */
#define FOX_MEMBER_KEY_SEED 0
#define FOX_MEMBER_KEYS     8

static inline const char *
fox_member_key(int i)
{
    static const char *const keys[FOX_MEMBER_KEYS] = {
        "train.seed",      "train.lr",    "train.gamma",          "train.eps_start",
        "train.eps_end",   "train.eps_decay_steps", "policy.band", "env.train_cost_mult"};
    return i >= 0 && i < FOX_MEMBER_KEYS ? keys[i] : NULL;
}

/* The index of key among the member keys, or -1. */
static inline int
fox_member_key_index(const char *key)
{
    for (int i = 0; i < FOX_MEMBER_KEYS; i++)
        if (strcmp(fox_member_key(i), key) == 0)
            return i;
    return -1;
}

#endif
