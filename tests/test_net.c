/*
 * test_net.c — unit tests of the CPU reference network (gpu/cpu/net.c),
 * the parameter layout (gpu/model.c) and the optimizer (gpu/cpu/optim.c).
 *
 * The gradient checks run the double-precision twin (fox_cpud_net_*) with
 * central differences on a shrunk network, for every element of every
 * tensor, for each loss part and both target modes; layer-level checks
 * cover the GRN (with and without Wr) and LayerNorm. The float build is
 * checked against the double one. The replay ring's priority updates too.
 * Not tested here: the training loop that calls these (test_engine.c) and
 * the CUDA kernels (the GPU parity suite).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/bounds.h"
#include "gpu/config.h"
#include "gpu/cpu/net.h"
#include "gpu/cpu/optim.h"
#include "gpu/cpu/replay.h"
#include "gpu/per.h"
#include "common/error.h"
#include "gpu/model.h"
#include "gpu/rng.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"

/*
 * Finite differences: central, step 1e-6. In double the truncation error is
 * ~h²·f‴ ≈ 1e-12 and the rounding error ~1e-16·|L|/h ≈ 1e-10, so an element
 * passes at relative error 1e-5, or absolute 1e-8 for gradients too small
 * for a relative test to mean anything.
 */
#define FD_H   1e-6
#define FD_REL 1e-5
#define FD_ABS 1e-8
/* Relative errors are reported only for gradients at least this large. */
#define FD_REPORT_MIN 1e-4

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                    */

/* The shrunk network of the gradient checks: every width distinct, so a swapped index shows. */
static void
small_config(fox_config *c)
{
    fox_config_default(c);
    c->state_dim = 8;
    c->h1 = 12;
    c->h2 = 10;
    c->head_hidden = 8;
    c->n_atoms = 11;
    c->n_tau = 4;
    c->n_cos = 6;
    c->aux_hidden = 5;
    c->n_regimes = 4;
    c->size_levels = 4;
    c->order_types = 2;
    c->urgency_levels = 3;
    c->v_min = -3.0f;
    c->v_max = 3.0f;
}

static double
uniform(fox_rng *g, double lo, double hi)
{
    return lo + (hi - lo) * fox_rng_uniform(g);
}

/* Params from fox_model_init_params plus uniform noise on every real element, in double. */
static double *
params_make(const fox_model_layout *lay, uint64_t seed, double noise)
{
    float *pf = malloc(lay->n_params * sizeof *pf);
    double *p = calloc(lay->n_params, sizeof *p);
    ck_assert(pf && p);
    fox_model_init_params(lay, pf, seed);
    fox_rng g;
    fox_rng_seed(&g, seed ^ 0x5eedULL);
    for (int i = 0; i < FOX_P_COUNT; i++)
        for (size_t k = 0; k < fox_tensor_size(lay, i); k++) {
            size_t o = lay->t[i].offset + k;
            p[o] = pf[o] + uniform(&g, -noise, noise);
        }
    free(pf);
    return p;
}

/* One batch of random inputs, in double, with float copies for the float build. */
typedef struct inputs {
    int B;
    double *s, *s_next, *r, *done, *w, *aux_ret, *tau, *tau_next;
    float *fs, *fs_next, *fr, *fdone, *fw, *faux_ret, *ftau, *ftau_next;
    int32_t *a, *regime;
} inputs;

