/*
 * heads.h — the packing of the seven heads' parameters into one packed
 * network and of its gradient back (heads.cu).
 */
#ifndef FOX_CUDA_HEADS_H
#define FOX_CUDA_HEADS_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Pack both nets' heads from params [2 × np] into pk [2 × PK], and the
 * online net's segments sg into sg->dst. With oc and ctl (not NULL), first
 * apply the step's hard target sync when it is due, in the same launch
 * (oc->polyak must be 0: a soft update goes through fox__cuda_target first).
 */
int fox__cuda_head_pack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                        const fox_cuda_segments *sg, float *params, size_t np, float *pk,
                        const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl);
/* The packed heads' gradient dpk [PK] into grads. */
int fox__cuda_head_unpack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                          const float *dpk, float *grads);

#ifdef __cplusplus
}
#endif

#endif
