/*
 * loss.cu — the fused loss kernel: the double-DQN argmax, the C51
 * projection and cross-entropy, the dueling backward, the IQN quantile
 * Huber loss with SP4's Mech 1 on its targets, and the aux losses, one
 * block per sample; its parts are __device__ twins of gpu/cpu/loss_grad.c's
 * greedy_next, c51_targets, iqn_targets, c51_loss, iqn_loss, aux_loss and
 * c51_duel_bwd, by the same names, with the loss normalizations 1/(B·D),
 * 1/NT and 1/B and argmax ties to the lowest index.
 *
 * Not here: the products of the backward (gemm.cu, matmul.c) and their
 * orchestration (net.c).
 */
#include <math.h>
#include <stdint.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/device.cuh"
#include "gpu/cuda/loss.h"
#include "gpu/cuda/sp4.h"

/* ------------------------------------------------------------------------------------------ */
/* The loss kernel and its parts                                                              */

static __device__ __forceinline__ float
huber(float x)
{
    float ax = fabsf(x);
    return ax <= 1.0f ? 0.5f * x * x : ax - 0.5f;
}

static __device__ __forceinline__ float
huber_grad(float x)
{
    return x > 1.0f ? 1.0f : x < -1.0f ? -1.0f : x;
}

#define LOSS_THREADS 128

/*
 * The kernel's parts below share their names with their twins in
 * gpu/cpu/loss_grad.c and run in the kernel's order; each is one block's
 * share of the work for its sample b, every thread of the block calling it
 * unless the kernel says which (a warp, a lane), so that the barriers
 * inside match.
 */

/*
 * Aux: next-bar MSE (weighted) and regime CE (unweighted), each over B, and
 * their gradients (λ included) into s_daux [1 + NR]; s_aux gets the two losses.
 */
static __device__ __forceinline__ void
aux_loss(const fox_cuda_dims &dm, const fox_cuda_loss_hp &hp, const fox_cuda_loss_args &A, int b,
         float w, double *s_aux, float *s_daux)
{
    const int B = A.B;
    float lam = hp.aux_lambda, scale = *hp.aux_scale;
    scale = scale > 1e-8f ? scale : 1e-8f;
    const float *orow = A.on_out + (size_t)b * dm.OW;
    const float *b2r = A.b2_on + (size_t)FOX_CUDA_HEAD_RET * dm.OS;
    const float *b2g = A.b2_on + (size_t)FOX_CUDA_HEAD_REG * dm.OS;
    float err = orow[FOX_CUDA_HEAD_RET * dm.OS] + b2r[0] - A.aux_ret[b] / scale;
    s_aux[0] = (double)(w * err * err / (float)B);
    s_daux[0] = lam * 2.0f * w * err / (float)B;
    float lg[4], mx = -INFINITY, sum = 0.0f;
    for (int k = 0; k < dm.NR; k++) {
        lg[k] = orow[FOX_CUDA_HEAD_REG * dm.OS + k] + b2g[k];
        mx = lg[k] > mx ? lg[k] : mx;
    }
    for (int k = 0; k < dm.NR; k++)
        sum += expf(lg[k] - mx);
    float lse = mx + logf(sum);
    int label = A.regime[b];
    s_aux[1] = -(double)((lg[label] - lse) / (float)B);
    for (int k = 0; k < dm.NR; k++)
        s_daux[1 + k] = lam * (expf(lg[k] - lse) - (k == label ? 1.0f : 0.0f)) / (float)B;
}

/* Double DQN, thread d < D: a*_d = argmax_a E_online[Z_d(s′, a)], ties to the lowest a. */
static __device__ __forceinline__ void
greedy_next(const fox_cuda_dims &dm, const fox_cuda_loss_args &A, int b, int d, int *s_astar,
            int *s_a)
{
    const int D = dm.D, NAct = dm.NAct;
    const float *qn = A.nx_q + (size_t)b * NAct + dm.boff[d];
    int best = 0;
    float bq = qn[0];
    for (int a = 1; a < dm.bsize[d]; a++)
        if (qn[a] > bq) {
            best = a;
            bq = qn[a];
        }
    s_astar[d] = best;
    A.a_star[b * D + d] = best;
    s_a[d] = A.a[b * D + d];
}

/*
 * The C51 targets of every branch into m [D × NA] (and A.proj): each
 * branch's shifted support's bins bj [D × NA] on its own grid (c51_project),
 * the target net's probabilities p [D × NA] at a*, their projection, and
 * under FOX_TARGET_MEAN the branches' mean atom by atom (their grids are
 * equal, as the CPU's c51_targets says).
 */
