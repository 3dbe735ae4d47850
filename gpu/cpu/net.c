/*
 * net.c — foxnet v1 on the CPU: forward, the three losses and the full
 * backward, written for reading. Every CUDA kernel is checked against it.
 * This file holds the layers, the forward passes, the net's scratch and
 * the public entry points but one; loss_grad.c holds the training step
 * (fox_cpu_net_loss_grad): its targets, losses and the heads' backward.
 * What the two share is net_impl.h.
 *
 * Compiled twice from this one source: plain, FOX_REAL = float gives the
 * training backend (fox_cpu_net_*); with -DFOX_NET_DOUBLE, FOX_REAL = double
 * gives fox_cpud_net_*, used only by the finite-difference gradient checks.
 *
 * Conventions a port must copy exactly:
 *   - weights are row-major [out × in]; y = x·Wᵀ + b; every matrix product
 *     goes through cblas ?gemm (row-major);
 *   - LayerNorm over the feature dimension, biased variance, eps 1e-5;
 *   - ELU(x) = x > 0 ? x : expm1(x); its derivative is y + 1 for y ≤ 0;
 *   - dueling per branch on the logits, then log_softmax over atoms;
 *   - argmax ties go to the lowest sub-action index;
 *   - C51 loss = (1/(B·D)) Σ_b Σ_d w_b·CE_d; IQN loss = (1/(B·D)) Σ_b Σ_d
 *     w_b Σ_i (1/NT) Σ_j ρ_ij; aux next-bar = (1/B) Σ_b w_b·err²; aux regime
 *     = (1/B) Σ_b CE (unweighted);
 *   - d h_s2 is accumulated in the order C51 heads (× 1/(D+1) when
 *     bdq_trunk_scale), aux heads, IQN head — sentinel slots 33/34/35.
 *
 * Stability points (net_decl.h FOX_NET(hook_fn), set_hook), in step order, each right
 * after its buffer is written and before anything reads it; only the online
 * forward on s and the losses/backward have them:
 *   13 h_s1; 16 η2, 17 η1, 18 gate, 19 glu, 20 ln_in of GRN2; 12 h_s2 (the
 *   backend's Mech 10 clamp); 1 v_logits; 2 adv_logits; 5 target_logits;
 *   8 projected; 9 iqn_q_online; 10 iqn_q_target; 46 target_q (Mech 1);
 *   7 current_lp; 11 td_errors; 28 d_iqn_q; 3 aux_loss; 21 total_loss;
 *   24 d_v_logits; 25 d_adv_logits; 33 d_h_s2 post-main; 30 aux_d_h_s2;
 *   34 d_h_s2 post-aux; 26 iqn_trunk_grad; 27 iqn_d_h_s2; 35 d_h_s2
 *   post-IQN; 32 d_states (only when want_d_states).
 *
 * Not here: the clamps themselves, the isfinite guard, clipping and Adam
 * (optim.c), and every other part of the stability system: this file is the
 * unclamped math with named points where the backend's stability code runs.
 * Scratch is carved from one allocation in create, sized for max_batch: no
 * allocation per step (except the test-only layer entry points at the end).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "common/error.h"
#include "gpu/sentinel.h"
#include "gpu/cpu/net_impl.h"

#define LN_EPS R(1e-5)
#define PI_R R(3.14159265358979323846)

/* ------------------------------------------------------------------------------------------ */
/* Dense algebra                                                                              */

/*
 * Row-major C [M × N] = alpha·op(A)·op(Bm) + beta·C, K the inner size;
 * op(X) = Xᵀ when tX. A is stored [M × K] (or [K × M] when ta), Bm [K × N]
 * (or [N × K] when tb).
 */
static void
gemm(int ta, int tb, int M, int N, int K, real alpha, const real *A, const real *Bm, real beta,
     real *C)
{
    GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
         alpha, A, ta ? M : K, Bm, tb ? K : N, beta, C, N);
}

/* y [B × out] = x [B × in] · Wᵀ + b; W [out × in], b [out] or NULL (no bias). */
static void
linear_fwd(int B, int in, int out, const real *x, const real *W, const real *b, real *y)
{
    if (b)
        for (int r = 0; r < B; r++)
            memcpy(y + (size_t)r * out, b, (size_t)out * sizeof *y);
    gemm(0, 1, B, out, in, R(1), x, W, b ? R(1) : R(0), y);
}

/*
 * Backward of linear_fwd for dy [B × out]: dW [out × in] += dyᵀ·x,
 * db [out] += Σ_rows dy (db NULL: no bias), dx [B × in] = dx_beta·dx + dy·W
 * (dx NULL: not needed).
 */
void
linear_bwd(int B, int in, int out, const real *dy, const real *x, const real *W, real *dW,
           real *db, real *dx, real dx_beta)
{
    gemm(1, 0, out, in, B, R(1), dy, x, R(1), dW);
    if (db)
        for (int r = 0; r < B; r++)
            for (int o = 0; o < out; o++)
                db[o] += dy[(size_t)r * out + o];
    if (dx)
        gemm(0, 0, B, in, out, R(1), dy, W, dx_beta, dx);
}

