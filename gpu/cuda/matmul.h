/*
 * matmul.h — the weight-gradient products, bias column sums and the heads'
 * pointer-batched output layer through cuBLAS on row-major data (matmul.c).
 * Every call runs on its handle's stream in the handle's math (fox_cuda_blas;
 * the column sums in FP32 whatever it is), covers the members of
 * fox__cuda_launch_members() (each operand a span from the previous one's),
 * and neither synchronizes nor allocates, so that a graph can capture it.
 */
#ifndef FOX_CUDA_MATMUL_H
#define FOX_CUDA_MATMUL_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * From this many rows a batched weight gradient is one cublasSgemm per entry (the net's
 * dw_loop_rows). At large batches cuBLAS's strided-batched heuristic runs the heads' seven
 * products and the GRNs' gate/value pairs on a small-tile kernel that walks every row in each
 * block, where the non-batched heuristic picks larger tiles and splits the rows; at small
 * batches the extra launches of one call an entry cost more than they save, so there the
 * batched call stays (docs/performance.md).
 */
#define FOX_CUDA_DW_LOOP_ROWS 1024

/*
 * count products C_z = α·op(A_z)·op(B_z) + β·C_z, column-major with z strides, in b's math: the
 * one strided-batched product every stage of gemm.cu and the batched weight gradients make.
 */
int fox__cuda_gemm_strided(fox_cuda_blas b, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, float alpha, const float *A, int lda, long long sa,
                           const float *B, int ldb, long long sb, float beta, float *C, int ldc,
                           long long sc, int count);
int fox__cuda_lin_dw(fox_cuda_blas b, int rows, int in, int out, const float *dY, int ldy,
                     const float *X, int ldx, float *dW, float beta);
/*
 * dW [out × in] = dYᵀ·X over many rows, as fox__cuda_lin_dw with β 0. Under a population, from
 * FOX_CUDA_SPLIT_ROWS rows that FOX_CUDA_SPLIT_BLOCKS divide, in row blocks: cuBLAS splits such
 * a sum for one member but not in a batch of members, where each member's few output tiles
 * would each walk every row; so the blocks' partial products go in one pointer-batched call
 * into part [FOX_CUDA_SPLIT_BLOCKS × out × in] and a kernel sums them (gemm.cu).
 */
#define FOX_CUDA_SPLIT_ROWS 2048
int fox__cuda_lin_dw_rows(fox_cuda_blas b, int rows, int in, int out, const float *dY, int ldy,
                          const float *X, int ldx, float *dW, float *part);
/*
 * batch weight gradients dW_b [out × in] = dY_bᵀ·X_b, one call an entry from loop_rows rows;
 * outs (not NULL): entry b's own output count, its first outs[b] rows only, where the products
 * go one call an entry.
 */
int fox__cuda_lin_dw_batched(fox_cuda_blas b, int loop_rows, int rows, int in, int out,
                             const int *outs, const float *dY, int ldy, long long sdy,
                             const float *X, int ldx, long long sx, float *dW, long long sdw,
                             int batch);
/*
 * count products C_i [rows × n] = A_i [rows × k]·B_iᵀ (B_i [n × k]) of every member, row-major,
 * one pointer-batched call; ptrs: the device array of the A, then B, then C pointers, each list
 * lanes members' count entries (member j's from j·count). The call takes the entries of the
 * first fox__cuda_launch_members() members (more than lanes: FOX_EINVAL).
 */
int fox__cuda_gemm_slots(fox_cuda_blas b, int rows, int n, int k, float *const *ptrs, int count,
                         int lanes, int lda, int ldb, int ldc);
int fox__cuda_colsum(fox_cuda_blas b, int rows, int cols, const float *dY, int ldy,
                     const float *ones, float *db, float beta);
int fox__cuda_colsum_batched(fox_cuda_blas b, int rows, int cols, const float *dY, int ldy,
                             long long sdy, const float *ones, float *db, long long sdb, int batch);

#ifdef __cplusplus
}
#endif

#endif
