/*
 * sentinel_test.c — the sentinel slot table on its own: integrity, the
 * seeds' numbering, the Mech 5 thresholds and their rule text, the
 * group slots, fault-injection names, the halt text and the flag mask, the
 * params runs a slot watches, and the CPU twins of the fused check.
 *
 * What ties the sentinels to the other tables (the layout fingerprint,
 * docs/stability.md) is tested in tests/test_stability.c; the flags set by
 * a training step are tested by the drills.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "gpu/isv.h"
#include "gpu/model.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"

START_TEST(sentinel_dims)
{
    ck_assert_int_eq(FOX_SENTINEL_SLOTS, 50);
    ck_assert_int_eq(FOX_SENT_HALT_END, 36);
}
END_TEST

START_TEST(sentinel_table_integrity)
{
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        const fox_sentinel_slot_info *s = fox_sentinel_info(i);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_eq(s->index, i);
        ck_assert_ptr_nonnull(s->name);
        ck_assert(strlen(s->name) > 0);
        ck_assert_int_eq(fox_sentinel_index(s->name), i);
        ck_assert_str_eq(fox_sentinel_name(i), s->name);
        for (int j = i + 1; j < FOX_SENTINEL_SLOTS; j++)
            ck_assert_msg(strcasecmp(s->name, fox_sentinel_name(j)) != 0, "duplicate %s", s->name);
        /* Reserved slots have no buffer; every other one names the buffer it watches. */
        ck_assert_int_eq(strlen(s->buffer) == 0, s->site == FOX_SENT_SITE_NONE);
        /* The kind and its threshold fields agree. */
        if (s->kind == FOX_SENT_KIND_THRESHOLD) {
            ck_assert_int_ne(s->measure, FOX_SENT_MEASURE_NONE);
            ck_assert_int_ne(s->base, FOX_SENT_BASE_NONE);
            ck_assert(s->mult > 0.0f);
            ck_assert(s->power == 1 || s->power == 2);
        } else {
            ck_assert_int_eq(s->kind, FOX_SENT_KIND_NONFINITE);
            ck_assert_int_eq(s->measure, FOX_SENT_MEASURE_NONE);
            ck_assert_int_eq(s->base, FOX_SENT_BASE_NONE);
        }
    }
#define X(i, E, n, b, g, k, m, base, mult, pw, site, eng, doc)                                     \
    ck_assert_int_eq(FOX_SENT_##E, i);                                                             \
    ck_assert_msg(strcasecmp(#E, #n) == 0, "enum %s vs name %s", #E, #n);
    FOX_SENTINEL_MAP(X)
#undef X
    ck_assert_ptr_null(fox_sentinel_info(-1));
    ck_assert_ptr_null(fox_sentinel_info(FOX_SENTINEL_SLOTS));
    ck_assert_ptr_null(fox_sentinel_name(FOX_SENTINEL_SLOTS));
    ck_assert_int_eq(fox_sentinel_index("no_such_buffer"), -1);
    ck_assert_int_eq(fox_sentinel_index(NULL), -1);
    ck_assert_int_eq(fox_sentinel_index("H_S2"), FOX_SENT_H_S2);
    ck_assert_int_eq(fox_sentinel_kind(-1), -1);
}
END_TEST

/* The seeds' numbering (docs/stability.md, "Sentinel slots"), slot by slot. */
START_TEST(sentinel_design_numbering)
{
    static const char *const want[FOX_SENTINEL_SLOTS] = {
        "states", "v_logits", "adv_logits", "aux_loss", "next_states", "target_logits", "grads",
        "current_lp", "projected", "iqn_q_online", "iqn_q_target", "td_errors", "h_s2", "h_s1",
        "params", "rewards", "h_s2_eta2", "h_s2_eta1", "h_s2_gate", "h_s2_glu", "h_s2_ln_in",
        "total_loss", "env_obs", "replay_priorities", "d_v_logits", "d_adv_logits",
        "iqn_trunk_grad", "iqn_d_h_s2", "d_iqn_q", "reserved_29", "aux_d_h_s2", "reserved_31",
        "d_states", "d_h_s2_post_main", "d_h_s2_post_aux", "d_h_s2_post_iqn",
        /* Mech 5 (seed names), 48 of the Mech 9 close-out, 49 of Mech 10 */
        "trunk_adam_m_max", "value_adam_m_max", "branch_adam_m_max", "iqn_adam_m_max",
        "trunk_adam_v_max", "value_adam_v_max", "branch_adam_v_max", "iqn_adam_v_max",
        "trunk_weight_max", "heads_weight_max", "target_q_post_clip", "atom_span_max",
        "iqn_weight_max", "h_s2_max_abs"};
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        ck_assert_msg(strcmp(fox_sentinel_name(i), want[i]) == 0, "slot %d is %s, want %s", i,
                      fox_sentinel_name(i), want[i]);
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        int kind = fox_sentinel_kind(i);
        ck_assert_int_eq(kind, i < 36 ? FOX_SENT_KIND_NONFINITE : FOX_SENT_KIND_THRESHOLD);
        ck_assert_int_eq(fox_sentinel_is_halt(i), i < 36 && i != 29 && i != 31);
    }
    /* Inline sites: 12 before the Mech 10 clamp, 33–35 along d_h_s2. */
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        int inl = i == 12 || i == 33 || i == 34 || i == 35;
        ck_assert_int_eq(fox_sentinel_info(i)->site == FOX_SENT_SITE_INLINE, inl);
    }
    ck_assert_int_eq(fox_sentinel_info(29)->site, FOX_SENT_SITE_NONE);
    ck_assert_int_eq(fox_sentinel_info(31)->site, FOX_SENT_SITE_NONE);
    for (int i = 33; i <= 35; i++)
        ck_assert_str_eq(fox_sentinel_buffer(i), "d_h_s2");
    ck_assert_str_eq(fox_sentinel_buffer(12), "h_s2");
    ck_assert_str_eq(fox_sentinel_buffer(49), "h_s2");
}
END_TEST

