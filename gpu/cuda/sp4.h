/*
 * sp4.h — the stability system's bound producers on the device (sp4.cu):
 * Mech 10's site on h_s2 and SP4 adaptive mode's p99, Pearl B and C and
 * the L1 rate; twins of gpu/cpu/stab.c.
 */
#ifndef FOX_CUDA_SP4_H
#define FOX_CUDA_SP4_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Mech 10 on h [n] in place (the online net's h_s2 over the batch): slot 12
 * and slot 49 on the pre-clamp values, clamp_finite at 100 × max(H_S2_RMS_EMA,
 * 1) (fixed bounds) or at max(H_S2_BOUND, 1) (adaptive: the p99 of the
 * pre-clamp values first, whose pass 1 GRN2's tail already ran if ranged),
 * then H_S2_RMS_EMA from the clamped values (last block).
 */
int fox__cuda_h_s2_site(cudaStream_t s, const fox_cuda_stab *st, float *h, size_t n, int ranged);
/*
 * SP4: p99 of |x [n]| by the three passes (max, shared-memory histogram,
 * percentile locate), observed into ISV slot `slot` through Pearls A+D when
 * positive (stab.c's observe); `use` picks the scratch.
 */
int fox__cuda_p99_observe(cudaStream_t s, const fox_cuda_stab *st, const float *x, size_t n,
                          int slot, int use);
/*
 * SP4, the L1 rate's gradient-only half (fox_entropy_deficit of GRN1 W2's
 * gradient g) into sp4->l1_deficit: one block, launched beside the norm and
 * Adam (which leave g as it is), before fox__cuda_post_adam reads it (in
 * the next step, or at the end of the run of steps).
 */
int fox__cuda_l1_deficit(cudaStream_t s, const fox_cuda_stab *st, const float *g);
/*
 * SP4 after Adam (fox_cpu_stab_post_adam): Pearl B per group (p99 |w|, |m|,
 * v, weight-decay rate) into slots 136–167 through Pearls A+D, Pearl C on
 * the step's Adam engagements, the trunk L1 rate into slot 168. `gated`:
 * only when sp4->pending says an Adam step ran since the last (which it
 * clears); else always.
 */
int fox__cuda_post_adam(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n,
                        const float *w, const float *g, const float *m, const float *v);
/*
 * Its two halves, for a step that runs them apart: pass 1 (the ranges of |w|, |m|, v and
 * the sums of w·g, ‖w‖², the L1 rate's: every read of g) right after Adam; pass 2 (the
 * histograms and the tail: w, m, v only) any time before the next Adam.
 */
int fox__cuda_post_adam_pass1(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n,
                              const float *w, const float *g, const float *m, const float *v);
int fox__cuda_post_adam_pass2(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n,
                              const float *w, const float *m, const float *v);
/* Host image of a fresh fox_cuda_sp4 (zero state, clean scratch) into *dst (device), on s. */
int fox__cuda_sp4_reset(cudaStream_t s, fox_cuda_sp4 *dst);

#ifdef __cplusplus
}
#endif

#endif
