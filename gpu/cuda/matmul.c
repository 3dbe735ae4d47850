/*
 * matmul.c — the weight-gradient products and bias column sums of the
 * CUDA backend, and the heads' pointer-batched output layer, through
 * cuBLAS, on row-major data (the other forward and input-gradient
 * products are gemm.cu's fused kernel).
 *
 * The row-major trick, written down once: cuBLAS is column-major, and a
 * row-major matrix M [r × c] with row stride ld is, read column-major, the
 * matrix Mᵀ [c × r] with leading dimension ld. For a layer Y = X·Wᵀ
 * (X [rows × in], W [out × in], Y [rows × out]) the weight gradient
 * dW = dYᵀ·X is the column-major gemm(N, T, m = in, n = out, k = rows, X,
 * dY, dW ld in), and a bias gradient (column sums of dY) is a gemv of dY
 * read column-major ([cols × rows]) with a vector of ones. The batched
 * forms take one stride per operand; a stride smaller than a matrix (the
 * packed heads: head h's columns start h·HS into a row) interleaves the
 * batch inside one matrix.
 *
 * Every call runs on the handle's stream with scalars on the host (captured
 * by value into a graph) and the handle's math mode (net.c sets FP32 or
 * TF32 explicitly). No call here synchronizes or allocates. The parity test
 * covers each transpose through the gradients of every tensor.
 */
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/matmul.h"

static const float one = 1.0f;

int
fox__cuda_lin_dw(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                 const float *X, int ldx, float *dW, float beta)
{
    FOX_CUBLAS_TRY(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, &one, X, ldx, dY, ldy,
                               &beta, dW, in));
    return 0;
}

int
fox__cuda_lin_dw_batched(cublasHandle_t h, int loop_rows, int rows, int in, int out,
                         const int *outs, const float *dY, int ldy, long long sdy, const float *X,
                         int ldx, long long sx, float *dW, long long sdw, int batch)
{
    const float zero = 0.0f;
    if (rows >= loop_rows) {
        for (int b = 0; b < batch; b++)
            FOX_CUBLAS_TRY(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, outs ? outs[b] : out, rows,
                                       &one, X + b * sx, ldx, dY + b * sdy, ldy, &zero,
                                       dW + b * sdw, in));
        return 0;
    }
    FOX_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, &one, X,
                                             ldx, sx, dY, ldy, sdy, &zero, dW, in, sdw, batch));
    return 0;
}

int
fox__cuda_gemm_slots(cublasHandle_t h, int rows, int n, int k, float *const *ptrs, int count,
                     int lda, int ldb, int ldc)
{
    const float zero = 0.0f;
    const float *const *in = (const float *const *)ptrs;
    FOX_CUBLAS_TRY(cublasSgemmBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &one, in + count,
                                      ldb, in, lda, &zero, ptrs + 2 * count, ldc, count));
    return 0;
}

int
fox__cuda_colsum(cublasHandle_t h, int rows, int cols, const float *dY, int ldy,
                 const float *ones, float *db, float beta)
{
    FOX_CUBLAS_TRY(cublasSgemv(h, CUBLAS_OP_N, cols, rows, &one, dY, ldy, ones, 1, &beta, db, 1));
    return 0;
}

int
fox__cuda_colsum_batched(cublasHandle_t h, int rows, int cols, const float *dY, int ldy,
                         long long sdy, const float *ones, float *db, long long sdb, int batch)
{
    const float zero = 0.0f;
    FOX_CUBLAS_TRY(cublasSgemvStridedBatched(h, CUBLAS_OP_N, cols, rows, &one, dY, ldy, sdy, ones,
                                             1, 0, &zero, db, 1, sdb, batch));
    return 0;
}
