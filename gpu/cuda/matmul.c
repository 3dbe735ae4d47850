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
 * by value into a graph) and in the handle's math (fox_cuda_blas): FP32 and
 * TF32 through the FP32 calls in the math mode net.c sets on the handle,
 * BF16 through the Ex calls on the same FP32 matrices with the
 * CUBLAS_COMPUTE_32F_FAST_16BF compute type, so that no tensor needs a
 * bfloat16 copy. FP32 and TF32 keep the FP32 calls rather than the Ex calls
 * with a compute type: cuBLAS does not promise that both pick the same
 * algorithm, and FP32 must stay the bits it was. The column sums are
 * matrix-vector products, for which cuBLAS has no reduced-precision math:
 * they stay FP32 in every mode. No call here synchronizes or allocates. The
 * parity test covers each transpose through the gradients of every tensor.
 *
 * Under a population's step (fox__cuda_launch_members() = K > 1) every
 * call covers the K members, whose operands each lie a span (cuda_impl.h's
 * FOX_CUDA_MEMBER_SPAN) from the previous member's: a single product becomes
 * one strided-batched call of K at span strides. Entries × members (a
 * batch of count entries in each member: the seven heads, a GRN's gate and
 * value) is a batch of two levels that no one stride describes: there a
 * small kernel writes every operand's pointer into arrays from the
 * population's pool (gemm.cu's fox__cuda_member_ptrs) and one
 * pointer-batched call takes them, where count calls each over the members
 * would put the heads' seven products one after another on the step's
 * critical path; only a pool with no room left goes an entry a call. The
 * output slots' product is pointer-batched already: its arrays hold every
 * member's pointers (net.c's slots_init). Under one member every call is
 * the one it always was.
 */
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/gemm.h"
#include "gpu/cuda/matmul.h"

static const float one = 1.0f, zero = 0.0f;

/* The bf16 products' compute type: inputs rounded to bfloat16 on tensor cores, FP32 sums. */
#define FOX_BF16_COMPUTE CUBLAS_COMPUTE_32F_FAST_16BF

/* One member span in floats: every operand's stride from one member to the next. */
#define MEMBER_FLOATS ((long long)(FOX_CUDA_MEMBER_SPAN / sizeof(float)))

/* count products in one strided-batched call in b's math (fox__cuda_gemm_strided's). */
static int
strided(fox_cuda_blas b, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
        float alpha, const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
        float beta, float *C, int ldc, long long sc, int count)
{
    if (b.math == FOX_CUDA_MATH_BF16)
        FOX_CUBLAS_TRY(cublasGemmStridedBatchedEx(
            b.h, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, &beta, C,
            CUDA_R_32F, ldc, sc, count, FOX_BF16_COMPUTE, CUBLAS_GEMM_DEFAULT));
    else
        FOX_CUBLAS_TRY(cublasSgemmStridedBatched(b.h, ta, tb, m, n, k, &alpha, A, lda, sa, B, ldb,
                                                 sb, &beta, C, ldc, sc, count));
    return 0;
}

/* count products from device arrays of operand pointers in one call in b's math. */
static int
batched(fox_cuda_blas b, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
        float alpha, const float *const *A, int lda, const float *const *B, int ldb, float beta,
        float *const *C, int ldc, int count)
{
    if (b.math == FOX_CUDA_MATH_BF16)
        FOX_CUBLAS_TRY(cublasGemmBatchedEx(b.h, ta, tb, m, n, k, &alpha, (const void *const *)A,
                                           CUDA_R_32F, lda, (const void *const *)B, CUDA_R_32F,
                                           ldb, &beta, (void *const *)C, CUDA_R_32F, ldc, count,
                                           FOX_BF16_COMPUTE, CUBLAS_GEMM_DEFAULT));
    else
        FOX_CUBLAS_TRY(cublasSgemmBatched(b.h, ta, tb, m, n, k, &alpha, A, lda, B, ldb, &beta, C,
                                          ldc, count));
    return 0;
}

/*
 * The operand arrays of count entries in each of the members from the thread's pool: every A,
 * then every B, then every C. A site's table is written by fox__cuda_member_ptrs the first
 * time the site runs and found again after; NULL where the pool has no room for a new one.
 */
