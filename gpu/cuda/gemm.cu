/*
 * gemm.cu — the products of the forward and of the input gradients, each
 * with the elementwise stage that follows it in foxnet (bias, ELU/ReLU, an
 * activation's backward mask, a residual, the IQN h ⊙ φ): cuBLAS for the
 * product (row-major through the trick of matmul.c, up to nz batch entries
 * in one strided-batched call), then one epilogue launch for the whole
 * stage.
 *
 * A hand-tiled FP32 kernel that fused the epilogue into the product was
 * tried here first (2026-11-29, H200) and lost: 8–26 µs per product at
 * batch 256 against cuBLAS's 3–6 µs (too little work per k-tile to hide
 * the loads, no split-K), 421 µs per train step against 374 µs, and 3,226
 * against 1,828 at batch 4096. cuBLAS stays until a kernel beats it
 * (docs/performance.md, "What did not work").
 *
 * Not here: the weight gradients and bias column sums (matmul.c).
 */
#include <math.h>
#include <stdint.h>

#include "device.cuh"


static __device__ __forceinline__ float
act_apply(float v, int act)
{
    if (act == FOX_ACT_ELU)
        return v <= 0.0f ? expm1f(v) : v;
    if (act == FOX_ACT_RELU)
        return v < 0.0f ? 0.0f : v;
    return v;
}

/* d·act'(at y), as act_bwd_kernel: ELU' = y + 1 and ReLU' = 0 where y ≤ 0. */
static __device__ __forceinline__ float
act_back(float d, float y, int act)
{
    if (y <= 0.0f)
        return act == FOX_ACT_ELU ? d * (y + 1.0f) : act == FOX_ACT_RELU ? 0.0f : d;
    return d;
}

int fox__cuda_pdl;  /* cuda_impl.h */
int fox__cuda_prio; /* cuda_impl.h */

/*
 * The epilogue over every output of the launch: the stages of fox_cuda_gemm
 * after the product, in its order (bias, act, the backward mask, the
 * residual; the product already holds α and β), the IQN product mout, and
 * the next stage's bias laid out in fill.
 */
__global__ void
epilogue_kernel(fox_cuda_gemm g)
{
    pdl_enter();
    size_t per = (size_t)g.M * g.N, n = per * g.nz;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        int z = (int)(k / per), zi = z == 0 ? 0 : 1;
        size_t e = k % per;
        int r = (int)(e / g.N), c = (int)(e % g.N);
        size_t at = z * g.sc + (size_t)r * g.ldc + c;
        float v = g.C[at];
        if (g.bias[zi])
            v += g.bias[zi][c];
        v = act_apply(v, g.act[zi]);
        if (g.dy)
            v = act_back(v, g.dy[z * g.sdy + (size_t)r * g.lddy + c], g.dact);
        if (g.add)
            v += g.add[(size_t)r * g.ldadd + c];
        g.C[at] = v;
        if (g.mout)
            g.mout[at] = v * g.mul[zi][(size_t)(r / g.mul_div) * g.ldmul + c];
        if (g.fill && z == 0)
            g.fill[(size_t)r * g.ldc + c] = g.fill_bias[c];
    }
}

int
fox__cuda_gemm(cublasHandle_t h, cudaStream_t s, const fox_cuda_gemm *g)
{
    if (g->M < 1 || g->N < 1 || g->K < 1 || g->nz < 1 || (g->mout && g->mul_div < 1))
        return FOX_EINVAL;
    /* Y = α·A·op(B) + β·Y for every batch entry. */
    cublasOperation_t tb = g->bt ? CUBLAS_OP_T : CUBLAS_OP_N;
    FOX_CUBLAS_TRY(cublasSgemmStridedBatched(h, tb, CUBLAS_OP_N, g->N, g->M, g->K, &g->alpha, g->B,
                                             g->ldb, g->sb, g->A, g->lda, g->sa, &g->beta, g->C,
                                             g->ldc, g->sc, g->nz));
    return fox__cuda_epilogue(s, g);
}

int
fox__cuda_epilogue(cudaStream_t s, const fox_cuda_gemm *g)
{
    if (g->bias[0] || g->bias[1] || g->act[0] || g->act[1] || g->dy || g->add || g->mout ||
        g->fill) {
        size_t n = (size_t)g->M * g->N * g->nz;
        FOX_CUDA_TRY(launch(epilogue_kernel, grid_for(n, 256), 256, 0, s, *g));
    }
    return 0;
}
