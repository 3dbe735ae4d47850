/*
 * engine.h — the one public API of the training engine (backend-neutral).
 *
 * The engine owns the data series, the network, the replay ring and the
 * stability buffers of one training run, on the CPU reference backend or the
 * CUDA backend. It knows nothing of JSON or sockets.
 *
 * Threading: an engine is owned by one thread (the daemon's trainer thread);
 * every call below must come from it, except fox_engine_isv() and
 * fox_engine_flags(), whose memory may be read from any thread at any time
 * (a value may be one step old, never torn per slot). Several engines of one
 * process may each have their own thread: each computes the bits it would
 * compute alone. What they share is made safe to share: on CUDA the
 * device's context (each engine on its own streams and graphs), on the CPU
 * OpenBLAS's thread pool (engine.threads: the last engine created sets it).
 *
 * Errors: functions return FOX_OK or a FOX_E* code; the text of the last
 * failure (naming the file, line, key or slot involved) is kept in
 * fox_engine_errmsg().
 *
 * Life of a run: create → load_data → for each fold: begin_fold →
 * (run_steps … end_epoch) × epochs → next fold. begin_fold performs the
 * fold-boundary reset (reset_for_fold) itself.
 */
#ifndef FOX_ENGINE_H
#define FOX_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/config.h"
#include "gpu/train_types.h"
#include "common/error.h"

typedef struct fox_engine fox_engine;

typedef enum { FOX_SPLIT_VALIDATION = 0, FOX_SPLIT_TEST = 1 } fox_split;

/* Policies evaluate() can run: the trained agent and the baselines it must beat. */
typedef enum {
    FOX_POLICY_GREEDY = 0,   /* argmax of the C51 expected Q per branch */
    FOX_POLICY_BUY_HOLD = 1, /* long 100 % from the first bar */
    FOX_POLICY_FLAT = 2,     /* never trades */
    FOX_POLICY_RANDOM = 3,   /* uniform random sub-actions (seeded) */
    FOX_POLICY_TREND = 4,    /* sign of the trailing k-bar return, k chosen on validation */
    FOX_POLICY_ORACLE = 5,   /* knows the generator's expected next-bar return (generators only) */
    FOX_POLICY_RULE = 6,     /* a known-edge generator's own simple rule (those generators only) */
    FOX_POLICY_COUNT = 7
} fox_policy;

/*
 * The policy against one baseline on the same test bars: the difference of
 * their net Sharpe ratios and its standard error, from a circular block
 * bootstrap of the paired per-bar returns (so that fat tails, serial
 * correlation and the correlation between the two are all in it). The
 * verdict reads it: beat when diff > se, trails when diff < −se,
 * indistinguishable otherwise.
 */
typedef struct fox_paired {
    double diff; /* policy's net Sharpe − the baseline's, annualized */
    double se;   /* its standard error */
    int bars;    /* paired bars; 0 when not measured */
} fox_paired;

/*
 * The trend rule's lookbacks, tried on validation when a fold begins
 * (docs/results.md). Where fewer than FOX_TREND_VAL_MIN_BARS validation bars
 * exist to choose on (a backtest from the first bars of a file), the rule
 * takes FOX_TREND_K_FIXED, the middle one, untried.
 */
#define FOX_TREND_K_COUNT 3
#define FOX_TREND_K_LIST {16, 64, 256}
#define FOX_TREND_K_FIXED 64
#define FOX_TREND_VAL_MIN_BARS 50

/* How the greedy decision's no-trade band is set (policy.band_rule). */
typedef enum {
    FOX_BAND_RULE_FIXED = 0,     /* policy.band */
    FOX_BAND_RULE_VALIDATION = 1 /* chosen on each epoch's validation split (fox_epoch_report) */
} fox_band_rule;

/* How an epoch is chosen on validation (train.select). */
typedef enum {
    FOX_SELECT_SMOOTHED = 0, /* the maximum of a train.select_window-epoch trailing mean */
    FOX_SELECT_BEST = 1,     /* the maximum of one epoch's validation Sharpe */
    FOX_SELECT_LAST = 2      /* the last epoch */
} fox_select_rule;
#define FOX_SELECT_WINDOW_MAX 64

typedef struct fox_eval_result {
    double sharpe;        /* net, annualized by sqrt(bars_per_year) */
    double sharpe_gross;  /* before costs */
    double max_drawdown;  /* of cumulative net log return, as a positive fraction */
    double turnover;      /* mean |Δposition| per bar */
    double total_return;  /* cumulative net log return */
    double bars_per_year; /* P used for annualizing */
    int bars;
    double sharpe_se; /* standard error of sharpe, Mertens' form for non-normal returns */
} fox_eval_result;