/* ------------------------------------------------------------------------------------------ */
/* Elementwise ops (forward in place; backward multiplies d by f'(x) given the output y)      */

static void
elu_fwd(size_t n, real *x)
{
    for (size_t k = 0; k < n; k++)
        if (x[k] <= R(0))
            x[k] = R_EXPM1(x[k]);
}

/* ELU'(x) = 1 for x > 0, exp(x) = y + 1 otherwise. */
static void
elu_bwd(size_t n, const real *y, real *d)
{
    for (size_t k = 0; k < n; k++)
        if (y[k] <= R(0))
            d[k] *= y[k] + R(1);
}

static void
relu_fwd(size_t n, real *x)
{
    for (size_t k = 0; k < n; k++)
        if (x[k] < R(0))
            x[k] = R(0);
}

/* The kink at 0 takes derivative 0, like the forward's clamp. */
void
relu_bwd(size_t n, const real *y, real *d)
{
    for (size_t k = 0; k < n; k++)
        if (y[k] <= R(0))
            d[k] = R(0);
}

/* exp(−x) overflows to inf for very negative x, giving exactly 0: no NaN. */
static void
sigmoid_fwd(size_t n, real *x)
{
    for (size_t k = 0; k < n; k++)
        x[k] = R(1) / (R(1) + R_EXP(-x[k]));
}

/* GLU: g = σ ⊙ lin, where sg = σ(Wg·η1 + bg) and lin = Wv·η1 + bv. */
static void
glu_fwd(size_t n, const real *sg, const real *lin, real *g)
{
    for (size_t k = 0; k < n; k++)
        g[k] = sg[k] * lin[k];
}

/* d(pre-sigmoid) = du·lin·σ(1 − σ); d lin = du·σ. */
static void
glu_bwd(size_t n, const real *du, const real *sg, const real *lin, real *dzg, real *dlin)
{
    for (size_t k = 0; k < n; k++) {
        dzg[k] = du[k] * lin[k] * sg[k] * (R(1) - sg[k]);
        dlin[k] = du[k] * sg[k];
    }
}

