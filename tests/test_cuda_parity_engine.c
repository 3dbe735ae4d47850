/*
 * test_cuda_parity_engine.c — part of the CUDA parity test
 * (test_cuda_parity.c has the fixture and main): whole engines on the GPU
 * (graph replay's determinism and the ISV, engines on threads giving the
 * same bits, adaptive training raising no flags, the moving atom grid, a
 * short fold and the evaluation walk against the CPU's) and prioritized
 * replay, the device's sum tree against gpu/cpu/replay.c.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/bounds.h"
#include "gpu/cpu/replay.h"
#include "gpu/cuda/debug.h"
#include "gpu/engine.h"
#include "gpu/engine_impl.h"
#include "gpu/env.h"
#include "gpu/isv.h"
#include "gpu/per.h"
#include "gpu/rng.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"
#include "tests/cuda_parity.h"

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
            FOX_CK_OK(fox_cuda_debug_set_unroll(e->m->be, 1));
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

/*
 * The moving atom grid on the device, as tests/test_atoms.c has it on the
 * CPU: at reward scale 1 every branch's grid moves in from the configured
 * ±10 and no slot fires; at 1e6 the moved grid crosses slot 47's threshold
 * while Q_ABS_REF catches up with the rewards, and Mech 2 holds both ends
 * at its bound, which follows them (beyond 1e3).
 */
START_TEST(atom_grid_moves_on_device)
{
    for (int huge = 0; huge < 2; huge++) {
        fox_config c;
        fox_config_default(&c);
        c.backend = FOX_BACKEND_CUDA;
        c.reward_scale = huge ? 1e6f : 1.0f;
        c.atom_grid = FOX_ATOM_GRID_MOVING;
        fox_engine *e = fox_test_engine(&c);
        int rv = fox_engine_run_steps(e, 300, NULL);
        ck_assert_msg(rv == FOX_OK, "run_steps: %s", fox_engine_errmsg(e));
        const volatile float *isv = fox_engine_isv(e);
        const volatile int *fl = fox_engine_flags(e);
        float bound = fox_bound_atom_fixed(isv[FOX_ISV_Q_ABS_REF]);
        for (int d = 0; d < FOX_MAX_BRANCHES; d++) {
            int k = fox_isv_atom_grid_slot(d);
            float lo = isv[k], hi = isv[k + 1];
            printf("atoms on the device, reward scale %g: branch %d [%.4g, %.4g]\n",
                   (double)c.reward_scale, d, lo, hi);
            ck_assert_msg(isfinite(lo) && isfinite(hi) && lo < hi, "branch %d: [%g, %g]", d, lo,
                          hi);
            if (huge)
                ck_assert_msg(bound > 1e3f && lo <= -0.9f * bound && hi >= 0.9f * bound &&
                                  lo >= -1.01f * bound && hi <= 1.01f * bound,
                              "branch %d: [%g, %g] not held at Mech 2's bound %g", d, lo, hi,
                              bound);
            else
                ck_assert_msg(lo > -10.0f && hi < 10.0f, "branch %d: [%g, %g] did not move in",
                              d, lo, hi);
        }
        if (huge)
            ck_assert_msg(fl[FOX_SENT_ATOM_SPAN_MAX], "slot 47 did not fire at reward scale 1e6");
        else
            for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
                ck_assert_msg(fl[i] == 0, "reward scale 1: slot %d fired", i);
        fox_engine_destroy(e);
    }
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
    fox_test_temp_file(path);
    FOX_CK_ENGINE_OK(ec, fox_engine_checkpoint_save(ec, path));
    c.backend = FOX_BACKEND_CUDA;
    fox_engine *eg = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(eg, fox_engine_checkpoint_load(eg, path));
    unlink(path);
    ck_assert_int_gt(eg->ops->eval_lookahead, 1);

    /* The CPU's walk, state by state, through both backends' forward passes. */
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
            FOX_CK_OK(fox__engine_q_start(ec, ec->m, s, 1));
            FOX_CK_OK(fox__engine_q_start(eg, eg->m, s, 1));
            FOX_CK_OK(fox__engine_q_finish(eg, eg->m, 1, qg));
            FOX_CK_OK(fox__engine_q_finish(ec, ec->m, 1, qc));
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
    *c = fox_parity_cfg;
    c->prioritized = 1;
    c->replay_capacity = PER_CAP;
    fox_backend *be = NULL;
    fox_backend_env env = {c, &fox_parity_lay, &fox_parity_series, &fox_parity_feat,
                           &fox_parity_fold, 0, 1, NULL};
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
    FOX_CK_OK(fox_cuda_debug_per_io(e->m->be, 0, tree, &maxp, &size, &pushes, NULL));
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

void
fox_parity_per_tests(TCase *tc)
{
    tcase_add_test(tc, per_push_update_bitwise);
    tcase_add_test(tc, per_sample_same_uniforms);
}

void
fox_parity_engine_tests(TCase *te)
{
    tcase_add_test(te, graph_determinism_and_isv);
    tcase_add_test(te, engines_on_threads_same_bits);
    tcase_add_test(te, adaptive_training_no_flags);
    tcase_add_test(te, atom_grid_moves_on_device);
    tcase_add_test(te, fold_sharpe_vs_cpu);
    tcase_add_test(te, per_training_runs);
    tcase_add_test(te, eval_walk_vs_cpu);
}
