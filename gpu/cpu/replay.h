/*
 * replay.h — the CPU replay ring: compact n-step transitions, uniform or
 * prioritized (sum tree) sampling.
 *
 * A transition stores bar indices and portfolio features instead of whole
 * states; the batch gather rebuilds states from the fold's normalized
 * feature matrix, so a million transitions take ~48 MB instead of ~512 MB.
 * The ring is emptied at every fold boundary, so the normalization behind
 * stored bar indices never changes under it. One thread.
 */
#ifndef FOX_CPU_REPLAY_H
#define FOX_CPU_REPLAY_H

#include <stdint.h>

#include "gpu/rng.h"

typedef struct fox_transition {
    int32_t bar, bar_next; /* decision bar t and bar t+k of the bootstrap state */
    float port[3], port_next[3];
    int32_t a[4];
    float r;    /* Σ_k γ^k r_{t+k}, scaled */
    float done; /* 1: the window ended the episode, no bootstrap */
} fox_transition;

typedef struct fox_replay {
    fox_transition *items;
    int capacity, size, head;
    uint64_t pushes; /* since the last clear; head = pushes mod capacity */
    int prioritized;
    float alpha, max_priority;
    double *tree; /* sum tree over capacity leaves (prioritized only) */
    int leaves;   /* power of two ≥ capacity */
} fox_replay;

int fox_replay_init(fox_replay *rb, int capacity, int prioritized, float alpha);
void fox_replay_fini(fox_replay *rb);
void fox_replay_clear(fox_replay *rb);
void fox_replay_push(fox_replay *rb, const fox_transition *t);

/*
 * Draw B indices: uniform, or proportional to priority^alpha with
 * importance weights (N·P(i))^-beta normalized by their maximum (w may be NULL
 * for uniform, where every weight is 1).
 */
void fox_replay_sample(fox_replay *rb, fox_rng *rng, int B, float beta, int32_t *idx, float *w);

/*
 * The prioritized draw of fox_replay_sample from given uniforms u [B] in
 * [0, 1) (gpu/per.h: draw b lies in the b-th of B equal slices of the
 * mass); u may be w itself. The device draws with its own uniforms through
 * the same functions, so the same tree and u give the same idx and w.
 */
void fox_replay_sample_at(const fox_replay *rb, int B, float beta, const float *u, int32_t *idx,
                          float *w);

/*
 * New priorities (Σ_d |δ_d|) for indices sampled when the ring had taken
 * `sampled_at` pushes; a slot pushed over since then holds a new transition
 * and keeps its priority. In batch order: a non-finite priority takes the
 * ring's max priority as it stands at that entry, and of an index drawn
 * twice the last entry's priority stays. Ignored when uniform.
 */
void fox_replay_update(fox_replay *rb, const int32_t *idx, const float *priority, int B,
                       uint64_t sampled_at);

#endif
