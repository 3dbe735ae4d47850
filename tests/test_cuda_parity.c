/*
 * test_cuda_parity.c — the CUDA backend against the CPU reference, on the
 * GPU machine: the same weights and batch give the same expected Q, losses,
 * per-sample priorities, every gradient tensor and Adam step; a CUDA fold
 * trains to a validation Sharpe comparable to the CPU fold's; the graph
 * replay is deterministic and keeps the ISV readable from the host.
 *
 * Exits 77 (meson: skipped) with the reason when no CUDA device is present,
 * as on CI. Tolerances: FP32 on both sides, so the GPU's error against a
 * double-precision run of cpu/net.c must stay within 1e-4 relative per
 * tensor or within 4× the CPU float run's own error (summation order is
 * the only expected difference: cuBLAS and warp reductions sum in another
 * order than OpenBLAS and the CPU loops). TF32 is reported, not asserted
 * beyond a loose 5e-2 sanity bound, in the kernel-level cases; the math
 * modes' own case (math_modes_train_steps) bounds each of engine.cuda_math's
 * modes over a few train steps by its format's rounding. Runs without fork
 * (CK_NOFORK): a CUDA context does not survive fork().
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/bounds.h"
#include "gpu/cpu/net.h"
#include "gpu/cpu/optim.h"
#include "gpu/cuda/debug.h"
#include "gpu/isv.h"
#include "common/log.h"
#include "gpu/rng.h"
#include "tests/testutil.h"
#include "tests/cuda_parity.h"

/* ------------------------------------------------------------------------------------------ */
/* Fixture: the default network on the synthetic series, one CUDA backend, the CPU nets        */

fox_config fox_parity_cfg;
fox_model_layout fox_parity_lay;
fox_series fox_parity_series;
fox_features fox_parity_feat;
fox_fold fox_parity_fold;
fox_backend *fox_parity_gpu;
float *fox_parity_params, *fox_parity_target;

static double
rel_err_f(const float *x, const float *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t k = 0; k < n; k++) {
        double d = (double)x[k] - (double)ref[k];
        num += d * d;
        den += (double)ref[k] * ref[k];
    }
    return sqrt(num) / (den > 0.0 ? sqrt(den) : 1e-300);
}

static double
rel_err_fd(const float *x, const double *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t k = 0; k < n; k++) {
        double d = (double)x[k] - ref[k];
        num += d * d;
        den += ref[k] * ref[k];
    }
    return sqrt(num) / (den > 0.0 ? sqrt(den) : 1e-300);
}

static void
setup(void)
{
    char err[512];
    fox_config_default(&fox_parity_cfg);
    fox_parity_cfg.backend = FOX_BACKEND_CUDA;
    fox_parity_cfg.batch = BATCH;
    fox_parity_cfg.n_envs = 64;
    fox_parity_cfg.replay_capacity = 1 << 16;
    FOX_CK_OK(fox_model_layout_init(&fox_parity_lay, &fox_parity_cfg));
    ck_assert_msg(fox_parity_lay.S == 64 && fox_parity_lay.NT == 8,
                  "host_batch is sized for the default widths");
    FOX_CK_OK(
        fox_series_synthetic(&fox_parity_series, fox_parity_cfg.synth_bars, fox_parity_cfg.seed));
    FOX_CK_OK(fox_features_compute(&fox_parity_feat, &fox_parity_series, fox_parity_lay.S));
    FOX_CK_OK(fox_fold_split(fox_parity_series.n, fox_parity_feat.warmup, fox_parity_cfg.n_folds, 0,
                             &fox_parity_fold));
    fox_features_normalize(&fox_parity_feat, fox_parity_fold.train_begin,
                           fox_parity_fold.train_end);
    fox_backend_env env = {&fox_parity_cfg, &fox_parity_lay, &fox_parity_series, &fox_parity_feat,
                           &fox_parity_fold, 0, 1, NULL};
    int rv = fox_cuda_backend_ops.create(&fox_parity_gpu, &env, err, sizeof err);
    ck_assert_msg(rv == FOX_OK, "create: %s", err);

    fox_parity_params = malloc(fox_parity_lay.n_params * sizeof *fox_parity_params);
    fox_parity_target = malloc(fox_parity_lay.n_params * sizeof *fox_parity_target);
    ck_assert_ptr_nonnull(fox_parity_params);
    ck_assert_ptr_nonnull(fox_parity_target);
    fox_model_init_params(&fox_parity_lay, fox_parity_params, fox_parity_cfg.seed);
    /*
     * Undo the 0.1 scale of the C51 output layers and give biases and
     * LayerNorm parameters values away from 0 and 1, so that every
     * gradient is non-trivial; the target net is a nearby copy.
     */
    fox_rng rng;
    fox_rng_seed(&rng, 77);
    for (int i = 0; i < FOX_P_COUNT; i++) {
        const fox_tensor_desc *t = &fox_parity_lay.t[i];
        float *p = fox_parity_params + t->offset;
        size_t n = fox_tensor_size(&fox_parity_lay, i);
        int out_layer = i == FOX_P_VAL_W2 || (i >= FOX_P_BR0_W1 && i < FOX_P_IQN_WPHI &&
                                              (i - FOX_P_BR0_W1) % FOX_BRANCH_NT == FOX_BR_W2);
        for (size_t k = 0; k < n; k++) {
            float u = 2.0f * fox_rng_uniform(&rng) - 1.0f;
            if (out_layer)
                p[k] *= 10.0f;
            else if (t->cols == 1)
                p[k] += 0.1f * u;
        }
    }
    for (size_t k = 0; k < fox_parity_lay.n_params; k++)
        fox_parity_target[k] =
            fox_parity_params[k] * (1.0f + 0.02f * (2.0f * fox_rng_uniform(&rng) - 1.0f));
}

