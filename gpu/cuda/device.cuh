/*
 * device.cuh — device helpers shared by the kernel files: launch grids, warp
 * and block reductions, sentinel thresholds. Included only by .cu files.
 */
#ifndef FOX_CUDA_DEVICE_CUH
#define FOX_CUDA_DEVICE_CUH

#include <stddef.h>

#include <type_traits>
#include <utility>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/cuda_impl.h"

#define WARP 32
#define FULL_MASK 0xffffffffu

/*
 * Programmatic dependent launch (sm_90): in a build for sm_90 or later, launch()
 * lets a kernel start while the kernel before it on its stream finishes
 * (in a captured graph, a programmatic edge), so its launch and block
 * set-up overlap that kernel's tail. Every kernel's first act is
 * pdl_enter(): wait until the kernel before it has completed with its
 * writes visible (pdl_wait), then let the next kernel launch the same way
 * (pdl_release; never more than one kernel ahead). A kernel that holds its
 * successor back until its end calls pdl_wait alone (finish_kernel). Without
 * the attribute, or before sm_90, both instructions are no-ops.
 */
static __device__ __forceinline__ void
pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Let the next kernel launch now (a kernel that never says so lets it at its completion). */
static __device__ __forceinline__ void
pdl_release()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static __device__ __forceinline__ void
pdl_enter()
{
    pdl_wait();
    pdl_release();
}

