/*
 * adam.cu — the optimizer on the device: the isfinite guard and global
 * gradient norm with Mech 6's clip, Adam with its clamps (Mech 9) and SP4's
 * engagement counts, the target update, the step's finish and the ISV's
 * publication to the mapped copy the host reads. Twins: gpu/cpu/optim.c
 * (sanitize, norm, clip scale, Adam, target sync). Every counter a kernel
 * needs is read from fox_cuda_ctl in device memory.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/train_types.h"
#include "gpu/cuda/adam.h"
#include "gpu/cuda/device.cuh"

/* ------------------------------------------------------------------------------------------ */
/* Optimizer (twins of optim.c)                                                               */

/* fox_cpu_clip_scale. */
static __device__ __forceinline__ float
clip_scale(double norm, float max_norm)
{
    if (!isfinite(norm))
        return 0.0f;
    if (!(max_norm > 0.0f) || norm <= (double)max_norm)
        return 1.0f;
    return (float)((double)max_norm / norm);
}

/* v² in double, or 0 for a non-finite v (the norm counts the finite gradients only). */
static __device__ __forceinline__ double
finite_sq(float v)
{
    return isfinite(v) ? (double)v * (double)v : 0.0;
}

/*
 * The finite gradients' Σ g² (double), one partial per block; the isfinite
 * guard itself is Adam's (a non-finite gradient moves nothing and stays in
 * grads for the sentinel, as fox_cpu_grad_norm_finite). Each block also
 * sums its share of the samples' loss parts (parts [B × FOX_CUDA_PARTS]):
 * one block adding all B of them lengthened the step's critical path at
 * large batches. The last block then runs what the CPU runs between the loss
 * and Adam, in its order: the step's losses into ctl; with sites,
 * Q_DIR_ABS_REF from the loss parts (fox_cpu_stab_q_dir_signal) and Mech 6
 * (fox_cpu_stab_grad_clip: winsorized EMAs, the clip from them, or in
 * adaptive mode fox_bound_grad_clip_adaptive on the unclipped norm;
 * train.grad_clip as a ceiling); without sites (a parity pass) the plain
 * clip at train.grad_clip. The factor goes to ctl->clip_scale, the norm to
 * ctl->grad_norm. Every sum in a fixed order: the same bits on every run.
 */
#define NORM_THREADS 256
static_assert(NORM_THREADS / WARP >= FOX_CUDA_PARTS, "a warp per loss part");