static void
teardown(void)
{
    fox_cuda_backend_ops.destroy(fox_parity_gpu);
    fox_parity_gpu = NULL;
    free(fox_parity_params);
    free(fox_parity_target);
    fox_features_fini(&fox_parity_feat);
    fox_series_fini(&fox_parity_series);
}

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                    */

START_TEST(forward_q_values)
{
    int R = 300; /* more than one chunk of the backend's evaluation forward when envs are few */
    host_batch *hb = malloc(sizeof *hb);
    ck_assert_ptr_nonnull(hb);
    make_batch(hb, 11);
    float *s = malloc((size_t)R * fox_parity_lay.S * sizeof *s);
    float *qc = malloc((size_t)R * fox_parity_lay.n_actions * sizeof *qc);
    float *qg = malloc((size_t)R * fox_parity_lay.n_actions * sizeof *qg);
    ck_assert(s && qc && qg);
    for (int b = 0; b < R; b++)
        memcpy(s + (size_t)b * fox_parity_lay.S, hb->s + (size_t)(b % BATCH) * fox_parity_lay.S,
               fox_parity_lay.S * sizeof *s);
    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &fox_parity_lay, R));
    FOX_CK_OK(fox_cpu_net_q_values(net, fox_parity_params, s, R, qc));
    fox_train_counters c;
    FOX_CK_OK(fox_cuda_backend_ops.state_io(fox_parity_gpu, 0, NULL, NULL, NULL, NULL, &c));
    FOX_CK_OK(fox_cuda_backend_ops.state_io(fox_parity_gpu, 1, fox_parity_params, fox_parity_target,
                                            fox_parity_params, fox_parity_params, &c));
    FOX_CK_OK(fox_cuda_backend_ops.q_start(fox_parity_gpu, s, R));
    FOX_CK_OK(fox_cuda_backend_ops.q_finish(fox_parity_gpu, qg));
    double e = rel_err_f(qg, qc, (size_t)R * fox_parity_lay.n_actions);
    printf("parity forward: expected Q of %d states, rel err %.3g (FP32)\n", R, e);
    ck_assert_msg(e < 1e-5, "expected Q rel err %g", e);

    /*
     * The same forward in TF32, the collection's math (net.c, fox__cuda_set_math): its error
     * on Q, and how many of the greedy actions of the batch's distinct states it changes.
     */
    float *qt = malloc((size_t)R * fox_parity_lay.n_actions * sizeof *qt);
    ck_assert_ptr_nonnull(qt);
    FOX_CK_OK(fox_cuda_debug_set_math(fox_parity_gpu, FOX_CUDA_MATH_TF32, 1));
    FOX_CK_OK(fox_cuda_backend_ops.q_start(fox_parity_gpu, s, R));
    FOX_CK_OK(fox_cuda_backend_ops.q_finish(fox_parity_gpu, qt));
    FOX_CK_OK(fox_cuda_debug_set_math(fox_parity_gpu, FOX_CUDA_MATH_FP32, 1));
    double et = rel_err_f(qt, qg, (size_t)R * fox_parity_lay.n_actions);
    int changed = 0, greedy = 0;
    for (int b = 0; b < BATCH && b < R; b++)
        for (int d = 0; d < fox_parity_lay.n_branches; d++) {
            const float *q32 =
                qg + (size_t)b * fox_parity_lay.n_actions + fox_parity_lay.branch_off[d];
            const float *q19 =
                qt + (size_t)b * fox_parity_lay.n_actions + fox_parity_lay.branch_off[d];
            int a32 = 0, a19 = 0;
            for (int k = 1; k < fox_parity_lay.branch_size[d]; k++) {
                a32 = q32[k] > q32[a32] ? k : a32;
                a19 = q19[k] > q19[a19] ? k : a19;
            }
            changed += a32 != a19;
            greedy++;
        }
    printf("parity forward: TF32 Q rel err %.3g against FP32; greedy actions changed %d of %d\n",
           et, changed, greedy);
    ck_assert_msg(et < 5e-2, "TF32 expected Q rel err %g", et);
    free(qt);
    fox_cpu_net_destroy(net);
    free(s);
    free(qc);
    free(qg);
    free(hb);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Losses and gradients                                                                       */

typedef struct grad_run {
    fox_cpu_net_loss loss;
    float *grads, *prio;
} grad_run;

/* Compare one GPU run with the CPU float run and the double reference; print per tensor. */
static void
compare(const char *what, const grad_run *g, const grad_run *c, const double *gd,
        const fox_cpud_net_loss *ld, const double *prio_d, int verbose, double tol_abs)
{
    const double lg[5] = {g->loss.total, g->loss.c51, g->loss.iqn, g->loss.aux_ret,
                          g->loss.aux_regime};
    const double lc[5] = {c->loss.total, c->loss.c51, c->loss.iqn, c->loss.aux_ret,
                          c->loss.aux_regime};
    const double lr[5] = {ld->total, ld->c51, ld->iqn, ld->aux_ret, ld->aux_regime};
    const char *names[5] = {"total", "c51", "iqn", "aux_ret", "aux_regime"};
    printf("parity %s: loss", what);
    for (int k = 0; k < 5; k++) {
        double eg = rel_scalar(lg[k], lr[k]), ec = rel_scalar(lc[k], lr[k]);
        printf(" %s %.6g (gpu %.2g, cpu %.2g)", names[k], lr[k], eg, ec);
        ck_assert_msg(eg < tol_abs || eg < 4 * ec, "%s loss %s: gpu rel err %g, cpu %g", what,
                      names[k], eg, ec);
    }
    printf("\n");
    double eg = rel_err_fd(g->prio, prio_d, BATCH), ec = rel_err_fd(c->prio, prio_d, BATCH);
    printf("parity %s: priorities rel err gpu %.3g cpu %.3g\n", what, eg, ec);
    ck_assert_msg(eg < 10 * tol_abs || eg < 4 * ec, "%s priorities: %g", what, eg);
    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < FOX_P_COUNT; i++) {
        size_t n = fox_tensor_size(&fox_parity_lay, i), o = fox_parity_lay.t[i].offset;
        if (n == 0)
            continue;
        eg = rel_err_fd(g->grads + o, gd + o, n);
        ec = rel_err_fd(c->grads + o, gd + o, n);
        double vs_cpu = rel_err_f(g->grads + o, c->grads + o, n);
        if (verbose)
            printf("parity %s: grad %-18s %7zu  gpu %.3g  cpu %.3g  gpu-vs-cpu %.3g\n", what,
                   fox_parity_lay.t[i].name, n, eg, ec, vs_cpu);
        if (eg > worst) {
            worst = eg;
            worst_name = fox_parity_lay.t[i].name;
        }
        ck_assert_msg(eg < tol_abs || eg < 4 * ec, "%s grad %s: gpu rel err %g, cpu %g", what,
                      fox_parity_lay.t[i].name, eg, ec);
    }
    printf("parity %s: worst gradient rel err vs double %.3g (%s)\n", what, worst, worst_name);
}

