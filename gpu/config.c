/*
 * config.c — the key table behind fox_config: defaults, parsing, range
 * checks and text output for every engine key, in one place.
 *
 * It does not read files: the daemon maps its JSON config onto
 * fox_config_set, so the table is the single source of truth for both.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/config.h"
#include "common/error.h"

/* Enum keys name their choices in one string, index = value. */
static const char *const backend_names[] = {"auto", "cpu", "cuda", NULL};
static const char *const target_names[] = {"mean", "indep", NULL};
static const char *const bounds_names[] = {"fixed", "adaptive", NULL};
static const char *const halt_rule_names[] = {"seeds", "strict", NULL};
static const char *const fault_names[] = {"none", "nan", "inf", "huge", NULL};
static const char *const cuda_math_names[] = {"fp32", "greedy_tf32", "tf32", "bf16", NULL};
static const char *const select_names[] = {"smoothed", "best", "last", NULL};
static const char *const band_rule_names[] = {"fixed", "validation", NULL};
static const char *const eval_weights_names[] = {"online", "average", NULL};
static const char *const policy_members_names[] = {"lead", "ensemble", NULL};
static const char *const atom_grid_names[] = {"static", "moving", NULL};

typedef struct key_def {
    const char *name;
    fox_cfg_type type;
    size_t offset;
    size_t size;     /* string capacity */
    double min, max; /* numeric range, inclusive */
    const char *def; /* default, as text */
    const char *const *choices;
    const char *help;
} key_def;

#define OFF(f) offsetof(fox_config, f), sizeof(((fox_config *)0)->f)
#define INT(k, f, lo, hi, d, h)                                                                    \
    {                                                                                              \
        k, FOX_CFG_INT, OFF(f), lo, hi, d, NULL, h                                                 \
    }
#define FLT(k, f, lo, hi, d, h)                                                                    \
    {                                                                                              \
        k, FOX_CFG_FLOAT, OFF(f), lo, hi, d, NULL, h                                               \
    }
#define DBL(k, f, lo, hi, d, h)                                                                    \
    {                                                                                              \
        k, FOX_CFG_DOUBLE, OFF(f), lo, hi, d, NULL, h                                              \
    }
#define U64(k, f, d, h)                                                                            \
    {                                                                                              \
        k, FOX_CFG_U64, OFF(f), 0, 0, d, NULL, h                                                   \
    }
#define STR(k, f, d, h)                                                                            \
    {                                                                                              \
        k, FOX_CFG_STR, OFF(f), 0, 0, d, NULL, h                                                   \
    }
#define ENM(k, f, c, d, h)                                                                         \
    {                                                                                              \
        k, FOX_CFG_ENUM, OFF(f), 0, 0, d, c, h                                                     \
    }

