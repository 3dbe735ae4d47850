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
 * (a value may be one step old, never torn per slot).
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
#include "common/error.h"

typedef struct fox_engine fox_engine;

typedef enum { FOX_SPLIT_VALIDATION = 0, FOX_SPLIT_TEST = 1 } fox_split;

/* Policies evaluate() can run: the trained agent and the baselines it must beat. */
typedef enum {
    FOX_POLICY_GREEDY = 0,   /* argmax of the C51 expected Q per branch */
    FOX_POLICY_BUY_HOLD = 1, /* long 100 % from the first bar */
    FOX_POLICY_FLAT = 2,     /* never trades */
    FOX_POLICY_RANDOM = 3    /* uniform random sub-actions (seeded) */
} fox_policy;

typedef struct fox_step_stats {
    int64_t step;      /* train steps done in this fold */
    int64_t env_steps; /* environment transitions collected in this fold */
    float loss;        /* total loss of the last train step */
    float loss_c51, loss_iqn, loss_aux;
    float grad_norm; /* global norm before clipping */
    float epsilon;   /* exploration rate in use */
} fox_step_stats;

typedef struct fox_eval_result {
    double sharpe;        /* net, annualized by sqrt(bars_per_year) */
    double sharpe_gross;  /* before costs */
    double max_drawdown;  /* of cumulative net log return, as a positive fraction */
    double turnover;      /* mean |Δposition| per bar */
    double total_return;  /* cumulative net log return */
    double bars_per_year; /* P used for annualizing */
    int bars;
} fox_eval_result;

typedef struct fox_epoch_report {
    int fold, epoch;
    fox_step_stats last; /* stats of the epoch's last train step */
    double mean_loss;    /* over the epoch's train steps */
    fox_eval_result val, test;
    double steps_per_sec; /* train steps (with collection) per wall second */
} fox_epoch_report;

typedef struct fox_fold_report {
    int fold;
    int epochs_done;
    int best_epoch;               /* chosen on validation Sharpe */
    double best_val_sharpe;       /* selection-biased: the maximum over epochs */
    fox_eval_result test_at_best; /* the unbiased figure */
    double final_loss;
    double steps_per_sec;
    double bars_per_year;
    uint64_t flagged; /* sentinel slots set when reported (bit i: slot i) */
    /* A fold the stability system stopped: its FOX_HALT_* (0: none), step and halting slots. */
    int halt_reason;
    int64_t halt_step;
    uint64_t halt_slots; /* bit i: slot i (0–35) */
} fox_fold_report;

