/*
 * evaluate.c — one sequential pass of a policy over a validation or test
 * segment: the same environment step as training (env.h), greedy actions
 * from the backend's expected Q or a baseline's rule, and the trading
 * report (annualized Sharpe net and gross with its standard error, max
 * drawdown, turnover). Also the baselines: every rule that does not learn,
 * on the test split, once per fold (and once per backtest).
 *
 * Sequential on purpose: the portfolio features of bar t depend on the
 * position the policy took at t−1. Several segments (validation and test)
 * walk side by side, so each forward pass serves all of them, and the greedy
 * policy's passes predict bars ahead (lookahead.h). The rules that do not
 * learn need no pass: their actions follow from the bars and the position.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/engine_impl.h"
#include "gpu/env.h"
#include "gpu/lookahead.h"

/* mean/std × √P with the sample standard deviation; 0 for a flat series. */
static double
sharpe(double sum, double sum2, int n, double P)
{
    if (n < 2)
        return 0.0;
    double mean = sum / n;
    double var = (sum2 - n * mean * mean) / (n - 1);
    if (var <= 1e-24)
        return 0.0;
    return mean / sqrt(var) * sqrt(P);
}

/*
 * Standard error of the annualized Sharpe sr of n returns whose raw sums of
 * powers are s1..s4 (Mertens; Opdyke shows it holds for stationary ergodic
 * returns): with the per-bar SR q = sr/√P, skewness γ₃ and raw kurtosis γ₄,
 * Var(q̂) = (1 − γ₃q + (γ₄−1)/4·q²)/n and SE = √P·√Var. The bracket is
 * (1 − γ₃q/2)² + (γ₄−1−γ₃²)/4·q² ≥ 0. A series without variance (flat) has
 * an exact Sharpe of 0 and SE 0.
 */
double
fox__sharpe_se(double sr, double s1, double s2, double s3, double s4, int n, double P)
{
    if (n < 2 || P <= 0.0)
        return 0.0;
    double m = s1 / n;
    double m2 = s2 / n - m * m;
    if (m2 <= 1e-24)
        return 0.0;
    double m3 = s3 / n - 3.0 * m * s2 / n + 2.0 * m * m * m;
    double m4 = s4 / n - 4.0 * m * s3 / n + 6.0 * m * m * s2 / n - 3.0 * m * m * m * m;
    double g3 = m3 / (m2 * sqrt(m2)), g4 = m4 / (m2 * m2);
    double q = sr / sqrt(P);
    double v = (1.0 - g3 * q + (g4 - 1.0) / 4.0 * q * q) / n;
    return v > 0.0 ? sqrt(v * P) : 0.0;
}

/* One segment's pass in progress: where it is, its position, its running sums. */
typedef struct eval_walk {
    int t, end; /* the next decision bar; the segment ends at end */
    fox_env_pos st;
    fox_rng rng;
    double sum, sum2, sum3, sum4, gsum, gsum2, cum, peak, mdd, turn;
    int n;
    float *rets; /* where the per-bar net returns go (a test walk's), or NULL */
} eval_walk;

/* The action that moves the whole way to position dir (−1, 0, +1) at full size, at market. */
static void
full_move(const fox_model_layout *lay, int dir, int32_t a[4])
{
    a[FOX_BR_DIRECTION] = dir + 1;
    a[FOX_BR_SIZE] = lay->branch_size[FOX_BR_SIZE] - 1;
    a[FOX_BR_ORDER] = FOX_ORDER_MARKET;
    a[FOX_BR_URGENCY] = lay->branch_size[FOX_BR_URGENCY] - 1;
}

/* The sign of the trailing k-bar log return at bar t (from bar 0 while t < k). */
static int
trend_direction(const fox_series *s, int t, int k)
{
    float past = s->close[t >= k ? t - k : 0];
    return s->close[t] > past ? 1 : s->close[t] < past ? -1 : 0;
}

/*
 * The oracle: of the positions −1, 0 and +1, the one with the largest
 * expected next-bar net return given the generator's expected return E:
 * p·E − (fee + half_spread)·|p − held|; a tie keeps the position held, so
 * that where E = 0 (no edge) it never trades.
 */
