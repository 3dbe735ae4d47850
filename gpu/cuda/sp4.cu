/*
 * sp4.cu — the stability system's bound producers on the device: Mech 10's
 * site on h_s2, and SP4 adaptive mode's three-pass p99 (max, shared-memory
 * histogram, percentile locate) into a bound slot through Pearls A+D with
 * the Wiener state in device memory, and after Adam Pearl B per group,
 * Pearl C on the Adam kernel's engagement counts and the trunk L1 rate
 * (fox_cpu_stab_post_adam). No host sync: everything reads and writes the
 * device ISV and fox_cuda_sp4.
 *
 * Twins: gpu/cpu/stab.c over gpu/sentinel.h's table and gpu/bounds.h's
 * per-value maths, which compile into these kernels as they are. Every
 * bound and threshold is read from the device ISV at its use; no host
 * value that changes between steps is a kernel argument, so a captured
 * graph never bakes a stale bound. Flags are written only as 1, into the
 * mapped-pinned buffer the host reads.
 *
 * Reductions that must end in one ISV update (the h_s2 RMS, the p99) use
 * the last-block pattern: each block publishes its partial, the block that
 * finishes last (a counter) combines them in block order, so the result is
 * deterministic.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/device.cuh"
#include "gpu/cuda/sp4.h"

#define THREADS 256

/* ------------------------------------------------------------------------------------------ */
/* SP4 adaptive bounds: the three-pass p99 producer, Pearl B / C, the L1 rate                 */

static_assert(FOX_P99_BINS == 256, "fox_cuda_p99_scratch holds 256 bins per target");

/*
 * Pass 1 over NB buffers (b0, b1, b2), each element classified by cls into
 * one of NC classes (NULL: class 0; ≥ NC, the padding: skipped); target =
 * buffer · NC + class. A warp takes 32 consecutive elements at a time, which
 * share a class but where a run of the parameter layout ends: for each class
 * present, one reduction instruction each gives the min / max (bits of |x|,
 * finite and ≥ 0, so unsigned order is float order) and count of its lanes'
 * finite values, which lane 0 folds into the warp's row in shared memory;
 * then the block's warps, and one global atomic per target used: min, max and
 * integer counts are order-free, so the result is deterministic. Holding
 * every target in each thread's registers instead (the class loop unrolled)
 * took 128 registers for Pearl B's 24 targets: its two blocks an SM filled
 * the register file, and the fused check beside it waited for them, taking
 * about twice as long as in fixed mode. With G (Pearl B), the per-class w·g and ‖w‖² of the finite
 * pairs go the same way (an xor tree over the lanes, then the warp's row in
 * order), into the block's partial row (reduced by a fixed tree in the
 * tail); the L1 rate's Σ|w|, Σ|g| and count of finite pairs over
 * [l1_lo, l1_hi) are summed per thread, then over the warp and the block's
 * warps in order. Each thread loads P1_UNROLL elements before using the
 * first.
 */
#define P1_UNROLL 4

