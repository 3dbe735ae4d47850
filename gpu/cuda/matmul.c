/*
 * matmul.c — every matrix product of the CUDA backend, through cuBLAS, on
 * row-major data.
 *
 * The row-major trick, written down once: cuBLAS is column-major, and a
 * row-major matrix M [r × c] with row stride ld is, read column-major, the
 * matrix Mᵀ [c × r] with leading dimension ld. So the row-major product
 * Y = X·Wᵀ (X [rows × in], W [out × in], Y [rows × out]) is computed as the
 * column-major Yᵀ = W'ᵀ·Xᵀ where W' is W read column-major ([in × out]):
 * gemm(T, N, m = out, n = rows, k = in, W, ld in, X, ld ldx, Y, ld ldy).
 * The two backward products follow the same way:
 *   dW = dYᵀ·X   → gemm(N, T, m = in, n = out, k = rows, X, dY, dW ld in);
 *   dX = dY·W    → gemm(N, N, m = in, n = rows, k = out, W, dY, dX);
 * and a bias gradient (column sums of dY) is a gemv of dY read column-major
 * ([cols × rows]) with a vector of ones. The batched forms take one stride
 * per operand; a stride smaller than a matrix (the packed heads: head h's
 * columns start h·HS into a row) interleaves the batch inside one matrix.
 *
 * Every call runs on the handle's stream with scalars on the host (captured
 * by value into a graph) and the handle's math mode (net.c sets FP32 or
 * TF32 explicitly). No call here synchronizes or allocates. The parity test
 * covers each transpose through the gradients of every tensor.
 */
#include "cuda_impl.h"

static const float one = 1.0f;

int
fox__cuda_lin_fwd(cublasHandle_t h, int rows, int in, int out, const float *X, int ldx,
                  const float *W, float *Y, int ldy, float beta)
{
    FOX_CUBLAS_TRY(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, W, in, X, ldx,
                               &beta, Y, ldy));
    return 0;
}

/* batch products whose W, X and Y advance by sw, sx and sy floats (sx = 0: a shared X). */
int
fox__cuda_lin_fwd_batched(cublasHandle_t h, int rows, int in, int out, const float *X, int ldx,
                          long long sx, const float *W, long long sw, float *Y, int ldy,
                          long long sy, int batch)
{
    const float zero = 0.0f;
    FOX_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, W,
                                             in, sw, X, ldx, sx, &zero, Y, ldy, sy, batch));
    return 0;
}

int
fox__cuda_lin_dw(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                 const float *X, int ldx, float *dW, float beta)
{
    FOX_CUBLAS_TRY(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, &one, X, ldx, dY, ldy,
                               &beta, dW, in));
    return 0;
}

int
fox__cuda_lin_dw_batched(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                         long long sdy, const float *X, int ldx, long long sx, float *dW,
                         long long sdw, int batch)
{
    const float zero = 0.0f;
    FOX_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, &one, X,
                                             ldx, sx, dY, ldy, sdy, &zero, dW, in, sdw, batch));
    return 0;
}

/* ldw is W's row stride (in for a whole tensor; larger for a block of a packed matrix). */
int
fox__cuda_lin_dx(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                 const float *W, int ldw, float *dX, int ldx, float alpha, float beta)
{
    FOX_CUBLAS_TRY(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, &alpha, W, ldw, dY, ldy,
                               &beta, dX, ldx));
    return 0;
}

int
fox__cuda_lin_dx_batched(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                         long long sdy, const float *W, long long sw, float *dX, int ldx,
                         long long sx, int batch)
{
    const float zero = 0.0f;
    FOX_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, &one, W,
                                             in, sw, dY, ldy, sdy, &zero, dX, ldx, sx, batch));
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
