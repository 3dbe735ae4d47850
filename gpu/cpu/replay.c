/* replay.c — ring buffer and sum tree of the CPU backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/per.h"
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

/* Set leaf i; every node above it becomes the sum of its children again (gpu/per.h). */
static void
tree_set(fox_replay *rb, int i, double value)
{
    int node = rb->leaves + i;
    rb->tree[node] = value;
    for (node >>= 1; node >= 1; node >>= 1)
        rb->tree[node] = rb->tree[2 * node] + rb->tree[2 * node + 1];
}

void
fox_replay_push(fox_replay *rb, const fox_transition *t)
{
    int i = rb->head;
    rb->items[i] = *t;
    if (rb->prioritized)
        tree_set(rb, i, fox_per_leaf(rb->max_priority, rb->alpha));
    rb->head = (rb->head + 1) % rb->capacity;
    rb->pushes++;
    if (rb->size < rb->capacity)
        rb->size++;
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
    /* The uniforms go into w, which fox_replay_sample_at reads whole before it writes. */
    for (int b = 0; b < B; b++)
        w[b] = fox_rng_uniform(rng);
    fox_replay_sample_at(rb, B, beta, w, idx, w);
}

void
fox_replay_sample_at(const fox_replay *rb, int B, float beta, const float *u, int32_t *idx,
                     float *w)
{
    double wmax = 0.0;
    for (int b = 0; b < B; b++) {
        idx[b] = fox_per_draw(rb->tree, rb->leaves, rb->size, b, B, u[b]);
        double wi = fox_per_weight(rb->tree, rb->leaves, rb->size, idx[b], beta);
        if (wi > wmax)
            wmax = wi;
    }
    for (int b = 0; b < B; b++)
        w[b] = (float)(fox_per_weight(rb->tree, rb->leaves, rb->size, idx[b], beta) / wmax);
}

void
fox_replay_update(fox_replay *rb, const int32_t *idx, const float *priority, int B,
                  uint64_t sampled_at)
{
    if (!rb->prioritized)
        return;
    for (int b = 0; b < B; b++) {
        if (fox_per_pushed_over(rb->pushes, sampled_at, rb->capacity, idx[b]))
            continue;
        float p = isfinite(priority[b]) ? priority[b] + FOX_PER_PRIORITY_EPS : rb->max_priority;
        if (p > rb->max_priority)
            rb->max_priority = p;
        tree_set(rb, idx[b], fox_per_leaf(p, rb->alpha));
    }
}