/*
 * Called by every evaluation pass after each bar it steps over: the split,
 * the policy, the bar t + 1 at which the step's return is realized, and the
 * pass's cumulative net log return up to it. For equity curves; the hook
 * must not call back into the engine.
 */
typedef void (*fox_eval_bar_fn)(void *arg, fox_split split, fox_policy policy, int bar,
                                double cum_net);

/* One member's part of an epoch report (engine.members). */
typedef struct fox_member_epoch {
    int training;       /* 0: the member halted earlier in the fold; the figures are NaN */
    double val_sharpe;  /* on validation, at its chosen band */
    double test_sharpe; /* on test, at the same band */
    double test_turnover;
    float band;         /* its no-trade band (cost multiples; FOX_BAND_FLAT) */
} fox_member_epoch;

/*
 * An epoch's report: the policy's walk (fox_fold_report.lead) in the
 * fields before `members`, every member's in members[0 .. n_members).
 */
typedef struct fox_epoch_report {
    int fold, epoch;
    fox_step_stats last; /* stats of the epoch's last train step */
    double mean_loss;    /* over the epoch's train steps */
    fox_eval_result val, test;
    double steps_per_sec; /* train steps (with collection) per wall second */
    float band;           /* the no-trade band of val and test (cost multiples; FOX_BAND_FLAT) */
    int lead;             /* the member the fields above show; -1: the ensemble */
    int n_members;
    fox_member_epoch members[FOX_MEMBERS_MAX];
} fox_epoch_report;

/* One member's walk-forward in a fold (engine.members). */
typedef struct fox_member_report {
    uint64_t seed;                /* its train.seed: the engine's + its index, or its listed one */
    int best_epoch;               /* chosen on validation by the fold's rule; -1: none yet */
    double best_val_sharpe;
    fox_eval_result test_at_best; /* its unbiased figure */
    float band;                   /* its no-trade band at best_epoch */
    int halt_reason;              /* FOX_HALT_* when it halted (0: still training) */
    int64_t halt_step;            /* the fold's step count when it did */
    int halt_slot;                /* the lowest sentinel slot set at a halt_nan; -1: none */
    /* Its value of each member key (fox_member_key), as a number; the seed is `seed`. */
    double values[FOX_MEMBER_KEYS];
} fox_member_report;

/*
 * A fold's report. The policy's figures (best_epoch … test_sharpe_mean,
 * test_policy[FOX_POLICY_GREEDY], vs) are the lead member's: member 0,
 * or where it halted the lowest-index member still training, so that with
 * one member the report is that member's; under policy.members = ensemble
 * they are the ensemble's, the greedy decision on the mean expected Q of
 * the members still training, walked and chosen on validation as a
 * member is (lead -1). members[] holds every member's own walk and
 * members_* their spread: one run, an error bar over seeds.
 */