static const key_def keys[] = {
    INT("model.state_dim", state_dim, 8, 1024, "64",
        "state width S (features + portfolio, zero-padded)"),
    INT("model.h1", h1, 2, 8192, "64", "first GRN width"),
    INT("model.h2", h2, 2, 8192, "64", "second GRN width (h_s2)"),
    INT("model.head_hidden", head_hidden, 2, 8192, "64", "value/branch hidden width"),
    INT("model.n_atoms", n_atoms, 3, 1001, "51", "C51 atoms"),
    FLT("model.v_min", v_min, -1e6, 1e6, "-10", "C51 support minimum"),
    FLT("model.v_max", v_max, -1e6, 1e6, "10", "C51 support maximum"),
    ENM("model.atom_grid", atom_grid, atom_grid_names, "static",
        "the C51 support: static (model.v_min..v_max, clamped by Mech 2) or moving (each branch's "
        "grid starts on its rewards' range and follows its Bellman targets, clamped by Mech 2, and "
        "the IQN's values count in units of Q_ABS_REF: with engine.bounds_mode=adaptive the step "
        "does not depend on env.reward_scale)"),
    INT("model.n_tau", n_tau, 1, 256, "8", "IQN sampled fractions"),
    INT("model.n_cos", n_cos, 1, 1024, "64", "IQN cosine embedding size"),
    INT("model.aux_hidden", aux_hidden, 1, 8192, "64", "aux heads' hidden width"),
    INT("model.n_regimes", n_regimes, 2, 4, "4", "regime classes of the aux head"),
    INT("model.size_levels", size_levels, 1, 16, "1", "position-size sub-actions (k+1)/n"),
    INT("model.order_types", order_types, 1, 2, "1", "1 market only, 2 market/limit"),
    INT("model.urgency_levels", urgency_levels, 1, 16, "1",
        "urgency sub-actions (k+1)/n of the gap"),

    INT("train.batch", batch, 0, 1 << 20, "0",
        "batch size; 0 = backend default (256 CUDA, 64 CPU)"),
    FLT("train.lr", lr, 0, 1, "0.0003", "Adam learning rate"),
    FLT("train.gamma", gamma, 0, 1, "0.9", "discount per bar"),
    INT("train.n_step", n_step, 1, 64, "3", "n-step return length"),
    INT("train.target_sync", target_sync, 1, 1 << 30, "500",
        "hard target copy every T train steps"),
    FLT("train.polyak", polyak, 0, 1, "0", "soft target update rate per step; 0 = hard sync only"),
    ENM("train.target_mode", target_mode, target_names, "mean",
        "C51 target: mean over branches or per branch"),
    FLT("train.iqn_lambda", iqn_lambda, 0, 100, "0.5", "IQN loss weight"),
    FLT("train.aux_lambda", aux_lambda, 0, 100, "0.1", "aux losses' weight"),
    FLT("train.grad_clip", grad_clip, 0, 1e9, "10", "global gradient-norm clip"),
    FLT("train.adam_b1", adam_b1, 0, 1, "0.9", "Adam beta1"),
    FLT("train.adam_b2", adam_b2, 0, 1, "0.999", "Adam beta2"),
    FLT("train.adam_eps", adam_eps, 0, 1, "1e-8", "Adam epsilon"),
    INT("train.bdq_trunk_scale", bdq_trunk_scale, 0, 1, "1",
        "scale trunk gradient of the C51 heads by 1/(D+1)"),
    INT("train.steps_per_epoch", steps_per_epoch, 1, 1 << 30, "100", "train steps per epoch"),
    INT("train.epochs", epochs, 1, 1 << 20, "5", "epochs per fold"),
    INT("train.replay_capacity", replay_capacity, 64, 1 << 28, "1000000",
        "replay ring transitions"),
    INT("train.learning_starts", learning_starts, 0, 1 << 30, "2048",
        "transitions before the first train step"),
    INT("train.prioritized", prioritized, 0, 1, "0", "prioritized replay (priority Σ_d |δ_d|)"),
    FLT("train.per_alpha", per_alpha, 0, 1, "0.6", "PER priority exponent"),
    FLT("train.per_beta", per_beta, 0, 1, "0.4", "PER importance-weight exponent"),
    FLT("train.eps_start", eps_start, 0, 1, "1.0", "initial exploration rate"),
    FLT("train.eps_end", eps_end, 0, 1, "0.05", "final exploration rate"),
    INT("train.eps_decay_steps", eps_decay_steps, 1, 1 << 30, "1500",
        "train steps of the linear ε decay"),
    U64("train.seed", seed, "1",
        "seed of the learner's streams (initialization, exploration, replay sampling); member k "
        "of a population takes train.seed + k, or the k-th of a list"),
    {"train.folds", FOX_CFG_INT, OFF(folds_mask), 1, 255, "0,1,2", NULL,
     "folds a run trains, as a list \"0,1,2\" (stored as a bit mask)"},
    ENM("train.select", select_rule, select_names, "smoothed",
        "epoch choice on validation: smoothed (best trailing mean), best or last"),
    INT("train.select_window", select_window, 1, 64, "3",
        "epochs in the smoothed rule's trailing mean of validation Sharpe"),
    INT("train.stop_on_halt", stop_on_halt, 0, 1, "0",
        "1: a halted fold ends the walk; 0: reset and go on to the next fold"),
    INT("train.pearl_wd", pearl_wd, 0, 1, "0",
        "1: decoupled weight decay in Adam at Pearl B's per-group rate (adaptive bounds)"),
    INT("train.pearl_l1", pearl_l1, 0, 1, "0",
        "1: L1 proximal step at Pearl B's L1 rate on the trunk's input layer (adaptive bounds)"),

    INT("env.n_envs", n_envs, 0, 1 << 20, "0",
        "parallel environments; 0 = backend default (1024 CUDA, 64 CPU)"),
    INT("env.episode_len", episode_len, 8, 1 << 24, "512", "bars per episode"),
    FLT("env.fee", fee, 0, 1, "0.0001", "market order fee per unit |Δposition|"),
    FLT("env.half_spread", half_spread, 0, 1, "0.0001",
        "market order half-spread per unit |Δposition|"),
    FLT("env.limit_fee", limit_fee, 0, 1, "0.00005", "limit order fee per unit |Δposition|"),
    FLT("env.reward_scale", reward_scale, 0, 1e6, "100", "reward multiplier"),
    FLT("env.train_cost_mult", train_cost_mult, 1, 100, "1",
        "the training reward charges this x the costs; evaluation charges them once"),

    FLT("policy.band", band, 0, 1000, "0",
        "no-trade band: the greedy decision switches direction only if the Q gain exceeds "
        "this x the change's cost (0 = plain argmax); policy.band_rule=fixed"),
    ENM("policy.band_rule", band_rule, band_rule_names, "validation",
        "fixed: policy.band; validation: each epoch chooses 0, 2, 8 or 32 x the cost or staying "
        "out, by validation net Sharpe minus policy.band_se x its SE"),
    FLT("policy.band_se", band_se, 0, 10, "0.5",
        "validation rule: the standard errors of its validation net Sharpe by which a band must "
        "beat staying out"),
    ENM("policy.weights", eval_weights, eval_weights_names, "online",
        "the weights evaluation acts with: online, or average (their Polyak average, the target "
        "net; needs train.polyak > 0)"),

    ENM("policy.members", policy_members, policy_members_names, "lead",
        "a population's policy: lead (member 0, or the first still training) or ensemble (greedy "
        "on the mean expected Q of the members still training; needs engine.members >= 2)"),

    STR("data.source", data, "synthetic",
        "a generator (\"synthetic\", \"randomwalk\", \"garch\", \"autocorr\", \"volmom\", "
        "\"hours\") or a CSV path"),
    INT("data.synth_bars", synth_bars, 1000, 1 << 26, "40000", "bars of a generated series"),
    INT("data.edge_lag", edge_lag, 1, 64, "1",
        "autocorr: the lag of the planted autocorrelation (1: the last return predicts)"),
    DBL("data.edge_coef", edge_coef, -0.5, 0.5, "0.1",
        "known-edge generators' strength: autocorr's coefficient, volmom's drift and hours' "
        "window drift in units of the bar's sigma (either sign)"),
    U64("data.seed", data_seed, "0",
        "seed of a generated series and of the baselines' draws; 0 = train.seed"),
    INT("data.folds", n_folds, 1, 8, "3", "K: the series splits into K+1 blocks"),
    DBL("data.bars_per_year", bars_per_year, 0, 1e9, "0", "P for annualizing; 0 = inferred"),
    STR("data.price_column", price_column, "",
        "CSV column read as the price (e.g. one index of several); empty = close"),

    ENM("engine.backend", backend, backend_names, "auto", "auto, cpu or cuda"),
    INT("engine.members", members, 1, FOX_MEMBERS_MAX, "1",
        "networks trained side by side on the same data, member k with train.seed + k: each its "
        "own walk and report, their spread an error bar over seeds; train.seed, train.lr, "
        "train.gamma, train.eps_*, policy.band and env.train_cost_mult take a comma list, one "
        "value a member"),
    INT("engine.quorum", quorum, 1, FOX_MEMBERS_MAX, "1",
        "a fold goes on while at least this many members train; a halted member is frozen"),
    ENM("engine.bounds_mode", bounds_mode, bounds_names, "fixed",
        "fixed (SP3) or adaptive (SP4) bounds"),
    INT("engine.sentinel", sentinel, 0, 1, "1", "run the fused NaN/threshold check every step"),
    ENM("engine.halt_rule", halt_rule, halt_rule_names, "seeds",
        "seeds (a set slot 0-35 only flags; halt_nan on a non-finite loss or gradient norm) or "
        "strict (any set slot 0-35 also halts the fold)"),
    INT("engine.threads", threads, 0, 256, "0",
        "BLAS threads on the CPU backend; 0 = all cores (--once), one per training CPU (serving)"),
    ENM("engine.cuda_math", cuda_math, cuda_math_names, "greedy_tf32",
        "CUDA products: fp32; greedy_tf32 (TF32 where Q only picks greedy actions); tf32; bf16 "
        "(inputs rounded to bfloat16, FP32 sums); the CPU backend computes in FP32 whatever "
        "it says"),
    INT("engine.device", device, 0, 255, "0",
        "CUDA device index (one foxd per GPU: foxd@.service); the CPU backend ignores it"),

    INT("debug.enable", debug_enable, 0, 1, "0", "allow debug features (fault injection)"),
    STR("debug.inject_fault.buffer", fault_buffer, "", "sentinel buffer name to corrupt"),
    INT("debug.inject_fault.step", fault_step, 0, 1 << 30, "0", "train step of the fault"),
    ENM("debug.inject_fault.kind", fault_kind, fault_names, "none", "none, nan, inf or huge"),
    INT("debug.cuda_one_stream", cuda_one_stream, 0, 1, "0",
        "the CUDA step on one stream, to measure what the others buy (needs debug.enable)"),
};

