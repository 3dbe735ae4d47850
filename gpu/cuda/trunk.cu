/*
 * trunk.cu — the trunk's forward (GRN1, then GRN2) in one kernel, for the
 * small row counts where the stage-wise forward (net.c: per GRN three
 * products and the tail, each a launch that depends on the one before and
 * leaves most of the machine idle at batch 256) is a chain of launch
 * latencies.
 *
 * A cluster of TRUNK_CL blocks takes TRUNK_ROWS rows through both GRNs.
 * Block q of a cluster computes columns [q·NC, (q+1)·NC), NC = out / CL,
 * of every layer from its rows of the weights, staged in shared memory
 * (cp.async, the next layer's while the cluster waits at its barrier), so
 * that a cluster reads each weight from L2 once. A block copies its slice
 * of η2, η1 and y, and its LayerNorm statistics, into every block's
 * shared memory (distributed shared memory: stores do not wait, loads
 * would); one cluster barrier per exchange makes them visible, and the
 * layer inputs alternate between two buffers so that no store lands in a
 * buffer a block may still be reading. Every activation the backward and
 * the sentinel read (fox_cuda_grn_act, glu, ln_in) is written where the
 * stage-wise forward writes it.
 *
 * The widths are template parameters (every offset and loop bound a
 * constant: a first version with them at run time spent 7 of 8 issued
 * instructions on addressing and predicates); trunk_init says which the
 * build has.
 *
 * Twin: gpu/cpu/net.c's grn_fwd, twice (the same operations; a dot
 * product sums its even and odd terms apart, the LayerNorm merges the
 * blocks' means and variances, each in a fixed order).
 */
#include <math.h>
#include <stdint.h>

#include <cooperative_groups.h>

#include "cuda_impl.h"
#include "device.cuh"

namespace cg = cooperative_groups;

#define TRUNK_CL 8       /* blocks of a cluster (the portable maximum) */
#define TRUNK_ROWS 16    /* rows of a cluster */
#define TRUNK_THREADS 256
#define TRUNK_LANES (TRUNK_THREADS / TRUNK_ROWS) /* threads of a row in the tail */

