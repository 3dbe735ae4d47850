/*
 * dueling.h — the dueling C51 kernel's launcher (dueling.cu): dueling,
 * log_softmax over the atoms and the expected Q.
 */
#ifndef FOX_CUDA_DUELING_H
#define FOX_CUDA_DUELING_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * b2 is the net's packed output biases [7 × OS], z each branch's atoms [D × NA]. chosen
 * NULL: logp [rows × NAct × NA] and q [rows × NAct] of every action; else logp [rows × D ×
 * NA] of the chosen [rows × D] only.
 */
int fox__cuda_dueling(cudaStream_t s, int rows, const fox_cuda_dims *dm, const float *out,
                      const float *b2, const float *z, const int32_t *chosen, float *logp,
                      float *q);

#ifdef __cplusplus
}
#endif

#endif
