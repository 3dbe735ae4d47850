/*
 * test_engine.c — the engine end to end on the CPU backend: determinism (of
 * engines on threads too), no look-ahead in features/fills/rewards, checkpoints,
 * and the learning test (a trained agent beats buy-and-hold, flat and random
 * on the test split; an untrained one does not).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/engine_impl.h"
#include "gpu/env.h"
#include "tests/testutil.h"

/* A network small enough for a 2-core CI machine. */
static void
small_config(fox_config *c)
{
    fox_test_small_net(c);
    const char *pairs[] = {"data.synth_bars=6000", "train.learning_starts=256", NULL};
    fox_test_set_pairs(c, pairs);
}

START_TEST(determinism_same_seed_same_bits)
{
    fox_config c;
    small_config(&c);
    fox_engine *a = fox_test_engine_loaded(&c), *b = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(a, fox_engine_begin_fold(a, 0));
    FOX_CK_ENGINE_OK(b, fox_engine_begin_fold(b, 0));
    FOX_CK_ENGINE_OK(a, fox_engine_run_steps(a, 40, NULL));
    FOX_CK_ENGINE_OK(b, fox_engine_run_steps(b, 40, NULL));
    size_t n = fox_engine_param_count(a);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb), *p0 = malloc(n * sizeof *p0);
    FOX_CK_ENGINE_OK(a, fox_engine_get_params(a, pa, n));
    FOX_CK_ENGINE_OK(b, fox_engine_get_params(b, pb, n));
    ck_assert_msg(memcmp(pa, pb, n * sizeof *pa) == 0, "same seed gave different parameters");

    /* Training moved them, and another seed moves them elsewhere. */
    fox_config c2 = c;
    c2.seed = c.seed + 1;
    fox_engine *z = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(z, fox_engine_get_params(z, p0, n));
    ck_assert_msg(memcmp(pa, p0, n * sizeof *pa) != 0, "40 steps left parameters unchanged");
    fox_engine *d = fox_test_engine(&c2);
    FOX_CK_ENGINE_OK(d, fox_engine_run_steps(d, 40, NULL));
    FOX_CK_ENGINE_OK(d, fox_engine_get_params(d, pb, n));
    ck_assert_msg(memcmp(pa, pb, n * sizeof *pa) != 0, "another seed gave the same parameters");
    free(pa);
    free(pb);
    free(p0);
    fox_engine_destroy(a);
    fox_engine_destroy(b);
    fox_engine_destroy(z);
    fox_engine_destroy(d);
}
END_TEST

/* Three engines on three threads at once: each seed's bits alone. */
START_TEST(engines_on_threads_same_bits)
{
    fox_config c;
    small_config(&c);
    c.threads = 1;
    fox_test_engines_same_bits(&c, 3, 40);
}
END_TEST

/* Evaluate the greedy policy on [test_begin, end); perturb every bar from end on first if asked. */
static fox_eval_result
eval_prefix(const fox_config *c, int cut_offset, int perturb)
{
    fox_engine *e = fox_test_engine(c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 30, NULL));
    int end = e->seg.test_begin + cut_offset;
    if (perturb) {
        fox_series *s = &e->series;
        for (int t = end; t < s->n; t++) {
            float k = (t % 2) ? 3.0f : 0.3f;
            s->close[t] *= k;
            s->open[t] *= k;
            s->high[t] *= 3.0f;
            s->low[t] *= 0.3f;
            if (s->volume)
                s->volume[t] *= 10.0f;
        }
        fox_features_fini(&e->feat);
        ck_assert_int_eq(fox_features_compute(&e->feat, s, e->lay.S), FOX_OK);
        fox_features_normalize(&e->feat, e->seg.train_begin, e->seg.train_end);
    }
    e->seg.test_end = end;
    fox_eval_result r;
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_GREEDY, &r));
    fox_engine_destroy(e);
    return r;
}