static double *
dalloc(size_t n)
{
    double *p = calloc(n, sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *
to_float(const double *x, size_t n)
{
    float *f = malloc(n * sizeof *f);
    ck_assert_ptr_nonnull(f);
    for (size_t k = 0; k < n; k++)
        f[k] = (float)x[k];
    return f;
}

static void
inputs_make(inputs *in, const fox_model_layout *lay, int B, uint64_t seed)
{
    fox_rng g;
    fox_rng_seed(&g, seed);
    int S = lay->S, D = lay->n_branches, NT = lay->NT;
    in->B = B;
    in->s = dalloc((size_t)B * S);
    in->s_next = dalloc((size_t)B * S);
    in->r = dalloc(B);
    in->done = dalloc(B);
    in->w = dalloc(B);
    in->aux_ret = dalloc(B);
    in->tau = dalloc((size_t)B * NT);
    in->tau_next = dalloc((size_t)B * NT);
    in->a = calloc((size_t)B * D, sizeof *in->a);
    in->regime = calloc(B, sizeof *in->regime);
    ck_assert(in->a && in->regime);
    for (int k = 0; k < B * S; k++) {
        in->s[k] = fox_rng_normal(&g);
        in->s_next[k] = fox_rng_normal(&g);
    }
    for (int b = 0; b < B; b++) {
        in->r[b] = uniform(&g, -1.5, 1.5);
        in->done[b] = b == B - 1 ? 1.0 : 0.0; /* one terminal row: no bootstrap */
        in->w[b] = uniform(&g, 0.5, 1.5);
        in->aux_ret[b] = 0.01 * fox_rng_normal(&g);
        in->regime[b] = (int32_t)fox_rng_below(&g, (uint32_t)lay->NR);
        for (int d = 0; d < D; d++)
            in->a[b * D + d] = (int32_t)fox_rng_below(&g, (uint32_t)lay->branch_size[d]);
        for (int i = 0; i < NT; i++) {
            in->tau[b * NT + i] = uniform(&g, 0.02, 0.98);
            in->tau_next[b * NT + i] = uniform(&g, 0.02, 0.98);
        }
    }
    in->fs = to_float(in->s, (size_t)B * S);
    in->fs_next = to_float(in->s_next, (size_t)B * S);
    in->fr = to_float(in->r, B);
    in->fdone = to_float(in->done, B);
    in->fw = to_float(in->w, B);
    in->faux_ret = to_float(in->aux_ret, B);
    in->ftau = to_float(in->tau, (size_t)B * NT);
    in->ftau_next = to_float(in->tau_next, (size_t)B * NT);
}

static void
inputs_free(inputs *in)
{
    void *ptrs[] = {in->s,   in->s_next,   in->r,    in->done,      in->w,  in->aux_ret,
                    in->tau, in->tau_next, in->fs,   in->fs_next,   in->fr, in->fdone,
                    in->fw,  in->faux_ret, in->ftau, in->ftau_next, in->a,  in->regime};
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++)
        free(ptrs[k]);
}

static fox_cpud_net_batch
batch_double(const inputs *in)
{
    return (fox_cpud_net_batch){in->B, in->s,       in->s_next, in->a,   in->r,       in->done,
                                in->w, in->aux_ret, in->regime, in->tau, in->tau_next};
}

static fox_cpu_net_batch
batch_float(const inputs *in)
{
    return (fox_cpu_net_batch){in->B,  in->fs,       in->fs_next, in->a,    in->fr,       in->fdone,
                               in->fw, in->faux_ret, in->regime,  in->ftau, in->ftau_next};
}

/* Scale 0.01: labels of ~1 after scaling, so the MSE term is not negligible. */
static fox_cpud_net_hparams
hparams_double(double iqn_lambda, double aux_lambda, int target_mode, int bdq)
{
    return (fox_cpud_net_hparams){0.9, iqn_lambda, aux_lambda, 0.01, target_mode, bdq};
}

/* ------------------------------------------------------------------------------------------ */
/* Finite-difference machinery                                                                */

typedef double (*scalar_fn)(void *ctx);

/* Worst element of one array's check. */
typedef struct fd_stat {
    double worst_rel; /* over elements with |gradient| ≥ FD_REPORT_MIN, or failing ones */
    double worst_abs;
    size_t worst_k;
    double worst_fd, worst_an;
    int fails;
} fd_stat;

/* Compare d f/d x[k] by central differences with an[k], for every k < n. */
static void
fd_check_array(fd_stat *st, scalar_fn f, void *ctx, double *x, const double *an, size_t n)
{
    memset(st, 0, sizeof *st);
    for (size_t k = 0; k < n; k++) {
        double x0 = x[k];
        x[k] = x0 + FD_H;
        double lp = f(ctx);
        x[k] = x0 - FD_H;
        double lm = f(ctx);
        x[k] = x0;
        double fd = (lp - lm) / (2.0 * FD_H);
        double err = fabs(fd - an[k]);
        double scale = fmax(fabs(fd), fabs(an[k]));
        double rel = scale > 0.0 ? err / scale : 0.0;
        int bad = rel > FD_REL && err > FD_ABS;
        st->fails += bad;
        st->worst_abs = fmax(st->worst_abs, err);
        int counted = scale >= FD_REPORT_MIN || bad;
        if ((counted && rel > st->worst_rel) || (bad && st->fails == 1)) {
            st->worst_rel = rel;
            st->worst_k = k;
            st->worst_fd = fd;
            st->worst_an = an[k];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Layout and initialisation                                                                  */

START_TEST(test_layout_default)
{
    fox_config c;
    fox_config_default(&c);
    fox_model_layout lay;
    FOX_CK_OK(fox_model_layout_init(&lay, &c));
    /* The defaults: a 64-wide trunk and heads, the direction's three sub-actions and one each. */
    ck_assert_uint_eq(lay.n_real, 90736);
    ck_assert_int_eq(lay.n_branches, 4);
    ck_assert_int_eq(lay.n_actions, 6);
    ck_assert_int_eq(lay.branch_off[3], 5);
    size_t end = 0, sum = 0;
    for (int i = 0; i < FOX_P_COUNT; i++) {
        const fox_tensor_desc *t = &lay.t[i];
        ck_assert_msg(t->offset % FOX_PARAM_ALIGN == 0, "%s offset %zu", t->name, t->offset);
        ck_assert_msg(t->offset >= end, "%s overlaps its predecessor", t->name);
        ck_assert_ptr_nonnull(t->name);
        end = t->offset + fox_tensor_size(&lay, i);
        sum += fox_tensor_size(&lay, i);
    }
    ck_assert_uint_eq(sum, lay.n_real);
    ck_assert_uint_ge(lay.n_params, end);
    ck_assert_uint_eq(lay.n_params % FOX_PARAM_ALIGN, 0);

    ck_assert_str_eq(lay.t[FOX_P_GRN1_W2].name, "grn1.w2");
    ck_assert_int_eq(lay.t[FOX_P_GRN1_W2].rows, 64);
    ck_assert_int_eq(lay.t[FOX_P_GRN1_W2].cols, 64);
    /* The trunk keeps its width: the residuals need no projection. */
    ck_assert_uint_eq(fox_tensor_size(&lay, FOX_P_GRN1_WR), 0);
    ck_assert_uint_eq(fox_tensor_size(&lay, FOX_P_GRN2_WR), 0);
    ck_assert_int_eq(lay.t[FOX_P_BR1_W2].rows, 51);
    ck_assert_int_eq(lay.t[FOX_P_IQN_WPHI].rows, 64);
    ck_assert_int_eq(lay.t[FOX_P_IQN_WPHI].cols, 64);
    ck_assert_int_eq(lay.t[FOX_P_IQN_WQ].rows, 6);

    /* A wider trunk projects its residuals: h2 × h1 for the second GRN. */
    fox_config w;
    fox_config_default(&w);
    w.h1 = 256;
    w.h2 = 128;
    FOX_CK_OK(fox_model_layout_init(&lay, &w));
    ck_assert_int_eq(lay.t[FOX_P_GRN2_WR].rows, 128);
    ck_assert_int_eq(lay.t[FOX_P_GRN2_WR].cols, 256);
    FOX_CK_OK(fox_model_layout_init(&lay, &c));

    /* Groups (docs/design.md, "The model"): LayerNorm γ/β apart from their GRN. */
    ck_assert_int_eq(lay.t[FOX_P_GRN1_WG].group, FOX_GROUP_GRN1);
    ck_assert_int_eq(lay.t[FOX_P_GRN1_LN_G].group, FOX_GROUP_LAYERNORM);
    ck_assert_int_eq(lay.t[FOX_P_GRN2_LN_B].group, FOX_GROUP_LAYERNORM);
    ck_assert_int_eq(lay.t[FOX_P_GRN2_WR].group, FOX_GROUP_GRN2);
    ck_assert_int_eq(lay.t[FOX_P_VAL_B2].group, FOX_GROUP_VALUE);
    ck_assert_int_eq(lay.t[FOX_P_BR3_W1].group, FOX_GROUP_BRANCHES);
    ck_assert_int_eq(lay.t[FOX_P_IQN_BQ].group, FOX_GROUP_IQN);
    ck_assert_int_eq(lay.t[FOX_P_AUXR_W2].group, FOX_GROUP_AUX_NEXT_BAR);
    ck_assert_int_eq(lay.t[FOX_P_AUXG_W2].group, FOX_GROUP_AUX_REGIME);
}
END_TEST

START_TEST(test_layout_hash_and_identity)
{
    fox_config c;
    fox_config_default(&c);
    fox_model_layout a, b;
    FOX_CK_OK(fox_model_layout_init(&a, &c));
    FOX_CK_OK(fox_model_layout_init(&b, &c));
    ck_assert_uint_eq(fox_model_layout_hash(&a), fox_model_layout_hash(&b));
    c.h2 = 96;
    FOX_CK_OK(fox_model_layout_init(&b, &c));
    ck_assert_uint_ne(fox_model_layout_hash(&a), fox_model_layout_hash(&b));
    fox_config_default(&c);
    c.n_atoms = 21;
    FOX_CK_OK(fox_model_layout_init(&b, &c));
    ck_assert_uint_ne(fox_model_layout_hash(&a), fox_model_layout_hash(&b));

    /* in == out: the skip is the identity and Wr takes no room. */
    fox_config_default(&c);
    c.h1 = c.state_dim;
    FOX_CK_OK(fox_model_layout_init(&b, &c));
    ck_assert_int_eq(b.t[FOX_P_GRN1_WR].rows, 0);
    ck_assert_int_eq(b.t[FOX_P_GRN1_WR].cols, 0);
    ck_assert_uint_eq(b.t[FOX_P_GRN1_WR].offset, b.t[FOX_P_GRN1_LN_G].offset);

    fox_config_default(&c);
    c.n_atoms = 1;
    ck_assert_int_eq(fox_model_layout_init(&b, &c), FOX_EINVAL);
    fox_config_default(&c);
    c.v_max = c.v_min;
    ck_assert_int_eq(fox_model_layout_init(&b, &c), FOX_EINVAL);
    fox_config_default(&c);
    c.size_levels = 0;
    ck_assert_int_eq(fox_model_layout_init(&b, &c), FOX_EINVAL);
}
END_TEST

START_TEST(test_init_params)
{
    fox_config c;
    fox_config_default(&c);
    fox_model_layout lay;
    FOX_CK_OK(fox_model_layout_init(&lay, &c));
    float *p = malloc(lay.n_params * sizeof *p), *q = malloc(lay.n_params * sizeof *q);
    ck_assert(p && q);
    memset(p, 0x7f, lay.n_params * sizeof *p); /* padding must come back zeroed */
    fox_model_init_params(&lay, p, 7);
    fox_model_init_params(&lay, q, 7);
    ck_assert_int_eq(memcmp(p, q, lay.n_params * sizeof *p), 0);
    fox_model_init_params(&lay, q, 8);
    ck_assert_int_ne(memcmp(p, q, lay.n_params * sizeof *p), 0);

    size_t end = 0;
    for (int i = 0; i < FOX_P_COUNT; i++) {
        const fox_tensor_desc *t = &lay.t[i];
        for (size_t k = end; k < t->offset; k++)
            ck_assert_float_eq(p[k], 0.0f);
        end = t->offset + fox_tensor_size(&lay, i);
        const float *x = p + t->offset;
        size_t n = fox_tensor_size(&lay, i);
        if (n == 0) /* a projection the layout does without (the state as wide as h1) */
            continue;
        int is_ln_g = i == FOX_P_GRN1_LN_G || i == FOX_P_GRN2_LN_G;
        if (t->cols == 1) { /* biases, γ, β */
            for (size_t k = 0; k < n; k++)
                ck_assert_float_eq(x[k], is_ln_g ? 1.0f : 0.0f);
            continue;
        }
        int head_out = i == FOX_P_VAL_W2 || i == FOX_P_BR0_W2 || i == FOX_P_BR1_W2 ||
                       i == FOX_P_BR2_W2 || i == FOX_P_BR3_W2;
        double limit = sqrt(6.0 / (t->rows + t->cols)) * (head_out ? 0.1 : 1.0);
        double maxabs = 0.0, mean = 0.0;
        for (size_t k = 0; k < n; k++) {
            maxabs = fmax(maxabs, fabs(x[k]));
            mean += x[k];
        }
        mean /= (double)n;
        ck_assert_msg(maxabs <= limit * (1 + 1e-6), "%s: |w| %g > %g", t->name, maxabs, limit);
        ck_assert_msg(maxabs > 0.8 * limit, "%s: |w| %g, limit %g", t->name, maxabs, limit);
        if (n >= 1000)
            ck_assert_msg(fabs(mean) < 0.05 * limit, "%s: mean %g", t->name, mean);
    }
    for (size_t k = end; k < lay.n_params; k++)
        ck_assert_float_eq(p[k], 0.0f);
    free(p);
    free(q);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* C51 projection by hand: NA = 5 on [−2, 2], z = −2 −1 0 1 2, Δz = 1                          */

static const double p5[5] = {0.1, 0.2, 0.3, 0.25, 0.15};

static void
check_project(double r, double g, const double want[5])
{
    double out[5];
    fox_cpud_net_c51_project(p5, 5, -2.0, 2.0, r, g, out);
    double sum = 0.0;
    for (int j = 0; j < 5; j++) {
        ck_assert_msg(fabs(out[j] - want[j]) < 1e-12, "r %g g %g atom %d: %.15g want %.15g", r, g,
                      j, out[j], want[j]);
        sum += out[j];
    }
    ck_assert_msg(fabs(sum - 1.0) < 1e-12, "mass %.15g", sum);

    float pf[5], of[5];
    for (int j = 0; j < 5; j++)
        pf[j] = (float)p5[j];
    fox_cpu_net_c51_project(pf, 5, -2.0f, 2.0f, (float)r, (float)g, of);
    for (int j = 0; j < 5; j++)
        ck_assert_msg(fabs(of[j] - want[j]) < 1e-6, "float atom %d: %g want %g", j, of[j], want[j]);
}

START_TEST(test_c51_project_cases)
{
    /* r = 0, g = 1: the identity. */
    check_project(0.0, 1.0, p5);
    /* r = 1, g = 1: Tz = z + 1 lands on atoms (l == u); the top atom's mass clamps onto 2. */
    check_project(1.0, 1.0, (const double[5]){0.0, 0.1, 0.2, 0.3, 0.25 + 0.15});
    /* r = 0.5, g = 1: Tz = −1.5 −0.5 0.5 1.5 2(clamped): each mass splits half/half. */
    check_project(0.5, 1.0,
                  (const double[5]){0.05, 0.05 + 0.1, 0.1 + 0.15, 0.15 + 0.125, 0.125 + 0.15});
    /* r = 0.25, g = 0.5: Tz = −0.75 −0.25 0.25 0.75 1.25 → b = 1.25 1.75 2.25 2.75 3.25. */
    check_project(0.25, 0.5,
                  (const double[5]){0.0, 0.1 * 0.75 + 0.2 * 0.25,
                                    0.1 * 0.25 + 0.2 * 0.75 + 0.3 * 0.75 + 0.25 * 0.25,
                                    0.3 * 0.25 + 0.25 * 0.75 + 0.15 * 0.75, 0.15 * 0.25});
    /* Tz beyond v_max: everything on the last atom; below v_min: on the first. */
    check_project(10.0, 1.0, (const double[5]){0, 0, 0, 0, 1});
    check_project(-7.0, 0.9, (const double[5]){1, 0, 0, 0, 0});
    /* done (g = 0): all mass at r, split between the two atoms around it ... */
    check_project(0.3, 0.0, (const double[5]){0, 0, 0.7, 0.3, 0});
    /* ... or on one atom when r is one (the l == u case). */
    check_project(-1.0, 0.0, (const double[5]){0, 1, 0, 0, 0});
    check_project(2.0, 0.0, (const double[5]){0, 0, 0, 0, 1});

    /* Mass preserved for an unnormalised input and a support that does not hit atoms. */
    double q[11], out[11], sum_q = 0.0, sum_o = 0.0;
    for (int j = 0; j < 11; j++)
        sum_q += q[j] = 0.01 * (j + 1) * (j + 1);
    fox_cpud_net_c51_project(q, 11, -3.0, 3.0, 0.37, 0.81, out);
    for (int j = 0; j < 11; j++) {
        ck_assert(out[j] >= 0.0);
        sum_o += out[j];
    }
    ck_assert(fabs(sum_o - sum_q) < 1e-12);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Layer-level finite differences                                                             */

/* L = Σ y ⊙ dy with a fixed random dy: its gradient is the layer's backward of dy. */
typedef struct ln_ctx {
    int N, B;
    double *x, *g, *b, *dy, *y, *dx, *dg, *db;
} ln_ctx;

static double
ln_scalar(void *vctx)
{
    ln_ctx *c = vctx;
    double *dx = dalloc((size_t)c->B * c->N), *dg = dalloc(c->N), *db = dalloc(c->N);
    FOX_CK_OK(
        fox_cpud_net_layernorm_fwd_bwd(c->N, c->B, c->x, c->g, c->b, c->dy, c->y, dx, dg, db));
    double L = 0.0;
    for (int k = 0; k < c->B * c->N; k++)
        L += c->y[k] * c->dy[k];
    free(dx);
    free(dg);
    free(db);
    return L;
}

START_TEST(test_layernorm_fd)
{
    ln_ctx c = {.N = 7, .B = 3};
    size_t n = (size_t)c.N * c.B;
    c.x = dalloc(n), c.dy = dalloc(n), c.y = dalloc(n), c.dx = dalloc(n);
    c.g = dalloc(c.N), c.b = dalloc(c.N), c.dg = dalloc(c.N), c.db = dalloc(c.N);
    fox_rng r;
    fox_rng_seed(&r, 11);
    for (size_t k = 0; k < n; k++) {
        c.x[k] = 2.0 * fox_rng_normal(&r) + 0.5;
        c.dy[k] = fox_rng_normal(&r);
    }
    for (int k = 0; k < c.N; k++) {
        c.g[k] = uniform(&r, 0.5, 1.5);
        c.b[k] = uniform(&r, -0.5, 0.5);
    }
    FOX_CK_OK(fox_cpud_net_layernorm_fwd_bwd(c.N, c.B, c.x, c.g, c.b, c.dy, c.y, c.dx, c.dg, c.db));
    /* The normalised rows have mean 0 and (biased) variance var/(var + eps). */
    for (int row = 0; row < c.B; row++) {
        double m = 0.0;
        for (int k = 0; k < c.N; k++)
            m += (c.y[row * c.N + k] - c.b[k]) / c.g[k];
        ck_assert(fabs(m) < 1e-12);
    }
    struct {
        const char *name;
        double *x, *an;
        size_t n;
    } arr[] = {
        {"x", c.x, c.dx, n}, {"gamma", c.g, c.dg, (size_t)c.N}, {"beta", c.b, c.db, (size_t)c.N}};
    for (size_t a = 0; a < 3; a++) {
        fd_stat st;
        fd_check_array(&st, ln_scalar, &c, arr[a].x, arr[a].an, arr[a].n);
        ck_assert_msg(st.fails == 0,
                      "layernorm d%s: %d bad, worst rel %.3g at %zu (fd %.9g an %.9g)", arr[a].name,
                      st.fails, st.worst_rel, st.worst_k, st.worst_fd, st.worst_an);
    }
    free(c.x), free(c.dy), free(c.y), free(c.dx), free(c.g), free(c.b), free(c.dg), free(c.db);
}
END_TEST

typedef struct grn_ctx {
    int in, out, B;
    double *p[FOX_GRN_NT], *dp[FOX_GRN_NT];
    double *a, *da, *dy, *y;
} grn_ctx;

static size_t
grn_size(int k, int in, int out)
{
    if (k == FOX_GRN_W2)
        return (size_t)out * in;
    if (k == FOX_GRN_WR)
        return in == out ? 0 : (size_t)out * in;
    if (k == FOX_GRN_W1 || k == FOX_GRN_WG || k == FOX_GRN_WV)
        return (size_t)out * out;
    return (size_t)out;
}

static double
grn_scalar(void *vctx)
{
    grn_ctx *c = vctx;
    double *dp[FOX_GRN_NT];
    for (int k = 0; k < FOX_GRN_NT; k++)
        dp[k] = c->p[k] ? dalloc(grn_size(k, c->in, c->out)) : NULL;
    FOX_CK_OK(fox_cpud_net_grn_fwd_bwd(c->in, c->out, c->B, (const double *const *)c->p, c->a,
                                       c->dy, c->y, dp, NULL));
    double L = 0.0;
    for (int k = 0; k < c->B * c->out; k++)
        L += c->y[k] * c->dy[k];
    for (int k = 0; k < FOX_GRN_NT; k++)
        free(dp[k]);
    return L;
}

static void
grn_fd_case(int in, int out)
{
    static const char *const names[FOX_GRN_NT] = {"w2", "b2", "w1", "b1",   "wg",  "bg",
                                                  "wv", "bv", "wr", "ln_g", "ln_b"};
    grn_ctx c = {.in = in, .out = out, .B = 3};
    fox_rng r;
    fox_rng_seed(&r, 100 + in * 10 + out);
    for (int k = 0; k < FOX_GRN_NT; k++) {
        size_t n = grn_size(k, in, out);
        c.p[k] = n ? dalloc(n) : NULL;
        c.dp[k] = n ? dalloc(n) : NULL;
        double lim = sqrt(6.0 / (in + out));
        for (size_t e = 0; e < n; e++)
            c.p[k][e] = k == FOX_GRN_LN_G ? uniform(&r, 0.5, 1.5) : uniform(&r, -lim, lim);
    }
    c.a = dalloc((size_t)c.B * in);
    c.da = dalloc((size_t)c.B * in);
    c.dy = dalloc((size_t)c.B * out);
    c.y = dalloc((size_t)c.B * out);
    for (int k = 0; k < c.B * in; k++)
        c.a[k] = fox_rng_normal(&r);
    for (int k = 0; k < c.B * out; k++)
        c.dy[k] = fox_rng_normal(&r);
    FOX_CK_OK(fox_cpud_net_grn_fwd_bwd(in, out, c.B, (const double *const *)c.p, c.a, c.dy, c.y,
                                       c.dp, c.da));
    for (int k = 0; k < FOX_GRN_NT; k++) {
        if (!c.p[k])
            continue;
        fd_stat st;
        fd_check_array(&st, grn_scalar, &c, c.p[k], c.dp[k], grn_size(k, in, out));
        ck_assert_msg(st.fails == 0,
                      "grn %d→%d d%s: %d bad, worst rel %.3g at %zu (fd %.9g an %.9g)", in, out,
                      names[k], st.fails, st.worst_rel, st.worst_k, st.worst_fd, st.worst_an);
    }
    fd_stat st;
    fd_check_array(&st, grn_scalar, &c, c.a, c.da, (size_t)c.B * in);
    ck_assert_msg(st.fails == 0, "grn %d→%d da: %d bad, worst rel %.3g", in, out, st.fails,
                  st.worst_rel);
    for (int k = 0; k < FOX_GRN_NT; k++) {
        free(c.p[k]);
        free(c.dp[k]);
    }
    free(c.a), free(c.da), free(c.dy), free(c.y);
}

START_TEST(test_grn_fd)
{
    grn_fd_case(5, 7); /* projected skip Wr */
    grn_fd_case(6, 6); /* identity skip */
    grn_fd_case(9, 4);

    /* Wr must be present exactly when in != out. */
    double w[64] = {0}, y[16], a[8] = {0}, dy[16] = {0};
    const double *p[FOX_GRN_NT];
    double *dp[FOX_GRN_NT];
    for (int k = 0; k < FOX_GRN_NT; k++)
        p[k] = w, dp[k] = y;
    ck_assert_int_eq(fox_cpud_net_grn_fwd_bwd(2, 2, 1, p, a, dy, y, dp, NULL), FOX_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Whole-network gradient checks                                                              */

enum { PART_C51, PART_IQN, PART_AUX, PART_TOTAL, PART_COUNT };
static const char *const part_name[PART_COUNT] = {"c51", "iqn", "aux", "total"};

#define LAMBDA_IQN 0.7
#define LAMBDA_AUX 0.3

typedef struct net_fx {
    fox_model_layout lay;
    fox_cpud_net *net;
    double *params, *target, *grads;
    inputs in;
    fox_cpud_net_batch bt;
    fox_cpud_net_hparams hp;
    int part;
} net_fx;

static void
net_fx_init(net_fx *f, int B, uint64_t seed)
{
    fox_config c;
    small_config(&c);
    FOX_CK_OK(fox_model_layout_init(&f->lay, &c));
    FOX_CK_OK(fox_cpud_net_create(&f->net, &f->lay, B));
    /* Noise ±0.2 on top of the init: non-zero biases, γ ≠ 1, non-uniform atom distributions. */
    f->params = params_make(&f->lay, seed, 0.2);
    f->target = params_make(&f->lay, seed + 1, 0.2);
    f->grads = dalloc(f->lay.n_params);
    inputs_make(&f->in, &f->lay, B, seed + 2);
    f->bt = batch_double(&f->in);
}

static void
net_fx_fini(net_fx *f)
{
    fox_cpud_net_destroy(f->net);
    free(f->params);
    free(f->target);
    free(f->grads);
    inputs_free(&f->in);
}

/* The scalar whose gradient is checked for the current part. */
static double
part_value(const fox_cpud_net_loss *l, int part)
{
    switch (part) {
    case PART_C51:
        return l->c51;
    case PART_IQN:
        return LAMBDA_IQN * l->iqn;
    case PART_AUX:
        return LAMBDA_AUX * (l->aux_ret + l->aux_regime);
    default:
        return l->total;
    }
}

static double
net_scalar(void *ctx)
{
    net_fx *f = ctx;
    fox_cpud_net_loss l;
    FOX_CK_OK(
        fox_cpud_net_loss_grad(f->net, f->params, f->target, &f->bt, &f->hp, &l, f->grads, NULL));
    return part_value(&l, f->part);
}

/* Analytic gradient into g with the given lambdas. */
static void
net_grad(net_fx *f, double li, double la, int mode, int bdq, double *g, fox_cpud_net_loss *l)
{
    fox_cpud_net_hparams hp = hparams_double(li, la, mode, bdq);
    FOX_CK_OK(fox_cpud_net_loss_grad(f->net, f->params, f->target, &f->bt, &hp, l, g, NULL));
}

/*
 * The gradient of one part alone: the C51 loss cannot be switched off, so
 * the IQN and aux parts are the difference of two runs, one with and one
 * without their lambda.
 */
static void
part_grad(net_fx *f, int part, int mode, double *g)
{
    size_t n = f->lay.n_params;
    double *base = dalloc(n);
    fox_cpud_net_loss l;
    net_grad(f, 0.0, 0.0, mode, 0, base, &l);
    switch (part) {
    case PART_C51:
        memcpy(g, base, n * sizeof *g);
        break;
    case PART_IQN:
        net_grad(f, LAMBDA_IQN, 0.0, mode, 0, g, &l);
        for (size_t k = 0; k < n; k++)
            g[k] -= base[k];
        break;
    case PART_AUX:
        net_grad(f, 0.0, LAMBDA_AUX, mode, 0, g, &l);
        for (size_t k = 0; k < n; k++)
            g[k] -= base[k];
        break;
    default:
        net_grad(f, LAMBDA_IQN, LAMBDA_AUX, mode, 0, g, &l);
        ck_assert(isfinite(l.total) && l.c51 > 0 && l.iqn > 0 && l.aux_ret > 0 && l.aux_regime > 0);
        break;
    }
    free(base);
}

static void
net_fd_mode(int mode)
{
    net_fx f;
    net_fx_init(&f, 3, 2024 + mode);
    size_t n = f.lay.n_params;
    double *an = dalloc(n);
    int failed = 0;
    for (int part = 0; part < PART_COUNT; part++) {
        part_grad(&f, part, mode, an);
        f.part = part;
        f.hp = hparams_double(LAMBDA_IQN, LAMBDA_AUX, mode, 0);
        double worst_rel = 0.0, worst_abs = 0.0;
        const char *worst_name = "";
        for (int i = 0; i < FOX_P_COUNT; i++) {
            const fox_tensor_desc *t = &f.lay.t[i];
            size_t sz = fox_tensor_size(&f.lay, i);
            if (sz == 0)
                continue;
            fd_stat st;
            fd_check_array(&st, net_scalar, &f, f.params + t->offset, an + t->offset, sz);
            if (st.fails) {
                failed = 1;
                fprintf(stderr,
                        "FD %s/%s %s: %d of %zu bad, worst rel %.3g at %zu (fd %.10g an %.10g), "
                        "worst abs %.3g\n",
                        mode == FOX_TARGET_MEAN ? "mean" : "indep", part_name[part], t->name,
                        st.fails, sz, st.worst_rel, st.worst_k, st.worst_fd, st.worst_an,
                        st.worst_abs);
            }
            if (st.worst_rel > worst_rel) {
                worst_rel = st.worst_rel;
                worst_name = t->name;
            }
            worst_abs = fmax(worst_abs, st.worst_abs);
            /* The total loss reaches every tensor: a zero gradient means a missed path. */
            if (part == PART_TOTAL) {
                double mx = 0.0;
                for (size_t k = 0; k < sz; k++)
                    mx = fmax(mx, fabs(an[t->offset + k]));
                ck_assert_msg(mx > 1e-9, "%s: no gradient reaches it", t->name);
            }
        }
        printf("FD %-5s %-5s: worst rel %.2e (%s), worst abs %.2e, all %zu params\n",
               mode == FOX_TARGET_MEAN ? "mean" : "indep", part_name[part], worst_rel, worst_name,
               worst_abs, f.lay.n_real);
    }
    ck_assert_msg(!failed, "finite-difference check failed (details on stderr)");
    free(an);
    net_fx_fini(&f);
}

START_TEST(test_net_fd_mean)
{
    net_fd_mode(FOX_TARGET_MEAN);
}
END_TEST

START_TEST(test_net_fd_indep)
{
    net_fd_mode(FOX_TARGET_INDEP);
}
END_TEST

static int
is_trunk(int group)
{
    return group == FOX_GROUP_GRN1 || group == FOX_GROUP_GRN2 || group == FOX_GROUP_LAYERNORM;
}

START_TEST(test_bdq_trunk_scale)
{
    net_fx f;
    net_fx_init(&f, 3, 77);
    size_t n = f.lay.n_params;
    double *g0 = dalloc(n), *g1 = dalloc(n);
    fox_cpud_net_loss l0, l1;
    net_grad(&f, 0.0, 0.0, FOX_TARGET_MEAN, 0, g0, &l0);
    net_grad(&f, 0.0, 0.0, FOX_TARGET_MEAN, 1, g1, &l1);
    ck_assert(l0.total == l1.total);
    double s = 1.0 / (f.lay.n_branches + 1);
    for (int i = 0; i < FOX_P_COUNT; i++) {
        const fox_tensor_desc *t = &f.lay.t[i];
        for (size_t k = 0; k < fox_tensor_size(&f.lay, i); k++) {
            double a = g0[t->offset + k], b = g1[t->offset + k];
            if (is_trunk(t->group))
                ck_assert_msg(fabs(b - s * a) <= 1e-12 * fabs(a) + 1e-300,
                              "%s[%zu]: %.17g vs %.17g/5", t->name, k, b, a);
            else
                ck_assert_msg(a == b, "%s[%zu] head gradient changed: %.17g vs %.17g", t->name, k,
                              b, a);
        }
    }
    free(g0);
    free(g1);
    net_fx_fini(&f);
}
END_TEST

START_TEST(test_priority)
{
    /*
     * Priority is Σ_d |E_m[z] − E_{p_d(s,a_d)}[z]|. For a terminal row the
     * target m is the projection of a point mass at r, whose mean is r in
     * both modes (linear interpolation keeps the mean), and E_p is the
     * expected Q of the taken action: Σ_d |r − Q(s)[off_d + a_d]|.
     */
    net_fx f;
    net_fx_init(&f, 3, 5);
    int B = 3, D = f.lay.n_branches;
    double prio[3], q[3 * 12];
    fox_cpud_net_loss l;
    FOX_CK_OK(fox_cpud_net_q_values(f.net, f.params, f.in.s, B, q));
    for (int mode = 0; mode < 2; mode++) {
        fox_cpud_net_hparams hp = hparams_double(0.0, 0.0, mode, 1);
        FOX_CK_OK(fox_cpud_net_loss_grad(f.net, f.params, f.target, &f.bt, &hp, &l, f.grads, prio));
        for (int b = 0; b < B; b++)
            ck_assert(isfinite(prio[b]) && prio[b] > 0.0);
        int b = B - 1;
        ck_assert(f.in.done[b] == 1.0);
        double want = 0.0;
        for (int d = 0; d < D; d++)
            want +=
                fabs(f.in.r[b] - q[b * f.lay.n_actions + f.lay.branch_off[d] + f.in.a[b * D + d]]);
        ck_assert_msg(fabs(prio[b] - want) < 1e-12, "priority %.17g, want %.17g", prio[b], want);
    }

    fox_cpud_net_hparams hp = hparams_double(0.0, 0.0, FOX_TARGET_MEAN, 1);
    /* Bad inputs are refused, not read out of range. */
    int32_t bad_a[12];
    memcpy(bad_a, f.in.a, sizeof bad_a);
    bad_a[1] = f.lay.branch_size[1];
    fox_cpud_net_batch bt = f.bt;
    bt.a = bad_a;
    ck_assert_int_eq(fox_cpud_net_loss_grad(f.net, f.params, f.target, &bt, &hp, &l, f.grads, NULL),
                     FOX_EINVAL);
    bt = f.bt;
    bt.B = 4; /* above max_batch */
    ck_assert_int_eq(fox_cpud_net_loss_grad(f.net, f.params, f.target, &bt, &hp, &l, f.grads, NULL),
                     FOX_EINVAL);
    net_fx_fini(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Forward semantics: a second, naive implementation of the losses, row by row                */

/*
 * The finite-difference checks only prove that the gradients match the
 * losses as net.c computes them; this plain-loop transcription of
 * docs/design.md's model checks the losses themselves (targets, dueling, quantile
 * weights, normalisations).
 */
typedef struct ref {
    const fox_model_layout *lay;
    double z[64];
} ref;

static const double *
ref_t(const ref *R, const double *p, int i)
{
    return p + R->lay->t[i].offset;
}

/* y [out] = W [out × in]·x + b (b may be NULL). */
static void
ref_lin(const double *W, const double *b, const double *x, int in, int out, double *y)
{
    for (int o = 0; o < out; o++) {
        y[o] = b ? b[o] : 0.0;
        for (int i = 0; i < in; i++)
            y[o] += W[o * in + i] * x[i];
    }
}

static void
ref_grn(const ref *R, const double *p, int first, const double *a, double *y)
{
    int in = R->lay->t[first].cols, out = R->lay->t[first].rows;
    double e2[64], e1[64], gt[64], lv[64], u[64];
    ref_lin(ref_t(R, p, first + FOX_GRN_W2), ref_t(R, p, first + FOX_GRN_B2), a, in, out, e2);
    for (int k = 0; k < out; k++)
        e2[k] = e2[k] > 0 ? e2[k] : exp(e2[k]) - 1.0;
    ref_lin(ref_t(R, p, first + FOX_GRN_W1), ref_t(R, p, first + FOX_GRN_B1), e2, out, out, e1);
    ref_lin(ref_t(R, p, first + FOX_GRN_WG), ref_t(R, p, first + FOX_GRN_BG), e1, out, out, gt);
    ref_lin(ref_t(R, p, first + FOX_GRN_WV), ref_t(R, p, first + FOX_GRN_BV), e1, out, out, lv);
    if (in != out)
        ref_lin(ref_t(R, p, first + FOX_GRN_WR), NULL, a, in, out, u);
    else
        memcpy(u, a, (size_t)out * sizeof *u);
    double mean = 0.0, var = 0.0;
    for (int k = 0; k < out; k++) {
        u[k] += lv[k] / (1.0 + exp(-gt[k]));
        mean += u[k] / out;
    }
    for (int k = 0; k < out; k++)
        var += (u[k] - mean) * (u[k] - mean) / out;
    for (int k = 0; k < out; k++)
        y[k] = (u[k] - mean) / sqrt(var + 1e-5) * ref_t(R, p, first + FOX_GRN_LN_G)[k] +
               ref_t(R, p, first + FOX_GRN_LN_B)[k];
}

static void
ref_mlp2(const ref *R, const double *p, int first, const double *x, double *y)
{
    int in = R->lay->t[first].cols, hid = R->lay->t[first].rows, out = R->lay->t[first + 2].rows;
    double h[64];
    ref_lin(ref_t(R, p, first), ref_t(R, p, first + 1), x, in, hid, h);
    for (int k = 0; k < hid; k++)
        h[k] = h[k] > 0 ? h[k] : 0.0;
    ref_lin(ref_t(R, p, first + 2), ref_t(R, p, first + 3), h, hid, out, y);
}

static void
ref_trunk(const ref *R, const double *p, const double *s, double *h2)
{
    double h1[64];
    ref_grn(R, p, FOX_P_GRN1_W2, s, h1);
    ref_grn(R, p, FOX_P_GRN2_W2, h1, h2);
}

/* Branch d's probabilities [n_d × NA] at trunk output h. */
static void
ref_probs(const ref *R, const double *p, const double *h, int d, double *prob)
{
    int NA = R->lay->NA, n = R->lay->branch_size[d];
    double V[64], A[8 * 64];
    ref_mlp2(R, p, FOX_P_VAL_W1, h, V);
    ref_mlp2(R, p, FOX_P_BR0_W1 + FOX_BRANCH_NT * d, h, A);
    for (int a = 0; a < n; a++) {
        double mx = -INFINITY, sum = 0.0;
        double *row = prob + a * NA;
        for (int j = 0; j < NA; j++) {
            double mean = 0.0;
            for (int a2 = 0; a2 < n; a2++)
                mean += A[a2 * NA + j] / n;
            row[j] = V[j] + A[a * NA + j] - mean;
            mx = fmax(mx, row[j]);
        }
        for (int j = 0; j < NA; j++)
            sum += row[j] = exp(row[j] - mx);
        for (int j = 0; j < NA; j++)
            row[j] /= sum;
    }
}

static double
ref_mean_z(const ref *R, const double *prob)
{
    double e = 0.0;
    for (int j = 0; j < R->lay->NA; j++)
        e += prob[j] * R->z[j];
    return e;
}

/* IQN quantiles [NAct] at trunk output h and fraction tau. */
static void
ref_iqn(const ref *R, const double *p, const double *h, double tau, double *q)
{
    int NC = R->lay->NC, H2 = R->lay->H2;
    double c[64], phi[64];
    for (int k = 0; k < NC; k++)
        c[k] = cos(M_PI * k * tau);
    ref_lin(ref_t(R, p, FOX_P_IQN_WPHI), ref_t(R, p, FOX_P_IQN_BPHI), c, NC, H2, phi);
    for (int k = 0; k < H2; k++)
        phi[k] = (phi[k] > 0 ? phi[k] : 0.0) * h[k];
    ref_lin(ref_t(R, p, FOX_P_IQN_WQ), ref_t(R, p, FOX_P_IQN_BQ), phi, H2, R->lay->n_actions, q);
}

static void
ref_losses(const ref *R, const double *on, const double *tg, const inputs *in,
           const fox_cpud_net_hparams *hp, fox_cpud_net_loss *l, double *prio)
{
    const fox_model_layout *lay = R->lay;
    int B = in->B, D = lay->n_branches, NA = lay->NA, NT = lay->NT, S = lay->S;
    memset(l, 0, sizeof *l);
    for (int b = 0; b < B; b++) {
        double h[64], hn[64], ht[64], g = hp->gamma_n * (1.0 - in->done[b]), w = in->w[b];
        ref_trunk(R, on, in->s + b * S, h);
        ref_trunk(R, on, in->s_next + b * S, hn);
        ref_trunk(R, tg, in->s_next + b * S, ht);
        double m[4][64], pchosen[4][64];
        int astar[4];
        for (int d = 0; d < D; d++) {
            double pr[8 * 64];
            ref_probs(R, on, hn, d, pr);
            astar[d] = 0;
            for (int a = 1; a < lay->branch_size[d]; a++)
                if (ref_mean_z(R, pr + a * NA) > ref_mean_z(R, pr + astar[d] * NA))
                    astar[d] = a;
            ref_probs(R, tg, ht, d, pr);
            fox_cpud_net_c51_project(pr + astar[d] * NA, NA, lay->v_min, lay->v_max, in->r[b], g,
                                     m[d]);
            ref_probs(R, on, h, d, pr);
            memcpy(pchosen[d], pr + in->a[b * D + d] * NA, (size_t)NA * sizeof(double));
        }
        if (hp->target_mode == FOX_TARGET_MEAN)
            for (int j = 0; j < NA; j++) {
                double mean = 0.0;
                for (int d = 0; d < D; d++)
                    mean += m[d][j] / D;
                for (int d = 0; d < D; d++)
                    m[d][j] = mean;
            }
        prio[b] = 0.0;
        for (int d = 0; d < D; d++) {
            for (int j = 0; j < NA; j++)
                l->c51 -= w * m[d][j] * log(pchosen[d][j]) / (B * D);
            prio[b] += fabs(ref_mean_z(R, m[d]) - ref_mean_z(R, pchosen[d]));
        }
        for (int d = 0; d < D; d++) {
            int col = lay->branch_off[d] + in->a[b * D + d];
            int col_t = lay->branch_off[d] + astar[d];
            for (int i = 0; i < NT; i++) {
                double qi[16], qj[16], tau = in->tau[b * NT + i];
                ref_iqn(R, on, h, tau, qi);
                for (int j = 0; j < NT; j++) {
                    ref_iqn(R, tg, ht, in->tau_next[b * NT + j], qj);
                    double delta = in->r[b] + g * qj[col_t] - qi[col];
                    double hub = fabs(delta) <= 1.0 ? 0.5 * delta * delta : fabs(delta) - 0.5;
                    l->iqn += w * fabs(tau - (delta < 0)) * hub / NT / (B * D);
                }
            }
        }
        double pred, lg[8], mx = -INFINITY, sum = 0.0;
        ref_mlp2(R, on, FOX_P_AUXR_W1, h, &pred);
        double err = pred - in->aux_ret[b] / hp->aux_label_scale;
        l->aux_ret += w * err * err / B;
        ref_mlp2(R, on, FOX_P_AUXG_W1, h, lg);
        for (int k = 0; k < lay->NR; k++)
            mx = fmax(mx, lg[k]);
        for (int k = 0; k < lay->NR; k++)
            sum += exp(lg[k] - mx);
        l->aux_regime += -(lg[in->regime[b]] - mx - log(sum)) / B;
    }
    l->total = l->c51 + hp->iqn_lambda * l->iqn + hp->aux_lambda * (l->aux_ret + l->aux_regime);
}

START_TEST(test_losses_vs_naive)
{
    net_fx f;
    net_fx_init(&f, 3, 31);
    ref R = {.lay = &f.lay};
    ck_assert_int_le(f.lay.NA, 64);
    for (int j = 0; j < f.lay.NA; j++)
        R.z[j] = f.lay.v_min + j * ((double)f.lay.v_max - f.lay.v_min) / (f.lay.NA - 1);
    for (int mode = 0; mode < 2; mode++) {
        fox_cpud_net_hparams hp = hparams_double(LAMBDA_IQN, LAMBDA_AUX, mode, 1);
        fox_cpud_net_loss got, want;
        double pg[3], pw[3];
        FOX_CK_OK(fox_cpud_net_loss_grad(f.net, f.params, f.target, &f.bt, &hp, &got, f.grads, pg));
        ref_losses(&R, f.params, f.target, &f.in, &hp, &want, pw);
        const double *a[] = {&got.total, &got.c51, &got.iqn, &got.aux_ret, &got.aux_regime};
        const double *b[] = {&want.total, &want.c51, &want.iqn, &want.aux_ret, &want.aux_regime};
        for (int k = 0; k < 5; k++)
            ck_assert_msg(fabs(*a[k] - *b[k]) <= 1e-12 * fabs(*b[k]),
                          "mode %d loss %d: %.17g vs %.17g", mode, k, *a[k], *b[k]);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(fabs(pg[k] - pw[k]) <= 1e-12 * pw[k], "priority %d: %.17g vs %.17g", k,
                          pg[k], pw[k]);
    }
    /* Without importance weights, w = 1. */
    f.bt.w = NULL;
    for (int b = 0; b < 3; b++)
        f.in.w[b] = 1.0;
    fox_cpud_net_hparams hp = hparams_double(LAMBDA_IQN, LAMBDA_AUX, FOX_TARGET_MEAN, 1);
    fox_cpud_net_loss got, want;
    double pg[3], pw[3];
    FOX_CK_OK(fox_cpud_net_loss_grad(f.net, f.params, f.target, &f.bt, &hp, &got, f.grads, pg));
    ref_losses(&R, f.params, f.target, &f.in, &hp, &want, pw);
    ck_assert(fabs(got.total - want.total) <= 1e-12 * fabs(want.total));
    net_fx_fini(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Float vs double                                                                            */

START_TEST(test_float_vs_double)
{
    net_fx f;
    int B = 3;
    net_fx_init(&f, B, 99);
    size_t n = f.lay.n_params;
    float *pf = to_float(f.params, n), *tf = to_float(f.target, n), *gf = malloc(n * sizeof *gf);
    ck_assert_ptr_nonnull(gf);
    fox_cpu_net *netf;
    FOX_CK_OK(fox_cpu_net_create(&netf, &f.lay, B));
    fox_cpu_net_batch bf = batch_float(&f.in);
    for (int mode = 0; mode < 2; mode++) {
        fox_cpud_net_loss ld;
        fox_cpu_net_loss lf;
        net_grad(&f, LAMBDA_IQN, LAMBDA_AUX, mode, 1, f.grads, &ld);
        fox_cpu_net_hparams hpf = {0.9f, LAMBDA_IQN, LAMBDA_AUX, 0.01f, mode, 1};
        FOX_CK_OK(fox_cpu_net_loss_grad(netf, pf, tf, &bf, &hpf, &lf, gf, NULL));
        const double *pd[] = {&ld.total, &ld.c51, &ld.iqn, &ld.aux_ret, &ld.aux_regime};
        const double *pfl[] = {&lf.total, &lf.c51, &lf.iqn, &lf.aux_ret, &lf.aux_regime};
        for (int k = 0; k < 5; k++)
            ck_assert_msg(fabs(*pfl[k] - *pd[k]) <= 1e-3 * fabs(*pd[k]), "loss %d: %.9g vs %.9g", k,
                          *pfl[k], *pd[k]);
        /*
         * Per element against the tensor's largest gradient: single elements
         * near zero carry float cancellation that a pure relative test
         * would flag.
         */
        double worst = 0.0;
        for (int i = 0; i < FOX_P_COUNT; i++) {
            const fox_tensor_desc *t = &f.lay.t[i];
            size_t sz = fox_tensor_size(&f.lay, i);
            double mx = 0.0;
            for (size_t k = 0; k < sz; k++)
                mx = fmax(mx, fabs(f.grads[t->offset + k]));
            for (size_t k = 0; k < sz; k++) {
                double d = fabs(gf[t->offset + k] - f.grads[t->offset + k]);
                double rel = d / fmax(fabs(f.grads[t->offset + k]), 1e-2 * mx);
                worst = fmax(worst, rel);
                ck_assert_msg(rel <= 1e-3, "%s[%zu]: float %.9g double %.9g", t->name, k,
                              gf[t->offset + k], f.grads[t->offset + k]);
            }
        }
        printf("float vs double (%s): worst gradient rel %.2e\n", mode ? "indep" : "mean", worst);
    }

    /* q_values agree too, and lie on the support. */
    double qd[3 * 12];
    float qf[3 * 12];
    FOX_CK_OK(fox_cpud_net_q_values(f.net, f.params, f.in.s, B, qd));
    FOX_CK_OK(fox_cpu_net_q_values(netf, pf, f.in.fs, B, qf));
    for (int k = 0; k < B * f.lay.n_actions; k++) {
        ck_assert(qd[k] >= f.lay.v_min && qd[k] <= f.lay.v_max);
        ck_assert_msg(fabs(qf[k] - qd[k]) <= 1e-4 * (1 + fabs(qd[k])), "q[%d] %g vs %g", k, qf[k],
                      qd[k]);
    }
    fox_cpu_net_destroy(netf);
    free(pf);
    free(tf);
    free(gf);
    net_fx_fini(&f);
}
END_TEST

START_TEST(test_create_errors)
{
    fox_config c;
    small_config(&c);
    fox_model_layout lay;
    FOX_CK_OK(fox_model_layout_init(&lay, &c));
    fox_cpu_net *net = NULL;
    ck_assert_int_eq(fox_cpu_net_create(&net, &lay, 0), FOX_EINVAL);
    ck_assert_ptr_null(net);
    ck_assert_int_eq(fox_cpu_net_create(NULL, &lay, 4), FOX_EINVAL);
    fox_cpu_net_destroy(NULL);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Optimizer                                                                                  */

START_TEST(test_adam_step)
{
    /*
     * By hand, t = 2 (bias corrections 1 − 0.9² = 0.19, 1 − 0.999² = 0.001999),
     * grad_scale 2, lr 0.1, eps 1e-8:
     *   [0] g = 1:  m = 0.1,   v = 0.001,   p = 1 − 0.1·(0.1/0.19)/(sqrt(0.001/0.001999) + 1e-8)
     *   [1] g = −2: m = −0.11, v = 0.01399, p = −2 − 0.1·(−0.11/0.19)/(sqrt(0.01399/0.001999) +
     * 1e-8) [2] g = 0, m = v = 0: unchanged.
     */
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, -1.0f, 0.0f};
    float m[3] = {0.0f, 0.1f, 0.0f}, v[3] = {0.0f, 0.01f, 0.0f};
    fox_cpu_adam_step(p, g, m, v, 3, 0.1f, 0.9f, 0.999f, 1e-8f, 2, 2.0f);
    /* Float rounding of 1 − 0.999 alone is 1.3e-5 relative. */
    ck_assert_double_eq_tol(m[0], 0.1, 1e-7);
    ck_assert_double_eq_tol(v[0], 0.001, 3e-5 * 0.001);
    ck_assert_double_eq_tol(m[1], -0.11, 1e-7);
    ck_assert_double_eq_tol(v[1], 0.01399, 3e-5 * 0.01399);
    ck_assert_double_eq_tol(p[0], 0.9255863186954071, 1e-6);
    ck_assert_double_eq_tol(p[1], -1.978115500315636, 1e-6);
    ck_assert_float_eq(p[2], 0.5f);

    /* t = 1 with m = v = 0: the first step moves each weight by lr·sign(g). */
    float q[2] = {0.0f, 0.0f}, gq[2] = {3.0f, -0.001f}, mq[2] = {0}, vq[2] = {0};
    fox_cpu_adam_step(q, gq, mq, vq, 2, 0.01f, 0.9f, 0.999f, 1e-12f, 1, 1.0f);
    ck_assert_double_eq_tol(q[0], -0.01, 1e-7);
    ck_assert_double_eq_tol(q[1], 0.01, 1e-7);
}
END_TEST

/*
 * The clamped step four elements at a time (SSE2) gives the bits, the
 * engagement counts, maxima and flags of the element-by-element path (calls
 * of one element), on values that engage every clamp: NaN/Inf/huge
 * gradients, m and v past their bounds, weights pushed past theirs, and a
 * length that leaves a tail.
 */
START_TEST(test_adam_clamped_lanes_match_scalar)
{
    enum { N = 1003 };
    static float p[2][N], g[N], m[2][N], v[2][N];
    fox_rng r;
    fox_rng_seed(&r, 7);
    for (int k = 0; k < N; k++) {
        g[k] = fox_rng_normal(&r) * (k % 97 == 5 ? 1e6f : 0.1f);
        p[0][k] = fox_rng_normal(&r) * (k % 89 == 3 ? 2.9f : 0.5f);
        m[0][k] = fox_rng_normal(&r) * (k % 83 == 1 ? 50.0f : 0.01f);
        v[0][k] = fabsf((float)fox_rng_normal(&r)) * (k % 79 == 2 ? 50.0f : 1e-4f);
    }
    g[10] = NAN;
    g[11] = INFINITY;
    g[1001] = -INFINITY;
    memcpy(p[1], p[0], sizeof p[0]);
    memcpy(m[1], m[0], sizeof m[0]);
    memcpy(v[1], v[0], sizeof v[0]);
    fox_cpu_adam_clamp c[2] = {{.w_bound = 3.0f,
                                .m_bound = 1.0f,
                                .v_bound = 2.0f,
                                .w_slot = 44,
                                .m_slot = 36,
                                .v_slot = 40,
                                .w_diag = 3.0f,
                                .m_diag = 10.0f,
                                .v_diag = INFINITY}};
    c[1] = c[0];
    int flags[2][FOX_SENTINEL_SLOTS] = {{0}};
    for (int step = 1; step <= 3; step++) {
        fox_cpu_adam_step_clamped(p[0], g, m[0], v[0], N, 0.5f, 0.9f, 0.999f, 1e-8f, step, 1.0f,
                                  &c[0], flags[0]);
        for (int k = 0; k < N; k++)
            fox_cpu_adam_step_clamped(p[1] + k, g + k, m[1] + k, v[1] + k, 1, 0.5f, 0.9f, 0.999f,
                                      1e-8f, step, 1.0f, &c[1], flags[1]);
    }
    ck_assert_msg(memcmp(p[0], p[1], sizeof p[0]) == 0, "weights differ");
    ck_assert_msg(memcmp(m[0], m[1], sizeof m[0]) == 0, "m differs");
    ck_assert_msg(memcmp(v[0], v[1], sizeof v[0]) == 0, "v differs");
    ck_assert_msg(memcmp(flags[0], flags[1], sizeof flags[0]) == 0, "flags differ");
    ck_assert_uint_eq(c[0].w_engaged, c[1].w_engaged);
    ck_assert_uint_eq(c[0].m_engaged, c[1].m_engaged);
    ck_assert_uint_eq(c[0].v_engaged, c[1].v_engaged);
    ck_assert_uint_eq(c[0].total, c[1].total);
    ck_assert(c[0].w_max == c[1].w_max && c[0].m_max == c[1].m_max && c[0].v_max == c[1].v_max);
    /* Every clamp engaged, or the comparison proves little. */
    ck_assert_uint_gt(c[0].w_engaged, 0);
    ck_assert_uint_gt(c[0].m_engaged, 0);
    ck_assert_uint_gt(c[0].v_engaged, 0);
    ck_assert_int_eq(flags[0][36], 1);
    ck_assert_int_eq(flags[0][44], 1);
}
END_TEST

/*
 * The isfinite guard skips an element whose gradient is NaN or ±Inf: its m,
 * v and weight keep their bits (the seeds' Adam kernels return early), even
 * with momentum that would otherwise move it; every other element moves.
 * Bad gradients sit inside a four-lane group and in the scalar tail.
 */
START_TEST(test_adam_nonfinite_grad_skips_element)
{
    enum { N = 11 };
    float p[N], g[N], m[N], v[N], p0[N], m0[N], v0[N];
    for (int k = 0; k < N; k++) {
        p[k] = 0.5f - 0.1f * (float)k;
        g[k] = 0.01f * (float)(k + 1);
        m[k] = 0.02f;
        v[k] = 1e-3f;
    }
    const int bad[3] = {1, 6, 9};
    g[bad[0]] = NAN;
    g[bad[1]] = INFINITY;
    g[bad[2]] = -INFINITY;
    memcpy(p0, p, sizeof p);
    memcpy(m0, m, sizeof m);
    memcpy(v0, v, sizeof v);
    fox_cpu_adam_clamp c = fox_test_adam_clamp(100.0f, INFINITY, INFINITY);
    fox_cpu_adam_step_clamped(p, g, m, v, N, 0.1f, 0.9f, 0.999f, 1e-8f, 5, 1.0f, &c, NULL);
    for (int k = 0; k < N; k++) {
        int skipped = k == bad[0] || k == bad[1] || k == bad[2];
        if (skipped) {
            ck_assert_msg(memcmp(&p[k], &p0[k], sizeof p[k]) == 0, "weight %d moved", k);
            ck_assert_msg(memcmp(&m[k], &m0[k], sizeof m[k]) == 0, "m %d moved", k);
            ck_assert_msg(memcmp(&v[k], &v0[k], sizeof v[k]) == 0, "v %d moved", k);
        } else {
            ck_assert_msg(p[k] != p0[k] && m[k] != m0[k] && v[k] != v0[k], "element %d still", k);
        }
    }
    ck_assert_uint_eq(c.w_engaged + c.m_engaged + c.v_engaged, 0);
}
END_TEST

/*
 * A weight that is not finite is zeroed whatever its gradient: skipped by
 * the isfinite guard with a non-finite gradient (m and v kept), through
 * Mech 9's clamp_finite with a finite one; on the four-lane path and the
 * scalar tail alike.
 */
START_TEST(test_adam_zeroes_a_nonfinite_weight)
{
    enum { N = 10 };
    float p[N], g[N], m[N], v[N];
    for (int k = 0; k < N; k++) {
        p[k] = 0.5f;
        g[k] = 0.01f;
        m[k] = 0.02f;
        v[k] = 1e-3f;
    }
    /* Skipped in a group the lanes hand to the scalar path whole. */
    p[1] = NAN;
    g[1] = NAN;
    /* Updated on the lanes, all four gradients finite. */
    p[6] = INFINITY;
    /* Skipped in the scalar tail. */
    p[9] = -INFINITY;
    g[9] = NAN;
    fox_cpu_adam_clamp c = fox_test_adam_clamp(100.0f, INFINITY, INFINITY);
    fox_cpu_adam_step_clamped(p, g, m, v, N, 0.1f, 0.9f, 0.999f, 1e-8f, 5, 1.0f, &c, NULL);
    ck_assert(p[1] == 0.0f && p[6] == 0.0f && p[9] == 0.0f);
    ck_assert(m[1] == 0.02f && v[1] == 1e-3f && m[9] == 0.02f && v[9] == 1e-3f);
}
END_TEST

/*
 * Pearl B's consumers in the clamped step, by hand (t = 1, m = v = 0: the
 * update is lr · sign(g)): decoupled weight decay takes lr · wd · p0 off the
 * updated weight, the L1 step then shrinks |p| by lr · l1, to 0 at most, and
 * Mech 9's clamp comes last. Rates of 0 change nothing (the default).
 */
START_TEST(test_adam_weight_decay_and_l1)
{
    float p[4] = {1.0f, -0.5f, 0.02f, 3.0f}, g[4] = {1.0f, -1.0f, 1.0f, -1.0f};
    float m[4] = {0}, v[4] = {0};
    fox_cpu_adam_clamp c = fox_test_adam_clamp(2.0f, INFINITY, INFINITY);
    c.wd = 2.0f;
    c.l1 = 0.5f;
    fox_cpu_adam_step_clamped(p, g, m, v, 4, 0.01f, 0.9f, 0.999f, 1e-12f, 1, 1.0f, &c, NULL);
    /* [0]: 1 − 0.01 = 0.99, − 0.01·2·1 = 0.97, shrunk by 0.005 → 0.965 */
    ck_assert_double_eq_tol(p[0], 0.965, 1e-6);
    /* [1]: −0.5 + 0.01 = −0.49, + 0.01·2·0.5 = −0.48, shrunk → −0.475 */
    ck_assert_double_eq_tol(p[1], -0.475, 1e-6);
    /* [2]: 0.02 − 0.01 = 0.01, − 0.01·2·0.02 = 0.0096, shrunk → 0.0046 */
    ck_assert_double_eq_tol(p[2], 0.0046, 1e-6);
    /* [3]: 3.01 − 0.06 = 2.95 − 0.005 = 2.945, then Mech 9 clamps it to 2 */
    ck_assert(p[3] == 2.0f);
    ck_assert_uint_eq(c.w_engaged, 1);
    /* The proximal step stops at zero: a weight inside lr · l1 lands on exactly 0. */
    float q[2] = {0.003f, -0.002f}, gq[2] = {0.0f, 0.0f}, mq[2] = {0}, vq[2] = {0};
    c.wd = 0.0f;
    fox_cpu_adam_step_clamped(q, gq, mq, vq, 2, 0.01f, 0.9f, 0.999f, 1e-12f, 1, 1.0f, &c, NULL);
    ck_assert(q[0] == 0.0f && q[1] == 0.0f);
    ck_assert(fox_adam_regularize(0.7f, 0.9f, 0.01f, 0.0f, 0.0f) == 0.7f);
    ck_assert(fox_adam_regularize(0.7f, 0.9f, 0.01f, NAN, -1.0f) == 0.7f);
}
END_TEST

START_TEST(test_sanitize_norm_clip)
{
    float g[7] = {1.0f, NAN, INFINITY, -INFINITY, 2.0f, -NAN, -2.0f};
    size_t bad = 99;
    fox_cpu_grad_sanitize(g, 7, &bad);
    ck_assert_uint_eq(bad, 4);
    const float want[7] = {1.0f, 0.0f, 0.0f, 0.0f, 2.0f, 0.0f, -2.0f};
    for (int k = 0; k < 7; k++)
        ck_assert_float_eq(g[k], want[k]);
    fox_cpu_grad_sanitize(g, 7, NULL);
    ck_assert_double_eq_tol(fox_cpu_grad_norm(g, 7), 3.0, 1e-12);

    ck_assert_float_eq(fox_cpu_clip_scale(10.0, 5.0f), 0.5f);
    ck_assert_float_eq(fox_cpu_clip_scale(1.0, 5.0f), 1.0f);
    ck_assert_float_eq(fox_cpu_clip_scale(5.0, 5.0f), 1.0f);
    ck_assert_float_eq(fox_cpu_clip_scale(0.0, 5.0f), 1.0f);
    ck_assert_float_eq(fox_cpu_clip_scale(1e6, 0.0f), 1.0f); /* clipping off */
    ck_assert_float_eq(fox_cpu_clip_scale(INFINITY, 5.0f), 0.0f);
    ck_assert_float_eq(fox_cpu_clip_scale(NAN, 5.0f), 0.0f);
}
END_TEST

START_TEST(test_target_sync)
{
    float p[3] = {1.0f, 2.0f, 3.0f}, t[3] = {0.0f, 0.0f, 1.0f};
    fox_cpu_target_sync(t, p, 3, 0.25f);
    ck_assert_float_eq(t[0], 0.25f);
    ck_assert_float_eq(t[1], 0.5f);
    ck_assert_float_eq(t[2], 1.5f);
    fox_cpu_target_sync(t, p, 3, 0.0f);
    ck_assert_int_eq(memcmp(t, p, sizeof p), 0);
    float u[3] = {0};
    fox_cpu_target_sync(u, p, 3, 1.0f);
    ck_assert_int_eq(memcmp(u, p, sizeof p), 0);
}
END_TEST

/* A prioritized ring's leaf of slot i: priority^alpha. */
static double
leaf(const fox_replay *rb, int i)
{
    return rb->tree[rb->leaves + i];
}

/* A prioritized ring of capacity and alpha after n pushes of an empty transition. */
static void
filled_ring(fox_replay *rb, int capacity, float alpha, int n)
{
    FOX_CK_OK(fox_replay_init(rb, capacity, 1, alpha));
    fox_transition t;
    memset(&t, 0, sizeof t);
    for (int k = 0; k < n; k++)
        fox_replay_push(rb, &t);
}

/*
 * Priorities drawn before a collection's pushes reach only the slots those
 * pushes left alone (a full step gathers its batch before it collects): a
 * slot pushed over holds a new transition at the ring's max priority.
 */
START_TEST(test_replay_update_skips_pushed_over)
{
    fox_replay rb;
    filled_ring(&rb, 8, 1.0f, 6);
    fox_transition t;
    memset(&t, 0, sizeof t);
    uint64_t drawn = rb.pushes;
    for (int k = 0; k < 4; k++) /* slots 6, 7, 0, 1 */
        fox_replay_push(&rb, &t);
    const int32_t idx[4] = {0, 2, 7, 5};
    const float prio[4] = {3.0f, 4.0f, 5.0f, 6.0f};
    fox_replay_update(&rb, idx, prio, 4, drawn);
    ck_assert_double_eq(leaf(&rb, 0), 1.0);
    ck_assert_double_eq(leaf(&rb, 7), 1.0);
    ck_assert_double_eq_tol(leaf(&rb, 2), 4.0, 1e-5);
    ck_assert_double_eq_tol(leaf(&rb, 5), 6.0, 1e-5);
    ck_assert_float_eq_tol(rb.max_priority, 6.0f, 1e-5f);
    /* Nothing pushed since the draw: every slot takes its priority. */
    fox_replay_update(&rb, idx, prio, 4, rb.pushes);
    ck_assert_double_eq_tol(leaf(&rb, 0), 3.0, 1e-5);
    ck_assert_double_eq_tol(leaf(&rb, 7), 5.0, 1e-5);
    /* A whole ring's pushes since the draw: no slot does. */
    drawn = rb.pushes;
    for (int k = 0; k < 8; k++)
        fox_replay_push(&rb, &t);
    const float low[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    fox_replay_update(&rb, idx, low, 4, drawn);
    for (int k = 0; k < 4; k++)
        ck_assert_double_eq_tol(leaf(&rb, idx[k]), 6.0, 1e-5);
    fox_replay_clear(&rb);
    ck_assert_uint_eq(rb.pushes, 0);
    fox_replay_fini(&rb);
}
END_TEST

/*
 * The update in batch order: of a slot drawn twice the last entry stays, a
 * non-finite priority takes the max as it stands at its entry (raised by an
 * earlier one), and every inner node is exactly the sum of its children
 * (gpu/per.h), whatever the order of pushes and updates.
 */
START_TEST(test_replay_update_batch_order)
{
    fox_replay rb;
    filled_ring(&rb, 10, 0.5f, 10);
    fox_transition t;
    memset(&t, 0, sizeof t);
    const int32_t idx[5] = {3, 4, 3, 6, 8};
    const float prio[5] = {9.0f, 16.0f, 4.0f, NAN, 1.0f};
    fox_replay_update(&rb, idx, prio, 5, rb.pushes);
    float p16 = 16.0f + FOX_PER_PRIORITY_EPS;
    ck_assert(rb.tree[rb.leaves + 3] == fox_per_leaf(4.0f + FOX_PER_PRIORITY_EPS, 0.5f));
    ck_assert(rb.tree[rb.leaves + 6] == fox_per_leaf(p16, 0.5f));
    ck_assert(rb.max_priority == p16);
    for (int round = 0; round < 50; round++) {
        int32_t j[3] = {round % 10, (round * 7) % 10, (round * 3 + 1) % 10};
        float q[3] = {0.1f * round, 1.0f / (1 + round), 3.3f};
        fox_replay_update(&rb, j, q, 3, rb.pushes);
        fox_replay_push(&rb, &t);
    }
    for (int node = 1; node < rb.leaves; node++)
        ck_assert(rb.tree[node] == rb.tree[2 * node] + rb.tree[2 * node + 1]);
    for (int i = 10; i < rb.leaves; i++)
        ck_assert(rb.tree[rb.leaves + i] == 0.0);
    /* The draw from given uniforms: slot i holds mass [prefix_i, prefix_i + leaf_i). */
    int32_t out[4];
    float w[4];
    const float u[4] = {0.0f, 0.5f, 0.25f, 0.999f};
    fox_replay_sample_at(&rb, 4, 0.4f, u, out, w);
    double slice = rb.tree[1] / 4.0, prefix = 0.0;
    for (int b = 0; b < 4; b++) {
        double m = ((double)b + u[b]) * slice;
        prefix = 0.0;
        for (int i = 0; i < out[b]; i++)
            prefix += rb.tree[rb.leaves + i];
        ck_assert(m >= prefix - 1e-12 && m < prefix + rb.tree[rb.leaves + out[b]] + 1e-12);
        ck_assert(w[b] > 0.0f && w[b] <= 1.0f);
    }
    fox_replay_fini(&rb);
}
END_TEST

static Suite *
net_suite(void)
{
    Suite *su = suite_create("net");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_layout_default);
    tcase_add_test(tc, test_layout_hash_and_identity);
    tcase_add_test(tc, test_init_params);
    suite_add_tcase(su, tc);

    tc = tcase_create("layers");
    tcase_add_test(tc, test_c51_project_cases);
    tcase_add_test(tc, test_layernorm_fd);
    tcase_add_test(tc, test_grn_fd);
    suite_add_tcase(su, tc);

    tc = tcase_create("net");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_net_fd_mean);
    tcase_add_test(tc, test_net_fd_indep);
    tcase_add_test(tc, test_bdq_trunk_scale);
    tcase_add_test(tc, test_priority);
    tcase_add_test(tc, test_losses_vs_naive);
    tcase_add_test(tc, test_float_vs_double);
    tcase_add_test(tc, test_create_errors);
    suite_add_tcase(su, tc);

    tc = tcase_create("optim");
    tcase_add_test(tc, test_adam_step);
    tcase_add_test(tc, test_adam_clamped_lanes_match_scalar);
    tcase_add_test(tc, test_adam_nonfinite_grad_skips_element);
    tcase_add_test(tc, test_adam_zeroes_a_nonfinite_weight);
    tcase_add_test(tc, test_adam_weight_decay_and_l1);
    tcase_add_test(tc, test_sanitize_norm_clip);
    tcase_add_test(tc, test_target_sync);
    suite_add_tcase(su, tc);

    tc = tcase_create("replay");
    tcase_add_test(tc, test_replay_update_skips_pushed_over);
    tcase_add_test(tc, test_replay_update_batch_order);
    suite_add_tcase(su, tc);
    return su;
}

int
main(void)
{
    return fox_test_run_suite(net_suite());
}
