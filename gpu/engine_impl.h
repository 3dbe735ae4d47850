/*
 * engine_impl.h — the engine struct, shared by engine.c, evaluate.c and
 * checkpoint.c. Nothing outside gpu/ includes it.
 */
#ifndef FOX_ENGINE_IMPL_H
#define FOX_ENGINE_IMPL_H

#include <stdarg.h>
#include <stdio.h>

#include "common/clock.h"
#include "gpu/backend.h"
#include "gpu/data.h"
#include "gpu/engine.h"
#include "gpu/lookahead.h"
#include "gpu/model.h"

/*
 * One member of the population (engine.members): its backend and what its
 * own walk-forward keeps. The engine's calls act on the member e->m points
 * to; engine.c moves it from member to member, so that evaluation, epoch
 * selection and checkpoints are written once for one member.
 */
typedef struct fox_member {
    fox_config cfg; /* the engine's, with this member's own values (fox_config_member) */
    fox_backend *be;
    fox_fold_report rep; /* its fold report: the fold's baselines and its own walk */
    fox_halt_info halt;  /* reason FOX_HALT_NONE while it trains */
    float band;          /* its greedy policy's no-trade band now (cost multiples) */
    /* Epoch selection: the last select_window validation Sharpes (a ring) and the test sum. */
    double sel_val[FOX_SELECT_WINDOW_MAX];
    double test_sharpe_sum;
    fox_step_stats last; /* the epoch report's `last`: losses of the last chunk that trained */
    double epoch_loss_sum;
    int64_t epoch_loss_n;
    int64_t fold_step; /* full steps of the fold, as its backend last reported them */
    fox_member_epoch epoch; /* its part of the last epoch report */
    /*
     * Per-bar net returns of its last greedy test walk (the epoch just
     * evaluated) and of its chosen epoch's, for the paired comparisons;
     * the engine's ret_cap bars each.
     */
    float *greedy_ret, *chosen_ret;
    fox_lookahead *ahead; /* its greedy walks' predicted bars and their Q */
} fox_member;

struct fox_engine {
    fox_config cfg; /* resolved copy */
    fox_model_layout lay;
    const fox_backend_ops *ops;
    fox_member *members; /* cfg.members of them */
    /*
     * policy.members = ensemble: the members' decision together, walked as
     * a member of its own (no backend: its Q is the mean of the training
     * members', fox__engine_q_finish), whose walk the fold's policy is.
     */
    fox_member ensemble;
    float *q_scratch;    /* one member's Q of a forward pass, for the ensemble's mean */
    fox_member *m;       /* the member the calls below act on (or &ensemble) */
    /*
     * The members' shared state, where their backend keeps one (fox_backend_env.shared): set by
     * member 0's create when the members train as one population.
     */
    void *backend_shared;
    fox_series series;
    fox_features feat;
    int data_loaded;
    int fold; /* -1 before begin_fold */
    fox_fold seg;
    double epoch_t0; /* monotonic seconds at the epoch's start */
    int64_t epoch_step0;
    int64_t total_steps;
    uint64_t fingerprint;
    uint64_t fingerprint_before_grid; /* checkpoints of it load too (layout.h) */
    /* Why the fold stopped (fewer than engine.quorum members left): the last member's halt. */
    fox_halt_info halt;
    /*
     * A fault armed between folds (fox_engine_inject_fault's at_next_fold):
     * the backend counts train steps from the fold's reset, so it is armed
     * there, once the counter is 0. slot -1: none waiting.
     */
    int next_fault_slot, next_fault_kind, next_fault_member;
    int64_t next_fault_step;
    int call_rows;          /* most rows of one forward pass: max(batch, envs) */
    fox_engine_times times; /* since creation; times.startup runs from create to load_data's end */
    fox_engine_times fold_times0; /* times at the fold's begin_fold, for the fold report */
    double created_at, fold_t0;   /* monotonic seconds */
    int trend_k;            /* the trend rule's lookback, chosen when the fold begins */
    int policy_loaded;      /* load_policy set the segments: a backtest, not a fold */
    /* Per-bar net returns of each baseline's test walk ([GREEDY] unused); ret_cap bars each. */
    float *test_ret[FOX_POLICY_COUNT];
    int ret_cap;
    fox_eval_bar_fn bar_hook; /* fox_engine_set_eval_hook: per-bar equity of evaluations */
    void *bar_arg;
    char err[512];
};

/*
 * Evaluate the baselines on the current test split into e->rep.test_policy
 * (and choose the trend rule's lookback on the validation split): a fold's
 * when it begins, a backtest's bars after load_policy.
 */
int fox__engine_baselines(fox_engine *e);

/*
 * Fold the epoch just evaluated into the fold's selection (train.select)
 * and its record of the last and mean test figures. end_epoch calls it;
 * tests call it with made-up reports to check the rule.
 */
void fox__engine_select_epoch(fox_engine *e, const fox_epoch_report *rep);

/*
 * Standard error of an annualized Sharpe sr from the raw sums of the first
 * four powers of n per-bar returns, P bars a year (evaluate.c says which form).
 */
double fox__sharpe_se(double sr, double s1, double s2, double s3, double s4, int n, double P);

/* Size the per-bar return buffers for a test split of bars bars (kept when large enough). */
int fox__engine_ret_bufs(fox_engine *e, int bars);

/*
 * The paired comparisons of the chosen epoch's test walk (chosen_ret)
 * against every baseline's into e->rep.vs: when an epoch is chosen and
 * when a backtest has walked.
 */
void fox__engine_compare(fox_engine *e);

/*
 * Expected Q of host states [B × S] for member m, or the ensemble's mean, in
 * the halves of a backend's forward pass (backend.h's q_start and q_finish;
 * the ensemble's starts every voter's): each start is followed by one finish
 * with the same B, whatever it returned (evaluate.c).
 */
int fox__engine_q_start(fox_engine *e, const fox_member *m, const float *s, int B);
int fox__engine_q_finish(fox_engine *e, const fox_member *m, int B, float *q);

/* The member whose walk is the fold's policy: the ensemble, or the lead (engine.c). */
fox_member *fox__engine_policy_member(const fox_engine *e);

/*
 * policy.band_rule = validation: choose each of the n members' band on the
 * validation split, their walks side by side, its validation figures into
 * val[i] (evaluate.c).
 */
int fox__engine_choose_bands(fox_engine *e, fox_member *const *ms, int n, fox_eval_result *val);

/*
 * The greedy walks that end an epoch, of the n members ms side by side: each
 * one's validation and test figures into val[i] and test[i]; under
 * policy.band_rule = validation its band is chosen on validation first
 * (evaluate.c).
 */
int fox__engine_evaluate_members(fox_engine *e, fox_member *const *ms, int n,
                                 fox_eval_result *val, fox_eval_result *test);

/* Bootstrap draws behind a paired comparison's standard error. */
#define FOX_PAIRED_REPLICATES 400

/* The paired comparison of n per-bar returns a and b (evaluate.c says how). */
fox_paired fox__paired_sharpe(const float *a, const float *b, int n, double P, uint64_t seed);

/* The fields every backend starts with, of the current member's. */
static inline fox_backend_base *
fox__be(const fox_engine *e)
{
    return (fox_backend_base *)e->m->be;
}

/*
 * Record a failure message in e and return code. Inline here, not in
 * engine.c, so that evaluate.c and checkpoint.c need nothing of engine.c:
 * engine.c calls them, never the reverse.
 */
static inline int fox__engine_fail(fox_engine *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline int
fox__engine_fail(fox_engine *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    return code;
}

#endif
