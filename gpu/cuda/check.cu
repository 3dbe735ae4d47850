/*
 * check.cu — the stability system's checks on the device: the fused check
 * (SP2) with the halts, fault injection at a stability point, d h_s2's
 * three inline checks with the Phase C guard, and the step's pre-forward
 * producer AUX_LABEL_SCALE_EMA (Mech 2's grid is atoms.cu's).
 *
 * Twins: gpu/cpu/stab.c over gpu/sentinel.h's table and gpu/bounds.h's
 * per-value maths, which compile into these kernels as they are. Every
 * bound and threshold is read from the device ISV at its use; no host
 * value that changes between steps is a kernel argument, so a captured
 * graph never bakes a stale bound. Flags are written only as 1, into the
 * mapped-pinned buffer the host reads.
 *
 * The halts are a last-block reduction: each block publishes its flags, the
 * block that finishes last (a counter in ctl) decides, so the result is
 * deterministic. Not here: the bound producers (sp4.cu), the Adam clamps and
 * Mech 6 (adam.cu), Mech 1 (the loss kernel, loss.cu).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/train_types.h"
#include "gpu/cuda/check.h"
#include "gpu/cuda/device.cuh"

#define THREADS 256

/* ------------------------------------------------------------------------------------------ */
/* The fused check and the halts                                                              */

/*
 * Last block, all its threads: the halts of fox_cpu_stab_halt (fox_halt_decide),
 * into ctl->halt (the first reason sticks). A slot halts only under
 * engine.halt_rule = strict (its rule's `halt`, set at construction). The
 * halt slots' flags live in mapped host memory, where every read is a trip
 * over the bus: the block reads them all at once (a thread per slot) rather
 * than one after another, and under the seeds rule reads none.
 */
static __device__ void
halts(const fox_cuda_stab &st, int trained)
{
    fox_cuda_ctl *c = st.ctl;
    int slot_halts = 0;
    for (int i = threadIdx.x; i < FOX_SENT_HALT_END; i += blockDim.x)
        slot_halts |= st.rules[i].halt && ((volatile const int *)st.flags)[i] != 0;
    slot_halts = __syncthreads_or(slot_halts);
    if (threadIdx.x != 0 || c->halt != FOX_HALT_NONE)
        return;
    int halt = fox_halt_decide(slot_halts, trained, c->loss, (double)c->grad_norm,
                               &c->collapse_run);
    if (halt) {
        /* The chunk's later steps rewrite step, loss and norm: the message needs this step's. */
        c->halt = halt;
        c->halt_step = c->step;
        c->halt_loss = trained ? c->loss : 0.0f;
        c->halt_norm = trained ? c->grad_norm : 0.0f;
    }
}

/*
 * The chunk's values against its two rules (fox_sentinel_check), with no
 * branch that leaves early: non-finite for `nonfinite`, and for `thresh`
 * |x| < t (NaN fails it) or, for a span, every value finite and the span
 * below t.
 */
struct check_acc {
    float t, lo, hi;
    int nonfinite, over, span;
    __device__ __forceinline__ void
    add(float x)
    {
        nonfinite |= !isfinite(x);
        over |= !(fabsf(x) < t);
        if (span) {
            lo = fminf(lo, x);
            hi = fmaxf(hi, x);
        }
    }
};

#define CHECK_UNROLL 4