static __device__ __forceinline__ void
c51_targets(const fox_cuda_dims &dm, const fox_cuda_loss_hp &hp, const fox_cuda_loss_args &A,
            int b, int t, const float *s_sup, float rb, float g, const int *s_astar, float *p,
            float *m, float *bj)
{
    const int D = dm.D, NA = dm.NA, NAct = dm.NAct;
    for (int k = t; k < D * NA; k += blockDim.x) {
        int d = k / NA, j = k % NA;
        const float v_min = s_sup[2 * d], v_max = s_sup[2 * d + 1];
        const float dz = (v_max - v_min) / (float)(NA - 1);
        float tz = rb + g * (v_min + (float)j * dz);
        /* A poisoned reward counts as 0, so the split indices stay in range (c51_project). */
        tz = isfinite(tz) ? tz : 0.0f;
        tz = tz < v_min ? v_min : tz > v_max ? v_max : tz;
        float bb = (tz - v_min) / dz;
        bb = bb < 0.0f ? 0.0f : bb > (float)(NA - 1) ? (float)(NA - 1) : bb;
        bj[k] = bb;
    }
    __syncthreads();
    for (int k = t; k < D * NA; k += blockDim.x) {
        int d = k / NA, j = k % NA;
        const float *lp = A.tg_logp + ((size_t)b * NAct + dm.boff[d] + s_astar[d]) * NA;
        p[k] = expf(lp[j]);
    }
    __syncthreads();
    /*
     * Projection as a gather: atom i collects, in j order, what each j sends
     * it. Only a j with bj in (i − 1, i + 1) sends to i, and bj does not
     * decrease with j (γⁿ(1 − done) ≥ 0, then clamps), so those j are one
     * run: found by bisection, then walked, instead of all NA for every i.
     */
    for (int k = t; k < D * NA; k += blockDim.x) {
        int d = k / NA, i = k % NA;
        const float *pd = p + d * NA, *bjd = bj + d * NA;
        float acc = 0.0f;
        int j0 = 0, j1 = NA; /* the first j with bj[j] > i − 1 */
        while (j0 < j1) {
            int mid = (j0 + j1) / 2;
            if (bjd[mid] > (float)(i - 1))
                j1 = mid;
            else
                j0 = mid + 1;
        }
        for (int j = j0; j < NA && bjd[j] < (float)(i + 1); j++) {
            float bb = bjd[j];
            int l = (int)floorf(bb), u = (int)ceilf(bb);
            if (l == u) {
                if (l == i)
                    acc += pd[j];
            } else {
                if (l == i)
                    acc += pd[j] * ((float)u - bb);
                if (u == i)
                    acc += pd[j] * (bb - (float)l);
            }
        }
        m[k] = acc;
    }
    __syncthreads();
    if (hp.target_mode == FOX_TARGET_MEAN) {
        for (int i = t; i < NA; i += blockDim.x) {
            float mean = 0.0f;
            for (int d = 0; d < D; d++)
                mean += m[d * NA + i];
            mean /= (float)D;
            for (int d = 0; d < D; d++)
                m[d * NA + i] = mean;
        }
        __syncthreads();
    }
    for (int k = t; k < D * NA; k += blockDim.x)
        A.proj[(size_t)b * D * NA + k] = m[k];
}

/*
 * The raw IQN target k = d·NT + j, θ′[d, j] = r + γⁿ(1 − done)·u·q_target(τ′_j)[a*_d]:
 * g is γⁿ(1 − done)·u, the target head's output taken in the step's unit u.
 */
static __device__ __forceinline__ float
iqn_target(const fox_cuda_dims &dm, const fox_cuda_loss_args &A, int b, int k, float rb, float g,
           const int *s_astar)
{
    const int NT = dm.NT, NAct = dm.NAct;
    const float *qt = A.iq_q + (size_t)A.B * NT * NAct;
    int d = k / NT, j = k % NT, col_t = dm.boff[d] + s_astar[d];
    return rb + g * (qt[((size_t)b * NT + j) * NAct + col_t] + A.bq_tg[col_t]);
}

/*
 * Q_ABS_REF's observation (site_target_q's fox_q_ref_obs) in the first
 * launch: sample b's Σ_d fox_q_ref_row over its raw targets s_tq [D × NT],
 * winsorized at the slot's Mech 1 bound before the observation, which every
 * block reads before it publishes its share; the block that finishes last
 * adds the shares in a fixed order and observes their mean over the B·D rows.
 */
