/*
 * isv_test.c — the ISV slot table on its own: sizes, the seeds' indices,
 * the SP4 block and its families, name and rule lookups, the reset walk,
 * creation values, the ISV multiplier fox_isv_eff and the two fingerprint
 * slots.
 *
 * What ties the ISV to the other tables (the layout fingerprint, the Pearl D
 * states' reset, docs/stability.md) is tested in tests/test_stability.c.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "gpu/isv.h"
#include "gpu/model.h"
#include "tests/testutil.h"

START_TEST(isv_dims)
{
    ck_assert_int_eq(FOX_ISV_TOTAL_DIM, 171);
    ck_assert_int_eq(FOX_ISV_SP4_COUNT, 40);
    ck_assert_int_eq(FOX_ISV_SP4_BASE + FOX_ISV_SP4_COUNT, FOX_ISV_TOTAL_DIM);
}
END_TEST

START_TEST(isv_indices_unique_sorted)
{
    int n = fox_isv_named_count();
    ck_assert_int_gt(n, 0);
    int seen[FOX_ISV_TOTAL_DIM] = {0};
    for (int k = 0; k < n; k++) {
        const fox_isv_slot_info *s = fox_isv_named(k);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_ge(s->index, 0);
        ck_assert_int_lt(s->index, FOX_ISV_TOTAL_DIM);
        ck_assert_msg(!seen[s->index], "ISV slot %d named twice", s->index);
        seen[s->index] = 1;
        if (k > 0)
            ck_assert_int_gt(s->index, fox_isv_named(k - 1)->index);
        ck_assert(s->rule == FOX_ISV_KEEP || s->rule == FOX_ISV_ZERO || s->rule == FOX_ISV_VALUE);
        ck_assert(strlen(s->doc) > 0);
    }
    ck_assert_ptr_null(fox_isv_named(n));
    ck_assert_ptr_null(fox_isv_named(-1));
}
END_TEST

START_TEST(isv_seed_indices)
{
    static const struct {
        int index;
        const char *name;
    } seed[] = {
        {16, "Q_ABS_REF"},
        {21, "Q_DIR_ABS_REF"},
        {96, "H_S2_RMS_EMA"},
        {115, "FINGERPRINT_LO"},
        {116, "FINGERPRINT_HI"},
        {117, "AUX_LABEL_SCALE_EMA"},
        {131, "TARGET_Q_BOUND"},
        {132, "ATOM_POS_BOUND_DIRECTION"},
        {135, "ATOM_POS_BOUND_URGENCY"},
        {136, "WEIGHT_BOUND_GRN1"},
        {143, "WEIGHT_BOUND_LAYER_NORM"},
        {144, "ADAM_M_BOUND_GRN1"},
        {152, "ADAM_V_BOUND_GRN1"},
        {160, "WD_RATE_GRN1"},
        {167, "WD_RATE_LAYER_NORM"},
        {168, "L1_LAMBDA"},
        {169, "H_S2_BOUND"},
        {170, "GRAD_CLIP_BOUND"},
    };
    for (size_t k = 0; k < sizeof seed / sizeof seed[0]; k++) {
        ck_assert_msg(fox_isv_index(seed[k].name) == seed[k].index, "%s at %d, want %d",
                      seed[k].name, fox_isv_index(seed[k].name), seed[k].index);
        ck_assert_str_eq(fox_isv_name(seed[k].index), seed[k].name);
    }
    ck_assert_int_eq(FOX_ISV_Q_ABS_REF, 16);
    ck_assert_int_eq(FOX_ISV_Q_DIR_ABS_REF, 21);
    ck_assert_int_eq(FOX_ISV_H_S2_RMS_EMA, 96);
    ck_assert_int_eq(FOX_ISV_AUX_LABEL_SCALE_EMA, 117);
    ck_assert_int_eq(FOX_ISV_TARGET_Q_BOUND, 131);
}
END_TEST

/* The seed's slot_layout_is_contiguous_and_total_40, with the families' guards. */
START_TEST(isv_sp4_layout)
{
    for (int i = FOX_ISV_SP4_BASE; i < FOX_ISV_SP4_BASE + FOX_ISV_SP4_COUNT; i++) {
        ck_assert_msg(strcmp(fox_isv_name(i), "reserved") != 0, "SP4 slot %d unnamed", i);
        float v = -1.0f;
        ck_assert_int_eq(fox_isv_reset_rule(i, &v), FOX_ISV_ZERO);
        ck_assert(v == 0.0f);
    }
    ck_assert_int_eq(FOX_ISV_SP4_GROUPS, FOX_GROUP_COUNT);
    ck_assert_int_eq(FOX_ISV_SP4_BRANCHES, FOX_MAX_BRANCHES);
    int slot = FOX_ISV_SP4_BASE;
    ck_assert_int_eq(slot++, FOX_ISV_TARGET_Q_BOUND);
    for (int b = 0; b < FOX_ISV_SP4_BRANCHES; b++)
        ck_assert_int_eq(fox_isv_atom_pos_bound_slot(b), slot++);
    for (int g = 0; g < FOX_GROUP_COUNT; g++)
        ck_assert_int_eq(fox_isv_weight_bound_slot(g), slot++);
    for (int g = 0; g < FOX_GROUP_COUNT; g++)
        ck_assert_int_eq(fox_isv_adam_m_bound_slot(g), slot++);
    for (int g = 0; g < FOX_GROUP_COUNT; g++)
        ck_assert_int_eq(fox_isv_adam_v_bound_slot(g), slot++);
    for (int g = 0; g < FOX_GROUP_COUNT; g++)
        ck_assert_int_eq(fox_isv_wd_rate_slot(g), slot++);
    ck_assert_int_eq(slot++, FOX_ISV_L1_LAMBDA);
    ck_assert_int_eq(slot++, FOX_ISV_H_S2_BOUND);
    ck_assert_int_eq(slot++, FOX_ISV_GRAD_CLIP_BOUND);
    ck_assert_int_eq(slot, FOX_ISV_TOTAL_DIM);
    /* A bad group or branch never aliases the next family. */
    ck_assert_int_eq(fox_isv_atom_pos_bound_slot(FOX_ISV_SP4_BRANCHES), -1);
    ck_assert_int_eq(fox_isv_weight_bound_slot(FOX_GROUP_COUNT), -1);
    ck_assert_int_eq(fox_isv_wd_rate_slot(-1), -1);
    /* The per-group names follow FOX_GROUP_* order. */
    ck_assert_int_eq(FOX_ISV_WEIGHT_BOUND_IQN, FOX_ISV_WEIGHT_BOUND_BASE + FOX_GROUP_IQN);
    ck_assert_int_eq(FOX_ISV_ADAM_M_BOUND_AUX_REGIME,
                     FOX_ISV_ADAM_M_BOUND_BASE + FOX_GROUP_AUX_REGIME);
    ck_assert_int_eq(FOX_ISV_ADAM_V_BOUND_VALUE, FOX_ISV_ADAM_V_BOUND_BASE + FOX_GROUP_VALUE);
    ck_assert_int_eq(FOX_ISV_WD_RATE_LAYER_NORM, FOX_ISV_WD_RATE_BASE + FOX_GROUP_LAYERNORM);
}
END_TEST

