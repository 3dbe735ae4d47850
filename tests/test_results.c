/*
 * test_results.c — the figures of a fold report, checked against values
 * worked out here without the engine: the Sharpe's standard error, the
 * baselines on a small CSV fixture (flat is exactly 0, buy-and-hold is the
 * split's own Sharpe, the trend rule's positions by hand), the oracle's
 * refusal on real data and its flatness where the generator has no edge,
 * and the epoch selection rules on a made-up validation curve.
 *
 * Not tested here: how the table prints these (test_proto) or how the
 * daemon ships them (test_daemon).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/engine_impl.h"
#include "tests/testutil.h"

static char tmpdir[200];

/* A small network on the CPU: the baselines never call it, the greedy pass does. */
static void
fixture_config(fox_config *c, const char *path)
{
    fox_config_default(c);
    const char *pairs[] = {"model.h1=16",       "model.h2=16",         "model.head_hidden=16",
                           "model.aux_hidden=8", "model.n_cos=8",      "model.n_atoms=11",
                           "engine.backend=cpu", "train.batch=16",     "env.n_envs=4",
                           "data.folds=1",       "train.folds=0",      "data.bars_per_year=252", NULL};
    fox_test_set_pairs(c, pairs);
    snprintf(c->data, sizeof c->data, "%s", path);
}

/*
 * 1000 close-only bars whose log price rises 0.002 a bar to bar 800, then
 * falls 0.003 a bar, with a ±0.001 zigzag so that returns vary. With one
 * fold the test split is bars [765, 1000): long first, short after the top.
 */
#define FIX_BARS 1000
#define FIX_TOP  800

static void
write_fixture(char *path, size_t len)
{
    snprintf(path, len, "%s/updown.csv", tmpdir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "close\n");
    for (int t = 0; t < FIX_BARS; t++) {
        double lp = t <= FIX_TOP ? 0.002 * t : 0.002 * FIX_TOP - 0.003 * (t - FIX_TOP);
        fprintf(f, "%.6f\n", 100.0 * exp(lp + (t % 2 ? 0.001 : -0.001)));
    }
    ck_assert_int_eq(fclose(f), 0);
}

/* Sharpe of n returns as the report defines it: mean / sample std × √P. */
static double
sharpe_of(const double *r, int n, double P)
{
    double m = 0, v = 0;
    for (int i = 0; i < n; i++)
        m += r[i];
    m /= n;
    for (int i = 0; i < n; i++)
        v += (r[i] - m) * (r[i] - m);
    return m / sqrt(v / (n - 1)) * sqrt(P);
}

START_TEST(sharpe_se_by_hand)
{
    /*
     * r = {0.01, 0.03, −0.02, 0.02, 0, −0.01}: mean 0.005, deviations
     * ±0.005, ±0.015, ±0.025 (so γ₃ = 0), sample std √(1750e-6/5), per-bar
     * SR q = 1/√14, γ₄ = m4/m2² = 606/350. Annualized over P = 252:
     * SR = √252/√14 = 4.2426, SE = √(252·(1 + (606/350 − 1)/4 · 1/14)/6).
     */
    const double r[] = {0.01, 0.03, -0.02, 0.02, 0.0, -0.01};
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
    for (int i = 0; i < 6; i++) {
        s1 += r[i];
        s2 += r[i] * r[i];
        s3 += r[i] * r[i] * r[i];
        s4 += r[i] * r[i] * r[i] * r[i];
    }
    double sr = sharpe_of(r, 6, 252.0);
    ck_assert_double_eq_tol(sr, sqrt(252.0 / 14.0), 1e-12);
    double want = sqrt(252.0 * (1.0 + (606.0 / 350.0 - 1.0) / 4.0 / 14.0) / 6.0);
    ck_assert_double_eq_tol(fox__sharpe_se(sr, s1, s2, s3, s4, 6, 252.0), want, 1e-9);
    ck_assert_double_eq_tol(want, 6.522926599968, 1e-9);
    /* Normal returns of SR 0: SE = √(P/n), the familiar 1/√years. */
    /* {0.01, −0.01, 0.01, −0.01}: sums 0, 4e-4, 0, 4e-8. */
    double se0 = fox__sharpe_se(0.0, 0.0, 4e-4, 0.0, 4e-8, 4, 252.0);
    ck_assert_double_eq_tol(se0, sqrt(252.0 / 4.0), 1e-12);
    /* No variance: the Sharpe is exactly 0 and so is its error. */
    ck_assert_double_eq(fox__sharpe_se(0.0, 0.0, 0.0, 0.0, 0.0, 100, 252.0), 0.0);
}
END_TEST