static __device__ void
q_ref_observe(const fox_cuda_dims &dm, const fox_cuda_loss_args &A, int b, const float *s_tq)
{
    double v = 0.0;
    if (threadIdx.x == 0) {
        float bound = fox_bound_target_q_fixed(A.st.isv[FOX_ISV_Q_ABS_REF]);
        for (int d = 0; d < dm.D; d++)
            v += fox_q_ref_row(s_tq + d * dm.NT, dm.NT, bound);
    }
    unsigned int *done = &A.st.ctl->done_blocks[FOX_CUDA_DONE_Q_REF];
    double tot;
    if (!last_block_total(v, A.q_ref_part, done, &tot) || threadIdx.x != 0)
        return;
    *done = 0;
    fox_signal_observe(A.st.isv, A.st.adaptive ? A.st.sp4->ws : NULL, FOX_ISV_Q_ABS_REF,
                       (float)(tot / (double)(A.B * dm.D)), A.st.adaptive);
}

/*
 * The IQN targets (iqn_targets) into s_tq [D × NT] and A.tq, then the Mech 1
 * site (site_target_q) in a training step: slot 46 on the pre-clip values,
 * clamp_finite at 10 × max(Q_ABS_REF, 1) (fixed) or max(TARGET_Q_BOUND, 1)
 * (adaptive), both observed by fox__cuda_loss_targets first.
 */
static __device__ __forceinline__ void
iqn_targets(const fox_cuda_dims &dm, const fox_cuda_loss_args &A, int b, int t, float rb, float g,
            const int *s_astar, float *s_tq)
{
    const int D = dm.D, NT = dm.NT;
    int bad46 = 0;
    for (int k = t; k < D * NT; k += blockDim.x) {
        float x = iqn_target(dm, A, b, k, rb, g, s_astar);
        if (A.st.sites) {
            float bound = A.st.adaptive ? fox_bound_adaptive(A.st.isv[FOX_ISV_TARGET_Q_BOUND])
                                        : fox_bound_target_q_fixed(A.st.isv[FOX_ISV_Q_ABS_REF]);
            bad46 |= !(fabsf(x) < threshold_of(A.st, FOX_SENT_TARGET_Q_POST_CLIP));
            x = fox_clamp_finite(x, bound);
        }
        s_tq[k] = x;
        A.tq[(size_t)b * D * NT + k] = x;
    }
    if (__syncthreads_or(bad46) && t == 0 && A.st.sentinel)
        A.st.flags[FOX_SENT_TARGET_Q_POST_CLIP] = 1;
}

/*
 * C51 cross-entropy of branch d (its warp) at its chosen action against m,
 * the logit gradients into dl [D × NA], and the branch's |δ| and |E_online|.
 */
static __device__ __forceinline__ void
c51_loss(const fox_cuda_dims &dm, const fox_cuda_loss_args &A, int b, int d, int lane, float w,
         const float *m, float *dl, double *s_c51, float *s_prio, float *s_ep)
{
    const int D = dm.D, NA = dm.NA, B = A.B;
    const float *lp = A.on_logp + ((size_t)b * D + d) * NA;
    const float *md = m + d * NA, *z = A.z + d * NA;
    float coef = w / (float)(B * D);
    float ce = 0.0f, msum = 0.0f, em = 0.0f, ep = 0.0f;
    for (int j = lane; j < NA; j += WARP) {
        ce -= md[j] * lp[j];
        msum += md[j];
        em += md[j] * z[j];
        ep += expf(lp[j]) * z[j];
    }
    ce = warp_sum(ce);
    msum = warp_sum(msum);
    em = warp_sum(em);
    ep = warp_sum(ep);
    for (int j = lane; j < NA; j += WARP)
        dl[d * NA + j] = coef * (expf(lp[j]) * msum - md[j]);
    if (lane == 0) {
        s_c51[d] = (double)(coef * ce);
        s_prio[d] = fabsf(em - ep);
        s_ep[d] = fabsf(ep);
    }
}

/*
 * IQN quantile Huber, a thread per (i, flat action); only each branch's
 * chosen action is live; θ_i the online head's output in the step's unit u
 * (ctl's td_unit, fox_td_scale as pre_step found it: the CPU net's
 * td_scale), the TD errors in units of u, so ∂δ/∂q = −1. d_q gets the
 * gradient (λ included), s_iqn [warps] each warp's share of the loss.
 */