#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

static const key_def *
find_key(const char *name)
{
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

/* "0,2" → bit mask; -1 when malformed. */
static int
parse_folds(const char *v)
{
    int mask = 0;
    const char *p = v;
    while (*p) {
        if (!isdigit((unsigned char)*p))
            return -1;
        int k = *p++ - '0';
        if (isdigit((unsigned char)*p))
            return -1;
        mask |= 1 << k;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return mask ? mask : -1;
}

/* An enum key's refusal names the key and every choice it allows, so the fix needs no manual. */
static int
refuse_choice(const key_def *k, const char *v, char *err, size_t errlen)
{
    char list[256] = "";
    size_t at = 0;
    for (int i = 0; k->choices[i] && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", k->choices[i]);
    return fox_errf(err, errlen, FOX_EINVAL, "%s: '%s' is not one of the allowed choices (%s)",
                    k->name, v, list);
}

static int
set_key(fox_config *cfg, const key_def *k, const char *v, char *err, size_t errlen)
{
    char *end = NULL;
    void *field = (char *)cfg + k->offset;
    errno = 0;
    switch (k->type) {
    case FOX_CFG_INT: {
        long x;
        if (k->offset == offsetof(fox_config, folds_mask)) {
            x = parse_folds(v);
            if (x < 0)
                return fox_errf(err, errlen, FOX_EINVAL,
                                "%s: '%s' is not a list of fold indices like 0,1,2", k->name, v);
        } else {
            x = strtol(v, &end, 10);
            if (end == v || *end || errno)
                return fox_errf(err, errlen, FOX_EINVAL, "%s: '%s' is not an integer", k->name, v);
        }
        if (x < k->min || x > k->max) {
            char range[64];
            snprintf(range, sizeof range, "%.0f..%.0f", k->min, k->max);
            return fox_errf(err, errlen, FOX_EINVAL, "%s: out of range %s", k->name, range);
        }
        *(int *)field = (int)x;
        return FOX_OK;
    }
    case FOX_CFG_U64: {
        if (*v == '-')
            return fox_errf(err, errlen, FOX_EINVAL, "%s: '%s' is not an unsigned integer", k->name,
                            v);
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || errno)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: '%s' is not an unsigned integer", k->name,
                            v);
        *(uint64_t *)field = x;
        return FOX_OK;
    }
    case FOX_CFG_FLOAT:
    case FOX_CFG_DOUBLE: {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x))
            return fox_errf(err, errlen, FOX_EINVAL, "%s: '%s' is not a finite number", k->name, v);
        if (x < k->min || x > k->max) {
            char range[64];
            snprintf(range, sizeof range, "%g..%g", k->min, k->max);
            return fox_errf(err, errlen, FOX_EINVAL, "%s: out of range %s", k->name, range);
        }
        if (k->type == FOX_CFG_FLOAT)
            *(float *)field = (float)x;
        else
            *(double *)field = x;
        return FOX_OK;
    }
    case FOX_CFG_STR:
        if (strlen(v) >= k->size)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: value too long", k->name);
        memcpy(field, v, strlen(v) + 1);
        return FOX_OK;
    case FOX_CFG_ENUM:
        for (int i = 0; k->choices[i]; i++) {
            if (strcmp(k->choices[i], v) == 0) {
                *(int *)field = i;
                return FOX_OK;
            }
        }
        return refuse_choice(k, v, err, errlen);
    }
    return FOX_EINTERNAL;
}

