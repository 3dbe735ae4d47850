/*
 * gemm.h — the forward's and the input gradients' product stages: a cuBLAS
 * product and the elementwise epilogue that follows it in one launch
 * (gemm.cu).
 */
#ifndef FOX_CUDA_GEMM_H
#define FOX_CUDA_GEMM_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { FOX_ACT_NONE = 0, FOX_ACT_ELU = 1, FOX_ACT_RELU = 2 };

/*
 * One product stage (gemm.cu): for z < nz, Y_z [M × N] = epi(α·A_z·op(B_z)
 * + β·Y_z), every matrix row-major with its row stride (ld*) and z stride
 * (s*). bt 1: B is [N × K] and op(B) = Bᵀ (a forward, y = x·Wᵀ); bt 0: B is
 * [K × N] (an input gradient, dx = dy·W). The epilogue, in order:
 * + bias[z ? 1 : 0][c], act[z ? 1 : 0], the backward mask of dact at dy
 * (ELU' = y + 1, ReLU' = 0 where y ≤ 0), + add[r, c]; and with mout,
 * mout = Y ⊙ mul[z ? 1 : 0][(r / mul_div)·ldmul + c] (IQN's h ⊙ φ); and
 * with fill, fill[r·ldc + c] = fill_bias[c] for the z = 0 entry: the next
 * stage's bias laid in its output, which that product then takes with
 * β = 1 instead of an epilogue launch of its own. NULL pointers and zero β
 * are off.
 */
typedef struct fox_cuda_gemm {
    int M, N, K, nz, bt;
    const float *A, *B;
    int lda, ldb;
    long long sa, sb;
    float alpha, beta;
    float *C;
    int ldc;
    long long sc;
    const float *bias[2];
    int act[2];
    const float *dy;
    int lddy, dact;
    long long sdy;
    const float *add;
    int ldadd;
    const float *mul[2];
    int ldmul, mul_div;
    float *mout;
    float *fill;
    const float *fill_bias;
    int by_ones; /* 1: the epilogue one output a thread even where four would do */
} fox_cuda_gemm;

int fox__cuda_gemm(fox_cuda_blas b, cudaStream_t s, const fox_cuda_gemm *g);
/*
 * The operand pointers of count entries (A + e·sa, B + e·sb, C + e·sc, strides in floats) in
 * each of the fox__cuda_launch_members() members, member z's a span past member 0's, into out:
 * every A, then every B, then every C, member by member (3 × count × members), on stream s.
 */
/* dst = Σ_s src[s·n …] over slices s = 0..slices−1, in that order, for n floats (every member). */
int fox__cuda_slices_sum(cudaStream_t s, const float *src, int slices, size_t n, float *dst);
int fox__cuda_member_ptrs(cudaStream_t s, const float *A, long long sa, const float *B,
                          long long sb, const float *C, long long sc, int count,
                          const float **out);
/* The epilogue stage of g alone, over Y as it is (products made some other way). */
int fox__cuda_epilogue(cudaStream_t s, const fox_cuda_gemm *g);

#ifdef __cplusplus
}
#endif

#endif