template <int NB, int NC, bool G>
__global__ void __launch_bounds__(THREADS)
p99_pass1_kernel(fox_cuda_p99_scratch *sc, size_t n, const float *b0, const float *b1,
                 const float *b2, const uint8_t *cls, const float *g, size_t l1_lo, size_t l1_hi,
                 const unsigned int *due)
{
    pdl_enter();
    fox_member_args(sc, b0, b1, b2, cls, g, due);
    if (due && *due == 0u)
        return;
    constexpr int NT = NB * NC, NW = THREADS / WARP, NG = G ? NC : 1;
    __shared__ unsigned int s_lo[NW][NT], s_hi[NW][NT], s_n[NW][NT];
    __shared__ double s_dot[NW][NG], s_sq[NW][NG], s_l1[NW][3];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    for (int t = lane; t < NT; t += WARP) {
        s_lo[warp][t] = P99_FLT_MAX_BITS;
        s_hi[warp][t] = 0u;
        s_n[warp][t] = 0u;
    }
    for (int c = lane; c < NG; c += WARP) {
        s_dot[warp][c] = 0.0;
        s_sq[warp][c] = 0.0;
    }
    __syncwarp();
    double l1[3] = {0.0, 0.0, 0.0};
    const float *bufs[3] = {b0, b1, b2};
    const size_t T = (size_t)gridDim.x * blockDim.x;
    for (size_t k0 = blockIdx.x * (size_t)blockDim.x + warp * WARP; k0 < n; k0 += P1_UNROLL * T) {
        int c[P1_UNROLL];
        float x[P1_UNROLL][NB], gk[P1_UNROLL];
#pragma unroll
        for (int u = 0; u < P1_UNROLL; u++) {
            const size_t k = k0 + u * T + lane;
            c[u] = NC;
            gk[u] = 0.0f;
            if (k < n) {
                c[u] = cls ? cls[k] : 0;
#pragma unroll
                for (int b = 0; b < NB; b++)
                    x[u][b] = __ldg(bufs[b] + k);
                if (G)
                    gk[u] = __ldg(g + k);
            }
        }
#pragma unroll
        for (int u = 0; u < P1_UNROLL; u++) {
            const size_t k = k0 + u * T + lane;
            const bool pair = G && c[u] < NC && isfinite(x[u][0]) && isfinite(gk[u]);
            if (pair && k >= l1_lo && k < l1_hi) {
                l1[0] += fabs((double)x[u][0]);
                l1[1] += fabs((double)gk[u]);
                l1[2] += 1.0;
            }
            /* Each class present in the warp's 32 elements: one round (one, within a run). */
            unsigned int todo = __ballot_sync(FULL_MASK, c[u] < NC);
            while (todo) {
                const int cc = __shfl_sync(FULL_MASK, c[u], __ffs(todo) - 1);
                const bool mine = c[u] == cc;
                todo &= ~__ballot_sync(FULL_MASK, mine);
#pragma unroll
                for (int b = 0; b < NB; b++) {
                    const float a = fabsf(x[u][b]);
                    const bool ok = mine && isfinite(a);
                    const unsigned int bits = __float_as_uint(a);
                    unsigned int l = __reduce_min_sync(FULL_MASK, ok ? bits : P99_FLT_MAX_BITS);
                    unsigned int h = __reduce_max_sync(FULL_MASK, ok ? bits : 0u);
                    unsigned int m = __reduce_add_sync(FULL_MASK, ok ? 1u : 0u);
                    if (lane == 0) {
                        const int t = b * NC + cc;
                        s_lo[warp][t] = l < s_lo[warp][t] ? l : s_lo[warp][t];
                        s_hi[warp][t] = h > s_hi[warp][t] ? h : s_hi[warp][t];
                        s_n[warp][t] += m;
                    }
                }
                if (G) {
                    double d = warp_sum(mine && pair ? (double)x[u][0] * gk[u] : 0.0);
                    double q = warp_sum(mine && pair ? (double)x[u][0] * x[u][0] : 0.0);
                    if (lane == 0) {
                        s_dot[warp][cc] += d;
                        s_sq[warp][cc] += q;
                    }
                }
            }
        }
    }
    if (G) {
#pragma unroll
        for (int q = 0; q < 3; q++) {
            double v = warp_sum(l1[q]);
            if (lane == 0)
                s_l1[warp][q] = v;
        }
    }
    __syncthreads();
    if (threadIdx.x < NT) {
        int t = threadIdx.x;
        unsigned int l = P99_FLT_MAX_BITS, h = 0u;
        unsigned long long m = 0ull;
        for (int w = 0; w < NW; w++) {
            l = s_lo[w][t] < l ? s_lo[w][t] : l;
            h = s_hi[w][t] > h ? s_hi[w][t] : h;
            m += s_n[w][t];
        }
        p99_publish(sc, t, l, h, m);
    }
    if (G && threadIdx.x < NG) {
        int c = threadIdx.x;
        double d = 0.0, s = 0.0;
        for (int w = 0; w < NW; w++) {
            d += s_dot[w][c];
            s += s_sq[w][c];
        }
        sc->dot[blockIdx.x][c] = d;
        sc->sq[blockIdx.x][c] = s;
    }
    if (G && threadIdx.x < 3) {
        double v = 0.0;
        for (int w = 0; w < NW; w++)
            v += s_l1[w][threadIdx.x];
        sc->l1[blockIdx.x][threadIdx.x] = v;
    }
}

