/*
 * isv.h — the ISV ("internal signal vector") slot table: FOX_ISV_TOTAL_DIM
 * floats that every kernel may read and that the host reads without a sync.
 *
 * This header is the single source of truth for the ISV layout: one X-macro
 * list (FOX_ISV_MAP) gives, for every named slot, its index (the seeds'
 * indices where the seeds name one), its name, its fold-boundary reset rule
 * and a one-line description. The enum FOX_ISV_<NAME>, the name lookups, the
 * reset walk, the layout fingerprint and docs/stability.md (checked by
 * tests/test_stability.c) are all derived from that list. Unnamed slots are
 * reserved: nothing writes them, reset keeps them, and they read 0.
 *
 * It does not produce any value: producers live in the backends (the maths
 * they share is bounds.h), and the buffer itself belongs to the engine
 * (mapped-pinned on CUDA, plain memory on the CPU backend). Nothing here
 * locks; a caller that writes the buffer owns it.
 *
 * Threading: every function is pure or touches only the buffer it is given;
 * all are safe from any thread. C and C++ (nvcc) compatible.
 */
#ifndef FOX_ISV_H
#define FOX_ISV_H

#include <math.h>
#include <stdint.h>

#include "gpu/rng.h" /* FOX_HD: the slot helpers below run in kernels too */

#define FOX_ISV_TOTAL_DIM 171

/* Fold-boundary reset rules (reset_for_fold walks the table; nothing else resets ISV). */
enum {
    FOX_ISV_KEEP = 0, /* untouched: persists across folds */
    FOX_ISV_ZERO = 1, /* set to 0: the Pearl A sentinel, replaced by the first observation */
    FOX_ISV_VALUE = 2 /* set to the table's value (e.g. a neutral 1.0) */
};

/*
 * The table. X(index, NAME, RULE, value, "description"); value matters only
 * for RULE VALUE. Keep it sorted by index. Seed indices that must not move:
 * 16, 21, 96, 115–117, 131–170.
 *
 * SP4 bound block 131–170 (40 slots, contiguous, in this order): target-Q 1,
 * atom position 4 (one per branch), then weight / Adam m / Adam v / weight-
 * decay rate 8 each (one per param group, in FOX_GROUP_* order: grn1, grn2,
 * value, branches, iqn, aux_next_bar, aux_regime, layer_norm), L1 1, h_s2 1,
 * grad clip 1. All reset to the Pearl A zero sentinel.
 */