START_TEST(no_lookahead_in_features_fills_rewards)
{
    fox_config c;
    small_config(&c);
    fox_eval_result a = eval_prefix(&c, 300, 0), b = eval_prefix(&c, 300, 1);
    /* Decisions, fills and rewards up to the cut saw nothing after it. */
    ck_assert_int_eq(a.bars, b.bars);
    ck_assert_msg(a.total_return == b.total_return && a.sharpe == b.sharpe &&
                      a.turnover == b.turnover,
                  "future bars changed the past: %.17g vs %.17g", a.total_return, b.total_return);
    ck_assert_msg(a.turnover > 0.0, "the policy never traded: the test would prove nothing");

    /* The environment step itself reads bars t and t+1 only. */
    float close[4] = {100, 101, 102, 103}, open[4] = {100, 100.5f, 101.5f, 102},
          high[4] = {101, 102, 103, 104}, low[4] = {99, 100, 101, 102};
    fox_env_bars bars = {open, high, low, close};
    fox_env_params p = {1e-4f, 1e-4f, 5e-5f, 1.0f, 4, 3};
    int32_t act[4] = {FOX_DIR_LONG, 3, FOX_ORDER_MARKET, 2};
    fox_env_pos s1 = {0, 100, 0}, s2 = s1;
    fox_env_fill f1 = fox_env_step(&p, &bars, 1, &s1, act);
    close[3] = 1e6f;
    open[3] = 5.0f;
    fox_env_fill f2 = fox_env_step(&p, &bars, 1, &s2, act);
    ck_assert(memcmp(&f1, &f2, sizeof f1) == 0);
    /* Filled at open[t+1]: a long from flat earns log(close[2]/open[2]) minus costs. */
    ck_assert_float_eq_tol(f1.ret_gross, logf(102.0f / 101.5f), 1e-6f);
    ck_assert_float_eq_tol(f1.ret_net, f1.ret_gross - 2e-4f, 1e-6f);
}
END_TEST

/*
 * Validation and test walked side by side (one forward pass for both each
 * bar, as end_epoch does) give exactly what each gives alone: the rows of a
 * forward pass are computed independently, and each split keeps its own
 * environment state and random stream.
 */
START_TEST(evaluate_splits_match_single_passes)
{
    fox_config c;
    small_config(&c);
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 300, NULL));
    const fox_split both[2] = {FOX_SPLIT_VALIDATION, FOX_SPLIT_TEST};
    const fox_policy policies[2] = {FOX_POLICY_GREEDY, FOX_POLICY_RANDOM};
    for (int p = 0; p < 2; p++) {
        fox_eval_result pair[2], alone[2];
        FOX_CK_ENGINE_OK(e, fox_engine_evaluate_splits(e, both, 2, policies[p], pair));
        for (int k = 0; k < 2; k++) {
            FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, both[k], policies[p], &alone[k]));
            ck_assert_int_gt(alone[k].bars, 100);
            ck_assert_msg(memcmp(&pair[k], &alone[k], sizeof pair[k]) == 0,
                          "policy %d split %d: Sharpe %.6f side by side, %.6f alone", p, k,
                          pair[k].sharpe, alone[k].sharpe);
        }
        ck_assert(pair[0].sharpe != pair[1].sharpe);
    }
    fox_eval_result r[3];
    const fox_split three[3] = {FOX_SPLIT_VALIDATION, FOX_SPLIT_TEST, FOX_SPLIT_TEST};
    ck_assert_int_eq(fox_engine_evaluate_splits(e, three, 3, FOX_POLICY_GREEDY, r), FOX_EINVAL);
    ck_assert_int_eq(fox_engine_evaluate_splits(e, three, 0, FOX_POLICY_GREEDY, r), FOX_EINVAL);
    fox_engine_destroy(e);
}
END_TEST

START_TEST(limit_orders_fill_only_when_reached)
{
    float close[3] = {100, 101, 99}, open[3] = {100, 100.5f, 100.8f};
    float high[3] = {101, 102, 101}, low[3] = {99, 100.2f, 98};
    fox_env_bars bars = {open, high, low, close};
    fox_env_params p = {1e-4f, 1e-4f, 5e-5f, 1.0f, 4, 3};
    int32_t buy[4] = {FOX_DIR_LONG, 3, FOX_ORDER_LIMIT, 2};
    fox_env_pos st = {0, 100, 0};
    /* Bar 1's low 100.2 never reaches the limit close[0] = 100. */
    fox_env_fill f = fox_env_step(&p, &bars, 0, &st, buy);
    ck_assert_float_eq(f.dpos, 0.0f);
    ck_assert_float_eq(st.pos, 0.0f);
    /* Bar 2's low 98 reaches close[1] = 101: filled at the limit, paying limit_fee. */
    f = fox_env_step(&p, &bars, 1, &st, buy);
    ck_assert_float_eq(st.pos, 1.0f);
    ck_assert_float_eq_tol(f.ret_gross, logf(99.0f / 101.0f), 1e-6f);
    ck_assert_float_eq_tol(f.ret_net, f.ret_gross - 5e-5f, 1e-7f);
}
END_TEST

