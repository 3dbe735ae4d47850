/*
 * test_learning.c — the levers that keep a trained agent from doing harm
 * where nothing can be earned: the cost-aware training reward and the
 * no-trade band at the greedy decision (env.h), and a short training on the
 * driftless random walk whose greedy policy must trade less than the random
 * policy on the same test bars.
 *
 * Not tested here: how well the agent trades the synthetic default (that is
 * a benchmark over seeds, bench/learning.py, not a test).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>

#include "gpu/engine.h"
#include "gpu/env.h"
#include "tests/testutil.h"

static const fox_env_params params = {0.0001f, 0.0001f, 0.00005f, 100.0f, 4, 3};

/* Four bars of close-only data: the fill is at the next close. */
static const float closes[4] = {100.0f, 101.0f, 100.5f, 102.0f};
static const fox_env_bars close_only = {NULL, NULL, NULL, closes};

/* Long 100 % at once by market order: direction long, the largest size and urgency. */
static const int32_t go_long[4] = {FOX_DIR_LONG, 3, FOX_ORDER_MARKET, 2};

START_TEST(test_train_reward_charges_cost_mult)
{
    fox_env_pos st = {0.0f, closes[0], 0};
    fox_env_fill f = fox_env_step(&params, &close_only, 0, &st, go_long);
    ck_assert_float_eq(f.dpos, 1.0f);
    /* cost_mult 1 is the step's reward, bit for bit. */
    ck_assert(fox_env_train_reward(&params, &f, 1.0f) == f.reward);
    /* cost_mult 3 charges the cost (fee + half-spread per unit) three times. */
    double cost = 0.0002;
    double want = ((double)f.ret_gross - 3.0 * cost) * 100.0;
    ck_assert_double_eq_tol(fox_env_train_reward(&params, &f, 3.0f), want, 1e-4);
    /* A step that trades nothing costs nothing, whatever the multiplier. */
    fox_env_fill g = fox_env_step(&params, &close_only, 1, &st, go_long);
    ck_assert_float_eq(g.dpos, 0.0f);
    ck_assert(fox_env_train_reward(&params, &g, 5.0f) == g.reward);
}
END_TEST

START_TEST(test_band_blocks_small_gains)
{
    /* From flat, going long 100 % costs 0.0002 × 100 = 0.02 in Q units per unit of change. */
    float per_unit = 4.0f * 0.0002f * 100.0f; /* band 4: the gain must exceed 0.08 */
    float q_dir[3] = {0.0f, 0.0f, 0.05f};
    int32_t a[4] = {FOX_DIR_LONG, 3, FOX_ORDER_MARKET, 2};
    fox_env_band(&params, 0.0f, q_dir, per_unit, a);
    ck_assert_int_eq(a[FOX_BR_DIRECTION], FOX_DIR_FLAT);
    ck_assert_int_eq(a[FOX_BR_SIZE], 3); /* the other branches stay greedy */
    ck_assert_int_eq(a[FOX_BR_URGENCY], 2);

    /* A gain above the band switches. */
    q_dir[2] = 0.09f;
    int32_t b[4] = {FOX_DIR_LONG, 3, FOX_ORDER_MARKET, 2};
    fox_env_band(&params, 0.0f, q_dir, per_unit, b);
    ck_assert_int_eq(b[FOX_BR_DIRECTION], FOX_DIR_LONG);

    /* The threshold scales with the change: a quarter-size entry needs a quarter of the gain. */
    q_dir[2] = 0.03f;
    int32_t c[4] = {FOX_DIR_LONG, 0, FOX_ORDER_MARKET, 2};
    fox_env_band(&params, 0.0f, q_dir, per_unit, c);
    ck_assert_int_eq(c[FOX_BR_DIRECTION], FOX_DIR_LONG);

    /* Held long, a flip to short (a change of 2) must beat 0.16 over staying long. */
    float q_flip[3] = {0.15f, 0.0f, 0.0f};
    int32_t d[4] = {FOX_DIR_SHORT, 3, FOX_ORDER_MARKET, 2};
    fox_env_band(&params, 1.0f, q_flip, per_unit, d);
    ck_assert_int_eq(d[FOX_BR_DIRECTION], FOX_DIR_LONG);

    /* Band 0 is the plain argmax. */
    int32_t z[4] = {FOX_DIR_SHORT, 3, FOX_ORDER_MARKET, 2};
    fox_env_band(&params, 1.0f, q_flip, 0.0f, z);
    ck_assert_int_eq(z[FOX_BR_DIRECTION], FOX_DIR_SHORT);
}
END_TEST

/*
 * A short training on the driftless random walk (CPU, fixed seed, a small
 * network): on the test bars the epoch's policy trades well below the random
 * policy, whose turnover is what a policy that learned nothing about costs
 * would pay. The bound is the default's lever at work, the band chosen on
 * validation (policy.band_rule): the plain argmax of the same weights
 * trades about a third of what the random policy does.
 */
START_TEST(test_noedge_turnover_below_random)
{
    fox_config c;
    fox_test_small_net(&c);
    const char *pairs[] = {"data.source=randomwalk",
                           "data.synth_bars=8000",
                           "train.learning_starts=256",
                           "train.eps_decay_steps=200",
                           "train.seed=3",
                           NULL};
    fox_test_set_pairs(&c, pairs);
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 800, NULL));
    fox_epoch_report ep;
    FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &ep));
    fox_eval_result greedy = ep.test, rnd, flat;
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_RANDOM, &rnd));
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_FLAT, &flat));
    ck_assert_double_eq(flat.turnover, 0.0);
    ck_assert_double_eq(flat.sharpe, 0.0);
    ck_assert_msg(rnd.turnover > 0.2, "random turnover %.4f", rnd.turnover);
    ck_assert_msg(greedy.turnover < 0.25 * rnd.turnover,
                  "greedy turnover %.4f, random %.4f (Sharpe %.2f vs %.2f)", greedy.turnover,
                  rnd.turnover, greedy.sharpe, rnd.sharpe);
    fox_engine_destroy(e);
}
END_TEST

static Suite *
learning_suite(void)
{
    Suite *su = suite_create("learning");
    TCase *tc = tcase_create("levers");
    tcase_add_test(tc, test_train_reward_charges_cost_mult);
    tcase_add_test(tc, test_band_blocks_small_gains);
    suite_add_tcase(su, tc);
    tc = tcase_create("noedge");
    tcase_add_test(tc, test_noedge_turnover_below_random);
    suite_add_tcase(su, tc);
    return su;
}

int
main(void)
{
    return fox_test_run_suite(learning_suite());
}
