/*
 * net_kernels.cu — the hand kernels of foxnet v1 on the device: the GRN
 * tail (σ gate, GLU, skip, LayerNorm) and its backward, dueling +
 * log_softmax + expected Q, the IQN cosine embedding and its backward, the fused loss kernel
 * (double-DQN argmax, C51 projection and cross-entropy, dueling backward, IQN quantile Huber, aux
 * losses) and the packing of the heads' first layers.
 *
 * Every kernel is the twin of a function of gpu/cpu/net.c and follows its
 * arithmetic in the same order wherever the order is not a parallel
 * reduction (LN eps 1e-5 with biased variance, ELU via expm1, ties of an
 * argmax to the lowest index, the loss normalizations 1/(B·D), 1/NT, 1/B).
 * Not here: matrix products and the bias/activation stages fused into
 * them (gemm.cu, matmul.c) and their orchestration (net.c).
 */
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/device.cuh"

#define PI_F 3.14159265358979323846f

/* Branch of flat action act (D ≤ 4 branches, offsets ascending). */
static __device__ __forceinline__ int
branch_of(const fox_cuda_dims &dm, int act)
{
    int d = 0;
    while (d + 1 < dm.D && act >= dm.boff[d + 1])
        d++;
    return d;
}

/* ------------------------------------------------------------------------------------------ */
/* GRN tail and LayerNorm (twins of grn_fwd's tail, layernorm_fwd/bwd, glu_bwd)               */

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

/*
 * One warp per row: sg = σ(zg + bg), lin = zv + bv (the gate and value
 * biases are added here, not by a separate epilogue launch; sg and lin
 * replace zg and zv in zgv for the backward), x = r + sg·lin, then LayerNorm
 * over the row (two-pass mean and biased variance, eps 1e-5):
 * x̂ = (x − mean)·rstd, y = x̂·γ + β. K > 0: x stays in registers between
 * the passes (row_each), else it goes through xhat. SITE (y is h_s2 of the
 * online net's training forward): the fault armed at slot 12 first, on
 * y[0]; then with fixed bounds y goes through Mech 10 (h_s2_site) before it
 * is stored, instead of in a launch of its own after this one, and with
 * adaptive bounds y's p99 pass 1 is taken here (p99_range), one launch
 * fewer before the site (which needs the whole p99 before its first clamp).
 */
template <int K, bool SITE>
__global__ void
grn_tail_kernel(int rows, int out, float *__restrict__ zgv, const float *__restrict__ r,
                const float *__restrict__ bg, const float *__restrict__ bv,
                const float *__restrict__ g, const float *__restrict__ beta,
                float *__restrict__ xhat, float *__restrict__ rstd, float *__restrict__ y,
                float *__restrict__ glu, float *__restrict__ ln_in, fox_cuda_stab st)
{
    pdl_enter();
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    /* The site's block reductions need every thread: a row past the end only skips the row. */
    h_s2_site site;
    p99_range range;
    if constexpr (SITE)
        if (!st.adaptive)
            site = h_s2_site(st);
    if (row < rows) {
        size_t o = (size_t)row * out;
        float *zg = zgv + o, *zv = zgv + (size_t)rows * out + o, *xh = xhat + o;
        const float *rr = r + o;
        /* K > 0: every load of the row first (zg and zv share zgv: no load may pass a store). */
        float pre_g[K > 0 ? K : 1], pre_v[K > 0 ? K : 1], keep[K > 0 ? K : 1];
        float gam[K > 0 ? K : 1], bet[K > 0 ? K : 1];
        if constexpr (K > 0)
            row_each<K>(lane, out, [&](int j, int c) {
                pre_g[j] = zg[c] + bg[c];
                pre_v[j] = zv[c] + bv[c];
                keep[j] = rr[c];
                gam[j] = g[c];
                bet[j] = beta[c];
            });
        float sum = 0.0f;
        row_each<K>(lane, out, [&](int j, int c) {
            float zgb, lin, skip;
            if constexpr (K > 0) {
                zgb = pre_g[j];
                lin = pre_v[j];
                skip = keep[j];
            } else {
                zgb = zg[c] + bg[c];
                lin = zv[c] + bv[c];
                skip = rr[c];
            }
            float sg = 1.0f / (1.0f + expf(-zgb));
            float gl = sg * lin, x = skip + gl;
            zg[c] = sg;
            zv[c] = lin;
            if constexpr (K > 0)
                keep[j] = x;
            else
                xh[c] = x;
            if (glu) { /* the stages the sentinel watches (slots 19, 20) */
                glu[o + c] = gl;
                ln_in[o + c] = x;
            }
            sum += x;
        });
        float mean = warp_sum(sum) / (float)out;
        float var = 0.0f;
        row_each<K>(lane, out, [&](int j, int c) {
            float x;
            if constexpr (K > 0)
                x = keep[j];
            else
                x = xh[c];
            var += (x - mean) * (x - mean);
        });
        var = warp_sum(var) / (float)out;
        float rs = 1.0f / sqrtf(var + 1e-5f);
        if (lane == 0)
            rstd[row] = rs;
        row_each<K>(lane, out, [&](int j, int c) {
            float v, yv;
            if constexpr (K > 0) {
                v = (keep[j] - mean) * rs;
                yv = v * gam[j] + bet[j];
            } else {
                v = (xh[c] - mean) * rs;
                yv = v * g[c] + beta[c];
            }
            xh[c] = v;
            if constexpr (SITE) {
                if (row == 0 && c == 0 && fault_now(st.ctl, FOX_SENT_H_S2, 0)) {
                    yv = st.ctl->fault_value;
                    st.ctl->fault_done = 1;
                }
                if (st.adaptive)
                    range.add(yv);
                else
                    yv = site.element(yv);
            }
            y[o + c] = yv;
        });
    }
    if constexpr (SITE) {
        if (st.adaptive)
            range.publish(&st.sp4->p99[FOX_CUDA_P99_H_S2]);
        else
            site.finish(st, (size_t)rows * out, st.site_part);
    }
}

