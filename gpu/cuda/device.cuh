/*
 * device.cuh — device helpers shared by the kernel files: launch grids, a
 * population's members (fox_member), warp and block reductions, sentinel
 * thresholds. Included only by .cu files.
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
#include "gpu/cuda/gemm.h"
#include "gpu/cuda/loss.h"
#include "gpu/cuda/per.h"

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

/*
 * A population's launch (cuda_impl.h): launch() multiplies the grid's z by
 * the members the launch covers, and block (x, y, z) works for member z on
 * its arguments shifted by z spans. Every kernel's first act after
 * pdl_enter is to shift all its parameters that hold device pointers
 * (fox_member_args), except where a shifted copy would cost: a struct
 * whose arrays a kernel indexes at run time (a copy of it would live on
 * the thread's stack) has the pointers it uses shifted alone or its copy
 * in shared memory, and Adam moves its five arrays' indices (adam.cu).
 * Every grid's own z is 1 and no kernel reads blockIdx.z or gridDim.z
 * otherwise, so a block's reductions and last-block counters (over
 * gridDim.x) are its member's. With one member blockIdx.z is 0 and every
 * shift leaves its pointer as it was. NULL stays NULL: an operand absent
 * by design is absent for every member. Pointers read from device memory
 * (the fused check's table, the sum tree) are each member's own and are
 * never shifted.
 */
template <typename T>
static __device__ __forceinline__ T *
fox_member_by(T *p, size_t span)
{
    /* Through a byte pointer, not an integer, so that the compiler still sees global memory. */
    typedef std::conditional_t<std::is_const_v<T>, const char, char> byte;
    return p ? (T *)((byte *)p + (size_t)blockIdx.z * span) : p;
}

/* Member blockIdx.z's copy of the device buffer at p (member 0's). */
template <typename T>
static __device__ __forceinline__ T *
fox_member(T *p)
{
    return fox_member_by(p, FOX_CUDA_MEMBER_SPAN);
}

/* Member blockIdx.z's copy of the mapped host buffer at p (the flags, the mapped ISV). */
template <typename T>
static __device__ __forceinline__ T *
fox_member_host(T *p)
{
    return fox_member_by(p, FOX_CUDA_MEMBER_HOST_SPAN);
}

/*
 * fox_member_shift(x): x with every device pointer it holds moved to member
 * blockIdx.z's copy (the stab's flags: its mapped host copy), one overload
 * for each kind of kernel parameter that holds pointers. A struct gains a
 * pointer field only with its line here; fox_cuda_segments' one pointer is
 * shifted where it is used (heads.cu).
 */
template <typename T>
static __device__ __forceinline__ T *
fox_member_shift(T *p)
{
    return fox_member(p);
}

static __device__ __forceinline__ fox_cuda_stab
fox_member_shift(fox_cuda_stab s)
{
    s.flags = fox_member_host(s.flags); /* mapped host memory */
    s.rules = fox_member(s.rules);
    s.isv = fox_member(s.isv);
    s.ctl = fox_member(s.ctl);
    s.site_part = fox_member(s.site_part);
    s.sp4 = fox_member(s.sp4);
    s.pgroup = fox_member(s.pgroup);
    return s;
}

static __device__ __forceinline__ fox_cuda_collect_cfg
fox_member_shift(fox_cuda_collect_cfg c)
{
    c.bars.open = fox_member(c.bars.open);
    c.bars.high = fox_member(c.bars.high);
    c.bars.low = fox_member(c.bars.low);
    c.bars.close = fox_member(c.bars.close);
    c.norm = fox_member(c.norm);
    return c;
}

static __device__ __forceinline__ fox_cuda_batch
fox_member_shift(fox_cuda_batch b)
{
    b.s2 = fox_member(b.s2);
    b.a = fox_member(b.a);
    b.r = fox_member(b.r);
    b.done = fox_member(b.done);
    b.w = fox_member(b.w);
    b.aux = fox_member(b.aux);
    b.regime = fox_member(b.regime);
    b.tau = fox_member(b.tau);
    b.idx = fox_member(b.idx);
    b.prio = fox_member(b.prio);
    b.a_star = fox_member(b.a_star);
    return b;
}

static __device__ __forceinline__ fox_cuda_loss_hp
fox_member_shift(fox_cuda_loss_hp h)
{
    h.aux_scale = fox_member(h.aux_scale);
    return h;
}

static __device__ __forceinline__ fox_cuda_gemm
fox_member_shift(fox_cuda_gemm g)
{
    g.A = fox_member(g.A);
    g.B = fox_member(g.B);
    g.C = fox_member(g.C);
    g.bias[0] = fox_member(g.bias[0]);
    g.bias[1] = fox_member(g.bias[1]);
    g.dy = fox_member(g.dy);
    g.add = fox_member(g.add);
    g.mul[0] = fox_member(g.mul[0]);
    g.mul[1] = fox_member(g.mul[1]);
    g.mout = fox_member(g.mout);
    g.fill = fox_member(g.fill);
    g.fill_bias = fox_member(g.fill_bias);
    return g;
}

static __device__ __forceinline__ fox_cuda_loss_args
fox_member_shift(fox_cuda_loss_args a)
{
    a.z = fox_member(a.z);
    a.on_logp = fox_member(a.on_logp);
    a.on_out = fox_member(a.on_out);
    a.nx_q = fox_member(a.nx_q);
    a.tg_logp = fox_member(a.tg_logp);
    a.iq_q = fox_member(a.iq_q);
    a.bq_on = fox_member(a.bq_on);
    a.bq_tg = fox_member(a.bq_tg);
    a.b2_on = fox_member(a.b2_on);
    a.tau = fox_member(a.tau);
    a.a = fox_member(a.a);
    a.regime = fox_member(a.regime);
    a.r = fox_member(a.r);
    a.done = fox_member(a.done);
    a.w = fox_member(a.w);
    a.aux_ret = fox_member(a.aux_ret);
    a.dout = fox_member(a.dout);
    a.d_q = fox_member(a.d_q);
    a.prio = fox_member(a.prio);
    a.parts = fox_member(a.parts);
    a.q_ref_part = fox_member(a.q_ref_part);
    a.a_star = fox_member(a.a_star);
    a.proj = fox_member(a.proj);
    a.tq = fox_member(a.tq);
    a.st = fox_member_shift(a.st);
    return a;
}

static __device__ __forceinline__ fox_cuda_per
fox_member_shift(fox_cuda_per p)
{
    p.tree = fox_member(p.tree);
    p.owner = fox_member(p.owner);
    p.w = fox_member(p.w);
    p.p = fox_member(p.p);
    p.ctl = fox_member(p.ctl);
    return p;
}

/*
 * A launch over several members (a population's) takes each member's step constants of the
 * member keys from its counters (fox_cuda_ctl.key), since the arguments are member 0's; a
 * launch for one member keeps its arguments' (the debug library's passes set their own).
 */
static __device__ __forceinline__ bool
fox_member_steps()
{
    return gridDim.z > 1;
}

/* Each of x's parameters (lvalues) shifted in place: fox_member_args(a, b, st). */
template <typename... T>
static __device__ __forceinline__ void
fox_member_args(T &...x)
{
    ((x = fox_member_shift(x)), ...);
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
    cfg.gridDim.z *= (unsigned int)fox__cuda_launch_members(); /* member z: blockIdx.z */
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