static int
oracle_direction(const fox_config *c, double E, float held)
{
    double cost = (double)c->fee + c->half_spread;
    int best = held > 0.0f ? 1 : held < 0.0f ? -1 : 0;
    double best_v = best * E - cost * fabs(best - held);
    for (int p = -1; p <= 1; p++) {
        double v = p * E - cost * fabs(p - held);
        if (v > best_v) {
            best_v = v;
            best = p;
        }
    }
    return best;
}

/* The action of a policy that does not learn, at the walk's bar; trend_k for the trend rule. */
static void
rule_action(const fox_engine *e, fox_policy policy, int trend_k, eval_walk *w, int32_t a[4])
{
    const fox_model_layout *lay = &e->lay;
    switch (policy) {
    case FOX_POLICY_RANDOM:
        for (int d = 0; d < lay->n_branches; d++)
            a[d] = (int32_t)fox_rng_below(&w->rng, (uint32_t)lay->branch_size[d]);
        return;
    case FOX_POLICY_BUY_HOLD:
        full_move(lay, 1, a);
        return;
    case FOX_POLICY_TREND:
        full_move(lay, trend_direction(&e->series, w->t, trend_k), a);
        return;
    case FOX_POLICY_ORACLE:
        full_move(lay,
                  oracle_direction(&e->cfg, e->series.expected_return(&e->series, w->t),
                                   w->st.pos),
                  a);
        return;
    case FOX_POLICY_RULE: {
        double pos = e->series.rule_position(&e->series, w->t);
        int levels = lay->branch_size[FOX_BR_SIZE];
        int size = (int)lround(fabs(pos) * levels);
        full_move(lay, pos > 0.0 ? 1 : pos < 0.0 ? -1 : 0, a);
        a[FOX_BR_SIZE] = size < 1 ? 0 : size > levels ? levels - 1 : size - 1;
        return;
    }
    default:
        full_move(lay, 0, a);
        return;
    }
}

static void
walk_step(eval_walk *w, const fox_env_params *p, const fox_env_bars *bars, const int32_t a[4])
{
    fox_env_fill f = fox_env_step(p, bars, w->t, &w->st, a);
    if (w->rets)
        w->rets[w->n] = f.ret_net;
    w->sum += f.ret_net;
    double r2 = (double)f.ret_net * f.ret_net;
    w->sum2 += r2;
    w->sum3 += r2 * f.ret_net;
    w->sum4 += r2 * r2;
    w->gsum += f.ret_gross;
    w->gsum2 += (double)f.ret_gross * f.ret_gross;
    w->turn += f.dpos;
    w->cum += f.ret_net;
    if (w->cum > w->peak)
        w->peak = w->cum;
    if (w->peak - w->cum > w->mdd)
        w->mdd = w->peak - w->cum;
    w->t++;
    w->n++;
}

static void
walk_report(const eval_walk *w, double P, fox_eval_result *out)
{
    memset(out, 0, sizeof *out);
    out->sharpe = sharpe(w->sum, w->sum2, w->n, P);
    out->sharpe_gross = sharpe(w->gsum, w->gsum2, w->n, P);
    out->max_drawdown = 1.0 - exp(-w->mdd);
    out->turnover = w->n ? w->turn / w->n : 0.0;
    out->total_return = w->cum;
    out->bars_per_year = P;
    out->bars = w->n;
    out->sharpe_se = fox__sharpe_se(out->sharpe, w->sum, w->sum2, w->sum3, w->sum4, w->n, P);
}

/* One walk of walk_splits: the split it walks and the greedy policy's band there. */
typedef struct walk_spec {
    fox_split split;
    float band; /* in multiples of a change's cost (policy.band); FOX_BAND_FLAT never trades */
} walk_spec;

