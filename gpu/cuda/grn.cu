/*
 * grn.cu — the GRN kernels: the tail of a gated residual block (σ gate,
 * GLU, skip, LayerNorm with eps 1e-5 and biased variance) and its backward,
 * twins of gpu/cpu/net.c's grn_fwd tail, layernorm_fwd/bwd and glu_bwd in
 * the same arithmetic order wherever the order is not a parallel reduction.
 * With the stability site on, the tail also carries the fault point of slot
 * 12 and Mech 10 on h_s2 (device.cuh's h_s2_site).
 *
 * Not here: the GRN's matrix products and their epilogues (gemm.cu,
 * matmul.c) and their orchestration (net.c).
 */
#include <math.h>
#include <stdint.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/device.cuh"
#include "gpu/cuda/grn.h"

/* ------------------------------------------------------------------------------------------ */
/* GRN tail and LayerNorm (twins of grn_fwd's tail, layernorm_fwd/bwd, glu_bwd)               */

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
    fox_member_args(zgv, r, bg, bv, g, beta, xhat, rstd, y, glu, ln_in, st);
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
    fox_member_args(dy, xhat, rstd, g, zgv, du, dyx, dzgv);
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