static __device__ __forceinline__ void
iqn_loss(const fox_cuda_dims &dm, const fox_cuda_loss_hp &hp, const fox_cuda_loss_args &A, int b,
         int t, float w, float u, const int *s_a, const float *s_tq, double *s_iqn)
{
    const int D = dm.D, NAct = dm.NAct, NT = dm.NT, B = A.B;
    double iqn_part = 0.0;
    for (int k = t; k < NT * NAct; k += blockDim.x) {
        int i = k / NAct, c = k % NAct, d = branch_of(dm, c);
        int col = dm.boff[d] + s_a[d];
        float val = 0.0f;
        if (c == col) {
            float coef = w / (float)(B * D) / (float)NT;
            float theta = u * (A.iq_q[((size_t)b * NT + i) * NAct + col] + A.bq_on[col]);
            float tau = A.tau[b * NT + i], rho = 0.0f, drho = 0.0f;
            for (int j = 0; j < NT; j++) {
                float delta = (s_tq[d * NT + j] - theta) / u;
                float wq = fabsf(tau - (delta < 0.0f ? 1.0f : 0.0f));
                rho += wq * huber(delta);
                drho += wq * huber_grad(delta);
            }
            iqn_part += (double)(coef * rho);
            val = -(hp.iqn_lambda * coef * drho);
        }
        A.d_q[((size_t)b * NT + i) * NAct + c] = val;
    }
    iqn_part = warp_sum(iqn_part);
    if (t % WARP == 0)
        s_iqn[t / WARP] = iqn_part;
}

/* Thread 0: the sample's loss parts, priority and branch 0's |E_online| from the parts' shares. */
static __device__ __forceinline__ void
loss_parts(const fox_cuda_dims &dm, const fox_cuda_loss_args &A, int b, const double *s_c51,
           const double *s_iqn, const double *s_aux, const float *s_prio, const float *s_ep)
{
    const int D = dm.D;
    double c51 = 0.0, iqn = 0.0;
    float prio = 0.0f;
    for (int d = 0; d < D; d++) {
        c51 += s_c51[d];
        prio += s_prio[d];
    }
    for (int k = 0; k < LOSS_THREADS / WARP; k++)
        iqn += s_iqn[k];
    double *pp = A.parts + (size_t)b * FOX_CUDA_PARTS;
    pp[0] = c51;
    pp[1] = iqn;
    pp[2] = s_aux[0];
    pp[3] = s_aux[1];
    pp[4] = s_ep[0];
    A.prio[b] = prio;
}

/*
 * The packed output gradient, head by head (padding 0): the dueling backward
 * of every branch (c51_duel_bwd), dV = Σ_d dl_d and dA = [a = a_d]·dl − dl/n,
 * then the aux heads' gradients from aux_loss. Column k = a·NA + j of a
 * head: (a, j) step with k, not a division each.
 */
static __device__ __forceinline__ void
c51_duel_bwd(const fox_cuda_dims &dm, const fox_cuda_loss_args &A, int b, int t, const float *dl,
             const int *s_a, const float *s_daux)
{
    const int D = dm.D, NA = dm.NA;
    float *dout = A.dout + (size_t)b * dm.OW;
    const int step_a = LOSS_THREADS / NA, step_j = LOSS_THREADS % NA;
    for (int h = 0; h < FOX_CUDA_HEADS; h++) {
        int a = t / NA, j = t % NA;
        for (int k = t; k < dm.OS; k += LOSS_THREADS) {
            float v = 0.0f;
            if (h == 0) {
                if (k < NA)
                    for (int d = 0; d < D; d++)
                        v += dl[d * NA + k];
            } else if (h <= D) {
                int d = h - 1;
                if (a < dm.bsize[d]) {
                    float x = dl[d * NA + j];
                    v = (a == s_a[d] ? x : 0.0f) - x / (float)dm.bsize[d];
                }
            } else if (h == FOX_CUDA_HEAD_RET) {
                v = k == 0 ? s_daux[0] : 0.0f;
            } else if (h == FOX_CUDA_HEAD_REG && k < dm.NR) {
                v = s_daux[1 + k];
            }
            dout[(size_t)h * dm.OS + k] = v;
            a += step_a;
            j += step_j;
            if (j >= NA) {
                j -= NA;
                a++;
            }
        }
    }
}

/*
 * One block per sample b, 4 warps (D ≤ 4: warp d owns branch d's
 * cross-entropy). Shared memory: p [D × NA] target probabilities, m
 * [D × NA] projected targets, dl [D × NA] logit gradients at the chosen
 * actions, and per branch and atom j of its shifted support the bin bj
 * [D × NA].
 */