/* The walks of evaluate_k, untimed. */
static int
walk_splits(fox_engine *e, const walk_spec *specs, int n_splits, fox_policy policy, int trend_k,
            fox_eval_result *out)
{
    if (e->fold < 0)
        return fox__engine_fail(e, FOX_ESTATE, "evaluate before begin_fold");
    if (n_splits < 1 || n_splits > FOX_EVAL_WALKS_MAX)
        return fox__engine_fail(e, FOX_EINVAL, "evaluate: %d walks (1 to %d)", n_splits,
                                FOX_EVAL_WALKS_MAX);
    if ((int)policy < 0 || policy >= FOX_POLICY_COUNT)
        return fox__engine_fail(e, FOX_EINVAL, "evaluate: no policy %d", (int)policy);
    if (policy == FOX_POLICY_ORACLE && !e->series.expected_return)
        return fox__engine_fail(e, FOX_ENOENT,
                                "evaluate: the oracle needs a generator's truth; %s has none",
                                e->series.source);
    if (policy == FOX_POLICY_RULE && !e->series.rule_position)
        return fox__engine_fail(e, FOX_ENOENT,
                                "evaluate: %s is no known-edge generator's and has no rule",
                                e->series.source);
    const fox_config *c = &e->cfg;
    fox_env_params p = {c->fee, c->half_spread, c->limit_fee,
                        1.0f,   c->size_levels, c->urgency_levels};
    fox_env_bars bars = {e->series.open, e->series.high, e->series.low, e->series.close};
    /* The bands in the Q's units: Q learns rewards scaled by reward_scale. */
    float band[FOX_EVAL_WALKS_MAX];
    eval_walk w[FOX_EVAL_WALKS_MAX];
    for (int k = 0; k < n_splits; k++) {
        int test = specs[k].split == FOX_SPLIT_TEST;
        band[k] = specs[k].band >= FOX_BAND_FLAT
                      ? FOX_BAND_FLAT
                      : specs[k].band * (c->fee + c->half_spread) * c->reward_scale;
        memset(&w[k], 0, sizeof w[k]);
        w[k].t = test ? e->seg.test_begin : e->seg.val_begin;
        w[k].end = test ? e->seg.test_end : e->seg.val_end;
        w[k].st = (fox_env_pos){0.0f, e->series.close[w[k].t], 0};
        float *rets = policy == FOX_POLICY_GREEDY ? e->m->greedy_ret : e->test_ret[policy];
        if (test && rets && w[k].end - w[k].t <= e->ret_cap)
            w[k].rets = rets;
        /* The random baseline's draws are the data's: every member, every seed meets the same. */
        fox_rng_seed(&w[k].rng, c->data_seed ^ (0xe7a1ULL + 31ULL * (uint64_t)e->fold +
                                                (uint64_t)specs[k].split));
    }
    /*
     * The per-bar hook sees the fold's policy: the baselines, and the greedy
     * walks of the member whose walk the policy is (or of the ensemble), not
     * every member's.
     */
    int hook = e->bar_hook && (policy != FOX_POLICY_GREEDY || e->m == fox__engine_policy_member(e));
    /*
     * The segments walk in lockstep, one decision bar each per round, so the
     * greedy policy asks for every live segment's action at once: one forward
     * pass serves all the segments whose predicted bars (lookahead.h) ran out.
     */
    fox__lookahead_reset(e->ahead);
    for (;;) {
        int live[FOX_EVAL_WALKS_MAX], n_live = 0;
        for (int k = 0; k < n_splits; k++)
            if (w[k].t + 1 < w[k].end)
                live[n_live++] = k;
        if (n_live == 0)
            break;
        int32_t greedy[FOX_EVAL_WALKS_MAX][4];
        if (policy == FOX_POLICY_GREEDY) {
            fox_lookahead_seg segs[FOX_EVAL_WALKS_MAX];
            for (int i = 0; i < n_live; i++)
                segs[i] = (fox_lookahead_seg){live[i], w[live[i]].t, w[live[i]].end,
                                              &w[live[i]].st, band[live[i]]};
            int rv = fox__lookahead_actions(e->ahead, fox__engine_q_values, e, &e->feat, &p,
                                            &bars, segs, n_live, greedy);
            if (rv != FOX_OK)
                return fox__engine_fail(e, rv, "evaluate: q_values: %s", fox_strerror(rv));
        }
        for (int i = 0; i < n_live; i++) {
            eval_walk *wk = &w[live[i]];
            int32_t a[4] = {0};
            if (policy == FOX_POLICY_GREEDY)
                memcpy(a, greedy[i], sizeof a);
            else
                rule_action(e, policy, trend_k, wk, a);
            walk_step(wk, &p, &bars, a);
            if (hook)
                e->bar_hook(e->bar_arg, specs[live[i]].split, policy, wk->t, wk->cum);
        }
    }
    for (int k = 0; k < n_splits; k++)
        walk_report(&w[k], e->series.bars_per_year, &out[k]);
    return FOX_OK;
}