#define FOX_ISV_MAP(X)                                                                             \
    X(16, Q_ABS_REF, ZERO, 0.0f,                                                                   \
      "EMA of mean |E[Q]| of the online net; Q scale of Mechs 1, 2, 5, 6, 9 (read as max(v,1))")   \
    X(21, Q_DIR_ABS_REF, ZERO, 0.0f,                                                               \
      "EMA of mean |E[Q]| of the direction branch; scale of the backward input guard on "          \
      "d_v_logits/d_adv_logits (1e6 x max(v,1))")                                                  \
    X(96, H_S2_RMS_EMA, VALUE, 1.0f,                                                               \
      "EMA of RMS(h_s2); Mech 10 clamp and slot-49 base, backward guard on d_h_s2; reset to the "  \
      "neutral RMS 1.0 (seed)")                                                                    \
    X(115, FINGERPRINT_LO, KEEP, 0.0f,                                                             \
      "layout fingerprint, low 32 bits stored bit-exactly (fox_isv_store_fingerprint)")            \
    X(116, FINGERPRINT_HI, KEEP, 0.0f,                                                             \
      "layout fingerprint, high 32 bits stored bit-exactly (fox_isv_store_fingerprint)")           \
    X(117, AUX_LABEL_SCALE_EMA, ZERO, 0.0f,                                                        \
      "EMA of mean |next-bar return label|; the aux regression label is divided by it")            \
    X(118, GRAD_NORM_EMA, ZERO, 0.0f,                                                              \
      "Mech 6: EMA of the global gradient norm before clipping (the adaptive clip follows it)")    \
    X(119, GRAD_NORM_SLOW_EMA, KEEP, 0.0f,                                                         \
      "Mech 6 anchor: slow EMA (alpha 1e-3) of the gradient norm; persists across folds, so a "    \
      "new fold's clip cap starts from the gradient scale seen so far")                            \
    X(120, GRAD_CLIP, ZERO, 0.0f,                                                                  \
      "Mech 6 output: the global-norm clip threshold applied at the last step (after its cap)")    \
    X(121, ATOM_LO_DIRECTION, ZERO, 0.0f, "Mech 2: atom grid, branch 0, low end")                  \
    X(122, ATOM_HI_DIRECTION, ZERO, 0.0f, "Mech 2: atom grid, branch 0, high end")                 \
    X(123, ATOM_LO_SIZE, ZERO, 0.0f, "Mech 2: atom grid, branch 1, low end")                       \
    X(124, ATOM_HI_SIZE, ZERO, 0.0f, "Mech 2: atom grid, branch 1, high end")                      \
    X(125, ATOM_LO_ORDER, ZERO, 0.0f, "Mech 2: atom grid, branch 2, low end")                      \
    X(126, ATOM_HI_ORDER, ZERO, 0.0f, "Mech 2: atom grid, branch 2, high end")                     \
    X(127, ATOM_LO_URGENCY, ZERO, 0.0f, "Mech 2: atom grid, branch 3, low end")                    \
    X(128, ATOM_HI_URGENCY, ZERO, 0.0f, "Mech 2: atom grid, branch 3, high end")                   \
    X(131, TARGET_Q_BOUND, ZERO, 0.0f, "SP4 Mech 1: |target Q| bound (p99 of |target Q|)")         \
    X(132, ATOM_POS_BOUND_DIRECTION, ZERO, 0.0f, "SP4 Mech 2: atom position bound, branch 0")      \
    X(133, ATOM_POS_BOUND_SIZE, ZERO, 0.0f, "SP4 Mech 2: atom position bound, branch 1")           \
    X(134, ATOM_POS_BOUND_ORDER, ZERO, 0.0f, "SP4 Mech 2: atom position bound, branch 2")          \
    X(135, ATOM_POS_BOUND_URGENCY, ZERO, 0.0f, "SP4 Mech 2: atom position bound, branch 3")        \
    X(136, WEIGHT_BOUND_GRN1, ZERO, 0.0f, "SP4 Mech 9: p99 |w|, group grn1")                       \
    X(137, WEIGHT_BOUND_GRN2, ZERO, 0.0f, "SP4 Mech 9: p99 |w|, group grn2")                       \
    X(138, WEIGHT_BOUND_VALUE, ZERO, 0.0f, "SP4 Mech 9: p99 |w|, group value")                     \
    X(139, WEIGHT_BOUND_BRANCHES, ZERO, 0.0f, "SP4 Mech 9: p99 |w|, group branches")               \
    X(140, WEIGHT_BOUND_IQN, ZERO, 0.0f, "SP4 Mech 9: p99 |w|, group iqn")                         \
    X(141, WEIGHT_BOUND_AUX_NEXT_BAR, ZERO, 0.0f, "SP4 Mech 9: p99 |w|, group aux_next_bar")       \
    X(142, WEIGHT_BOUND_AUX_REGIME, ZERO, 0.0f, "SP4 Mech 9: p99 |w|, group aux_regime")           \
    X(143, WEIGHT_BOUND_LAYER_NORM, ZERO, 0.0f, "SP4 Mech 9: p99 |w|, group layer_norm")           \
    X(144, ADAM_M_BOUND_GRN1, ZERO, 0.0f, "SP4: p99 |Adam m|, group grn1")                         \
    X(145, ADAM_M_BOUND_GRN2, ZERO, 0.0f, "SP4: p99 |Adam m|, group grn2")                         \
    X(146, ADAM_M_BOUND_VALUE, ZERO, 0.0f, "SP4: p99 |Adam m|, group value")                       \
    X(147, ADAM_M_BOUND_BRANCHES, ZERO, 0.0f, "SP4: p99 |Adam m|, group branches")                 \
    X(148, ADAM_M_BOUND_IQN, ZERO, 0.0f, "SP4: p99 |Adam m|, group iqn")                           \
    X(149, ADAM_M_BOUND_AUX_NEXT_BAR, ZERO, 0.0f, "SP4: p99 |Adam m|, group aux_next_bar")         \
    X(150, ADAM_M_BOUND_AUX_REGIME, ZERO, 0.0f, "SP4: p99 |Adam m|, group aux_regime")             \
    X(151, ADAM_M_BOUND_LAYER_NORM, ZERO, 0.0f, "SP4: p99 |Adam m|, group layer_norm")             \
    X(152, ADAM_V_BOUND_GRN1, ZERO, 0.0f, "SP4: p99 Adam v, group grn1")                           \
    X(153, ADAM_V_BOUND_GRN2, ZERO, 0.0f, "SP4: p99 Adam v, group grn2")                           \
    X(154, ADAM_V_BOUND_VALUE, ZERO, 0.0f, "SP4: p99 Adam v, group value")                         \
    X(155, ADAM_V_BOUND_BRANCHES, ZERO, 0.0f, "SP4: p99 Adam v, group branches")                   \
    X(156, ADAM_V_BOUND_IQN, ZERO, 0.0f, "SP4: p99 Adam v, group iqn")                             \
    X(157, ADAM_V_BOUND_AUX_NEXT_BAR, ZERO, 0.0f, "SP4: p99 Adam v, group aux_next_bar")           \
    X(158, ADAM_V_BOUND_AUX_REGIME, ZERO, 0.0f, "SP4: p99 Adam v, group aux_regime")               \
    X(159, ADAM_V_BOUND_LAYER_NORM, ZERO, 0.0f, "SP4: p99 Adam v, group layer_norm")               \
    X(160, WD_RATE_GRN1, ZERO, 0.0f, "SP4 Pearl B: weight-decay rate |w.g|/|w|^2, group grn1")     \
    X(161, WD_RATE_GRN2, ZERO, 0.0f, "SP4 Pearl B: weight-decay rate, group grn2")                 \
    X(162, WD_RATE_VALUE, ZERO, 0.0f, "SP4 Pearl B: weight-decay rate, group value")               \
    X(163, WD_RATE_BRANCHES, ZERO, 0.0f, "SP4 Pearl B: weight-decay rate, group branches")         \
    X(164, WD_RATE_IQN, ZERO, 0.0f, "SP4 Pearl B: weight-decay rate, group iqn")                   \
    X(165, WD_RATE_AUX_NEXT_BAR, ZERO, 0.0f, "SP4 Pearl B: weight-decay rate, group aux_next_bar") \
    X(166, WD_RATE_AUX_REGIME, ZERO, 0.0f, "SP4 Pearl B: weight-decay rate, group aux_regime")     \
    X(167, WD_RATE_LAYER_NORM, ZERO, 0.0f, "SP4 Pearl B: weight-decay rate, group layer_norm")     \
    X(168, L1_LAMBDA, ZERO, 0.0f,                                                                  \
      "SP4 Pearl B: trunk L1 rate (mean|g|/mean|w|) x gradient-direction entropy deficit")         \
    X(169, H_S2_BOUND, ZERO, 0.0f, "SP4 Mech 10: |h_s2| bound (p99 of |h_s2|)")                    \
    X(170, GRAD_CLIP_BOUND, ZERO, 0.0f, "SP4 Mech 6: global gradient-norm clip bound")

