/*
 * test_cuda_drills.c — fault drills on the CUDA backend, end to end through
 * the engine: a fault injected into a named sentinel buffer at a chosen
 * train step fires that buffer's slot on the device (fused check, inline
 * check or in-kernel engagement flag); under engine.halt_rule = strict a
 * slot 0–35 halts the fold naming it as the CPU backend does, the fold
 * refuses further steps, and the next fold starts clean; under seeds (the
 * default) the fault is sanitized and flagged and the fold trains on, or
 * halts through halt_nan on the loss it reached, with finite weights either
 * way. A run without a fault fires nothing.
 *
 * Every halting slot 0–35, with NaN and with Inf, against the CPU drills'
 * reach table (drill_reach.h): its own slot fires and nothing beyond what
 * its value can reach. The GPU may fire less (it fuses stages the CPU keeps
 * apart: the GRN2 gate/glu/ln_in faults land after the fused tail and reach
 * nothing further) and, in two places, more: the device learns of a halt at
 * the step it happens and moves no parameter from then on, but the rest of
 * the run of steps still computes its forwards and backwards on the
 * poisoned weights, where the CPU stops at once (params); and its TD errors
 * and replay priorities are one buffer (bt.prio), which both slots watch.
 * Then the threshold slots' huge values, h_s2 with adaptive bounds,
 * halt_nan on a non-finite loss and halt_grad_collapse on a vanished
 * gradient (through the debug library, gpu/cuda/debug.h: no run of the real
 * step can make one).
 *
 * Exits 77 (meson: skipped) with the reason when no CUDA device is present,
 * as on CI. Runs without fork: a CUDA context does not survive fork().
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/cuda/debug.h"
#include "tests/drill_reach.h"
#include "gpu/engine.h"
#include "gpu/engine_impl.h"
#include "tests/fold_reset.h"
#include "common/log.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"

#define FAULT_STEP 3
#define STEPS 40

static const char *const small_pairs[] = {"engine.backend=cuda", "env.n_envs=64", "train.batch=64",
                                          "train.learning_starts=256", NULL};

static void
config(fox_config *c, const char *buffer, const char *kind, int adaptive)
{
    fox_config_default(c);
    fox_test_set_pairs(c, small_pairs);
    if (adaptive)
        c->bounds_mode = FOX_BOUNDS_ADAPTIVE;
    if (buffer)
        fox_test_set_fault(c, buffer, kind, FAULT_STEP);
}

static void
fired_text(const fox_engine *e, char *buf, size_t len)
{
    const volatile int *f = fox_engine_flags(e);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < FOX_SENTINEL_SLOTS && used < len; i++)
        if (f[i])
            used += (size_t)snprintf(buf + used, len - used, " %d", i);
}

START_TEST(clean_run_fires_nothing)
{
    fox_config c;
    config(&c, NULL, NULL, 0);
    fox_engine *e = fox_test_engine(&c);
    fox_step_stats st;
    int rv = fox_engine_run_steps(e, STEPS, &st);
    char txt[256];
    fired_text(e, txt, sizeof txt);
    ck_assert_msg(rv == FOX_OK, "run_steps: %s", fox_engine_errmsg(e));
    ck_assert_msg(txt[0] == '\0', "clean run fired:%s", txt);
    printf("drill clean: %d steps, loss %.4f, no flag\n", STEPS, st.loss);
    fox_engine_destroy(e);
}
END_TEST

/*
 * The fault fires its slot and nothing outside `down` (its reach; ~0: not checked); under
 * the strict rule a halting slot halts the fold naming it; begin_fold clears it.
 */
