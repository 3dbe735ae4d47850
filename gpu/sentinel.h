/*
 * sentinel.h — the 50 sticky NaN / threshold sentinel slots: which buffer each
 * watches, what makes it fire, and the CPU twin of the fused check kernel.
 *
 * One X-macro list (FOX_SENTINEL_MAP) is the single source of truth for the
 * slot numbering (the seeds' numbering wherever they name a slot): the enum
 * FOX_SENT_<NAME>, the name and buffer lookups, the thresholds, the layout
 * fingerprint and docs/stability.md (checked by tests/test_stability.c) all
 * come from it.
 *
 *   0–23  forward NaN/Inf      24–35  backward NaN/Inf (29, 31 reserved)
 *   36–49 threshold diagnostics (SP3 Mech 5, slot 48 of the Mech 9 close-out,
 *         slot 49 of Mech 10)
 *
 * Flags are ints: a check writes 1, never 0; only reset_for_fold or the
 * explicit clear command clears them. Under engine.halt_rule = seeds a set
 * slot only flags; under strict any of slots 0–35 also halts the fold
 * (fox_halt_decide, the one rule both backends run).
 *
 * It does not own the flag buffer (the engine does) or launch anything; the
 * check functions and the halt decision here are the CPU reference the CUDA
 * fused kernel must agree with. Threading: everything is pure; safe from any
 * thread. C and C++ (nvcc) compatible.
 */
#ifndef FOX_SENTINEL_H
#define FOX_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/model.h"
#include "gpu/rng.h"         /* FOX_HD */
#include "gpu/train_types.h" /* FOX_HALT_* */

#define FOX_SENTINEL_SLOTS 50

/* What makes a slot fire. */
enum {
    FOX_SENT_KIND_NONFINITE = 0, /* any NaN or ±Inf in the buffer */
    FOX_SENT_KIND_THRESHOLD = 1  /* a measure of the buffer ≥ an ISV-derived threshold */
};

/* What a threshold slot measures (FOX_SENT_MEASURE_NONE for NaN/Inf slots). */
enum {
    FOX_SENT_MEASURE_NONE = 0,
    FOX_SENT_MEASURE_MAX_ABS = 1, /* max |x| (a NaN/Inf counts as exceeding) */
    FOX_SENT_MEASURE_SPAN = 2     /* max x − min x (a NaN/Inf counts as exceeding) */
};

/* The ISV slot a threshold scales with, read as eff = max(isv[slot], 1) (SP1 ε pearl). */
enum {
    FOX_SENT_BASE_NONE = 0,
    FOX_SENT_BASE_Q_ABS_REF = 1, /* q_eff = max(ISV[16], 1): Q space */
    FOX_SENT_BASE_H_S2_RMS = 2   /* h_eff = max(ISV[96], 1): activation space; never conflate */
};

/* Where the check runs. */
enum {
    FOX_SENT_SITE_FUSED = 0,  /* the one fused check launch per step (SP2) */
    FOX_SENT_SITE_INLINE = 1, /* inline at a point of the step (12 before Mech 10; 33–35) */
    FOX_SENT_SITE_NONE = 2    /* reserved slot: never checked, never fires */
};

/*
 * Who else may set the flag besides the fused check. A threshold on a
 * clamped buffer can never fire after the clamp (SP4), so the clamp site
 * checks the pre-clamp values against the slot's same threshold, in both
 * modes; a NaN or Inf counts as crossing it.
 */
enum {
    FOX_SENT_ENGAGE_NONE = 0,
    FOX_SENT_ENGAGE_ADAM_MV =
        1,                     /* the Adam kernel's m/v clamp (SP4 bound; NaN/Inf in fixed mode) */
    FOX_SENT_ENGAGE_MECH9 = 2, /* the Adam kernel's Mech 9 weight clamp */
    FOX_SENT_ENGAGE_PRODUCER = 3 /* the buffer's clamp site (Mech 1, 2 or 10), before it clamps */
};