static void
run_all(const host_batch *hb, int weighted, int mode, const char *what, int verbose,
        double tol_abs, float unit)
{
    size_t np = fox_parity_lay.n_params;
    fox_cpu_net_batch b = batch_view(hb, weighted);
    fox_cpu_net_hparams hp = loss_hparams(mode);
    grad_run g = {{0}, calloc(np, sizeof(float)), calloc(BATCH, sizeof(float))};
    grad_run c = {{0}, calloc(np, sizeof(float)), calloc(BATCH, sizeof(float))};
    double *gd = calloc(np, sizeof *gd), *pd = calloc(np, sizeof *pd), *td = calloc(np, sizeof *td);
    double *prio_d = calloc(BATCH, sizeof *prio_d);
    int32_t *astar = calloc(BATCH * 4, sizeof *astar);
    ck_assert(g.grads && g.prio && c.grads && c.prio && gd && pd && td && prio_d && astar);

    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &fox_parity_lay, BATCH));
    FOX_CK_OK(fox_cpu_net_set_td_scale(net, unit));
    FOX_CK_OK(fox_cpu_net_loss_grad(net, fox_parity_params, fox_parity_target, &b, &hp, &c.loss,
                                    c.grads, c.prio));

    /* The double reference on the same (float) inputs. */
    fox_cpud_net *dnet = NULL;
    FOX_CK_OK(fox_cpud_net_create(&dnet, &fox_parity_lay, BATCH));
    FOX_CK_OK(fox_cpud_net_set_td_scale(dnet, unit));
    size_t ns = (size_t)BATCH * fox_parity_lay.S, nt = (size_t)BATCH * fox_parity_lay.NT;
    double *ds = malloc(2 * ns * sizeof *ds), *dr = malloc(5 * BATCH * sizeof *dr);
    double *dtau = malloc(2 * nt * sizeof *dtau);
    ck_assert(ds && dr && dtau);
    for (size_t k = 0; k < ns; k++) {
        ds[k] = hb->s[k];
        ds[ns + k] = hb->s_next[k];
    }
    for (int k = 0; k < BATCH; k++) {
        dr[k] = hb->r[k];
        dr[BATCH + k] = hb->done[k];
        dr[2 * BATCH + k] = hb->w[k];
        dr[3 * BATCH + k] = hb->aux[k];
    }
    for (size_t k = 0; k < nt; k++) {
        dtau[k] = hb->tau[k];
        dtau[nt + k] = hb->tau_next[k];
    }
    for (size_t k = 0; k < np; k++) {
        pd[k] = fox_parity_params[k];
        td[k] = fox_parity_target[k];
    }
    fox_cpud_net_batch bd = {BATCH,         ds,           ds + ns,      hb->a,
                             dr,            dr + BATCH,   weighted ? dr + 2 * BATCH : NULL,
                             dr + 3 * BATCH, hb->regime,  dtau,         dtau + nt};
    fox_cpud_net_hparams hpd = {hp.gamma_n, hp.iqn_lambda, hp.aux_lambda, hp.aux_label_scale,
                                mode, 1};
    fox_cpud_net_loss ld;
    FOX_CK_OK(fox_cpud_net_loss_grad(dnet, pd, td, &bd, &hpd, &ld, gd, prio_d));

    FOX_CK_OK(fox_cuda_debug_set_td_unit(fox_parity_gpu, unit));
    FOX_CK_OK(fox_cuda_debug_loss_grad(fox_parity_gpu, fox_parity_params, fox_parity_target, &b,
                                       &hp, &g.loss, g.grads, g.prio, astar));
    FOX_CK_OK(fox_cuda_debug_set_td_unit(fox_parity_gpu, 1.0f));
    /* The greedy next actions: same as the CPU's argmax of E[Z] on s′. */
    float *q = malloc((size_t)BATCH * fox_parity_lay.n_actions * sizeof *q);
    ck_assert_ptr_nonnull(q);
    FOX_CK_OK(fox_cpu_net_q_values(net, fox_parity_params, hb->s_next, BATCH, q));
    for (int i = 0; i < BATCH; i++)
        for (int d = 0; d < 4; d++) {
            const float *qd =
                q + (size_t)i * fox_parity_lay.n_actions + fox_parity_lay.branch_off[d];
            int best = 0;
            for (int k = 1; k < fox_parity_lay.branch_size[d]; k++)
                if (qd[k] > qd[best])
                    best = k;
            ck_assert_msg(astar[i * 4 + d] == best, "a* of sample %d branch %d: gpu %d cpu %d", i,
                          d, astar[i * 4 + d], best);
        }
    compare(what, &g, &c, gd, &ld, prio_d, verbose, tol_abs);

    free(q);
    fox_cpud_net_destroy(dnet);
    fox_cpu_net_destroy(net);
    free(ds);
    free(dr);
    free(dtau);
    free(g.grads);
    free(g.prio);
    free(c.grads);
    free(c.prio);
    free(gd);
    free(pd);
    free(td);
    free(prio_d);
    free(astar);
}