START_TEST(baselines_on_a_fixture)
{
    char path[512];
    write_fixture(path, sizeof path);
    fox_config c;
    fixture_config(&c, path);
    fox_engine *e = fox_test_engine(&c);
    const fox_series *s = &e->series;
    int tb = e->seg.test_begin, te = e->seg.test_end;
    ck_assert_int_eq(tb, 765);
    ck_assert_int_eq(te, FIX_BARS);
    fox_fold_report fr;
    FOX_CK_OK(fox_engine_fold_report(e, &fr));
    const double cost = (double)c.fee + c.half_spread;

    /* Flat: exactly nothing. */
    const fox_eval_result *flat = &fr.test_policy[FOX_POLICY_FLAT];
    ck_assert_double_eq(flat->sharpe, 0.0);
    ck_assert_double_eq(flat->sharpe_se, 0.0);
    ck_assert_double_eq(flat->sharpe_gross, 0.0);
    ck_assert_double_eq(flat->turnover, 0.0);
    ck_assert_double_eq(flat->max_drawdown, 0.0);
    ck_assert_double_eq(flat->total_return, 0.0);
    ck_assert_int_eq(flat->bars, te - tb - 1);

    /*
     * Buy-and-hold on close-only bars: the decision at the close of bar tb
     * fills at the close of tb+1, so its returns are 0 (less the cost of
     * entering) and then the series' own log returns of bars tb+2 .. te−1.
     */
    int n = te - tb - 1;
    double *r = calloc((size_t)n, sizeof *r);
    for (int i = 1; i < n; i++)
        r[i] = log((double)s->close[tb + i + 1] / (double)s->close[tb + i]);
    const fox_eval_result *bh = &fr.test_policy[FOX_POLICY_BUY_HOLD];
    ck_assert_double_eq_tol(bh->sharpe_gross, sharpe_of(r, n, 252.0), 1e-4);
    r[0] = -cost;
    ck_assert_double_eq_tol(bh->sharpe, sharpe_of(r, n, 252.0), 1e-4);
    ck_assert_double_eq_tol(bh->turnover, 1.0 / n, 1e-12);
    ck_assert_int_eq(bh->bars, n);

    /*
     * The trend rule: long while the close is above the close k bars back,
     * short below. Here that is long from the first bar, short some bars
     * after the top (whatever k validation chose): |Δposition| sums to 1 + 2.
     */
    ck_assert(fr.trend_k == 16 || fr.trend_k == 64 || fr.trend_k == 256);
    ck_assert_int_eq(fr.trend_k_tried, FOX_TREND_K_COUNT);
    int k = fr.trend_k;
    double held = 0.0, turn = 0.0, total = 0.0;
    int flip = -1;
    for (int t = tb; t + 1 < te; t++) {
        double past = s->close[t - k], now = s->close[t];
        double p = now > past ? 1.0 : now < past ? -1.0 : 0.0;
        if (p < 0 && flip < 0)
            flip = t;
        total += held * log((double)s->close[t + 1] / (double)s->close[t]) - cost * fabs(p - held);
        turn += fabs(p - held);
        held = p;
    }
    ck_assert_double_eq(turn, 3.0);
    ck_assert_msg(flip > FIX_TOP && flip < te - 1, "the flip at %d", flip);
    const fox_eval_result *tr = &fr.test_policy[FOX_POLICY_TREND];
    ck_assert_double_eq_tol(tr->turnover * tr->bars, 3.0, 1e-9);
    ck_assert_double_eq_tol(tr->total_return, total, 1e-5);
    fox_eval_result again;
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_TREND, &again));
    ck_assert_double_eq(again.sharpe, tr->sharpe);

    /* Random trades; the fold reports no oracle, and asking for one is refused. */
    ck_assert(fr.test_policy[FOX_POLICY_RANDOM].turnover > 0.1);
    ck_assert_int_eq(fr.has_oracle, 0);
    ck_assert(isnan(fr.oracle_fraction));
    fox_eval_result o;
    ck_assert_int_eq(fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_ORACLE, &o), FOX_ENOENT);
    ck_assert_msg(strstr(fox_engine_errmsg(e), "oracle"), "%s", fox_engine_errmsg(e));
    free(r);
    fox_engine_destroy(e);
}
END_TEST

static double
no_edge(const fox_series *s, int t)
{
    (void)s;
    (void)t;
    return 0.0;
}