/* The range of target t after pass 1: 0 when degenerate (pass 2 skips it), else its bin scale. */
static __device__ __forceinline__ float
p99_scale(const fox_cuda_p99_scratch *sc, int t, float *lo)
{
    float p99, scale;
    *lo = __uint_as_float(sc->lo[t]);
    fox_p99_degenerate(sc->count[t], *lo, __uint_as_float(sc->hi[t]), &p99, &scale);
    return scale;
}

/*
 * Pass 3 of target t on its histogram h, by a whole warp (every lane gets
 * the result): fox_p99_abs_spans' degenerate rules, then fox_p99_from_hist's
 * walk from the top bin, its 256 dependent steps cut to a scan of the lanes'
 * eight-bin sums and one lane's eight steps. The counts are integers and
 * their total is below 2^24, so every partial sum is exact in float and the
 * order of the additions changes no bit; the lane whose bins hold the
 * crossing walks them as the serial loop would (larger totals take it).
 */
static __device__ float
p99_result_warp(const fox_cuda_p99_scratch *sc, int t, const unsigned int *h)
{
    float lo = __uint_as_float(sc->lo[t]), hi = __uint_as_float(sc->hi[t]), p99, scale;
    unsigned long long cnt = sc->count[t];
    if (fox_p99_degenerate(cnt, lo, hi, &p99, &scale))
        return p99;
    if (cnt >= (1ull << 24))
        return fox_p99_from_hist(h, (uint32_t)cnt, lo, hi);
    constexpr int PER = FOX_P99_BINS / WARP;
    const int lane = threadIdx.x % WARP, top = FOX_P99_BINS - 1 - lane * PER;
    float mine = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; j++)
        mine += (float)h[top - j];
    float incl = mine; /* the counts of every bin from the top down to this lane's last */
    for (int o = 1; o < WARP; o <<= 1) {
        float y = __shfl_up_sync(FULL_MASK, incl, o);
        if (lane >= o)
            incl += y;
    }
    const float tail = (1.0f - FOX_P99_PERCENTILE) * (float)(uint32_t)cnt;
    unsigned int crossed = __ballot_sync(FULL_MASK, tail < incl);
    if (!crossed)
        return lo;
    int src = __ffs(crossed) - 1;
    float r = 0.0f;
    if (lane == src) {
        float w = (hi - lo) / (float)FOX_P99_BINS, above = incl - mine;
        for (int j = 0; j < PER; j++) {
            int b = top - j;
            float c = (float)h[b];
            if (c > 0.0f && tail < above + c) {
                r = lo + ((float)(b + 1) - (tail - above) / c) * w;
                break;
            }
            above += c;
        }
    }
    return __shfl_sync(FULL_MASK, r, src);
}

/* Leave the scratch's first nt targets fresh (all threads of the block, after the reads). */
static __device__ void
p99_clean(fox_cuda_p99_scratch *sc, int nt)
{
    for (int k = threadIdx.x; k < nt * FOX_P99_BINS; k += blockDim.x)
        sc->hist[k] = 0u;
    for (int t = threadIdx.x; t < nt; t += blockDim.x) {
        sc->lo[t] = P99_FLT_MAX_BITS;
        sc->hi[t] = 0u;
        sc->count[t] = 0ull;
    }
    if (threadIdx.x == 0)
        sc->done = 0u;
}