/*
 * The ensemble's Q is the mean of the expected Q of the members still
 * training, each at its weights now: a member that halted keeps its chosen
 * epoch but no longer votes.
 */
int
fox__engine_q_values(void *engine, const float *s, int B, float *q)
{
    fox_engine *e = engine;
    if (e->m != &e->ensemble)
        return e->ops->q_values(e->m->be, s, B, q);
    size_t n = (size_t)B * (size_t)e->lay.n_actions;
    int voters = 0;
    for (int k = 0; k < e->cfg.members; k++) {
        const fox_member *m = &e->members[k];
        if (m->halt.reason != FOX_HALT_NONE)
            continue;
        int rv = e->ops->q_values(m->be, s, B, voters ? e->q_scratch : q);
        if (rv != FOX_OK)
            return rv;
        for (size_t i = 0; voters && i < n; i++)
            q[i] += e->q_scratch[i];
        voters++;
    }
    if (voters == 0)
        return FOX_ESTATE;
    for (size_t i = 0; voters > 1 && i < n; i++)
        q[i] /= (float)voters;
    return FOX_OK;
}

/*
 * evaluate_splits with the trend rule's lookback given, timed for the run's
 * wall-time split: the fold's baselines count as evaluation as well.
 */
static int
evaluate_k(fox_engine *e, const walk_spec *specs, int n_splits, fox_policy policy, int trend_k,
           fox_eval_result *out)
{
    double t0 = fox_mono_s();
    int rv = walk_splits(e, specs, n_splits, policy, trend_k, out);
    e->times.eval += fox_mono_s() - t0;
    int64_t rows;
    fox__lookahead_counts(e->ahead, &e->times.eval_passes, &rows, &e->times.eval_bars);
    return rv;
}

int
fox_engine_evaluate_splits(fox_engine *e, const fox_split *splits, int n_splits, fox_policy policy,
                           fox_eval_result *out)
{
    walk_spec specs[FOX_EVAL_SPLITS_MAX];
    if (n_splits < 1 || n_splits > FOX_EVAL_SPLITS_MAX)
        return fox__engine_fail(e, FOX_EINVAL, "evaluate: %d splits (1 to %d)", n_splits,
                                FOX_EVAL_SPLITS_MAX);
    for (int k = 0; k < n_splits; k++)
        specs[k] = (walk_spec){splits[k], e->m->band};
    return evaluate_k(e, specs, n_splits, policy, e->trend_k, out);
}

/*
 * policy.band_rule = validation: the no-trade band of the greedy decision
 * chosen on the validation split, among FOX_BAND_CHOICES and staying out
 * (FOX_BAND_FLAT), by the lower confidence bound of each one's validation
 * net Sharpe: the Sharpe minus policy.band_se of its standard errors, 0
 * for staying out. So
 * the policy trades only where trading it beat doing nothing on bars it
 * was not trained on by more than that figure's own noise, and with the
 * margin that served best there: the margin comes from how good the
 * policy's estimates proved, not from a number fixed beforehand. Ties go
 * to the wider band. The chosen band goes into the current member's band
 * and its validation figures into val.
 */
