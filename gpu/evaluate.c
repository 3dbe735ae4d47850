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
 * policy's passes predict bars ahead (lookahead.h). The members of a
 * population walk side by side as well, each on its own backend: every round
 * starts all their forward passes before it waits for any, so that a round
 * costs about one pass's latency, not one per member. The rules that do not
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

/* One walk of an evaluation: the split it walks and the greedy policy's band there. */
typedef struct walk_spec {
    fox_split split;
    float band; /* in multiples of a change's cost (policy.band); FOX_BAND_FLAT never trades */
} walk_spec;

/* One member's part of an evaluation: its walks and where their results go. */
typedef struct walk_job {
    fox_member *m; /* a training member, or the ensemble */
    const walk_spec *specs;
    int n_splits;
    fox_eval_result *out; /* [n_splits] */
} walk_job;

/* A job's walks in progress, and what its lookahead asked of this round. */
typedef struct job_walk {
    eval_walk w[FOX_EVAL_WALKS_MAX];
    float band[FOX_EVAL_WALKS_MAX]; /* in the Q's units: Q learns rewards scaled by reward_scale */
    int hook;                       /* its bars go to the per-bar hook */
    int live[FOX_EVAL_WALKS_MAX], n_live;
    fox_lookahead_seg segs[FOX_EVAL_WALKS_MAX];
    fox_lookahead_pass pass;
} job_walk;

int
fox__engine_q_start(fox_engine *e, const fox_member *m, const float *s, int B)
{
    if (m != &e->ensemble)
        return e->ops->q_start(m->be, s, B);
    /* Every voter starts, whatever another's start returned: each is finished below. */
    int rv = FOX_OK;
    for (int k = 0; k < e->cfg.members; k++) {
        if (e->members[k].halt.reason != FOX_HALT_NONE)
            continue;
        int r = e->ops->q_start(e->members[k].be, s, B);
        rv = rv != FOX_OK ? rv : r;
    }
    return rv;
}

/*
 * The ensemble's Q is the mean of the expected Q of the members still
 * training, each at its weights now: a member that halted keeps its chosen
 * epoch but no longer votes.
 */
int
fox__engine_q_finish(fox_engine *e, const fox_member *m, int B, float *q)
{
    if (m != &e->ensemble)
        return e->ops->q_finish(m->be, q);
    size_t n = (size_t)B * (size_t)e->lay.n_actions;
    int voters = 0, rv = FOX_OK;
    for (int k = 0; k < e->cfg.members; k++) {
        if (e->members[k].halt.reason != FOX_HALT_NONE)
            continue;
        int r = e->ops->q_finish(e->members[k].be, voters ? e->q_scratch : q);
        rv = rv != FOX_OK ? rv : r;
        for (size_t i = 0; voters && i < n; i++)
            q[i] += e->q_scratch[i];
        voters++;
    }
    if (rv != FOX_OK)
        return rv;
    if (voters == 0)
        return FOX_ESTATE;
    for (size_t i = 0; voters > 1 && i < n; i++)
        q[i] /= (float)voters;
    return FOX_OK;
}

/*
 * This round's forward passes, the jobs' side by side: e->call_rows rows at
 * a time, every job's slice started before any is finished, so that the
 * passes of a backend that runs them asynchronously (CUDA) overlap. Each
 * job's rows are cut where a pass of its own would cut them.
 */