/* a over the float4s at(0 … n4 − 1), CHECK_UNROLL loads a thread in flight before the first use. */
template <typename At>
static __device__ __forceinline__ void
add_fours(check_acc &a, int n4, At at)
{
    for (int k0 = 0; k0 < n4; k0 += CHECK_UNROLL * THREADS) {
        float4 v[CHECK_UNROLL];
#pragma unroll
        for (int u = 0; u < CHECK_UNROLL; u++) {
            int k = k0 + u * THREADS + (int)threadIdx.x;
            if (k < n4)
                v[u] = __ldg(at(k));
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
}

/*
 * One block per chunk (fox_cuda_chunk, at most FOX_CUDA_CHUNK = 4096
 * floats; a span is one chunk), so that the 541k-float buffers (params,
 * grads, Adam m and v) are split over ~130 blocks each and the whole check
 * runs as about one wave of the machine. The chunk record holds all the
 * block needs: its data loads wait for one load, not three. A contiguous
 * chunk is read as 16-byte float4 loads (a scalar head and tail up to the
 * alignment), CHECK_UNROLL of them in flight per thread before the first
 * is used: one pass of a 256-thread block covers 4096 floats. A strided
 * chunk (ld > cols: whole rows) goes the same way where its width, stride
 * and pointer are multiples of 16 bytes (the advantage logits and their
 * gradients, a quarter of the floats read at batch 4096), else by scalar
 * loads with index arithmetic. At 32
 * registers a thread eight blocks share an SM, so the ~930 chunks of the
 * default net at batch 256 run as one wave. The block ORs its threads'
 * verdicts and writes its slots' sticky flags once; the done counter is
 * the one atomic per block, and the last block decides the halts.
 */
__global__ void __launch_bounds__(THREADS, 8)
check_kernel(fox_cuda_stab st, const fox_cuda_chunk *chunks, int n, int trained)
{
    pdl_enter();
    fox_member_args(st, chunks); /* the table's own pointers are its member's already */
    if (st.sentinel && (int)blockIdx.x < n) {
        const fox_cuda_chunk ch = chunks[blockIdx.x];
        check_acc a;
        a.lo = INFINITY;
        a.hi = -INFINITY;
        a.nonfinite = 0;
        a.over = 0;
        a.span = ch.span;
        a.t = ch.thresh >= 0 ? threshold_of(st, ch.thresh) : INFINITY;
        if (ch.ld == ch.cols) {
            const float *p = ch.ptr + ch.start;
            int head = (int)((16 - ((uintptr_t)p & 15)) & 15) / 4;
            if (((uintptr_t)p & 3) != 0 || head > ch.len)
                head = ch.len; /* not even float-aligned, or too short: all scalar */
            int n4 = (ch.len - head) / 4;
            const float4 *p4 = (const float4 *)(p + head);
            add_fours(a, n4, [&](int k) { return p4 + k; });
            /* The scalar head [0, head) and tail [head + 4·n4, len). */
            int tail0 = head + 4 * n4, rest = head + (ch.len - tail0);
            for (int k = threadIdx.x; k < rest; k += THREADS)
                a.add(p[k < head ? k : tail0 + (k - head)]);
        } else if (ch.cols % 4 == 0 && ch.ld % 4 == 0 && ((uintptr_t)ch.ptr & 15) == 0) {
            /* Whole rows (cut_chunks cuts a strided entry at rows), 16 bytes a load. */
            const int q = ch.cols / 4, r0 = ch.start / ch.cols;
            add_fours(a, ch.len / 4, [&](int k) {
                return (const float4 *)(ch.ptr + (size_t)(r0 + k / q) * ch.ld) + k % q;
            });
        } else {
            for (int k = ch.start + threadIdx.x; k < ch.start + ch.len; k += THREADS)
                a.add(ch.ptr[(size_t)(k / ch.cols) * ch.ld + k % ch.cols]);
        }
        int bad = block_any(a.nonfinite), over;
        if (a.span) {
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
            for (int w = 0; w < THREADS / WARP; w++) {
                a.lo = fminf(a.lo, s_lo[w]);
                a.hi = fmaxf(a.hi, s_hi[w]);
            }
            over = bad || (ch.len > 0 && !(a.hi - a.lo < a.t));
        } else {
            over = block_any(a.over);
        }
        if (threadIdx.x == 0 && ((bad && ch.nonfinite >= 0) || (over && ch.thresh >= 0))) {
            if (bad && ch.nonfinite >= 0)
                st.flags[ch.nonfinite] = 1;
            if (over && ch.thresh >= 0)
                st.flags[ch.thresh] = 1;
            __threadfence_system();
        }
    }
    /*
     * The last block to finish sees every flag this step wrote: a block's
     * flags are fenced by their writer, thread 0, before its count, and a
     * block that wrote none has nothing to order (a fence in every one of
     * the thousands of blocks at large batches was a large share of the
     * kernel's stalls).
     */
    __shared__ int last;
    if (threadIdx.x == 0) {
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
fox__cuda_check(cudaStream_t s, const fox_cuda_stab *st, const fox_cuda_chunk *chunks,
                int n_chunks, int trained)
{
    int blocks = st->sentinel && n_chunks > 0 ? n_chunks : 1;
    FOX_CUDA_TRY(launch(check_kernel, blocks, THREADS, 0, s, *st, chunks, n_chunks, trained));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Fault injection (the CPU's inject at a stability point)                                    */

__global__ void
inject_kernel(fox_cuda_ctl *c, float *p, float *p2, int after_count)
{
    pdl_enter();
    fox_member_args(c, p, p2);
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
    FOX_CUDA_TRY(launch(inject_kernel, 1, 1, 0, s, st->ctl, p, p2, after_count));
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
#define JOIN_LOADS 8

__global__ void
dh_s2_join_kernel(fox_cuda_stab st, int B, int NT, int H2, float *dh, const float *dh_aux,
                  float *dh_iqn, const float *d_x, const float *phi, const float *h, float *d_phi)
{
    pdl_enter();
    fox_member_args(st, dh, dh_aux, dh_iqn, d_x, phi, h, d_phi);
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
        /* JOIN_LOADS fractions' loads in flight before the first use (they do not alias d_phi). */
        for (int i0 = 0; i0 < NT; i0 += JOIN_LOADS) {
            float dx[JOIN_LOADS], ph[JOIN_LOADS];
#pragma unroll
            for (int j = 0; j < JOIN_LOADS; j++)
                if (i0 + j < NT) {
                    size_t at = (b * NT + i0 + j) * H2 + col;
                    dx[j] = d_x[at];
                    ph[j] = phi[at];
                }
#pragma unroll
            for (int j = 0; j < JOIN_LOADS; j++)
                if (i0 + j < NT) {
                    iq += dx[j] * ph[j];
                    d_phi[(b * NT + i0 + j) * H2 + col] = ph[j] <= 0.0f ? 0.0f : dx[j] * hv;
                }
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
    pdl_enter();
    fox_member_args(c);
    if (fault_now(c, FOX_SENT_D_H_S2_POST_AUX, 0) || fault_now(c, FOX_SENT_IQN_D_H_S2, 0) ||
        fault_now(c, FOX_SENT_D_H_S2_POST_IQN, 0))
        c->fault_done = 1;
}

int
fox__cuda_dh_s2_join(cudaStream_t s, const fox_cuda_stab *st, int B, int NT, int H2, float *dh,
                     const float *dh_aux, float *dh_iqn, const float *d_x, const float *phi,
                     const float *h, float *d_phi)
{
    FOX_CUDA_TRY(launch(dh_s2_join_kernel, grid_for((size_t)B * H2, THREADS), THREADS, 0, s, *st, B,
                        NT, H2, dh, dh_aux, dh_iqn, d_x, phi, h, d_phi));
    if (st->ctl_fault_inline) {
        FOX_CUDA_TRY(launch(fault_spent_kernel, 1, 1, 0, s, st->ctl));
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Before the forward: the aux label scale and the IQN's unit                                 */

/*
 * One block. AUX_LABEL_SCALE_EMA ← EMA(mean |label|) with the Pearl A
 * sentinel; the IQN's unit for the step (fox_td_scale) from Q_ABS_REF before
 * the step's loss observes it, so that its two launches read the same one.
 */
__global__ void
pre_step_kernel(fox_cuda_stab st, int B, const float *aux)
{
    pdl_enter();
    fox_member_args(st, aux);
    double v = 0.0;
#pragma unroll 4 /* four loads in flight (one block reads the whole batch) */
    for (int b = threadIdx.x; b < B; b += blockDim.x)
        v += fabsf(aux[b]);
    v = warp_sum(v);
    __shared__ double part[THREADS / WARP];
    if (threadIdx.x % WARP == 0)
        part[threadIdx.x / WARP] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        st.ctl->td_unit = fox_td_scale(st.moving_grid, st.isv[FOX_ISV_Q_ABS_REF]);
        double tot = 0.0;
        for (int w = 0; w < THREADS / WARP; w++)
            tot += part[w];
        fox_signal_observe(st.isv, st.adaptive ? st.sp4->ws : NULL, FOX_ISV_AUX_LABEL_SCALE_EMA,
                           (float)(tot / B), st.adaptive);
    }
}

int
fox__cuda_pre_step(cudaStream_t s, const fox_cuda_stab *st, int B, const float *aux)
{
    FOX_CUDA_TRY(launch(pre_step_kernel, 1, THREADS, 0, s, *st, B, aux));
    return 0;
}
