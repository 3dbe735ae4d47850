/*
 * check.h — the stability system's checks on the device (check.cu): the
 * fused check and the halts, fault injection, d h_s2's inline checks and
 * the step's pre-forward producers; twins of gpu/cpu/stab.c.
 */
#ifndef FOX_CUDA_CHECK_H
#define FOX_CUDA_CHECK_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The fused check (SP2): one block per chunk of the table, each against its slots' rules
 * with the threshold computed from the device ISV; then the last block
 * decides the halts (fox_halt_decide: with `trained`, halt_nan on a
 * non-finite loss or norm and halt_grad_collapse on a vanished norm; under
 * engine.halt_rule = strict also halt_nan on any slot 0–35) into ctl->halt.
 * With the sentinel off only the halts run.
 */
int fox__cuda_check(cudaStream_t s, const fox_cuda_stab *st, const fox_cuda_chunk *chunks,
                    int n_chunks, int trained);
/*
 * The armed fault into p[0] (and p2[0] when not NULL) when ctl's train
 * step is the fault's (after_count: the step was already counted).
 */
int fox__cuda_inject(cudaStream_t s, const fox_cuda_stab *st, float *p, float *p2,
                     int after_count);
/*
 * d h_s2 [B × H2] from its three parts, with the inline checks between them:
 * dh holds the C51 heads' part (slot 33); + dh_aux (34); + the IQN part,
 * Σ_i d_x·φ, written to dh_iqn (27) (35); the Phase C guard; and
 * dφ = d_x·h·[φ > 0] into d_phi [B·NT × H2].
 */
int fox__cuda_dh_s2_join(cudaStream_t s, const fox_cuda_stab *st, int B, int NT, int H2,
                         float *dh, const float *dh_aux, float *dh_iqn, const float *d_x,
                         const float *phi, const float *h, float *d_phi);
/* Before the forward: AUX_LABEL_SCALE_EMA from the labels aux [B]. */
int fox__cuda_pre_step(cudaStream_t s, const fox_cuda_stab *st, int B, const float *aux);

#ifdef __cplusplus
}
#endif

#endif