/* A block's shared memory for GRNs in → H1 → H2 (in ≤ H1 ≥ H2), in floats. */
template <int H1, int H2>
struct trunk_smem {
    static constexpr int LD = H1 + 4; /* row stride of F and Ws (16-byte rows, spread over banks) */
    static constexpr int NC = H1 / TRUNK_CL; /* the widest slice */
    static constexpr int SLICE = TRUNK_ROWS * NC;
    static constexpr int F0 = 0, F1 = F0 + TRUNK_ROWS * LD; /* a layer's whole input, twice */
    static constexpr int WS = F1 + TRUNK_ROWS * LD;  /* [2·NC × LD] the layer's weight rows */
    static constexpr int OUT = WS + 2 * NC * LD;     /* the block's slice of a layer's output */
    static constexpr int SKIP = OUT + SLICE;         /* the skip r */
    static constexpr int GATE = SKIP + SLICE;        /* σ gate, then lin */
    static constexpr int PART = GATE + 2 * SLICE;    /* [2][CL][ROWS] every block's row mean, M2 */
    static constexpr int TOTAL = PART + 2 * TRUNK_CL * TRUNK_ROWS;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

/* 16 bytes global → shared without a register on the way; cp_wait waits for all of them. */
static __device__ __forceinline__ void
cp16(float *dst, const float *src)
{
    unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

static __device__ __forceinline__ void
cp_wait()
{
    asm volatile("cp.async.wait_all;" ::: "memory");
}

/* Rows [row0, row0 + n) of W [· × K] into rows [dst, dst + n) of Ws (K a multiple of 4). */
template <int LD>
static __device__ void
stage(float *Ws, const float *W, int K, int row0, int n, int dst)
{
    const int k4 = K / 4;
    for (int i = threadIdx.x; i < n * k4; i += TRUNK_THREADS) {
        int r = i / k4, c = i % k4;
        cp16(Ws + (dst + r) * LD + 4 * c, W + (size_t)(row0 + r) * K + 4 * c);
    }
}

/*
 * The block's part of one layer, NCOLS staged weight rows against the
 * ROWS rows of F, K long: a thread takes column j and RT consecutive
 * rows, four of K at a time (one weight load for RT rows); f(r, j, Σ)
 * takes each dot product.
 */
template <int NCOLS, int LD, typename F_>
static __device__ __forceinline__ void
layer(const float *F, const float *Ws, int K, F_ f)
{
    constexpr int RT = NCOLS * TRUNK_ROWS / TRUNK_THREADS;
    static_assert(RT >= 1 && TRUNK_THREADS % NCOLS == 0, "a thread's rows");
    const int j = threadIdx.x % NCOLS, r0 = threadIdx.x / NCOLS * RT;
    /* Two partial sums a dot product (even and odd k): dependent chains half as long. */
    float acc[RT][2];
#pragma unroll
    for (int i = 0; i < RT; i++)
        acc[i][0] = acc[i][1] = 0.0f;
    const float4 *w4 = (const float4 *)(Ws + j * LD), *a4 = (const float4 *)(F + r0 * LD);
    /* The next four k loaded while these are multiplied (shared-memory latency hidden). */
    float4 w = w4[0], a[RT];
#pragma unroll
    for (int i = 0; i < RT; i++)
        a[i] = a4[i * (LD / 4)];
    for (int k = 0; k < K / 4; k++) {
        const int kn = k + 1 < K / 4 ? k + 1 : k;
        const float4 wn = w4[kn];
        float4 an[RT];
#pragma unroll
        for (int i = 0; i < RT; i++)
            an[i] = a4[i * (LD / 4) + kn];
#pragma unroll
        for (int i = 0; i < RT; i++) {
            acc[i][0] = fmaf(a[i].x, w.x, acc[i][0]);
            acc[i][1] = fmaf(a[i].y, w.y, acc[i][1]);
            acc[i][0] = fmaf(a[i].z, w.z, acc[i][0]);
            acc[i][1] = fmaf(a[i].w, w.w, acc[i][1]);
            a[i] = an[i];
        }
        w = wn;
    }
#pragma unroll
    for (int i = 0; i < RT; i++)
        f(r0 + i, j, acc[i][0] + acc[i][1]);
}

/* The slice sl [ROWS × NC] into columns [c0, c0 + NC) of Fn in every block, 16 bytes a store. */
template <int NC, int LD>
static __device__ __forceinline__ void
broadcast(cg::cluster_group &cl, const float *sl, float *Fn, int c0)
{
    constexpr int N4 = NC / 4, PER = TRUNK_ROWS * N4;
    for (int i = threadIdx.x; i < TRUNK_CL * PER; i += TRUNK_THREADS) {
        int b = i / PER, r = (i % PER) / N4, c = i % N4;
        *(float4 *)(cl.map_shared_rank(Fn, b) + r * LD + c0 + 4 * c) =
            *(const float4 *)(sl + r * NC + 4 * c);
    }
}

/*
 * The mean and variance of the row over every block's columns from the
 * tail's values v (the thread's columns lane, lane + LANES, …): the
 * block's own mean and Σ (x − mean)² over its NC columns into every
 * block's PART, one cluster barrier, then the CL pairs merged in rank
 * order (Chan et al.: Σ M2_b + NC·Σ (mean_b − mean)², equal counts).
 * Every thread of the row gets both.
 */
template <int H1, int H2, int NC, int M>
static __device__ __forceinline__ void
row_stats(cg::cluster_group &cl, float *sm, const float (&v)[M], float *mean, float *var)
{
    using S = trunk_smem<H1, H2>;
    const int r = threadIdx.x / TRUNK_LANES, lane = threadIdx.x % TRUNK_LANES;
    float s = 0.0f, d = 0.0f;
#pragma unroll
    for (int m = 0; m < M; m++)
        s += v[m];
    for (int o = TRUNK_LANES / 2; o > 0; o >>= 1)
        s += __shfl_xor_sync(FULL_MASK, s, o);
    const float mb = s / (float)NC;
#pragma unroll
    for (int m = 0; m < M; m++)
        d += (v[m] - mb) * (v[m] - mb);
    for (int o = TRUNK_LANES / 2; o > 0; o >>= 1)
        d += __shfl_xor_sync(FULL_MASK, d, o);
    float *part = sm + S::PART;
    const int q = (int)cl.block_rank();
    if (lane < TRUNK_CL) {
        float *p = cl.map_shared_rank(part, lane);
        p[q * TRUNK_ROWS + r] = mb;
        p[(TRUNK_CL + q) * TRUNK_ROWS + r] = d;
    }
    cl.sync();
    float mu = 0.0f, m2 = 0.0f;
#pragma unroll
    for (int b = 0; b < TRUNK_CL; b++)
        mu += part[b * TRUNK_ROWS + r];
    mu /= (float)TRUNK_CL;
#pragma unroll
    for (int b = 0; b < TRUNK_CL; b++) {
        const float dm = part[b * TRUNK_ROWS + r] - mu;
        m2 += part[(TRUNK_CL + b) * TRUNK_ROWS + r] + (float)NC * dm * dm;
    }
    *mean = mu;
    *var = m2 / (float)(NC * TRUNK_CL);
}

/*
 * One GRN in → out (NC = out / CL columns a block) over the cluster's rows
 * [row0, row0 + ROWS) ∩ [0, R): its input in F[*cur], its first layer's
 * weights staged (cp.async issued). With next (the next GRN), y goes into
 * the other F of every block and next's first weights are staged.
 */
template <int H1, int H2, int OUT>
static __device__ void
grn(cg::cluster_group &cl, const fox_cuda_trunk_grn &g, const fox_cuda_trunk_grn *next, int R,
    int row0, float *sm, int *cur)
{
    using S = trunk_smem<H1, H2>;
    constexpr int NC = OUT / TRUNK_CL, LD = S::LD, M = NC / TRUNK_LANES;
    static_assert(NC % TRUNK_LANES == 0 && NC % 4 == 0, "the tail's columns");
    const int q = (int)cl.block_rank(), c0 = q * NC, skip = g.wr != NULL;
    float *Ws = sm + S::WS, *sl = sm + S::OUT, *rs = sm + S::SKIP, *gate = sm + S::GATE;
    const size_t Ro = (size_t)R * OUT;
    auto at = [&](int r, int j) { return (size_t)(row0 + r) * OUT + c0 + j; };
    auto live = [&](int r) { return row0 + r < R; };
    /*
     * A slice [ROWS × NC] to its place in dst [R × OUT]: the global stores of a layer go after
     * the barrier that follows it, whose release would otherwise wait for them.
     */
    auto slice_out = [&](const float *src, float *dst) {
        for (int i = threadIdx.x; i < TRUNK_ROWS * NC; i += TRUNK_THREADS)
            if (live(i / NC))
                dst[at(i / NC, i % NC)] = src[i];
    };
    auto F = [&]() { return sm + (*cur ? S::F1 : S::F0); };
    auto Fn = [&]() { return sm + (*cur ? S::F0 : S::F1); };

    /* η2 = ELU(W2·a + b2) and the skip r = Wr·a (a itself when in = out). */
    auto eta2 = [&](int r, int j, float v) {
        if (j < NC) {
            v += g.b2[c0 + j];
            v = v <= 0.0f ? expm1f(v) : v;
            sl[r * NC + j] = v;
        } else {
            rs[r * NC + j - NC] = v;
        }
    };
    cp_wait();
    __syncthreads();
    if (skip) {
        layer<2 * NC, LD>(F(), Ws, g.in, eta2);
    } else {
        layer<NC, LD>(F(), Ws, g.in, eta2);
        for (int i = threadIdx.x; i < TRUNK_ROWS * NC; i += TRUNK_THREADS)
            rs[i] = F()[(i / NC) * LD + c0 + i % NC];
    }
    __syncthreads();
    stage<LD>(Ws, g.w1, OUT, c0, NC, 0);
    broadcast<NC, LD>(cl, sl, Fn(), c0);
    cl.sync(); /* every block's η2 in F[cur ^ 1], and no block reads F[cur] any more */
    *cur ^= 1;
    slice_out(sl, g.act.eta2);
    if (skip)
        slice_out(rs, g.act.eta2 + Ro);

    /* η1 = W1·η2 + b1 */
    cp_wait();
    __syncthreads();
    layer<NC, LD>(F(), Ws, OUT, [&](int r, int j, float v) {
        sl[r * NC + j] = v + g.b1[c0 + j];
    });
    __syncthreads();
    stage<LD>(Ws, g.wg, OUT, c0, NC, 0);
    stage<LD>(Ws, g.wv, OUT, c0, NC, NC);
    broadcast<NC, LD>(cl, sl, Fn(), c0);
    cl.sync();
    *cur ^= 1;
    slice_out(sl, g.act.eta1);

    /* σ(Wg·η1 + bg) and lin = Wv·η1 + bv */
    cp_wait();
    __syncthreads();
    layer<2 * NC, LD>(F(), Ws, OUT, [&](int r, int j, float v) {
        if (j < NC)
            gate[r * NC + j] = 1.0f / (1.0f + expf(-(v + g.bg[c0 + j])));
        else
            gate[S::SLICE + r * NC + j - NC] = v + g.bv[c0 + j - NC];
    });
    __syncthreads();
    if (next) {
        const int nc2 = next->out / TRUNK_CL, c2 = q * nc2;
        stage<LD>(Ws, next->w2, next->in, c2, nc2, 0);
        if (next->wr)
            stage<LD>(Ws, next->wr, next->in, c2, nc2, nc2);
    }

    /*
     * The tail, LANES threads a row, M columns each (lane + LANES·m): x = r + σ·lin, then
     * LayerNorm over the row's OUT columns with the cluster's row sums.
     */
    const int r = threadIdx.x / TRUNK_LANES, lane = threadIdx.x % TRUNK_LANES;
    float x[M], xh[M], y[M];
#pragma unroll
    for (int m = 0; m < M; m++) {
        const int i = r * NC + lane + TRUNK_LANES * m;
        x[m] = rs[i] + gate[i] * gate[S::SLICE + i];
    }
    float mean, var;
    row_stats<H1, H2, NC>(cl, sm, x, &mean, &var);
    const float rstd = 1.0f / sqrtf(var + 1e-5f);
#pragma unroll
    for (int m = 0; m < M; m++) {
        const int j = lane + TRUNK_LANES * m;
        xh[m] = (x[m] - mean) * rstd;
        y[m] = xh[m] * g.gam[c0 + j] + g.bet[c0 + j];
        sl[r * NC + j] = y[m];
    }
    if (next) {
        __syncthreads();
        broadcast<NC, LD>(cl, sl, Fn(), c0);
        cl.sync(); /* every block's y in F[cur ^ 1] */
        *cur ^= 1;
    }
    /* Else the last store into another block's memory came before row_stats' barrier. */
    if (!live(r))
        return;
    if (q == 0 && lane == 0)
        g.act.rstd[row0 + r] = rstd;
#pragma unroll
    for (int m = 0; m < M; m++) {
        const int j = lane + TRUNK_LANES * m, i = r * NC + j;
        const float sg = gate[i], lin = gate[S::SLICE + i];
        g.act.zgv[at(r, j)] = sg;
        g.act.zgv[Ro + at(r, j)] = lin;
        if (g.glu) { /* the stages the sentinel watches (slots 19, 20) */
            g.glu[at(r, j)] = sg * lin;
            g.ln_in[at(r, j)] = x[m];
        }
        g.act.xhat[at(r, j)] = xh[m];
        g.act.y[at(r, j)] = y[m];
    }
}

#endif

template <int H1, int H2>
__global__ void __launch_bounds__(TRUNK_THREADS)
trunk_fwd_kernel(const float *__restrict__ X, int R, fox_cuda_trunk_grn g1, fox_cuda_trunk_grn g2)
{
    pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using S = trunk_smem<H1, H2>;
    extern __shared__ float4 smem4[];
    float *sm = (float *)smem4;
    cg::cluster_group cl = cg::this_cluster();
    const int row0 = (int)(blockIdx.x / TRUNK_CL) * TRUNK_ROWS, k4 = g1.in / 4;
    const int nc = H1 / TRUNK_CL, c0 = (int)cl.block_rank() * nc;
    int cur = 0;
    for (int i = threadIdx.x; i < TRUNK_ROWS * k4; i += TRUNK_THREADS) {
        int r = i / k4, c = i % k4;
        float *dst = sm + S::F0 + r * S::LD + 4 * c;
        if (row0 + r < R)
            cp16(dst, X + (size_t)(row0 + r) * g1.in + 4 * c);
        else
            *(float4 *)dst = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    stage<S::LD>(sm + S::WS, g1.w2, g1.in, c0, nc, 0);
    if (g1.wr)
        stage<S::LD>(sm + S::WS, g1.wr, g1.in, c0, nc, nc);
    /* No block may store into another's memory before that block has started. */
    cl.sync();
    grn<H1, H2, H1>(cl, g1, &g2, R, row0, sm, &cur);
    grn<H1, H2, H2>(cl, g2, NULL, R, row0, sm, &cur);
#endif
}

/* The widths this build has a kernel for: (H1, H2), the kernel, its shared memory. */
typedef void (*trunk_kernel)(const float *, int, fox_cuda_trunk_grn, fox_cuda_trunk_grn);
static const struct {
    int h1, h2;
    trunk_kernel kernel;
    size_t bytes;
} trunk_widths[] = {
    {256, 128, trunk_fwd_kernel<256, 128>, trunk_smem<256, 128>::TOTAL * sizeof(float)},
};

static int
trunk_find(int h1, int h2)
{
    for (size_t k = 0; k < sizeof trunk_widths / sizeof *trunk_widths; k++)
        if (trunk_widths[k].h1 == h1 && trunk_widths[k].h2 == h2)
            return (int)k;
    return -1;
}

/*
 * Whether the fused trunk takes GRNs in → h1 → h2, and if so its kernel's
 * shared memory set up: a kernel for (h1, h2), in a multiple of 4 and at
 * most h1, and the shared memory within the device's limit.
 */
int
fox__cuda_trunk_init(int in, int h1, int h2)
{
    const int k = trunk_find(h1, h2);
    if (k < 0 || in % 4 || in > h1)
        return 0;
    int dev = 0, limit = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess ||
        trunk_widths[k].bytes > (size_t)limit)
        return 0;
    return cudaFuncSetAttribute(trunk_widths[k].kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)trunk_widths[k].bytes) == cudaSuccess;
}

int
fox__cuda_trunk_fwd(cudaStream_t s, const float *X, int R, const fox_cuda_trunk_grn *g1,
                    const fox_cuda_trunk_grn *g2)
{
    const int k = trunk_find(g1->out, g2->out);
    if (k < 0)
        return FOX_EINVAL;
    /* A cluster's blocks side by side along x; with dependent launch as launch() has it. */
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = TRUNK_CL;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned int)((R + TRUNK_ROWS - 1) / TRUNK_ROWS * TRUNK_CL));
    cfg.blockDim = dim3(TRUNK_THREADS);
    cfg.dynamicSmemBytes = trunk_widths[k].bytes;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = fox__cuda_pdl ? 2 : 1;
    FOX_CUDA_TRY(cudaLaunchKernelEx(&cfg, trunk_widths[k].kernel, X, R, *g1, *g2));
    return 0;
}