START_TEST(loss_and_gradients)
{
    host_batch *hb = malloc(sizeof *hb);
    ck_assert_ptr_nonnull(hb);
    make_batch(hb, 21);
    /* Every product in FP32, a*'s forward too: the backends' arithmetic side by side. */
    FOX_CK_OK(fox_cuda_debug_set_math(fox_parity_gpu, FOX_CUDA_MATH_FP32, 0));
    run_all(hb, 0, FOX_TARGET_MEAN, "fp32 mean", 1, 1e-4, 1.0f);
    run_all(hb, 1, FOX_TARGET_MEAN, "fp32 mean weighted", 0, 1e-4, 1.0f);
    run_all(hb, 0, FOX_TARGET_INDEP, "fp32 indep", 0, 1e-4, 1.0f);
    /*
     * The IQN's values in a unit (the moving grid's fox_td_scale): both heads' outputs scaled,
     * the TD errors in it; a unit below the errors puts most of them on Huber's linear part, one
     * above on its quadratic part.
     */
    run_all(hb, 0, FOX_TARGET_MEAN, "fp32 mean, IQN unit 0.05", 0, 1e-4, 0.05f);
    run_all(hb, 1, FOX_TARGET_MEAN, "fp32 mean weighted, IQN unit 30", 0, 1e-4, 30.0f);
    /*
     * The large-batch paths at this batch: the heads' output layer by slots and d hid by head
     * (from FOX_CUDA_SLOT_ROWS rows), each weight gradient of a batched pair or of the heads one
     * product an entry, the heads' dW2 over their real output rows (from 1,024), both nets'
     * IQN heads in one product after the forwards (from FOX_CUDA_IQN_BESIDE_ROWS).
     */
    fox_cuda_paths defaults, was, large = {1, 1, 1, 0};
    FOX_CK_OK(fox_cuda_debug_set_paths(fox_parity_gpu, &large, &defaults));
    run_all(hb, 0, FOX_TARGET_MEAN, "fp32 mean, large-batch paths", 0, 1e-4, 1.0f);
    /* Every epilogue one output a thread (the path of widths that are not multiples of 4). */
    fox_cuda_paths scalar = defaults;
    scalar.epilogue_fours = 0;
    FOX_CK_OK(fox_cuda_debug_set_paths(fox_parity_gpu, &scalar, &was));
    run_all(hb, 0, FOX_TARGET_MEAN, "fp32 mean, epilogues by one", 0, 1e-4, 1.0f);
    /* Back to the defaults, which the later tests (one backend, CK_FORK=no on the GPU) assume. */
    FOX_CK_OK(fox_cuda_debug_set_paths(fox_parity_gpu, &defaults, &was));
    free(hb);
}
END_TEST

START_TEST(tf32_accuracy)
{
    host_batch *hb = malloc(sizeof *hb);
    ck_assert_ptr_nonnull(hb);
    make_batch(hb, 31);
    FOX_CK_OK(fox_cuda_debug_set_math(fox_parity_gpu, FOX_CUDA_MATH_TF32, 1));
    run_all(hb, 0, FOX_TARGET_MEAN, "tf32 mean", 1, 5e-2, 1.0f);
    free(hb);
}
END_TEST

/*
 * engine.cuda_math's modes against the CPU reference: from the fixture's weights, MATH_STEPS
 * train steps (losses and gradients, then the clipped Adam step) on one batch in each mode,
 * the CPU backend's float trajectory beside them; then the expected Q of the batch's states
 * with each side's weights. Printed and bounded per mode, with u the mode's unit roundoff
 * (2^-11 for TF32's 10-bit mantissa, 2^-8 for BF16's 7) and τ = 32·u = 2^-p·sqrt(K), p the
 * mantissa bits and K = 256 the batch a weight gradient sums over (a sum of K rounded products
 * drifts as sqrt(K) of a product's rounding, which matters where the sum cancels):
 * - the loss of every step and Q, within τ (FP32: the 1e-4 of the other cases);
 * - the first step's gradients (the same weights on both sides), each tensor within 4·τ:
 *   TF32's worst tensor already reaches ~τ (docs/performance.md), where a few sums cancel;
 * - the parameters after the steps, as the error of their update p − p0 over the whole
 *   vector, within 2·sqrt(τ): Adam's first updates are ~lr·sign(g), so a gradient error e
 *   flips a fraction ~e of them, each off by 2·lr, an update error ~2·sqrt(e).
 * A garbage product (rel err ~1 in its tensor, or Q and the loss off by as much) fails the
 * gradient or Q bound in every mode: 4·τ is 0.5 at BF16. A mode that fell back to FP32 would
 * pass the bounds, so the reduced modes must also move the parameters off the FP32 run's bits.
 */
#define MATH_STEPS 3

/* One side's trajectory: the weights after the steps, each step's loss, the first gradients. */
typedef struct math_run {
    float *p, *m, *v, *g0, *q;
    double loss[MATH_STEPS];
} math_run;

static void
math_run_init(math_run *r, size_t np)
{
    r->p = malloc(np * sizeof *r->p);
    r->m = calloc(np, sizeof *r->m);
    r->v = calloc(np, sizeof *r->v);
    r->g0 = malloc(np * sizeof *r->g0);
    r->q = malloc((size_t)BATCH * fox_parity_lay.n_actions * sizeof *r->q);
    ck_assert(r->p && r->m && r->v && r->g0 && r->q);
    memcpy(r->p, fox_parity_params, np * sizeof *r->p);
}