START_TEST(isv_names_lookup)
{
    int n = fox_isv_named_count();
    for (int k = 0; k < n; k++) {
        const fox_isv_slot_info *s = fox_isv_named(k);
        for (int j = k + 1; j < n; j++)
            ck_assert_msg(strcasecmp(s->name, fox_isv_named(j)->name) != 0, "duplicate name %s",
                          s->name);
        ck_assert_int_eq(fox_isv_index(s->name), s->index);
        ck_assert_str_eq(fox_isv_name(s->index), s->name);
        /* Case-insensitive: "q_abs_ref" finds Q_ABS_REF. */
        char lower[64];
        size_t len = strlen(s->name);
        ck_assert_uint_lt(len, sizeof lower);
        for (size_t c = 0; c <= len; c++)
            lower[c] =
                (char)(s->name[c] >= 'A' && s->name[c] <= 'Z' ? s->name[c] + 32 : s->name[c]);
        ck_assert_int_eq(fox_isv_index(lower), s->index);
    }
    /* The enum, the index and the name are one entry of the X-macro. */
#define X(i, nm, r, v, d)                                                                          \
    ck_assert_int_eq(FOX_ISV_##nm, i);                                                             \
    ck_assert_str_eq(fox_isv_name(i), #nm);
    FOX_ISV_MAP(X)
#undef X
    ck_assert_str_eq(fox_isv_name(0), "reserved");
    ck_assert_str_eq(fox_isv_name(130), "reserved");
    ck_assert_str_eq(fox_isv_doc(0), "");
    ck_assert_ptr_null(fox_isv_name(-1));
    ck_assert_ptr_null(fox_isv_name(FOX_ISV_TOTAL_DIM));
    ck_assert_int_eq(fox_isv_index("reserved"), -1);
    ck_assert_int_eq(fox_isv_index("NO_SUCH_SLOT"), -1);
    ck_assert_int_eq(fox_isv_index(NULL), -1);
    ck_assert_int_eq(fox_isv_reset_rule(-1, NULL), -1);
    ck_assert_int_eq(fox_isv_reset_rule(FOX_ISV_TOTAL_DIM, NULL), -1);
    ck_assert_int_eq(fox_isv_reset_rule(0, NULL), FOX_ISV_KEEP);
    ck_assert_str_eq(fox_isv_rule_name(FOX_ISV_ZERO), "zero");
}
END_TEST

START_TEST(isv_reset_walks_table)
{
    float isv[FOX_ISV_TOTAL_DIM], before[FOX_ISV_TOTAL_DIM];
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        isv[i] = before[i] = 7.0f + (float)i;
    fox_isv_reset(isv);
    int zero = 0, keep = 0, value = 0;
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++) {
        float v;
        switch (fox_isv_reset_rule(i, &v)) {
        case FOX_ISV_KEEP:
            ck_assert_msg(isv[i] == before[i], "KEEP slot %d (%s) touched", i, fox_isv_name(i));
            keep++;
            break;
        case FOX_ISV_ZERO:
            ck_assert_msg(isv[i] == 0.0f, "ZERO slot %d (%s) not zeroed", i, fox_isv_name(i));
            zero++;
            break;
        case FOX_ISV_VALUE:
            ck_assert_msg(isv[i] == v, "VALUE slot %d (%s) = %g, want %g", i, fox_isv_name(i),
                          (double)isv[i], (double)v);
            value++;
            break;
        default:
            ck_abort_msg("slot %d has no rule", i);
        }
    }
    ck_assert_int_gt(zero, 0);
    ck_assert_int_gt(keep, 0);
    ck_assert_int_gt(value, 0);
    /* The rules the seeds fix. */
    ck_assert(isv[FOX_ISV_H_S2_RMS_EMA] == 1.0f); /* neutral RMS (Mech 10 section) */
    ck_assert(isv[FOX_ISV_GRAD_NORM_SLOW_EMA] == before[FOX_ISV_GRAD_NORM_SLOW_EMA]); /* Mech 8 */
    ck_assert(isv[FOX_ISV_FINGERPRINT_LO] == before[FOX_ISV_FINGERPRINT_LO]);
    ck_assert(isv[FOX_ISV_FINGERPRINT_HI] == before[FOX_ISV_FINGERPRINT_HI]);
    ck_assert(isv[FOX_ISV_Q_ABS_REF] == 0.0f);
    ck_assert(isv[FOX_ISV_TARGET_Q_BOUND] == 0.0f); /* Pearl A sentinel */
    ck_assert(isv[FOX_ISV_GRAD_CLIP_BOUND] == 0.0f);
    ck_assert(isv[0] == before[0]); /* reserved */
}
END_TEST

START_TEST(isv_init_values)
{
    float isv[FOX_ISV_TOTAL_DIM];
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        isv[i] = NAN;
    fox_isv_init(isv);
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++) {
        float v;
        int rule = fox_isv_reset_rule(i, &v);
        ck_assert_msg(isv[i] == (rule == FOX_ISV_VALUE ? v : 0.0f), "slot %d init %g", i,
                      (double)isv[i]);
    }
}
END_TEST

