/*
 * config.h — the engine's configuration: one struct, one key table.
 *
 * Every key has a default (fox_config_default), so an engine created from a
 * default config trains on the embedded synthetic series. Keys are dotted
 * ("train.batch"); the one table in config.c drives defaults, range checks,
 * `--set key=value`, the daemon's JSON config file and `config_get`, so a key
 * exists in exactly one place. Not thread-safe: a config is a value the owner
 * copies.
 */
#ifndef FOX_CONFIG_H
#define FOX_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/member_keys.h"

#define FOX_MAX_BRANCHES 4
/* Members a population (engine.members) may hold. */
#define FOX_MEMBERS_MAX 64
#define FOX_PATH_MAX 1024
/* Text of a member key's list (common/member_keys.h): 64 values of up to 21 characters. */
#define FOX_MEMBER_LIST_MAX (FOX_MEMBERS_MAX * 22)

enum { FOX_BACKEND_AUTO = 0, FOX_BACKEND_CPU = 1, FOX_BACKEND_CUDA = 2 };
enum { FOX_TARGET_MEAN = 0, FOX_TARGET_INDEP = 1 };
enum { FOX_BOUNDS_FIXED = 0, FOX_BOUNDS_ADAPTIVE = 1 };
enum { FOX_ATOM_GRID_STATIC = 0, FOX_ATOM_GRID_MOVING = 1 };
enum { FOX_HALT_RULE_SEEDS = 0, FOX_HALT_RULE_STRICT = 1 };
enum { FOX_FAULT_NONE = 0, FOX_FAULT_NAN = 1, FOX_FAULT_INF = 2, FOX_FAULT_HUGE = 3 };
enum {
    FOX_CUDA_MATH_FP32 = 0,
    FOX_CUDA_MATH_GREEDY_TF32 = 1,
    FOX_CUDA_MATH_TF32 = 2,
    FOX_CUDA_MATH_BF16 = 3
};

/* The weights the greedy evaluation acts with (policy.weights). */
typedef enum {
    FOX_EVAL_WEIGHTS_ONLINE = 0, /* the trained parameters as they stand */
    FOX_EVAL_WEIGHTS_AVERAGE = 1 /* their Polyak average: the target net under train.polyak */
} fox_eval_weights;

/* Whose greedy decision the fold's policy is, in a population (policy.members). */
typedef enum {
    FOX_POLICY_MEMBERS_LEAD = 0,    /* the lead member's: member 0, or the first still training */
    FOX_POLICY_MEMBERS_ENSEMBLE = 1 /* the members' together: the mean of their expected Q */
} fox_policy_members;