static int get_key(const fox_config *cfg, const key_def *k, char *buf, size_t len);

/*
 * A member key's comma list v into cfg: each value checked as the key's
 * one would be and kept as the key prints it, member 0's also in the
 * field. cfg is unchanged when a value is refused.
 */
static int
set_list(fox_config *cfg, const key_def *k, int li, const char *v, char *err, size_t errlen)
{
    fox_config scratch;
    char text[FOX_MEMBER_LIST_MAX], one[64];
    size_t used = 0;
    int n = 0, rv;
    memset(&scratch, 0, sizeof scratch);
    text[0] = 0;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof one)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: '%s' has an %s value", k->name, v,
                            len ? "overlong" : "empty");
        if (n == FOX_MEMBERS_MAX)
            return fox_errf(err, errlen, FOX_EINVAL,
                            "%s: more than %d values (a list gives one to each of "
                            "engine.members)",
                            k->name, FOX_MEMBERS_MAX);
        memcpy(one, p, len);
        one[len] = 0;
        if ((rv = set_key(&scratch, k, one, err, errlen)) != FOX_OK)
            return rv;
        get_key(&scratch, k, one, sizeof one);
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", n++ ? "," : "", one);
        p += len;
        if (!*p)
            break;
    }
    /* Member 0's value in the field: what reads the key without asking for a member sees it. */
    size_t first = strcspn(text, ",");
    memcpy(one, text, first);
    one[first] = 0;
    set_key(cfg, k, one, NULL, 0);
    cfg->lists[li].n = n;
    memcpy(cfg->lists[li].text, text, used + 1);
    return FOX_OK;
}

