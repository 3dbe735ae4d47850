/*
 * evaluate.c — one sequential pass of a policy over a validation or test
 * segment: the same environment step as training (env.h), greedy actions
 * from the backend's expected Q, and the trading report (annualized Sharpe
 * net and gross, max drawdown, turnover).
 *
 * Sequential on purpose: the portfolio features of bar t depend on the
 * position the policy took at t−1.
 */
#include <math.h>
#include <string.h>

#include "engine_impl.h"
#include "env.h"

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

static int
pick_action(fox_engine *e, fox_policy policy, fox_rng *rng, int t, const fox_env_pos *st,
            int32_t a[4])
{
    const fox_model_layout *lay = &e->lay;
    switch (policy) {
    case FOX_POLICY_BUY_HOLD:
    case FOX_POLICY_FLAT:
        a[0] = policy == FOX_POLICY_BUY_HOLD ? FOX_DIR_LONG : FOX_DIR_FLAT;
        a[1] = lay->branch_size[1] - 1;
        a[2] = FOX_ORDER_MARKET;
        a[3] = lay->branch_size[3] - 1;
        return FOX_OK;
    case FOX_POLICY_RANDOM:
        for (int d = 0; d < lay->n_branches; d++)
            a[d] = (int32_t)fox_rng_below(rng, (uint32_t)lay->branch_size[d]);
        return FOX_OK;
    case FOX_POLICY_GREEDY:
        break;
    }
    float port[3];
    fox_env_portfolio(st, e->series.close[t], port);
    fox__state_build(&e->feat, lay->S, t, port, e->eval_s);
    int rv = e->ops->q_values(e->be, e->eval_s, 1, e->eval_q);
    if (rv != FOX_OK)
        return rv;
    for (int d = 0; d < lay->n_branches; d++) {
        const float *q = e->eval_q + lay->branch_off[d];
        int best = 0;
        for (int k = 1; k < lay->branch_size[d]; k++)
            if (q[k] > q[best])
                best = k;
        a[d] = best;
    }
    return FOX_OK;
}

int
fox_engine_evaluate(fox_engine *e, fox_split split, fox_policy policy, fox_eval_result *out)
{
    if (e->fold < 0)
        return fox__engine_fail(e, FOX_ESTATE, "evaluate before begin_fold");
    int begin = split == FOX_SPLIT_TEST ? e->seg.test_begin : e->seg.val_begin;
    int end = split == FOX_SPLIT_TEST ? e->seg.test_end : e->seg.val_end;
    const fox_config *c = &e->cfg;
    fox_env_params p = {c->fee, c->half_spread, c->limit_fee,
                        1.0f,   c->size_levels, c->urgency_levels};
    fox_env_bars bars = {e->series.open, e->series.high, e->series.low, e->series.close};
    fox_env_pos st = {0.0f, e->series.close[begin], 0};
    fox_rng rng;
    fox_rng_seed(&rng, c->seed ^ (0xe7a1ULL + 31ULL * (uint64_t)e->fold + (uint64_t)split));
    double sum = 0, sum2 = 0, gsum = 0, gsum2 = 0, cum = 0, peak = 0, mdd = 0, turn = 0;
    int n = 0;
    for (int t = begin; t + 1 < end; t++, n++) {
        int32_t a[4];
        int rv = pick_action(e, policy, &rng, t, &st, a);
        if (rv != FOX_OK)
            return fox__engine_fail(e, rv, "evaluate: q_values: %s", fox_strerror(rv));
        fox_env_fill f = fox_env_step(&p, &bars, t, &st, a);
        sum += f.ret_net;
        sum2 += (double)f.ret_net * f.ret_net;
        gsum += f.ret_gross;
        gsum2 += (double)f.ret_gross * f.ret_gross;
        turn += f.dpos;
        cum += f.ret_net;
        if (cum > peak)
            peak = cum;
        if (peak - cum > mdd)
            mdd = peak - cum;
    }
    double P = e->series.bars_per_year;
    memset(out, 0, sizeof *out);
    out->sharpe = sharpe(sum, sum2, n, P);
    out->sharpe_gross = sharpe(gsum, gsum2, n, P);
    out->max_drawdown = 1.0 - exp(-mdd);
    out->turnover = n ? turn / n : 0.0;
    out->total_return = cum;
    out->bars_per_year = P;
    out->bars = n;
    return FOX_OK;
}
