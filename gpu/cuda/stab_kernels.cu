/*
 * stab_kernels.cu — the stability system's own kernels on the device: the
 * fused check with the halts, fault injection, the Mech 10 site on h_s2,
 * the three inline checks and the Phase C guard on d h_s2, and the step's
 * pre-forward producers (AUX_LABEL_SCALE_EMA, Mech 2's support).
 *
 * Twins: gpu/cpu/stab.c (check, inject, site_h_s2, site_d_h_s2_post_iqn,
 * aux_label, atoms, halt) over gpu/sentinel.h's table and gpu/bounds.h's
 * per-value maths, which compile into these kernels as they are. Every
 * bound and threshold is read from the device ISV at its use; no host
 * value that changes between steps is a kernel argument, so a captured
 * graph never bakes a stale bound. Flags are written only as 1, into the
 * mapped-pinned buffer the host reads.
 *
 * Reductions that must end in one ISV update (the h_s2 RMS, the halts) use
 * the last-block pattern: each block publishes its partial, the block that
 * finishes last (a counter in ctl) combines them in block order, so the
 * result is deterministic. Not here: the Adam clamps (Mech 9) and Mech 6
 * (train_kernels.cu), Mech 1 (the loss kernel, net_kernels.cu).
 */
#include <math.h>
#include <stdint.h>

#include "../bounds.h"
#include "../engine.h"
#include "../isv.h"
#include "../sentinel.h"
#include "cuda_impl.h"

#define WARP 32
#define FULL_MASK 0xffffffffu
#define THREADS 256

static unsigned int
grid_for(size_t n, int threads)
{
    size_t g = (n + (size_t)threads - 1) / (size_t)threads;
    if (g > 1024)
        g = 1024;
    return (unsigned int)(g > 0 ? g : 1);
}

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

/* ------------------------------------------------------------------------------------------ */
/* The fused check and the halts                                                              */

/*
 * Last block, all its threads: the halts of fox_cpu_stab_halt, into
 * ctl->halt (the first reason sticks). The halt slots' flags live in mapped
 * host memory, where every read is a trip over the bus: the block reads
 * them all at once (a thread per slot) rather than one after another.
 */
static __device__ void
halts(const fox_cuda_stab &st, int trained)
{
    fox_cuda_ctl *c = st.ctl;
    int nan = 0;
    for (int i = threadIdx.x; i < FOX_SENT_HALT_END; i += blockDim.x)
        nan |= st.rules[i].halt && ((volatile const int *)st.flags)[i] != 0;
    nan = __syncthreads_or(nan);
    if (threadIdx.x != 0 || c->halt != FOX_HALT_NONE)
        return;
    if (nan) {
        c->halt = FOX_HALT_NAN;
        return;
    }
    if (!trained)
        return;
    if (!isfinite(c->loss)) {
        c->halt = FOX_HALT_GRAD_COLLAPSE;
        return;
    }
    c->collapse_run = (double)c->grad_norm <= FOX_HALT_COLLAPSE_NORM ? c->collapse_run + 1 : 0;
    if (c->collapse_run >= FOX_HALT_COLLAPSE_STEPS)
        c->halt = FOX_HALT_GRAD_COLLAPSE;
}

/* One value against its slot's rule (fox_sentinel_check), with no branch that leaves early. */
struct check_acc {
    int kind; /* 0 non-finite, 1 threshold on |x|, 2 span */
    float t, lo, hi;
    int fired;
    __device__ __forceinline__ void
    add(float x)
    {
        if (kind == 1) {
            fired |= !(fabsf(x) < t); /* NaN fires too */
        } else {
            fired |= !isfinite(x);
            if (kind == 2) {
                lo = fminf(lo, x);
                hi = fmaxf(hi, x);
            }
        }
    }
};

#define CHECK_UNROLL 4

/*
 * One block per chunk of a table entry (fox_cuda_chunk, at most
 * FOX_CUDA_CHUNK = 4096 floats; a span entry is one chunk), so that the
 * 541k-float buffers (params, grads, Adam m and v) are split over ~130
 * blocks each and the whole check runs as one wave of the machine. A
 * contiguous chunk is read as 16-byte float4 loads (a scalar head and tail
 * up to the alignment), CHECK_UNROLL of them in flight per thread before
 * the first is used: one pass of a 256-thread block covers 4096 floats.
 * Strided entries (ld > cols) take the scalar path with index arithmetic.
 * The block ORs its threads' verdicts and writes its slot's sticky flag
 * once; the done counter is the one atomic per block, and the last block
 * decides the halts.
 */