void
fox_config_default(fox_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < N_KEYS; i++) {
        int rv = set_key(cfg, &keys[i], keys[i].def, NULL, 0);
        (void)rv; /* defaults are checked by the config unit test */
    }
}

int
fox_config_set(fox_config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
    if (!cfg || !key || !value)
        return FOX_EINVAL;
    const key_def *k = find_key(key);
    if (!k)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: unknown configuration key", key);
    int li = fox_member_key_index(key);
    if (li >= 0 && strchr(value, ','))
        return set_list(cfg, k, li, value, err, errlen);
    int rv = set_key(cfg, k, value, err, errlen);
    if (rv == FOX_OK && li >= 0)
        cfg->lists[li].n = 0; /* one value again: every member's */
    return rv;
}

int
fox_config_set_pair(fox_config *cfg, const char *pair, char *err, size_t errlen)
{
    const char *eq = pair ? strchr(pair, '=') : NULL;
    if (!eq || eq == pair)
        return fox_errf(err, errlen, FOX_EINVAL, "'%s': expected key=value", pair ? pair : "");
    char key[128];
    size_t n = (size_t)(eq - pair);
    if (n >= sizeof key)
        return fox_errf(err, errlen, FOX_EINVAL, "'%s': key too long", pair);
    memcpy(key, pair, n);
    key[n] = 0;
    return fox_config_set(cfg, key, eq + 1, err, errlen);
}