/* Parameter-group masks for slots that watch a slice of params / adam_m / adam_v. */
#define FOX_SENT_G(g)  (1u << (g))
#define FOX_SENT_G_ALL 0u /* the whole buffer */
#define FOX_SENT_G_TRUNK                                                                           \
    (FOX_SENT_G(FOX_GROUP_GRN1) | FOX_SENT_G(FOX_GROUP_GRN2) | FOX_SENT_G(FOX_GROUP_LAYERNORM))
#define FOX_SENT_G_VALUE    FOX_SENT_G(FOX_GROUP_VALUE)
#define FOX_SENT_G_BRANCHES FOX_SENT_G(FOX_GROUP_BRANCHES)
#define FOX_SENT_G_IQN      FOX_SENT_G(FOX_GROUP_IQN)
#define FOX_SENT_G_HEADS                                                                           \
    (FOX_SENT_G(FOX_GROUP_VALUE) | FOX_SENT_G(FOX_GROUP_BRANCHES) |                                \
     FOX_SENT_G(FOX_GROUP_AUX_NEXT_BAR) | FOX_SENT_G(FOX_GROUP_AUX_REGIME))

/*
 * The table. X(index, ENUM, name, "buffer", groups, KIND, MEASURE, BASE,
 * multiplier, power, SITE, ENGAGE, "what it watches"). A threshold is
 * multiplier × eff^power; the slot fires when its measure ≥ threshold.
 */