static int
run_passes(fox_engine *e, const walk_job *jobs, job_walk *jw, int n_jobs)
{
    int S = e->lay.S, A = e->lay.n_actions, rv = FOX_OK, failed = -1;
    for (int r = 0;; r += e->call_rows) {
        int started = 0;
        for (int j = 0; j < n_jobs; j++) {
            int B = jw[j].pass.rows - r;
            if (B <= 0)
                continue;
            B = B < e->call_rows ? B : e->call_rows;
            int st = fox__engine_q_start(e, jobs[j].m, jw[j].pass.s + (size_t)r * S, B);
            if (st != FOX_OK && rv == FOX_OK)
                rv = st, failed = j;
            started++;
        }
        if (started == 0)
            return FOX_OK;
        for (int j = 0; j < n_jobs; j++) {
            int B = jw[j].pass.rows - r;
            if (B <= 0)
                continue;
            B = B < e->call_rows ? B : e->call_rows;
            int fin = fox__engine_q_finish(e, jobs[j].m, B, jw[j].pass.q + (size_t)r * A);
            if (fin != FOX_OK && rv == FOX_OK)
                rv = fin, failed = j;
        }
        e->times.eval_passes += started;
        if (rv != FOX_OK) {
            const fox_member *m = jobs[failed].m;
            if (m == &e->ensemble)
                return fox__engine_fail(e, rv, "evaluate: the ensemble's forward pass: %s",
                                        fox_strerror(rv));
            return fox__engine_fail(e, rv, "evaluate: member %d's forward pass: %s",
                                    (int)(m - e->members), fox_strerror(rv));
        }
    }
}

/* A policy's start on the jobs' walks: its checks, then each walk at its segment's first bar. */
static int
walks_begin(fox_engine *e, const walk_job *jobs, job_walk *jw, int n_jobs, fox_policy policy)
{
    if (e->fold < 0)
        return fox__engine_fail(e, FOX_ESTATE, "evaluate before begin_fold");
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
    for (int j = 0; j < n_jobs; j++) {
        const walk_job *job = &jobs[j];
        if (job->n_splits < 1 || job->n_splits > FOX_EVAL_WALKS_MAX)
            return fox__engine_fail(e, FOX_EINVAL, "evaluate: %d walks (1 to %d)", job->n_splits,
                                    FOX_EVAL_WALKS_MAX);
        for (int k = 0; k < job->n_splits; k++) {
            const walk_spec *sp = &job->specs[k];
            eval_walk *w = &jw[j].w[k];
            int test = sp->split == FOX_SPLIT_TEST;
            jw[j].band[k] = sp->band >= FOX_BAND_FLAT
                                ? FOX_BAND_FLAT
                                : sp->band * (c->fee + c->half_spread) * c->reward_scale;
            w->t = test ? e->seg.test_begin : e->seg.val_begin;
            w->end = test ? e->seg.test_end : e->seg.val_end;
            w->st = (fox_env_pos){0.0f, e->series.close[w->t], 0};
            float *rets = policy == FOX_POLICY_GREEDY ? job->m->greedy_ret : e->test_ret[policy];
            if (test && rets && w->end - w->t <= e->ret_cap)
                w->rets = rets;
            /* The random baseline's draws are the data's: every member and seed meets the same. */
            fox_rng_seed(&w->rng, c->data_seed ^ (0xe7a1ULL + 31ULL * (uint64_t)e->fold +
                                                  (uint64_t)sp->split));
        }
        /*
         * The per-bar hook sees the fold's policy: the baselines, and the greedy
         * walks of the member whose walk the policy is (or of the ensemble), not
         * every member's.
         */
        jw[j].hook = e->bar_hook &&
                     (policy != FOX_POLICY_GREEDY || job->m == fox__engine_policy_member(e));
        if (policy == FOX_POLICY_GREEDY)
            fox__lookahead_reset(job->m->ahead);
    }
    return FOX_OK;
}

/*
 * The jobs' walks, untimed. Every job's segments walk in lockstep, one
 * decision bar each per round, and the jobs walk side by side: each round
 * the greedy policy's lookaheads say which segments need a forward pass
 * (their predicted bars, lookahead.h, ran out), one pass a job serves them
 * all, the jobs' passes run side by side (run_passes), then every segment
 * takes its bar. Each job's walk is the one it would walk alone: its own
 * lookahead, its own passes cut the same, its own hook calls in order.
 */