int
fox__engine_choose_band(fox_engine *e, fox_eval_result *val)
{
    static const float choices[FOX_BAND_CHOICES_N] = FOX_BAND_CHOICES;
    walk_spec specs[FOX_BAND_CHOICES_N];
    fox_eval_result res[FOX_BAND_CHOICES_N];
    for (int k = 0; k < FOX_BAND_CHOICES_N; k++)
        specs[k] = (walk_spec){FOX_SPLIT_VALIDATION, choices[k]};
    int rv = evaluate_k(e, specs, FOX_BAND_CHOICES_N, FOX_POLICY_GREEDY, e->trend_k, res);
    if (rv != FOX_OK)
        return rv;
    double best = 0.0; /* staying out: Sharpe 0, SE 0 */
    e->m->band = FOX_BAND_FLAT;
    memset(val, 0, sizeof *val);
    val->bars = res[0].bars;
    val->bars_per_year = res[0].bars_per_year;
    for (int k = FOX_BAND_CHOICES_N - 1; k >= 0; k--) {
        double lcb = res[k].sharpe - e->cfg.band_se * res[k].sharpe_se;
        if (lcb > best) {
            best = lcb;
            e->m->band = choices[k];
            *val = res[k];
        }
    }
    return FOX_OK;
}

int
fox_engine_evaluate(fox_engine *e, fox_split split, fox_policy policy, fox_eval_result *out)
{
    return fox_engine_evaluate_splits(e, &split, 1, policy, out);
}

int
fox__engine_baselines(fox_engine *e)
{
    fox_fold_report *fr = &e->m->rep;
    static const int k_list[FOX_TREND_K_COUNT] = FOX_TREND_K_LIST;
    const fox_split val = FOX_SPLIT_VALIDATION, test = FOX_SPLIT_TEST;
    int rv = fox__engine_ret_bufs(e, e->seg.test_end - e->seg.test_begin);
    if (rv != FOX_OK)
        return rv;
    /*
     * The trend rule's lookback: the best validation net Sharpe of the few
     * tried, where there are validation bars enough to judge them on.
     */
    e->trend_k = FOX_TREND_K_FIXED;
    fr->trend_k_tried = 0;
    if (e->seg.val_end - e->seg.val_begin >= FOX_TREND_VAL_MIN_BARS) {
        double best = -INFINITY;
        for (int i = 0; i < FOX_TREND_K_COUNT; i++) {
            fox_eval_result r;
            walk_spec spec = {val, 0.0f};
            if ((rv = evaluate_k(e, &spec, 1, FOX_POLICY_TREND, k_list[i], &r)) != FOX_OK)
                return rv;
            if (r.sharpe > best) {
                best = r.sharpe;
                e->trend_k = k_list[i];
            }
        }
        fr->trend_k_tried = FOX_TREND_K_COUNT;
    }
    fr->trend_k = e->trend_k;
    fr->has_oracle = e->series.expected_return != NULL;
    fr->has_rule = e->series.rule_position != NULL;
    snprintf(fr->rule_name, sizeof fr->rule_name, "%s", e->series.rule_name);
    for (int p = FOX_POLICY_BUY_HOLD; p < FOX_POLICY_COUNT; p++) {
        if ((p == FOX_POLICY_ORACLE && !fr->has_oracle) || (p == FOX_POLICY_RULE && !fr->has_rule))
            continue;
        walk_spec spec = {test, 0.0f};
        if ((rv = evaluate_k(e, &spec, 1, (fox_policy)p, e->trend_k, &fr->test_policy[p])) != FOX_OK)
            return rv;
    }
    return FOX_OK;
}

/* Replace *buf by a zeroed array of bars floats. */
static int
ret_buf(fox_engine *e, float **buf, int bars)
{
    free(*buf);
    if (!(*buf = calloc((size_t)bars, sizeof(float))))
        return fox__engine_fail(e, FOX_ENOMEM, "per-bar returns of %d test bars", bars);
    return FOX_OK;
}

