/*
 * iqn.cu — the IQN kernels: the cosine embedding cos(π·k·τ) of the sampled
 * quantile fractions, the twin of gpu/cpu/net.c's iqn_fwd elementwise part.
 *
 * Not here: the IQN head's products and h ⊙ φ (gemm.cu's epilogue), its
 * backward's d h_s2 join (check.cu) and the quantile Huber loss (loss.cu).
 */
#include <math.h>
#include <stdint.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/device.cuh"
#include "gpu/cuda/iqn.h"

#define PI_F 3.14159265358979323846f

/* ------------------------------------------------------------------------------------------ */
/* IQN (twins of iqn_fwd's elementwise parts and iqn_bwd)                                     */

/*
 * cos(π·k·τ) for k = 0..NC−1 (k = 0 gives the constant 1), rows of τ; the
 * row and k of an output by fox_div_rem, because a 64-bit division and
 * remainder for each of the millions of outputs at large batches dominated
 * the kernel's time.
 */
template <bool Fast>
__global__ void
iqn_cos_kernel(size_t n, fox_divider nc, const float *tau, float *cosf_)
{
    pdl_enter();
    fox_member_args(tau, cosf_);
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const fox_quot_rem rk = fox_div_rem<Fast>(nc, e);
        cosf_[e] = cosf(PI_F * (float)(int)rk.r * tau[rk.q]);
    }
}

int
fox__cuda_iqn_cos(cudaStream_t s, int rows, int NC, const float *tau, float *cosf_)
{
    const size_t n = (size_t)rows * NC;
    const fox_divider nc = fox_divider_of((unsigned int)NC);
    auto kernel = fox_divider_ok(NC, n) ? iqn_cos_kernel<true> : iqn_cos_kernel<false>;
    FOX_CUDA_TRY(launch(kernel, grid_for(n, 256), 256, 0, s, n, nc, tau, cosf_));
    return 0;
}