/*
 * The tail of Pearl B (the last block of pass 2): per group, in parallel (a
 * thread each: every group has its own slots and states), its four
 * statistics into slots 136–167 through Pearls A+D (NaN skipped, 0 fed),
 * then Pearl C on the step's Adam engagements of its w, m and v clamps; then
 * the trunk L1 rate (fox_pearl_b_l1_rate: pass 1's sums, l1_deficit_kernel's
 * entropy deficit) into slot 168. hist: the block's shared copy of the 24
 * global histograms. Leaves the scratch and the engagement counters clean.
 */
static __device__ void
post_adam_tail(const fox_cuda_stab &st, fox_cuda_p99_scratch *sc, const unsigned int *hist)
{
    constexpr int NG = FOX_GROUP_COUNT, NW = THREADS / WARP, NP = 2 * NG + 3;
    fox_cuda_sp4 *sp = st.sp4;
    float *isv = st.isv;
    __shared__ float s_p99[3 * NG];
    __shared__ double s_part[NW][NP];
    /*
     * The blocks' partials (w·g, ‖w‖² per group; Σ|w|, Σ|g|, pairs): thread b
     * holds block b's row; a fixed xor tree, then the warps in order.
     */
    {
        int b = threadIdx.x;
        const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
#pragma unroll
        for (int k = 0; k < NP; k++) {
            double v = 0.0;
            if (b < (int)gridDim.x)
                v = __ldcg(k < NG       ? &sc->dot[b][k]
                           : k < 2 * NG ? &sc->sq[b][k - NG]
                                        : &sc->l1[b][k - 2 * NG]);
            v = warp_sum(v);
            if (lane == 0)
                s_part[warp][k] = v;
        }
    }
    for (int t = threadIdx.x / WARP; t < 3 * NG; t += NW) {
        float r = p99_result_warp(sc, t, hist + t * FOX_P99_BINS);
        if (threadIdx.x % WARP == 0)
            s_p99[t] = r;
    }
    __syncthreads();
    /*
     * A thread per (group, statistic), each owning its ISV slot, Wiener state
     * and Pearl C state: family f < 3 (w, m, v) observes its p99, then Pearl C
     * on its clamp's engagements; f = 3 the weight-decay rate.
     */
    const int grp = threadIdx.x % NG, f = threadIdx.x / NG;
    if (f < 4 && st.gsize[grp]) {
        if (f == 3) {
            double dot = 0.0, sq = 0.0;
            for (int k = 0; k < NW; k++) {
                dot += s_part[k][grp];
                sq += s_part[k][NG + grp];
            }
            fox_bounds_observe(isv, sp->ws, fox_isv_wd_rate_slot(grp),
                               fox_wd_rate((float)dot, (float)sq));
        } else {
            const int slot = f == 0   ? fox_isv_weight_bound_slot(grp)
                             : f == 1 ? fox_isv_adam_m_bound_slot(grp)
                                      : fox_isv_adam_v_bound_slot(grp);
            fox_bounds_observe(isv, sp->ws, slot, s_p99[f * NG + grp]);
            float bound = isv[slot];
            if (fox_pearl_c_update(&sp->pc[f][grp], (float)sp->eng[f][grp], (float)st.gsize[grp],
                                   __uint_as_float(sp->emax[f][grp]), &bound))
                isv[slot] = bound;
            sp->eng[f][grp] = 0ull;
            sp->emax[f][grp] = 0u;
        }
    }
    if (threadIdx.x == THREADS - 1) {
        double sw = 0.0, sg = 0.0, kk = 0.0;
        for (int k = 0; k < NW; k++) {
            sw += s_part[k][2 * NG];
            sg += s_part[k][2 * NG + 1];
            kk += s_part[k][2 * NG + 2];
        }
        fox_bounds_observe(isv, sp->ws, FOX_ISV_L1_LAMBDA,
                           fox_l1_rate_of(sw, sg, kk, sp->l1_deficit));
        sp->pending = 0u;
    }
    __syncthreads();
    p99_clean(sc, 3 * NG);
}

