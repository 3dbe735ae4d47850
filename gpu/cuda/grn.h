/*
 * grn.h — the GRN kernels' launchers (grn.cu): the tail (σ gate, GLU,
 * skip, LayerNorm) and its backward.
 */
#ifndef FOX_CUDA_GRN_H
#define FOX_CUDA_GRN_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * GRN tail: σ gate, GLU, skip, LayerNorm (see grn_tail_kernel); zgv holds
 * the biased pre-activations; with glu (and ln_in) not NULL, g and r + g
 * are kept there too; with site not NULL, the fault armed at slot 12 on
 * y[0], then with fixed bounds Mech 10 on y (h_s2) in the same launch, as
 * fox__cuda_h_s2_site, with adaptive bounds pass 1 of y's p99 (the site
 * follows: fox__cuda_h_s2_site, ranged).
 */
int fox__cuda_grn_tail(cudaStream_t s, int rows, int out, float *zgv, const float *r,
                       const float *bg, const float *bv, const float *g, const float *beta,
                       float *xhat, float *rstd, float *y, float *glu, float *ln_in,
                       const fox_cuda_stab *site);
/*
 * LayerNorm and GLU backward; sg, lin at zgv [2 × R_fwd × out] (first rows used); du and dzgv
 * rows 2·out apart (fox_cuda_grn_grad's dud and dzgv).
 */
int fox__cuda_ln_glu_bwd(cudaStream_t s, int rows, int out, const float *dy, const float *xhat,
                         const float *rstd, const float *g, const float *zgv,
                         long long fwd_stride, float *du, float *dyx, float *dzgv);

#ifdef __cplusplus
}
#endif

#endif