START_TEST(checkpoint_round_trip_and_refusals)
{
    fox_config c;
    small_config(&c);
    char dir[] = "/tmp/foxckptXXXXXX", path[256], bad[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/a.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    fox_engine *a = fox_test_engine_loaded(&c), *b = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(a, fox_engine_begin_fold(a, 0));
    FOX_CK_ENGINE_OK(a, fox_engine_run_steps(a, 30, NULL));
    FOX_CK_ENGINE_OK(a, fox_engine_checkpoint_save(a, path));
    size_t n = fox_engine_param_count(a);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb), *pc = malloc(n * sizeof *pc);
    FOX_CK_ENGINE_OK(a, fox_engine_get_params(a, pa, n));
    FOX_CK_ENGINE_OK(b, fox_engine_get_params(b, pc, n));

    /* Corrupt copies are refused and leave b untouched. */
    size_t size = 0;
    char *raw = fox_test_read_file(path, &size);
    ck_assert_ptr_nonnull(raw);
    long len = (long)size;
    struct {
        long size, flip;
        int code;
        const char *why;
    } cases[] = {{len / 2, -1, FOX_EFORMAT, "truncated"},
                 {20, -1, FOX_EFORMAT, "truncated header"},
                 {len, len - 100, FOX_EFORMAT, "payload CRC"},
                 {len, 0, FOX_EFORMAT, "bad magic"},
                 {len, 20, FOX_EFORMAT, "header CRC"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *fp = fopen(bad, "wb");
        if (cases[i].flip >= 0)
            raw[cases[i].flip] ^= 0x5a;
        fwrite(raw, 1, (size_t)cases[i].size, fp);
        if (cases[i].flip >= 0)
            raw[cases[i].flip] ^= 0x5a;
        fclose(fp);
        int rv = fox_engine_checkpoint_load(b, bad);
        ck_assert_msg(rv == cases[i].code, "%s: got %s", cases[i].why, fox_strerror(rv));
        ck_assert_msg(strstr(fox_engine_errmsg(b), cases[i].why), "%s: message '%s'", cases[i].why,
                      fox_engine_errmsg(b));
        FOX_CK_ENGINE_OK(b, fox_engine_get_params(b, pb, n));
        ck_assert_msg(memcmp(pb, pc, n * sizeof *pb) == 0, "%s: state changed", cases[i].why);
    }
    ck_assert_int_eq(fox_engine_checkpoint_load(b, "/nonexistent/x.ckpt"), FOX_ENOENT);

    /* The good file loads: identical parameters, and training goes on from there. */
    FOX_CK_ENGINE_OK(b, fox_engine_checkpoint_load(b, path));
    FOX_CK_ENGINE_OK(b, fox_engine_get_params(b, pb, n));
    ck_assert(memcmp(pa, pb, n * sizeof *pa) == 0);
    fox_engine_info ib;
    fox_engine_get_info(b, &ib);
    ck_assert_int_eq(ib.fold, 0);
    ck_assert_int_eq(ib.step, 30);
    FOX_CK_ENGINE_OK(b, fox_engine_run_steps(b, 30, NULL));
    FOX_CK_ENGINE_OK(b, fox_engine_get_params(b, pb, n));
    ck_assert_msg(memcmp(pa, pb, n * sizeof *pa) != 0, "training after load changed nothing");

    /* Another layout: refused with both fingerprints named. */
    fox_config c3 = c;
    c3.h2 = 20;
    fox_engine *d = fox_test_engine_loaded(&c3);
    ck_assert_int_eq(fox_engine_checkpoint_load(d, path), FOX_EMISMATCH);
    char fa[32], fd[32];
    fox_engine_info ia, id;
    fox_engine_get_info(a, &ia);
    fox_engine_get_info(d, &id);
    snprintf(fa, sizeof fa, "%016llx", (unsigned long long)ia.fingerprint);
    snprintf(fd, sizeof fd, "%016llx", (unsigned long long)id.fingerprint);
    ck_assert_ptr_nonnull(strstr(fox_engine_errmsg(d), fa));
    ck_assert_ptr_nonnull(strstr(fox_engine_errmsg(d), fd));

    unlink(path);
    unlink(bad);
    rmdir(dir);
    free(raw);
    free(pa);
    free(pb);
    free(pc);
    fox_engine_destroy(a);
    fox_engine_destroy(b);
    fox_engine_destroy(d);
}
END_TEST

START_TEST(fault_armed_on_a_running_engine)
{
    fox_config c;
    small_config(&c);
    /* The strict rule: a NaN in h_s2 halts the fold rather than being sanitized and flagged. */
    c.halt_rule = FOX_HALT_RULE_STRICT;
    fox_engine *e = fox_test_engine_loaded(&c);
    ck_assert_int_eq(fox_engine_inject_fault(e, -1, "no_such_buffer", FOX_FAULT_NAN, 0, 0),
                     FOX_ENOENT);
    FOX_CK_ENGINE_OK(e, fox_engine_begin_fold(e, 0));
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 40, NULL));
    size_t n = fox_engine_param_count(e);
    float *before = malloc(n * sizeof *before), *after = malloc(n * sizeof *after);
    FOX_CK_ENGINE_OK(e, fox_engine_get_params(e, before, n));
    /* Armed mid-fold: training goes on untouched until the drill's step, then halts naming it. */
    FOX_CK_ENGINE_OK(e, fox_engine_inject_fault(e, -1, "h_s2", FOX_FAULT_NAN, 3, 0));
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 2, NULL));
    FOX_CK_ENGINE_OK(e, fox_engine_get_params(e, after, n));
    ck_assert_msg(memcmp(before, after, n * sizeof *after) != 0, "arming reset the weights");
    ck_assert_int_eq(fox_engine_run_steps(e, 5, NULL), FOX_EHALT);
    ck_assert_msg(strstr(fox_engine_errmsg(e), "h_s2"), "halt message: %s", fox_engine_errmsg(e));
    free(before);
    free(after);
    fox_engine_destroy(e);
}
END_TEST

