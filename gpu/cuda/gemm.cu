/*
 * gemm.cu — the products of the forward and of the input gradients, each
 * with the elementwise stage that follows it in foxnet (bias, ELU/ReLU, an
 * activation's backward mask, a residual, the IQN h ⊙ φ): cuBLAS for the
 * product (row-major through the trick of matmul.c, up to nz batch entries
 * in one strided-batched call, in the stream's math), then one epilogue
 * launch for the whole stage.
 *
 * A hand-tiled FP32 kernel that fused the epilogue into the product lost
 * to cuBLAS at every batch measured: at these widths a k-tile holds too
 * little work to hide its loads, and it had no split-K. cuBLAS stays until
 * a kernel beats it (docs/performance.md lists the approaches rejected).
 *
 * Not here: the weight gradients and bias column sums (matmul.c).
 */
#include <math.h>
#include <stdint.h>

#include "gpu/cuda/device.cuh"
#include "gpu/cuda/gemm.h"
#include "gpu/cuda/matmul.h"


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

/* V consecutive floats, loaded and stored as one access where V is 4 (16-byte aligned). */
template <int V> struct floats {
    float x[V];
};

template <int V>
static __device__ __forceinline__ floats<V>
load(const float *p)
{
    floats<V> v;
    if constexpr (V == 4) {
        float4 t = *(const float4 *)p;
        v.x[0] = t.x, v.x[1] = t.y, v.x[2] = t.z, v.x[3] = t.w;
    } else {
        v.x[0] = *p;
    }
    return v;
}

template <int V>
static __device__ __forceinline__ void
store(float *p, const floats<V> &v)
{
    if constexpr (V == 4)
        *(float4 *)p = make_float4(v.x[0], v.x[1], v.x[2], v.x[3]);
    else
        *p = v.x[0];
}

/*
 * The epilogue over every output of the launch: the stages of fox_cuda_gemm
 * after the product, in its order (bias, act, the backward mask, the
 * residual; the product already holds α and β), the IQN product mout, and
 * the next stage's bias laid out in fill. A thread takes V consecutive
 * outputs of a row at a time: with V = 4 (every width, stride and pointer
 * a multiple of 4 floats) each operand is one 16-byte access. One output a
 * thread left the kernel waiting on its loads: at large batches it used a
 * small fraction of the memory bandwidth, stalled mostly on its first use
 * of C.
 */
template <int V, bool Fast>
__global__ void
epilogue_kernel(fox_cuda_gemm g, fox_divider cells, fox_divider mdiv)
{
    pdl_enter();
    fox_member_args(g);
    const int Q = g.N / V; /* cells of V outputs a row */
    const size_t per = (size_t)g.M * Q;
    const int z = blockIdx.y, zi = z == 0 ? 0 : 1; /* a batch entry a grid row */
    /*
     * The entry's operands chosen once, not indexed by zi: an array of g indexed at run time
     * would keep the member's copy of g in local memory.
     */
    const float *bias = zi ? g.bias[1] : g.bias[0], *mul = zi ? g.mul[1] : g.mul[0];
    const int act = zi ? g.act[1] : g.act[0];
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < per;
         e += (size_t)gridDim.x * blockDim.x) {
        /*
         * Two plain divisions here were over a third of the four-output kernel's work, hence
         * the divider. Not through fox_div_rem: its remainder from the divider's d, not from Q
         * (known to the compiler through g.N), leaves the loop's invariants unhoisted, which
         * made the kernel larger and slower.
         */
        int r, c, mr;
        if constexpr (Fast) {
            unsigned int q = fox_div(cells, (unsigned int)e);
            r = (int)q;
            c = (int)((unsigned int)e - q * (unsigned int)Q) * V;
            mr = g.mout ? (int)fox_div(mdiv, q) : 0;
        } else {
            r = (int)(e / Q);
            c = (int)(e % Q) * V;
            mr = g.mout ? r / g.mul_div : 0;
        }
        size_t at = z * g.sc + (size_t)r * g.ldc + c;
        floats<V> v = load<V>(g.C + at), b = {}, d = {}, a = {}, m = {};
        if (bias)
            b = load<V>(bias + c);
        if (g.dy)
            d = load<V>(g.dy + z * g.sdy + (size_t)r * g.lddy + c);
        if (g.add)
            a = load<V>(g.add + (size_t)r * g.ldadd + c);
        if (g.mout)
            m = load<V>(mul + (size_t)mr * g.ldmul + c);
#pragma unroll
        for (int j = 0; j < V; j++) {
            float x = v.x[j];
            if (bias)
                x += b.x[j];
            x = act_apply(x, act);
            if (g.dy)
                x = act_back(x, d.x[j], g.dact);
            if (g.add)
                x += a.x[j];
            v.x[j] = x;
            m.x[j] *= x;
        }
        store<V>(g.C + at, v);
        if (g.mout)
            store<V>(g.mout + at, m);
        if (g.fill && z == 0)
            store<V>(g.fill + (size_t)r * g.ldc + c, load<V>(g.fill_bias + c));
    }
}