int
fox__cuda_grn_tail(cudaStream_t s, int rows, int out, float *zgv, const float *r, const float *bg,
                   const float *bv, const float *g, const float *beta, float *xhat, float *rstd,
                   float *y, float *glu, float *ln_in, const fox_cuda_stab *site)
{
    unsigned int grid = (rows + FOX_CUDA_TAIL_ROWS - 1) / FOX_CUDA_TAIL_ROWS;
    fox_cuda_stab none = {};
    FOX_CUDA_TRY(by_row_slots(out, [&](auto k) {
        constexpr int K = decltype(k)::value;
        if (site)
            return launch(grn_tail_kernel<K, true>, grid, FOX_CUDA_TAIL_ROWS * WARP, 0, s, rows,
                          out, zgv, r, bg, bv, g, beta, xhat, rstd, y, glu, ln_in, *site);
        return launch(grn_tail_kernel<K, false>, grid, FOX_CUDA_TAIL_ROWS * WARP, 0, s, rows, out,
                      zgv, r, bg, bv, g, beta, xhat, rstd, y, glu, ln_in, none);
    }));
    return 0;
}

/*
 * One warp per row, LayerNorm then GLU backward (layernorm_bwd + glu_bwd):
 * du = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂ ⊙ x̂)), dx̂ = dy ⊙ γ, the gradient of
 * the LayerNorm input r + g (the skip path takes it as is; its rows 2·out
 * apart, beside dη2 in fox_cuda_grn_grad's dud); dyx = dy ⊙ x̂,
 * whose column sums (a gemv) give dγ; then d(pre-gate) = du·lin·σ(1 − σ)
 * and d lin = du·σ into dzgv [rows × 2·out] (a row's two side by side, for
 * the one product [dzg dlin]·[Wg; Wv]). K > 0: dy and x̂ stay in
 * registers between the passes (row_each).
 */
