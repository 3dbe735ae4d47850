/*
 * test_net.c — unit tests of the CPU reference network (gpu/cpu/net.c) and
 * the parameter layout (gpu/model.c).
 *
 * The gradient checks run the double-precision twin (fox_cpud_net_*) with
 * central differences on a shrunk network, for every element of every
 * tensor, for each loss part and both target modes; layer-level checks
 * cover the GRN (with and without Wr) and LayerNorm.
 * Not tested here: the losses against a naive transcription and the float
 * build against the double one (test_net_ref.c), the optimizer and the
 * replay ring (test_optim.c), the training loop that calls these
 * (test_engine.c) and the CUDA kernels (the GPU parity suite).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/config.h"
#include "gpu/cpu/net.h"
#include "common/error.h"
#include "gpu/model.h"
#include "gpu/rng.h"
#include "tests/net_fixture.h"
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

/* The finite-difference check of every part under target mode `mode`, the IQN's TD errors in
 * units of td_scale (set_td_scale). */
static void
net_fd_mode(int mode, double td_scale)
{
    net_fx f;
    net_fx_init(&f, 3, 2024 + mode);
    FOX_CK_OK(fox_cpud_net_set_td_scale(f.net, td_scale));
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
        printf("FD %-5s %-5s td scale %g: worst rel %.2e (%s), worst abs %.2e, all %zu params\n",
               mode == FOX_TARGET_MEAN ? "mean" : "indep", part_name[part], td_scale, worst_rel,
               worst_name, worst_abs, f.lay.n_real);
    }
    ck_assert_msg(!failed, "finite-difference check failed (details on stderr)");
    free(an);
    net_fx_fini(&f);
}

START_TEST(test_net_fd_mean)
{
    net_fd_mode(FOX_TARGET_MEAN, 1.0);
}
END_TEST

START_TEST(test_net_fd_indep)
{
    net_fd_mode(FOX_TARGET_INDEP, 1.0);
}
END_TEST

/*
 * The IQN's values in a unit (set_td_scale): finite differences over every
 * part at units 2.5 and 0.2 (most TD errors on Huber's quadratic, then on
 * its linear part); rewards k times larger in a unit k times larger give
 * the same IQN loss and the same IQN gradient in every tensor (the head's
 * quantiles are unit × outputs, targets included, the errors in the unit),
 * which with the errors alone in the unit (the head's outputs unscaled) they
 * did not; the C51 loss does not see the unit; a unit ≤ 0 or not finite is
 * refused.
 */
START_TEST(test_net_fd_td_scale)
{
    net_fd_mode(FOX_TARGET_MEAN, 2.5);
    net_fd_mode(FOX_TARGET_MEAN, 0.2);
    net_fx f;
    net_fx_init(&f, 3, 77);
    size_t n = f.lay.n_params;
    double *g1 = dalloc(n), *gk = dalloc(n);
    fox_cpud_net_loss one, scaled;
    part_grad(&f, PART_IQN, FOX_TARGET_MEAN, g1);
    net_grad(&f, LAMBDA_IQN, 0.0, FOX_TARGET_MEAN, 0, gk, &one);
    const double k = 40.0;
    for (int b = 0; b < f.in.B; b++)
        f.in.r[b] *= k;
    FOX_CK_OK(fox_cpud_net_set_td_scale(f.net, k));
    part_grad(&f, PART_IQN, FOX_TARGET_MEAN, gk);
    net_grad(&f, LAMBDA_IQN, 0.0, FOX_TARGET_MEAN, 0, f.grads, &scaled);
    ck_assert_msg(fabs(scaled.iqn - one.iqn) <= 1e-12 * one.iqn && one.iqn > 0.0,
                  "IQN loss at rewards x%g, unit %g: %.15g; at unit 1: %.15g", k, k, scaled.iqn,
                  one.iqn);
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num += (gk[i] - g1[i]) * (gk[i] - g1[i]);
        den += g1[i] * g1[i];
    }
    ck_assert_msg(den > 0.0 && sqrt(num / den) < 1e-10, "IQN gradient rel diff %g",
                  sqrt(num / den));
    FOX_CK_OK(fox_cpud_net_set_td_scale(f.net, 1.0));
    net_grad(&f, LAMBDA_IQN, 0.0, FOX_TARGET_MEAN, 0, f.grads, &one);
    FOX_CK_OK(fox_cpud_net_set_td_scale(f.net, k));
    net_grad(&f, LAMBDA_IQN, 0.0, FOX_TARGET_MEAN, 0, f.grads, &scaled);
    ck_assert_double_eq(scaled.c51, one.c51);
    ck_assert_int_eq(fox_cpud_net_set_td_scale(f.net, 0.0), FOX_EINVAL);
    ck_assert_int_eq(fox_cpud_net_set_td_scale(f.net, -1.0), FOX_EINVAL);
    ck_assert_int_eq(fox_cpud_net_set_td_scale(f.net, NAN), FOX_EINVAL);
    free(g1);
    free(gk);
    net_fx_fini(&f);
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
    tcase_add_test(tc, test_net_fd_td_scale);
    tcase_add_test(tc, test_bdq_trunk_scale);
    tcase_add_test(tc, test_priority);
    tcase_add_test(tc, test_create_errors);
    suite_add_tcase(su, tc);
    return su;
}

int
main(void)
{
    return fox_test_run_suite(net_suite());
}