static void
math_run_free(math_run *r)
{
    free(r->p);
    free(r->m);
    free(r->v);
    free(r->g0);
    free(r->q);
}

START_TEST(math_modes_train_steps)
{
    static const struct {
        const char *name;
        int math;
        double tol;
    } modes[] = {{"fp32", FOX_CUDA_MATH_FP32, 1e-4},
                 {"tf32", FOX_CUDA_MATH_TF32, 0x1p-6},
                 {"bf16", FOX_CUDA_MATH_BF16, 0x1p-3}};
    const size_t np = fox_parity_lay.n_params;
    host_batch *hb = malloc(sizeof *hb);
    float *g = malloc(np * sizeof *g), *fp32_p = malloc(np * sizeof *fp32_p);
    ck_assert(hb && g && fp32_p);
    make_batch(hb, 51);
    fox_cpu_net_batch b = batch_view(hb, 0);
    fox_cpu_net_hparams hp = loss_hparams(FOX_TARGET_MEAN);

    /* The CPU reference: the backend's float step, its Adam in fixed mode on a fresh ISV. */
    math_run c;
    math_run_init(&c, np);
    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &fox_parity_lay, BATCH));
    for (int t = 1; t <= MATH_STEPS; t++) {
        fox_cpu_net_loss loss;
        FOX_CK_OK(fox_cpu_net_loss_grad(net, c.p, fox_parity_target, &b, &hp, &loss, g, NULL));
        c.loss[t - 1] = loss.total;
        if (t == 1)
            memcpy(c.g0, g, np * sizeof *g);
        float scale =
            fox_cpu_clip_scale(fox_cpu_grad_norm_finite(g, np, NULL), fox_parity_cfg.grad_clip);
        fox_cpu_adam_clamp cl =
            fox_test_adam_clamp(fox_bound_weight_fixed(0.0f), INFINITY, INFINITY);
        fox_cpu_adam_step_clamped(c.p, g, c.m, c.v, np, fox_parity_cfg.lr, fox_parity_cfg.adam_b1,
                                  fox_parity_cfg.adam_b2, fox_parity_cfg.adam_eps, t, scale, &cl,
                                  NULL);
    }
    FOX_CK_OK(fox_cpu_net_q_values(net, c.p, hb->s, BATCH, c.q));
    double upd_den = 0.0;
    for (size_t k = 0; k < np; k++) {
        double u = (double)c.p[k] - fox_parity_params[k];
        upd_den += u * u;
    }
    ck_assert_msg(upd_den > 0.0, "the CPU's steps did not move the parameters");

    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const double tol = modes[i].tol;
        math_run r;
        math_run_init(&r, np);
        /* Every product in the mode, the greedy-action forwards too (greedy_tf32 off). */
        FOX_CK_OK(fox_cuda_debug_set_math(fox_parity_gpu, modes[i].math, 0));
        for (int t = 1; t <= MATH_STEPS; t++) {
            fox_train_loss loss;
            FOX_CK_OK(fox_cuda_debug_loss_grad(fox_parity_gpu, r.p, fox_parity_target, &b, &hp,
                                               &loss, g, NULL, NULL));
            r.loss[t - 1] = loss.total;
            if (t == 1)
                memcpy(r.g0, g, np * sizeof *g);
            FOX_CK_OK(fox_cuda_debug_adam(fox_parity_gpu, r.p, g, r.m, r.v, t, NULL, NULL));
        }
        fox_train_counters cnt;
        FOX_CK_OK(fox_cuda_backend_ops.state_io(fox_parity_gpu, 0, NULL, NULL, NULL, NULL, &cnt));
        FOX_CK_OK(fox_cuda_backend_ops.state_io(fox_parity_gpu, 1, r.p, fox_parity_target, r.m, r.v,
                                                &cnt));
        FOX_CK_OK(fox_cuda_backend_ops.q_start(fox_parity_gpu, hb->s, BATCH));
        FOX_CK_OK(fox_cuda_backend_ops.q_finish(fox_parity_gpu, r.q));

        double e_loss = 0.0, e_grad = 0.0, num = 0.0;
        const char *worst = "";
        for (int t = 0; t < MATH_STEPS; t++)
            e_loss = fmax(e_loss, rel_scalar(r.loss[t], c.loss[t]));
        for (int k = 0; k < FOX_P_COUNT; k++) {
            size_t n = fox_tensor_size(&fox_parity_lay, k), o = fox_parity_lay.t[k].offset;
            double e = n ? rel_err_f(r.g0 + o, c.g0 + o, n) : 0.0;
            if (e > e_grad) {
                e_grad = e;
                worst = fox_parity_lay.t[k].name;
            }
        }
        for (size_t k = 0; k < np; k++) {
            double d = (double)r.p[k] - c.p[k];
            num += d * d;
        }
        double e_upd = sqrt(num / upd_den);
        double e_q = rel_err_f(r.q, c.q, (size_t)BATCH * fox_parity_lay.n_actions);
        printf("parity math %s: max rel err vs CPU over %d steps: loss %.3g, parameters' update "
               "%.3g, Q %.3g; first gradients' worst tensor %.3g (%s); bounds %.3g, %.3g, %.3g; "
               "%.3g\n",
               modes[i].name, MATH_STEPS, e_loss, e_upd, e_q, e_grad, worst, tol, 2 * sqrt(tol),
               tol, 4 * tol);
        ck_assert_msg(e_loss < tol, "%s: loss rel err %g", modes[i].name, e_loss);
        ck_assert_msg(e_q < tol, "%s: Q rel err %g", modes[i].name, e_q);
        ck_assert_msg(e_grad < 4 * tol, "%s: gradient %s rel err %g", modes[i].name, worst, e_grad);
        ck_assert_msg(e_upd < 2 * sqrt(tol), "%s: parameters' update rel err %g", modes[i].name,
                      e_upd);
        if (modes[i].math == FOX_CUDA_MATH_FP32)
            memcpy(fp32_p, r.p, np * sizeof *fp32_p);
        else
            ck_assert_msg(memcmp(r.p, fp32_p, np * sizeof *fp32_p) != 0,
                          "%s: the parameters are FP32's to the bit: the mode did not take effect",
                          modes[i].name);
        math_run_free(&r);
    }
    fox_cpu_net_destroy(net);
    math_run_free(&c);
    free(fp32_p);
    free(g);
    free(hb);
}
END_TEST