/* The value of k's field as text (a member key's list aside). */
static int
get_key(const fox_config *cfg, const key_def *k, char *buf, size_t len)
{
    const void *field = (const char *)cfg + k->offset;
    switch (k->type) {
    case FOX_CFG_INT:
        if (k->offset == offsetof(fox_config, folds_mask)) {
            size_t used = 0;
            buf[0] = 0;
            for (int f = 0; f < 8; f++)
                if (*(const int *)field & (1 << f))
                    used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%d",
                                             used ? "," : "", f);
            return FOX_OK;
        }
        snprintf(buf, len, "%d", *(const int *)field);
        return FOX_OK;
    case FOX_CFG_U64:
        snprintf(buf, len, "%" PRIu64, *(const uint64_t *)field);
        return FOX_OK;
    case FOX_CFG_FLOAT: {
        /* The shortest text that reads back as the same float: 0.0003, not 0.000300000014. */
        float x = *(const float *)field;
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(buf, len, "%.*g", digits, x);
            if ((float)strtod(buf, NULL) == x) /* as fox_config_set reads it */
                break;
        }
        return FOX_OK;
    }
    case FOX_CFG_DOUBLE:
        snprintf(buf, len, "%.17g", *(const double *)field);
        return FOX_OK;
    case FOX_CFG_STR:
        snprintf(buf, len, "%s", (const char *)field);
        return FOX_OK;
    case FOX_CFG_ENUM:
        snprintf(buf, len, "%s", k->choices[*(const int *)field]);
        return FOX_OK;
    }
    return FOX_EINTERNAL;
}

int
fox_config_get(const fox_config *cfg, const char *key, char *buf, size_t len)
{
    const key_def *k = find_key(key);
    if (!k)
        return FOX_ENOENT;
    int li = fox_member_key_index(key);
    if (li >= 0 && cfg->lists[li].n) {
        snprintf(buf, len, "%s", cfg->lists[li].text);
        return FOX_OK;
    }
    return get_key(cfg, k, buf, len);
}

int
fox_config_key_count(void)
{
    return N_KEYS;
}

const char *
fox_config_key_name(int i)
{
    return i >= 0 && i < N_KEYS ? keys[i].name : NULL;
}

fox_cfg_type
fox_config_key_type(int i)
{
    return keys[i].type;
}

const char *
fox_config_key_help(int i)
{
    return i >= 0 && i < N_KEYS ? keys[i].help : NULL;
}

int
fox_config_branches(const fox_config *cfg, int sizes[FOX_MAX_BRANCHES])
{
    sizes[0] = 3; /* direction: short, flat, long */
    sizes[1] = cfg->size_levels;
    sizes[2] = cfg->order_types;
    sizes[3] = cfg->urgency_levels;
    return FOX_MAX_BRANCHES;
}

/* The i-th of a comma list into buf (the list has it). */
static void
list_item(const char *list, int i, char *buf, size_t len)
{
    for (; i > 0; i--)
        list = strchr(list, ',') + 1;
    size_t n = strcspn(list, ",");
    snprintf(buf, len, "%.*s", (int)n, list);
}

void
fox_config_member(const fox_config *cfg, int k, fox_config *out)
{
    *out = *cfg;
    out->seed = cfg->seed + (uint64_t)k;
    for (int i = 0; i < FOX_MEMBER_KEYS; i++) {
        if (cfg->lists[i].n) {
            char one[64];
            list_item(cfg->lists[i].text, k, one, sizeof one);
            set_key(out, find_key(fox_member_key(i)), one, NULL, 0);
        }
        out->lists[i].n = 0;
    }
}