START_TEST(oracle_on_generated_data)
{
    fox_config c;
    fixture_config(&c, "synthetic");
    const char *pairs[] = {"data.synth_bars=6000", "data.bars_per_year=0", NULL};
    fox_test_set_pairs(&c, pairs);
    fox_engine *e = fox_test_engine(&c);
    fox_fold_report fr;
    FOX_CK_OK(fox_engine_fold_report(e, &fr));
    ck_assert_int_eq(fr.has_oracle, 1);
    /* Knowing the regime and drift is worth more than any rule that does not. */
    const fox_eval_result *o = &fr.test_policy[FOX_POLICY_ORACLE];
    ck_assert_msg(o->sharpe > 2.0 * o->sharpe_se, "oracle %.2f ± %.2f", o->sharpe, o->sharpe_se);
    for (int p = FOX_POLICY_BUY_HOLD; p < FOX_POLICY_ORACLE; p++)
        ck_assert_msg(o->sharpe > fr.test_policy[p].sharpe, "oracle %.2f, policy %d %.2f",
                      o->sharpe, p, fr.test_policy[p].sharpe);
    /* Where the generator expects nothing, the oracle never trades. */
    e->series.expected_return = no_edge;
    fox_eval_result z;
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_ORACLE, &z));
    ck_assert_double_eq(z.turnover, 0.0);
    ck_assert_double_eq(z.sharpe, 0.0);
    fox_engine_destroy(e);
}
END_TEST

/*
 * A known-edge generator brings its rule as a baseline: on a strong planted
 * autocorrelation the rule earns clearly, beats the trend rule, and the
 * policy's paired differences are measured against every row.
 */
START_TEST(rule_on_a_known_edge)
{
    fox_config c;
    fixture_config(&c, "autocorr");
    const char *pairs[] = {"data.synth_bars=8000", "data.bars_per_year=0", "data.edge_coef=0.3",
                           NULL};
    fox_test_set_pairs(&c, pairs);
    fox_engine *e = fox_test_engine(&c);
    fox_epoch_report ep;
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 5, NULL));
    FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &ep));
    fox_fold_report fr;
    FOX_CK_OK(fox_engine_fold_report(e, &fr));
    ck_assert_int_eq(fr.has_rule, 1);
    ck_assert_str_eq(fr.rule_name, "sign of the last return");
    const fox_eval_result *r = &fr.test_policy[FOX_POLICY_RULE];
    ck_assert_msg(r->sharpe > 2.0 * r->sharpe_se, "rule %.2f ± %.2f", r->sharpe, r->sharpe_se);
    ck_assert_msg(r->sharpe > fr.test_policy[FOX_POLICY_TREND].sharpe, "rule %.2f, trend %.2f",
                  r->sharpe, fr.test_policy[FOX_POLICY_TREND].sharpe);
    for (int p = FOX_POLICY_BUY_HOLD; p < FOX_POLICY_COUNT; p++) {
        ck_assert_int_eq(fr.vs[p].bars, fr.test_at_best.bars);
        ck_assert(fr.vs[p].se > 0.0 || fr.test_at_best.turnover == 0.0);
    }
    /* Flat's Sharpe is exactly 0: the paired difference is the policy's own Sharpe. */
    ck_assert_double_eq_tol(fr.vs[FOX_POLICY_FLAT].diff, fr.test_at_best.sharpe, 1e-12);
    fox_engine_destroy(e);

    /* A series without a planted edge has no rule, and evaluating one is refused. */
    fixture_config(&c, "randomwalk");
    e = fox_test_engine(&c);
    FOX_CK_OK(fox_engine_fold_report(e, &fr));
    ck_assert_int_eq(fr.has_rule, 0);
    fox_eval_result z;
    ck_assert_int_eq(fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_RULE, &z), FOX_ENOENT);
    fox_engine_destroy(e);
}
END_TEST

/*
 * The paired comparison: identical returns differ by exactly 0; against
 * zeros (flat) the difference is the Sharpe itself and its bootstrap SE is
 * near the closed form's; two strongly correlated series have a difference
 * far better measured than their SEs added in quadrature would say.
 */
