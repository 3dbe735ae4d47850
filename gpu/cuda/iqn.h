/*
 * iqn.h — the IQN kernels' launcher (iqn.cu): the cosine embedding of the
 * quantile fractions.
 */
#ifndef FOX_CUDA_IQN_H
#define FOX_CUDA_IQN_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

int fox__cuda_iqn_cos(cudaStream_t s, int rows, int NC, const float *tau, float *cosf);

#ifdef __cplusplus
}
#endif

#endif