__global__ void __launch_bounds__(THREADS)
check_kernel(fox_cuda_stab st, const fox_cuda_check *table, const fox_cuda_chunk *chunks, int n,
             int trained)
{
    if (st.sentinel && (int)blockIdx.x < n) {
        const fox_cuda_chunk ch = chunks[blockIdx.x];
        const fox_cuda_check e = table[ch.entry];
        const fox_cuda_rule r = st.rules[e.slot];
        check_acc a;
        a.kind = r.kind == FOX_SENT_KIND_NONFINITE     ? 0
                 : r.measure == FOX_SENT_MEASURE_SPAN ? 2
                                                      : 1;
        a.t = r.kind == FOX_SENT_KIND_THRESHOLD ? threshold_of(st, e.slot) : 0.0f;
        a.lo = INFINITY;
        a.hi = -INFINITY;
        a.fired = 0;
        if (e.ld == e.cols) {
            const float *p = e.ptr + ch.start;
            int head = (int)((16 - ((uintptr_t)p & 15)) & 15) / 4;
            if (((uintptr_t)p & 3) != 0 || head > ch.len)
                head = ch.len; /* not even float-aligned, or too short: all scalar */
            int n4 = (ch.len - head) / 4;
            const float4 *p4 = (const float4 *)(p + head);
            for (int k0 = 0; k0 < n4; k0 += CHECK_UNROLL * THREADS) {
                float4 v[CHECK_UNROLL];
#pragma unroll
                for (int u = 0; u < CHECK_UNROLL; u++) {
                    int k = k0 + u * THREADS + (int)threadIdx.x;
                    if (k < n4)
                        v[u] = __ldg(p4 + k);
                }
#pragma unroll
                for (int u = 0; u < CHECK_UNROLL; u++) {
                    if (k0 + u * THREADS + (int)threadIdx.x < n4) {
                        a.add(v[u].x);
                        a.add(v[u].y);
                        a.add(v[u].z);
                        a.add(v[u].w);
                    }
                }
            }
            /* The scalar head [0, head) and tail [head + 4·n4, len). */
            int tail0 = head + 4 * n4, rest = head + (ch.len - tail0);
            for (int k = threadIdx.x; k < rest; k += THREADS)
                a.add(p[k < head ? k : tail0 + (k - head)]);
        } else {
            for (int k = ch.start + threadIdx.x; k < ch.start + ch.len; k += THREADS)
                a.add(e.ptr[(size_t)(k / e.cols) * e.ld + k % e.cols]);
        }
        if (a.kind == 2) {
            for (int o = WARP / 2; o > 0; o >>= 1) {
                a.lo = fminf(a.lo, __shfl_xor_sync(FULL_MASK, a.lo, o));
                a.hi = fmaxf(a.hi, __shfl_xor_sync(FULL_MASK, a.hi, o));
            }
            __shared__ float s_lo[THREADS / WARP], s_hi[THREADS / WARP];
            if (threadIdx.x % WARP == 0) {
                s_lo[threadIdx.x / WARP] = a.lo;
                s_hi[threadIdx.x / WARP] = a.hi;
            }
            __syncthreads();
            if (threadIdx.x == 0 && ch.len > 0) {
                for (int w = 0; w < THREADS / WARP; w++) {
                    a.lo = fminf(a.lo, s_lo[w]);
                    a.hi = fmaxf(a.hi, s_hi[w]);
                }
                a.fired |= !(a.hi - a.lo < a.t);
            }
        }
        if (block_any(a.fired) && threadIdx.x == 0) {
            st.flags[e.slot] = 1;
            __threadfence_system();
        }
    }
    /* The last block to finish sees every flag this step wrote (the fences order them). */
    __shared__ int last;
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned int done = atomicAdd(&st.ctl->done_blocks[FOX_CUDA_DONE_CHECK], 1u);
        last = done == gridDim.x - 1;
    }
    __syncthreads();
    if (last) {
        __threadfence();
        if (threadIdx.x == 0)
            st.ctl->done_blocks[FOX_CUDA_DONE_CHECK] = 0;
        halts(st, trained);
    }
}