/* The seed's Mech 5 thresholds (000, "Mech 5 slot allocation") and slots 48, 49. */
START_TEST(sentinel_mech5_thresholds)
{
    static const struct {
        int slot;
        float mult;
        int power, base, measure;
    } m5[] = {
        {36, 100.0f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {37, 100.0f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {38, 100.0f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {39, 100.0f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {40, 1e6f, 2, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {41, 1e6f, 2, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {42, 1e6f, 2, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {43, 1e6f, 2, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {44, 1e3f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {45, 1e3f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {46, 95.0f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {47, 190.0f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_SPAN},
        {48, 1e3f, 1, FOX_SENT_BASE_Q_ABS_REF, FOX_SENT_MEASURE_MAX_ABS},
        {49, 1e3f, 1, FOX_SENT_BASE_H_S2_RMS, FOX_SENT_MEASURE_MAX_ABS},
    };
    ck_assert_int_eq(sizeof m5 / sizeof m5[0], FOX_SENTINEL_SLOTS - 36);
    float isv[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    isv[FOX_ISV_Q_ABS_REF] = 3.0f;
    isv[FOX_ISV_H_S2_RMS_EMA] = 2.0f;
    for (size_t k = 0; k < sizeof m5 / sizeof m5[0]; k++) {
        const fox_sentinel_slot_info *s = fox_sentinel_info(m5[k].slot);
        ck_assert(s->mult == m5[k].mult);
        ck_assert_int_eq(s->power, m5[k].power);
        ck_assert_int_eq(s->base, m5[k].base);
        ck_assert_int_eq(s->measure, m5[k].measure);
        float t, eff = m5[k].base == FOX_SENT_BASE_H_S2_RMS ? 2.0f : 3.0f;
        FOX_CK_OK(fox_sentinel_threshold(m5[k].slot, isv, &t));
        ck_assert_float_eq_tol(t, m5[k].mult * (m5[k].power == 2 ? eff * eff : eff), 1e-6f * t);
    }
    /* Cold start: ISV 0 (or NaN) → eff 1, every threshold at its multiplier. */
    isv[FOX_ISV_Q_ABS_REF] = 0.0f;
    isv[FOX_ISV_H_S2_RMS_EMA] = NAN;
    float t;
    FOX_CK_OK(fox_sentinel_threshold(40, isv, &t));
    ck_assert(t == 1e6f);
    FOX_CK_OK(fox_sentinel_threshold(49, isv, &t));
    ck_assert(t == 1e3f);
    ck_assert_int_eq(fox_sentinel_threshold(6, isv, &t), FOX_EINVAL);
    ck_assert_int_eq(fox_sentinel_threshold(50, isv, &t), FOX_EINVAL);
    char buf[160];
    FOX_CK_OK(fox_sentinel_rule_text(40, buf, sizeof buf));
    ck_assert_msg(strstr(buf, "q_eff^2") && strstr(buf, "ISV[16]"), "%s", buf);
    FOX_CK_OK(fox_sentinel_rule_text(49, buf, sizeof buf));
    ck_assert_msg(strstr(buf, "ISV[96]"), "%s", buf);
    FOX_CK_OK(fox_sentinel_rule_text(0, buf, sizeof buf));
    ck_assert_str_eq(buf, "any NaN/Inf");
    ck_assert_int_eq(fox_sentinel_rule_text(0, buf, 4), FOX_EINVAL);
}
END_TEST

START_TEST(sentinel_group_slots)
{
    static const int weight[FOX_GROUP_COUNT] = {44, 44, 45, 45, 48, 45, 45, 44};
    static const int adam_m[FOX_GROUP_COUNT] = {36, 36, 37, 38, 39, -1, -1, 36};
    static const int adam_v[FOX_GROUP_COUNT] = {40, 40, 41, 42, 43, -1, -1, 40};
    for (int g = 0; g < FOX_GROUP_COUNT; g++) {
        ck_assert_int_eq(fox_sentinel_group_slot(FOX_SENT_FAMILY_WEIGHT, g), weight[g]);
        ck_assert_int_eq(fox_sentinel_group_slot(FOX_SENT_FAMILY_ADAM_M, g), adam_m[g]);
        ck_assert_int_eq(fox_sentinel_group_slot(FOX_SENT_FAMILY_ADAM_V, g), adam_v[g]);
    }
    ck_assert_int_eq(fox_sentinel_group_slot(FOX_SENT_FAMILY_WEIGHT, FOX_GROUP_COUNT), -1);
    ck_assert_int_eq(fox_sentinel_group_slot(7, 0), -1);
    ck_assert_int_eq(fox_sentinel_info(44)->engage, FOX_SENT_ENGAGE_MECH9);
    ck_assert_int_eq(fox_sentinel_info(48)->engage, FOX_SENT_ENGAGE_MECH9);
    ck_assert_int_eq(fox_sentinel_info(36)->engage, FOX_SENT_ENGAGE_ADAM_MV);
    ck_assert_int_eq(fox_sentinel_info(49)->engage, FOX_SENT_ENGAGE_PRODUCER);
}
END_TEST

START_TEST(sentinel_cpu_checks)
{
    float clean[5] = {0.0f, -1.0f, 2.5f, 1e30f, -FLT_MAX};
    ck_assert_int_eq(fox_sentinel_check_nonfinite(clean, 5), 0);
    ck_assert_int_eq(fox_sentinel_check_nonfinite(clean, 0), 0);
    float bad[3] = {1.0f, 2.0f, 3.0f};
    bad[2] = NAN;
    ck_assert_int_eq(fox_sentinel_check_nonfinite(bad, 3), 1);
    ck_assert_int_eq(fox_sentinel_check_nonfinite(bad, 2), 0);
    bad[2] = INFINITY;
    ck_assert_int_eq(fox_sentinel_check_nonfinite(bad, 3), 1);
    bad[2] = -INFINITY;
    ck_assert_int_eq(fox_sentinel_check_nonfinite(bad, 3), 1);

    float v[3] = {1.0f, -99.0f, 50.0f};
    ck_assert_int_eq(fox_sentinel_check_threshold(v, 3, 100.0f), 0);
    ck_assert_int_eq(fox_sentinel_check_threshold(v, 3, 99.0f), 1); /* |x| ≥ t fires */
    v[0] = NAN;
    ck_assert_int_eq(fox_sentinel_check_threshold(v, 3, 1e30f), 1); /* NaN exceeds anything */
    v[0] = INFINITY;
    ck_assert_int_eq(fox_sentinel_check_threshold(v, 3, FLT_MAX), 1);

    /* Every lane and the scalar tail: one bad value at each position of 1..600 values. */
    static float run[600];
    const float bads[] = {NAN, -NAN, INFINITY, -INFINITY};
    for (int n = 1; n <= 600; n += (n < 20 ? 1 : 37)) {
        for (int at = 0; at < n; at++) {
            for (int k = 0; k < n; k++)
                run[k] = (float)(k % 7) - 3.0f;
            ck_assert_int_eq(fox_sentinel_check_nonfinite(run, (size_t)n), 0);
            ck_assert_int_eq(fox_sentinel_check_threshold(run, (size_t)n, 3.0f), 1);
            ck_assert_int_eq(fox_sentinel_check_threshold(run, (size_t)n, 3.0001f), 0);
            run[at] = bads[at % 4];
            ck_assert_msg(fox_sentinel_check_nonfinite(run, (size_t)n) == 1, "n %d at %d", n, at);
            ck_assert_msg(fox_sentinel_check_threshold(run, (size_t)n, FLT_MAX) == 1, "n %d at %d",
                          n, at);
            run[at] = -5.0f; /* just at the threshold, negative: |x| ≥ t fires */
            ck_assert_int_eq(fox_sentinel_check_threshold(run, (size_t)n, 5.0f), 1);
            ck_assert_int_eq(fox_sentinel_check_threshold(run, (size_t)n, nextafterf(5.0f, 6.0f)),
                             0);
        }
    }
    ck_assert_int_eq(fox_sentinel_check_threshold(v, 3, 0.0f), 1);
    ck_assert_int_eq(fox_sentinel_check_threshold(v, 3, NAN), 1);
    ck_assert_int_eq(fox_sentinel_check_threshold(v, 0, NAN), 0);

    float atoms[4] = {-10.0f, -3.0f, 4.0f, 10.0f};
    ck_assert_int_eq(fox_sentinel_check_span(atoms, 4, 20.5f), 0);
    ck_assert_int_eq(fox_sentinel_check_span(atoms, 4, 20.0f), 1);
    atoms[1] = NAN;
    ck_assert_int_eq(fox_sentinel_check_span(atoms, 4, 1e30f), 1);
    ck_assert_int_eq(fox_sentinel_check_span(atoms, 0, 1.0f), 0);

    /* Through the table: slot 49 fires above 1e3 × h_eff, reserved slots never fire. */
    float isv[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    isv[FOX_ISV_H_S2_RMS_EMA] = 2.0f;
    float h[2] = {1999.0f, -3.0f};
    int fired = -1;
    FOX_CK_OK(fox_sentinel_check(FOX_SENT_H_S2_MAX_ABS, h, 2, isv, &fired));
    ck_assert_int_eq(fired, 0);
    h[1] = -2000.0f;
    FOX_CK_OK(fox_sentinel_check(FOX_SENT_H_S2_MAX_ABS, h, 2, isv, &fired));
    ck_assert_int_eq(fired, 1);
    float nan1 = NAN;
    FOX_CK_OK(fox_sentinel_check(FOX_SENT_RESERVED_29, &nan1, 1, NULL, &fired));
    ck_assert_int_eq(fired, 0);
    FOX_CK_OK(fox_sentinel_check(FOX_SENT_GRADS, &nan1, 1, NULL, &fired));
    ck_assert_int_eq(fired, 1);
    FOX_CK_OK(fox_sentinel_check(FOX_SENT_ATOM_SPAN_MAX, atoms, 4, isv, &fired));
    ck_assert_int_eq(fired, 1);
    ck_assert_int_eq(fox_sentinel_check(FOX_SENT_H_S2_MAX_ABS, h, 2, NULL, &fired), FOX_EINVAL);
    ck_assert_int_eq(fox_sentinel_check(FOX_SENTINEL_SLOTS, h, 2, isv, &fired), FOX_EINVAL);
}
END_TEST

/* A fault names a slot, else the first slot watching that buffer; never a reserved slot. */
START_TEST(sentinel_fault_names)
{
    ck_assert_int_eq(fox_sentinel_fault_slot("h_s2"), FOX_SENT_H_S2);
    ck_assert_int_eq(fox_sentinel_fault_slot("H_S2_MAX_ABS"), FOX_SENT_H_S2_MAX_ABS);
    ck_assert_int_eq(fox_sentinel_fault_slot("adam_m"), FOX_SENT_TRUNK_ADAM_M_MAX);
    ck_assert_int_eq(fox_sentinel_fault_slot("target_q"), FOX_SENT_TARGET_Q_POST_CLIP);
    ck_assert_int_eq(fox_sentinel_fault_slot("reserved_29"), -1);
    ck_assert_int_eq(fox_sentinel_fault_slot("no_such_buffer"), -1);
    ck_assert_int_eq(fox_sentinel_fault_slot(""), -1);
    ck_assert_int_eq(fox_sentinel_fault_slot(NULL), -1);
    ck_assert_str_eq(fox_sentinel_kind_name(FOX_SENT_KIND_NONFINITE), "nonfinite");
    ck_assert_str_eq(fox_sentinel_kind_name(FOX_SENT_KIND_THRESHOLD), "threshold");
    ck_assert_str_eq(fox_sentinel_kind_name(2), "?");
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        ck_assert_msg(fox_sentinel_doc(i) && fox_sentinel_doc(i)[0], "slot %d has no doc", i);
    ck_assert_ptr_null(fox_sentinel_doc(FOX_SENTINEL_SLOTS));
    ck_assert_ptr_null(fox_sentinel_buffer(-1));
}
END_TEST

/* The halt text lists halt slots only, in order; the mask has a bit for every set flag. */
START_TEST(sentinel_halt_text_and_mask)
{
    int flags[FOX_SENTINEL_SLOTS] = {0};
    char buf[128] = "stale";
    ck_assert_int_eq(fox_sentinel_halt_text(flags, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_uint_eq(fox_sentinel_mask(flags), 0);

    flags[FOX_SENT_H_S2] = 1;
    flags[FOX_SENT_D_H_S2_POST_MAIN] = 1;
    flags[FOX_SENT_RESERVED_29] = 1;      /* reserved: never a halt */
    flags[FOX_SENT_TRUNK_ADAM_V_MAX] = 1; /* threshold: a diagnostic, not a halt */
    ck_assert_int_eq(fox_sentinel_halt_text(flags, buf, sizeof buf), 2);
    ck_assert_str_eq(buf, "12 h_s2, 33 d_h_s2_post_main");
    ck_assert_uint_eq(fox_sentinel_mask(flags),
                      (1ull << 12) | (1ull << 29) | (1ull << 33) | (1ull << 40));

    /* A short buffer is cut, NUL-terminated, and the count stays whole. */
    char small[6];
    ck_assert_int_eq(fox_sentinel_halt_text(flags, small, sizeof small), 2);
    ck_assert_str_eq(small, "12 h_");
    flags[FOX_SENTINEL_SLOTS - 1] = 1;
    ck_assert(fox_sentinel_mask(flags) & (1ull << (FOX_SENTINEL_SLOTS - 1)));
}
END_TEST

/* A slot's runs cover every tensor of its groups and no tensor of another group. */
START_TEST(sentinel_param_runs_follow_groups)
{
    fox_config cfg;
    fox_config_default(&cfg);
    fox_model_layout lay;
    FOX_CK_OK(fox_model_layout_init(&lay, &cfg));
    static const int slots[] = {FOX_SENT_PARAMS, FOX_SENT_TRUNK_WEIGHT_MAX,
                                FOX_SENT_HEADS_WEIGHT_MAX, FOX_SENT_IQN_WEIGHT_MAX,
                                FOX_SENT_VALUE_ADAM_M_MAX};
    for (size_t k = 0; k < sizeof slots / sizeof slots[0]; k++) {
        fox_param_run runs[FOX_P_COUNT];
        int n = fox_sentinel_param_runs(slots[k], &lay, runs);
        unsigned mask = fox_sentinel_info(slots[k])->groups;
        ck_assert_int_ge(n, 1);
        for (int r = 0; r < n; r++) {
            ck_assert(runs[r].len > 0 && runs[r].offset + runs[r].len <= lay.n_params);
            if (r > 0)
                ck_assert(runs[r].offset > runs[r - 1].offset + runs[r - 1].len);
        }
        for (int i = 0; i < FOX_P_COUNT; i++) {
            size_t len = fox_tensor_size(&lay, i);
            if (!len)
                continue;
            int inside = 0;
            for (int r = 0; r < n; r++)
                inside |= lay.t[i].offset >= runs[r].offset &&
                          lay.t[i].offset + len <= runs[r].offset + runs[r].len;
            int watched = mask == FOX_SENT_G_ALL || (mask & FOX_SENT_G(lay.t[i].group));
            ck_assert_msg(inside == watched, "slot %d, tensor %s: inside %d, watched %d", slots[k],
                          lay.t[i].name, inside, watched);
        }
    }
    fox_param_run all[FOX_P_COUNT];
    ck_assert_int_eq(fox_sentinel_param_runs(FOX_SENT_PARAMS, &lay, all), 1);
}
END_TEST

static Suite *
sentinel_suite(void)
{
    Suite *s = suite_create("sentinel");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, sentinel_dims);
    tcase_add_test(tc, sentinel_table_integrity);
    tcase_add_test(tc, sentinel_design_numbering);
    tcase_add_test(tc, sentinel_mech5_thresholds);
    tcase_add_test(tc, sentinel_group_slots);
    tcase_add_test(tc, sentinel_cpu_checks);
    tcase_add_test(tc, sentinel_fault_names);
    tcase_add_test(tc, sentinel_halt_text_and_mask);
    tcase_add_test(tc, sentinel_param_runs_follow_groups);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return fox_test_run_suite(sentinel_suite());
}