static void
drill(const char *name, const char *kind, int adaptive, uint64_t down)
{
    fox_config c;
    config(&c, name, kind, adaptive);
    c.halt_rule = FOX_HALT_RULE_STRICT;
    int slot = fox_sentinel_index(name);
    fox_engine *e = fox_test_engine(&c);
    int rv = fox_engine_run_steps(e, STEPS, NULL);
    char txt[256], want[64];
    fired_text(e, txt, sizeof txt);
    ck_assert_msg(fox_engine_flags(e)[slot], "%s %s: slot %d did not fire (fired:%s)", kind, name,
                  slot, txt);
    ck_assert_msg((fox_sentinel_mask(fox_engine_flags(e)) & ~(down | S(slot))) == 0,
                  "%s %s: fired beyond its reach:%s", kind, name, txt);
    if (fox_sentinel_is_halt(slot)) {
        ck_assert_msg(rv == FOX_EHALT, "%s %s: no halt (%s)", kind, name, fox_strerror(rv));
        snprintf(want, sizeof want, "%d %s", slot, name);
        ck_assert_msg(strstr(fox_engine_errmsg(e), "halt_nan: ") &&
                          strstr(fox_engine_errmsg(e), want),
                      "%s %s: errmsg '%s'", kind, name, fox_engine_errmsg(e));
        fox_halt_info h;
        fox_engine_halt_info(e, &h);
        ck_assert_int_eq(h.reason, FOX_HALT_NAN);
        ck_assert_int_eq(fox_engine_run_steps(e, 1, NULL), FOX_ESTATE);
    } else {
        /* A huge finite value may poison what reads it next and halt on that: either is fine. */
        ck_assert_msg(rv == FOX_OK || rv == FOX_EHALT, "%s %s: %s", kind, name,
                      fox_engine_errmsg(e));
    }
    printf("drill %s %s%s: fired:%s\n", kind, name, adaptive ? " (adaptive bounds)" : "", txt);
    ck_assert_msg(fox_engine_begin_fold(e, 1) == FOX_OK, "%s", fox_engine_errmsg(e));
    fired_text(e, txt, sizeof txt);
    ck_assert_msg(txt[0] == '\0', "%s: flags after begin_fold:%s", name, txt);
    fox_test_isv_finite(e, name);
    fox_engine_destroy(e);
}

/* Every halting slot, NaN and Inf: its own slot, within its reach, a halt naming it. */
START_TEST(halt_slots_fire_within_reach)
{
    for (size_t k = 0; k < sizeof reaches / sizeof reaches[0]; k++) {
        int slot = reaches[k].slot;
        uint64_t down = reaches[k].down;
        /* Poisoned weights stay (no Adam step moves them) for the rest of the run. */
        if (slot == FOX_SENT_PARAMS)
            down |= S(13) | TRUNK_DOWN;
        /* The device's TD errors are the replay priorities: one buffer, both slots watch it. */
        if (slot == FOX_SENT_REPLAY_PRIORITIES)
            down |= S(FOX_SENT_TD_ERRORS);
        drill(fox_sentinel_name(slot), "nan", 0, down);
        drill(fox_sentinel_name(slot), "inf", 0, down);
    }
}
END_TEST

/*
 * Threshold slots by a huge finite value: the fused check's (the weight bounds among them,
 * which it reads in params' own chunks) and the in-kernel Adam flag; h_s2 with adaptive
 * bounds, where GRN2's tail injects the fault before the p99's first pass rather than
 * before the site.
 */
START_TEST(threshold_faults_and_adaptive_h_s2)
{
    static const char *const huge[] = {"target_q_post_clip", "heads_weight_max",
                                       "trunk_adam_m_max",   "trunk_weight_max",
                                       "iqn_weight_max",     "branch_adam_v_max"};
    for (size_t k = 0; k < sizeof huge / sizeof huge[0]; k++)
        drill(huge[k], "huge", 0, ~0ull);
    drill("h_s2", "nan", 1, S(49));
}
END_TEST

/*
 * The halts as the device decides them: halt_nan on a non-finite loss with the checks off (no
 * flag set), end to end; and halt_grad_collapse on a gradient that vanished for
 * FOX_HALT_COLLAPSE_STEPS train steps, on
 * the decision itself (the step's norm and halt kernels on a gradient given from the host),
 * as test_drills does for the CPU: not one step short of them, nor on a norm just above
 * FOX_HALT_COLLAPSE_NORM.
 */