#define FOX_SENTINEL_MAP(X)                                                                        \
    X(0, STATES, states, "states", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED, NONE,    \
      "batch states s [B x S]")                                                                    \
    X(1, V_LOGITS, v_logits, "v_logits", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED,    \
      NONE, "value-head logits [B x NA]")                                                          \
    X(2, ADV_LOGITS, adv_logits, "adv_logits", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,     \
      FUSED, NONE, "branch advantage logits [B x 12 x NA]")                                        \
    X(3, AUX_LOSS, aux_loss, "aux_loss", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED,    \
      NONE, "aux losses (next-bar MSE, regime CE)")                                                \
    X(4, NEXT_STATES, next_states, "next_states", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,  \
      FUSED, NONE, "batch next states s' [B x S]")                                                 \
    X(5, TARGET_LOGITS, target_logits, "target_logits", FOX_SENT_G_ALL, NONFINITE, NONE, NONE,     \
      0.0f, 0, FUSED, NONE, "target-net logits at s'")                                             \
    X(6, GRADS, grads, "grads", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED, NONE,       \
      "flat gradient buffer after backward, before Adam [n_params]")                               \
    X(7, CURRENT_LP, current_lp, "current_lp", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,     \
      FUSED, NONE, "log p of the chosen actions [B x D x NA]")                                     \
    X(8, PROJECTED, projected, "projected", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED, \
      NONE, "projected C51 target pmf")                                                            \
    X(9, IQN_Q_ONLINE, iqn_q_online, "iqn_q_online", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f,  \
      0, FUSED, NONE, "IQN online quantiles [B x N x 12]")                                         \
    X(10, IQN_Q_TARGET, iqn_q_target, "iqn_q_target", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, \
      0, FUSED, NONE, "IQN target quantiles [B x N x 12]")                                         \
    X(11, TD_ERRORS, td_errors, "td_errors", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,       \
      FUSED, NONE, "per-sample TD errors [B]")                                                     \
    X(12, H_S2, h_s2, "h_s2", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, INLINE, NONE,        \
      "trunk output h_s2 [B x H2], checked inline BEFORE the Mech 10 clamp sanitizes it")          \
    X(13, H_S1, h_s1, "h_s1", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED, NONE,         \
      "first trunk GRN output h_s1 [B x H1]")                                                      \
    X(14, PARAMS, params, "params", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED, NONE,   \
      "flat parameters after Adam [n_params]")                                                     \
    X(15, REWARDS, rewards, "rewards", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED,      \
      NONE, "batch n-step rewards [B]")                                                            \
    X(16, H_S2_ETA2, h_s2_eta2, "h_s2_eta2", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,       \
      FUSED, NONE, "GRN2 stage eta2 = ELU(W2 h_s1 + b2) [B x H2]")                                 \
    X(17, H_S2_ETA1, h_s2_eta1, "h_s2_eta1", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,       \
      FUSED, NONE, "GRN2 stage eta1 = W1 eta2 + b1 [B x H2]")                                      \
    X(18, H_S2_GATE, h_s2_gate, "h_s2_gate", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,       \
      FUSED, NONE, "GRN2 stage gate sigma(Wg eta1 + bg) [B x H2]")                                 \
    X(19, H_S2_GLU, h_s2_glu, "h_s2_glu", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED,   \
      NONE, "GRN2 stage glu g = gate * (Wv eta1 + bv) [B x H2]")                                   \
    X(20, H_S2_LN_IN, h_s2_ln_in, "h_s2_ln_in", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,    \
      FUSED, NONE, "GRN2 LayerNorm input r + g [B x H2]")                                          \
    X(21, TOTAL_LOSS, total_loss, "total_loss", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,    \
      FUSED, NONE, "total loss (scalar)")                                                          \
    X(22, ENV_OBS, env_obs, "env_obs", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED,      \
      NONE, "collection states of every environment [N x S]")                                      \
    X(23, REPLAY_PRIORITIES, replay_priorities, "replay_priorities", FOX_SENT_G_ALL, NONFINITE,    \
      NONE, NONE, 0.0f, 0, FUSED, NONE, "replay priorities (prioritized replay)")                  \
    X(24, D_V_LOGITS, d_v_logits, "d_v_logits", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,    \
      FUSED, NONE, "C51 gradient into the value logits [B x NA]")                                  \
    X(25, D_ADV_LOGITS, d_adv_logits, "d_adv_logits", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, \
      0, FUSED, NONE, "C51 gradient into the advantage logits [B x 12 x NA]")                      \
    X(26, IQN_TRUNK_GRAD, iqn_trunk_grad, "iqn_trunk_grad", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, \
      0.0f, 0, FUSED, NONE,                                                                        \
      "IQN backward GEMM output d_q Wq towards the trunk [B x N x H2] (seed iqn_trunk_m)")         \
    X(27, IQN_D_H_S2, iqn_d_h_s2, "iqn_d_h_s2", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,    \
      FUSED, NONE, "IQN head gradient into h_s2, before it joins d_h_s2 [B x H2]")                 \
    X(28, D_IQN_Q, d_iqn_q, "d_iqn_q", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED,      \
      NONE, "quantile-Huber gradient dL/dq [B x N x 12] (seed d_branch_logits_buf)")               \
    X(29, RESERVED_29, reserved_29, "", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, NONE,      \
      NONE, "reserved (seed: CQL d_value_logits; foxnet has no CQL)")                              \
    X(30, AUX_D_H_S2, aux_d_h_s2, "aux_d_h_s2", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0,    \
      FUSED, NONE, "aux heads' gradient into h_s2 [B x H2]")                                       \
    X(31, RESERVED_31, reserved_31, "", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, NONE,      \
      NONE, "reserved (seed: ensemble d_logits; foxnet has no ensemble)")                          \
    X(32, D_STATES, d_states, "d_states", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, 0, FUSED,   \
      NONE, "gradient reaching the input states [B x S] (seed bn_d_concat_buf)")                   \
    X(33, D_H_S2_POST_MAIN, d_h_s2_post_main, "d_h_s2", FOX_SENT_G_ALL, NONFINITE, NONE, NONE,     \
      0.0f, 0, INLINE, NONE, "d_h_s2 after the value and branch heads' backward")                  \
    X(34, D_H_S2_POST_AUX, d_h_s2_post_aux, "d_h_s2", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, \
      0, INLINE, NONE, "d_h_s2 after the aux heads' gradient is added")                            \
    X(35, D_H_S2_POST_IQN, d_h_s2_post_iqn, "d_h_s2", FOX_SENT_G_ALL, NONFINITE, NONE, NONE, 0.0f, \
      0, INLINE, NONE, "d_h_s2 after the IQN gradient is added, before the trunk backward")        \
    X(36, TRUNK_ADAM_M_MAX, trunk_adam_m_max, "adam_m", FOX_SENT_G_TRUNK, THRESHOLD, MAX_ABS,      \
      Q_ABS_REF, 100.0f, 1, FUSED, ADAM_MV, "Adam m, trunk groups (grn1, grn2, layer_norm)")       \
    X(37, VALUE_ADAM_M_MAX, value_adam_m_max, "adam_m", FOX_SENT_G_VALUE, THRESHOLD, MAX_ABS,      \
      Q_ABS_REF, 100.0f, 1, FUSED, ADAM_MV, "Adam m, value group")                                 \
    X(38, BRANCH_ADAM_M_MAX, branch_adam_m_max, "adam_m", FOX_SENT_G_BRANCHES, THRESHOLD, MAX_ABS, \
      Q_ABS_REF, 100.0f, 1, FUSED, ADAM_MV, "Adam m, branches group")                              \
    X(39, IQN_ADAM_M_MAX, iqn_adam_m_max, "adam_m", FOX_SENT_G_IQN, THRESHOLD, MAX_ABS, Q_ABS_REF, \
      100.0f, 1, FUSED, ADAM_MV, "Adam m, iqn group")                                              \
    X(40, TRUNK_ADAM_V_MAX, trunk_adam_v_max, "adam_v", FOX_SENT_G_TRUNK, THRESHOLD, MAX_ABS,      \
      Q_ABS_REF, 1e6f, 2, FUSED, ADAM_MV, "Adam v, trunk groups (grn1, grn2, layer_norm)")         \
    X(41, VALUE_ADAM_V_MAX, value_adam_v_max, "adam_v", FOX_SENT_G_VALUE, THRESHOLD, MAX_ABS,      \
      Q_ABS_REF, 1e6f, 2, FUSED, ADAM_MV, "Adam v, value group")                                   \
    X(42, BRANCH_ADAM_V_MAX, branch_adam_v_max, "adam_v", FOX_SENT_G_BRANCHES, THRESHOLD, MAX_ABS, \
      Q_ABS_REF, 1e6f, 2, FUSED, ADAM_MV, "Adam v, branches group")                                \
    X(43, IQN_ADAM_V_MAX, iqn_adam_v_max, "adam_v", FOX_SENT_G_IQN, THRESHOLD, MAX_ABS, Q_ABS_REF, \
      1e6f, 2, FUSED, ADAM_MV, "Adam v, iqn group")                                                \
    X(44, TRUNK_WEIGHT_MAX, trunk_weight_max, "params", FOX_SENT_G_TRUNK, THRESHOLD, MAX_ABS,      \
      Q_ABS_REF, 1e3f, 1, FUSED, MECH9, "weights, trunk groups (grn1, grn2, layer_norm)")          \
    X(45, HEADS_WEIGHT_MAX, heads_weight_max, "params", FOX_SENT_G_HEADS, THRESHOLD, MAX_ABS,      \
      Q_ABS_REF, 1e3f, 1, FUSED, MECH9,                                                            \
      "weights, head groups (value, branches, aux_next_bar, "                                      \
      "aux_regime)")                                                                               \
    X(46, TARGET_Q_POST_CLIP, target_q_post_clip, "target_q", FOX_SENT_G_ALL, THRESHOLD, MAX_ABS,  \
      Q_ABS_REF, 95.0f, 1, FUSED, PRODUCER,                                                        \
      "target Q after the Mech 1 clip (9.5 x its 10x bound)")                                      \
    X(47, ATOM_SPAN_MAX, atom_span_max, "atoms", FOX_SENT_G_ALL, THRESHOLD, SPAN, Q_ABS_REF,       \
      190.0f, 1, FUSED, PRODUCER, "C51 atom support span after Mech 2 (9.5 x its 2 x 10x bound)")  \
    X(48, IQN_WEIGHT_MAX, iqn_weight_max, "params", FOX_SENT_G_IQN, THRESHOLD, MAX_ABS, Q_ABS_REF, \
      1e3f, 1, FUSED, MECH9, "weights, iqn group (the seeds' Mech 9 close-out slot)")              \
    X(49, H_S2_MAX_ABS, h_s2_max_abs, "h_s2", FOX_SENT_G_ALL, THRESHOLD, MAX_ABS, H_S2_RMS, 1e3f,  \
      1, FUSED, PRODUCER, "h_s2 after the Mech 10 clamp (10 x its 100x bound)")

