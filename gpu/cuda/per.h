/*
 * per.h — prioritized replay on the device (per.cu): the sum tree over the
 * ring's slots, the push of new transitions at the max priority, the
 * stratified proportional draw with its importance weights and the priority
 * update after the train step; twins of gpu/cpu/replay.c through the
 * arithmetic both run (gpu/per.h). Every launch is one block and reads its
 * counters on the device, so all of it lives inside the captured step.
 */
#ifndef FOX_CUDA_PER_H
#define FOX_CUDA_PER_H

#include <stdint.h>

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The counters the kernels keep on the device (the CPU ring's fields of the same names). */
typedef struct fox_cuda_per_ctl {
    uint64_t pushes;     /* pushes since the ring was last emptied (its head: pushes mod capacity) */
    uint64_t sampled_at; /* pushes when the batch was drawn */
    float max_priority;
} fox_cuda_per_ctl;

typedef struct fox_cuda_per {
    double *tree;          /* [2 × leaves] device */
    int *owner;            /* [capacity] device, -1 between updates: the last entry of a slot */
    float *w;              /* [B] the batch's importance weights */
    float *p;              /* [B] the batch's priorities as the update sets them */
    fox_cuda_per_ctl *ctl; /* device */
    int leaves, capacity, B;
    float alpha, beta;
} fox_cuda_per;

/*
 * Allocate for a ring of capacity and batch B (per->alpha, beta set by the caller; the draws'
 * key is fox_cuda_ctl's seed_per).
 */
int fox__cuda_per_init(fox_cuda_per *per, int capacity, int B);
void fox__cuda_per_fini(fox_cuda_per *per);
/* The ring emptied (a fold begins): every leaf 0, max priority 1, counters 0. */
int fox__cuda_per_clear(cudaStream_t s, const fox_cuda_per *per);
/*
 * After the collection's push: the leaves of the slots it wrote (counts [N],
 * what each environment pushed, in the ring's order from its head) at
 * max_priority^α, then their paths; at most a capacity's pushes.
 */
int fox__cuda_per_push(cudaStream_t s, const fox_cuda_per *per, const int *counts, int N);
/*
 * The batch's draw (train step ctl->train_steps, ring size ctl->ring_size):
 * idx [B] and per->w [B], normalized by their maximum; notes the pushes.
 */
int fox__cuda_per_sample(cudaStream_t s, const fox_cuda_per *per, const fox_cuda_ctl *ctl,
                         int32_t *idx);
/* The batch's new priorities prio [B] (Σ_d |δ_d|) into the tree (fox_replay_update). */
int fox__cuda_per_update(cudaStream_t s, const fox_cuda_per *per, const int32_t *idx,
                         const float *prio);

#ifdef __cplusplus
}
#endif

#endif