typedef struct fox_fold_report {
    int fold;
    int epochs_done;
    int best_epoch;               /* chosen on validation by select_rule */
    double best_val_sharpe;       /* its validation Sharpe: selection-biased */
    fox_eval_result test_at_best; /* the unbiased figure */
    float band;                   /* the no-trade band at best_epoch (cost multiples) */
    double final_loss;
    double steps_per_sec;
    double bars_per_year;
    uint64_t flagged; /* sentinel slots set when reported (bit i: slot i) */

    /*
     * Every policy on the same test split, indexed by fox_policy:
     * [FOX_POLICY_GREEDY] is test_at_best, the others the baselines,
     * evaluated once when the fold begins (they do not learn).
     */
    fox_eval_result test_policy[FOX_POLICY_COUNT];
    /* The policy at best_epoch against each baseline, paired bar by bar ([GREEDY] unused). */
    fox_paired vs[FOX_POLICY_COUNT];
    int has_oracle;         /* the series knows its expected returns (a generator made it) */
    int has_rule;           /* the series has a simple rule (a known-edge generator made it) */
    char rule_name[64];     /* what that rule does, in words */
    double oracle_fraction; /* test_at_best.sharpe / the oracle's; NaN without an oracle or
                               when the oracle's Sharpe is not positive */
    int trend_k;            /* the trend rule's lookback in bars, chosen on validation */
    int trend_k_tried;      /* how many lookbacks were tried for it (0: FOX_TREND_K_FIXED) */
    int select_rule;        /* fox_select_rule that chose best_epoch */
    int select_window;      /* epochs in its trailing mean (smoothed) */
    double select_score;    /* the rule's validation score at best_epoch */
    fox_eval_result test_at_last; /* the last epoch's test figures */
    double test_sharpe_mean;      /* mean over epochs of the test net Sharpe */

    /* Wall seconds from begin_fold to this report, and the parts of it spent in train steps
     * (with collection) and in evaluation walks; the rest is fold set-up and bookkeeping. */
    double wall_secs, train_secs, eval_secs;
    int64_t eval_bars, eval_passes; /* greedy decision bars walked, the forward passes they took */
    /* A fold the stability system stopped: its FOX_HALT_* (0: none), step and halting slots. */
    int halt_reason;
    int64_t halt_step;
    uint64_t halt_slots; /* bit i: slot i (0–35) */

    int n_members;        /* engine.members */
    int lead;             /* the member whose walk the policy's figures are; -1: the ensemble */
    int members_training; /* members not halted */
    /* Bit i: the members hold member key i (fox_member_key) at different values, the seed aside. */
    unsigned member_keys;
    fox_member_report members[FOX_MEMBERS_MAX];
    /*
     * Over the members with a chosen epoch (members_n of them): the mean of
     * their test net Sharpe at it and its standard error (the sample SD
     * over √n; 0 for one member), and the best and worst member by that
     * figure (-1 while none has chosen).
     */
    int members_n;
    double members_mean, members_se;
    int members_best, members_worst;
} fox_fold_report;

/* Wall seconds the engine has spent since its creation, by kind of work. */
typedef struct fox_engine_times {
    double startup;    /* create and load_data: data, features, the backend and its device */
    double fold_setup; /* begin_fold but its baselines: normalization, ring and envs reset */
    double train;      /* run_steps and train_only (a CUDA fold's first chunk captures graphs) */
    double eval;       /* evaluation walks: the baselines', end_epoch's, every evaluate call */
    double checkpoint; /* checkpoint files written and read */
    int64_t eval_bars, eval_passes; /* greedy decision bars walked, the forward passes they took */
} fox_engine_times;

typedef struct fox_engine_info {
    const char *backend; /* "cpu" | "cuda" */
    size_t n_params;     /* real (unpadded) parameter count */
    int n_envs, batch;
    int n_bars;           /* length of the loaded series */
    double bars_per_year; /* P of the loaded series (inferred, or data.bars_per_year) */
    const char *bars_per_year_from; /* how P was found; NULL before load_data */
    int fold;             /* current fold, -1 before begin_fold */
    int epoch;            /* epochs completed in the fold */
    int64_t step;         /* train steps in the fold */
    int64_t total_steps;  /* train steps since creation */
    uint64_t fingerprint; /* layout fingerprint (ISV slots 115–116) */
    int n_members;        /* engine.members */
    int members_training; /* of them, not halted in the current fold */
    int val_begin, val_end;   /* the current fold's validation bars [begin, end) */
    int test_begin, test_end; /* and its test bars (a backtest: the bars it walks) */
    fox_engine_times times;
} fox_engine_info;

/*
 * Create an engine for cfg (copied). Picks the backend (auto: CUDA when a
 * device is present, else CPU, logging why). On failure *out is NULL and err
 * (may be NULL) says why.
 */
int fox_engine_create(fox_engine **out, const fox_config *cfg, char *err, size_t errlen);

/* Destroy; NULL is safe. */
void fox_engine_destroy(fox_engine *e);

/* Text of the last failure, "" if none. Valid until the next call. */
const char *fox_engine_errmsg(const fox_engine *e);

/* Load the configured series (synthetic or CSV) and compute its features. */
int fox_engine_load_data(fox_engine *e);

/*
 * 1 when source, a value of data.source, names one of the engine's series
 * generators ("synthetic", "randomwalk", "garch"), which read no file; 0 for
 * anything else, a CSV path. Pure: any thread, no engine needed.
 */
int fox_engine_source_is_generator(const char *source);

/*
 * Start fold k (0 ≤ k < n_folds): set the training, validation and test
 * segments, fit feature normalization on the training blocks, empty the
 * replay ring, reset the environments and perform reset_for_fold.
 */
int fox_engine_begin_fold(fox_engine *e, int fold);

/* Fold-boundary reset: Adam state, hard target sync, flags, ISV per its table. */
int fox_engine_reset_for_fold(fox_engine *e);