enum {
#define X(i, E, n, b, g, k, m, base, mult, pw, site, eng, doc) FOX_SENT_##E = (i),
    FOX_SENTINEL_MAP(X)
#undef X
};

/*
 * The halting slots, [0, FOX_SENT_HALT_END) (reserved slots never fire): under
 * engine.halt_rule = strict any of them set halts the fold through halt_nan.
 */
enum { FOX_SENT_HALT_END = 36 };

/*
 * halt_grad_collapse: the global gradient norm (finite elements) stayed at or
 * below FOX_HALT_COLLAPSE_NORM for FOX_HALT_COLLAPSE_STEPS train steps in a
 * row: every gradient poisoned (the isfinite guard zeroes them all) or the
 * network dead. A healthy foxnet step has a norm many orders above the floor.
 */
#define FOX_HALT_COLLAPSE_NORM  1e-10
#define FOX_HALT_COLLAPSE_STEPS 50

/*
 * The halt a step ends in (FOX_HALT_*), the seeds' rule on both backends.
 * halt_nan when the step trained and its loss or its global gradient norm
 * (Mech 6's, over the finite gradients) is not finite as a float, as the
 * seeds' trainer stopped on "NaN/Inf at step"; or when slot_halts, a halting
 * slot set under the strict rule. Else, for a train step, halt_grad_collapse
 * when *collapse_run, the train steps in a row whose norm stayed at or below
 * FOX_HALT_COLLAPSE_NORM, reaches FOX_HALT_COLLAPSE_STEPS with this one.
 * Under the seeds rule a set slot decides nothing: its buffer's clamps and
 * the isfinite guard sanitize what it flagged, and the step's update goes on.
 */