/*
 * The default math: the online net's forward on s′ in TF32 (greedy_tf32),
 * whose Q values feed nothing but double DQN's a*. Against the same step
 * with that forward in FP32: a* may change only where the FP32 Q values
 * are a near-tie, and where no a* changed the losses and gradients are the
 * same, since nothing else reads that forward.
 */
START_TEST(greedy_next_tf32)
{
    size_t np = fox_parity_lay.n_params;
    host_batch *hb = malloc(sizeof *hb);
    float *q = malloc((size_t)BATCH * fox_parity_lay.n_actions * sizeof *q);
    grad_run r[2];
    int32_t *astar[2];
    ck_assert(hb && q);
    make_batch(hb, 41);
    fox_cpu_net_batch b = batch_view(hb, 0);
    fox_cpu_net_hparams hp = loss_hparams(FOX_TARGET_MEAN);
    for (int k = 0; k < 2; k++) {
        r[k].grads = malloc(np * sizeof(float));
        r[k].prio = malloc(BATCH * sizeof(float));
        astar[k] = malloc(BATCH * 4 * sizeof(int32_t));
        ck_assert(r[k].grads && r[k].prio && astar[k]);
        /* k = 1: the default */
        FOX_CK_OK(fox_cuda_debug_set_math(fox_parity_gpu, FOX_CUDA_MATH_FP32, k));
        FOX_CK_OK(fox_cuda_debug_loss_grad(fox_parity_gpu, fox_parity_params, fox_parity_target, &b,
                                           &hp, &r[k].loss, r[k].grads, r[k].prio, astar[k]));
    }
    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &fox_parity_lay, BATCH));
    FOX_CK_OK(fox_cpu_net_q_values(net, fox_parity_params, hb->s_next, BATCH, q));
    int changed = 0;
    for (int i = 0; i < BATCH * 4; i++) {
        if (astar[0][i] == astar[1][i])
            continue;
        const float *qd =
            q + (size_t)(i / 4) * fox_parity_lay.n_actions + fox_parity_lay.branch_off[i % 4];
        float q0 = qd[astar[0][i]], q1 = qd[astar[1][i]];
        double gap = fabs((double)q0 - q1) / (1.0 + fabs((double)q0));
        ck_assert_msg(gap < 1e-2, "TF32 changed a* of sample %d branch %d across a gap of %g",
                      i / 4, i % 4, gap);
        changed++;
    }
    double el = rel_scalar(r[1].loss.total, r[0].loss.total);
    double eg = rel_err_f(r[1].grads, r[0].grads, np);
    printf("parity greedy a* in TF32: %d of %d a* changed, loss rel diff %.3g, grads %.3g\n",
           changed, BATCH * 4, el, eg);
    if (changed == 0)
        ck_assert_msg(el < 1e-6 && eg < 1e-6, "a* unchanged but loss %g / grads %g moved", el, eg);
    for (int k = 0; k < 2; k++) {
        free(r[k].grads);
        free(r[k].prio);
        free(astar[k]);
    }
    fox_cpu_net_destroy(net);
    free(q);
    free(hb);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Adam                                                                                       */

