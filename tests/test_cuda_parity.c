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
 * beyond a loose 5e-2 sanity bound. Runs without fork (CK_NOFORK): a CUDA
 * context does not survive fork().
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/bounds.h"
#include "gpu/cpu/net.h"
#include "gpu/cpu/optim.h"
#include "gpu/cpu/replay.h"
#include "gpu/cpu/stab.h"
#include "gpu/cuda/debug.h"
#include "gpu/engine.h"
#include "gpu/engine_impl.h"
#include "gpu/env.h"
#include "gpu/isv.h"
#include "gpu/per.h"
#include "common/log.h"
#include "gpu/rng.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------------------------------ */
/* Fixture: the default network on the synthetic series, one CUDA backend, the CPU nets        */

#define BATCH 256

static fox_config cfg;
static fox_model_layout lay;
static fox_series series;
static fox_features feat;
static fox_fold fold;
static fox_backend *gpu;
static float *params, *target; /* perturbed so that every head carries signal */

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

static double
rel_scalar(double x, double ref)
{
    return fabs(x - ref) / (fabs(ref) > 1e-300 ? fabs(ref) : 1e-300);
}

static void
setup(void)
{
    char err[512];
    fox_config_default(&cfg);
    cfg.backend = FOX_BACKEND_CUDA;
    cfg.batch = BATCH;
    cfg.n_envs = 64;
    cfg.replay_capacity = 1 << 16;
    FOX_CK_OK(fox_model_layout_init(&lay, &cfg));
    ck_assert_msg(lay.S == 64 && lay.NT == 8, "host_batch is sized for the default widths");
    FOX_CK_OK(fox_series_synthetic(&series, cfg.synth_bars, cfg.seed));
    FOX_CK_OK(fox_features_compute(&feat, &series, lay.S));
    FOX_CK_OK(fox_fold_split(series.n, feat.warmup, cfg.n_folds, 0, &fold));
    fox_features_normalize(&feat, fold.train_begin, fold.train_end);
    fox_backend_env env = {&cfg, &lay, &series, &feat, &fold};
    int rv = fox_cuda_backend_ops.create(&gpu, &env, err, sizeof err);
    ck_assert_msg(rv == FOX_OK, "create: %s", err);

    params = malloc(lay.n_params * sizeof *params);
    target = malloc(lay.n_params * sizeof *target);
    ck_assert_ptr_nonnull(params);
    ck_assert_ptr_nonnull(target);
    fox_model_init_params(&lay, params, cfg.seed);
    /*
     * Undo the 0.1 scale of the C51 output layers and give biases and
     * LayerNorm parameters values away from 0 and 1, so that every
     * gradient is non-trivial; the target net is a nearby copy.
     */
    fox_rng rng;
    fox_rng_seed(&rng, 77);
    for (int i = 0; i < FOX_P_COUNT; i++) {
        const fox_tensor_desc *t = &lay.t[i];
        float *p = params + t->offset;
        size_t n = fox_tensor_size(&lay, i);
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
    for (size_t k = 0; k < lay.n_params; k++)
        target[k] = params[k] * (1.0f + 0.02f * (2.0f * fox_rng_uniform(&rng) - 1.0f));
}

static void
teardown(void)
{
    fox_cuda_backend_ops.destroy(gpu);
    gpu = NULL;
    free(params);
    free(target);
    fox_features_fini(&feat);
    fox_series_fini(&series);
}

/* ------------------------------------------------------------------------------------------ */
/* A batch with a clear double-DQN argmax (so that both backends pick the same a*)             */

typedef struct host_batch {
    float s[BATCH * 64], s_next[BATCH * 64], r[BATCH], done[BATCH], w[BATCH], aux[BATCH];
    float tau[BATCH * 8], tau_next[BATCH * 8];
    int32_t a[BATCH * 4], regime[BATCH];
} host_batch;

static void
random_port(fox_rng *rng, float port[3])
{
    port[0] = (float)((int)fox_rng_below(rng, 9) - 4) / 4.0f;
    port[1] = port[0] != 0.0f ? 4.0f * fox_rng_uniform(rng) - 2.0f : 0.0f;
    port[2] = port[0] != 0.0f ? (float)fox_rng_below(rng, 65) / 64.0f : 0.0f;
}

static void
fill_row(fox_rng *rng, host_batch *hb, int b)
{
    int span = fold.train_end - fold.train_begin - 8;
    int t = fold.train_begin + (int)fox_rng_below(rng, (uint32_t)span);
    float port[3], port2[3];
    random_port(rng, port);
    random_port(rng, port2);
    fox__state_build(&feat, lay.S, t, port, hb->s + (size_t)b * lay.S);
    fox__state_build(&feat, lay.S, t + cfg.n_step, port2, hb->s_next + (size_t)b * lay.S);
    for (int d = 0; d < 4; d++)
        hb->a[b * 4 + d] = (int32_t)fox_rng_below(rng, (uint32_t)lay.branch_size[d]);
    hb->r[b] = 3.0f * fox_rng_uniform(rng) - 1.5f;
    hb->done[b] = fox_rng_uniform(rng) < 0.1f ? 1.0f : 0.0f;
    hb->w[b] = 0.2f + 0.8f * fox_rng_uniform(rng);
    hb->aux[b] = logf(series.close[t + 1] / series.close[t]);
    hb->regime[b] = series.regime[t];
    for (int k = 0; k < lay.NT; k++) {
        hb->tau[b * lay.NT + k] = fox_rng_uniform(rng);
        hb->tau_next[b * lay.NT + k] = fox_rng_uniform(rng);
    }
}

/* Rows whose online argmax over s′ has a near-tie are redrawn: rounding may break a tie either way. */
static void
make_batch(host_batch *hb, uint64_t seed)
{
    fox_rng rng;
    fox_rng_seed(&rng, seed);
    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &lay, BATCH));
    float *q = malloc((size_t)BATCH * lay.n_actions * sizeof *q);
    ck_assert_ptr_nonnull(q);
    for (int b = 0; b < BATCH; b++)
        fill_row(&rng, hb, b);
    for (int round = 0; round < 100; round++) {
        FOX_CK_OK(fox_cpu_net_q_values(net, params, hb->s_next, BATCH, q));
        int redrawn = 0;
        for (int b = 0; b < BATCH; b++)
            for (int d = 0; d < 4; d++) {
                const float *qd = q + (size_t)b * lay.n_actions + lay.branch_off[d];
                float best = -INFINITY, second = -INFINITY;
                for (int k = 0; k < lay.branch_size[d]; k++)
                    if (qd[k] > best) {
                        second = best;
                        best = qd[k];
                    } else if (qd[k] > second) {
                        second = qd[k];
                    }
                if (best - second < 1e-4f * (1.0f + fabsf(best))) {
                    fill_row(&rng, hb, b);
                    redrawn++;
                    d = 4;
                }
            }
        if (!redrawn)
            break;
        ck_assert_msg(round < 99, "could not draw a batch without argmax near-ties");
    }
    free(q);
    fox_cpu_net_destroy(net);
}

static fox_cpu_net_batch
batch_view(const host_batch *hb, int weighted)
{
    fox_cpu_net_batch b = {BATCH,   hb->s,  hb->s_next, hb->a,      hb->r,       hb->done,
                           weighted ? hb->w : NULL, hb->aux, hb->regime, hb->tau, hb->tau_next};
    return b;
}

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                    */

START_TEST(forward_q_values)
{
    int R = 300; /* more than one chunk of the backend's q_values forward when envs are few */
    host_batch *hb = malloc(sizeof *hb);
    ck_assert_ptr_nonnull(hb);
    make_batch(hb, 11);
    float *s = malloc((size_t)R * lay.S * sizeof *s);
    float *qc = malloc((size_t)R * lay.n_actions * sizeof *qc);
    float *qg = malloc((size_t)R * lay.n_actions * sizeof *qg);
    ck_assert(s && qc && qg);
    for (int b = 0; b < R; b++)
        memcpy(s + (size_t)b * lay.S, hb->s + (size_t)(b % BATCH) * lay.S, lay.S * sizeof *s);
    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &lay, R));
    FOX_CK_OK(fox_cpu_net_q_values(net, params, s, R, qc));
    fox_train_counters c;
    FOX_CK_OK(fox_cuda_backend_ops.state_io(gpu, 0, NULL, NULL, NULL, NULL, &c));
    FOX_CK_OK(fox_cuda_backend_ops.state_io(gpu, 1, params, target, params, params, &c));
    FOX_CK_OK(fox_cuda_backend_ops.q_values(gpu, s, R, qg));
    double e = rel_err_f(qg, qc, (size_t)R * lay.n_actions);
    printf("parity forward: expected Q of %d states, rel err %.3g (FP32)\n", R, e);
    ck_assert_msg(e < 1e-5, "q_values rel err %g", e);

    /*
     * The same forward in TF32, the collection's math (net.c, fox__cuda_set_math): its error
     * on Q, and how many of the greedy actions of the batch's distinct states it changes.
     */
    float *qt = malloc((size_t)R * lay.n_actions * sizeof *qt);
    ck_assert_ptr_nonnull(qt);
    FOX_CK_OK(fox_cuda_debug_set_math(gpu, 1, 1));
    FOX_CK_OK(fox_cuda_backend_ops.q_values(gpu, s, R, qt));
    FOX_CK_OK(fox_cuda_debug_set_math(gpu, 0, 1));
    double et = rel_err_f(qt, qg, (size_t)R * lay.n_actions);
    int changed = 0, greedy = 0;
    for (int b = 0; b < BATCH && b < R; b++)
        for (int d = 0; d < lay.n_branches; d++) {
            const float *q32 = qg + (size_t)b * lay.n_actions + lay.branch_off[d];
            const float *q19 = qt + (size_t)b * lay.n_actions + lay.branch_off[d];
            int a32 = 0, a19 = 0;
            for (int k = 1; k < lay.branch_size[d]; k++) {
                a32 = q32[k] > q32[a32] ? k : a32;
                a19 = q19[k] > q19[a19] ? k : a19;
            }
            changed += a32 != a19;
            greedy++;
        }
    printf("parity forward: TF32 Q rel err %.3g against FP32; greedy actions changed %d of %d\n",
           et, changed, greedy);
    ck_assert_msg(et < 5e-2, "TF32 q_values rel err %g", et);
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
        size_t n = fox_tensor_size(&lay, i), o = lay.t[i].offset;
        if (n == 0)
            continue;
        eg = rel_err_fd(g->grads + o, gd + o, n);
        ec = rel_err_fd(c->grads + o, gd + o, n);
        double vs_cpu = rel_err_f(g->grads + o, c->grads + o, n);
        if (verbose)
            printf("parity %s: grad %-18s %7zu  gpu %.3g  cpu %.3g  gpu-vs-cpu %.3g\n", what,
                   lay.t[i].name, n, eg, ec, vs_cpu);
        if (eg > worst) {
            worst = eg;
            worst_name = lay.t[i].name;
        }
        ck_assert_msg(eg < tol_abs || eg < 4 * ec, "%s grad %s: gpu rel err %g, cpu %g", what,
                      lay.t[i].name, eg, ec);
    }
    printf("parity %s: worst gradient rel err vs double %.3g (%s)\n", what, worst, worst_name);
}