/* Stable log_softmax of each of the rows [rows × N], in place. */
static void
log_softmax_rows(real *x, size_t rows, int N)
{
    for (size_t r = 0; r < rows; r++) {
        real *v = x + r * N;
        real mx = v[0];
        for (int j = 1; j < N; j++)
            mx = v[j] > mx ? v[j] : mx;
        real sum = R(0);
        for (int j = 0; j < N; j++)
            sum += R_EXP(v[j] - mx);
        real lse = mx + R_LOG(sum);
        for (int j = 0; j < N; j++)
            v[j] -= lse;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm over N features of B rows: biased variance, eps 1e-5                              */

/* x, xhat, y [B × N]; rstd [B]; g, b [N]. x may alias xhat. */
static void
layernorm_fwd(int B, int N, const real *x, const real *g, const real *b, real *xhat, real *rstd,
              real *y)
{
    for (int r = 0; r < B; r++) {
        const real *xr = x + (size_t)r * N;
        real mean = R(0), var = R(0);
        for (int k = 0; k < N; k++)
            mean += xr[k];
        mean /= (real)N;
        for (int k = 0; k < N; k++)
            var += (xr[k] - mean) * (xr[k] - mean);
        var /= (real)N;
        real rs = R(1) / R_SQRT(var + LN_EPS);
        rstd[r] = rs;
        real *xh = xhat + (size_t)r * N, *yr = y + (size_t)r * N;
        for (int k = 0; k < N; k++) {
            xh[k] = (xr[k] - mean) * rs;
            yr[k] = xh[k] * g[k] + b[k];
        }
    }
}

/*
 * dg, db [N] += Σ_rows; dx [B × N] = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂ ⊙ x̂)),
 * dx̂ = dy ⊙ g: the mean and the variance both depend on every x of the row.
 */
static void
layernorm_bwd(int B, int N, const real *dy, const real *xhat, const real *rstd, const real *g,
              real *dg, real *db, real *dx)
{
    for (int r = 0; r < B; r++) {
        const real *dyr = dy + (size_t)r * N, *xh = xhat + (size_t)r * N;
        real *dxr = dx + (size_t)r * N;
        real m1 = R(0), m2 = R(0);
        for (int k = 0; k < N; k++) {
            dg[k] += dyr[k] * xh[k];
            db[k] += dyr[k];
            real dxh = dyr[k] * g[k];
            m1 += dxh;
            m2 += dxh * xh[k];
        }
        m1 /= (real)N;
        m2 /= (real)N;
        for (int k = 0; k < N; k++)
            dxr[k] = rstd[r] * (dyr[k] * g[k] - m1 - xh[k] * m2);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* GRN(a; in → out)                                                                           */


/* The sentinel slots of one GRN forward's stages; -1 where none watches. */
typedef struct grn_points {
    int eta2, eta1, gate, glu, ln_in, out;
} grn_points;

static const grn_points no_points = {-1, -1, -1, -1, -1, -1};

/* a [B × in] → c->y [B × out], keeping what grn_bwd needs; pt names its stability points. */
static void
grn_fwd(const grn *g, int B, const real *a, grn_cache *c, const struct FOX_NET_T *hk,
        const grn_points *pt)
{
    int in = g->in, out = g->out;
    size_t n = (size_t)B * out;
    linear_fwd(B, in, out, a, g->p[FOX_GRN_W2], g->p[FOX_GRN_B2], c->eta2);
    elu_fwd(n, c->eta2);
    point(hk, pt->eta2, c->eta2, n);
    linear_fwd(B, out, out, c->eta2, g->p[FOX_GRN_W1], g->p[FOX_GRN_B1], c->eta1);
    point(hk, pt->eta1, c->eta1, n);
    linear_fwd(B, out, out, c->eta1, g->p[FOX_GRN_WG], g->p[FOX_GRN_BG], c->sg);
    sigmoid_fwd(n, c->sg);
    point(hk, pt->gate, c->sg, n);
    linear_fwd(B, out, out, c->eta1, g->p[FOX_GRN_WV], g->p[FOX_GRN_BV], c->lin);
    glu_fwd(n, c->sg, c->lin, c->glu);
    point(hk, pt->glu, c->glu, n);
    /* The LayerNorm input r + g is built in xhat and normalised in place. */
    if (g->p[FOX_GRN_WR])
        linear_fwd(B, in, out, a, g->p[FOX_GRN_WR], NULL, c->xhat);
    else
        memcpy(c->xhat, a, n * sizeof *a);
    for (size_t k = 0; k < n; k++)
        c->xhat[k] += c->glu[k];
    point(hk, pt->ln_in, c->xhat, n);
    layernorm_fwd(B, out, c->xhat, g->p[FOX_GRN_LN_G], g->p[FOX_GRN_LN_B], c->xhat, c->rstd, c->y);
    point(hk, pt->out, c->y, n);
}

/*
 * Backward of grn_fwd for dy [B × out]: accumulates into g->d, writes
 * da [B × in] (NULL: not needed). tmp: four [B × out] scratch buffers.
 */
void
grn_bwd(const grn *g, int B, const real *a, const grn_cache *c, const real *dy, real *da,
        real *const tmp[4])
{
    int in = g->in, out = g->out;
    size_t n = (size_t)B * out;
    real *du = tmp[0], *dzg = tmp[1], *dlin = tmp[2], *deta1 = tmp[3];
    layernorm_bwd(B, out, dy, c->xhat, c->rstd, g->p[FOX_GRN_LN_G], g->d[FOX_GRN_LN_G],
                  g->d[FOX_GRN_LN_B], du);
    /* Skip path first: it writes da, the main path then adds to it. */
    if (g->p[FOX_GRN_WR])
        linear_bwd(B, in, out, du, a, g->p[FOX_GRN_WR], g->d[FOX_GRN_WR], NULL, da, R(0));
    else if (da)
        memcpy(da, du, n * sizeof *da);
    glu_bwd(n, du, c->sg, c->lin, dzg, dlin);
    linear_bwd(B, out, out, dzg, c->eta1, g->p[FOX_GRN_WG], g->d[FOX_GRN_WG], g->d[FOX_GRN_BG],
               deta1, R(0));
    linear_bwd(B, out, out, dlin, c->eta1, g->p[FOX_GRN_WV], g->d[FOX_GRN_WV], g->d[FOX_GRN_BV],
               deta1, R(1));
    real *deta2 = du; /* du is spent */
    linear_bwd(B, out, out, deta1, c->eta2, g->p[FOX_GRN_W1], g->d[FOX_GRN_W1], g->d[FOX_GRN_B1],
               deta2, R(0));
    elu_bwd(n, c->eta2, deta2);
    linear_bwd(B, in, out, deta2, a, g->p[FOX_GRN_W2], g->d[FOX_GRN_W2], g->d[FOX_GRN_B2], da,
               R(1));
}

/* ------------------------------------------------------------------------------------------ */
/* Two-layer MLP x → ReLU(W1·x + b1) → W2·h + b2: value, branch and aux heads                 */


/* x [B × in] → hid [B × hid] (post-ReLU, kept for backward) → y [B × out]. */
static void
mlp2_fwd(const mlp2 *m, int B, const real *x, real *hid, real *y)
{
    linear_fwd(B, m->in, m->hid, x, m->w1, m->b1, hid);
    relu_fwd((size_t)B * m->hid, hid);
    linear_fwd(B, m->hid, m->out, hid, m->w2, m->b2, y);
}

/* dy [B × out] → weight grads (accumulated) and dx [B × in] += ; dhid [B × hid] scratch. */
void
mlp2_bwd(const mlp2 *m, int B, const real *x, const real *hid, const real *dy, real *dhid,
         real *dx)
{
    linear_bwd(B, m->hid, m->out, dy, hid, m->w2, m->dw2, m->db2, dhid, R(0));
    relu_bwd((size_t)B * m->hid, hid, dhid);
    linear_bwd(B, m->in, m->hid, dhid, x, m->w1, m->dw1, m->db1, dx, R(1));
}

/* ------------------------------------------------------------------------------------------ */
/* Dueling per branch on the logits                                                           */

/*
 * V [B × NA], A [B × n × NA] → logp [B × n × NA]:
 * logit[b,a,j] = V[b,j] + A[b,a,j] − mean_a′ A[b,a′,j], then log_softmax over j.
 */
static void
dueling_fwd(int B, int n, int NA, const real *V, const real *A, real *logp)
{
    for (int b = 0; b < B; b++)
        for (int j = 0; j < NA; j++) {
            const real *Ab = A + (size_t)b * n * NA;
            real mean = R(0);
            for (int a = 0; a < n; a++)
                mean += Ab[a * NA + j];
            mean /= (real)n;
            for (int a = 0; a < n; a++)
                logp[((size_t)b * n + a) * NA + j] = V[(size_t)b * NA + j] + Ab[a * NA + j] - mean;
        }
    log_softmax_rows(logp, (size_t)B * n, NA);
}

/* dlogit [B × n × NA] → dV [B × NA] += Σ_a dlogit; dA [B × n × NA] = dlogit − mean_a dlogit. */
void
dueling_bwd(int B, int n, int NA, const real *dlogit, real *dV, real *dA)
{
    for (int b = 0; b < B; b++)
        for (int j = 0; j < NA; j++) {
            real sum = R(0);
            for (int a = 0; a < n; a++)
                sum += dlogit[((size_t)b * n + a) * NA + j];
            dV[(size_t)b * NA + j] += sum;
            for (int a = 0; a < n; a++) {
                size_t k = ((size_t)b * n + a) * NA + j;
                dA[k] = dlogit[k] - sum / (real)n;
            }
        }
}

/* E[z] of the distribution with log-probabilities logp [NA]. */
real
expected_z(const real *logp, const real *z, int NA)
{
    real e = R(0);
    for (int j = 0; j < NA; j++)
        e += R_EXP(logp[j]) * z[j];
    return e;
}

/* ------------------------------------------------------------------------------------------ */
/* The network's views, caches and scratch                                                    */


void
point(const struct FOX_NET_T *hk, int slot, real *buf, size_t n)
{
    if (hk && hk->hook && slot >= 0)
        hk->hook(hk->hook_ctx, slot, buf, n);
}

void
FOX_NET(set_hook)(FOX_NET_T *net, FOX_NET(hook_fn) fn, void *ctx, int want_d_states)
{
    net->hook = fn;
    net->hook_ctx = ctx;
    net->want_d_states = want_d_states;
}

static int
imax(int x, int y)
{
    return x > y ? x : y;
}

static const real *
tensor(const fox_model_layout *lay, const real *params, int i)
{
    return fox_tensor_size(lay, i) ? params + lay->t[i].offset : NULL;
}

static real *
tensor_grad(const fox_model_layout *lay, real *grads, int i)
{
    return grads && fox_tensor_size(lay, i) ? grads + lay->t[i].offset : NULL;
}

static grn
grn_view(const fox_model_layout *lay, const real *params, real *grads, int first)
{
    grn g = {.in = lay->t[first + FOX_GRN_W2].cols, .out = lay->t[first + FOX_GRN_W2].rows};
    for (int k = 0; k < FOX_GRN_NT; k++) {
        g.p[k] = tensor(lay, params, first + k);
        g.d[k] = tensor_grad(lay, grads, first + k);
    }
    return g;
}

/* Tensors first .. first+3 are W1, b1, W2, b2 for every two-layer head. */
static mlp2
mlp2_view(const fox_model_layout *lay, const real *params, real *grads, int first)
{
    mlp2 m = {.in = lay->t[first].cols, .hid = lay->t[first].rows, .out = lay->t[first + 2].rows};
    m.w1 = tensor(lay, params, first);
    m.b1 = tensor(lay, params, first + 1);
    m.w2 = tensor(lay, params, first + 2);
    m.b2 = tensor(lay, params, first + 3);
    m.dw1 = tensor_grad(lay, grads, first);
    m.db1 = tensor_grad(lay, grads, first + 1);
    m.dw2 = tensor_grad(lay, grads, first + 2);
    m.db2 = tensor_grad(lay, grads, first + 3);
    return m;
}

net_view
net_view_of(const fox_model_layout *lay, const real *params, real *grads)
{
    net_view v;
    v.g1 = grn_view(lay, params, grads, FOX_P_GRN1_W2);
    v.g2 = grn_view(lay, params, grads, FOX_P_GRN2_W2);
    v.val = mlp2_view(lay, params, grads, FOX_P_VAL_W1);
    for (int d = 0; d < lay->n_branches; d++)
        v.br[d] = mlp2_view(lay, params, grads, FOX_P_BR0_W1 + FOX_BRANCH_NT * d);
    v.auxr = mlp2_view(lay, params, grads, FOX_P_AUXR_W1);
    v.auxg = mlp2_view(lay, params, grads, FOX_P_AUXG_W1);
    v.iqn.wphi = tensor(lay, params, FOX_P_IQN_WPHI);
    v.iqn.bphi = tensor(lay, params, FOX_P_IQN_BPHI);
    v.iqn.wq = tensor(lay, params, FOX_P_IQN_WQ);
    v.iqn.bq = tensor(lay, params, FOX_P_IQN_BQ);
    v.iqn.dwphi = tensor_grad(lay, grads, FOX_P_IQN_WPHI);
    v.iqn.dbphi = tensor_grad(lay, grads, FOX_P_IQN_BPHI);
    v.iqn.dwq = tensor_grad(lay, grads, FOX_P_IQN_WQ);
    v.iqn.dbq = tensor_grad(lay, grads, FOX_P_IQN_BQ);
    return v;
}

/*
 * Scratch is laid out twice by the same code: once with a NULL base to
 * count, once over the real allocation, so the two can never disagree.
 */
typedef struct carver {
    real *base;
    size_t used;
} carver;

static real *
take(carver *c, size_t n)
{
    real *p = c->base ? c->base + c->used : NULL;
    c->used += n;
    return p;
}

static void
carve_grn(carver *c, grn_cache *g, size_t B, size_t out)
{
    g->eta2 = take(c, B * out);
    g->eta1 = take(c, B * out);
    g->sg = take(c, B * out);
    g->lin = take(c, B * out);
    g->glu = take(c, B * out);
    g->xhat = take(c, B * out);
    g->rstd = take(c, B);
    g->y = take(c, B * out);
}

static void
carve_c51(carver *c, c51_acts *a, const fox_model_layout *lay, size_t B)
{
    carve_grn(c, &a->g1, B, (size_t)lay->H1);
    carve_grn(c, &a->g2, B, (size_t)lay->H2);
    a->val_hid = take(c, B * lay->HH);
    a->val = take(c, B * lay->NA);
    a->br_hid = take(c, (size_t)lay->n_branches * B * lay->HH);
    a->adv = take(c, B * lay->n_actions * lay->NA);
    a->logp = take(c, B * lay->n_actions * lay->NA);
}

static void
carve_iqn(carver *c, iqn_cache *q, const fox_model_layout *lay, size_t B)
{
    size_t rows = B * lay->NT;
    q->cosf = take(c, rows * lay->NC);
    q->phi = take(c, rows * lay->H2);
    q->x = take(c, rows * lay->H2);
    q->q = take(c, rows * lay->n_actions);
}

static void
carve_all(carver *c, struct FOX_NET_T *net)
{
    const fox_model_layout *lay = &net->lay;
    size_t B = (size_t)net->max_batch, D = (size_t)lay->n_branches;
    net->z = take(c, D * lay->NA);
    carve_c51(c, &net->on, lay, B);
    carve_c51(c, &net->on_next, lay, B);
    carve_c51(c, &net->tgt, lay, B);
    carve_iqn(c, &net->iq_on, lay, B);
    carve_iqn(c, &net->iq_tgt, lay, B);
    net->aux.ret_hid = take(c, B * lay->HA);
    net->aux.ret = take(c, B);
    net->aux.reg_hid = take(c, B * lay->HA);
    net->aux.reg_logp = take(c, B * lay->NR);
    net->m = take(c, B * D * lay->NA);
    net->p_tmp = take(c, lay->NA);
    net->target_q = take(c, B * D * lay->NT);
    net->cur_lp = take(c, B * D * lay->NA);
    net->td = take(c, B);
    net->aux_loss_v = take(c, 2);
    net->total_loss_v = take(c, 1);
    net->d_logit = take(c, B * lay->n_actions * lay->NA);
    net->d_adv = take(c, B * lay->n_actions * lay->NA);
    net->d_val = take(c, B * lay->NA);
    net->d_hid = take(c, B * imax(lay->HH, lay->HA));
    net->dh_c51 = take(c, B * lay->H2);
    net->dh_aux = take(c, B * lay->H2);
    net->dh_iqn = take(c, B * lay->H2);
    net->dh_s2 = take(c, B * lay->H2);
    net->dh_s1 = take(c, B * lay->H1);
    net->d_states = take(c, B * lay->S);
    net->d_q = take(c, B * lay->NT * lay->n_actions);
    net->d_x = take(c, B * lay->NT * lay->H2);
    net->d_phi = take(c, B * lay->NT * lay->H2);
    net->d_ret = take(c, B);
    net->d_reg = take(c, B * lay->NR);
    for (int k = 0; k < 4; k++)
        net->grn_tmp[k] = take(c, B * imax(lay->H1, lay->H2));
}

int
FOX_NET(create)(FOX_NET_T **out, const fox_model_layout *lay, int max_batch)
{
    if (!out)
        return FOX_EINVAL;
    *out = NULL;
    if (!lay || max_batch < 1 || lay->NA < 2 || lay->n_branches < 1 ||
        lay->n_branches > FOX_MAX_BRANCHES || lay->n_params == 0)
        return FOX_EINVAL;
    FOX_NET_T *net = calloc(1, sizeof *net);
    if (!net)
        return FOX_ENOMEM;
    net->lay = *lay;
    net->max_batch = max_batch;
    carver c = {NULL, 0};
    carve_all(&c, net);
    net->arena = calloc(c.used, sizeof *net->arena);
    net->a_star = calloc((size_t)max_batch * lay->n_branches, sizeof *net->a_star);
    if (!net->arena || !net->a_star) {
        FOX_NET(destroy)(net);
        return FOX_ENOMEM;
    }
    c = (carver){net->arena, 0};
    carve_all(&c, net);
    for (int d = 0; d < lay->n_branches; d++)
        FOX_NET(set_support)(net, d, (real)lay->v_min, (real)lay->v_max);
    net->td_scale = R(1);
    *out = net;
    return FOX_OK;
}

int
FOX_NET(set_td_scale)(FOX_NET_T *net, FOX_REAL scale)
{
    if (!net || !isfinite(scale) || !(scale > R(0)))
        return FOX_EINVAL;
    net->td_scale = scale;
    return FOX_OK;
}

int
FOX_NET(set_support)(FOX_NET_T *net, int d, FOX_REAL lo, FOX_REAL hi)
{
    if (!net || d < 0 || d >= net->lay.n_branches || !isfinite(lo) || !isfinite(hi) ||
        !(lo < hi))
        return FOX_EINVAL;
    int NA = net->lay.NA;
    real dz = (hi - lo) / (real)(NA - 1);
    net->sup_min[d] = lo;
    net->sup_max[d] = hi;
    for (int j = 0; j < NA; j++)
        net->z[(size_t)d * NA + j] = lo + (real)j * dz;
    return FOX_OK;
}

void
FOX_NET(destroy)(FOX_NET_T *net)
{
    if (!net)
        return;
    free(net->arena);
    free(net->a_star);
    free(net);
}

/* ------------------------------------------------------------------------------------------ */
/* Forward passes                                                                             */

/* Branch d's [B × n_d × NA] block of a per-action buffer (c51_acts, d_logit, d_adv). */
real *
branch_rows(const fox_model_layout *lay, real *base, int B, int d)
{
    return base + (size_t)B * lay->branch_off[d] * lay->NA;
}

/* Branch d's hidden layer [B × HH]. */
real *
branch_hid(const fox_model_layout *lay, const c51_acts *a, int B, int d)
{
    return a->br_hid + (size_t)d * B * lay->HH;
}

/*
 * s [B × S] → trunk, value and branch heads, per-branch dueling
 * log-probabilities. hk is the net for the online forward on s, whose
 * stability points (h_s1, GRN2's stages, h_s2, the logits) it calls; NULL
 * for the other passes.
 */
void
c51_forward(const net_view *v, const fox_model_layout *lay, c51_acts *a, const real *s, int B,
            const struct FOX_NET_T *hk)
{
    static const grn_points g1_pt = {-1, -1, -1, -1, -1, FOX_SENT_H_S1};
    static const grn_points g2_pt = {FOX_SENT_H_S2_ETA2, FOX_SENT_H_S2_ETA1,  FOX_SENT_H_S2_GATE,
                                     FOX_SENT_H_S2_GLU,  FOX_SENT_H_S2_LN_IN, FOX_SENT_H_S2};
    grn_fwd(&v->g1, B, s, &a->g1, hk, hk ? &g1_pt : &no_points);
    grn_fwd(&v->g2, B, a->g1.y, &a->g2, hk, hk ? &g2_pt : &no_points);
    mlp2_fwd(&v->val, B, a->g2.y, a->val_hid, a->val);
    point(hk, FOX_SENT_V_LOGITS, a->val, (size_t)B * lay->NA);
    for (int d = 0; d < lay->n_branches; d++)
        mlp2_fwd(&v->br[d], B, a->g2.y, branch_hid(lay, a, B, d), branch_rows(lay, a->adv, B, d));
    point(hk, FOX_SENT_ADV_LOGITS, a->adv, (size_t)B * lay->n_actions * lay->NA);
    for (int d = 0; d < lay->n_branches; d++)
        dueling_fwd(B, lay->branch_size[d], lay->NA, a->val, branch_rows(lay, a->adv, B, d),
                    branch_rows(lay, a->logp, B, d));
}

/*
 * IQN head on h [B × H2] and fractions tau [B × NT] (rows b·NT + i):
 * φ = ReLU(Wφ·cos(π k τ) + bφ), k = 0..NC−1 (k = 0 gives the constant 1);
 * q = Wq·(h ⊙ φ) + bq → c->q [B·NT × NAct].
 */
void
iqn_fwd(const iqn_head *h, const fox_model_layout *lay, int B, const real *hs2, const real *tau,
        iqn_cache *c)
{
    int rows = B * lay->NT, NC = lay->NC, H2 = lay->H2;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < NC; k++)
            c->cosf[(size_t)r * NC + k] = R_COS(PI_R * (real)k * tau[r]);
    linear_fwd(rows, NC, H2, c->cosf, h->wphi, h->bphi, c->phi);
    relu_fwd((size_t)rows * H2, c->phi);
    for (int r = 0; r < rows; r++) {
        const real *hb = hs2 + (size_t)(r / lay->NT) * H2;
        for (int k = 0; k < H2; k++)
            c->x[(size_t)r * H2 + k] = hb[k] * c->phi[(size_t)r * H2 + k];
    }
    linear_fwd(rows, H2, lay->n_actions, c->x, h->wq, h->bq, c->q);
}

/* Aux heads on h_s2 [B × H2]: the scaled next-bar return and the regime log-probabilities. */
void
aux_fwd(const net_view *v, const fox_model_layout *lay, int B, const real *hs2, aux_cache *c)
{
    mlp2_fwd(&v->auxr, B, hs2, c->ret_hid, c->ret);
    mlp2_fwd(&v->auxg, B, hs2, c->reg_hid, c->reg_logp);
    log_softmax_rows(c->reg_logp, (size_t)B, lay->NR);
}

/* ------------------------------------------------------------------------------------------ */
/* Public entry points                                                                        */

int
FOX_NET(q_values)(FOX_NET_T *net, const FOX_REAL *params, const FOX_REAL *s, int B, FOX_REAL *q)
{
    if (!net || !params || !s || !q || B < 1 || B > net->max_batch)
        return FOX_EINVAL;
    const fox_model_layout *lay = &net->lay;
    net_view v = net_view_of(lay, params, NULL);
    c51_forward(&v, lay, &net->on_next, s, B, NULL);
    for (int b = 0; b < B; b++)
        for (int d = 0; d < lay->n_branches; d++) {
            int n = lay->branch_size[d];
            for (int a = 0; a < n; a++) {
                const real *lp =
                    branch_rows(lay, net->on_next.logp, B, d) + ((size_t)b * n + a) * lay->NA;
                q[(size_t)b * lay->n_actions + lay->branch_off[d] + a] =
                    expected_z(lp, net->z + (size_t)d * lay->NA, lay->NA);
            }
        }
    return FOX_OK;
}

void
FOX_NET(sentinel_buffer)(FOX_NET_T *net, int slot, int B, FOX_REAL **ptr, size_t *n)
{
    const fox_model_layout *lay = &net->lay;
    size_t b = (size_t)B, D = (size_t)lay->n_branches, NA = (size_t)lay->NA;
    size_t H2 = (size_t)lay->H2, NT = (size_t)lay->NT, NAct = (size_t)lay->n_actions;
    const struct {
        int slot;
        real *p;
        size_t len;
    } own[] = {
        {FOX_SENT_V_LOGITS, net->on.val, b * NA},
        {FOX_SENT_ADV_LOGITS, net->on.adv, b * NAct * NA},
        {FOX_SENT_AUX_LOSS, net->aux_loss_v, 2},
        {FOX_SENT_TARGET_LOGITS, net->tgt.logp, b * NAct * NA},
        {FOX_SENT_CURRENT_LP, net->cur_lp, b * D * NA},
        {FOX_SENT_PROJECTED, net->m, b * D * NA},
        {FOX_SENT_IQN_Q_ONLINE, net->iq_on.q, b * NT * NAct},
        {FOX_SENT_IQN_Q_TARGET, net->iq_tgt.q, b * NT * NAct},
        {FOX_SENT_TD_ERRORS, net->td, b},
        {FOX_SENT_H_S2, net->on.g2.y, b * H2},
        {FOX_SENT_H_S1, net->on.g1.y, b * (size_t)lay->H1},
        {FOX_SENT_H_S2_ETA2, net->on.g2.eta2, b * H2},
        {FOX_SENT_H_S2_ETA1, net->on.g2.eta1, b * H2},
        {FOX_SENT_H_S2_GATE, net->on.g2.sg, b * H2},
        {FOX_SENT_H_S2_GLU, net->on.g2.glu, b * H2},
        {FOX_SENT_H_S2_LN_IN, net->on.g2.xhat, b * H2},
        {FOX_SENT_TOTAL_LOSS, net->total_loss_v, 1},
        {FOX_SENT_D_V_LOGITS, net->d_val, b * NA},
        {FOX_SENT_D_ADV_LOGITS, net->d_adv, b * NAct * NA},
        {FOX_SENT_IQN_TRUNK_GRAD, net->d_x, b * NT * H2},
        {FOX_SENT_IQN_D_H_S2, net->dh_iqn, b * H2},
        {FOX_SENT_D_IQN_Q, net->d_q, b * NT * NAct},
        {FOX_SENT_AUX_D_H_S2, net->dh_aux, b * H2},
        {FOX_SENT_D_STATES, net->d_states, b * (size_t)lay->S},
        {FOX_SENT_D_H_S2_POST_MAIN, net->dh_s2, b * H2},
        {FOX_SENT_D_H_S2_POST_AUX, net->dh_s2, b * H2},
        {FOX_SENT_D_H_S2_POST_IQN, net->dh_s2, b * H2},
        {FOX_SENT_TARGET_Q_POST_CLIP, net->target_q, b * D * NT},
        {FOX_SENT_ATOM_SPAN_MAX, net->z, (size_t)D * NA},
        {FOX_SENT_H_S2_MAX_ABS, net->on.g2.y, b * H2},
    };
    *ptr = NULL;
    *n = 0;
    if (B < 1 || B > net->max_batch)
        return;
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
        if (own[k].slot == slot) {
            *ptr = own[k].p;
            *n = own[k].len;
            return;
        }
}

/* ------------------------------------------------------------------------------------------ */
/* Test-only layer entry points (they allocate)                                               */

static size_t
grn_tensor_size(int k, int in, int out)
{
    switch (k) {
    case FOX_GRN_W2:
        return (size_t)out * in;
    case FOX_GRN_WR:
        return in == out ? 0 : (size_t)out * in;
    case FOX_GRN_W1:
    case FOX_GRN_WG:
    case FOX_GRN_WV:
        return (size_t)out * out;
    default:
        return (size_t)out;
    }
}

int
FOX_NET(grn_fwd_bwd)(int in, int out, int B, const FOX_REAL *const p[FOX_GRN_NT],
                     const FOX_REAL *a, const FOX_REAL *dy, FOX_REAL *y,
                     FOX_REAL *const dp[FOX_GRN_NT], FOX_REAL *da)
{
    if (in < 1 || out < 1 || B < 1 || !p || !a || !dy || !y || !dp)
        return FOX_EINVAL;
    grn g = {.in = in, .out = out};
    for (int k = 0; k < FOX_GRN_NT; k++) {
        /* Every tensor present except Wr, which exists exactly when in != out. */
        int want = k != FOX_GRN_WR || in != out;
        if ((p[k] != NULL) != want || (dp[k] != NULL) != want)
            return FOX_EINVAL;
    }
    for (int k = 0; k < FOX_GRN_NT; k++) {
        g.p[k] = p[k];
        g.d[k] = dp[k];
        if (dp[k])
            memset(dp[k], 0, grn_tensor_size(k, in, out) * sizeof *dp[k]);
    }
    size_t n = (size_t)B * out;
    real *buf = calloc(11 * n + (size_t)B, sizeof *buf);
    if (!buf)
        return FOX_ENOMEM;
    grn_cache c = {.eta2 = buf,
                   .eta1 = buf + n,
                   .sg = buf + 2 * n,
                   .lin = buf + 3 * n,
                   .glu = buf + 4 * n,
                   .xhat = buf + 5 * n,
                   .rstd = buf + 11 * n,
                   .y = buf + 6 * n};
    real *const tmp[4] = {buf + 7 * n, buf + 8 * n, buf + 9 * n, buf + 10 * n};
    grn_fwd(&g, B, a, &c, NULL, &no_points);
    memcpy(y, c.y, n * sizeof *y);
    grn_bwd(&g, B, a, &c, dy, da, tmp);
    free(buf);
    return FOX_OK;
}

int
FOX_NET(layernorm_fwd_bwd)(int N, int B, const FOX_REAL *x, const FOX_REAL *g, const FOX_REAL *b,
                           const FOX_REAL *dy, FOX_REAL *y, FOX_REAL *dx, FOX_REAL *dg,
                           FOX_REAL *db)
{
    if (N < 1 || B < 1 || !x || !g || !b || !dy || !y || !dx || !dg || !db)
        return FOX_EINVAL;
    size_t n = (size_t)B * N;
    real *buf = malloc((n + (size_t)B) * sizeof *buf);
    if (!buf)
        return FOX_ENOMEM;
    memset(dg, 0, (size_t)N * sizeof *dg);
    memset(db, 0, (size_t)N * sizeof *db);
    layernorm_fwd(B, N, x, g, b, buf, buf + n, y);
    layernorm_bwd(B, N, dy, buf, buf + n, g, dg, db, dx);
    free(buf);
    return FOX_OK;
}