START_TEST(adam_step)
{
    size_t np = fox_parity_lay.n_params;
    float *g = malloc(np * sizeof *g), *gc = malloc(np * sizeof *gc);
    float *pc = malloc(np * sizeof *pc), *pg = malloc(np * sizeof *pg);
    float *mc = malloc(np * sizeof *mc), *mg = malloc(np * sizeof *mg);
    float *vc = malloc(np * sizeof *vc), *vg = malloc(np * sizeof *vg);
    ck_assert(g && gc && pc && pg && mc && mg && vc && vg);
    fox_rng rng;
    fox_rng_seed(&rng, 5);
    for (size_t k = 0; k < np; k++) {
        g[k] = (float)fox_rng_normal(&rng) * 0.05f;
        mc[k] = (float)fox_rng_normal(&rng) * 1e-3f;
        vc[k] = fox_rng_uniform(&rng) * 1e-5f;
    }
    /*
     * The isfinite guard must skip these elements (m, v and weight unchanged,
     * bit for bit, with momentum that would otherwise move them); the norm
     * (~37) exceeds the clip (10).
     */
    const size_t bad_at[3] = {7, np / 2, np - 70};
    g[bad_at[0]] = NAN;
    g[bad_at[1]] = INFINITY;
    g[bad_at[2]] = -INFINITY;
    memcpy(pc, fox_parity_params, np * sizeof *pc);
    memcpy(pg, fox_parity_params, np * sizeof *pg);
    /* A weight as poisoned as its gradient is zeroed rather than kept. */
    pc[bad_at[0]] = pg[bad_at[0]] = NAN;
    memcpy(mg, mc, np * sizeof *mg);
    memcpy(vg, vc, np * sizeof *vg);
    memcpy(gc, g, np * sizeof *gc);
    int64_t t = 3;
    size_t bad = 0;
    double norm_c = fox_cpu_grad_norm_finite(gc, np, &bad), norm_g = 0.0;
    float scale = fox_cpu_clip_scale(norm_c, fox_parity_cfg.grad_clip);
    /* Fixed mode on a fresh ISV: Mech 9 at 100 × max(0, 1), m and v unbounded, no flags. */
    fox_cpu_adam_clamp cl = fox_test_adam_clamp(fox_bound_weight_fixed(0.0f), INFINITY, INFINITY);
    fox_cpu_adam_step_clamped(pc, gc, mc, vc, np, fox_parity_cfg.lr, fox_parity_cfg.adam_b1,
                              fox_parity_cfg.adam_b2, fox_parity_cfg.adam_eps, t, scale, &cl, NULL);
    float m_before[3], v_before[3];
    for (int j = 0; j < 3; j++) {
        m_before[j] = mg[bad_at[j]];
        v_before[j] = vg[bad_at[j]];
    }
    FOX_CK_OK(fox_cuda_debug_adam(fox_parity_gpu, pg, g, mg, vg, t, NULL, &norm_g));
    ck_assert_int_eq(bad, 3);
    for (int j = 0; j < 3; j++) {
        size_t k = bad_at[j];
        float want = j == 0 ? 0.0f : fox_parity_params[k];
        ck_assert_msg(memcmp(&pg[k], &want, sizeof *pg) == 0 &&
                          memcmp(&pc[k], &want, sizeof *pc) == 0,
                      "adam: weight %zu with a non-finite gradient moved", k);
        ck_assert_msg(memcmp(&mg[k], &m_before[j], sizeof *mg) == 0 &&
                          memcmp(&mc[k], &m_before[j], sizeof *mc) == 0,
                      "adam: m %zu with a non-finite gradient moved", k);
        ck_assert_msg(memcmp(&vg[k], &v_before[j], sizeof *vg) == 0 &&
                          memcmp(&vc[k], &v_before[j], sizeof *vc) == 0,
                      "adam: v %zu with a non-finite gradient moved", k);
    }
    /* Compare the updates, not the parameters (the update is ~1e-4 of a parameter). */
    double num = 0.0, den = 0.0;
    for (size_t k = 0; k < np; k++) {
        double uc = (double)pc[k] - fox_parity_params[k], ug = (double)pg[k] - fox_parity_params[k];
        num += (ug - uc) * (ug - uc);
        den += uc * uc;
    }
    double eu = sqrt(num / den), em = rel_err_f(mg, mc, np), ev = rel_err_f(vg, vc, np);
    double en = rel_scalar(norm_g, norm_c);
    printf("parity adam: norm %.6g (clip scale %.4f) rel err %.3g; update %.3g, m %.3g, v %.3g\n",
           norm_c, scale, en, eu, em, ev);
    ck_assert_msg(en < 1e-12, "norm rel err %g", en);
    ck_assert_msg(eu < 1e-4 && em < 1e-6 && ev < 1e-6, "adam: update %g m %g v %g", eu, em, ev);
    free(g);
    free(gc);
    free(pc);
    free(pg);
    free(mc);
    free(mg);
    free(vc);
    free(vg);
}
END_TEST

/*
 * Pearl B's consumers on the device (train.pearl_wd, train.pearl_l1 on an
 * adaptive backend): one Adam step with a staged ISV whose WD rates differ
 * per group and whose L1 rate is large enough to zero some GRN1 W2 weights,
 * against fox_cpu_adam_step_clamped tensor by tensor with the same rates
 * (the L1 step on GRN1 W2 only), bounds out of the way. The updates agree
 * within 1e-4 relative and the L1 step zeroes the same weights on both.
 */