/*
 * The entropy deficit of the trunk input layer's gradient g [rows × cols]
 * (fox_entropy_deficit): the column norms (fox_column_sq's finite Σ g²),
 * their total, Σ p log p, then D = (log K + Σ p log p) / log K clamped to
 * [0, 1] over the K live columns; 0 with fewer than two. A pass takes w =
 * min(cols, L1_THREADS) columns, thread t column t mod w over the rows
 * ≡ t / w (mod L1_THREADS / w), so that a warp reads a row's consecutive
 * columns; each column's partials are then added in row-class order. (A
 * warp per column, its lanes over the rows, reads 32 cache lines a load,
 * which made the launch many times longer.)
 */
#define L1_THREADS 1024

__global__ void __launch_bounds__(L1_THREADS)
l1_deficit_kernel(const __grid_constant__ fox_cuda_stab st, const float *g)
{
    pdl_enter();
    fox_cuda_sp4 *sp4 = fox_member(st.sp4); /* the one pointer of st used here */
    fox_member_args(g);
    const float *gl = g + st.l1_off;
    const int rows = st.l1_rows, cols = st.l1_cols;
    __shared__ double s_col[FOX_CUDA_L1_COLS], s_part[L1_THREADS];
    const int w = cols < L1_THREADS ? cols : L1_THREADS, classes = L1_THREADS / w;
    const int q = threadIdx.x / w, ci = threadIdx.x % w;
    for (int c0 = 0; c0 < cols; c0 += w) {
        double s2 = 0.0;
        if (q < classes && c0 + ci < cols)
#pragma unroll 8
            for (int r = q; r < rows; r += classes) {
                double x = gl[(size_t)r * cols + c0 + ci];
                if (isfinite(x))
                    s2 += x * x;
            }
        s_part[threadIdx.x] = s2;
        __syncthreads();
        if ((int)threadIdx.x < w && c0 + (int)threadIdx.x < cols) {
            double t = 0.0;
            for (int k = 0; k < classes; k++)
                t += s_part[k * w + threadIdx.x];
            s_col[c0 + threadIdx.x] = t;
        }
        __syncthreads();
    }
    double tot = 0.0, live = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        double s2 = s_col[i];
        if (s2 > 0.0) {
            tot += sqrt(s2);
            live += 1.0;
        }
    }
    tot = block_sum(tot);
    live = block_sum(live);
    double plogp = 0.0;
    if (live >= 2.0 && tot > 0.0)
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            double s2 = s_col[i];
            if (s2 > 0.0) {
                double p = sqrt(s2) / tot;
                plogp += p * log(p);
            }
        }
    plogp = block_sum(plogp);
    if (threadIdx.x == 0)
        sp4->l1_deficit = fox_entropy_deficit_of(live, tot, plogp);
}

int
fox__cuda_l1_deficit(cudaStream_t s, const fox_cuda_stab *st, const float *g)
{
    FOX_CUDA_TRY(launch(l1_deficit_kernel, 1, L1_THREADS, 0, s, *st, g));
    return 0;
}

/*
 * Pass 2: the histograms of the NB·NC targets in shared memory, a shared
 * atomic per element, then one global add per bin used. (Merging a warp's
 * equal bins first with __match_any_sync cost more than the atomics it
 * saved: it made the adaptive step longer.)
 * The block that finishes last (sc->done) does pass 3 on a shared copy of the
 * histograms: NC = 1, the p99 into slot through Pearls A+D when positive;
 * NC = FOX_GROUP_COUNT, Pearl B / C and the L1 rate (post_adam_tail).
 */