int
fox__engine_ret_bufs(fox_engine *e, int bars)
{
    if (bars <= e->ret_cap)
        return FOX_OK;
    /* Until every buffer has its bars, none is taken to have them. */
    e->ret_cap = 0;
    int rv = FOX_OK;
    for (int p = 0; p < FOX_POLICY_COUNT && rv == FOX_OK; p++)
        if (p != FOX_POLICY_GREEDY)
            rv = ret_buf(e, &e->test_ret[p], bars);
    for (int k = 0; k < e->cfg.members && rv == FOX_OK; k++)
        if ((rv = ret_buf(e, &e->members[k].greedy_ret, bars)) == FOX_OK)
            rv = ret_buf(e, &e->members[k].chosen_ret, bars);
    if (rv == FOX_OK && (rv = ret_buf(e, &e->ensemble.greedy_ret, bars)) == FOX_OK)
        rv = ret_buf(e, &e->ensemble.chosen_ret, bars);
    if (rv == FOX_OK)
        e->ret_cap = bars;
    return rv;
}

/* The annualized net Sharpe of sums over n bars (as sharpe()), for the bootstrap's draws. */
static double
paired_diff(double sa, double sa2, double sb, double sb2, int n, double P)
{
    return sharpe(sa, sa2, n, P) - sharpe(sb, sb2, n, P);
}

/*
 * The paired comparison of n per-bar returns a (the policy) and b (a
 * baseline) on the same bars: the difference of their annualized Sharpe
 * ratios, and its standard error from a circular block bootstrap
 * (Politis–Romano) with blocks of about n^(1/3) bars, so that fat tails,
 * serial correlation and the pairing itself are all in it, where the
 * textbook formulas for a Sharpe difference assume normal, independent
 * returns. The draws are seeded, so a report is reproducible.
 */
fox_paired
fox__paired_sharpe(const float *a, const float *b, int n, double P, uint64_t seed)
{
    fox_paired out = {0.0, 0.0, n};
    if (n < 2)
        return out;
    double sa = 0, sa2 = 0, sb = 0, sb2 = 0;
    for (int i = 0; i < n; i++) {
        sa += a[i];
        sa2 += (double)a[i] * a[i];
        sb += b[i];
        sb2 += (double)b[i] * b[i];
    }
    out.diff = paired_diff(sa, sa2, sb, sb2, n, P);
    int block = (int)ceil(cbrt((double)n));
    fox_rng rng;
    fox_rng_seed(&rng, seed);
    double mean = 0.0, m2 = 0.0;
    for (int r = 0; r < FOX_PAIRED_REPLICATES; r++) {
        sa = sa2 = sb = sb2 = 0.0;
        for (int drawn = 0; drawn < n;) {
            int i = (int)fox_rng_below(&rng, (uint32_t)n);
            for (int k = 0; k < block && drawn < n; k++, drawn++, i = i + 1 == n ? 0 : i + 1) {
                sa += a[i];
                sa2 += (double)a[i] * a[i];
                sb += b[i];
                sb2 += (double)b[i] * b[i];
            }
        }
        double d = paired_diff(sa, sa2, sb, sb2, n, P), delta = d - mean;
        mean += delta / (r + 1);
        m2 += delta * (d - mean);
    }
    out.se = sqrt(m2 / (FOX_PAIRED_REPLICATES - 1));
    return out;
}

void
fox__engine_compare(fox_engine *e)
{
    fox_fold_report *fr = &e->m->rep;
    memset(fr->vs, 0, sizeof fr->vs);
    if (!e->m->chosen_ret)
        return;
    int n = fr->test_at_best.bars;
    for (int p = FOX_POLICY_BUY_HOLD; p < FOX_POLICY_COUNT; p++) {
        if ((p == FOX_POLICY_ORACLE && !fr->has_oracle) || (p == FOX_POLICY_RULE && !fr->has_rule))
            continue;
        if (fr->test_policy[p].bars != n || n > e->ret_cap)
            continue;
        fr->vs[p] = fox__paired_sharpe(e->m->chosen_ret, e->test_ret[p], n,
                                       e->series.bars_per_year,
                                       e->cfg.data_seed ^ (0xb007ULL + 131ULL * (uint64_t)e->fold +
                                                           (uint64_t)p));
    }
}