/* max(v, 1), with every value that is not a finite number above 1 read as 1. */
START_TEST(isv_eff_floors_at_one)
{
    ck_assert(FOX_PEARL_EPS_CLAMP_FLOOR == 1.0f);
    ck_assert(fox_isv_eff(0.0f) == 1.0f);  /* the Pearl A sentinel: an unset slot */
    ck_assert(fox_isv_eff(0.25f) == 1.0f); /* the floor is on the multiplier */
    ck_assert(fox_isv_eff(1.0f) == 1.0f);
    ck_assert(fox_isv_eff(-5.0f) == 1.0f);
    ck_assert(fox_isv_eff(3.5f) == 3.5f);
    ck_assert(fox_isv_eff(1e30f) == 1e30f);
    ck_assert(fox_isv_eff(NAN) == 1.0f);
    ck_assert(fox_isv_eff(INFINITY) == 1.0f);
    ck_assert(fox_isv_eff(-INFINITY) == 1.0f);
}
END_TEST

static uint32_t
float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Store and load are bit copies into slots 115 and 116 and touch nothing else. */
START_TEST(isv_fingerprint_slots_hold_any_bits)
{
    static const uint64_t odd[] = {0,
                                   ~0ULL,
                                   0x7fc000017f800000ULL,
                                   0x00000001ffffffffULL,
                                   0x8000000000000000ULL,
                                   0x123456789abcdef0ULL};
    float isv[FOX_ISV_TOTAL_DIM];
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++) {
        for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
            isv[i] = (float)i;
        fox_isv_store_fingerprint(isv, odd[k]);
        ck_assert(fox_isv_load_fingerprint(isv) == odd[k]);
        ck_assert_uint_eq(float_bits(isv[FOX_ISV_FINGERPRINT_LO]), (uint32_t)odd[k]);
        ck_assert_uint_eq(float_bits(isv[FOX_ISV_FINGERPRINT_HI]), (uint32_t)(odd[k] >> 32));
        for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
            if (i != FOX_ISV_FINGERPRINT_LO && i != FOX_ISV_FINGERPRINT_HI)
                ck_assert_msg(isv[i] == (float)i, "slot %d touched by the fingerprint", i);
    }
}
END_TEST