/*
 * Run n full steps (collect from every environment, then one train step) on
 * every member still training. Every step ends with the fused sentinel
 * check (engine.sentinel) and the halts (fox_halt_decide). A set slot is
 * sticky and shows in the flags; under engine.halt_rule = seeds (the
 * default) it halts nothing, its buffer's clamps and the isfinite guard
 * having sanitized what it flagged, and the step's update goes on. A member
 * halts on halt_nan (its step's loss or global gradient norm is not finite;
 * under halt_rule = strict also any slot 0–35 set) or halt_grad_collapse (a
 * gradient norm ≈ 0 for FOX_HALT_COLLAPSE_STEPS train steps), and from then
 * on is frozen: it trains no more in the fold, keeps its chosen epoch, and
 * fox_engine_member_halt_info says why. The fold goes on while at least
 * engine.quorum members train; when fewer are left the call returns
 * FOX_EHALT, fox_engine_errmsg says which member halted last and why,
 * naming the slots 0–35 set ("halt_nan: loss nan, grad norm 2.1; slots 21
 * total_loss", "member 2: halt_nan: slots 12 h_s2" under strict with
 * several members), and fox_engine_halt_info gives the same as data. The
 * fold is stopped: run_steps and train_only refuse with FOX_ESTATE until
 * begin_fold or reset_for_fold, which bring every member back.
 */
int fox_engine_run_steps(fox_engine *e, int n, fox_step_stats *stats);

/*
 * Run n train steps without collecting (for benchmarks: the train step alone).
 * FOX_ESTATE until the replay ring holds learning_starts transitions, or while
 * the fold is halted; FOX_EHALT as run_steps.
 */
int fox_engine_train_only(fox_engine *e, int n, fox_step_stats *stats);

#define FOX_HALT_MAX_SLOTS 36 /* slots 0–35 (sentinel.h FOX_SENT_HALT_END) */

typedef struct fox_halt_info {
    fox_halt_reason reason;
    int member;   /* the member that halted (the last one, for a fold stopped) */
    int fold;     /* the fold that stopped */
    int64_t step; /* its full-step count when it stopped */
    int n_slots;  /* halt_nan: the slots 0–35 set, ascending (maybe none) */
    int slots[FOX_HALT_MAX_SLOTS];
    const char *names[FOX_HALT_MAX_SLOTS]; /* their names (static strings) */
    char message[512];                     /* the errmsg of the halt */
} fox_halt_info;

/* Why the current fold stopped; reason FOX_HALT_NONE (and zeros) while it runs. */
void fox_engine_halt_info(const fox_engine *e, fox_halt_info *out);

/* Why member k halted in the current fold; reason FOX_HALT_NONE while it trains. FOX_EINVAL
 * for no such member. */
int fox_engine_member_halt_info(const fox_engine *e, int member, fox_halt_info *out);

/* Evaluate a policy with one sequential pass over a split of the current fold. */
int fox_engine_evaluate(fox_engine *e, fox_split split, fox_policy policy, fox_eval_result *out);
/* The same for several splits at once (each at most once, up to FOX_EVAL_SPLITS_MAX): their
 * passes walk side by side and share each forward pass; out[k] is splits[k]'s result,
 * identical to evaluating it alone. */
#define FOX_EVAL_SPLITS_MAX 2

/*
 * The no-trade bands policy.band_rule = validation chooses among on each
 * epoch's validation split, in multiples of a change's cost, and
 * FOX_BAND_FLAT, staying out (a band no Q gain can clear).
 */
#define FOX_BAND_CHOICES   {0.0f, 2.0f, 8.0f, 32.0f}
#define FOX_BAND_CHOICES_N 4
#define FOX_BAND_FLAT      1e30f
/* Walks one evaluation takes side by side: the band choices' on validation, and one more. */
#define FOX_EVAL_WALKS_MAX (FOX_BAND_CHOICES_N + 1)
int fox_engine_evaluate_splits(fox_engine *e, const fox_split *splits, int n_splits,
                               fox_policy policy, fox_eval_result *out);

/* Install (fn NULL: remove) the per-bar hook of every later evaluation pass. */
void fox_engine_set_eval_hook(fox_engine *e, fox_eval_bar_fn fn, void *arg);

/*
 * Close an epoch: evaluate the greedy policy on validation and test, update
 * the fold's best epoch (chosen on validation) and fill *rep.
 */
int fox_engine_end_epoch(fox_engine *e, fox_epoch_report *rep);