static void
nan_on_nonfinite_loss(void)
{
    const char *want = "halt_nan: loss nan, grad norm ";
    fox_config c;
    config(&c, "total_loss", "nan", 0);
    c.sentinel = 0;
    fox_engine *e = fox_test_engine(&c);
    int rv = fox_engine_run_steps(e, 2 * FOX_HALT_COLLAPSE_STEPS, NULL);
    ck_assert_msg(rv == FOX_EHALT, "%s: no halt (%s)", want, fox_strerror(rv));
    ck_assert_msg(strstr(fox_engine_errmsg(e), want), "errmsg '%s', want '%s'",
                  fox_engine_errmsg(e), want);
    fox_halt_info h;
    fox_engine_halt_info(e, &h);
    ck_assert_int_eq(h.reason, FOX_HALT_NAN);
    ck_assert_uint_eq(fox_sentinel_mask(fox_engine_flags(e)), 0);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", fox_engine_errmsg(e));
    fox_engine_destroy(e);
    int64_t at = fox_test_halt_step(&c, 2 * FOX_HALT_COLLAPSE_STEPS);
    printf("drill non-finite loss at step %lld: %s\n", (long long)at, msg);
}

static void
collapse_on_vanished_gradient(void)
{
    fox_config c;
    config(&c, NULL, NULL, 0);
    fox_engine *e = fox_test_engine(&c);
    size_t np = e->lay.n_params;
    float *g = calloc(np, sizeof *g);
    ck_assert_ptr_nonnull(g);
    int halt = -1;
    FOX_CK_OK(fox_cuda_debug_collapse(e->m->be, g, FOX_HALT_COLLAPSE_STEPS - 1, &halt));
    ck_assert_int_eq(halt, FOX_HALT_NONE);
    FOX_CK_OK(fox_cuda_debug_collapse(e->m->be, g, FOX_HALT_COLLAPSE_STEPS, &halt));
    ck_assert_int_eq(halt, FOX_HALT_GRAD_COLLAPSE);
    g[np / 2] = 2.0f * (float)FOX_HALT_COLLAPSE_NORM;
    FOX_CK_OK(fox_cuda_debug_collapse(e->m->be, g, 2 * FOX_HALT_COLLAPSE_STEPS, &halt));
    ck_assert_int_eq(halt, FOX_HALT_NONE);
    printf("drill collapse: %d train steps of a zero gradient halt, %d do not, nor a norm of "
           "%g\n", FOX_HALT_COLLAPSE_STEPS, FOX_HALT_COLLAPSE_STEPS - 1,
           2.0 * FOX_HALT_COLLAPSE_NORM);
    free(g);
    fox_engine_destroy(e);
}

/* A halt_nan is reported at its step, not at the end of the chunk that the device ran on. */
START_TEST(halt_reported_at_its_step)
{
    fox_config c;
    config(&c, "h_s2", "nan", 0);
    c.halt_rule = FOX_HALT_RULE_STRICT;
    printf("drill nan h_s2: halted at step %lld\n", (long long)fox_test_halt_step(&c, STEPS));
}
END_TEST

/* A fault fires once per arming on the device too: the fold reset never arms it again. */
START_TEST(fault_fires_once_per_arming)
{
    fox_config c;
    config(&c, "h_s2", "nan", 0);
    c.halt_rule = FOX_HALT_RULE_STRICT;
    fox_test_fault_fires_once(&c, "h_s2", FOX_FAULT_NAN, STEPS);
    printf("drill fault once: fold 0 halted, fold 1 clean; re-armed: halted once, clean after "
           "reset_for_fold\n");
}
END_TEST

START_TEST(halts_on_device)
{
    nan_on_nonfinite_loss();
    collapse_on_vanished_gradient();
}
END_TEST

/*
 * The seeds rule on the device, every halting slot with NaN and Inf: flagged, then trained
 * on or halted through halt_nan on the loss, never on the slot alone, with finite weights
 * (the CPU drills pin which of them reach the loss; the device's fused stages may differ).
 */
START_TEST(seeds_rule_every_slot)
{
    for (size_t k = 0; k < sizeof reaches / sizeof reaches[0]; k++) {
        const char *name = fox_sentinel_name(reaches[k].slot);
        for (int inf = 0; inf <= 1; inf++) {
            fox_config c;
            config(&c, name, inf ? "inf" : "nan", 0);
            int halted = fox_test_seeds_drill(&c, STEPS);
            printf("drill seeds %s %s: %s\n", inf ? "inf" : "nan", name,
                   halted ? "halt_nan on the loss" : "sanitized, trained on");
        }
    }
}
END_TEST