template <int NB, int NC>
__global__ void __launch_bounds__(THREADS)
p99_pass2_kernel(const __grid_constant__ fox_cuda_stab st0, fox_cuda_p99_scratch *sc, size_t n,
                 const float *b0, const float *b1, const float *b2, const uint8_t *cls, int slot,
                 const unsigned int *due)
{
    pdl_enter();
    fox_member_args(sc, b0, b1, b2, cls, due);
    if (due && *due == 0u)
        return;
    constexpr int NT = NB * NC;
    __shared__ unsigned int s_h[NT * FOX_P99_BINS];
    __shared__ float s_lo[NT], s_scale[NT];
    __shared__ int last;
    /*
     * The member's stab, for the last block, in shared memory: post_adam_tail indexes its
     * gsize by group, which in a copy of the thread's own would put the copy on its stack.
     */
    __shared__ fox_cuda_stab st;
    if (threadIdx.x == 0)
        st = fox_member_shift(st0);
    for (int k = threadIdx.x; k < NT * FOX_P99_BINS; k += blockDim.x)
        s_h[k] = 0u;
    for (int t = threadIdx.x; t < NT; t += blockDim.x)
        s_scale[t] = p99_scale(sc, t, &s_lo[t]);
    __syncthreads();
    const float *bufs[3] = {b0, b1, b2};
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const int c = cls ? cls[k] : 0;
        if (c >= NC)
            continue;
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const int t = b * NC + c;
            const float a = fabsf(__ldg(bufs[b] + k));
            if (s_scale[t] > 0.0f && isfinite(a))
                atomicAdd(&s_h[t * FOX_P99_BINS + fox_p99_bin(a, s_lo[t], s_scale[t])], 1u);
        }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < NT * FOX_P99_BINS; k += blockDim.x)
        if (s_h[k])
            atomicAdd(&sc->hist[k], s_h[k]);
    /* The last block sees every block's adds (each fences before its count). */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(&sc->done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    for (int k = threadIdx.x; k < NT * FOX_P99_BINS; k += blockDim.x)
        s_h[k] = __ldcg(&sc->hist[k]);
    __syncthreads();
    if constexpr (NC == 1) {
        if (threadIdx.x < WARP) {
            float obs = p99_result_warp(sc, 0, s_h);
            if (threadIdx.x == 0 && obs > 0.0f)
                fox_bounds_observe(st.isv, st.sp4->ws, slot, obs);
        }
        __syncthreads();
        p99_clean(sc, NT);
    } else {
        post_adam_tail(st, sc, s_h);
    }
}

static unsigned int
p99_grid(size_t n)
{
    unsigned int g = grid_for(n, THREADS, 1024);
    return g < FOX_CUDA_P99_BLOCKS ? g : FOX_CUDA_P99_BLOCKS;
}

/* Passes 2 and 3 of x [n] after its pass 1 into the scratch of `use`: the p99 into slot. */
static int
p99_observe_ranged(cudaStream_t s, const fox_cuda_stab *st, const float *x, size_t n, int slot,
                   int use)
{
    FOX_CUDA_TRY(launch(p99_pass2_kernel<1, 1>, p99_grid(n), THREADS, 0, s, *st, &st->sp4->p99[use],
                        n, x, nullptr, nullptr, nullptr, slot, nullptr));
    return 0;
}

int
fox__cuda_p99_observe(cudaStream_t s, const fox_cuda_stab *st, const float *x, size_t n, int slot,
                      int use)
{
    FOX_CUDA_TRY(launch(p99_pass1_kernel<1, 1, false>, p99_grid(n), THREADS, 0, s,
                        &st->sp4->p99[use], n, x, nullptr, nullptr, nullptr, nullptr, 0, 0,
                        nullptr));
    return p99_observe_ranged(s, st, x, n, slot, use);
}

/* ------------------------------------------------------------------------------------------ */
/* Mech 10 on h_s2 (site_h_s2)                                                                */

__global__ void
h_s2_site_kernel(fox_cuda_stab st, float *h, size_t n, double *partial)
{
    pdl_enter();
    fox_member_args(st, h, partial);
    h_s2_site site(st);
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x)
        h[k] = site.element(h[k]);
    site.finish(st, n, partial);
}