/*
 * Learning. Fold F0 of the default synthetic series, a small network, the
 * epoch chosen on validation Sharpe; its test Sharpe must beat every baseline
 * by LEARN_MARGIN (annualized). The same criterion applied to the untrained
 * network must fail, or the test would prove nothing.
 */
#define LEARN_MARGIN 1.0
#define LEARN_EPOCHS 6
#define LEARN_STEPS  4000

static void
learning_config(fox_config *c)
{
    small_config(c);
    /*
     * 15,000-bar test halves: the Sharpe of one half has a standard error near 1. The
     * plain argmax (policy.band=0): this test asks whether the network learns, not how
     * the no-trade band trades its Q off against costs (bench/learning.py measures that).
     */
    const char *pairs[] = {"data.synth_bars=60000", "train.gamma=0.9", "train.lr=0.001",
                           "train.learning_starts=512", "policy.band=0", NULL};
    fox_test_set_pairs(c, pairs);
}

static double
best_baseline(fox_engine *e, fox_eval_result *bh, fox_eval_result *flat, fox_eval_result *rnd)
{
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_BUY_HOLD, bh));
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_FLAT, flat));
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_RANDOM, rnd));
    return fmax(bh->sharpe, fmax(flat->sharpe, rnd->sharpe));
}

START_TEST(learning_beats_baselines)
{
    fox_config c;
    learning_config(&c);
    fox_engine *e = fox_test_engine(&c);
    fox_eval_result bh, flat, rnd, untrained;
    double base = best_baseline(e, &bh, &flat, &rnd);
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_GREEDY, &untrained));
    printf("learning: baselines test Sharpe buy&hold %.2f flat %.2f random %.2f (P = %.0f)\n",
           bh.sharpe, flat.sharpe, rnd.sharpe, bh.bars_per_year);
    printf("learning: untrained greedy test Sharpe %.2f (criterion > %.2f: %s)\n", untrained.sharpe,
           base + LEARN_MARGIN, untrained.sharpe > base + LEARN_MARGIN ? "passes" : "fails");
    ck_assert_msg(untrained.sharpe <= base + LEARN_MARGIN,
                  "the untrained network already passes: the criterion is too weak");
    for (int ep = 0; ep < LEARN_EPOCHS; ep++) {
        fox_epoch_report r;
        FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, LEARN_STEPS, NULL));
        FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &r));
        printf("learning: epoch %d loss %.4f val Sharpe %.2f test Sharpe %.2f turnover %.3f "
               "(%.0f steps/s)\n",
               ep, r.mean_loss, r.val.sharpe, r.test.sharpe, r.test.turnover, r.steps_per_sec);
    }
    fox_fold_report fr;
    FOX_CK_ENGINE_OK(e, fox_engine_fold_report(e, &fr));
    printf("learning: chosen epoch %d (val %.2f), test Sharpe %.2f vs best baseline %.2f\n",
           fr.best_epoch, fr.best_val_sharpe, fr.test_at_best.sharpe, base);
    ck_assert_msg(fr.test_at_best.sharpe > base + LEARN_MARGIN,
                  "trained test Sharpe %.2f does not beat the best baseline %.2f by %.1f",
                  fr.test_at_best.sharpe, base, LEARN_MARGIN);
    fox_engine_destroy(e);
}
END_TEST

static Suite *
engine_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, determinism_same_seed_same_bits);
    tcase_add_test(tc, engines_on_threads_same_bits);
    tcase_add_test(tc, no_lookahead_in_features_fills_rewards);
    tcase_add_test(tc, evaluate_splits_match_single_passes);
    tcase_add_test(tc, limit_orders_fill_only_when_reached);
    tcase_add_test(tc, checkpoint_round_trip_and_refusals);
    tcase_add_test(tc, fault_armed_on_a_running_engine);
    suite_add_tcase(s, tc);
    /* A case of its own, so that meson runs it beside the others (CK_RUN_CASE). */
    TCase *learning = tcase_create("learning");
    tcase_set_timeout(learning, 600);
    tcase_add_test(learning, learning_beats_baselines);
    suite_add_tcase(s, learning);
    return s;
}

int
main(void)
{
    return fox_test_run_suite(engine_suite());
}