/* Under seeds a NaN in h_s2 is sanitized and flagged and the epochs finish; strict halts. */
START_TEST(halt_rule_on_a_nan_in_h_s2)
{
    fox_config c;
    config(&c, "h_s2", "nan", 0);
    fox_test_halt_rule_h_s2(&c, 3, STEPS);
    printf("drill halt rule: NaN in h_s2 flagged over 3 epochs under seeds, halts under "
           "strict\n");
}
END_TEST

/*
 * The daemon's inject and clear commands on a running engine: a fault armed mid-fold
 * (the graphs captured again) leaves training alone until its train step, fires there and
 * nowhere else; clear_flags clears a threshold slot's flag, and the fold trains on clean.
 */
START_TEST(fault_armed_and_flags_cleared_mid_fold)
{
    fox_config c;
    config(&c, NULL, NULL, 0);
    c.halt_rule = FOX_HALT_RULE_STRICT;
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, STEPS, NULL));
    FOX_CK_ENGINE_OK(e, fox_engine_inject_fault(e, -1, "target_q_post_clip", FOX_FAULT_HUGE, 3, 0));
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 3, NULL));
    ck_assert_uint_eq(fox_sentinel_mask(fox_engine_flags(e)), 0);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 1, NULL));
    ck_assert_uint_eq(fox_sentinel_mask(fox_engine_flags(e)), S(FOX_SENT_TARGET_Q_POST_CLIP));
    FOX_CK_ENGINE_OK(e, fox_engine_clear_flags(e));
    ck_assert_uint_eq(fox_sentinel_mask(fox_engine_flags(e)), 0);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, STEPS, NULL));
    ck_assert_uint_eq(fox_sentinel_mask(fox_engine_flags(e)), 0);
    /* A halting fault armed the same way halts at its step under strict, naming its slot. */
    FOX_CK_ENGINE_OK(e, fox_engine_inject_fault(e, -1, "h_s2", FOX_FAULT_NAN, 0, 0));
    ck_assert_int_eq(fox_engine_run_steps(e, STEPS, NULL), FOX_EHALT);
    ck_assert_msg(strstr(fox_engine_errmsg(e), "12 h_s2"), "%s", fox_engine_errmsg(e));
    fox_halt_info h;
    fox_engine_halt_info(e, &h);
    ck_assert_int_eq(h.step, 2 * STEPS + 5);
    printf("drill armed mid-fold: slot 46 at its step, cleared; h_s2 halted at step %lld\n",
           (long long)h.step);
    fox_engine_destroy(e);
}
END_TEST

/* reset_for_fold on the device in both bounds modes, as test_drills does on the CPU. */
START_TEST(reset_for_fold_walks_the_state)
{
    for (int adaptive = 0; adaptive <= 1; adaptive++) {
        fox_config c;
        config(&c, "target_q_post_clip", "huge", adaptive);
        fox_test_fold_reset(&c, STEPS, FOX_SENT_TARGET_Q_POST_CLIP);
        printf("fold reset (%s bounds): Adam, target, counters, flags and ISV as a fresh fold's\n",
               adaptive ? "adaptive" : "fixed");
    }
}
END_TEST

int
main(void)
{
    fox_test_require_cuda("test_cuda_drills");
    fox_log_level = FOX_LOG_ERR;
    Suite *s = suite_create("cuda_drills");
    TCase *tc = tcase_create("drills");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, clean_run_fires_nothing);
    tcase_add_test(tc, halt_slots_fire_within_reach);
    tcase_add_test(tc, threshold_faults_and_adaptive_h_s2);
    tcase_add_test(tc, halt_reported_at_its_step);
    tcase_add_test(tc, halts_on_device);
    tcase_add_test(tc, seeds_rule_every_slot);
    tcase_add_test(tc, halt_rule_on_a_nan_in_h_s2);
    tcase_add_test(tc, fault_fires_once_per_arming);
    tcase_add_test(tc, reset_for_fold_walks_the_state);
    tcase_add_test(tc, fault_armed_and_flags_cleared_mid_fold);
    suite_add_tcase(s, tc);
    return fox_test_run_suite_nofork(s);
}