START_TEST(paired_sharpe_bootstrap)
{
    enum { N = 4000 };
    static float a[N], b[N], zero[N];
    fox_rng rng;
    fox_rng_seed(&rng, 3);
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
    for (int i = 0; i < N; i++) {
        a[i] = (float)(0.0004 + 0.01 * fox_rng_normal(&rng));
        b[i] = a[i] + (float)(0.001 * fox_rng_normal(&rng));
        double x = a[i];
        s1 += x, s2 += x * x, s3 += x * x * x, s4 += x * x * x * x;
    }
    fox_paired same = fox__paired_sharpe(a, a, N, 252.0, 1);
    ck_assert_double_eq(same.diff, 0.0);
    ck_assert_double_eq(same.se, 0.0);
    ck_assert_int_eq(same.bars, N);
    fox_paired vs_flat = fox__paired_sharpe(a, zero, N, 252.0, 1);
    double mean = s1 / N, sd = sqrt((s2 - N * mean * mean) / (N - 1));
    double sr = mean / sd * sqrt(252.0), closed = fox__sharpe_se(sr, s1, s2, s3, s4, N, 252.0);
    ck_assert_double_eq_tol(vs_flat.diff, sr, 1e-9);
    ck_assert_msg(vs_flat.se > 0.75 * closed && vs_flat.se < 1.33 * closed,
                  "bootstrap %.3f, closed form %.3f", vs_flat.se, closed);
    fox_paired close_pair = fox__paired_sharpe(a, b, N, 252.0, 1);
    ck_assert_msg(close_pair.se < 0.3 * closed, "paired SE %.3f, each %.3f", close_pair.se, closed);
    /* Seeded: the same call gives the same SE. */
    ck_assert_double_eq(fox__paired_sharpe(a, b, N, 252.0, 1).se, close_pair.se);
}
END_TEST

/*
 * policy.band_rule = validation: the band an epoch trades with is the one
 * whose validation net Sharpe minus its SE is highest among the choices,
 * staying out when none is above 0, and the test walk trades at it.
 */
static void
check_band_choice(const char *source, const char *coef)
{
    fox_config c;
    fixture_config(&c, source);
    const char *pairs[] = {"data.synth_bars=8000", "data.bars_per_year=0", coef,
                           "policy.band_rule=validation", "train.learning_starts=64", NULL};
    fox_test_set_pairs(&c, pairs);
    fox_engine *e = fox_test_engine(&c);
    fox_epoch_report ep;
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 200, NULL));
    FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &ep));
    static const float choices[FOX_BAND_CHOICES_N] = FOX_BAND_CHOICES;
    double best = 0.0;
    float want = FOX_BAND_FLAT;
    for (int k = FOX_BAND_CHOICES_N - 1; k >= 0; k--) {
        fox_eval_result r;
        e->m->band = choices[k];
        FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_VALIDATION, FOX_POLICY_GREEDY, &r));
        if (r.sharpe - c.band_se * r.sharpe_se > best) {
            best = r.sharpe - c.band_se * r.sharpe_se;
            want = choices[k];
        }
    }
    ck_assert_msg(ep.band == want, "%s: chose %g, the best bound is at %g", source, ep.band, want);
    fox_eval_result t;
    e->m->band = want;
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_GREEDY, &t));
    ck_assert_double_eq(t.sharpe, ep.test.sharpe);
    if (want >= FOX_BAND_FLAT)
        ck_assert_double_eq(ep.test.turnover, 0.0);
    fox_fold_report fr;
    FOX_CK_OK(fox_engine_fold_report(e, &fr));
    ck_assert(fr.band == ep.band);
    fox_engine_destroy(e);
}

START_TEST(band_chosen_on_validation)
{
    check_band_choice("autocorr", "data.edge_coef=0.3");
    check_band_choice("randomwalk", "data.edge_coef=0");
}
END_TEST

/*
 * policy.weights=average: the evaluation acts with the Polyak average of
 * the weights, the target net under train.polyak, and training is the same
 * bit for bit: an engine that acts with the online weights after loading
 * that average as its weights walks the same bars to the same figures.
 */