__global__ void
grad_norm_kernel(size_t n, const float *g, double *partial, fox_cuda_stab st, int B, int D,
                 const double *parts, float iqn_lambda, float aux_lambda)
{
    pdl_enter();
    fox_member_args(g, partial, st, parts);
    /*
     * The block's samples [b0, b1): thread t adds part t % PARTS of samples
     * b0 + t / PARTS, + groups, …; then PARTS threads add the groups in order,
     * into column 1 + part of partial [(1 + PARTS) × blocks].
     */
    const int nb = gridDim.x, groups = blockDim.x / FOX_CUDA_PARTS, per = (B + nb - 1) / nb;
    const int b0 = blockIdx.x * per, b1 = b0 + per < B ? b0 + per : B;
    __shared__ double s_parts[NORM_THREADS];
    if ((int)threadIdx.x < groups * FOX_CUDA_PARTS) {
        int q = threadIdx.x % FOX_CUDA_PARTS;
        double v = 0.0;
        for (int b = b0 + (int)threadIdx.x / FOX_CUDA_PARTS; b < b1; b += groups)
            v += parts[(size_t)b * FOX_CUDA_PARTS + q];
        s_parts[threadIdx.x] = v;
    }
    __syncthreads();
    if (threadIdx.x < FOX_CUDA_PARTS) {
        double v = 0.0;
        for (int k = 0; k < groups && k < b1 - b0; k++)
            v += s_parts[k * FOX_CUDA_PARTS + threadIdx.x];
        partial[(size_t)(1 + threadIdx.x) * nb + blockIdx.x] = v;
        __threadfence(); /* before block_sum's barrier, and so before the done count */
    }
    /* float4 loads, four of them in flight a thread: the default net's 541k in one round. */
    const size_t T = (size_t)gridDim.x * blockDim.x, n4 = n / 4;
    const size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    double acc = 0.0;
    for (size_t q0 = id; q0 < n4; q0 += 4 * T) {
        float4 x[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (q0 + u * T < n4)
                x[u] = __ldg((const float4 *)g + q0 + u * T);
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (q0 + u * T < n4)
                acc += finite_sq(x[u].x) + finite_sq(x[u].y) + finite_sq(x[u].z) +
                       finite_sq(x[u].w);
    }
    for (size_t k = 4 * n4 + id; k < n; k += T)
        acc += finite_sq(g[k]);
    double ss;
    if (!last_block_total(block_sum(acc), partial, &st.ctl->done_blocks[FOX_CUDA_DONE_NORM], &ss))
        return;
    /* Warp q totals part q's block partials, all in one round (only thread 0 reads them). */
    __shared__ double tot[FOX_CUDA_PARTS];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    if (warp < FOX_CUDA_PARTS) {
        double v = 0.0;
        for (int k = lane; k < nb; k += WARP)
            v += __ldcg(&partial[(size_t)(1 + warp) * nb + k]);
        v = warp_sum(v);
        if (lane == 0)
            tot[warp] = v;
    }
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    fox_cuda_ctl *c = st.ctl;
    c->done_blocks[FOX_CUDA_DONE_NORM] = 0;
    c->loss =
        (float)(tot[0] + (double)iqn_lambda * tot[1] + (double)aux_lambda * (tot[2] + tot[3]));
    c->loss_c51 = (float)tot[0];
    c->loss_iqn = (float)tot[1];
    c->loss_aux = (float)(tot[2] + tot[3]);
    double norm = sqrt(ss);
    c->grad_norm = (float)norm;
    float clip = st.grad_clip;
    if (st.sites) {
        float *isv = st.isv;
        fox_wiener_state *ws = st.adaptive ? st.sp4->ws : NULL;
        fox_signal_observe(isv, ws, FOX_ISV_Q_DIR_ABS_REF, (float)(tot[4] / (double)B),
                           st.adaptive);
        float lastc = isv[FOX_ISV_GRAD_CLIP];
        float x = lastc > 0.0f && norm > lastc ? lastc : (float)norm;
        isv[FOX_ISV_GRAD_NORM_SLOW_EMA] =
            fox_ema_first(isv[FOX_ISV_GRAD_NORM_SLOW_EMA], x, FOX_MECH6_SLOW_ALPHA);
        if (st.adaptive) {
            /* SP4 Mech 6: the level of the unclipped norm, its p99 the bound. */
            clip = fox_bound_grad_clip_adaptive(isv, st.sp4->ws, (float)norm);
        } else {
            fox_signal_observe(isv, ws, FOX_ISV_GRAD_NORM_EMA, x, 0);
            clip = fox_bound_grad_clip_fixed(isv[FOX_ISV_GRAD_NORM_EMA],
                                             isv[FOX_ISV_GRAD_NORM_SLOW_EMA],
                                             isv[FOX_ISV_Q_ABS_REF]);
        }
        if (st.grad_clip > 0.0f && st.grad_clip < clip)
            clip = st.grad_clip;
        isv[FOX_ISV_GRAD_CLIP] = clip;
    }
    c->clip_scale = clip_scale(norm, clip);
}

int
fox__cuda_grad_norm(cudaStream_t s, size_t n, const float *g, double *partial,
                    const fox_cuda_stab *st, int B, int D, const double *parts,
                    const fox_cuda_optim_cfg *oc)
{
    if ((uintptr_t)g % 16)
        return FOX_EINTERNAL; /* the float4 loads need the allocation's alignment */
    FOX_CUDA_TRY(launch(grad_norm_kernel, FOX_CUDA_NORM_BLOCKS, NORM_THREADS, 0, s, n, g, partial,
                        *st, B, D, parts, oc->iqn_lambda, oc->aux_lambda));
    return 0;
}

/* A block's Pearl C engagements (fam: 0 w, 1 m, 2 v) before the one global add per counter. */
struct adam_eng {
    unsigned int n[3][FOX_GROUP_COUNT], emax[3][FOX_GROUP_COUNT];
};

/*
 * The block's constants of one Adam step, in shared memory; st is the
 * block's member's stab (fox_member_shift), which engage (out of line)
 * takes by reference: from here, not from a copy on every thread's stack.
 */
struct adam_block {
    fox_cuda_stab st;
    float bc[2];                    /* the bias corrections 1 − β₁ᵗ, 1 − β₂ᵗ */
    float b[3][FOX_GROUP_COUNT + 1]; /* each group's w, m, v bound; padding: unbounded */
    float wd[FOX_GROUP_COUNT + 1];   /* each group's decoupled weight-decay rate (0: off) */
    float l1;                        /* the L1 proximal rate of GRN1 W2 (0: off) */
    adam_eng eng;
};

/*
 * One clamp of the Adam loop, the slow path (optim.c's engage): flag past
 * diag, clamp_finite. In adaptive mode the engagement is counted for Pearl
 * C with its largest finite magnitude, in the block's shared counters: the
 * engaged values (~1 % of each group at its p99 bound) would otherwise
 * queue on 24 global addresses.
 */
static __device__ __noinline__ float
engage(float x, float bound, int slot, int fam, int grp, adam_block *ab)
{
    const fox_cuda_stab &st = ab->st;
    adam_eng *be = &ab->eng;
    float a = fabsf(x);
    if (a <= bound && a != INFINITY)
        return x;
    if (st.adaptive && grp < FOX_GROUP_COUNT) {
        atomicAdd(&be->n[fam][grp], 1u);
        if (isfinite(a))
            atomicMax(&be->emax[fam][grp], __float_as_uint(a));
    }
    if (st.sentinel && slot >= 0 && !(a < threshold_of(st, slot)))
        st.flags[slot] = 1;
    return fox_clamp_finite(x, bound);
}

/* One element of the clamped Adam step: p, mm, vv updated in place from gradient gk. */
static __device__ __forceinline__ void
adam_one(float &p, float &mm, float &vv, float gk, int grp, float scale,
         const fox_cuda_adam_slots &sl, const fox_cuda_optim_cfg &oc, const fox_cuda_stab &st,
         adam_block *ab, size_t k)
{
    /*
     * The isfinite guard: a non-finite gradient leaves m, v and the weight as
     * they are, except a non-finite weight, which is zeroed (adam_elem's why).
     */
    if (!(fabsf(gk) <= FLT_MAX)) {
        if (!(fabsf(p) <= FLT_MAX))
            p = 0.0f;
        return;
    }
    gk *= scale;
    float mk = oc.b1 * mm + (1.0f - oc.b1) * gk;
    float vk = oc.b2 * vv + (1.0f - oc.b2) * gk * gk;
    int gi = grp < FOX_GROUP_COUNT ? grp : FOX_GROUP_COUNT;
    float wb = ab->b[0][gi], mb = ab->b[1][gi], vb = ab->b[2][gi];
    if (!(fabsf(mk) <= fminf(mb, FLT_MAX)))
        mk = engage(mk, mb, grp < FOX_GROUP_COUNT ? sl.m[grp] : -1, 1, grp, ab);
    if (!(fabsf(vk) <= fminf(vb, FLT_MAX)))
        vk = engage(vk, vb, grp < FOX_GROUP_COUNT ? sl.v[grp] : -1, 2, grp, ab);
    mm = mk;
    vv = vk;
    float q = p - oc.lr * (mk / ab->bc[0]) / (sqrtf(vk / ab->bc[1]) + oc.eps);
    /* Pearl B's consumers: the L1 step only on GRN1 W2, where its rate is measured. */
    int in_l1 = k - st.l1_off < (size_t)st.l1_rows * (size_t)st.l1_cols;
    q = fox_adam_regularize(q, p, oc.lr, ab->wd[gi], in_l1 ? ab->l1 : 0.0f);
    if (!(fabsf(q) <= fminf(wb, FLT_MAX)))
        q = engage(q, wb, grp < FOX_GROUP_COUNT ? sl.w[grp] : -1, 0, grp, ab);
    p = q;
}

/*
 * The clamped Adam step at t = adam_t + 1 (fox_cpu_adam_step_clamped),
 * every tensor at once: the isfinite guard (an element whose gradient is
 * not finite is skipped: m, v and the weight unchanged, a non-finite weight
 * zeroed), g·clip_scale, m and v with their clamps (infinite bounds in fixed
 * mode: they engage on NaN/±Inf only; the group's ADAM_M/V_BOUND in
 * adaptive mode), the update, Pearl B's decoupled weight decay and L1 step
 * when train.pearl_wd / pearl_l1 ask (fox_adam_regularize), then Mech 9's
 * weight clamp at 100 ×
 * max(Q_ABS_REF, 1) (fixed) or the group's WEIGHT_BOUND (adaptive, with
 * the engagements counted for Pearl C); an engaged value past
 * its slot's threshold sets the slot of its param group (pgroup) inside the
 * kernel. A halted fold moves nothing.
 *
 * A thread per four elements (float4 loads of g, m, v, params and one of
 * their four groups), issued before the block's constants are read, so
 * the loads and the bias corrections' two double pows overlap; the grid is
 * one wave of the machine (the default net's 529 blocks: five an SM, at
 * most 48 registers; the n % 4 tail: the last block's threads).
 * Needs 16-byte aligned arrays (the backend's allocations).
 */
__global__ void __launch_bounds__(256, 5)
adam_kernel(size_t n, float *params, const float *g, float *m, float *v, const uint8_t *pgroup,
            const __grid_constant__ fox_cuda_adam_slots sl, fox_cuda_optim_cfg oc,
            const __grid_constant__ fox_cuda_stab st0)
{
    pdl_enter();
    /*
     * sl and st0 are __grid_constant__: sl is indexed by the group, and a
     * stab that engage (out of line) takes by reference, either of which
     * otherwise copies the struct to every thread's stack (328 bytes of
     * local traffic per thread, ~120 MB a step: most of this kernel's
     * time). engage takes the member's stab from the block's shared copy
     * (adam_block).
     *
     * The member's elements by index (fox_member's shift as a count of
     * floats, mf; of pgroup's bytes, 4·mf), one offset for the five arrays:
     * five shifted pointers, live until the tail, spilled at this kernel's
     * 48 registers.
     */
    const size_t mf = (size_t)blockIdx.z * (FOX_CUDA_MEMBER_SPAN / sizeof(float));
    const size_t n4 = n / 4, q = blockIdx.x * (size_t)blockDim.x + threadIdx.x, q4 = q + mf / 4;
    float4 g4, m4, v4, p4;
    uchar4 gr4;
    if (q < n4) {
        g4 = __ldg((const float4 *)g + q4);
        m4 = ((const float4 *)m)[q4];
        v4 = ((const float4 *)v)[q4];
        p4 = ((const float4 *)params)[q4];
        gr4 = __ldg((const uchar4 *)pgroup + q + mf);
    }
    const fox_cuda_ctl *c = fox_member(st0.ctl);
    if (fox_member_steps())
        oc.lr = c->key.lr;
    if (c->halt != FOX_HALT_NONE)
        return;
    if (st0.adaptive && blockIdx.x == 0 && threadIdx.x == 0)
        fox_member(st0.sp4)->pending = 1u; /* Pearl B is due (fox__cuda_post_adam, gated) */
    const float scale = c->clip_scale;
    /* The bias corrections once per block, not per thread; each group's bounds from the ISV now. */
    __shared__ adam_block ab;
    unsigned int *eng_words = &ab.eng.n[0][0];
    for (int k = threadIdx.x; k < (int)(sizeof ab.eng / sizeof *eng_words); k += blockDim.x)
        eng_words[k] = 0u;
    if (threadIdx.x == 0) {
        ab.st = fox_member_shift(st0);
        double t = (double)(c->adam_t + 1);
        ab.bc[0] = (float)(1.0 - pow((double)oc.b1, t));
        ab.bc[1] = (float)(1.0 - pow((double)oc.b2, t));
        ab.l1 = st0.adaptive && oc.pearl_l1 ? ab.st.isv[FOX_ISV_L1_LAMBDA] : 0.0f;
    } else if (threadIdx.x <= FOX_GROUP_COUNT + 1) {
        int grp = threadIdx.x - 1;
        const float *isv = fox_member(st0.isv);
        float wfix = fox_bound_weight_fixed(isv[FOX_ISV_Q_ABS_REF]);
        float wb = wfix, mb = INFINITY, vb = INFINITY;
        if (grp == FOX_GROUP_COUNT) {
            wb = st0.adaptive ? INFINITY : wfix;
        } else if (st0.adaptive) {
            wb = fox_bound_adaptive(isv[fox_isv_weight_bound_slot(grp)]);
            mb = fox_bound_adaptive(isv[fox_isv_adam_m_bound_slot(grp)]);
            vb = fox_bound_adaptive(isv[fox_isv_adam_v_bound_slot(grp)]);
        }
        ab.b[0][grp] = wb;
        ab.b[1][grp] = mb;
        ab.b[2][grp] = vb;
        ab.wd[grp] = st0.adaptive && oc.pearl_wd && grp < FOX_GROUP_COUNT
                         ? isv[fox_isv_wd_rate_slot(grp)]
                         : 0.0f;
    }
    __syncthreads();
    if (q < n4) {
        adam_one(p4.x, m4.x, v4.x, g4.x, gr4.x, scale, sl, oc, st0, &ab, 4 * q);
        adam_one(p4.y, m4.y, v4.y, g4.y, gr4.y, scale, sl, oc, st0, &ab, 4 * q + 1);
        adam_one(p4.z, m4.z, v4.z, g4.z, gr4.z, scale, sl, oc, st0, &ab, 4 * q + 2);
        adam_one(p4.w, m4.w, v4.w, g4.w, gr4.w, scale, sl, oc, st0, &ab, 4 * q + 3);
        ((float4 *)m)[q4] = m4;
        ((float4 *)v)[q4] = v4;
        ((float4 *)params)[q4] = p4;
    }
    if (blockIdx.x == gridDim.x - 1)
        for (size_t k = 4 * n4 + threadIdx.x; k < n; k += blockDim.x)
            adam_one(params[k + mf], m[k + mf], v[k + mf], g[k + mf], pgroup[k + 4 * mf], scale,
                     sl, oc, st0, &ab, k);
    if (!st0.adaptive)
        return;
    __syncthreads();
    if (threadIdx.x < 3 * FOX_GROUP_COUNT) {
        int f = threadIdx.x / FOX_GROUP_COUNT, grp = threadIdx.x % FOX_GROUP_COUNT;
        if (ab.eng.n[f][grp]) {
            atomicAdd(&ab.st.sp4->eng[f][grp], (unsigned long long)ab.eng.n[f][grp]);
            atomicMax(&ab.st.sp4->emax[f][grp], ab.eng.emax[f][grp]);
        }
    }
}

int
fox__cuda_adam(cudaStream_t s, size_t n, float *params, const float *g, float *m, float *v,
               const uint8_t *pgroup, const fox_cuda_adam_slots *sl, const fox_cuda_optim_cfg *oc,
               const fox_cuda_stab *st)
{
    if (((uintptr_t)params | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v) % 16 ||
        (uintptr_t)pgroup % 4)
        return FOX_EINTERNAL; /* the float4 loads need the allocations' alignment */
    FOX_CUDA_TRY(launch(adam_kernel, grid_for(n / 4, 256, (size_t)-1), 256, 0, s, n, params, g, m,
                        v, pgroup, *sl, *oc, *st));
    return 0;
}

/*
 * One block: the step's counters (its losses: grad_norm_kernel), then the
 * step's ISV published to the mapped copy (see publish_kernel). hold: the
 * next kernel on the stream launches only at this one's end (fox__cuda_finish).
 */
__global__ void
finish_kernel(fox_cuda_ctl *ctl, float *isv, float *isv_map, int hold)
{
    pdl_wait();
    if (!hold)
        pdl_release();
    fox_member_args(ctl, isv);
    isv_map = fox_member_host(isv_map);
    if (threadIdx.x == 0) {
        if (ctl->halt == FOX_HALT_NONE)
            ctl->adam_t++;
        ctl->train_steps++;
        ctl->trained++;
        ctl->loss_sum += (double)ctl->loss;
    }
    for (int k = threadIdx.x; k < FOX_ISV_TOTAL_DIM; k += blockDim.x)
        isv_map[k] = isv[k];
}

int
fox__cuda_finish(cudaStream_t s, fox_cuda_ctl *ctl, float *isv_dev, float *isv_map, int hold)
{
    FOX_CUDA_TRY(launch(finish_kernel, 1, 256, 0, s, ctl, isv_dev, isv_map, hold));
    return 0;
}

/*
 * Target update after the step was counted: Polyak every step, or a hard
 * copy every target_sync train steps (the grid exits at once otherwise).
 * Training uses it for Polyak only; the hard sync rides in the head-pack
 * launch (fox__cuda_head_pack).
 */
__global__ void
target_kernel(size_t n, const float *params, float *target, fox_cuda_optim_cfg oc,
              const fox_cuda_ctl *ctl)
{
    pdl_enter();
    fox_member_args(params, target, ctl);
    int soft = oc.polyak > 0.0f && oc.polyak < 1.0f;
    if (!(oc.polyak > 0.0f) && ctl->train_steps % oc.target_sync != 0)
        return;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x)
        target[k] = soft ? (1.0f - oc.polyak) * target[k] + oc.polyak * params[k] : params[k];
}

int
fox__cuda_target(cudaStream_t s, size_t n, const float *params, float *target,
                 const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl)
{
    FOX_CUDA_TRY(launch(target_kernel, grid_for(n, 256), 256, 0, s, n, params, target, *oc, ctl));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* ISV                                                                                        */

/*
 * The device copy of the ISV to the mapped-pinned one the host reads. Slot
 * by slot with plain stores: a reader may see a mix of two steps, never a
 * torn float.
 */
__global__ void
publish_kernel(const float *src, float *dst, int n)
{
    pdl_enter();
    src = fox_member(src);
    dst = fox_member_host(dst);
    for (int k = threadIdx.x; k < n; k += blockDim.x)
        dst[k] = src[k];
}

int
fox__cuda_publish(cudaStream_t s, const float *isv_dev, float *isv_host, int n)
{
    FOX_CUDA_TRY(launch(publish_kernel, 1, 256, 0, s, isv_dev, isv_host, n));
    return 0;
}