/* The configured loss hyperparameters, target mode `mode`, an aux label scale of 0.004. */
static fox_cpu_net_hparams
loss_hparams(int mode)
{
    return (fox_cpu_net_hparams){
        powf(cfg.gamma, (float)cfg.n_step), cfg.iqn_lambda, cfg.aux_lambda, 0.004f, mode, 1};
}

static void
run_all(const host_batch *hb, int weighted, int mode, const char *what, int verbose,
        double tol_abs)
{
    size_t np = lay.n_params;
    fox_cpu_net_batch b = batch_view(hb, weighted);
    fox_cpu_net_hparams hp = loss_hparams(mode);
    grad_run g = {{0}, calloc(np, sizeof(float)), calloc(BATCH, sizeof(float))};
    grad_run c = {{0}, calloc(np, sizeof(float)), calloc(BATCH, sizeof(float))};
    double *gd = calloc(np, sizeof *gd), *pd = calloc(np, sizeof *pd), *td = calloc(np, sizeof *td);
    double *prio_d = calloc(BATCH, sizeof *prio_d);
    int32_t *astar = calloc(BATCH * 4, sizeof *astar);
    ck_assert(g.grads && g.prio && c.grads && c.prio && gd && pd && td && prio_d && astar);

    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &lay, BATCH));
    FOX_CK_OK(fox_cpu_net_loss_grad(net, params, target, &b, &hp, &c.loss, c.grads, c.prio));

    /* The double reference on the same (float) inputs. */
    fox_cpud_net *dnet = NULL;
    FOX_CK_OK(fox_cpud_net_create(&dnet, &lay, BATCH));
    size_t ns = (size_t)BATCH * lay.S, nt = (size_t)BATCH * lay.NT;
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
        pd[k] = params[k];
        td[k] = target[k];
    }
    fox_cpud_net_batch bd = {BATCH,         ds,           ds + ns,      hb->a,
                             dr,            dr + BATCH,   weighted ? dr + 2 * BATCH : NULL,
                             dr + 3 * BATCH, hb->regime,  dtau,         dtau + nt};
    fox_cpud_net_hparams hpd = {hp.gamma_n, hp.iqn_lambda, hp.aux_lambda, hp.aux_label_scale,
                                mode, 1};
    fox_cpud_net_loss ld;
    FOX_CK_OK(fox_cpud_net_loss_grad(dnet, pd, td, &bd, &hpd, &ld, gd, prio_d));

    FOX_CK_OK(
        fox_cuda_debug_loss_grad(gpu, params, target, &b, &hp, &g.loss, g.grads, g.prio, astar));
    /* The greedy next actions: same as the CPU's argmax of E[Z] on s′. */
    float *q = malloc((size_t)BATCH * lay.n_actions * sizeof *q);
    ck_assert_ptr_nonnull(q);
    FOX_CK_OK(fox_cpu_net_q_values(net, params, hb->s_next, BATCH, q));
    for (int i = 0; i < BATCH; i++)
        for (int d = 0; d < 4; d++) {
            const float *qd = q + (size_t)i * lay.n_actions + lay.branch_off[d];
            int best = 0;
            for (int k = 1; k < lay.branch_size[d]; k++)
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
    FOX_CK_OK(fox_cuda_debug_set_math(gpu, 0, 0));
    run_all(hb, 0, FOX_TARGET_MEAN, "fp32 mean", 1, 1e-4);
    run_all(hb, 1, FOX_TARGET_MEAN, "fp32 mean weighted", 0, 1e-4);
    run_all(hb, 0, FOX_TARGET_INDEP, "fp32 indep", 0, 1e-4);
    /*
     * The large-batch paths at this batch: the heads' output layer by slots and d hid by head
     * (from FOX_CUDA_SLOT_ROWS rows), each weight gradient of a batched pair or of the heads one
     * product an entry, the heads' dW2 over their real output rows (from 1,024), both nets'
     * IQN heads in one product after the forwards (from FOX_CUDA_IQN_BESIDE_ROWS).
     */
    fox_cuda_paths defaults, was, large = {1, 1, 1, 0};
    FOX_CK_OK(fox_cuda_debug_set_paths(gpu, &large, &defaults));
    run_all(hb, 0, FOX_TARGET_MEAN, "fp32 mean, large-batch paths", 0, 1e-4);
    /* Every epilogue one output a thread (the path of widths that are not multiples of 4). */
    fox_cuda_paths scalar = defaults;
    scalar.epilogue_fours = 0;
    FOX_CK_OK(fox_cuda_debug_set_paths(gpu, &scalar, &was));
    run_all(hb, 0, FOX_TARGET_MEAN, "fp32 mean, epilogues by one", 0, 1e-4);
    /* Back to the defaults, which the later tests (one backend, CK_FORK=no on the GPU) assume. */
    FOX_CK_OK(fox_cuda_debug_set_paths(gpu, &defaults, &was));
    free(hb);
}
END_TEST

