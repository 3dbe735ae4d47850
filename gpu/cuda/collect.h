/*
 * collect.h — the environments, the collection and the replay ring on the
 * device (collect.cu): reset, state, ε-greedy act and n-step push, and the
 * batch gather; twins of gpu/cpu/backend.c.
 */
#ifndef FOX_CUDA_COLLECT_H
#define FOX_CUDA_COLLECT_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The draws' key: ctl->seed_collect (so are the collection's and the gather's). */
int fox__cuda_env_reset(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_ctl *ctl,
                        const fox_cuda_fold *fold, fox_cuda_env *envs, uint64_t gen);
int fox__cuda_collect_state(cudaStream_t s, const fox_cuda_collect_cfg *c,
                            const fox_cuda_env *envs, float *X);
int fox__cuda_collect_act(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_fold *fold,
                          fox_cuda_env *envs, int32_t *wbar, float *wport, uint32_t *wa,
                          float *wr, const float *q, fox_cuda_ctl *ctl, fox_cuda_trans *staged,
                          int *counts);
int fox__cuda_collect_push(cudaStream_t s, const fox_cuda_collect_cfg *c,
                           const fox_cuda_trans *staged, const int *counts, fox_cuda_trans *ring,
                           fox_cuda_ctl *ctl);
int fox__cuda_gather(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_trans *ring,
                     const int8_t *regime, int NT, const fox_cuda_ctl *ctl,
                     const fox_cuda_batch *bt);

#ifdef __cplusplus
}
#endif

#endif
