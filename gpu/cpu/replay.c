/* replay.c — ring buffer and sum tree of the CPU backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/cpu/replay.h"

int
fox_replay_init(fox_replay *rb, int capacity, int prioritized, float alpha)
{
    memset(rb, 0, sizeof *rb);
    rb->capacity = capacity;
    rb->prioritized = prioritized;
    rb->alpha = alpha;
    rb->max_priority = 1.0f;
    rb->items = calloc((size_t)capacity, sizeof *rb->items);
    if (!rb->items)
        return FOX_ENOMEM;
    if (prioritized) {
        rb->leaves = 1;
        while (rb->leaves < capacity)
            rb->leaves <<= 1;
        rb->tree = calloc(2 * (size_t)rb->leaves, sizeof *rb->tree);
        if (!rb->tree) {
            fox_replay_fini(rb);
            return FOX_ENOMEM;
        }
    }
    return FOX_OK;
}

void
fox_replay_fini(fox_replay *rb)
{
    free(rb->items);
    free(rb->tree);
    memset(rb, 0, sizeof *rb);
}

void
fox_replay_clear(fox_replay *rb)
{
    rb->size = rb->head = 0;
    rb->pushes = 0;
    rb->max_priority = 1.0f;
    if (rb->tree)
        memset(rb->tree, 0, 2 * (size_t)rb->leaves * sizeof *rb->tree);
}

static void
tree_set(fox_replay *rb, int i, double value)
{
    int node = rb->leaves + i;
    double diff = value - rb->tree[node];
    for (; node >= 1; node >>= 1)
        rb->tree[node] += diff;
}

void
fox_replay_push(fox_replay *rb, const fox_transition *t)
{
    int i = rb->head;
    rb->items[i] = *t;
    if (rb->prioritized)
        tree_set(rb, i, pow(rb->max_priority, rb->alpha));
    rb->head = (rb->head + 1) % rb->capacity;
    rb->pushes++;
    if (rb->size < rb->capacity)
        rb->size++;
}

/* Leaf whose prefix sum covers mass u. */
static int
tree_find(const fox_replay *rb, double u)
{
    int node = 1;
    while (node < rb->leaves) {
        int left = 2 * node;
        if (u < rb->tree[left]) {
            node = left;
        } else {
            u -= rb->tree[left];
            node = left + 1;
        }
    }
    return node - rb->leaves;
}

void
fox_replay_sample(fox_replay *rb, fox_rng *rng, int B, float beta, int32_t *idx, float *w)
{
    if (!rb->prioritized) {
        for (int b = 0; b < B; b++) {
            idx[b] = (int32_t)fox_rng_below(rng, (uint32_t)rb->size);
            if (w)
                w[b] = 1.0f;
        }
        return;
    }
    /* Stratified: one draw per equal slice of the total mass. */
    double total = rb->tree[1], slice = total / B, wmax = 0.0;
    for (int b = 0; b < B; b++) {
        int i = tree_find(rb, (b + fox_rng_uniform(rng)) * slice);
        if (i >= rb->size)
            i = rb->size - 1;
        idx[b] = i;
        double p = rb->tree[rb->leaves + i] / total;
        double wi = pow(rb->size * (p > 0 ? p : 1e-12), -beta);
        w[b] = (float)wi;
        if (wi > wmax)
            wmax = wi;
    }
    for (int b = 0; b < B; b++)
        w[b] = (float)(w[b] / wmax);
}

/* Whether slot i was written by a push after the ring had taken `since` pushes. */
static int
pushed_over(const fox_replay *rb, int i, uint64_t since)
{
    uint64_t n = rb->pushes - since;
    if (n >= (uint64_t)rb->capacity)
        return 1;
    int first = (int)(since % (uint64_t)rb->capacity);
    return (uint64_t)((i - first + rb->capacity) % rb->capacity) < n;
}

void
fox_replay_update(fox_replay *rb, const int32_t *idx, const float *priority, int B,
                  uint64_t sampled_at)
{
    if (!rb->prioritized)
        return;
    for (int b = 0; b < B; b++) {
        if (pushed_over(rb, idx[b], sampled_at))
            continue;
        float p = isfinite(priority[b]) ? priority[b] + 1e-6f : rb->max_priority;
        if (p > rb->max_priority)
            rb->max_priority = p;
        tree_set(rb, idx[b], pow(p, rb->alpha));
    }
}