START_TEST(tf32_accuracy)
{
    host_batch *hb = malloc(sizeof *hb);
    ck_assert_ptr_nonnull(hb);
    make_batch(hb, 31);
    FOX_CK_OK(fox_cuda_debug_set_math(gpu, 1, 1));
    run_all(hb, 0, FOX_TARGET_MEAN, "tf32 mean", 1, 5e-2);
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
    size_t np = lay.n_params;
    host_batch *hb = malloc(sizeof *hb);
    float *q = malloc((size_t)BATCH * lay.n_actions * sizeof *q);
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
        FOX_CK_OK(fox_cuda_debug_set_math(gpu, 0, k)); /* k = 1: the default */
        FOX_CK_OK(fox_cuda_debug_loss_grad(gpu, params, target, &b, &hp, &r[k].loss, r[k].grads,
                                           r[k].prio, astar[k]));
    }
    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &lay, BATCH));
    FOX_CK_OK(fox_cpu_net_q_values(net, params, hb->s_next, BATCH, q));
    int changed = 0;
    for (int i = 0; i < BATCH * 4; i++) {
        if (astar[0][i] == astar[1][i])
            continue;
        const float *qd = q + (size_t)(i / 4) * lay.n_actions + lay.branch_off[i % 4];
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
    size_t np = lay.n_params;
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
    memcpy(pc, params, np * sizeof *pc);
    memcpy(pg, params, np * sizeof *pg);
    /* A weight as poisoned as its gradient is zeroed rather than kept. */
    pc[bad_at[0]] = pg[bad_at[0]] = NAN;
    memcpy(mg, mc, np * sizeof *mg);
    memcpy(vg, vc, np * sizeof *vg);
    memcpy(gc, g, np * sizeof *gc);
    int64_t t = 3;
    size_t bad = 0;
    double norm_c = fox_cpu_grad_norm_finite(gc, np, &bad), norm_g = 0.0;
    float scale = fox_cpu_clip_scale(norm_c, cfg.grad_clip);
    /* Fixed mode on a fresh ISV: Mech 9 at 100 × max(0, 1), m and v unbounded, no flags. */
    fox_cpu_adam_clamp cl = fox_test_adam_clamp(fox_bound_weight_fixed(0.0f), INFINITY, INFINITY);
    fox_cpu_adam_step_clamped(pc, gc, mc, vc, np, cfg.lr, cfg.adam_b1, cfg.adam_b2, cfg.adam_eps,
                              t, scale, &cl, NULL);
    float m_before[3], v_before[3];
    for (int j = 0; j < 3; j++) {
        m_before[j] = mg[bad_at[j]];
        v_before[j] = vg[bad_at[j]];
    }
    FOX_CK_OK(fox_cuda_debug_adam(gpu, pg, g, mg, vg, t, NULL, &norm_g));
    ck_assert_int_eq(bad, 3);
    for (int j = 0; j < 3; j++) {
        size_t k = bad_at[j];
        float want = j == 0 ? 0.0f : params[k];
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
        double uc = (double)pc[k] - params[k], ug = (double)pg[k] - params[k];
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
    fox_config c = cfg;
    c.bounds_mode = FOX_BOUNDS_ADAPTIVE;
    c.pearl_wd = 1;
    c.pearl_l1 = 1;
    fox_backend_env env = {&c, &lay, &series, &feat, &fold};
    fox_backend *ad = NULL;
    int rv = fox_cuda_backend_ops.create(&ad, &env, err, sizeof err);
    ck_assert_msg(rv == FOX_OK, "create: %s", err);
    size_t np = lay.n_params;
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
    memcpy(pg, params, np * sizeof *pg);
    memcpy(pc, params, np * sizeof *pc);
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
    size_t o1 = lay.t[FOX_P_GRN1_W2].offset, n1 = fox_tensor_size(&lay, FOX_P_GRN1_W2);
    double mean1 = 0.0;
    for (size_t k = 0; k < n1; k++)
        mean1 += fabs((double)params[o1 + k]) / (double)n1;
    isv[FOX_ISV_L1_LAMBDA] = (float)(0.05 * mean1 / cfg.lr);
    int64_t t = 2;
    double norm_c = fox_cpu_grad_norm_finite(g, np, NULL), norm_g = 0.0;
    float scale = fox_cpu_clip_scale(norm_c, cfg.grad_clip);
    for (int i = 0; i < FOX_P_COUNT; i++) {
        size_t n = fox_tensor_size(&lay, i), o = lay.t[i].offset;
        int grp = lay.t[i].group;
        if (!n)
            continue;
        fox_cpu_adam_clamp cl = fox_test_adam_clamp(1e30f, 1e30f, 1e30f);
        cl.wd = isv[fox_isv_wd_rate_slot(grp)];
        cl.l1 = i == FOX_P_GRN1_W2 ? isv[FOX_ISV_L1_LAMBDA] : 0.0f;
        fox_cpu_adam_step_clamped(pc + o, g + o, mc + o, vc + o, n, cfg.lr, cfg.adam_b1,
                                  cfg.adam_b2, cfg.adam_eps, t, scale, &cl, NULL);
    }
    FOX_CK_OK(fox_cuda_debug_adam(ad, pg, g, mg, vg, t, isv, &norm_g));
    double num = 0.0, den = 0.0;
    size_t zeros_c = 0, zeros_g = 0, zeros_both = 0;
    for (int i = 0; i < FOX_P_COUNT; i++) {
        size_t n = fox_tensor_size(&lay, i), o = lay.t[i].offset;
        for (size_t k = o; k < o + n; k++) {
            double uc = (double)pc[k] - params[k], ug = (double)pg[k] - params[k];
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

/* ------------------------------------------------------------------------------------------ */
/* The stability kernels against their CPU twins (sentinel.h, bounds.h)                        */

/* The fused check kernel fires exactly when fox_sentinel_check does, on each kind of rule. */
START_TEST(check_kernel_vs_cpu)
{
    /*
     * Ten chunks of the check kernel (4096 floats each); the odd length is staged
     * misaligned (fox_cuda_debug_check), so the float4 body's scalar head and tail run too.
     */
    const size_t lens[] = {40000, 40003};
    size_t n = lens[1];
    float *x = malloc(n * sizeof *x), isv[FOX_ISV_TOTAL_DIM];
    ck_assert_ptr_nonnull(x);
    fox_isv_init(isv);
    isv[FOX_ISV_Q_ABS_REF] = 3.0f;
    isv[FOX_ISV_H_S2_RMS_EMA] = 0.5f; /* below 1: eff = 1 (the ε on the multiplier) */
    fox_rng rng;
    fox_rng_seed(&rng, 9);
    const int slots[] = {FOX_SENT_H_S1, FOX_SENT_TRUNK_WEIGHT_MAX, FOX_SENT_H_S2_MAX_ABS,
                         FOX_SENT_TRUNK_ADAM_V_MAX, FOX_SENT_ATOM_SPAN_MAX};
    int cases = 0;
    for (size_t li = 0; li < 2; li++)
    for (size_t si = 0; si < sizeof slots / sizeof slots[0]; si++) {
        int slot = slots[si];
        float t = 0.0f;
        if (fox_sentinel_kind(slot) == FOX_SENT_KIND_THRESHOLD)
            FOX_CK_OK(fox_sentinel_threshold(slot, isv, &t));
        size_t len = slot == FOX_SENT_ATOM_SPAN_MAX ? 51 + li : lens[li];
        /* clean; one NaN; one Inf; at the threshold; just below it */
        for (int c = 0; c < 5; c++) {
            for (size_t k = 0; k < len; k++)
                x[k] = (float)fox_rng_normal(&rng);
            size_t at = (size_t)fox_rng_below(&rng, (uint32_t)len);
            if (c == 1)
                x[at] = NAN;
            else if (c == 2)
                x[at] = -INFINITY;
            else if (c == 3 && t > 0.0f)
                x[at] = slot == FOX_SENT_ATOM_SPAN_MAX ? x[at] + t : t;
            else if (c == 4 && t > 0.0f)
                x[at] = slot == FOX_SENT_ATOM_SPAN_MAX ? 0.0f : nextafterf(t, 0.0f);
            int cpu = 0, gpu_fired = -1;
            FOX_CK_OK(fox_sentinel_check(slot, x, len, isv, &cpu));
            FOX_CK_OK(fox_cuda_debug_check(gpu, slot, x, 1, (int)len, (int)len, isv, &gpu_fired));
            ck_assert_msg(gpu_fired == cpu, "slot %d case %d: gpu %d cpu %d", slot, c, gpu_fired,
                          cpu);
            cases++;
        }
    }
    printf("stab check kernel: %d cases over %zu slots and 2 lengths agree with "
           "fox_sentinel_check\n", cases, sizeof slots / sizeof slots[0]);
    free(x);
}
END_TEST

/*
 * The fused check on strided buffers (the packed heads' logit columns): whole rows 16 bytes at
 * a time where width, stride and pointer allow, by scalar loads elsewhere. The columns past
 * the watched ones hold NaN, which must not fire; a NaN, an Inf or a value at the threshold in
 * a watched column must, as fox_sentinel_check does on the watched values alone.
 */
START_TEST(check_kernel_strided)
{
    const int shapes[][3] = {/* rows, cols, ld */
                             {9, 816, 1428},
                             {9, 51, 1428},
                             {9, 816, 1430},
                             {2, 5000, 5004}};
    const int slots[] = {FOX_SENT_ADV_LOGITS, FOX_SENT_H_S2_MAX_ABS};
    float isv[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    fox_rng rng;
    fox_rng_seed(&rng, 23);
    int cases = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int rows = shapes[k][0], cols = shapes[k][1], ld = shapes[k][2];
        float *x = malloc((size_t)rows * ld * sizeof *x),
              *w = malloc((size_t)rows * cols * sizeof *w);
        ck_assert(x && w);
        for (size_t si = 0; si < sizeof slots / sizeof slots[0]; si++) {
            int slot = slots[si];
            float t = 0.0f;
            if (fox_sentinel_kind(slot) == FOX_SENT_KIND_THRESHOLD)
                FOX_CK_OK(fox_sentinel_threshold(slot, isv, &t));
            /* clean; one NaN; one Inf; at the threshold */
            for (int c = 0; c < 4; c++) {
                for (int r = 0; r < rows; r++)
                    for (int j = 0; j < ld; j++)
                        x[(size_t)r * ld + j] = j < cols ? (float)fox_rng_normal(&rng) : NAN;
                int r = (int)fox_rng_below(&rng, (uint32_t)rows);
                int j = (int)fox_rng_below(&rng, (uint32_t)cols);
                float *at = &x[(size_t)r * ld + j];
                *at = c == 1 ? NAN : c == 2 ? INFINITY : c == 3 && t > 0.0f ? -t : *at;
                for (int q = 0; q < rows; q++)
                    memcpy(w + (size_t)q * cols, x + (size_t)q * ld, (size_t)cols * sizeof *w);
                int cpu = 0, gpu_fired = -1;
                FOX_CK_OK(fox_sentinel_check(slot, w, (size_t)rows * cols, isv, &cpu));
                FOX_CK_OK(fox_cuda_debug_check(gpu, slot, x, rows, cols, ld, isv, &gpu_fired));
                ck_assert_msg(gpu_fired == cpu, "slot %d %d x %d (ld %d) case %d: gpu %d cpu %d",
                              slot, rows, cols, ld, c, gpu_fired, cpu);
                ck_assert_msg(c == 0              ? !cpu
                              : c < 3 || t > 0.0f ? cpu
                                                  : 1,
                              "slot %d case %d: the reference did not fire", slot, c);
                cases++;
            }
        }
        free(x);
        free(w);
    }
    printf("stab check kernel, strided: %d cases over %zu shapes agree with fox_sentinel_check\n",
           cases, sizeof shapes / sizeof shapes[0]);
}
END_TEST

/*
 * Mech 10's site: the clamped h_s2, the RMS EMA and slots 12 / 49 as stab.c
 * computes them, from the site's own kernel with fixed bounds, from inside
 * GRN2's tail (fixed bounds' path), there on LayerNorm inputs with the GLU
 * shut, against the CPU's LayerNorm (γ scaled so that the clamp and slot 49
 * engage in the second pass), and both ways with adaptive bounds (the p99,
 * its pass 1 in the tail there, then the site kernel): H_S2_BOUND from the
 * pre-clamp p99 (a fresh SP4 state, so Pearl A takes the observation), then
 * the clamp at it.
 */
START_TEST(h_s2_site_vs_cpu)
{
    const int H2 = 128;
    const size_t n = (size_t)BATCH * H2;
    float *h = malloc(n * sizeof *h), *ref = malloc(n * sizeof *ref), *x = malloc(n * sizeof *x);
    float *zero = calloc(n, sizeof *zero), *dx = malloc(n * sizeof *dx), gam[128], beta[128],
          dg[128], db[128];
    float isv[FOX_ISV_TOTAL_DIM], isv_ref[FOX_ISV_TOTAL_DIM];
    int flags[FOX_SENTINEL_SLOTS];
    static fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    ck_assert(h && ref && x && zero && dx);
    fox_rng rng;
    fox_rng_seed(&rng, 12);
    static const char *names[] = {"site kernel", "site in GRN2's tail", "adaptive site kernel",
                                  "adaptive site after GRN2's tail"};
    for (int mode = 0; mode < 4; mode++)
        for (int pass = 0; pass < 2; pass++) {
            const int tail = mode % 2, adaptive = mode >= 2;
            fox_isv_init(isv);
            isv[FOX_ISV_H_S2_RMS_EMA] = pass ? 2.0f : 0.0f; /* the Pearl A sentinel, a value */
            memcpy(isv_ref, isv, sizeof isv);
            for (size_t k = 0; k < n; k++)
                x[k] = 3.0f * (float)fox_rng_normal(&rng);
            if (pass) {
                x[5] = NAN;
                x[n / 2] = INFINITY;
                x[n - 3] = -5e5f; /* past 100 × h_eff and past slot 49's 1e3 × h_eff */
            }
            /* In the tail h_s2 is the LayerNorm's output: |x̂| ≤ √128, γ takes it past both. */
            for (int c = 0; c < H2; c++) {
                gam[c] = pass ? 600.0f : 20.0f;
                beta[c] = 0.0f;
            }
            if (tail)
                FOX_CK_OK(
                    fox_cpu_net_layernorm_fwd_bwd(H2, BATCH, x, gam, beta, zero, h, dx, dg, db));
            else
                memcpy(h, x, n * sizeof *h);
            int f12 = fox_sentinel_check_nonfinite(h, n), f49 = 0;
            FOX_CK_OK(fox_sentinel_check(FOX_SENT_H_S2_MAX_ABS, h, n, isv_ref, &f49));
            float bound = fox_bound_h_s2_fixed(isv_ref[FOX_ISV_H_S2_RMS_EMA]);
            if (adaptive) {
                fox_bounds_wiener_init(ws);
                float p99 = fox_p99_abs(h, n);
                if (p99 > 0.0f)
                    fox_bounds_observe(isv_ref, ws, FOX_ISV_H_S2_BOUND, p99);
                bound = fox_bound_adaptive(isv_ref[FOX_ISV_H_S2_BOUND]);
            }
            double ss = 0.0;
            size_t clamped = 0;
            for (size_t k = 0; k < n; k++) {
                ref[k] = fox_clamp_finite(h[k], bound);
                clamped += ref[k] != h[k];
                ss += (double)ref[k] * ref[k];
            }
            /* Adaptive: Pearls A+D from the fresh state (pass 1: the value 2 keeps, x_lag primed). */
            fox_signal_observe(isv_ref, ws, FOX_ISV_H_S2_RMS_EMA, (float)sqrt(ss / (double)n),
                               adaptive);
            float rms = isv_ref[FOX_ISV_H_S2_RMS_EMA];
            memcpy(h, x, n * sizeof *h);
            FOX_CK_OK(
                fox_cuda_debug_h_s2_site(gpu, h, n, tail ? H2 : 0, gam[0], adaptive, isv, flags));
            /*
             * The fixed-bound site alone moves bits as the CPU does; the tail's sums go in
             * another order, and the device's p99 may contract its last step into an FMA.
             */
            double worst = 0.0;
            for (size_t k = 0; k < n; k++) {
                double d = fabs((double)h[k] - ref[k]) / fmax(1.0, fabs((double)ref[k]));
                worst = isnan(d) ? INFINITY : fmax(worst, d);
            }
            ck_assert_msg(tail       ? worst < 1e-4
                          : adaptive ? worst < 1e-6
                                     : memcmp(h, ref, n * sizeof *h) == 0,
                          "%s pass %d: clamped h_s2 differs (worst %g)", names[mode], pass, worst);
            ck_assert_int_eq(flags[FOX_SENT_H_S2], f12);
            ck_assert_int_eq(flags[FOX_SENT_H_S2_MAX_ABS], f49);
            double e = rel_scalar(isv[FOX_ISV_H_S2_RMS_EMA], rms);
            ck_assert_msg(e < (tail ? 1e-5 : 1e-6), "%s pass %d: H_S2_RMS_EMA gpu %g cpu %g",
                          names[mode], pass, (double)isv[FOX_ISV_H_S2_RMS_EMA], (double)rms);
            if (adaptive)
                ck_assert_msg(rel_scalar(isv[FOX_ISV_H_S2_BOUND], isv_ref[FOX_ISV_H_S2_BOUND]) <
                                  (tail ? 1e-4 : 1e-6),
                              "%s pass %d: H_S2_BOUND gpu %.9g cpu %.9g", names[mode], pass,
                              (double)isv[FOX_ISV_H_S2_BOUND], (double)isv_ref[FOX_ISV_H_S2_BOUND]);
            printf("stab h_s2 %s pass %d: %zu of %zu clamped at %.6g, worst rel diff %.2g, flags "
                   "12=%d 49=%d as the CPU, RMS EMA %.6g (rel err %.2g)\n",
                   names[mode], pass, clamped, n, (double)bound, worst, f12, f49, (double)rms, e);
        }
    free(h);
    free(ref);
    free(x);
    free(zero);
    free(dx);
}
END_TEST

/*
 * SP4 (adaptive bounds): the device producers against stab.c's maths, fed
 * the same buffers. One round is what a train step produces outside the
 * Adam kernel and Mech 2 / Mech 6: the p99 of |h_s2| → H_S2_BOUND and of
 * |target Q| → TARGET_Q_BOUND (observe skips 0), Pearl B per group →
 * slots 136–167, Pearl C (no engagements here: the rate decays), the L1
 * rate → 168, all through Pearls A+D with the Wiener state on the device.
 * Six rounds from the fold-boundary state with drifting scales, NaN / Inf
 * holes and a degenerate (all-zero) target round; all 40 slots 131–170
 * compared after every round. Tolerance 1e-4 relative (+1e-7 absolute): the
 * histograms are exact integer counts on both sides, so a p99 differs only
 * by the device's fused multiply-adds in the interpolation and Pearl D (an
 * ulp each) and by the order of the double sums (wd rate, L1).
 */
static void
sp4_cpu_round(float *isv, fox_wiener_state *ws, fox_pearl_c_state pc[3][FOX_GROUP_COUNT],
              const float *w, const float *g, const float *m, const float *v, const float *h,
              size_t nh, const float *tq, size_t ntq)
{
    float o = fox_p99_abs(h, nh);
    if (o > 0.0f)
        fox_bounds_observe(isv, ws, FOX_ISV_H_S2_BOUND, o);
    o = fox_p99_abs(tq, ntq);
    if (o > 0.0f)
        fox_bounds_observe(isv, ws, FOX_ISV_TARGET_Q_BOUND, o);
    for (int grp = 0; grp < FOX_GROUP_COUNT; grp++) {
        fox_span sp[FOX_P_COUNT];
        int ns = 0;
        size_t total = 0;
        for (int i = 0; i < FOX_P_COUNT; i++) {
            size_t n = fox_tensor_size(&lay, i);
            if (n && lay.t[i].group == grp) {
                sp[ns++] = (fox_span){lay.t[i].offset, n};
                total += n;
            }
        }
        if (!ns)
            continue;
        fox_group_stats gs;
        FOX_CK_OK(fox_pearl_b_group(w, g, m, v, sp, ns, &gs));
        fox_bounds_observe_group(isv, ws, grp, &gs);
        int slots[3] = {fox_isv_weight_bound_slot(grp), fox_isv_adam_m_bound_slot(grp),
                        fox_isv_adam_v_bound_slot(grp)};
        for (int f = 0; f < 3; f++) {
            float bound = isv[slots[f]];
            if (fox_pearl_c_update(&pc[f][grp], 0.0f, (float)total, 0.0f, &bound))
                isv[slots[f]] = bound;
        }
    }
    size_t o1 = lay.t[FOX_P_GRN1_W2].offset;
    float l1 = fox_pearl_b_l1_rate(w + o1, g + o1, lay.t[FOX_P_GRN1_W2].rows,
                                   lay.t[FOX_P_GRN1_W2].cols);
    fox_bounds_observe(isv, ws, FOX_ISV_L1_LAMBDA, l1);
}

START_TEST(sp4_producers_vs_cpu)
{
    size_t np = lay.n_params, nh = (size_t)BATCH * 128, ntq = (size_t)BATCH * 4 * 8;
    float *w = malloc(np * sizeof *w), *g = malloc(np * sizeof *g);
    float *m = malloc(np * sizeof *m), *v = malloc(np * sizeof *v);
    float *h = malloc(nh * sizeof *h), *tq = malloc(ntq * sizeof *tq);
    ck_assert(w && g && m && v && h && tq);
    float isv[FOX_ISV_TOTAL_DIM], ref[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    memcpy(ref, isv, sizeof isv);
    static fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_pearl_c_state pc[3][FOX_GROUP_COUNT];
    fox_bounds_wiener_init(ws);
    memset(pc, 0, sizeof pc);
    fox_rng rng;
    fox_rng_seed(&rng, 131);
    double worst = 0.0;
    int worst_slot = -1;
    for (int round = 0; round < 6; round++) {
        float sc = 1.0f + 0.5f * (float)round; /* a drifting level: Pearl D must follow it */
        for (size_t k = 0; k < np; k++) {
            w[k] = params[k] * sc;
            g[k] = 1e-3f * sc * (float)fox_rng_normal(&rng);
            m[k] = 1e-4f * sc * (float)fox_rng_normal(&rng);
            float e = 1e-3f * sc * (float)fox_rng_normal(&rng);
            v[k] = e * e;
        }
        for (size_t k = 0; k < nh; k++)
            h[k] = 2.0f * sc * (float)fox_rng_normal(&rng);
        for (size_t k = 0; k < ntq; k++) {
            /* heavy-tailed targets; round 3 all zero (degenerate: no observation) */
            float u = fox_rng_uniform(&rng);
            tq[k] = round == 3 ? 0.0f : sc * (float)fox_rng_normal(&rng) / (0.05f + u);
        }
        if (round == 2) {
            h[7] = NAN;
            h[nh - 1] = INFINITY;
            g[lay.t[FOX_P_GRN1_W2].offset + 3] = NAN;
            m[11] = -INFINITY;
            tq[1] = NAN;
        }
        sp4_cpu_round(ref, ws, pc, w, g, m, v, h, nh, tq, ntq);
        FOX_CK_OK(fox_cuda_debug_sp4(gpu, round == 0, w, g, m, v, h, nh, tq, ntq, isv));
        for (int i = FOX_ISV_SP4_BASE; i < FOX_ISV_SP4_BASE + 40; i++) {
            double d = fabs((double)isv[i] - (double)ref[i]);
            double tol = 1e-4 * fmax(fabs((double)isv[i]), fabs((double)ref[i])) + 1e-7;
            ck_assert_msg(d <= tol, "round %d: slot %d (%s) gpu %.9g cpu %.9g", round, i,
                          fox_isv_name(i), (double)isv[i], (double)ref[i]);
            double r = d / fmax(fabs((double)ref[i]), 1e-30);
            if (ref[i] != 0.0f && r > worst) {
                worst = r;
                worst_slot = i;
            }
        }
    }
    /* Deterministic: the same inputs from a fresh state give the same bits (no float atomics). */
    float isv_a[FOX_ISV_TOTAL_DIM], isv_b[FOX_ISV_TOTAL_DIM];
    memcpy(isv_a, isv, sizeof isv);
    memcpy(isv_b, isv, sizeof isv);
    FOX_CK_OK(fox_cuda_debug_sp4(gpu, 1, w, g, m, v, h, nh, tq, ntq, isv_a));
    FOX_CK_OK(fox_cuda_debug_sp4(gpu, 1, w, g, m, v, h, nh, tq, ntq, isv_b));
    ck_assert_msg(memcmp(isv_a + FOX_ISV_SP4_BASE, isv_b + FOX_ISV_SP4_BASE,
                         40 * sizeof(float)) == 0,
                  "SP4 producers differ between two identical runs");
    ck_assert(ref[FOX_ISV_H_S2_BOUND] > 0.0f && ref[FOX_ISV_TARGET_Q_BOUND] > 0.0f);
    ck_assert(ref[FOX_ISV_WEIGHT_BOUND_GRN1] > 0.0f && ref[FOX_ISV_L1_LAMBDA] >= 0.0f);
    printf("stab sp4 producers: 6 rounds, 40 slots 131-170 within 1e-4 of the CPU; worst rel err "
           "%.2g (slot %d), H_S2_BOUND %.5g, TARGET_Q_BOUND %.5g, WEIGHT_BOUND_GRN1 %.5g, "
           "L1_LAMBDA %.5g\n",
           worst, worst_slot, (double)isv[FOX_ISV_H_S2_BOUND],
           (double)isv[FOX_ISV_TARGET_Q_BOUND], (double)isv[FOX_ISV_WEIGHT_BOUND_GRN1],
           (double)isv[FOX_ISV_L1_LAMBDA]);
    free(w);
    free(g);
    free(m);
    free(v);
    free(h);
    free(tq);
}
END_TEST

/*
 * The norm kernel's producers on the device against fox_cpu_stab_q_signals
 * and fox_cpu_stab_grad_clip, in both bounds modes: 60 steps whose gradient
 * norm ramps from 2 to 20 (20 % noise, a NaN element in one step that
 * neither norm counts) and whose Q observations drift, from the
 * fold-boundary state. Q_ABS_REF, Q_DIR_ABS_REF (Pearls A+D in adaptive
 * mode), GRAD_NORM_EMA, GRAD_NORM_SLOW_EMA, GRAD_CLIP_BOUND, GRAD_CLIP and
 * the clip factor agree within 1e-4 relative at every step (the norm's
 * double sums differ in order only, Pearl D by an ulp of fused
 * multiply-adds); in adaptive mode the bound follows the norm up on both.
 */
START_TEST(grad_clip_vs_cpu)
{
    size_t np = lay.n_params;
    float *g = malloc(np * sizeof *g), *z = malloc(np * sizeof *z);
    ck_assert(g && z);
    fox_rng rng;
    fox_rng_seed(&rng, 170);
    double zz = 0.0;
    for (size_t k = 0; k < np; k++) {
        z[k] = (float)fox_rng_normal(&rng);
        zz += (double)z[k] * z[k];
    }
    const int slots[6] = {FOX_ISV_GRAD_NORM_EMA,   FOX_ISV_GRAD_NORM_SLOW_EMA,
                          FOX_ISV_GRAD_CLIP_BOUND, FOX_ISV_GRAD_CLIP,
                          FOX_ISV_Q_ABS_REF,       FOX_ISV_Q_DIR_ABS_REF};
    for (int adaptive = 0; adaptive <= 1; adaptive++) {
        float isv[FOX_ISV_TOTAL_DIM], ref[FOX_ISV_TOTAL_DIM];
        fox_isv_init(isv);
        memcpy(ref, isv, sizeof isv);
        fox_config c = cfg;
        c.bounds_mode = adaptive ? FOX_BOUNDS_ADAPTIVE : FOX_BOUNDS_FIXED;
        int flags[FOX_SENTINEL_SLOTS] = {0};
        fox_cpu_stab st = {.cfg = &c, .lay = &lay, .isv = ref, .flags = flags, .grads = g,
                           .adaptive = adaptive};
        fox_bounds_wiener_init(st.ws);
        float first = 0.0f;
        for (int t = 0; t < 60; t++) {
            double level = 2.0 + 18.0 * t / 59.0;
            double want = level * (1.0 + 0.2 * fox_rng_normal(&rng));
            for (size_t k = 0; k < np; k++)
                g[k] = (float)(want * z[k] / sqrt(zz));
            if (t == 30)
                g[np / 3] = NAN;
            /* The Q signals drift up with noise (Pearl D in adaptive mode, fixed α else). */
            float q = (float)(1.0 + 0.02 * t + 0.1 * fox_rng_normal(&rng));
            float qd = (float)(0.5 + 0.01 * t + 0.05 * fox_rng_normal(&rng));
            double norm;
            fox_cpu_stab_q_signals(&st, q, qd);
            float sc_cpu = fox_cpu_stab_grad_clip(&st, &norm), sc_gpu = 0.0f;
            FOX_CK_OK(fox_cuda_debug_grad_clip(gpu, t == 0, adaptive, g, q, qd, isv, &sc_gpu));
            ck_assert_msg(fabsf(sc_gpu - sc_cpu) <= 1e-4f * fmaxf(sc_cpu, 1e-6f),
                          "%s step %d: clip factor gpu %.9g cpu %.9g",
                          adaptive ? "adaptive" : "fixed", t, (double)sc_gpu, (double)sc_cpu);
            for (int j = 0; j < 6; j++) {
                double a = isv[slots[j]], b = ref[slots[j]];
                ck_assert_msg(fabs(a - b) <= 1e-4 * fmax(fabs(b), 1e-6),
                              "%s step %d: %s gpu %.9g cpu %.9g", adaptive ? "adaptive" : "fixed",
                              t, fox_isv_name(slots[j]), a, b);
            }
            if (t == 0)
                first = isv[FOX_ISV_GRAD_CLIP_BOUND];
        }
        if (adaptive)
            ck_assert_msg(isv[FOX_ISV_GRAD_CLIP_BOUND] > 2.0f * first,
                          "adaptive bound %g did not follow the norm up from %g",
                          (double)isv[FOX_ISV_GRAD_CLIP_BOUND], (double)first);
        printf("stab grad clip %s: 60 steps, norm ramp 2 -> 20, device = CPU within 1e-4; "
               "GRAD_CLIP_BOUND %.4g -> %.4g, GRAD_CLIP %.4g\n",
               adaptive ? "adaptive" : "fixed", (double)first,
               (double)isv[FOX_ISV_GRAD_CLIP_BOUND], (double)isv[FOX_ISV_GRAD_CLIP]);
    }
    free(g);
    free(z);
}
END_TEST

/*
 * TARGET_Q_BOUND as a training loss with adaptive bounds produces it (the
 * raw IQN targets from the loss kernel's first launch, then their p99):
 * against stab.c's observation (Pearl A, from the fold-boundary state) of
 * the CPU net's raw targets, caught at their stability point (slot 46,
 * before Mech 1 clips them). sp4_producers_vs_cpu feeds the producer a
 * buffer; this one the targets the device computes. They differ between
 * the backends by the products' rounding only, which moves a p99
 * interpolated inside a histogram bin by far less than 1e-3; targets from
 * another a*, another τ′ or a wrong count would move it by a bin (~0.4 %)
 * or more.
 */
typedef struct tq_catch {
    float *tq;
    size_t n;
} tq_catch;

static void
catch_tq(void *ctx, int slot, float *buf, size_t n)
{
    tq_catch *c = ctx;
    if (slot == FOX_SENT_TARGET_Q_POST_CLIP) {
        memcpy(c->tq, buf, n * sizeof *buf);
        c->n = n;
    }
}

START_TEST(target_q_bound_in_loss)
{
    host_batch *hb = malloc(sizeof *hb);
    size_t ntq = (size_t)BATCH * 4 * lay.NT;
    float *grads = malloc(lay.n_params * sizeof *grads);
    tq_catch c = {malloc(ntq * sizeof(float)), 0};
    ck_assert(hb && grads && c.tq);
    make_batch(hb, 41);
    /* a* from an FP32 forward, as the CPU's (make_batch keeps its argmax clear of near-ties). */
    FOX_CK_OK(fox_cuda_debug_set_math(gpu, 0, 0));
    fox_cpu_net_batch b = batch_view(hb, 0);
    fox_cpu_net_hparams hp = loss_hparams(FOX_TARGET_MEAN);
    fox_cpu_net *net = NULL;
    fox_cpu_net_loss loss;
    FOX_CK_OK(fox_cpu_net_create(&net, &lay, BATCH));
    fox_cpu_net_set_hook(net, catch_tq, &c, 0);
    FOX_CK_OK(fox_cpu_net_loss_grad(net, params, target, &b, &hp, &loss, grads, NULL));
    ck_assert_uint_eq(c.n, ntq);

    float isv[FOX_ISV_TOTAL_DIM], ref[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    memcpy(ref, isv, sizeof isv);
    static fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_bounds_wiener_init(ws);
    float p99 = fox_p99_abs(c.tq, ntq);
    ck_assert(p99 > 0.0f);
    fox_bounds_observe(ref, ws, FOX_ISV_TARGET_Q_BOUND, p99);
    FOX_CK_OK(fox_cuda_debug_target_q_bound(gpu, params, target, &b, &hp, isv));
    double e = rel_scalar(isv[FOX_ISV_TARGET_Q_BOUND], ref[FOX_ISV_TARGET_Q_BOUND]);
    printf("stab target_q_bound in the loss: gpu %.6g cpu %.6g (p99 of %zu raw targets), rel "
           "err %.2g\n",
           (double)isv[FOX_ISV_TARGET_Q_BOUND], (double)ref[FOX_ISV_TARGET_Q_BOUND], ntq, e);
    ck_assert_msg(e < 1e-3, "TARGET_Q_BOUND gpu %g cpu %g", (double)isv[FOX_ISV_TARGET_Q_BOUND],
                  (double)ref[FOX_ISV_TARGET_Q_BOUND]);
    fox_cpu_net_destroy(net);
    free(c.tq);
    free(grads);
    free(hb);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Engine level: graphs, determinism, ISV, memory, a short fold against the CPU                */

START_TEST(graph_determinism_and_isv)
{
    fox_config c;
    fox_config_default(&c);
    c.backend = FOX_BACKEND_CUDA;
    size_t np = 0;
    float *p[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        /*
         * The second run one step a graph launch, the first (the default below 4,096 rows)
         * four: the same bits either way, chunks of 30 and 20 taking both graphs.
         */
        fox_engine *e = fox_test_engine(&c);
        if (k == 1)
            FOX_CK_OK(fox_cuda_debug_set_unroll(e->be, 1));
        fox_step_stats st;
        /* Warm-up collects, then eager and captured full steps, in two chunks. */
        int rv = fox_engine_run_steps(e, 30, &st);
        ck_assert_msg(rv == FOX_OK, "run_steps: %s", fox_engine_errmsg(e));
        rv = fox_engine_run_steps(e, 30, &st);
        ck_assert_msg(rv == FOX_OK, "run_steps: %s", fox_engine_errmsg(e));
        ck_assert_msg(isfinite(st.loss) && st.loss > 0.0f, "loss %g", st.loss);
        ck_assert_int_eq(st.step, 60);
        fox_engine_info info;
        fox_engine_get_info(e, &info);
        ck_assert_str_eq(info.backend, "cuda");
        /* The mapped ISV, read without a sync: filled by the device, fingerprint kept. */
        const volatile float *isv = fox_engine_isv(e);
        ck_assert(isv[FOX_ISV_Q_ABS_REF] > 0.0f);
        ck_assert(isv[FOX_ISV_GRAD_NORM_EMA] > 0.0f);
        ck_assert(isv[FOX_ISV_AUX_LABEL_SCALE_EMA] > 0.0f);
        ck_assert(fox_isv_load_fingerprint((const float *)isv) == info.fingerprint);
        for (int i = 0; i < 50; i++)
            ck_assert_int_eq(fox_engine_flags(e)[i], 0);
        if (k == 0)
            printf("graphs: 60 steps, loss %.4f, grad norm %.3f, eps %.3f, Q_ABS_REF %.4f\n",
                   st.loss, st.grad_norm, st.epsilon, isv[FOX_ISV_Q_ABS_REF]);
        FOX_CK_OK(fox_engine_train_only(e, 20, &st));
        ck_assert(isfinite(st.loss));
        np = fox_engine_param_count(e);
        p[k] = malloc(np * sizeof(float));
        ck_assert_ptr_nonnull(p[k]);
        FOX_CK_OK(fox_engine_get_params(e, p[k], np));
        fox_engine_destroy(e);
    }
    ck_assert_msg(memcmp(p[0], p[1], np * sizeof(float)) == 0,
                  "two runs of the same seed differ on the GPU (four steps a launch, then one)");
    free(p[0]);
    free(p[1]);
}
END_TEST

/*
 * Four CUDA engines on four threads share the context: one creating or
 * destroying while another captures its graphs, steps or evaluates, each
 * ends with the parameters and test Sharpe of its seed alone.
 */
START_TEST(engines_on_threads_same_bits)
{
    fox_config c;
    fox_config_default(&c);
    c.backend = FOX_BACKEND_CUDA;
    fox_test_engines_same_bits(&c, 4, 60);
}
END_TEST

/*
 * A short adaptive (SP4) run on the GPU: eager and captured steps, no flag
 * fires, every bound slot the step produces is set on the device (no host
 * sync in the step: the mapped ISV is read after the chunk), the loss stays
 * finite.
 */
START_TEST(adaptive_training_no_flags)
{
    fox_config c;
    fox_config_default(&c);
    c.backend = FOX_BACKEND_CUDA;
    c.bounds_mode = FOX_BOUNDS_ADAPTIVE;
    fox_engine *e = fox_test_engine(&c);
    fox_step_stats st;
    for (int k = 0; k < 3; k++) {
        int rv = fox_engine_run_steps(e, 100, &st);
        ck_assert_msg(rv == FOX_OK, "run_steps: %s", fox_engine_errmsg(e));
    }
    FOX_CK_OK(fox_engine_train_only(e, 50, &st));
    ck_assert_msg(isfinite(st.loss) && st.loss > 0.0f, "loss %g", st.loss);
    const volatile float *isv = fox_engine_isv(e);
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        ck_assert_msg(fox_engine_flags(e)[i] == 0, "adaptive run: slot %d fired", i);
    int set = 0;
    for (int i = FOX_ISV_SP4_BASE; i < FOX_ISV_SP4_BASE + 40; i++) {
        ck_assert_msg(isfinite(isv[i]), "slot %d not finite", i);
        set += isv[i] != 0.0f;
    }
    ck_assert(isv[FOX_ISV_H_S2_BOUND] > 0.0f && isv[FOX_ISV_TARGET_Q_BOUND] > 0.0f);
    ck_assert(isv[FOX_ISV_GRAD_CLIP_BOUND] > 0.0f && isv[FOX_ISV_ATOM_POS_BOUND_DIRECTION] > 0.0f);
    ck_assert(isv[FOX_ISV_WEIGHT_BOUND_GRN1] > 0.0f && isv[FOX_ISV_ADAM_V_BOUND_GRN1] > 0.0f);
    printf("stab sp4 adaptive run: 300 steps + 50 train-only, no flag, %d of 40 SP4 slots set, "
           "loss %.4f, H_S2_BOUND %.4g, TARGET_Q_BOUND %.4g, GRAD_CLIP_BOUND %.4g, "
           "WEIGHT_BOUND_GRN1 %.4g\n",
           set, st.loss, (double)isv[FOX_ISV_H_S2_BOUND], (double)isv[FOX_ISV_TARGET_Q_BOUND],
           (double)isv[FOX_ISV_GRAD_CLIP_BOUND], (double)isv[FOX_ISV_WEIGHT_BOUND_GRN1]);
    fox_engine_destroy(e);
}
END_TEST

START_TEST(replay_memory)
{
    char err[512];
    size_t tot[2], rep[2];
    int caps[2] = {1 << 20, 4 << 20};
    for (int k = 0; k < 2; k++) {
        fox_config c = cfg;
        c.replay_capacity = caps[k];
        fox_backend *be = NULL;
        fox_backend_env env = {&c, &lay, &series, &feat, &fold};
        int rv = fox_cuda_backend_ops.create(&be, &env, err, sizeof err);
        ck_assert_msg(rv == FOX_OK, "create: %s", err);
        fox_cuda_debug_memory(be, &tot[k], &rep[k]);
        fox_cuda_backend_ops.destroy(be);
    }
    double per_m = (double)(tot[1] - tot[0]) / ((caps[1] - caps[0]) / 1e6);
    printf("memory: %.1f MB of device memory per million replay transitions (measured; ring "
           "%.1f MB per million), backend total %.1f MB at 1M capacity, batch %d, %d envs\n",
           per_m / 1e6, (double)rep[0] / caps[0], (double)tot[0] / 1e6, cfg.batch,
           cfg.n_envs);
    ck_assert(per_m > 0.0 && per_m < 100e6);
}
END_TEST

static void
run_fold(int backend, fox_fold_report *rep, double *first_loss, double *secs)
{
    fox_config c;
    fox_config_default(&c);
    c.backend = backend;
    c.n_envs = 64;
    c.batch = 64;
    c.steps_per_epoch = 400;
    c.epochs = 3;
    c.learning_starts = 1024;
    /*
     * The comparison is of what the two backends' trainings learned: the no-trade band, host
     * code both share, is off, since on a run this short it turns small differences between
     * two seeds' Q estimates into large ones between their Sharpe ratios.
     */
    c.band = 0.0f;
    fox_engine *e = fox_test_engine(&c);
    fox_epoch_report er;
    double t0 = 0.0;
    for (int ep = 0; ep < c.epochs; ep++) {
        int rv = fox_engine_run_steps(e, c.steps_per_epoch, NULL);
        ck_assert_msg(rv == FOX_OK, "run_steps: %s", fox_engine_errmsg(e));
        FOX_CK_OK(fox_engine_end_epoch(e, &er));
        if (ep == 0)
            *first_loss = er.mean_loss;
        t0 += c.steps_per_epoch / (er.steps_per_sec > 0 ? er.steps_per_sec : 1.0);
        printf("fold 0 %s epoch %d: mean loss %.4f, val Sharpe %.3f, test Sharpe %.3f, %.0f "
               "steps/s\n", backend == FOX_BACKEND_CUDA ? "cuda" : "cpu ", ep, er.mean_loss,
               er.val.sharpe, er.test.sharpe, er.steps_per_sec);
    }
    FOX_CK_OK(fox_engine_fold_report(e, rep));
    *secs = t0;
    fox_engine_destroy(e);
}

START_TEST(fold_sharpe_vs_cpu)
{
    fox_fold_report rc, rg;
    double lc, lg, tc, tg;
    run_fold(FOX_BACKEND_CPU, &rc, &lc, &tc);
    run_fold(FOX_BACKEND_CUDA, &rg, &lg, &tg);
    printf("fold 0 (64 envs, batch 64, 3 × 400 steps): best val Sharpe cpu %.3f cuda %.3f; test "
           "at best cpu %.3f cuda %.3f; final loss cpu %.4f cuda %.4f (first epoch %.4f / %.4f)\n",
           rc.best_val_sharpe, rg.best_val_sharpe, rc.test_at_best.sharpe, rg.test_at_best.sharpe,
           rc.final_loss, rg.final_loss, lc, lg);
    ck_assert(isfinite(rg.best_val_sharpe) && isfinite(rg.final_loss));
    /*
     * Different random streams (the GPU draws by counter): the two runs are
     * two seeds of one algorithm, so "comparable" is a band, not an equality.
     */
    ck_assert_msg(rg.best_val_sharpe > rc.best_val_sharpe - 1.5,
                  "cuda best val Sharpe %.3f far below the cpu's %.3f", rg.best_val_sharpe,
                  rc.best_val_sharpe);
    ck_assert_msg(rg.final_loss < 2.0 * rc.final_loss + 0.5, "cuda loss %.4f vs cpu %.4f",
                  rg.final_loss, rc.final_loss);
}
END_TEST

/*
 * The evaluation walk: the CUDA engine (predicted bars, gpu/lookahead.h)
 * against the CPU engine (one pass a bar) on the same weights. Along the
 * CPU's walk both backends' Q of every state are compared: a greedy argmax
 * can flip where two sub-actions' Q lie within the two backends' rounding
 * of each other, and after a flip the walks part. So: with no flip the
 * figures must be identical to the bit (the environment runs on the host
 * on both); flips must be rare (at most 1 in 500 bars) and each one a
 * near-tie (margin below 1e-4 of the Q scale).
 */
START_TEST(eval_walk_vs_cpu)
{
    fox_config c;
    fox_config_default(&c);
    c.n_envs = 64;
    c.batch = 64;
    c.learning_starts = 1024;
    c.backend = FOX_BACKEND_CPU;
    fox_engine *ec = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(ec, fox_engine_run_steps(ec, 600, NULL));
    char path[] = "/tmp/fox_eval_parity_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    FOX_CK_ENGINE_OK(ec, fox_engine_checkpoint_save(ec, path));
    c.backend = FOX_BACKEND_CUDA;
    fox_engine *eg = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(eg, fox_engine_checkpoint_load(eg, path));
    unlink(path);
    ck_assert_int_gt(eg->ops->eval_lookahead, 1);

    /* The CPU's walk, state by state, through both backends' q_values. */
    const fox_model_layout *ly = &ec->lay;
    fox_env_params p = {c.fee, c.half_spread, c.limit_fee, 1.0f, c.size_levels, c.urgency_levels};
    fox_env_bars bars = {ec->series.open, ec->series.high, ec->series.low, ec->series.close};
    int flips = 0, decisions = 0;
    double min_margin = INFINITY, q_scale = 0.0;
    float s[1024], qc[64], qg[64];
    ck_assert_int_le(ly->S, 1024);
    ck_assert_int_le(ly->n_actions, 64);
    for (int k = 0; k < 2; k++) {
        int t = k ? ec->seg.test_begin : ec->seg.val_begin;
        int end = k ? ec->seg.test_end : ec->seg.val_end;
        fox_env_pos st = {0.0f, ec->series.close[t], 0};
        for (; t + 1 < end; t++) {
            float port[3];
            fox_env_portfolio(&st, ec->series.close[t], port);
            fox__state_build(&ec->feat, ly->S, t, port, s);
            FOX_CK_OK(ec->ops->q_values(ec->be, s, 1, qc));
            FOX_CK_OK(eg->ops->q_values(eg->be, s, 1, qg));
            int32_t a[4];
            for (int d = 0; d < ly->n_branches; d++) {
                const float *x = qc + ly->branch_off[d], *y = qg + ly->branch_off[d];
                int bc = 0, bg = 0;
                for (int i = 1; i < ly->branch_size[d]; i++) {
                    bc = x[i] > x[bc] ? i : bc;
                    bg = y[i] > y[bg] ? i : bg;
                }
                for (int i = 0; i < ly->branch_size[d]; i++)
                    q_scale = fmax(q_scale, fabs(x[i]));
                if (bc != bg) {
                    flips++;
                    min_margin = fmin(min_margin, fabs((double)x[bc] - x[bg]));
                }
                a[d] = bc;
            }
            fox_env_step(&p, &bars, t, &st, a);
            decisions++;
        }
    }
    const fox_split both[2] = {FOX_SPLIT_VALIDATION, FOX_SPLIT_TEST};
    fox_eval_result rc[2], rg[2];
    FOX_CK_ENGINE_OK(ec, fox_engine_evaluate_splits(ec, both, 2, FOX_POLICY_GREEDY, rc));
    FOX_CK_ENGINE_OK(eg, fox_engine_evaluate_splits(eg, both, 2, FOX_POLICY_GREEDY, rg));
    fox_engine_info ig;
    fox_engine_get_info(eg, &ig);
    printf("eval walk: %d argmax flips in %d decisions (smallest flipped margin %.3g, |Q| up to "
           "%.3g); Sharpe val cpu %.6f cuda %.6f, test cpu %.6f cuda %.6f; cuda %lld bars in "
           "%lld passes, %.3f s\n",
           flips, decisions, flips ? min_margin : 0.0, q_scale, rc[0].sharpe, rg[0].sharpe,
           rc[1].sharpe, rg[1].sharpe, (long long)ig.times.eval_bars,
           (long long)ig.times.eval_passes, ig.times.eval);
    ck_assert_msg(flips * 500 <= decisions, "%d flips in %d decisions", flips, decisions);
    if (flips == 0)
        for (int k = 0; k < 2; k++)
            ck_assert_msg(memcmp(&rc[k], &rg[k], sizeof rc[k]) == 0,
                          "split %d: Sharpe %.17g on cuda, %.17g on cpu with no flip", k,
                          rg[k].sharpe, rc[k].sharpe);
    else
        ck_assert_msg(min_margin < 1e-4 * fmax(q_scale, 1.0),
                      "a flip with margin %g is no near-tie", min_margin);
    ck_assert_int_lt(ig.times.eval_passes, ig.times.eval_bars);
    fox_engine_destroy(ec);
    fox_engine_destroy(eg);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Prioritized replay: the device's sum tree against gpu/cpu/replay.c                          */

#define PER_CAP 1000 /* not a power of two: the tree's padding leaves stay 0 */

/*
 * A CUDA backend with prioritized replay over the fixture's data, its tree empty, and a CPU
 * ring rb of the same capacity and α after `pushes` pushes (on the CPU only).
 */
static fox_backend *
per_pair(fox_config *c, fox_replay *rb, int pushes)
{
    char err[512];
    *c = cfg;
    c->prioritized = 1;
    c->replay_capacity = PER_CAP;
    fox_backend *be = NULL;
    fox_backend_env env = {c, &lay, &series, &feat, &fold};
    int rv = fox_cuda_backend_ops.create(&be, &env, err, sizeof err);
    ck_assert_msg(rv == FOX_OK, "create prioritized: %s", err);
    FOX_CK_OK(fox_replay_init(rb, PER_CAP, 1, c->per_alpha));
    fox_transition t;
    memset(&t, 0, sizeof t);
    for (int k = 0; k < pushes; k++)
        fox_replay_push(rb, &t);
    return be;
}

/* The device's tree and max priority equal the CPU ring's, bit for bit. */
static void
per_assert_same(fox_backend *be, const fox_replay *rb, const char *what)
{
    size_t n = 2 * (size_t)rb->leaves;
    double *tree = malloc(n * sizeof *tree);
    ck_assert_ptr_nonnull(tree);
    float maxp;
    uint64_t pushes;
    FOX_CK_OK(fox_cuda_debug_per_io(be, 0, tree, &maxp, NULL, &pushes, NULL));
    size_t diff = 0, first = n;
    for (size_t k = 1; k < n; k++)
        if (memcmp(&tree[k], &rb->tree[k], sizeof tree[k]) != 0 && diff++ == 0)
            first = k;
    ck_assert_msg(diff == 0, "%s: %zu tree nodes differ, first %zu: device %.17g cpu %.17g", what,
                  diff, first, first < n ? tree[first] : 0.0, first < n ? rb->tree[first] : 0.0);
    ck_assert_msg(memcmp(&maxp, &rb->max_priority, sizeof maxp) == 0,
                  "%s: max priority device %.9g cpu %.9g", what, maxp, rb->max_priority);
    ck_assert_uint_eq(pushes, rb->pushes);
    free(tree);
}

/*
 * Push and update: the same pushes (wrapping the ring) and the same batch
 * of priorities (duplicates, NaN and Inf, slots pushed over since the draw,
 * values that raise the max) leave the same tree and max priority.
 */
START_TEST(per_push_update_bitwise)
{
    fox_config c;
    fox_replay rb;
    fox_backend *be = per_pair(&c, &rb, 700);
    fox_transition t;
    memset(&t, 0, sizeof t);
    FOX_CK_OK(fox_cuda_debug_per_push(be, 700));
    per_assert_same(be, &rb, "700 pushes");

    fox_rng rng;
    fox_rng_seed(&rng, 2201);
    int32_t idx[BATCH];
    float prio[BATCH];
    for (int round = 0; round < 3; round++) {
        uint64_t drawn = rb.pushes;
        /* Round 1 wraps: the pushes after the draw overwrite 700..999 and 0..99. */
        int pushes = round == 1 ? 400 : 37;
        for (int k = 0; k < pushes; k++)
            fox_replay_push(&rb, &t);
        FOX_CK_OK(fox_cuda_debug_per_push(be, pushes));
        per_assert_same(be, &rb, "pushes after the draw");
        for (int b = 0; b < BATCH; b++) {
            idx[b] = b % 7 == 3 ? idx[b - 2] : (int32_t)fox_rng_below(&rng, (uint32_t)rb.size);
            prio[b] = (float)(round + 1) * 4.0f * fox_rng_uniform(&rng);
        }
        prio[5] = NAN;
        prio[77] = INFINITY;
        prio[200] = 50.0f * (float)(round + 1); /* raises the max: the later NaN takes it */
        prio[201] = NAN;
        FOX_CK_OK(fox_cuda_debug_per_io(be, 1, NULL, NULL, NULL, NULL, &drawn));
        fox_replay_update(&rb, idx, prio, BATCH, drawn);
        FOX_CK_OK(fox_cuda_debug_per_update(be, idx, prio));
        per_assert_same(be, &rb, "update");
    }
    printf("per: device sum tree = cpu bit for bit after 1,511 pushes and 3 updates of %d "
           "(max priority %.4f, total mass %.4f)\n", BATCH, rb.max_priority, rb.tree[1]);
    fox_replay_fini(&rb);
    fox_cuda_backend_ops.destroy(be);
}
END_TEST

/*
 * The draw: the device's uniforms through the CPU's fox_replay_sample_at on
 * the same tree give the device's indices exactly and its importance
 * weights to the float (pow differs by ulps of double between glibc and
 * CUDA). The CPU's own draws come from its sequential stream, so only the
 * distribution is shared: over many steps each slot's share of the draws
 * follows its leaf.
 */
START_TEST(per_sample_same_uniforms)
{
    fox_config c;
    fox_replay rb;
    fox_backend *be = per_pair(&c, &rb, 900);
    fox_rng rng;
    fox_rng_seed(&rng, 2202);
    int32_t idx[BATCH], didx[BATCH];
    float prio[BATCH], w[BATCH], dw[BATCH], u[BATCH];
    for (int b = 0; b < BATCH; b++) {
        idx[b] = (int32_t)fox_rng_below(&rng, 900);
        /* Heavy-tailed priorities: a few slots carry much of the mass. */
        prio[b] = 0.01f / (0.001f + fox_rng_uniform(&rng));
    }
    fox_replay_update(&rb, idx, prio, BATCH, rb.pushes);
    int size = rb.size;
    uint64_t pushes = rb.pushes;
    FOX_CK_OK(fox_cuda_debug_per_io(be, 1, rb.tree, &rb.max_priority, &size, &pushes, &pushes));
    double max_w_err = 0.0;
    long hits_heavy = 0, draws = 0;
    int heavy = 0;
    for (int i = 1; i < rb.size; i++)
        if (rb.tree[rb.leaves + i] > rb.tree[rb.leaves + heavy])
            heavy = i;
    for (int64_t step = 0; step < 200; step++) {
        FOX_CK_OK(fox_cuda_debug_per_sample(be, step, didx, dw, u));
        fox_replay_sample_at(&rb, BATCH, c.per_beta, u, idx, w);
        for (int b = 0; b < BATCH; b++) {
            ck_assert_msg(didx[b] == idx[b], "step %lld draw %d: device slot %d, cpu %d",
                          (long long)step, b, didx[b], idx[b]);
            double e = fabs((double)dw[b] - w[b]) / w[b];
            max_w_err = e > max_w_err ? e : max_w_err;
            hits_heavy += didx[b] == heavy;
            draws++;
        }
        ck_assert_msg(max_w_err <= 2.4e-7, "step %lld: weight rel err %.3g", (long long)step,
                      max_w_err);
    }
    double share = (double)hits_heavy / (double)draws;
    double expect = rb.tree[rb.leaves + heavy] / rb.tree[1];
    printf("per: 200 draws of %d, device slots = cpu's on the device's uniforms, weight rel err "
           "%.2g; heaviest slot drawn %.4f of the time, its mass %.4f\n", BATCH, max_w_err,
           share, expect);
    ck_assert_msg(fabs(share - expect) < 5.0 * sqrt(expect / (double)draws) + 1e-3,
                  "heaviest slot drawn %.4f, mass %.4f", share, expect);
    fox_replay_fini(&rb);
    fox_cuda_backend_ops.destroy(be);
}
END_TEST

/*
 * Training with prioritized replay on the device: the captured steps run
 * (eager and graphs), the loss stays finite, every inner node of the tree
 * is the sum of its children, the padding leaves stay 0 and the update
 * moved leaves off the push priority.
 */
START_TEST(per_training_runs)
{
    fox_config c;
    fox_config_default(&c);
    c.backend = FOX_BACKEND_CUDA;
    c.prioritized = 1;
    c.n_envs = 64;
    c.replay_capacity = 5000;
    c.learning_starts = 1024;
    fox_engine *e = fox_test_engine(&c);
    fox_step_stats st;
    for (int k = 0; k < 2; k++) {
        int rv = fox_engine_run_steps(e, 60, &st);
        ck_assert_msg(rv == FOX_OK, "run_steps: %s", fox_engine_errmsg(e));
    }
    FOX_CK_OK(fox_engine_train_only(e, 20, &st));
    ck_assert_msg(isfinite(st.loss) && st.loss > 0.0f, "loss %g", st.loss);
    int leaves = 1;
    while (leaves < c.replay_capacity)
        leaves <<= 1;
    double *tree = malloc(2 * (size_t)leaves * sizeof *tree);
    ck_assert_ptr_nonnull(tree);
    float maxp;
    int size;
    uint64_t pushes;
    FOX_CK_OK(fox_cuda_debug_per_io(e->be, 0, tree, &maxp, &size, &pushes, NULL));
    for (int node = 1; node < leaves; node++)
        ck_assert_msg(tree[node] == tree[2 * node] + tree[2 * node + 1], "node %d", node);
    int moved = 0;
    double at_max = fox_per_leaf(maxp, c.per_alpha);
    for (int i = 0; i < leaves; i++) {
        double v = tree[leaves + i];
        if (i >= size)
            ck_assert_msg(v == 0.0, "leaf %d past the ring's size %d holds %g", i, size, v);
        else
            ck_assert_msg(v > 0.0 && isfinite(v), "leaf %d: %g", i, v);
        moved += i < size && v != at_max;
    }
    ck_assert_int_eq(size, pushes < (uint64_t)c.replay_capacity ? (int)pushes : c.replay_capacity);
    ck_assert_msg(moved > 0, "no priority was updated");
    printf("per: 120 steps + 20 train-only on the device, loss %.4f, ring %d, %d leaves off the "
           "max priority %.4f\n", st.loss, size, moved, maxp);
    free(tree);
    fox_engine_destroy(e);
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
    tcase_add_test(tc, greedy_next_tf32);
    tcase_add_test(tc, adam_step);
    tcase_add_test(tc, adam_weight_decay_and_l1);
    tcase_add_test(tc, replay_memory);
    tcase_add_test(tc, check_kernel_vs_cpu);
    tcase_add_test(tc, check_kernel_strided);
    tcase_add_test(tc, h_s2_site_vs_cpu);
    tcase_add_test(tc, sp4_producers_vs_cpu);
    tcase_add_test(tc, grad_clip_vs_cpu);
    tcase_add_test(tc, target_q_bound_in_loss);
    tcase_add_test(tc, per_push_update_bitwise);
    tcase_add_test(tc, per_sample_same_uniforms);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("engine");
    tcase_set_timeout(te, 600);
    tcase_add_test(te, graph_determinism_and_isv);
    tcase_add_test(te, engines_on_threads_same_bits);
    tcase_add_test(te, adaptive_training_no_flags);
    tcase_add_test(te, fold_sharpe_vs_cpu);
    tcase_add_test(te, per_training_runs);
    tcase_add_test(te, eval_walk_vs_cpu);
    suite_add_tcase(s, te);
    return fox_test_run_suite_nofork(s);
}