START_TEST(evaluation_with_averaged_weights)
{
    fox_config c;
    fixture_config(&c, "autocorr");
    const char *pairs[] = {"data.synth_bars=4000", "data.bars_per_year=0", "train.polyak=0.05",
                           "train.learning_starts=64", "policy.weights=average", NULL};
    fox_test_set_pairs(&c, pairs);
    fox_engine *avg = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(avg, fox_engine_run_steps(avg, 100, NULL));
    fox_eval_result ra, ro;
    FOX_CK_ENGINE_OK(avg, fox_engine_evaluate(avg, FOX_SPLIT_TEST, FOX_POLICY_GREEDY, &ra));

    c.eval_weights = FOX_EVAL_WEIGHTS_ONLINE;
    fox_engine *online = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(online, fox_engine_run_steps(online, 100, NULL));
    size_t np = fox_engine_param_count(avg);
    float *p = malloc(np * sizeof(float)), *t = malloc(np * sizeof(float));
    float *m = malloc(np * sizeof(float)), *v = malloc(np * sizeof(float));
    fox_train_counters ctr;
    FOX_CK_OK(avg->ops->state_io(avg->m->be, 0, p, t, m, v, &ctr));
    /* Training does not depend on the weights evaluation acts with: the same bits. */
    float *p2 = malloc(np * sizeof(float));
    FOX_CK_OK(online->ops->state_io(online->m->be, 0, p2, NULL, NULL, NULL, NULL));
    ck_assert(memcmp(p, p2, np * sizeof(float)) == 0);
    ck_assert(memcmp(p, t, np * sizeof(float)) != 0);
    FOX_CK_OK(online->ops->state_io(online->m->be, 1, t, t, m, v, &ctr));
    FOX_CK_ENGINE_OK(online, fox_engine_evaluate(online, FOX_SPLIT_TEST, FOX_POLICY_GREEDY, &ro));
    ck_assert_double_eq(ra.sharpe, ro.sharpe);
    ck_assert_double_eq(ra.turnover, ro.turnover);
    free(p);
    free(p2);
    free(t);
    free(m);
    free(v);
    fox_engine_destroy(avg);
    fox_engine_destroy(online);

    /* Without a soft update the target net is a stale copy, not an average: refused. */
    char err[256];
    fox_config bad;
    fox_config_default(&bad);
    FOX_CK_OK(fox_config_set(&bad, "policy.weights", "average", err, sizeof err));
    ck_assert_int_eq(fox_config_validate(&bad, err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "train.polyak"), "%s", err);
}
END_TEST

/* Feed the validation curve 1.2, 7.0, 1.4, 3.0, 1.0 (test Sharpe 10 × epoch) to a rule. */
static fox_fold_report
select_on_curve(const char *rule)
{
    static const double val[] = {1.2, 7.0, 1.4, 3.0, 1.0};
    char path[512];
    write_fixture(path, sizeof path);
    fox_config c;
    fixture_config(&c, path);
    char kv[64];
    snprintf(kv, sizeof kv, "train.select=%s", rule);
    const char *pairs[] = {kv, NULL};
    fox_test_set_pairs(&c, pairs);
    fox_engine *e = fox_test_engine(&c);
    for (int j = 0; j < 5; j++) {
        fox_epoch_report r;
        memset(&r, 0, sizeof r);
        r.epoch = j;
        r.val.sharpe = val[j];
        r.test.sharpe = 10.0 * j;
        fox__engine_select_epoch(e, &r);
    }
    fox_fold_report fr;
    FOX_CK_OK(fox_engine_fold_report(e, &fr));
    fox_engine_destroy(e);
    return fr;
}

START_TEST(selection_rules)
{
    /* Smoothed over 3: 1.2, 4.1 (partial windows), then 3.2, 3.8, 1.8: epoch 3. */
    fox_fold_report fr = select_on_curve("smoothed");
    ck_assert_int_eq(fr.best_epoch, 3);
    ck_assert_double_eq_tol(fr.select_score, (7.0 + 1.4 + 3.0) / 3.0, 1e-12);
    ck_assert_double_eq(fr.best_val_sharpe, 3.0);
    ck_assert_double_eq(fr.test_at_best.sharpe, 30.0);
    ck_assert_double_eq(fr.test_at_last.sharpe, 40.0);
    ck_assert_double_eq_tol(fr.test_sharpe_mean, 20.0, 1e-12);
    ck_assert_int_eq(fr.select_window, 3);
    /* The old rule takes the lone spike. */
    fr = select_on_curve("best");
    ck_assert_int_eq(fr.best_epoch, 1);
    ck_assert_double_eq(fr.test_at_best.sharpe, 10.0);
    fr = select_on_curve("last");
    ck_assert_int_eq(fr.best_epoch, 4);
    ck_assert_double_eq(fr.test_at_best.sharpe, 40.0);
}
END_TEST

static void
make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fox_results_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void
remove_tmpdir(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/updown.csv", tmpdir);
    unlink(path);
    rmdir(tmpdir);
}

static Suite *
results_suite(void)
{
    Suite *s = suite_create("results");
    TCase *tc = tcase_create("report");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, sharpe_se_by_hand);
    tcase_add_test(tc, baselines_on_a_fixture);
    tcase_add_test(tc, oracle_on_generated_data);
    tcase_add_test(tc, rule_on_a_known_edge);
    tcase_add_test(tc, paired_sharpe_bootstrap);
    tcase_add_test(tc, band_chosen_on_validation);
    tcase_add_test(tc, evaluation_with_averaged_weights);
    tcase_add_test(tc, selection_rules);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    make_tmpdir();
    int rc = fox_test_run_suite(results_suite());
    remove_tmpdir();
    return rc;
}