FOX_HD int
fox_halt_decide(int slot_halts, int trained, float loss, double norm, int *collapse_run)
{
    if (slot_halts || (trained && (!isfinite(loss) || !isfinite((float)norm))))
        return FOX_HALT_NAN;
    if (!trained)
        return FOX_HALT_NONE;
    *collapse_run = norm <= FOX_HALT_COLLAPSE_NORM ? *collapse_run + 1 : 0;
    return *collapse_run >= FOX_HALT_COLLAPSE_STEPS ? FOX_HALT_GRAD_COLLAPSE : FOX_HALT_NONE;
}

/* Families for fox_sentinel_group_slot. */
enum { FOX_SENT_FAMILY_WEIGHT = 0, FOX_SENT_FAMILY_ADAM_M = 1, FOX_SENT_FAMILY_ADAM_V = 2 };

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fox_sentinel_slot_info {
    int index;
    const char *name;   /* unique: "h_s2", "d_h_s2_post_aux"; inject_fault takes these */
    const char *buffer; /* the engine buffer watched: "h_s2", "d_h_s2", "adam_m"; "" if reserved */
    unsigned groups;    /* slice of params/adam_m/adam_v: FOX_SENT_G(group) bits; 0 = all */
    int kind;           /* FOX_SENT_KIND_* */
    int measure;        /* FOX_SENT_MEASURE_* */
    int base;           /* FOX_SENT_BASE_* */
    float mult;         /* threshold = mult × eff^power */
    int power;
    int site;        /* FOX_SENT_SITE_* */
    int engage;      /* FOX_SENT_ENGAGE_* */
    const char *doc; /* what the buffer is */
} fox_sentinel_slot_info;

/* The table entry of slot i, or NULL when i is outside [0, FOX_SENTINEL_SLOTS). */
const fox_sentinel_slot_info *fox_sentinel_info(int i);

/* Name / buffer / description of slot i; NULL out of range. */
const char *fox_sentinel_name(int i);
const char *fox_sentinel_buffer(int i);
const char *fox_sentinel_doc(int i);

/* Index of the slot called name (case-insensitive), or -1. */
int fox_sentinel_index(const char *name);

/* FOX_SENT_KIND_* of slot i, or -1 out of range. */
int fox_sentinel_kind(int i);

/* "nonfinite" / "threshold"; "?" otherwise. */
const char *fox_sentinel_kind_name(int kind);