static const float **
member_table(fox_cuda_blas b, const float *A, long long sa, const float *B, long long sb,
             const float *C, long long sc, int count, int members, int *rv)
{
    fox_cuda_ptr_pool *p = fox__cuda_launch_pool();
    *rv = 0;
    if (!p)
        return NULL;
    for (int i = 0; i < p->n_tables; i++) {
        const fox_cuda_ptr_table *t = &p->table[i];
        if (t->A == A && t->B == B && t->C == C && t->sa == sa && t->sb == sb && t->sc == sc &&
            t->count == count && t->members == members)
            return p->base + t->at;
    }
    int n = 3 * count * members;
    if (p->n_tables == FOX_CUDA_PTR_TABLES || n > p->cap - p->used)
        return NULL;
    /*
     * A table first written inside a capture is that graph's alone (its kernel rewrites it at
     * every replay): another graph could run before it ever has. Only an eager run's is kept.
     */
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(b.s, &cs);
    if (e != cudaSuccess) {
        *rv = fox__cuda_fail(__FILE__, __LINE__, "cudaStreamIsCapturing", cudaGetErrorString(e),
                             (int)e);
        return NULL;
    }
    if (cs == cudaStreamCaptureStatusNone)
        p->table[p->n_tables++] =
            (fox_cuda_ptr_table){A, B, C, sa, sb, sc, count, members, p->used};
    p->used += n;
    *rv = fox__cuda_member_ptrs(b.s, A, sa, B, sb, C, sc, count, p->base + (p->used - n));
    return p->base + (p->used - n);
}

/* One column-major product C = op(A)·op(B) + β·C in b's math, for every member. */
static int
gemm(fox_cuda_blas b, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const int members = fox__cuda_launch_members();
    if (members > 1)
        return strided(b, ta, tb, m, n, k, 1.0f, A, lda, MEMBER_FLOATS, B, ldb, MEMBER_FLOATS,
                       beta, C, ldc, MEMBER_FLOATS, members);
    if (b.math == FOX_CUDA_MATH_BF16)
        FOX_CUBLAS_TRY(cublasGemmEx(b.h, ta, tb, m, n, k, &one, A, CUDA_R_32F, lda, B, CUDA_R_32F,
                                    ldb, &beta, C, CUDA_R_32F, ldc, FOX_BF16_COMPUTE,
                                    CUBLAS_GEMM_DEFAULT));
    else
        FOX_CUBLAS_TRY(cublasSgemm(b.h, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc));
    return 0;
}

int
fox__cuda_gemm_strided(fox_cuda_blas b, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, float alpha, const float *A, int lda, long long sa, const float *B,
                       int ldb, long long sb, float beta, float *C, int ldc, long long sc,
                       int count)
{
    const int members = fox__cuda_launch_members();
    if (members == 1)
        return strided(b, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                       count);
    /* One call over entries × members from a table, else an entry a call (the file's head). */
    int rv;
    const float **t = member_table(b, A, sa, B, sb, C, sc, count, members, &rv);
    FOX_TRY(rv);
    const size_t list = (size_t)count * members;
    if (t)
        return batched(b, ta, tb, m, n, k, alpha, t, lda, t + list, ldb, beta,
                       (float *const *)(t + 2 * list), ldc, count * members);
    for (int e = 0; e < count; e++)
        FOX_TRY(strided(b, ta, tb, m, n, k, alpha, A + e * sa, lda, MEMBER_FLOATS, B + e * sb,
                        ldb, MEMBER_FLOATS, beta, C + e * sc, ldc, MEMBER_FLOATS, members));
    return 0;
}

int
fox__cuda_lin_dw(fox_cuda_blas b, int rows, int in, int out, const float *dY, int ldy,
                 const float *X, int ldx, float *dW, float beta)
{
    return gemm(b, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, X, ldx, dY, ldy, beta, dW, in);
}

int
fox__cuda_lin_dw_rows(fox_cuda_blas b, int rows, int in, int out, const float *dY, int ldy,
                      const float *X, int ldx, float *dW, float *part)
{
    const int members = fox__cuda_launch_members(), S = FOX_CUDA_SPLIT_BLOCKS;
    if (members == 1 || rows < FOX_CUDA_SPLIT_ROWS || rows % S || !part)
        return fox__cuda_lin_dw(b, rows, in, out, dY, ldy, X, ldx, dW, 0.0f);
    const long long rb = rows / S, cell = (long long)in * out;
    int rv;
    const float **t = member_table(b, X, rb * ldx, dY, rb * ldy, part, cell, S, members, &rv);
    FOX_TRY(rv);
    if (!t)
        return fox__cuda_lin_dw(b, rows, in, out, dY, ldy, X, ldx, dW, 0.0f);
    const size_t list = (size_t)S * members;
    FOX_TRY(batched(b, CUBLAS_OP_N, CUBLAS_OP_T, in, out, (int)rb, 1.0f, t, ldx, t + list, ldy,
                    0.0f, (float *const *)(t + 2 * list), in, S * members));
    return fox__cuda_slices_sum(b.s, part, S, (size_t)cell, dW);
}

