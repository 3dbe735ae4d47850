/*
 * isv.c — the ISV table behind isv.h: name and rule lookups, the fold-boundary
 * reset walk, creation values and the two slots that hold the layout
 * fingerprint (computed by layout.c).
 *
 * Everything is generated from FOX_ISV_MAP; this file adds no slot of its own.
 * It does not produce ISV values (the backends do, with bounds.h).
 */
#include "gpu/isv.h"

#include <string.h>
#include <strings.h>

#include "gpu/model.h"

/* The SP4 families are sized by the model's groups and branches; keep them in step. */
_Static_assert((int)FOX_ISV_SP4_GROUPS == (int)FOX_GROUP_COUNT, "one SP4 slot per param group");
_Static_assert(FOX_ISV_SP4_BRANCHES == FOX_MAX_BRANCHES, "one atom bound per branch");
_Static_assert((int)FOX_ISV_SP4_BASE + (int)FOX_ISV_SP4_COUNT == FOX_ISV_TOTAL_DIM,
               "SP4 block ends the ISV");
_Static_assert((int)FOX_ISV_SP4_BASE == (int)FOX_ISV_TARGET_Q_BOUND,
               "SP4 block starts at TARGET_Q_BOUND");
_Static_assert((int)FOX_ISV_ATOM_POS_BOUND_BASE == (int)FOX_ISV_ATOM_POS_BOUND_DIRECTION,
               "atom family");
_Static_assert((int)FOX_ISV_WEIGHT_BOUND_BASE + (int)FOX_GROUP_LAYERNORM ==
                   (int)FOX_ISV_WEIGHT_BOUND_LAYER_NORM,
               "weight family in FOX_GROUP_* order");
_Static_assert((int)FOX_ISV_ADAM_M_BOUND_BASE + (int)FOX_GROUP_IQN == (int)FOX_ISV_ADAM_M_BOUND_IQN,
               "adam m family in FOX_GROUP_* order");
_Static_assert((int)FOX_ISV_ADAM_V_BOUND_BASE + (int)FOX_GROUP_AUX_REGIME ==
                   (int)FOX_ISV_ADAM_V_BOUND_AUX_REGIME,
               "adam v family in FOX_GROUP_* order");
_Static_assert((int)FOX_ISV_WD_RATE_BASE + (int)FOX_GROUP_GRN2 == (int)FOX_ISV_WD_RATE_GRN2,
               "wd family in FOX_GROUP_* order");
_Static_assert(FOX_ISV_L1_LAMBDA == 168 && FOX_ISV_H_S2_BOUND == 169 &&
                   FOX_ISV_GRAD_CLIP_BOUND == 170,
               "SP4 tail: L1, h_s2, grad clip");
_Static_assert(FOX_ISV_FINGERPRINT_HI == FOX_ISV_FINGERPRINT_LO + 1, "fingerprint pair");

static const fox_isv_slot_info named[] = {
#define X(i, n, r, v, d) {(i), #n, FOX_ISV_##r, (v), d},
    FOX_ISV_MAP(X)
#undef X
};

enum { N_NAMED = (int)(sizeof named / sizeof named[0]) };

/* The table entry of slot i, or NULL for a reserved slot or an index out of range. */
static const fox_isv_slot_info *
lookup(int i)
{
    if (i < 0 || i >= FOX_ISV_TOTAL_DIM)
        return NULL;
    /* The table is short and sorted; a binary search keeps this allocation-free and thread-safe. */
    int a = 0, b = N_NAMED - 1;
    while (a <= b) {
        int mid = (a + b) / 2;
        if (named[mid].index == i)
            return &named[mid];
        if (named[mid].index < i)
            a = mid + 1;
        else
            b = mid - 1;
    }
    return NULL;
}

int
fox_isv_named_count(void)
{
    return N_NAMED;
}

const fox_isv_slot_info *
fox_isv_named(int k)
{
    return k >= 0 && k < N_NAMED ? &named[k] : NULL;
}

const char *
fox_isv_name(int i)
{
    if (i < 0 || i >= FOX_ISV_TOTAL_DIM)
        return NULL;
    const fox_isv_slot_info *s = lookup(i);
    return s ? s->name : "reserved";
}

const char *
fox_isv_doc(int i)
{
    if (i < 0 || i >= FOX_ISV_TOTAL_DIM)
        return NULL;
    const fox_isv_slot_info *s = lookup(i);
    return s ? s->doc : "";
}

int
fox_isv_index(const char *name)
{
    if (!name)
        return -1;
    for (int k = 0; k < N_NAMED; k++)
        if (strcasecmp(named[k].name, name) == 0)
            return named[k].index;
    return -1;
}

int
fox_isv_reset_rule(int i, float *value)
{
    if (i < 0 || i >= FOX_ISV_TOTAL_DIM)
        return -1;
    const fox_isv_slot_info *s = lookup(i);
    int rule = s ? s->rule : FOX_ISV_KEEP;
    if (value)
        *value = rule == FOX_ISV_VALUE ? s->value : 0.0f;
    return rule;
}

const char *
fox_isv_rule_name(int rule)
{
    switch (rule) {
    case FOX_ISV_KEEP:
        return "keep";
    case FOX_ISV_ZERO:
        return "zero";
    case FOX_ISV_VALUE:
        return "value";
    default:
        return "?";
    }
}

void
fox_isv_reset(float *isv)
{
    for (int k = 0; k < N_NAMED; k++) {
        if (named[k].rule == FOX_ISV_ZERO)
            isv[named[k].index] = 0.0f;
        else if (named[k].rule == FOX_ISV_VALUE)
            isv[named[k].index] = named[k].value;
    }
}

void
fox_isv_init(float *isv)
{
    memset(isv, 0, FOX_ISV_TOTAL_DIM * sizeof isv[0]);
    for (int k = 0; k < N_NAMED; k++)
        if (named[k].rule == FOX_ISV_VALUE)
            isv[named[k].index] = named[k].value;
}

/* ---- fingerprint slots ------------------------------------------------------------- */

void
fox_isv_store_fingerprint(float *isv, uint64_t fp)
{
    uint32_t lo = (uint32_t)fp, hi = (uint32_t)(fp >> 32);
    /* memcpy, not a conversion: the float holds the bits, whatever they are. */
    memcpy(&isv[FOX_ISV_FINGERPRINT_LO], &lo, sizeof lo);
    memcpy(&isv[FOX_ISV_FINGERPRINT_HI], &hi, sizeof hi);
}

uint64_t
fox_isv_load_fingerprint(const float *isv)
{
    uint32_t lo, hi;
    memcpy(&lo, &isv[FOX_ISV_FINGERPRINT_LO], sizeof lo);
    memcpy(&hi, &isv[FOX_ISV_FINGERPRINT_HI], sizeof hi);
    return ((uint64_t)hi << 32) | lo;
}