__global__ void
loss_kernel(fox_cuda_dims dm, fox_cuda_loss_hp hp, fox_cuda_loss_args A)
{
    pdl_enter();
    fox_member_args(hp, A);
    if (fox_member_steps())
        hp.gamma_n = A.st.ctl->key.gamma_n;
    extern __shared__ float sm[];
    const int D = dm.D, NA = dm.NA, NT = dm.NT;
    float *p = sm, *m = sm + D * NA, *dl = sm + 2 * D * NA, *bj = sm + 3 * D * NA;
    float *s_tq = bj + D * NA; /* [D × NT] the IQN targets after Mech 1 */
    __shared__ int s_astar[FOX_MAX_BRANCHES], s_a[FOX_MAX_BRANCHES];
    __shared__ double s_c51[FOX_MAX_BRANCHES], s_iqn[LOSS_THREADS / WARP], s_aux[2];
    __shared__ float s_prio[FOX_MAX_BRANCHES], s_ep[FOX_MAX_BRANCHES], s_daux[1 + 4];
    const int b = blockIdx.x, t = threadIdx.x, lane = t % WARP, warp = t / WARP;
    const float w = A.w ? A.w[b] : 1.0f;
    /*
     * The aux losses by the last warp's first lane now, while the others wait
     * on their loads, not by one thread at the end with the whole block
     * waiting on it.
     */
    if (t == LOSS_THREADS - WARP && !A.tq_only)
        aux_loss(dm, hp, A, b, w, s_aux, s_daux);
    /* Each branch's support as Mech 2 left it this step (atoms.cu); the layout's in a debug
     * pass. */
    __shared__ float s_sup[2 * FOX_MAX_BRANCHES];
    if (t < 2 * D)
        s_sup[t] = A.st.sites ? A.st.ctl->support[t / 2][t % 2] : t % 2 ? dm.v_max : dm.v_min;

    if (t < D)
        greedy_next(dm, A, b, t, s_astar, s_a);
    const float g = hp.gamma_n * (1.0f - A.done[b]), rb = A.r[b];
    const float u = A.st.ctl->td_unit, g_iqn = g * u; /* the IQN's targets in the step's unit */
    /*
     * The first launch (tq_only): the raw IQN targets into A.tq, Q_ABS_REF
     * from them, and out, so that Q_ABS_REF and, in adaptive mode,
     * TARGET_Q_BOUND observe the whole batch before the second launch
     * checks and clips them.
     */
    if (A.tq_only) {
        __syncthreads();
        for (int k = t; k < D * NT; k += blockDim.x) {
            float x = iqn_target(dm, A, b, k, rb, g_iqn, s_astar);
            A.tq[(size_t)b * D * NT + k] = x;
            s_tq[k] = x;
        }
        __syncthreads();
        q_ref_observe(dm, A, b, s_tq);
        return;
    }
    __syncthreads(); /* s_sup */
    c51_targets(dm, hp, A, b, t, s_sup, rb, g, s_astar, p, m, bj);
    iqn_targets(dm, A, b, t, rb, g_iqn, s_astar, s_tq);
    if (warp < D)
        c51_loss(dm, A, b, warp, lane, w, m, dl, s_c51, s_prio, s_ep);
    __syncthreads();
    iqn_loss(dm, hp, A, b, t, w, u, s_a, s_tq, s_iqn);
    __syncthreads();
    if (t == 0)
        loss_parts(dm, A, b, s_c51, s_iqn, s_aux, s_prio, s_ep);
    c51_duel_bwd(dm, A, b, t, dl, s_a, s_daux);
}

int
fox__cuda_loss(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_loss_hp *hp,
               const fox_cuda_loss_args *a)
{
    if (dm->D > 4 || dm->NR > 4)
        return FOX_EINVAL;
    size_t smem = (size_t)(4 * dm->D * dm->NA + dm->D * dm->NT) * sizeof(float);
    FOX_CUDA_TRY(launch(loss_kernel, a->B, LOSS_THREADS, smem, s, *dm, *hp, *a));
    return 0;
}

int
fox__cuda_loss_targets(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_loss_hp *hp,
                       const fox_cuda_loss_args *a)
{
    fox_cuda_loss_args t = *a;
    t.tq_only = 1;
    FOX_TRY(fox__cuda_loss(s, dm, hp, &t));
    if (!a->st.adaptive)
        return 0;
    return fox__cuda_p99_observe(s, &a->st, a->tq, (size_t)a->B * dm->D * dm->NT,
                                 FOX_ISV_TARGET_Q_BOUND, FOX_CUDA_P99_TQ);
}