/* The current fold's report so far. */
int fox_engine_fold_report(const fox_engine *e, fox_fold_report *out);

void fox_engine_get_info(const fox_engine *e, fox_engine_info *out);

/*
 * The loaded series' bar times in seconds since the epoch, n_bars of them
 * (fox_engine_info), owned by the engine until it is destroyed or loads
 * again; NULL where the series has none (a CSV without a time column) or
 * before load_data. The generators' hourly bars start at a fixed time, 1.7e9
 * seconds. Bar indices (the eval hook's, the splits') index it.
 */
const double *fox_engine_bar_times(const fox_engine *e);

/*
 * ISV signal bus of member 0: pointer to FOX_ISV_TOTAL_DIM floats, readable
 * from any thread; fox_engine_member_isv the same of member k (NULL for no
 * such member, or before load_data).
 */
const volatile float *fox_engine_isv(const fox_engine *e);
const volatile float *fox_engine_member_isv(const fox_engine *e, int member);

/* Sentinel flags of member 0 (of member k): FOX_SENTINEL_SLOTS ints, readable from any thread. */
const volatile int *fox_engine_flags(const fox_engine *e);
const volatile int *fox_engine_member_flags(const fox_engine *e, int member);

/* Clear every member's sentinel flags (the explicit command of the protocol). */
int fox_engine_clear_flags(fox_engine *e);

/*
 * Fault drill on a running engine: write kind (FOX_FAULT_NAN, _INF, _HUGE)
 * into the buffer of sentinel slot or buffer name `buffer` of member
 * `member` (< 0: every member) during the train step `after` steps from now
 * (0 = the next one). With at_next_fold the
 * caller says no train step runs before the next begin_fold or
 * reset_for_fold: the fault then fires at that fold's train step `after`
 * (counted from 0), whatever the last fold ran. One fault at a time: an
 * arming replaces the last. FOX_ENOENT for an unknown buffer, FOX_ESTATE
 * before load_data or where the backend cannot arm one. The caller decides
 * whether drills are allowed (debug.enable).
 */
int fox_engine_inject_fault(fox_engine *e, int member, const char *buffer, int kind,
                            int64_t after, int at_next_fold);

/* Copy member 0's (member k's) parameters (layout of model.h, n_params floats) to host memory. */
int fox_engine_get_params(fox_engine *e, float *out, size_t n);
int fox_engine_member_params(fox_engine *e, int member, float *out, size_t n);
size_t fox_engine_param_count(const fox_engine *e);

/*
 * FNV-1a 64 (common/hash.h) over member k's parameters' bytes, in the
 * layout of get_params: two engines with the same digest hold the same weights bit
 * for bit, which is how a run is compared with another one or with itself
 * after a checkpoint round trip.
 */
int fox_engine_params_digest(fox_engine *e, int member, uint64_t *out);

/*
 * Checkpoints: header (magic, format version, fingerprint, sizes, CRC32),
 * params, target params, Adam state, ISV, counters; written to a temp file,
 * fsync'd and renamed. Loading verifies everything before touching the
 * engine: a truncated, corrupt or foreign file leaves the running state as it
 * was.
 */
int fox_engine_checkpoint_save(fox_engine *e, const char *path);
int fox_engine_checkpoint_load(fox_engine *e, const char *path);

/*
 * Backtest, step 1: take the policy of a checkpoint (its weights and the
 * feature normalization of the fold it was trained on; format 2 or later)
 * and make bars [begin, end) of the loaded series (begin < 0: the first bar
 * with features; end ≤ 0: the last) the test split that evaluate() walks.
 * The bars [val_begin, begin) before them are its validation split, where
 * the trend rule's lookback is chosen as a fold's is; val_begin < 0 takes as
 * many bars before begin as the range has (a fold's validation and test
 * halves are alike), as far back as the first bar with features. A
 * checkpoint of another layout is refused naming both fingerprints, as by
 * checkpoint_load.
 */
int fox_engine_load_policy(fox_engine *e, const char *path, int val_begin, int begin, int end);

/*
 * Backtest, step 2: one greedy pass of the loaded policy over the test split
 * and every baseline on it, by the same code that measures a fold's when it
 * begins, as a fold report: the checkpoint's fold and epoch, the policy's
 * figures in test_at_best, the baselines in test_policy; what a backtest
 * does not measure (validation, selection, loss, speed) is NaN. FOX_ESTATE
 * without load_policy.
 */
int fox_engine_backtest(fox_engine *e, fox_fold_report *out);

#endif