enum {
#define X(i, n, r, v, d) FOX_ISV_##n = (i),
    FOX_ISV_MAP(X)
#undef X
};

/* The SP4 bound block and its families (seed: slot_layout_is_contiguous_and_total_40). */
enum {
    FOX_ISV_SP4_BASE = 131,
    FOX_ISV_SP4_COUNT = 40,
    FOX_ISV_SP4_GROUPS = 8,   /* == FOX_GROUP_COUNT (model.h); checked in isv.c */
    FOX_ISV_SP4_BRANCHES = 4, /* == FOX_MAX_BRANCHES (config.h); checked in isv.c */
    FOX_ISV_ATOM_POS_BOUND_BASE = 132,
    FOX_ISV_WEIGHT_BOUND_BASE = 136,
    FOX_ISV_ADAM_M_BOUND_BASE = 144,
    FOX_ISV_ADAM_V_BOUND_BASE = 152,
    FOX_ISV_WD_RATE_BASE = 160
};

/*
 * The moving C51 atom grid (docs/stability.md, "The atom grid"): branch d's
 * support [lo, hi] in slots FOX_ISV_ATOM_GRID_BASE + 2d and + 2d + 1, so
 * that checkpoints, which save the ISV, keep it. Both 0 is the fold reset's
 * unset grid, read as the configured support.
 */
enum { FOX_ISV_ATOM_GRID_BASE = 121 };

/* Slot of branch's low end (its high end is the next), or -1 for a bad branch. */
FOX_HD int
fox_isv_atom_grid_slot(int branch)
{
    return branch >= 0 && branch < FOX_ISV_SP4_BRANCHES ? FOX_ISV_ATOM_GRID_BASE + 2 * branch : -1;
}

/*
 * Slot of a per-group / per-branch SP4 family, or -1 when group (FOX_GROUP_*)
 * or branch is out of range, so a bad index can never alias the next family.
 */