/* The checks of one member's values (or the engine's, without lists). */
static int
validate_member(const fox_config *cfg, int k, char *err, size_t errlen)
{
    char who[32] = "";
    if (k >= 0)
        snprintf(who, sizeof who, " (member %d)", k);
    if (cfg->eps_end > cfg->eps_start)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "train.eps_end must not exceed train.eps_start%s", who);
    return FOX_OK;
}

int
fox_config_validate(const fox_config *cfg, char *err, size_t errlen)
{
    int listed = 0, rv;
    for (int i = 0; i < FOX_MEMBER_KEYS; i++) {
        if (!cfg->lists[i].n)
            continue;
        listed = 1;
        if (cfg->lists[i].n != cfg->members)
            return fox_errf(err, errlen, FOX_EINVAL,
                            "%s: %d values for engine.members = %d (a list gives each member "
                            "its own value)",
                            fox_member_key(i), cfg->lists[i].n, cfg->members);
    }
    /* The ensemble's decision is the members' together: its walk has one band. */
    if (cfg->policy_members == FOX_POLICY_MEMBERS_ENSEMBLE &&
        cfg->lists[fox_member_key_index("policy.band")].n)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "policy.band: one value under policy.members=ensemble (the ensemble's "
                        "walk acts with one band)");
    if (!listed) {
        if ((rv = validate_member(cfg, -1, err, errlen)) != FOX_OK)
            return rv;
    } else {
        fox_config *m = malloc(sizeof *m);
        if (!m)
            return fox_errf(err, errlen, FOX_ENOMEM, "config: out of memory");
        rv = FOX_OK;
        for (int k = 0; k < cfg->members && rv == FOX_OK; k++) {
            fox_config_member(cfg, k, m);
            rv = validate_member(m, k, err, errlen);
        }
        free(m);
        if (rv != FOX_OK)
            return rv;
    }
    if (!(cfg->v_min < cfg->v_max))
        return fox_errf(err, errlen, FOX_EINVAL, "model.v_min must be below model.v_max");
    if (cfg->state_dim < 4 + 3)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "model.state_dim too small for the portfolio features");
    if (cfg->folds_mask >> cfg->n_folds)
        return fox_errf(err, errlen, FOX_EINVAL, "train.folds names a fold beyond data.folds");
    if (cfg->cuda_one_stream && !cfg->debug_enable)
        return fox_errf(err, errlen, FOX_EINVAL, "debug.cuda_one_stream needs debug.enable=1");
    /* Pearl B produces the rates in adaptive mode only: in fixed mode the switches would do nothing. */
    if ((cfg->pearl_wd || cfg->pearl_l1) && cfg->bounds_mode != FOX_BOUNDS_ADAPTIVE)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "train.pearl_wd and train.pearl_l1 need engine.bounds_mode=adaptive "
                        "(Pearl B produces their rates only there)");
    if (cfg->eval_weights == FOX_EVAL_WEIGHTS_AVERAGE && !(cfg->polyak > 0.0f))
        return fox_errf(err, errlen, FOX_EINVAL,
                        "policy.weights=average needs train.polyak > 0 (the target net is the "
                        "average only under a soft update)");
    if (cfg->policy_members == FOX_POLICY_MEMBERS_ENSEMBLE && cfg->members < 2)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "policy.members=ensemble needs engine.members >= 2 (it has %d)",
                        cfg->members);
    if (cfg->quorum > cfg->members)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "engine.quorum (%d) exceeds engine.members (%d)", cfg->quorum,
                        cfg->members);
    if (cfg->fault_kind != FOX_FAULT_NONE && !cfg->fault_buffer[0])
        return fox_errf(err, errlen, FOX_EINVAL,
                        "debug.inject_fault.kind set without debug.inject_fault.buffer");
    return FOX_OK;
}