static int
walk_jobs(fox_engine *e, const walk_job *jobs, int n_jobs, fox_policy policy, int trend_k)
{
    job_walk *jw = calloc((size_t)n_jobs, sizeof *jw);
    if (!jw)
        return fox__engine_fail(e, FOX_ENOMEM, "evaluate: the walks of %d members", n_jobs);
    int rv = walks_begin(e, jobs, jw, n_jobs, policy);
    const fox_config *c = &e->cfg;
    fox_env_params p = {c->fee, c->half_spread, c->limit_fee,
                        1.0f,   c->size_levels, c->urgency_levels};
    fox_env_bars bars = {e->series.open, e->series.high, e->series.low, e->series.close};
    int greedy = policy == FOX_POLICY_GREEDY;
    while (rv == FOX_OK) {
        int walking = 0;
        for (int j = 0; j < n_jobs && rv == FOX_OK; j++) {
            job_walk *x = &jw[j];
            x->n_live = 0;
            x->pass.rows = 0;
            for (int k = 0; k < jobs[j].n_splits; k++)
                if (x->w[k].t + 1 < x->w[k].end)
                    x->live[x->n_live++] = k;
            walking += x->n_live;
            if (!greedy || x->n_live == 0)
                continue;
            for (int i = 0; i < x->n_live; i++) {
                int k = x->live[i];
                x->segs[i] = (fox_lookahead_seg){k, x->w[k].t, x->w[k].end, &x->w[k].st,
                                                 x->band[k]};
            }
            rv = fox__lookahead_prepare(jobs[j].m->ahead, &e->feat, &p, &bars, x->segs,
                                        x->n_live, &x->pass);
            if (rv != FOX_OK)
                rv = fox__engine_fail(e, rv, "evaluate: lookahead: %s", fox_strerror(rv));
        }
        if (rv != FOX_OK || walking == 0)
            break;
        if (greedy && (rv = run_passes(e, jobs, jw, n_jobs)) != FOX_OK)
            break;
        for (int j = 0; j < n_jobs; j++) {
            job_walk *x = &jw[j];
            int32_t a[FOX_EVAL_WALKS_MAX][4] = {{0}};
            if (greedy) {
                fox__lookahead_consume(jobs[j].m->ahead, &p, x->segs, x->n_live, a);
                e->times.eval_bars += x->n_live;
            }
            for (int i = 0; i < x->n_live; i++) {
                eval_walk *wk = &x->w[x->live[i]];
                if (!greedy)
                    rule_action(e, policy, trend_k, wk, a[i]);
                walk_step(wk, &p, &bars, a[i]);
                if (x->hook)
                    e->bar_hook(e->bar_arg, jobs[j].specs[x->live[i]].split, policy, wk->t,
                                wk->cum);
            }
        }
    }
    for (int j = 0; j < n_jobs && rv == FOX_OK; j++)
        for (int k = 0; k < jobs[j].n_splits; k++)
            walk_report(&jw[j].w[k], e->series.bars_per_year, &jobs[j].out[k]);
    free(jw);
    return rv;
}

/*
 * walk_jobs timed for the run's wall-time split: the fold's baselines count
 * as evaluation as well.
 */