FOX_HD int
fox_isv_family_slot(int base, int k)
{
    int n = base == FOX_ISV_ATOM_POS_BOUND_BASE ? FOX_ISV_SP4_BRANCHES : FOX_ISV_SP4_GROUPS;
    return k >= 0 && k < n ? base + k : -1;
}

FOX_HD int
fox_isv_atom_pos_bound_slot(int branch)
{
    return fox_isv_family_slot(FOX_ISV_ATOM_POS_BOUND_BASE, branch);
}

FOX_HD int
fox_isv_weight_bound_slot(int group)
{
    return fox_isv_family_slot(FOX_ISV_WEIGHT_BOUND_BASE, group);
}

FOX_HD int
fox_isv_adam_m_bound_slot(int group)
{
    return fox_isv_family_slot(FOX_ISV_ADAM_M_BOUND_BASE, group);
}

FOX_HD int
fox_isv_adam_v_bound_slot(int group)
{
    return fox_isv_family_slot(FOX_ISV_ADAM_V_BOUND_BASE, group);
}

FOX_HD int
fox_isv_wd_rate_slot(int group)
{
    return fox_isv_family_slot(FOX_ISV_WD_RATE_BASE, group);
}

/*
 * Consumer cold-start floor: the ε goes on the ISV multiplier, never on the
 * bound (SP1 pearl).
 */
#define FOX_PEARL_EPS_CLAMP_FLOOR 1.0f

/*
 * An ISV scale as a multiplier: max(v, 1); a non-finite or unset value
 * counts as 1. It lives with the table, not with the bounds, because the
 * sentinel thresholds read the ISV the same way and must not need the bound
 * maths for it.
 */
FOX_HD float
fox_isv_eff(float v)
{
    return isfinite(v) && v > FOX_PEARL_EPS_CLAMP_FLOOR ? v : FOX_PEARL_EPS_CLAMP_FLOOR;
}

#ifdef __cplusplus
extern "C" {
#endif

/* One named slot, as the table gives it. */
typedef struct fox_isv_slot_info {
    int index;
    const char *name; /* "Q_ABS_REF" */
    int rule;         /* FOX_ISV_KEEP | ZERO | VALUE */
    float value;      /* reset value for FOX_ISV_VALUE, else 0 */
    const char *doc;  /* one line */
} fox_isv_slot_info;

/* Number of named slots, and the k-th (0 ≤ k < count, ascending index); NULL if out of range. */
int fox_isv_named_count(void);
const fox_isv_slot_info *fox_isv_named(int k);

/*
 * Name of slot i: the table's name, "reserved" for an unnamed slot, NULL when
 * i is outside [0, FOX_ISV_TOTAL_DIM).
 */
const char *fox_isv_name(int i);

/* Description of slot i ("" for reserved, NULL out of range). */
const char *fox_isv_doc(int i);

/*
 * Index of the named slot name (case-insensitive, "q_abs_ref" works), or -1
 * if no slot has that name ("reserved" included).
 */
int fox_isv_index(const char *name);

/*
 * Reset rule of slot i (FOX_ISV_KEEP for a reserved slot); *value (may be
 * NULL) receives what reset writes (0 for KEEP/ZERO). Returns -1 when i is
 * out of range.
 */
int fox_isv_reset_rule(int i, float *value);

/* "keep", "zero" or "value"; "?" for anything else. */
const char *fox_isv_rule_name(int rule);

/*
 * Fold-boundary reset of isv [FOX_ISV_TOTAL_DIM]: walk the table; ZERO slots
 * get 0, VALUE slots their value, KEEP and reserved slots are untouched. This
 * is all reset_for_fold does to the ISV. (Pearl D's Wiener states reset with
 * it: fox_bounds_wiener_reset in bounds.h.)
 */
void fox_isv_reset(float *isv);

/*
 * Values at creation: every slot 0 except VALUE slots, which take their value
 * (KEEP slots start at 0 = their Pearl A sentinel). The fingerprint slots are
 * then written by the engine with fox_isv_store_fingerprint.
 */
void fox_isv_init(float *isv);

/*
 * Store fp in slots 115 (low 32 bits) and 116 (high 32 bits), each half copied
 * bit-exactly into a float with memcpy (no conversion), and read it back.
 * Lossless for every 64-bit value as long as the floats are only copied.
 */
void fox_isv_store_fingerprint(float *isv, uint64_t fp);
uint64_t fox_isv_load_fingerprint(const float *isv);

#ifdef __cplusplus
}
#endif

#endif
