/*
 * adam.h — the optimizer's kernels (adam.cu): the isfinite guard and global
 * norm, Adam with its clamps, the target update and the ISV's publication;
 * twins of gpu/cpu/optim.c.
 */
#ifndef FOX_CUDA_ADAM_H
#define FOX_CUDA_ADAM_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Σ g² of the finite gradients and the sums of the loss parts, then (last
 * block) the step's losses into ctl, the Q signals and Mech 6 into
 * ctl->clip_scale. partial [(1 + FOX_CUDA_PARTS) × FOX_CUDA_NORM_BLOCKS],
 * the gradients' block partials first.
 */
int fox__cuda_grad_norm(cudaStream_t s, size_t n, const float *g, double *partial,
                        const fox_cuda_stab *st, int B, int D, const double *parts,
                        const fox_cuda_optim_cfg *oc);
int fox__cuda_adam(cudaStream_t s, size_t n, float *params, const float *g, float *m, float *v,
                   const uint8_t *pgroup, const fox_cuda_adam_slots *sl,
                   const fox_cuda_optim_cfg *oc, const fox_cuda_stab *st);
/* Also publishes the device ISV to the mapped copy (isv_map), as the step's last ISV write. */
int fox__cuda_finish(cudaStream_t s, fox_cuda_ctl *ctl, float *isv_dev, float *isv_map, int hold);
int fox__cuda_target(cudaStream_t s, size_t n, const float *params, float *target,
                     const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl);
int fox__cuda_publish(cudaStream_t s, const float *isv_dev, float *isv_host, int n);

#ifdef __cplusplus
}
#endif

#endif