template <int K>
__global__ void
ln_glu_bwd_kernel(int rows, int out, const float *__restrict__ dy, const float *__restrict__ xhat,
                  const float *__restrict__ rstd, const float *__restrict__ g,
                  const float *__restrict__ zgv, long long fwd_stride, float *__restrict__ du,
                  float *__restrict__ dyx, float *__restrict__ dzgv)
{
    pdl_enter();
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows)
        return;
    size_t o = (size_t)row * out, o2 = 2 * o;
    /* K > 0: the row's dy, x̂, γ, σ and lin kept from the first pass. */
    float kd[K > 0 ? K : 1], kx[K > 0 ? K : 1], kg[K > 0 ? K : 1];
    float ks[K > 0 ? K : 1], kl[K > 0 ? K : 1];
    float m1 = 0.0f, m2 = 0.0f;
    row_each<K>(lane, out, [&](int j, int c) {
        float d = dy[o + c], xh = xhat[o + c], gc = g[c];
        if constexpr (K > 0) {
            kd[j] = d;
            kx[j] = xh;
            kg[j] = gc;
            ks[j] = zgv[o + c];
            kl[j] = zgv[(size_t)fwd_stride + o + c];
        }
        float dxh = d * gc;
        m1 += dxh;
        m2 += dxh * xh;
    });
    m1 = warp_sum(m1) / (float)out;
    m2 = warp_sum(m2) / (float)out;
    float rs = rstd[row];
    row_each<K>(lane, out, [&](int j, int c) {
        float d, xh, gc, sg, lin;
        if constexpr (K > 0) {
            d = kd[j];
            xh = kx[j];
            gc = kg[j];
            sg = ks[j];
            lin = kl[j];
        } else {
            d = dy[o + c];
            xh = xhat[o + c];
            gc = g[c];
            sg = zgv[o + c];
            lin = zgv[(size_t)fwd_stride + o + c];
        }
        float u = rs * (d * gc - m1 - xh * m2);
        du[o2 + c] = u;
        dyx[o + c] = d * xh;
        dzgv[o2 + c] = u * lin * sg * (1.0f - sg);
        dzgv[o2 + out + c] = u * sg;
    });
}