int
fox__cuda_h_s2_site(cudaStream_t s, const fox_cuda_stab *st, float *h, size_t n, int ranged)
{
    /*
     * SP4: H_S2_BOUND from the pre-clamp values (the site kernel checks them before it clamps);
     * their pass 1 already done where GRN2's tail wrote them (ranged).
     */
    if (st->adaptive && ranged)
        FOX_TRY(p99_observe_ranged(s, st, h, n, FOX_ISV_H_S2_BOUND, FOX_CUDA_P99_H_S2));
    else if (st->adaptive)
        FOX_TRY(fox__cuda_p99_observe(s, st, h, n, FOX_ISV_H_S2_BOUND, FOX_CUDA_P99_H_S2));
    /* Up to 1,024 blocks: an element a thread at batch 256, two at 4096 (a trip to memory each). */
    unsigned int g = grid_for(n, THREADS, FOX_CUDA_SITE_BLOCKS);
    FOX_CUDA_TRY(launch(h_s2_site_kernel, g, THREADS, 0, s, *st, h, n, st->site_part));
    return 0;
}

int
fox__cuda_post_adam_pass1(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n,
                          const float *w, const float *g, const float *m, const float *v)
{
    const unsigned int *due = gated ? &st->sp4->pending : NULL;
    fox_cuda_p99_scratch *sc = &st->sp4->p99[FOX_CUDA_P99_GROUPS];
    static_assert(FOX_CUDA_P99_BLOCKS <= THREADS, "the tail holds a block's partials per thread");
    static_assert(FOX_CUDA_P99_TARGETS == 3 * FOX_GROUP_COUNT, "w, m, v per group");
    size_t l1_lo = st->l1_off, l1_hi = l1_lo + (size_t)st->l1_rows * st->l1_cols;
    FOX_CUDA_TRY(launch(p99_pass1_kernel<3, FOX_GROUP_COUNT, true>, p99_grid(n), THREADS, 0, s, sc,
                        n, w, m, v, st->pgroup, g, l1_lo, l1_hi, due));
    return 0;
}

int
fox__cuda_post_adam_pass2(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n,
                          const float *w, const float *m, const float *v)
{
    const unsigned int *due = gated ? &st->sp4->pending : NULL;
    fox_cuda_p99_scratch *sc = &st->sp4->p99[FOX_CUDA_P99_GROUPS];
    FOX_CUDA_TRY(launch(p99_pass2_kernel<3, FOX_GROUP_COUNT>, p99_grid(n), THREADS, 0, s, *st, sc,
                        n, w, m, v, st->pgroup, 0, due));
    return 0;
}

int
fox__cuda_post_adam(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n, const float *w,
                    const float *g, const float *m, const float *v)
{
    FOX_TRY(fox__cuda_post_adam_pass1(s, st, gated, n, w, g, m, v));
    return fox__cuda_post_adam_pass2(s, st, gated, n, w, m, v);
}

/* The host image of a fresh fox_cuda_sp4, made once for every engine of the process. */
static fox_cuda_sp4 fresh_sp4;
static pthread_once_t fresh_sp4_once = PTHREAD_ONCE_INIT;

static void
make_fresh_sp4(void)
{
    memset(&fresh_sp4, 0, sizeof fresh_sp4);
    for (int u = 0; u < FOX_CUDA_P99_USES; u++)
        for (int t = 0; t < FOX_CUDA_P99_TARGETS; t++)
            fresh_sp4.p99[u].lo[t] = P99_FLT_MAX_BITS;
}

int
fox__cuda_sp4_reset(cudaStream_t s, fox_cuda_sp4 *dst)
{
    pthread_once(&fresh_sp4_once, make_fresh_sp4);
    FOX_CUDA_TRY(cudaMemcpyAsync(dst, &fresh_sp4, sizeof fresh_sp4, cudaMemcpyHostToDevice, s));
    FOX_CUDA_TRY(cudaStreamSynchronize(s));
    return 0;
}