int
fox__cuda_lin_dw_batched(fox_cuda_blas b, int loop_rows, int rows, int in, int out, const int *outs,
                         const float *dY, int ldy, long long sdy, const float *X, int ldx,
                         long long sx, float *dW, long long sdw, int batch)
{
    if (rows >= loop_rows) {
        for (int e = 0; e < batch; e++)
            FOX_TRY(gemm(b, CUBLAS_OP_N, CUBLAS_OP_T, in, outs ? outs[e] : out, rows, X + e * sx,
                         ldx, dY + e * sdy, ldy, 0.0f, dW + e * sdw, in));
        return 0;
    }
    return fox__cuda_gemm_strided(b, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, 1.0f, X, ldx, sx, dY,
                                  ldy, sdy, 0.0f, dW, in, sdw, batch);
}

int
fox__cuda_gemm_slots(fox_cuda_blas b, int rows, int n, int k, float *const *ptrs, int count,
                     int lanes, int lda, int ldb, int ldc)
{
    /* Each list holds lanes members' count entries, member j's from j·count: K members take K. */
    const int members = fox__cuda_launch_members();
    if (members > lanes)
        return FOX_EINVAL;
    const size_t list = (size_t)count * lanes;
    const float *const *in = (const float *const *)ptrs;
    return batched(b, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, 1.0f, in + list, ldb, in, lda, 0.0f,
                   ptrs + 2 * list, ldc, count * members);
}

/* count column sums in one strided-batched call: sx 0 shares one vector of ones. */
static int
gemv_strided(fox_cuda_blas b, int rows, int cols, const float *dY, int ldy, long long sdy,
             const float *ones, long long sx, float beta, float *db, long long sdb, int count)
{
    FOX_CUBLAS_TRY(cublasSgemvStridedBatched(b.h, CUBLAS_OP_N, cols, rows, &one, dY, ldy, sdy, ones,
                                             1, sx, &beta, db, 1, sdb, count));
    return 0;
}

int
fox__cuda_colsum(fox_cuda_blas b, int rows, int cols, const float *dY, int ldy, const float *ones,
                 float *db, float beta)
{
    const int members = fox__cuda_launch_members();
    if (members > 1)
        return gemv_strided(b, rows, cols, dY, ldy, MEMBER_FLOATS, ones, MEMBER_FLOATS, beta, db,
                            MEMBER_FLOATS, members);
    FOX_CUBLAS_TRY(cublasSgemv(b.h, CUBLAS_OP_N, cols, rows, &one, dY, ldy, ones, 1, &beta, db, 1));
    return 0;
}

int
fox__cuda_colsum_batched(fox_cuda_blas b, int rows, int cols, const float *dY, int ldy,
                         long long sdy, const float *ones, float *db, long long sdb, int batch)
{
    const int members = fox__cuda_launch_members();
    if (members == 1)
        return gemv_strided(b, rows, cols, dY, ldy, sdy, ones, 0, 0.0f, db, sdb, batch);
    /* One call over entries × members from a table, else an entry a call; ones are a member's. */
    int rv;
    const float **t = member_table(b, dY, sdy, ones, 0, db, sdb, batch, members, &rv);
    FOX_TRY(rv);
    const size_t list = (size_t)batch * members;
    if (t) {
        FOX_CUBLAS_TRY(cublasSgemvBatched(b.h, CUBLAS_OP_N, cols, rows, &one, t, ldy, t + list, 1,
                                          &zero, (float *const *)(t + 2 * list), 1,
                                          batch * members));
        return 0;
    }
    for (int e = 0; e < batch; e++)
        FOX_TRY(gemv_strided(b, rows, cols, dY + e * sdy, ldy, MEMBER_FLOATS, ones, MEMBER_FLOATS,
                             0.0f, db + e * sdb, MEMBER_FLOATS, members));
    return 0;
}
