/*
 * evaluate.c — one sequential pass of a policy over a validation or test
 * segment: the same environment step as training (env.h), greedy actions
 * from the backend's expected Q, and the trading report (annualized Sharpe
 * net and gross, max drawdown, turnover).
 *
 * Sequential on purpose: the portfolio features of bar t depend on the
 * position the policy took at t−1. Several segments (validation and test)
 * walk side by side, so each forward pass serves all of them.
 */
#include <math.h>
#include <string.h>

#include "gpu/engine_impl.h"
#include "gpu/env.h"

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

/* Fixed actions of the baselines, drawn actions of the random policy. */
static void
baseline_action(const fox_model_layout *lay, fox_policy policy, fox_rng *rng, int32_t a[4])
{
    if (policy == FOX_POLICY_RANDOM) {
        for (int d = 0; d < lay->n_branches; d++)
            a[d] = (int32_t)fox_rng_below(rng, (uint32_t)lay->branch_size[d]);
        return;
    }
    a[0] = policy == FOX_POLICY_BUY_HOLD ? FOX_DIR_LONG : FOX_DIR_FLAT;
    a[1] = lay->branch_size[1] - 1;
    a[2] = FOX_ORDER_MARKET;
    a[3] = lay->branch_size[3] - 1;
}

/* The greedy sub-action of every branch from one state's expected Q. */
static void
greedy_action(const fox_model_layout *lay, const float *q_row, int32_t a[4])
{
    for (int d = 0; d < lay->n_branches; d++) {
        const float *q = q_row + lay->branch_off[d];
        int best = 0;
        for (int k = 1; k < lay->branch_size[d]; k++)
            if (q[k] > q[best])
                best = k;
        a[d] = best;
    }
}

/* One segment's pass in progress: where it is, its position, its running sums. */
typedef struct eval_walk {
    int t, end; /* the next decision bar; the segment ends at end */
    fox_env_pos st;
    fox_rng rng;
    double sum, sum2, gsum, gsum2, cum, peak, mdd, turn;
    int n;
} eval_walk;

static void
walk_step(eval_walk *w, const fox_env_params *p, const fox_env_bars *bars, const int32_t a[4])
{
    fox_env_fill f = fox_env_step(p, bars, w->t, &w->st, a);
    w->sum += f.ret_net;
    w->sum2 += (double)f.ret_net * f.ret_net;
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
}

int
fox_engine_evaluate_splits(fox_engine *e, const fox_split *splits, int n_splits, fox_policy policy,
                           fox_eval_result *out)
{
    if (e->fold < 0)
        return fox__engine_fail(e, FOX_ESTATE, "evaluate before begin_fold");
    if (n_splits < 1 || n_splits > FOX_EVAL_SPLITS_MAX)
        return fox__engine_fail(e, FOX_EINVAL, "evaluate: %d splits (1 to %d)", n_splits,
                                FOX_EVAL_SPLITS_MAX);
    const fox_config *c = &e->cfg;
    const fox_model_layout *lay = &e->lay;
    fox_env_params p = {c->fee, c->half_spread, c->limit_fee,
                        1.0f,   c->size_levels, c->urgency_levels};
    fox_env_bars bars = {e->series.open, e->series.high, e->series.low, e->series.close};
    /* The band in the Q's units: Q learns rewards scaled by reward_scale. */
    float band = c->band * (c->fee + c->half_spread) * c->reward_scale;
    eval_walk w[FOX_EVAL_SPLITS_MAX];
    for (int k = 0; k < n_splits; k++) {
        int test = splits[k] == FOX_SPLIT_TEST;
        memset(&w[k], 0, sizeof w[k]);
        w[k].t = test ? e->seg.test_begin : e->seg.val_begin;
        w[k].end = test ? e->seg.test_end : e->seg.val_end;
        w[k].st = (fox_env_pos){0.0f, e->series.close[w[k].t], 0};
        fox_rng_seed(&w[k].rng,
                     c->seed ^ (0xe7a1ULL + 31ULL * (uint64_t)e->fold + (uint64_t)splits[k]));
    }
    /*
     * The segments walk in lockstep, one decision bar each per round, so the
     * greedy policy asks the backend for every live segment's Q in one call:
     * at batch 1 the forward pass costs the same per call whatever its rows.
     */
    for (;;) {
        int live[FOX_EVAL_SPLITS_MAX], n_live = 0;
        for (int k = 0; k < n_splits; k++)
            if (w[k].t + 1 < w[k].end)
                live[n_live++] = k;
        if (n_live == 0)
            break;
        if (policy == FOX_POLICY_GREEDY) {
            for (int i = 0; i < n_live; i++) {
                const eval_walk *wk = &w[live[i]];
                float port[3];
                fox_env_portfolio(&wk->st, e->series.close[wk->t], port);
                fox__state_build(&e->feat, lay->S, wk->t, port, e->eval_s + (size_t)i * lay->S);
            }
            int rv = e->ops->q_values(e->be, e->eval_s, n_live, e->eval_q);
            if (rv != FOX_OK)
                return fox__engine_fail(e, rv, "evaluate: q_values: %s", fox_strerror(rv));
        }
        for (int i = 0; i < n_live; i++) {
            eval_walk *wk = &w[live[i]];
            int32_t a[4] = {0};
            if (policy == FOX_POLICY_GREEDY) {
                const float *q = e->eval_q + (size_t)i * lay->n_actions;
                greedy_action(lay, q, a);
                fox_env_band(&p, wk->st.pos, q + lay->branch_off[FOX_BR_DIRECTION], band, a);
            } else
                baseline_action(lay, policy, &wk->rng, a);
            walk_step(wk, &p, &bars, a);
        }
    }
    for (int k = 0; k < n_splits; k++)
        walk_report(&w[k], e->series.bars_per_year, &out[k]);
    return FOX_OK;
}

int
fox_engine_evaluate(fox_engine *e, fox_split split, fox_policy policy, fox_eval_result *out)
{
    return fox_engine_evaluate_splits(e, &split, 1, policy, out);
}