static int
evaluate_k(fox_engine *e, const walk_job *jobs, int n_jobs, fox_policy policy, int trend_k)
{
    double t0 = fox_mono_s();
    int rv = walk_jobs(e, jobs, n_jobs, policy, trend_k);
    e->times.eval += fox_mono_s() - t0;
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
    walk_job job = {e->m, specs, n_splits, out};
    return evaluate_k(e, &job, 1, policy, e->trend_k);
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
 * to the wider band. Each member's walks side by side; the chosen band
 * goes into each member's band and its validation figures into val[i].
 */
int
fox__engine_choose_bands(fox_engine *e, fox_member *const *ms, int n, fox_eval_result *val)
{
    static const float choices[FOX_BAND_CHOICES_N] = FOX_BAND_CHOICES;
    walk_spec specs[FOX_BAND_CHOICES_N];
    for (int k = 0; k < FOX_BAND_CHOICES_N; k++)
        specs[k] = (walk_spec){FOX_SPLIT_VALIDATION, choices[k]};
    walk_job *jobs = calloc((size_t)n, sizeof *jobs);
    fox_eval_result(*res)[FOX_BAND_CHOICES_N] = calloc((size_t)n, sizeof *res);
    int rv = jobs && res ? FOX_OK
                         : fox__engine_fail(e, FOX_ENOMEM, "evaluate: the bands of %d members", n);
    for (int i = 0; i < n && rv == FOX_OK; i++)
        jobs[i] = (walk_job){ms[i], specs, FOX_BAND_CHOICES_N, res[i]};
    if (rv == FOX_OK)
        rv = evaluate_k(e, jobs, n, FOX_POLICY_GREEDY, e->trend_k);
    for (int i = 0; i < n && rv == FOX_OK; i++) {
        double best = 0.0; /* staying out: Sharpe 0, SE 0 */
        ms[i]->band = FOX_BAND_FLAT;
        memset(&val[i], 0, sizeof val[i]);
        val[i].bars = res[i][0].bars;
        val[i].bars_per_year = res[i][0].bars_per_year;
        for (int k = FOX_BAND_CHOICES_N - 1; k >= 0; k--) {
            double lcb = res[i][k].sharpe - e->cfg.band_se * res[i][k].sharpe_se;
            if (lcb > best) {
                best = lcb;
                ms[i]->band = choices[k];
                val[i] = res[i][k];
            }
        }
    }
    free(jobs);
    free(res);
    return rv;
}

int
fox__engine_evaluate_members(fox_engine *e, fox_member *const *ms, int n, fox_eval_result *val,
                             fox_eval_result *test)
{
    if (n == 0)
        return FOX_OK;
    int validation = e->cfg.band_rule == FOX_BAND_RULE_VALIDATION;
    walk_job *jobs = calloc((size_t)n, sizeof *jobs);
    walk_spec(*specs)[2] = calloc((size_t)n, sizeof *specs);
    fox_eval_result(*res)[2] = calloc((size_t)n, sizeof *res);
    int rv = jobs && specs && res
                 ? FOX_OK
                 : fox__engine_fail(e, FOX_ENOMEM, "evaluate: the walks of %d members", n);
    /* The bands first, on validation alone; then the test walks at those bands. */
    if (rv == FOX_OK && validation)
        rv = fox__engine_choose_bands(e, ms, n, val);
    for (int i = 0; i < n && rv == FOX_OK; i++) {
        if (validation) {
            specs[i][0] = (walk_spec){FOX_SPLIT_TEST, ms[i]->band};
            jobs[i] = (walk_job){ms[i], specs[i], 1, &test[i]};
        } else {
            specs[i][0] = (walk_spec){FOX_SPLIT_VALIDATION, ms[i]->band};
            specs[i][1] = (walk_spec){FOX_SPLIT_TEST, ms[i]->band};
            jobs[i] = (walk_job){ms[i], specs[i], 2, res[i]};
        }
    }
    if (rv == FOX_OK)
        rv = evaluate_k(e, jobs, n, FOX_POLICY_GREEDY, e->trend_k);
    for (int i = 0; i < n && rv == FOX_OK && !validation; i++) {
        val[i] = res[i][0];
        test[i] = res[i][1];
    }
    free(jobs);
    free(specs);
    free(res);
    return rv;
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
            walk_job job = {e->m, &spec, 1, &r};
            if ((rv = evaluate_k(e, &job, 1, FOX_POLICY_TREND, k_list[i])) != FOX_OK)
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
        walk_job job = {e->m, &spec, 1, &fr->test_policy[p]};
        if ((rv = evaluate_k(e, &job, 1, (fox_policy)p, e->trend_k)) != FOX_OK)
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