int
fox__cuda_ln_glu_bwd(cudaStream_t s, int rows, int out, const float *dy, const float *xhat,
                     const float *rstd, const float *g, const float *zgv, long long fwd_stride,
                     float *du, float *dyx, float *dzgv)
{
    const int per_block = 8;
    FOX_CUDA_TRY(by_row_slots(out, [&](auto k) {
        return launch(ln_glu_bwd_kernel<decltype(k)::value>, (rows + per_block - 1) / per_block,
                      per_block * WARP, 0, s, rows, out, dy, xhat, rstd, g, zgv, fwd_stride, du,
                      dyx, dzgv);
    }));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Dueling (twin of dueling_fwd + log_softmax_rows + expected_z)                              */

/*
 * One block per row, one warp per flat action: the row's value and
 * advantage outputs staged in shared memory once with their output biases
 * (out holds the products only; V in output slot 0, branch d in slot 1 + d)
 * and each branch's mean advantage per atom once, then per warp logit_j =
 * V_j + A_a,j − mean_a′ A_a′,j, log_softmax over the atoms and q = Σ_j
 * p_j·z_j (one warp per action reading its branch's whole slot from global
 * memory cost ~36 µs a launch at batch 4096: docs/performance.md, session
 * 6). With `chosen` ([rows × D] sub-actions) one warp per branch, for the
 * row's chosen action only: logp [rows × D × NA], no q (the training
 * forward on s, whose loss reads nothing else). K > 0 (NA ≤ 32·K): the
 * logits are computed once and kept in registers (row_each over the
 * atoms); K = 0: recomputed in each pass, so any atom count works.
 */
template <int K>
__global__ void
dueling_kernel(fox_cuda_dims dm, const float *__restrict__ out, const float *__restrict__ b2,
               const float *__restrict__ z, const int32_t *__restrict__ chosen,
               float *__restrict__ logp, float *__restrict__ q)
{
    pdl_enter();
    /* [(1 + D)·OS] outputs + biases, then [D × NA] mean advantages */
    extern __shared__ __align__(16) float sh[];
    const int NA = dm.NA, n_out = (1 + dm.D) * dm.OS;
    float *mean = sh + n_out;
    const size_t row = blockIdx.x;
    const float *orow = out + row * dm.OW;
    /* 16 bytes a load where the row allows: every load issued at once, not one after another. */
    if (n_out % 4 == 0 && (((uintptr_t)orow | (uintptr_t)b2) & 15) == 0) {
        for (int k = threadIdx.x; k < n_out / 4; k += blockDim.x) {
            float4 o = ((const float4 *)orow)[k], c = ((const float4 *)b2)[k];
            ((float4 *)sh)[k] = make_float4(o.x + c.x, o.y + c.y, o.z + c.z, o.w + c.w);
        }
    } else {
        for (int k = threadIdx.x; k < n_out; k += blockDim.x)
            sh[k] = orow[k] + b2[k];
    }
    __syncthreads();
    for (int k = threadIdx.x; k < dm.D * NA; k += blockDim.x) {
        int d = k / NA, j = k % NA, n = dm.bsize[d];
        const float *A = sh + (size_t)(1 + d) * dm.OS;
        float m = 0.0f;
        for (int a2 = 0; a2 < n; a2++)
            m += A[a2 * NA + j];
        mean[k] = m / (float)n;
    }
    __syncthreads();
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int d = chosen ? w : branch_of(dm, w);
    const int a = chosen ? chosen[row * dm.D + d] : w - dm.boff[d];
    const float *A = sh + (size_t)(1 + d) * dm.OS + (size_t)a * NA, *M = mean + d * NA;
    auto logit = [&](int j) { return sh[j] + A[j] - M[j]; };
    float keep[K > 0 ? K : 1] = {}; /* filled below when K > 0 (the front end cannot tell) */
    auto value = [&](int j, int c) {
        if constexpr (K > 0)
            return keep[j];
        else
            return logit(c);
    };
    if constexpr (K > 0)
        row_each<K>(lane, NA, [&](int j, int c) { keep[j] = logit(c); });
    float mx = -INFINITY;
    row_each<K>(lane, NA, [&](int j, int c) { mx = fmaxf(mx, value(j, c)); });
    mx = warp_max(mx);
    float sum = 0.0f;
    row_each<K>(lane, NA, [&](int j, int c) { sum += expf(value(j, c) - mx); });
    float lse = mx + logf(warp_sum(sum));
    float e = 0.0f;
    const size_t wid = chosen ? row * dm.D + d : row * dm.NAct + w;
    float *lp = logp + wid * NA;
    row_each<K>(lane, NA, [&](int j, int c) {
        float v = value(j, c) - lse;
        lp[c] = v;
        if (q)
            e += expf(v) * z[c];
    });
    if (q) {
        e = warp_sum(e);
        if (lane == 0)
            q[wid] = e;
    }
}

int
fox__cuda_dueling(cudaStream_t s, int rows, const fox_cuda_dims *dm, const float *out,
                  const float *b2, const float *z, const int32_t *chosen, float *logp, float *q)
{
    if (dm->NAct * WARP > 1024)
        return FOX_EINVAL; /* a warp per action in one block */
    size_t shared = ((size_t)(1 + dm->D) * dm->OS + (size_t)dm->D * dm->NA) * sizeof(float);
    int warps = chosen ? dm->D : dm->NAct;
    FOX_CUDA_TRY(by_row_slots(dm->NA, [&](auto k) {
        return launch(dueling_kernel<decltype(k)::value>, rows, warps * WARP, shared, s, *dm, out,
                      b2, z, chosen, logp, chosen ? nullptr : q);
    }));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* IQN (twins of iqn_fwd's elementwise parts and iqn_bwd)                                     */

/*
 * cos(π·k·τ) for k = 0..NC−1 (k = 0 gives the constant 1), rows of τ; the
 * row and k of an output by fox_div_rem (ncu at batch 4096: 15.4 µs a
 * launch for 2 M outputs with a 64-bit division and remainder each).
 */
template <bool Fast>
__global__ void
iqn_cos_kernel(size_t n, fox_divider nc, const float *tau, float *cosf_)
{
    pdl_enter();
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const fox_quot_rem rk = fox_div_rem<Fast>(nc, e);
        cosf_[e] = cosf(PI_F * (float)(int)rk.r * tau[rk.q]);
    }
}

int
fox__cuda_iqn_cos(cudaStream_t s, int rows, int NC, const float *tau, float *cosf_)
{
    const size_t n = (size_t)rows * NC;
    const fox_divider nc = fox_divider_of((unsigned int)NC);
    auto kernel = fox_divider_ok(NC, n) ? iqn_cos_kernel<true> : iqn_cos_kernel<false>;
    FOX_CUDA_TRY(launch(kernel, grid_for(n, 256), 256, 0, s, n, nc, tau, cosf_));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The loss kernel (twin of greedy_next, c51_targets, c51_loss, dueling_bwd, iqn_loss, aux_loss) */

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
 * One block per sample b, 4 warps (D ≤ 4: warp d owns branch d's
 * cross-entropy). Shared memory: p [D × NA] target probabilities, m
 * [D × NA] projected targets, dl [D × NA] logit gradients at the chosen
 * actions, and per atom j of the shifted support its bin (lo, weight).
 */
__global__ void
loss_kernel(fox_cuda_dims dm, fox_cuda_loss_hp hp, fox_cuda_loss_args A)
{
    pdl_enter();
    extern __shared__ float sm[];
    const int D = dm.D, NA = dm.NA, NAct = dm.NAct, NT = dm.NT, B = A.B;
    float *p = sm, *m = sm + D * NA, *dl = sm + 2 * D * NA, *bj = sm + 3 * D * NA;
    float *s_tq = bj + NA; /* [D × NT] the IQN targets after Mech 1 */
    __shared__ int s_astar[FOX_MAX_BRANCHES], s_a[FOX_MAX_BRANCHES];
    __shared__ double s_c51[FOX_MAX_BRANCHES], s_iqn[LOSS_THREADS / WARP], s_aux[2];
    __shared__ float s_prio[FOX_MAX_BRANCHES], s_ep[FOX_MAX_BRANCHES], s_daux[1 + 4];
    const int b = blockIdx.x, t = threadIdx.x, lane = t % WARP, warp = t / WARP;
    const float w = A.w ? A.w[b] : 1.0f;
    /*
     * Aux: next-bar MSE (weighted) and regime CE (unweighted), each over B,
     * by the last warp's first lane now, while the others wait on their loads,
     * not by one thread at the end with the whole block waiting on it.
     */
    if (t == LOSS_THREADS - WARP && !A.tq_only) {
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
    /* The support as Mech 2 left it this step (pre_step_kernel); the layout's in a debug pass. */
    const float v_min = A.st.sites ? A.st.ctl->support[0] : dm.v_min;
    const float v_max = A.st.sites ? A.st.ctl->support[1] : dm.v_max;
    const float dz = (v_max - v_min) / (float)(NA - 1);

    /* Double DQN: a*_d = argmax_a E_online[Z_d(s′, a)], ties to the lowest a. */
    if (t < D) {
        const float *qn = A.nx_q + (size_t)b * NAct + dm.boff[t];
        int best = 0;
        float bq = qn[0];
        for (int a = 1; a < dm.bsize[t]; a++)
            if (qn[a] > bq) {
                best = a;
                bq = qn[a];
            }
        s_astar[t] = best;
        A.a_star[b * D + t] = best;
        s_a[t] = A.a[b * D + t];
    }
    const float g = hp.gamma_n * (1.0f - A.done[b]), rb = A.r[b];
    /*
     * SP4's first launch (tq_only): the raw IQN targets into A.tq and out, so
     * that TARGET_Q_BOUND can observe their p99 over the whole batch before
     * the second launch clips them.
     */
    if (A.tq_only) {
        __syncthreads();
        const float *qt0 = A.iq_q + (size_t)B * NT * NAct;
        for (int k = t; k < D * NT; k += blockDim.x) {
            int d = k / NT, j = k % NT, col_t = dm.boff[d] + s_astar[d];
            A.tq[(size_t)b * D * NT + k] =
                rb + g * (qt0[((size_t)b * NT + j) * NAct + col_t] + A.bq_tg[col_t]);
        }
        return;
    }
    /* The shifted support's bins, shared by every branch (c51_project). */
    for (int j = t; j < NA; j += blockDim.x) {
        float tz = rb + g * (v_min + (float)j * dz);
        /* A poisoned reward counts as 0, so the split indices stay in range (c51_project). */
        tz = isfinite(tz) ? tz : 0.0f;
        tz = tz < v_min ? v_min : tz > v_max ? v_max : tz;
        float bb = (tz - v_min) / dz;
        bb = bb < 0.0f ? 0.0f : bb > (float)(NA - 1) ? (float)(NA - 1) : bb;
        bj[j] = bb;
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
        const float *pd = p + d * NA;
        float acc = 0.0f;
        int j0 = 0, j1 = NA; /* the first j with bj[j] > i − 1 */
        while (j0 < j1) {
            int mid = (j0 + j1) / 2;
            if (bj[mid] > (float)(i - 1))
                j1 = mid;
            else
                j0 = mid + 1;
        }
        for (int j = j0; j < NA && bj[j] < (float)(i + 1); j++) {
            float bb = bj[j];
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
    /*
     * IQN targets θ′[d, j] = r + γⁿ(1 − done)·q_target(τ′_j)[a*_d] (iqn_targets),
     * then the Mech 1 site (site_target_q) in a training step: slot 46 on the
     * pre-clip values, clamp_finite at 10 × max(Q_ABS_REF, 1) (fixed) or
     * max(TARGET_Q_BOUND, 1) (adaptive: observed by fox__cuda_loss_targets first).
     */
    const float *qt = A.iq_q + (size_t)B * NT * NAct;
    int bad46 = 0;
    for (int k = t; k < D * NT; k += blockDim.x) {
        int d = k / NT, j = k % NT, col_t = dm.boff[d] + s_astar[d];
        float x = rb + g * (qt[((size_t)b * NT + j) * NAct + col_t] + A.bq_tg[col_t]);
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
    /* C51 cross-entropy of branch `warp` at its chosen action. */
    if (warp < D) {
        int d = warp;
        const float *lp = A.on_logp + ((size_t)b * D + d) * NA;
        const float *md = m + d * NA;
        float coef = w / (float)(B * D);
        float ce = 0.0f, msum = 0.0f, em = 0.0f, ep = 0.0f;
        for (int j = lane; j < NA; j += WARP) {
            ce -= md[j] * lp[j];
            msum += md[j];
            em += md[j] * A.z[j];
            ep += expf(lp[j]) * A.z[j];
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
    __syncthreads();
    /* IQN quantile Huber: thread per (i, flat action); only each branch's chosen action is live. */
    double iqn_part = 0.0;
    for (int k = t; k < NT * NAct; k += blockDim.x) {
        int i = k / NAct, c = k % NAct, d = branch_of(dm, c);
        int col = dm.boff[d] + s_a[d];
        float val = 0.0f;
        if (c == col) {
            float coef = w / (float)(B * D) / (float)NT;
            float theta = A.iq_q[((size_t)b * NT + i) * NAct + col] + A.bq_on[col];
            float tau = A.tau[b * NT + i], rho = 0.0f, drho = 0.0f;
            for (int j = 0; j < NT; j++) {
                float delta = s_tq[d * NT + j] - theta;
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
    if (lane == 0)
        s_iqn[warp] = iqn_part;
    __syncthreads();
    if (t == 0) {
        double c51 = 0.0, iqn = 0.0, q_abs = 0.0;
        float prio = 0.0f;
        for (int d = 0; d < D; d++) {
            c51 += s_c51[d];
            prio += s_prio[d];
            q_abs += s_ep[d];
        }
        for (int k = 0; k < LOSS_THREADS / WARP; k++)
            iqn += s_iqn[k];
        double *pp = A.parts + (size_t)b * FOX_CUDA_PARTS;
        pp[0] = c51;
        pp[1] = iqn;
        pp[2] = s_aux[0];
        pp[3] = s_aux[1];
        pp[4] = q_abs;
        pp[5] = s_ep[0];
        A.prio[b] = prio;
    }
    /*
     * The packed output gradient, head by head (padding 0): dueling backward
     * dV = Σ_d dl_d and dA = [a = a_d]·dl − dl/n, then the aux gradients.
     * Column k = a·NA + j of a head: (a, j) step with k, not a division each.
     */
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

int
fox__cuda_loss(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_loss_hp *hp,
               const fox_cuda_loss_args *a)
{
    if (dm->D > 4 || dm->NR > 4)
        return FOX_EINVAL;
    size_t smem = (size_t)(3 * dm->D * dm->NA + dm->NA + dm->D * dm->NT) * sizeof(float);
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
    return fox__cuda_p99_observe(s, &a->st, a->tq, (size_t)a->B * dm->D * dm->NT,
                                 FOX_ISV_TARGET_Q_BOUND, FOX_CUDA_P99_TQ);
}

/* ------------------------------------------------------------------------------------------ */
/* Packing the heads                                                                          */

/*
 * Parameter index behind element o of one net's packed heads, or −1 for
 * padding (which packs as 0 and unpacks nowhere). In 32 bits, a quarter of
 * the instructions of 64-bit divisions: PK < 2³² (fits_u32), which the
 * config's limits keep it (1.4·10⁹ floats at most).
 */
static __device__ __forceinline__ long long
packed_source(const fox_cuda_dims &dm, const fox_cuda_heads &hd, unsigned o)
{
    if (o < (unsigned)dm.pk_b1) {
        if (o >= (unsigned)dm.HW * dm.H2)
            return -1; /* alignment gap */
        int row = (int)(o / dm.H2), col = (int)(o % dm.H2), h = row / dm.HS, r = row % dm.HS;
        return r < hd.hid[h] ? (long long)(hd.w1[h] + (size_t)r * dm.H2 + col) : -1;
    }
    if (o < (unsigned)dm.pk_w2) {
        int row = (int)(o - dm.pk_b1), h = row / dm.HS, r = row % dm.HS;
        if (row >= dm.HW)
            return -1;
        return r < hd.hid[h] ? (long long)(hd.b1[h] + r) : -1;
    }
    if (o < (unsigned)dm.pk_b2) {
        unsigned e = o - (unsigned)dm.pk_w2, per = (unsigned)dm.OS * dm.HS;
        if (e >= FOX_CUDA_HEADS * per)
            return -1;
        int h = (int)(e / per), r = (int)(e % per / dm.HS), c = (int)(e % dm.HS);
        return r < hd.out[h] && c < hd.hid[h] ? (long long)(hd.w2[h] + (size_t)r * hd.hid[h] + c)
                                              : -1;
    }
    int e = (int)(o - dm.pk_b2), h = e / dm.OS, r = e % dm.OS;
    if (e >= dm.OW)
        return -1;
    return r < hd.out[h] ? (long long)(hd.b2[h] + r) : -1;
}

/* packed_source's 32-bit indices hold every element of the packed heads. */
static int
fits_u32(const fox_cuda_dims *dm)
{
    return dm->PK <= UINT32_MAX;
}

/*
 * pk [2][PK] from params [2][np], then the segments sg (online values) end
 * to end into sg.dst. When `sync` (a hard target sync due at this step,
 * read from ctl on the device) the target is first set to the online
 * parameters, and the target's packed copy is taken from the online values
 * directly, so the parts of the launch never depend on each other. In a
 * training step without a sync (`update`) the target has not moved since
 * its copy was last packed, so only the online half is: the launch's grid
 * is sized for a sync and the threads past the work exit.
 */
__global__ void
head_pack_kernel(fox_cuda_dims dm, fox_cuda_heads hd, fox_cuda_segments sg, float *params,
                 size_t np, float *pk, int update, int target_sync, const fox_cuda_ctl *ctl)
{
    pdl_enter();
    int sync = update && ctl->train_steps % target_sync == 0;
    size_t n_sync = sync ? np : 0, n_pk = n_sync + (update && !sync ? 1 : 2) * dm.PK;
    size_t n = n_pk + sg.total;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        if (k < n_sync) {
            params[np + k] = params[k];
            continue;
        }
        if (k >= n_pk) {
            size_t j = k - n_pk, at = j;
            int q = 0;
            while (at >= sg.len[q])
                at -= sg.len[q++];
            sg.dst[j] = params[sg.src[q] + at];
            continue;
        }
        size_t e = k - n_sync;
        int which = e >= dm.PK;
        size_t o = e - (which ? dm.PK : 0);
        long long i = packed_source(dm, hd, (unsigned)o);
        pk[e] = i < 0 ? 0.0f : params[(which && !sync ? np : 0) + (size_t)i];
    }
}

int
fox__cuda_head_pack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                    const fox_cuda_segments *sg, float *params, size_t np, float *pk,
                    const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl)
{
    int update = oc && ctl;
    if ((update && oc->polyak > 0.0f) || !fits_u32(dm))
        return FOX_EINVAL;
    size_t n = 2 * dm->PK + sg->total + (update ? np : 0);
    FOX_CUDA_TRY(launch(head_pack_kernel, grid_for(n, 256), 256, 0, s, *dm, *hd, *sg, params, np,
                        pk, update, update ? oc->target_sync : 1, ctl));
    return 0;
}

/* The packed heads' gradient into the parameter layout (padding dropped). */
__global__ void
head_unpack_kernel(fox_cuda_dims dm, fox_cuda_heads hd, const float *dpk, float *grads)
{
    pdl_enter();
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < dm.PK;
         k += (size_t)gridDim.x * blockDim.x) {
        long long i = packed_source(dm, hd, (unsigned)k);
        if (i >= 0)
            grads[i] = dpk[k];
    }
}

int
fox__cuda_head_unpack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                      const float *dpk, float *grads)
{
    if (!fits_u32(dm))
        return FOX_EINVAL;
    FOX_CUDA_TRY(
        launch(head_unpack_kernel, grid_for(dm->PK, 256), 256, 0, s, *dm, *hd, dpk, grads));
    return 0;
}