/*
 * fox__cuda_member_ptrs's arrays, block z member z's entries: the one kernel that reads no
 * member's buffers, so it shifts no argument, and writes every member's pointers itself.
 */
__global__ void
member_ptrs_kernel(const float *A, long long sa, const float *B, long long sb, const float *C,
                   long long sc, int count, const float **out)
{
    pdl_enter();
    const size_t z = blockIdx.z, list = (size_t)count * gridDim.z;
    const size_t span = z * (FOX_CUDA_MEMBER_SPAN / sizeof(float));
    for (int e = threadIdx.x; e < count; e += blockDim.x) {
        const size_t at = z * count + e;
        out[at] = A + e * sa + span;
        out[list + at] = B + e * sb + span;
        out[2 * list + at] = C + e * sc + span;
    }
}

int
fox__cuda_member_ptrs(cudaStream_t s, const float *A, long long sa, const float *B, long long sb,
                      const float *C, long long sc, int count, const float **out)
{
    FOX_CUDA_TRY(launch(member_ptrs_kernel, 1, 32, 0, s, A, sa, B, sb, C, sc, count, out));
    return 0;
}

/* fox__cuda_slices_sum: each output the sum of its slices in slice order. */
__global__ void
slices_sum_kernel(const float *src, int slices, size_t n, float *dst)
{
    pdl_enter();
    fox_member_args(src, dst);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = src[i];
        for (int k = 1; k < slices; k++)
            v += src[k * n + i];
        dst[i] = v;
    }
}

int
fox__cuda_slices_sum(cudaStream_t s, const float *src, int slices, size_t n, float *dst)
{
    FOX_CUDA_TRY(launch(slices_sum_kernel, grid_for(n, 256), 256, 0, s, src, slices, n, dst));
    return 0;
}

/* Can every operand of g's epilogue go 4 floats at a time? */
static bool
by_fours(const fox_cuda_gemm *g)
{
    if (g->by_ones)
        return false;
    const void *ptrs[] = {g->C,      g->bias[0], g->bias[1], g->dy,   g->add,
                          g->mul[0], g->mul[1],  g->mout,    g->fill, g->fill_bias};
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++)
        if ((uintptr_t)ptrs[k] % 16)
            return false;
    long long strides[] = {g->N, g->ldc, g->sc, g->lddy, g->sdy, g->ldadd, g->ldmul};
    for (size_t k = 0; k < sizeof strides / sizeof strides[0]; k++)
        if (strides[k] % 4)
            return false;
    return true;
}

int
fox__cuda_epilogue(cudaStream_t s, const fox_cuda_gemm *g)
{
    if (!(g->bias[0] || g->bias[1] || g->act[0] || g->act[1] || g->dy || g->add || g->mout ||
          g->fill))
        return 0;
    if (g->nz > 65535)
        return FOX_EINVAL; /* a batch entry a grid row */
    const int V = by_fours(g) ? 4 : 1;
    const size_t per = (size_t)g->M * (g->N / V);
    const fox_divider cells = fox_divider_of((unsigned int)(g->N / V));
    const fox_divider mdiv = fox_divider_of(g->mout ? (unsigned int)g->mul_div : 1u);
    const bool fast =
        fox_divider_ok(g->N / V, per) && fox_divider_ok(g->mout ? g->mul_div : 1, g->M);
    const dim3 grid(grid_for(per, 256), g->nz);
    auto kernel = V == 4 ? (fast ? epilogue_kernel<4, true> : epilogue_kernel<4, false>)
                         : (fast ? epilogue_kernel<1, true> : epilogue_kernel<1, false>);
    FOX_CUDA_TRY(launch(kernel, grid, 256, 0, s, *g, cells, mdiv));
    return 0;
}

int
fox__cuda_gemm(fox_cuda_blas b, cudaStream_t s, const fox_cuda_gemm *g)
{
    if (g->M < 1 || g->N < 1 || g->K < 1 || g->nz < 1 || (g->mout && g->mul_div < 1))
        return FOX_EINVAL;
    /* Y = α·A·op(B) + β·Y for every batch entry, in the handle's math (matmul.c). */
    cublasOperation_t tb = g->bt ? CUBLAS_OP_T : CUBLAS_OP_N;
    FOX_TRY(fox__cuda_gemm_strided(b, tb, CUBLAS_OP_N, g->N, g->M, g->K, g->alpha, g->B, g->ldb,
                                   g->sb, g->A, g->lda, g->sa, g->beta, g->C, g->ldc, g->sc,
                                   g->nz));
    return fox__cuda_epilogue(s, g);
}