typedef struct fox_config {
    /* model: widths of foxnet v1 (docs/design.md, "The model") */
    int state_dim;    /* S, market + portfolio features, zero-padded */
    int h1, h2;       /* trunk GRN widths */
    int head_hidden;  /* value and branch hidden width */
    int n_atoms;      /* C51 atoms */
    float v_min, v_max;
    int n_tau;        /* IQN sampled quantile fractions */
    int n_cos;        /* IQN cosine embedding size */
    int aux_hidden;   /* aux heads' hidden width */
    int n_regimes;    /* regime classes of the aux head */
    int size_levels;  /* branch 1: position sizes (k+1)/n */
    int order_types;  /* branch 2: 1 = market only, 2 = market/limit */
    int urgency_levels; /* branch 3: fraction (k+1)/n of the gap moved */
    int atom_grid;    /* FOX_ATOM_GRID_*: the C51 support fixed or moving with the targets */

    /* train */
    int batch;
    float lr;
    float gamma;
    int n_step;
    int target_sync;  /* hard copy every T train steps */
    float polyak;     /* 0 = hard sync only; else tau of a soft update per step */
    int target_mode;  /* FOX_TARGET_MEAN | FOX_TARGET_INDEP */
    float iqn_lambda, aux_lambda;
    float grad_clip;  /* global-norm clip */
    float adam_b1, adam_b2, adam_eps;
    int bdq_trunk_scale; /* 1: trunk gradient from the C51 heads scaled by 1/(D+1) */
    int steps_per_epoch, epochs;
    int replay_capacity;
    int learning_starts;  /* transitions collected before the first train step */
    int prioritized;
    float per_alpha, per_beta;
    float eps_start, eps_end;
    int eps_decay_steps;
    uint64_t seed;    /* train.seed: member 0's learner streams (members add their index) */
    uint64_t data_seed; /* data.seed: the generated series and the baselines' draws; 0 = seed */
    int folds_mask;   /* bit k set: fold k is trained by a run */
    int select_rule;  /* fox_select_rule (engine.h): how the epoch is chosen on validation */
    int select_window; /* epochs in the smoothed rule's trailing mean */
    int stop_on_halt; /* 1: a halted fold ends the walk; 0: reset and go on to the next fold */
    int pearl_wd;     /* 1: decoupled weight decay at Pearl B's WD_RATE_<group> (adaptive) */
    int pearl_l1;     /* 1: L1 proximal step at Pearl B's L1_LAMBDA on GRN1 W2 (adaptive) */

    /* env */
    int n_envs;       /* 0: the backend's default (1024 CUDA, 64 CPU) */
    int episode_len;
    float fee;        /* per unit of |Δposition|, market orders */
    float half_spread;
    float limit_fee;  /* limit orders pay no spread, this fee */
    float reward_scale;
    float train_cost_mult; /* the training reward charges this × the costs */

    /* policy: the greedy decision */
    float band;       /* no-trade band, in multiples of a change's cost; 0 = plain argmax */
    int band_rule;    /* fox_band_rule: policy.band fixed, or chosen on validation */
    float band_se;    /* validation rule: the standard errors a band must beat staying out by */
    int eval_weights; /* fox_eval_weights: the weights the evaluation acts with */
    int policy_members; /* fox_policy_members: whose decision the fold's policy is */

    /* data */
    char data[FOX_PATH_MAX]; /* a generator ("synthetic", "randomwalk", "garch") or a CSV path */
    int synth_bars;
    int edge_lag;     /* data.edge_lag: the autocorr generator's lag */
    double edge_coef; /* data.edge_coef: the known-edge generators' strength */
    int n_folds;      /* K: the series splits into K+1 blocks */
    double bars_per_year; /* 0: inferred (synthetic: 8760) */
    char price_column[64]; /* the CSV column read as the price; "" = close */

    /* engine */
    int backend;      /* FOX_BACKEND_* */
    int members;      /* engine.members: networks trained side by side (FOX_MEMBERS_MAX) */
    int quorum;       /* engine.quorum: members that must still train for the fold to go on */
    int bounds_mode;  /* FOX_BOUNDS_* */
    int sentinel;     /* 1: run the fused NaN check every step */
    int halt_rule;    /* FOX_HALT_RULE_*: what a set slot 0–35 does */
    int threads;      /* BLAS threads on the CPU backend; 0 = library default */
    int cuda_math;    /* FOX_CUDA_MATH_*: the CUDA backend's cuBLAS products */
    int device;       /* CUDA device index the engine runs on; the CPU backend ignores it */

    /* debug: fault injection (refused unless debug.enable or given explicitly) */
    int debug_enable;
    char fault_buffer[64];
    int fault_step;
    int fault_kind;   /* FOX_FAULT_* */
    int cuda_one_stream; /* the CUDA step on one stream (needs debug.enable) */

    /*
     * The member keys (common/member_keys.h) given as lists, indexed as
     * fox_member_key: n values (engine.members of them once validated) as
     * config text, "0.001,0.0003". n is 0 where the key holds one value for
     * every member; with a list, the key's field above holds member 0's.
     */
    struct fox_member_list {
        int n;
        char text[FOX_MEMBER_LIST_MAX];
    } lists[FOX_MEMBER_KEYS];
} fox_config;

/* Fill *cfg with every key's default. */
void fox_config_default(fox_config *cfg);

/*
 * Set one key from text ("train.batch", "256"). Returns FOX_EINVAL with a
 * message in err (may be NULL) naming the key and the reason: unknown key,
 * unparsable value or value out of range. A member key (common/member_keys.h)
 * also takes a comma list, one value a member ("0.001,0.0003"): each value
 * is checked as the key's one would be; that the list has engine.members
 * values is fox_config_validate's to check, as the keys come in any order.
 */
int fox_config_set(fox_config *cfg, const char *key, const char *value, char *err, size_t errlen);

/* "key=value" form of fox_config_set, as given to --set. */
int fox_config_set_pair(fox_config *cfg, const char *pair, char *err, size_t errlen);

/* Value of one key as text into buf (a member key's list as its list). FOX_ENOENT for an unknown key. */
int fox_config_get(const fox_config *cfg, const char *key, char *buf, size_t len);

typedef enum { FOX_CFG_INT, FOX_CFG_U64, FOX_CFG_FLOAT, FOX_CFG_DOUBLE, FOX_CFG_STR, FOX_CFG_ENUM } fox_cfg_type;

/* Key table iteration, for config_get of everything and for docs. */
int fox_config_key_count(void);
const char *fox_config_key_name(int i);
fox_cfg_type fox_config_key_type(int i);
const char *fox_config_key_help(int i);

/*
 * Cross-key checks (h widths positive, v_min < v_max, every member key's list
 * of engine.members values, ...), of each member's values. FOX_EINVAL + message.
 */
int fox_config_validate(const fox_config *cfg, char *err, size_t errlen);

/*
 * Member k's own config into *out (out != cfg): train.seed + k, or the k-th
 * of train.seed's list, and the k-th value of every other listed key; out
 * holds no lists. cfg must have passed fox_config_validate.
 */
void fox_config_member(const fox_config *cfg, int k, fox_config *out);

/* Branch sizes implied by the config: {3, size_levels, order_types, urgency_levels}. */
int fox_config_branches(const fox_config *cfg, int sizes[FOX_MAX_BRANCHES]);

#endif