typedef struct fox_engine_info {
    const char *backend; /* "cpu" | "cuda" */
    size_t n_params;     /* real (unpadded) parameter count */
    int n_envs, batch;
    int n_bars;           /* length of the loaded series */
    int fold;             /* current fold, -1 before begin_fold */
    int epoch;            /* epochs completed in the fold */
    int64_t step;         /* train steps in the fold */
    int64_t total_steps;  /* train steps since creation */
    uint64_t fingerprint; /* layout fingerprint (ISV slots 115–116) */
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
 * Start fold k (0 ≤ k < n_folds): set the training, validation and test
 * segments, fit feature normalization on the training blocks, empty the
 * replay ring, reset the environments and perform reset_for_fold.
 */
int fox_engine_begin_fold(fox_engine *e, int fold);

/* Fold-boundary reset: Adam state, hard target sync, flags, ISV per its table. */
int fox_engine_reset_for_fold(fox_engine *e);

/*
 * Run n full steps (collect from every environment, then one train step).
 * Every step ends with the fused sentinel check (engine.sentinel) and the
 * halts: FOX_EHALT when the step ended in halt_nan (a slot 0–35 is set) or
 * halt_grad_collapse (a non-finite loss, or a gradient norm ≈ 0 for
 * FOX_HALT_COLLAPSE_STEPS steps); fox_engine_errmsg then says which, naming
 * the slots ("halt_nan: slots 12 h_s2, 33 d_h_s2_post_main"), and
 * fox_engine_halt_info gives the same as data. The fold is stopped: run_steps
 * and train_only refuse with FOX_ESTATE until begin_fold or reset_for_fold.
 */
int fox_engine_run_steps(fox_engine *e, int n, fox_step_stats *stats);

/*
 * Run n train steps without collecting (for benchmarks: the train step alone).
 * FOX_ESTATE until the replay ring holds learning_starts transitions, or while
 * the fold is halted; FOX_EHALT as run_steps.
 */
int fox_engine_train_only(fox_engine *e, int n, fox_step_stats *stats);

typedef enum {
    FOX_HALT_NONE = 0,         /* the fold runs */
    FOX_HALT_NAN = 1,          /* halt_nan: a sentinel slot 0–35 fired */
    FOX_HALT_GRAD_COLLAPSE = 2 /* halt_grad_collapse: non-finite loss or vanished gradient */
} fox_halt_reason;

#define FOX_HALT_MAX_SLOTS 36 /* slots 0–35 (sentinel.h FOX_SENT_HALT_END) */

typedef struct fox_halt_info {
    fox_halt_reason reason;
    int fold;     /* the fold that stopped */
    int64_t step; /* its full-step count when it stopped */
    int n_slots;  /* halt_nan: the slots set, ascending */
    int slots[FOX_HALT_MAX_SLOTS];
    const char *names[FOX_HALT_MAX_SLOTS]; /* their names (static strings) */
    char message[512];                     /* the errmsg of the halt */
} fox_halt_info;

/* Why the current fold stopped; reason FOX_HALT_NONE (and zeros) while it runs. */
void fox_engine_halt_info(const fox_engine *e, fox_halt_info *out);

/* Evaluate a policy with one sequential pass over a split of the current fold. */
int fox_engine_evaluate(fox_engine *e, fox_split split, fox_policy policy, fox_eval_result *out);
/* The same for several splits at once (each at most once, up to FOX_EVAL_SPLITS_MAX): their
 * passes walk side by side and share each forward pass; out[k] is splits[k]'s result,
 * identical to evaluating it alone. */
#define FOX_EVAL_SPLITS_MAX 2
int fox_engine_evaluate_splits(fox_engine *e, const fox_split *splits, int n_splits,
                               fox_policy policy, fox_eval_result *out);

/*
 * Close an epoch: evaluate the greedy policy on validation and test, update
 * the fold's best epoch (chosen on validation) and fill *rep.
 */
int fox_engine_end_epoch(fox_engine *e, fox_epoch_report *rep);

/* The current fold's report so far. */
int fox_engine_fold_report(const fox_engine *e, fox_fold_report *out);

void fox_engine_get_info(const fox_engine *e, fox_engine_info *out);

/* ISV signal bus: pointer to FOX_ISV_TOTAL_DIM floats, readable from any thread. */
const volatile float *fox_engine_isv(const fox_engine *e);

/* Sentinel flags: pointer to FOX_SENTINEL_SLOTS ints, readable from any thread. */
const volatile int *fox_engine_flags(const fox_engine *e);

/* Clear every sentinel flag (the explicit command of the protocol). */
int fox_engine_clear_flags(fox_engine *e);

/*
 * Fault drill on a running engine: write kind (FOX_FAULT_NAN, _INF, _HUGE)
 * into the buffer of sentinel slot or buffer name `buffer` during the train
 * step `after` steps from now (0 = the next one). FOX_ENOENT for an unknown
 * buffer, FOX_ESTATE before load_data or where the backend cannot arm one.
 * Armed before a fold begins, it fires at that fold's train step `after`.
 * The caller decides whether drills are allowed (debug.enable).
 */
int fox_engine_inject_fault(fox_engine *e, const char *buffer, int kind, int64_t after);

/* Copy the parameters (layout of model.h, n_params floats) to host memory. */
int fox_engine_get_params(fox_engine *e, float *out, size_t n);
size_t fox_engine_param_count(const fox_engine *e);

/*
 * Checkpoints: header (magic, format version, fingerprint, sizes, CRC32),
 * params, target params, Adam state, ISV, counters; written to a temp file,
 * fsync'd and renamed. Loading verifies everything before touching the
 * engine: a truncated, corrupt or foreign file leaves the running state as it
 * was.
 */
int fox_engine_checkpoint_save(fox_engine *e, const char *path);
int fox_engine_checkpoint_load(fox_engine *e, const char *path);

#endif