START_TEST(isv_rule_names)
{
    ck_assert_str_eq(fox_isv_rule_name(FOX_ISV_KEEP), "keep");
    ck_assert_str_eq(fox_isv_rule_name(FOX_ISV_ZERO), "zero");
    ck_assert_str_eq(fox_isv_rule_name(FOX_ISV_VALUE), "value");
    ck_assert_str_eq(fox_isv_rule_name(3), "?");
    ck_assert_str_eq(fox_isv_rule_name(-1), "?");
    /* Every named slot has a description; a reserved one has "", out of range NULL. */
    for (int k = 0; k < fox_isv_named_count(); k++)
        ck_assert(fox_isv_doc(fox_isv_named(k)->index)[0] != '\0');
    ck_assert_ptr_null(fox_isv_doc(-1));
    ck_assert_ptr_null(fox_isv_doc(FOX_ISV_TOTAL_DIM));
}
END_TEST

static Suite *
isv_suite(void)
{
    Suite *s = suite_create("isv");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, isv_dims);
    tcase_add_test(tc, isv_indices_unique_sorted);
    tcase_add_test(tc, isv_seed_indices);
    tcase_add_test(tc, isv_sp4_layout);
    tcase_add_test(tc, isv_names_lookup);
    tcase_add_test(tc, isv_reset_walks_table);
    tcase_add_test(tc, isv_init_values);
    tcase_add_test(tc, isv_eff_floors_at_one);
    tcase_add_test(tc, isv_fingerprint_slots_hold_any_bits);
    tcase_add_test(tc, isv_rule_names);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return fox_test_run_suite(isv_suite());
}