/*
 * The rule of slot i as one line of text into buf (always NUL-terminated),
 * e.g. "any NaN/Inf" or "max|x| >= 1e+06 x q_eff^2, q_eff = max(ISV[16], 1)".
 * FOX_EINVAL when i is out of range or buf is too small.
 */
int fox_sentinel_rule_text(int i, char *buf, size_t len);

/*
 * The threshold of threshold slot i for the current isv [FOX_ISV_TOTAL_DIM]:
 * mult × eff^power with eff = max(isv[base], 1) (a non-finite ISV value
 * counts as 1). FOX_EINVAL for a NaN/Inf slot or an index out of range.
 */
int fox_sentinel_threshold(int i, const float *isv, float *out);

/* 1 if slot i counts for halt_nan (0–35, reserved slots excluded), else 0. */
int fox_sentinel_is_halt(int i);

/*
 * The threshold slot watching family (FOX_SENT_FAMILY_*) of param group
 * (FOX_GROUP_*): where the Adam kernel writes its engagement flag. -1 when no
 * slot covers that pair (the aux heads' Adam m/v, as in the seeds).
 */
int fox_sentinel_group_slot(int family, int group);

/*
 * The slot a fault injection names: a slot name ("d_h_s2_post_aux"), else a
 * buffer name ("d_h_s2", "params"), which means the first slot watching that
 * buffer. -1 for an unknown name or a reserved slot (it has no buffer).
 */
int fox_sentinel_fault_slot(const char *name);

/* A run of consecutive floats of a params-layout buffer: [offset, offset + len). */
typedef struct fox_param_run {
    size_t offset, len;
} fox_param_run;

/*
 * The runs of a params-layout buffer (params, grads, Adam m/v) that slot
 * watches: consecutive tensors of its param groups merged (the zero padding
 * between them is harmless). Fills runs (room for FOX_P_COUNT) and returns
 * how many.
 */
int fox_sentinel_param_runs(int slot, const fox_model_layout *lay, fox_param_run *runs);

/*
 * The halt_nan slots set in flags [FOX_SENTINEL_SLOTS], as text into buf:
 * "12 h_s2, 33 d_h_s2_post_main" (always NUL-terminated, cut if too long).
 * Returns how many there are; 0 leaves buf "". len 0 only counts them.
 */
int fox_sentinel_halt_text(const volatile int *flags, char *buf, size_t len);

/*
 * The message of a halt (fox_halt_decide's reason) into buf, the same words
 * on both backends: "halt_nan: loss nan, grad norm 3.2; slots 12 h_s2" for a
 * non-finite loss or norm (the slots 0–35 set, if any), "halt_nan: slots 12
 * h_s2, 33 d_h_s2_post_main" for a strict slot halt, "halt_grad_collapse:
 * grad norm <= 1e-10 for 50 train steps". loss and norm are the halting
 * step's, 0 when it did not train. Always NUL-terminated, cut if too long.
 */
void fox_sentinel_halt_message(char *buf, size_t len, int reason, const volatile int *flags,
                               float loss, float norm);

/* The slots set in flags [FOX_SENTINEL_SLOTS] as a mask, bit i for slot i. */
uint64_t fox_sentinel_mask(const volatile int *flags);

/*
 * CPU twins of the fused check kernel. Each returns 1 if the buffer fires,
 * else 0; n = 0 never fires.
 *   nonfinite: any NaN or ±Inf.
 *   threshold: any x with !(|x| < threshold), so NaN and Inf fire too.
 *   span:      a non-finite x, or max x − min x ≥ threshold.
 */
int fox_sentinel_check_nonfinite(const float *buf, size_t n);
int fox_sentinel_check_threshold(const float *buf, size_t n, float threshold);
int fox_sentinel_check_span(const float *buf, size_t n, float threshold);

/*
 * Check buf [n] against slot i's rule (threshold from isv, which may be NULL
 * for a NaN/Inf slot) and set *fired to 0 or 1; a reserved slot never fires.
 * Writing the sticky flag is the caller's job: if (*fired) flags[i] = 1.
 * FOX_EINVAL for a bad index, or a threshold slot without isv.
 */
int fox_sentinel_check(int i, const float *buf, size_t n, const float *isv, int *fired);

#ifdef __cplusplus
}
#endif

#endif