int
fox__cuda_check(cudaStream_t s, const fox_cuda_stab *st, const fox_cuda_check *table,
                const fox_cuda_chunk *chunks, int n_chunks, int trained)
{
    int blocks = st->sentinel && n_chunks > 0 ? n_chunks : 1;
    check_kernel<<<blocks, THREADS, 0, s>>>(*st, table, chunks, n_chunks, trained);
    FOX_CUDA_TRY(cudaGetLastError());
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Fault injection (the CPU's inject at a stability point)                                    */

__global__ void
inject_kernel(fox_cuda_ctl *c, float *p, float *p2, int after_count)
{
    if (!fault_now(c, c->fault_slot, after_count))
        return;
    p[0] = c->fault_value;
    if (p2)
        p2[0] = c->fault_value;
    c->fault_done = 1;
}

int
fox__cuda_inject(cudaStream_t s, const fox_cuda_stab *st, float *p, float *p2, int after_count)
{
    inject_kernel<<<1, 1, 0, s>>>(st->ctl, p, p2, after_count);
    FOX_CUDA_TRY(cudaGetLastError());
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Mech 10 on h_s2 (site_h_s2, fixed mode)                                                    */

__global__ void
h_s2_site_kernel(fox_cuda_stab st, float *h, size_t n, double *partial)
{
    /* Every block reads the old RMS EMA: only the last block, after all others, updates it. */
    float bound = fox_bound_h_s2_fixed(st.isv[FOX_ISV_H_S2_RMS_EMA]);
    float t49 = threshold_of(st, FOX_SENT_H_S2_MAX_ABS);
    int bad12 = 0, bad49 = 0;
    double ss = 0.0;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        float x = h[k];
        bad12 |= !isfinite(x);
        bad49 |= !(fabsf(x) < t49);
        x = fox_clamp_finite(x, bound);
        h[k] = x;
        ss += (double)x * x;
    }
    if (st.sentinel) {
        if (block_any(bad12) && threadIdx.x == 0)
            st.flags[FOX_SENT_H_S2] = 1;
        if (block_any(bad49) && threadIdx.x == 0)
            st.flags[FOX_SENT_H_S2_MAX_ABS] = 1;
    }
    for (int o = WARP / 2; o > 0; o >>= 1)
        ss += __shfl_xor_sync(FULL_MASK, ss, o);
    __shared__ double s_ss[THREADS / WARP];
    __shared__ int last;
    if (threadIdx.x % WARP == 0)
        s_ss[threadIdx.x / WARP] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double b = 0.0;
        for (int w = 0; w < THREADS / WARP; w++)
            b += s_ss[w];
        partial[blockIdx.x] = b;
        __threadfence();
        unsigned int done = atomicAdd(&st.ctl->done_blocks[FOX_CUDA_DONE_H_S2], 1u);
        last = done == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        __threadfence();
        st.ctl->done_blocks[FOX_CUDA_DONE_H_S2] = 0;
        double tot = 0.0;
        for (unsigned int b = 0; b < gridDim.x; b++)
            tot += ((volatile double *)partial)[b];
        if (n)
            st.isv[FOX_ISV_H_S2_RMS_EMA] = fox_ema_first(st.isv[FOX_ISV_H_S2_RMS_EMA],
                                                         (float)sqrt(tot / (double)n),
                                                         FOX_SIGNAL_EMA_ALPHA);
    }
}

int
fox__cuda_h_s2_site(cudaStream_t s, const fox_cuda_stab *st, float *h, size_t n)
{
    unsigned int g = grid_for(n, THREADS);
    if (g > FOX_CUDA_SITE_BLOCKS)
        g = FOX_CUDA_SITE_BLOCKS;
    h_s2_site_kernel<<<g, THREADS, 0, s>>>(*st, h, n, st->site_part);
    FOX_CUDA_TRY(cudaGetLastError());
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* d h_s2: inline checks 33/34/35 and the Phase C guard (twin of loss_grad's tail + iqn_bwd)  */

/*
 * Thread per (b, k): v = dh (the C51 part) → slot 33; + dh_aux → 34; the
 * IQN part Σ_i d_x·φ (in i order, as the CPU) → dh_iqn (27, read by the
 * fused check), + it → 35 and the guard clamp_finite at 1e6 × max(H_S2_RMS_EMA,
 * 1). dφ = d_x·h·[φ > 0] goes to d_phi, leaving d_x (slot 26) as it was.
 * A fault armed for 34, 27 or 35 lands on element 0 at its point.
 */
__global__ void
dh_s2_join_kernel(fox_cuda_stab st, int B, int NT, int H2, float *dh, const float *dh_aux,
                  float *dh_iqn, const float *d_x, const float *phi, const float *h, float *d_phi)
{
    const fox_cuda_ctl *c = st.ctl;
    float guard = fox_bound_backward_guard(st.isv[FOX_ISV_H_S2_RMS_EMA]);
    size_t n = (size_t)B * H2;
    int b33 = 0, b34 = 0, b35 = 0;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t b = k / H2;
        int col = (int)(k % H2);
        float v = dh[k];
        b33 |= !isfinite(v);
        v += dh_aux[k];
        if (k == 0 && fault_now(c, FOX_SENT_D_H_S2_POST_AUX, 0))
            v = c->fault_value;
        b34 |= !isfinite(v);
        float hv = h[k], iq = 0.0f;
        for (int i = 0; i < NT; i++) {
            size_t at = (b * NT + i) * H2 + col;
            float dx = d_x[at], ph = phi[at];
            iq += dx * ph;
            d_phi[at] = ph <= 0.0f ? 0.0f : dx * hv;
        }
        if (k == 0 && fault_now(c, FOX_SENT_IQN_D_H_S2, 0))
            iq = c->fault_value;
        dh_iqn[k] = iq;
        v += iq;
        if (k == 0 && fault_now(c, FOX_SENT_D_H_S2_POST_IQN, 0))
            v = c->fault_value;
        b35 |= !isfinite(v);
        dh[k] = st.sites ? fox_clamp_finite(v, guard) : v;
    }
    if (st.sentinel && st.sites) {
        if (block_any(b33) && threadIdx.x == 0)
            st.flags[FOX_SENT_D_H_S2_POST_MAIN] = 1;
        if (block_any(b34) && threadIdx.x == 0)
            st.flags[FOX_SENT_D_H_S2_POST_AUX] = 1;
        if (block_any(b35) && threadIdx.x == 0)
            st.flags[FOX_SENT_D_H_S2_POST_IQN] = 1;
    }
}

/* A fault armed at an in-kernel point is spent by the launch after it (one thread). */
__global__ void
fault_spent_kernel(fox_cuda_ctl *c)
{
    if (fault_now(c, FOX_SENT_D_H_S2_POST_AUX, 0) || fault_now(c, FOX_SENT_IQN_D_H_S2, 0) ||
        fault_now(c, FOX_SENT_D_H_S2_POST_IQN, 0))
        c->fault_done = 1;
}

int
fox__cuda_dh_s2_join(cudaStream_t s, const fox_cuda_stab *st, int B, int NT, int H2, float *dh,
                     const float *dh_aux, float *dh_iqn, const float *d_x, const float *phi,
                     const float *h, float *d_phi)
{
    dh_s2_join_kernel<<<grid_for((size_t)B * H2, THREADS), THREADS, 0, s>>>(
        *st, B, NT, H2, dh, dh_aux, dh_iqn, d_x, phi, h, d_phi);
    FOX_CUDA_TRY(cudaGetLastError());
    if (st->ctl_fault_inline) {
        fault_spent_kernel<<<1, 1, 0, s>>>(st->ctl);
        FOX_CUDA_TRY(cudaGetLastError());
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Before the forward: the aux label scale and Mech 2 (aux_label + atoms)                     */

/*
 * One block. AUX_LABEL_SCALE_EMA ← EMA(mean |label|) with the Pearl A
 * sentinel. Mech 2 (fixed mode): the bound 10 × max(Q_ABS_REF, 1); slot 47
 * on the configured support's span; the support cut to ±bound (left as
 * configured when that would empty it) and z rebuilt on it.
 */
__global__ void
pre_step_kernel(fox_cuda_stab st, int B, const float *aux, int NA, float v_min, float v_max,
                float *z)
{
    double v = 0.0;
    for (int b = threadIdx.x; b < B; b += blockDim.x)
        v += fabsf(aux[b]);
    for (int o = WARP / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    __shared__ double part[THREADS / WARP];
    __shared__ float s_lo, s_hi;
    if (threadIdx.x % WARP == 0)
        part[threadIdx.x / WARP] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double tot = 0.0;
        for (int w = 0; w < THREADS / WARP; w++)
            tot += part[w];
        float *isv = st.isv;
        isv[FOX_ISV_AUX_LABEL_SCALE_EMA] = fox_ema_first(
            isv[FOX_ISV_AUX_LABEL_SCALE_EMA], (float)(tot / B), FOX_SIGNAL_EMA_ALPHA);
        float bound = fox_bound_atom_fixed(isv[FOX_ISV_Q_ABS_REF]);
        /* Slot 47 on the pre-clamp positions: their span is v_max − v_min. */
        if (st.sentinel && (!isfinite(v_max - v_min) ||
                            !(v_max - v_min < threshold_of(st, FOX_SENT_ATOM_SPAN_MAX))))
            st.flags[FOX_SENT_ATOM_SPAN_MAX] = 1;
        float lo = v_min > -bound ? v_min : -bound;
        float hi = v_max < bound ? v_max : bound;
        if (!(lo < hi)) {
            lo = v_min;
            hi = v_max;
        }
        st.ctl->support[0] = lo;
        st.ctl->support[1] = hi;
        s_lo = lo;
        s_hi = hi;
    }
    __syncthreads();
    float dz = (s_hi - s_lo) / (float)(NA - 1);
    for (int j = threadIdx.x; j < NA; j += blockDim.x)
        z[j] = s_lo + (float)j * dz;
}

int
fox__cuda_pre_step(cudaStream_t s, const fox_cuda_stab *st, int B, const float *aux, int NA,
                   float v_min, float v_max, float *z)
{
    pre_step_kernel<<<1, THREADS, 0, s>>>(*st, B, aux, NA, v_min, v_max, z);
    FOX_CUDA_TRY(cudaGetLastError());
    return 0;
}