template <typename... P, typename... A>
static cudaError_t
launch(void (*kernel)(P...), dim3 grid, unsigned int block, size_t smem, cudaStream_t s,
       A &&...args)
{
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &pdl;
    cfg.numAttrs = FOX_CUDA_PDL ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

/*
 * n / d for a divisor fixed at launch, as a multiply-high, add and shift
 * (Granlund and Montgomery's division by invariant integers) instead of the
 * ~15-instruction division sequence: for d ≥ 1 and n < 2³¹ (the add must
 * not overflow 32 bits; fox_divider_ok says whether d and the range allow).
 */
typedef struct fox_divider {
    unsigned int d, m;
    int s;
} fox_divider;

static inline fox_divider
fox_divider_of(unsigned int d)
{
    int s = 0;
    while (s < 32 && (1ull << s) < d)
        s++;
    fox_divider v = {d, (unsigned int)(((1ull << 32) * ((1ull << s) - d)) / d + 1), s};
    return v;
}

/* May n / d go through fox_divider for every n < limit? */
static inline bool
fox_divider_ok(unsigned long long d, unsigned long long limit)
{
    return d >= 1 && limit <= (1ull << 31);
}

static __device__ __forceinline__ unsigned int
fox_div(const fox_divider &v, unsigned int n)
{
    return (__umulhi(n, v.m) + n) >> v.s;
}

/*
 * e / v.d and e % v.d: by fox_div in a kernel instance launched Fast
 * (every e < 2³¹: fox_divider_ok), else by division.
 */
struct fox_quot_rem {
    size_t q, r;
};

template <bool Fast>
static __device__ __forceinline__ fox_quot_rem
fox_div_rem(const fox_divider &v, size_t e)
{
    if constexpr (Fast) {
        unsigned int q = fox_div(v, (unsigned int)e);
        return {q, (unsigned int)e - q * v.d}; /* 32-bit arithmetic throughout */
    }
    size_t q = e / v.d;
    return {q, e - q * v.d};
}

/* Grid for a grid-stride loop over n items: enough blocks to fill the GPU, at most cap. */
static inline unsigned int
grid_for(size_t n, int threads, size_t cap = 4096)
{
    size_t g = (n + (size_t)threads - 1) / (size_t)threads;
    if (g > cap)
        g = cap;
    return (unsigned int)(g > 0 ? g : 1);
}

/* Sum of v over the warp by an xor tree: every lane gets it, the same bits on every run. */
template <typename T>
static __device__ __forceinline__ T
warp_sum(T v)
{
    for (int o = WARP / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float
warp_max(float v)
{
    for (int o = WARP / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

/*
 * Sum of v over the block (blockDim a multiple of 32, at most 1024) in a fixed
 * order, so the result is the same bits on every run; every thread gets it.
 */
static __device__ double
block_sum(double v)
{
    __shared__ double part[32];
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    double s = 0.0;
    for (int k = 0; k < nw; k++)
        s += part[k];
    return s;
}

/*
 * The grid-wide sum of a last-block reduction: every block passes its value
 * (thread 0's is stored) and the finished-block counter `done`; in the block
 * that finishes last, every thread gets the sum of all blocks' values in
 * block_sum's fixed order (a thread per partial, not one after another) and
 * 1 is returned; elsewhere 0. The last block's caller resets *done.
 */
static __device__ int
last_block_total(double value, double *partial, unsigned int *done, double *total)
{
    __shared__ int last;
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = value;
        __threadfence();
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return 0;
    __threadfence();
    double v = 0.0;
    for (int k = threadIdx.x; k < (int)gridDim.x; k += blockDim.x)
        v += __ldcg(&partial[k]);
    *total = block_sum(v);
    return 1;
}

/* p99 pass 1's initial min: FLT_MAX, as fox_p99_abs_spans. */
#define P99_FLT_MAX_BITS 0x7f7fffffu

/*
 * p99 pass 1's result for target t of a block: the min and max (bits of the finite |x|:
 * unsigned order is float order) and count, one global atomic each, all order-free.
 */
static __device__ __forceinline__ void
p99_publish(fox_cuda_p99_scratch *sc, int t, unsigned int lo, unsigned int hi,
            unsigned long long cnt)
{
    if (cnt) {
        atomicMin(&sc->lo[t], lo);
        atomicMax(&sc->hi[t], hi);
        atomicAdd(&sc->count[t], cnt);
    }
}

/*
 * p99 pass 1 of one buffer inside the kernel that writes it: add() each value, then every
 * thread of the block calls publish() (into target 0 of sc).
 */
struct p99_range {
    unsigned int lo = P99_FLT_MAX_BITS, hi = 0u, cnt = 0u;

    __device__ void add(float x)
    {
        const float a = fabsf(x);
        if (isfinite(a)) {
            const unsigned int bits = __float_as_uint(a);
            lo = bits < lo ? bits : lo;
            hi = bits > hi ? bits : hi;
            cnt++;
        }
    }

    __device__ void publish(fox_cuda_p99_scratch *sc)
    {
        __shared__ unsigned int s_lo[32], s_hi[32], s_n[32];
        const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
        const unsigned int l = __reduce_min_sync(FULL_MASK, lo);
        const unsigned int h = __reduce_max_sync(FULL_MASK, hi);
        const unsigned int m = __reduce_add_sync(FULL_MASK, cnt);
        if (lane == 0) {
            s_lo[warp] = l;
            s_hi[warp] = h;
            s_n[warp] = m;
        }
        __syncthreads();
        if (threadIdx.x != 0)
            return;
        unsigned int bl = P99_FLT_MAX_BITS, bh = 0u;
        unsigned long long bn = 0ull;
        for (int w = 0; w < nw; w++) {
            bl = s_lo[w] < bl ? s_lo[w] : bl;
            bh = s_hi[w] > bh ? s_hi[w] : bh;
            bn += s_n[w];
        }
        p99_publish(sc, 0, bl, bh, bn);
    }
};

/* Threshold of slot i now: mult × eff^power, eff from the device ISV (fox_sentinel_threshold). */
static __device__ float
threshold_of(const fox_cuda_stab &st, int i)
{
    const fox_cuda_rule r = st.rules[i];
    float eff = fox_isv_eff(
        st.isv[r.base == FOX_SENT_BASE_H_S2_RMS ? FOX_ISV_H_S2_RMS_EMA : FOX_ISV_Q_ABS_REF]);
    float t = r.mult;
    for (int p = 0; p < r.power; p++)
        t *= eff;
    return t;
}

static __device__ __forceinline__ int
block_any(int v)
{
    return __syncthreads_or(v);
}

/* Is the fault armed for this slot at this step? (fox_cpu_stab_begin_step + fault_here) */
static __device__ __forceinline__ int
fault_now(const fox_cuda_ctl *c, int slot, int after_count)
{
    return c->fault_slot == slot && !c->fault_done &&
           c->train_steps == c->fault_step + (after_count ? 1 : 0);
}

/*
 * Mech 10 on h_s2 (site_h_s2) over a grid: element() checks a value (slots
 * 12 and 49, before the clamp), clamps it and adds its square; finish(),
 * called by every thread of every block, raises the block's flags and in
 * the last block folds the RMS of the n clamped values into H_S2_RMS_EMA.
 * Every block reads the old EMA: only the last, after all others, updates it.
 */
struct h_s2_site {
    float bound = 0.0f, t49 = 0.0f;
    int bad12 = 0, bad49 = 0;
    double ss = 0.0;

    h_s2_site() = default;
    __device__ explicit h_s2_site(const fox_cuda_stab &st)
        : bound(st.adaptive ? fox_bound_adaptive(st.isv[FOX_ISV_H_S2_BOUND])
                            : fox_bound_h_s2_fixed(st.isv[FOX_ISV_H_S2_RMS_EMA])),
          t49(threshold_of(st, FOX_SENT_H_S2_MAX_ABS))
    {
    }

    __device__ float element(float x)
    {
        bad12 |= !isfinite(x);
        bad49 |= !(fabsf(x) < t49);
        x = fox_clamp_finite(x, bound);
        ss += (double)x * x;
        return x;
    }

    __device__ void finish(const fox_cuda_stab &st, size_t n, double *partial)
    {
        if (st.sentinel) {
            if (block_any(bad12) && threadIdx.x == 0)
                st.flags[FOX_SENT_H_S2] = 1;
            if (block_any(bad49) && threadIdx.x == 0)
                st.flags[FOX_SENT_H_S2_MAX_ABS] = 1;
        }
        double tot;
        unsigned int *done = &st.ctl->done_blocks[FOX_CUDA_DONE_H_S2];
        if (!last_block_total(block_sum(ss), partial, done, &tot) || threadIdx.x != 0)
            return;
        *done = 0;
        if (n)
            fox_signal_observe(st.isv, st.adaptive ? st.sp4->ws : NULL, FOX_ISV_H_S2_RMS_EMA,
                               (float)sqrt(tot / (double)n), st.adaptive);
    }
};

/* Branch of flat action act (D ≤ 4 branches, offsets ascending). */
static __device__ __forceinline__ int
branch_of(const fox_cuda_dims &dm, int act)
{
    int d = 0;
    while (d + 1 < dm.D && act >= dm.boff[d + 1])
        d++;
    return d;
}

/*
 * The columns c = lane, lane + 32, … < out of a warp's row, f(j, c) for each
 * with j the lane's column number. K > 0: unrolled over K numbers (out ≤
 * 32·K), so that a kernel can keep its row in registers indexed by j and
 * issue all its loads at once; K = 0: a plain loop for any width (j = 0).
 */
template <int K, typename F>
static __device__ __forceinline__ void
row_each(int lane, int out, F f)
{
    if constexpr (K > 0) {
#pragma unroll
        for (int j = 0; j < K; j++)
            if (lane + j * WARP < out)
                f(j, lane + j * WARP);
    } else {
        for (int c = lane; c < out; c += WARP)
            f(0, c);
    }
}

/* go(k) with k a std::integral_constant: the register slots for rows out wide (0: none). */
template <typename L>
static cudaError_t
by_row_slots(int out, L go)
{
    if (out <= 4 * WARP)
        return go(std::integral_constant<int, 4>());
    if (out <= 8 * WARP)
        return go(std::integral_constant<int, 8>());
    if (out <= 16 * WARP)
        return go(std::integral_constant<int, 16>());
    return go(std::integral_constant<int, 0>());
}

#endif