START_TEST(adam_weight_decay_and_l1)
{
    char err[512];
    fox_config c = fox_parity_cfg;
    c.bounds_mode = FOX_BOUNDS_ADAPTIVE;
    c.pearl_wd = 1;
    c.pearl_l1 = 1;
    fox_backend_env env = {&c, &fox_parity_lay, &fox_parity_series, &fox_parity_feat,
                           &fox_parity_fold, 0, 1, NULL};
    fox_backend *ad = NULL;
    int rv = fox_cuda_backend_ops.create(&ad, &env, err, sizeof err);
    ck_assert_msg(rv == FOX_OK, "create: %s", err);
    size_t np = fox_parity_lay.n_params;
    float *g = malloc(np * sizeof *g), *pg = malloc(np * sizeof *pg), *pc = malloc(np * sizeof *pc);
    float *mc = malloc(np * sizeof *mc), *mg = malloc(np * sizeof *mg);
    float *vc = malloc(np * sizeof *vc), *vg = malloc(np * sizeof *vg);
    ck_assert(g && pg && pc && mc && mg && vc && vg);
    fox_rng rng;
    fox_rng_seed(&rng, 160);
    for (size_t k = 0; k < np; k++) {
        g[k] = (float)fox_rng_normal(&rng) * 0.05f;
        mc[k] = (float)fox_rng_normal(&rng) * 1e-3f;
        vc[k] = fox_rng_uniform(&rng) * 1e-5f;
    }
    memcpy(pg, fox_parity_params, np * sizeof *pg);
    memcpy(pc, fox_parity_params, np * sizeof *pc);
    memcpy(mg, mc, np * sizeof *mg);
    memcpy(vg, vc, np * sizeof *vg);
    float isv[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    for (int grp = 0; grp < FOX_GROUP_COUNT; grp++) {
        isv[fox_isv_weight_bound_slot(grp)] = 1e30f;
        isv[fox_isv_adam_m_bound_slot(grp)] = 1e30f;
        isv[fox_isv_adam_v_bound_slot(grp)] = 1e30f;
        isv[fox_isv_wd_rate_slot(grp)] = 20.0f * (float)(grp + 1);
    }
    /* lr · L1 of 5 % of a typical GRN1 W2 weight: some land on zero. */
    size_t o1 = fox_parity_lay.t[FOX_P_GRN1_W2].offset,
           n1 = fox_tensor_size(&fox_parity_lay, FOX_P_GRN1_W2);
    double mean1 = 0.0;
    for (size_t k = 0; k < n1; k++)
        mean1 += fabs((double)fox_parity_params[o1 + k]) / (double)n1;
    isv[FOX_ISV_L1_LAMBDA] = (float)(0.05 * mean1 / fox_parity_cfg.lr);
    int64_t t = 2;
    double norm_c = fox_cpu_grad_norm_finite(g, np, NULL), norm_g = 0.0;
    float scale = fox_cpu_clip_scale(norm_c, fox_parity_cfg.grad_clip);
    for (int i = 0; i < FOX_P_COUNT; i++) {
        size_t n = fox_tensor_size(&fox_parity_lay, i), o = fox_parity_lay.t[i].offset;
        int grp = fox_parity_lay.t[i].group;
        if (!n)
            continue;
        fox_cpu_adam_clamp cl = fox_test_adam_clamp(1e30f, 1e30f, 1e30f);
        cl.wd = isv[fox_isv_wd_rate_slot(grp)];
        cl.l1 = i == FOX_P_GRN1_W2 ? isv[FOX_ISV_L1_LAMBDA] : 0.0f;
        fox_cpu_adam_step_clamped(pc + o, g + o, mc + o, vc + o, n, fox_parity_cfg.lr,
                                  fox_parity_cfg.adam_b1, fox_parity_cfg.adam_b2,
                                  fox_parity_cfg.adam_eps, t, scale, &cl, NULL);
    }
    FOX_CK_OK(fox_cuda_debug_adam(ad, pg, g, mg, vg, t, isv, &norm_g));
    double num = 0.0, den = 0.0;
    size_t zeros_c = 0, zeros_g = 0, zeros_both = 0;
    for (int i = 0; i < FOX_P_COUNT; i++) {
        size_t n = fox_tensor_size(&fox_parity_lay, i), o = fox_parity_lay.t[i].offset;
        for (size_t k = o; k < o + n; k++) {
            double uc = (double)pc[k] - fox_parity_params[k],
                   ug = (double)pg[k] - fox_parity_params[k];
            num += (ug - uc) * (ug - uc);
            den += uc * uc;
            if (i == FOX_P_GRN1_W2) {
                zeros_c += pc[k] == 0.0f;
                zeros_g += pg[k] == 0.0f;
                zeros_both += pc[k] == 0.0f && pg[k] == 0.0f;
            }
        }
    }
    double eu = sqrt(num / den);
    printf("parity adam wd+l1: update rel err %.3g; GRN1 W2 zeroed by L1: %zu (cpu) %zu (gpu) of "
           "%zu\n",
           eu, zeros_c, zeros_g, n1);
    ck_assert_msg(eu < 1e-4, "adam wd+l1: update rel err %g", eu);
    /* A weight within an ulp of the threshold may land either side: allow two of those. */
    ck_assert_msg(zeros_c > 0 && zeros_both + 2 >= zeros_c && zeros_both + 2 >= zeros_g,
                  "L1 zeros: cpu %zu gpu %zu both %zu", zeros_c, zeros_g, zeros_both);
    fox_cuda_backend_ops.destroy(ad);
    free(g);
    free(pg);
    free(pc);
    free(mc);
    free(mg);
    free(vc);
    free(vg);
}
END_TEST

START_TEST(replay_memory)
{
    char err[512];
    size_t tot[2], rep[2];
    int caps[2] = {1 << 20, 4 << 20};
    for (int k = 0; k < 2; k++) {
        fox_config c = fox_parity_cfg;
        c.replay_capacity = caps[k];
        fox_backend *be = NULL;
        fox_backend_env env = {&c, &fox_parity_lay, &fox_parity_series, &fox_parity_feat,
                               &fox_parity_fold, 0, 1, NULL};
        int rv = fox_cuda_backend_ops.create(&be, &env, err, sizeof err);
        ck_assert_msg(rv == FOX_OK, "create: %s", err);
        fox_cuda_debug_memory(be, &tot[k], &rep[k]);
        fox_cuda_backend_ops.destroy(be);
    }
    double per_m = (double)(tot[1] - tot[0]) / ((caps[1] - caps[0]) / 1e6);
    printf("memory: %.1f MB of device memory per million replay transitions (measured; ring "
           "%.1f MB per million), backend total %.1f MB at 1M capacity, batch %d, %d envs\n",
           per_m / 1e6, (double)rep[0] / caps[0], (double)tot[0] / 1e6, fox_parity_cfg.batch,
           fox_parity_cfg.n_envs);
    ck_assert(per_m > 0.0 && per_m < 100e6);
}
END_TEST

int
main(void)
{
    fox_test_require_cuda("test_cuda_parity");
    fox_log_level = FOX_LOG_WARNING;
    Suite *s = suite_create("cuda_parity");
    TCase *tc = tcase_create("kernels");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, forward_q_values);
    tcase_add_test(tc, loss_and_gradients);
    tcase_add_test(tc, tf32_accuracy);
    tcase_add_test(tc, math_modes_train_steps);
    tcase_add_test(tc, greedy_next_tf32);
    tcase_add_test(tc, adam_step);
    tcase_add_test(tc, adam_weight_decay_and_l1);
    tcase_add_test(tc, replay_memory);
    fox_parity_stab_tests(tc);
    fox_parity_per_tests(tc);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("engine");
    tcase_set_timeout(te, 600);
    fox_parity_engine_tests(te);
    suite_add_tcase(s, te);
    return fox_test_run_suite_nofork(s);
}
