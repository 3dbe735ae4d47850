/*
 * test_atoms.c — the moving C51 atom grid on the CPU backend, end to end
 * through the engine (docs/stability.md, "The atom grid"): the same small
 * run at three reward scales, whose grids follow the scale with slots 46
 * and 47 quiet, and the static grid quiet at the same scales; a run whose
 * rewards jump to a million times the returns, where slot 47 fires and
 * Mech 2's bound holds the grid as it grows; the fold reset and the checkpoint of the grid,
 * and a checkpoint from before the grid; and the update rule alone.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "gpu/bounds.h"
#include "gpu/engine.h"
#include "gpu/engine_impl.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"

#define RUN_STEPS 600

typedef struct grid_run {
    float lo[FOX_MAX_BRANCHES], hi[FOX_MAX_BRANCHES];
    float pos_bound[FOX_MAX_BRANCHES]; /* ISV 132–135 */
    float q_abs_ref;
    float grad_norm; /* GRAD_NORM_EMA */
    int fired46, fired47;
} grid_run;

static void
grid_config(fox_config *c, const char *scale, const char *grid)
{
    char kv[64], kg[64];
    snprintf(kv, sizeof kv, "env.reward_scale=%s", scale);
    snprintf(kg, sizeof kg, "model.atom_grid=%s", grid);
    const char *pairs[] = {"data.synth_bars=8000", "train.learning_starts=256", kv, kg, NULL};
    fox_test_small_net(c);
    fox_test_set_pairs(c, pairs);
}

static void
small_config(fox_config *c, const char *scale)
{
    grid_config(c, scale, "moving");
}

static void
read_grid(fox_engine *e, grid_run *g)
{
    const volatile float *isv = fox_engine_isv(e);
    for (int d = 0; d < FOX_MAX_BRANCHES; d++) {
        int k = fox_isv_atom_grid_slot(d);
        g->lo[d] = isv[k];
        g->hi[d] = isv[k + 1];
    }
    g->q_abs_ref = isv[FOX_ISV_Q_ABS_REF];
    g->grad_norm = isv[FOX_ISV_GRAD_NORM_EMA];
    g->fired46 = fox_engine_flags(e)[FOX_SENT_TARGET_Q_POST_CLIP];
    g->fired47 = fox_engine_flags(e)[FOX_SENT_ATOM_SPAN_MAX];
}

static void
run_scale_mode(const char *scale, const char *grid, int adaptive, grid_run *g)
{
    fox_config c;
    grid_config(&c, scale, grid);
    c.bounds_mode = adaptive ? FOX_BOUNDS_ADAPTIVE : FOX_BOUNDS_FIXED;
    fox_engine *e = fox_test_engine(&c);
    int rv = fox_engine_run_steps(e, RUN_STEPS, NULL);
    ck_assert_msg(rv == FOX_OK, "scale %s: %s", scale, fox_engine_errmsg(e));
    read_grid(e, g);
    const volatile float *isv = fox_engine_isv(e);
    for (int d = 0; d < FOX_MAX_BRANCHES; d++)
        g->pos_bound[d] = isv[fox_isv_atom_pos_bound_slot(d)];
    printf("reward scale %s, %s grid%s: Q_ABS_REF %.4g, grid", scale, grid,
           adaptive ? " (adaptive)" : "", (double)g->q_abs_ref);
    for (int d = 0; d < FOX_MAX_BRANCHES; d++)
        printf(" [%.4g, %.4g]", (double)g->lo[d], (double)g->hi[d]);
    printf(", ATOM_POS_BOUND %.4g, GRAD_NORM_EMA %.4g, slot 46 %d, slot 47 %d\n",
           (double)g->pos_bound[0], (double)g->grad_norm, g->fired46, g->fired47);
    fox_engine_destroy(e);
}

static void
run_scale(const char *scale, grid_run *g)
{
    run_scale_mode(scale, "moving", 0, g);
}

/*
 * Reward scales 1, 100 and 5000: every branch's grid is a finite, ordered
 * support inside Mech 2's bound, slots 46 and 47 stay quiet, the grid
 * follows the scale, and the gradient's norm does not. At 1 and 100 it moved off the configured ±10 to the
 * range the targets reach (±0.1, about ±9). At 5000 Q_ABS_REF, which
 * observes the Bellman targets, grew with the rewards (about 37), and with
 * it Mech 2's 10 × q_eff, so the grid spans tens of times its width at
 * 100 (about ±366: Mech 2's bound, under the ±475 the targets reach);
 * observing the C51 head's E[Q], which that grid bounds, Q_ABS_REF stayed
 * at 0.43, the grid at ±10 and slot 46 fired (docs/stability.md, "The atom
 * grid").
 */
START_TEST(grid_follows_reward_scale)
{
    const char *scales[] = {"1", "100", "5000"};
    float span[3], norm_lo = INFINITY, norm_hi = 0.0f;
    for (int k = 0; k < 3; k++) {
        grid_run g;
        run_scale(scales[k], &g);
        float bound = fox_bound_atom_fixed(g.q_abs_ref);
        span[k] = g.hi[0] - g.lo[0];
        norm_lo = fminf(norm_lo, g.grad_norm);
        norm_hi = fmaxf(norm_hi, g.grad_norm);
        for (int d = 0; d < FOX_MAX_BRANCHES; d++) {
            ck_assert_msg(isfinite(g.lo[d]) && isfinite(g.hi[d]) && g.lo[d] < g.hi[d],
                          "scale %s branch %d: grid [%g, %g]", scales[k], d, g.lo[d], g.hi[d]);
            /* The bound of the step that wrote the grid used a Q_ABS_REF one EMA step older. */
            ck_assert_msg(fabsf(g.lo[d]) <= 1.01f * bound && fabsf(g.hi[d]) <= 1.01f * bound,
                          "scale %s branch %d: grid [%g, %g] outside Mech 2's ±%g", scales[k], d,
                          g.lo[d], g.hi[d], bound);
            if (k < 2)
                ck_assert_msg(g.hi[d] < 10.0f && g.lo[d] > -10.0f,
                              "scale %s branch %d: grid [%g, %g] did not move in", scales[k], d,
                              g.lo[d], g.hi[d]);
        }
        ck_assert_msg(!g.fired46 && !g.fired47, "scale %s: slot 46 %d, slot 47 %d", scales[k],
                      g.fired46, g.fired47);
    }
    /* The rewards grow 50-fold from 100 to 5000; a grid held at ±10 would not grow at all. */
    ck_assert_msg(span[0] < span[1] && 10.0f * span[1] < span[2],
                  "spans %g, %g, %g do not follow the reward scale", span[0], span[1], span[2]);
    /*
     * The step does not see the scale: every loss's gradient is in units of it (the C51 head's
     * on the grid, the IQN head's in fox_td_scale, the aux head's label scale), so the gradient
     * norm's EMA, which Mech 6 and train.grad_clip act on, stays within 15 % over a 5,000-fold
     * range (the static grid's grows 2.6-fold from 100 to 5,000).
     */
    ck_assert_msg(norm_hi < 1.15f * norm_lo, "GRAD_NORM_EMA from %g to %g across the scales",
                  norm_lo, norm_hi);
}
END_TEST

/*
 * The default, static grid at the same three scales: Q_ABS_REF grows with
 * the rewards, so slot 46's threshold (95 × q_eff) keeps above the IQN
 * targets at 5000 too, and slot 47 stays quiet on the configured support.
 */
START_TEST(static_grid_quiet_at_every_scale)
{
    const char *scales[] = {"1", "100", "5000"};
    for (int k = 0; k < 3; k++) {
        grid_run g;
        run_scale_mode(scales[k], "static", 0, &g);
        ck_assert_msg(!g.fired46 && !g.fired47, "scale %s: slot 46 %d, slot 47 %d", scales[k],
                      g.fired46, g.fired47);
        for (int d = 0; d < FOX_MAX_BRANCHES; d++)
            ck_assert_msg(g.lo[d] == -10.0f && g.hi[d] == 10.0f, "scale %s branch %d: [%g, %g]",
                          scales[k], d, g.lo[d], g.hi[d]);
    }
}
END_TEST

/*
 * Rewards a million times the returns: at the fold's first steps, before
 * Q_ABS_REF has caught up (its observation is winsorized at its own Mech 1
 * bound, so it grows at most tenfold an observation), the moved grid's span
 * crosses slot 47's threshold (190 × q_eff) before the clamp, and Mech 2
 * holds both ends at its bound, which then follows the scale up.
 */
START_TEST(huge_rewards_bind_mech2)
{
    grid_run g;
    run_scale("1000000", &g);
    ck_assert_msg(g.fired47, "slot 47 did not fire");
    float bound = fox_bound_atom_fixed(g.q_abs_ref);
    ck_assert_msg(bound > 1e4f, "Mech 2's bound %g did not follow the rewards", bound);
    for (int d = 0; d < FOX_MAX_BRANCHES; d++)
        ck_assert_msg(g.lo[d] <= -0.9f * bound && g.hi[d] >= 0.9f * bound &&
                          g.lo[d] >= -1.01f * bound && g.hi[d] <= 1.01f * bound,
                      "branch %d: grid [%g, %g] is not held at Mech 2's bound %g", d, g.lo[d],
                      g.hi[d], bound);
}
END_TEST

/*
 * Adaptive bounds: ATOM_POS_BOUND observes each branch's moved grid, so at
 * the default reward scale the grid moves in unhindered, bound and grid
 * together, no slot fires; at 1e6 the moved grid crosses slot 47's
 * threshold and the Pearl-anchored bound holds it.
 */
START_TEST(adaptive_bound_follows_grid)
{
    grid_run g;
    run_scale_mode("100", "moving", 1, &g);
    for (int d = 0; d < FOX_MAX_BRANCHES; d++) {
        float ext = fmaxf(fabsf(g.lo[d]), fabsf(g.hi[d]));
        ck_assert_msg(g.lo[d] < g.hi[d] && ext < 10.0f, "branch %d: grid [%g, %g]", d, g.lo[d],
                      g.hi[d]);
        ck_assert_msg(g.pos_bound[d] > 0.0f && ext <= fox_bound_adaptive(g.pos_bound[d]),
                      "branch %d: grid [%g, %g] beyond ATOM_POS_BOUND %g", d, g.lo[d], g.hi[d],
                      g.pos_bound[d]);
    }
    ck_assert_msg(!g.fired46 && !g.fired47, "slot 46 %d, slot 47 %d", g.fired46, g.fired47);
    run_scale_mode("1000000", "moving", 1, &g);
    ck_assert_msg(g.fired47, "slot 47 did not fire");
    for (int d = 0; d < FOX_MAX_BRANCHES; d++)
        ck_assert_msg(fmaxf(fabsf(g.lo[d]), fabsf(g.hi[d])) <= fox_bound_adaptive(g.pos_bound[d]),
                      "branch %d: grid [%g, %g] beyond ATOM_POS_BOUND %g", d, g.lo[d], g.hi[d],
                      g.pos_bound[d]);
}
END_TEST

/* The grid is in the checkpoint (the ISV is), and a fold's reset unsets it. */
START_TEST(grid_checkpoint_and_fold_reset)
{
    fox_config c;
    small_config(&c, "100");
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 400, NULL));
    grid_run a, b;
    read_grid(e, &a);
    char path[] = "/tmp/fox_atoms_XXXXXX";
    fox_test_temp_file(path);
    FOX_CK_ENGINE_OK(e, fox_engine_checkpoint_save(e, path));
    fox_engine *f = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(f, fox_engine_checkpoint_load(f, path));
    read_grid(f, &b);
    unlink(path);
    for (int d = 0; d < FOX_MAX_BRANCHES; d++)
        ck_assert_msg(a.lo[d] == b.lo[d] && a.hi[d] == b.hi[d],
                      "branch %d: saved [%g, %g], loaded [%g, %g]", d, a.lo[d], a.hi[d], b.lo[d],
                      b.hi[d]);
    FOX_CK_ENGINE_OK(f, fox_engine_begin_fold(f, 1));
    read_grid(f, &b);
    for (int d = 0; d < FOX_MAX_BRANCHES; d++)
        ck_assert_msg(b.lo[d] == 0.0f && b.hi[d] == 0.0f, "branch %d: [%g, %g] after the reset",
                      d, b.lo[d], b.hi[d]);
    fox_engine_destroy(f);
    fox_engine_destroy(e);
}
END_TEST

/*
 * A checkpoint written before the grid's ISV slots were named: the same
 * file with the fingerprint of the tables without them (in the header and
 * ISV 115–116) and 0 in slots 121–128, where that layout had reserved
 * slots. It loads; its grid is unset, so the configured support, and the
 * ISV names this layout again. The header's offsets are the documented
 * format's (gpu/checkpoint.c).
 */
START_TEST(checkpoint_before_grid_loads)
{
    fox_config c;
    small_config(&c, "1");
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 300, NULL));
    char path[] = "/tmp/fox_atoms_XXXXXX";
    fox_test_temp_file(path);
    FOX_CK_ENGINE_OK(e, fox_engine_checkpoint_save(e, path));
    uint64_t before = e->fingerprint_before_grid;
    ck_assert(before != e->fingerprint);
    size_t len, np = fox_engine_param_count(e);
    char *buf = fox_test_read_file(path, &len);
    ck_assert_ptr_nonnull(buf);
    const size_t hdr = 56;
    uint64_t payload;
    memcpy(&payload, buf + 40, 8);
    ck_assert_uint_eq(len, hdr + payload);
    float *isv = (float *)(buf + hdr + 16 * np);
    for (int i = FOX_ISV_ATOM_GRID_BASE; i < FOX_ISV_ATOM_GRID_BASE + 8; i++) {
        ck_assert_msg(isv[i] != 0.0f, "slot %d: the run left no grid to drop", i);
        isv[i] = 0.0f;
    }
    fox_isv_store_fingerprint(isv, before);
    memcpy(buf + 16, &before, 8);
    uint32_t pcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)buf + hdr, (uInt)payload);
    memcpy(buf + 48, &pcrc, 4);
    uint32_t hcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)buf, 52);
    memcpy(buf + 52, &hcrc, 4);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
    fox_engine *g = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(g, fox_engine_checkpoint_load(g, path));
    unlink(path);
    const volatile float *gi = fox_engine_isv(g);
    for (int i = FOX_ISV_ATOM_GRID_BASE; i < FOX_ISV_ATOM_GRID_BASE + 8; i++)
        ck_assert_msg(gi[i] == 0.0f, "slot %d: %g after the load", i, gi[i]);
    ck_assert(fox_isv_load_fingerprint((const float *)gi) == g->fingerprint);
    /* The train steps once the emptied ring refills move the grid in from the configured ±10. */
    FOX_CK_ENGINE_OK(g, fox_engine_run_steps(g, 40, NULL));
    ck_assert(gi[FOX_ISV_ATOM_GRID_BASE] > -10.0f && gi[FOX_ISV_ATOM_GRID_BASE] < 0.0f);
    fox_engine_destroy(g);
    fox_engine_destroy(e);
}
END_TEST

/*
 * The rule alone (fixed mode, Q_ABS_REF below 1: bound 10): an unset moving
 * grid reduces its targets over [0, 0] and, once Q_ABS_REF is observed,
 * takes them as they are, the batch's reward range; unset under the static rule it starts from the configured
 * support and moves 5 % of the way; a set grid moves 5 % of the way to its
 * targets and, repeated, settles on the range r / (1 − g) the Bellman
 * targets reach; a target past the bound is clamped there and reported in
 * the span; a non-finite target leaves its end.
 */
START_TEST(grid_rule)
{
    float isv[FOX_ISV_TOTAL_DIM] = {0};
    int k = fox_isv_atom_grid_slot(1);
    float base_lo, base_hi;
    fox_atom_grid_base(isv, 1, 1, -10.0f, 10.0f, &base_lo, &base_hi);
    ck_assert(base_lo == 0.0f && base_hi == 0.0f);
    fox_atom_grid_base(isv, 0, 1, -10.0f, 10.0f, &base_lo, &base_hi);
    ck_assert(base_lo == -10.0f && base_hi == 10.0f);
    float span = fox_atom_grid_update(isv, NULL, 0, 0, 1, -10.0f, 10.0f, -2.0f, 4.0f);
    ck_assert_float_eq_tol(isv[k], -10.0f + 0.05f * 8.0f, 1e-5f);
    ck_assert_float_eq_tol(isv[k + 1], 10.0f - 0.05f * 6.0f, 1e-5f);
    ck_assert_float_eq_tol(span, isv[k + 1] - isv[k], 1e-5f);
    isv[k] = isv[k + 1] = 0.0f;
    span = fox_atom_grid_update(isv, NULL, 0, 1, 1, -10.0f, 10.0f, -2.0f, 4.0f);
    ck_assert(span == 0.0f && fox_atom_grid_unset(isv, 1)); /* Q_ABS_REF not yet observed */
    isv[FOX_ISV_Q_ABS_REF] = 0.5f;                          /* observed; q_eff still 1 */
    span = fox_atom_grid_update(isv, NULL, 0, 1, 1, -10.0f, 10.0f, -2.0f, 4.0f);
    ck_assert(isv[k] == -2.0f && isv[k + 1] == 4.0f && span == 6.0f);
    fox_atom_grid_base(isv, 1, 1, -10.0f, 10.0f, &base_lo, &base_hi);
    ck_assert(base_lo == -2.0f && base_hi == 4.0f);
    ck_assert(isv[fox_isv_atom_grid_slot(0)] == 0.0f && isv[fox_isv_atom_grid_slot(2)] == 0.0f);
    /* Rewards in [−0.5, 1] with g = 0.5: the fixed point is [−1, 2]. */
    for (int t = 0; t < 2000; t++) {
        float lo = isv[k], hi = isv[k + 1];
        fox_atom_grid_update(isv, NULL, 0, 1, 1, -10.0f, 10.0f, -0.5f + 0.5f * lo,
                             1.0f + 0.5f * hi);
    }
    ck_assert_float_eq_tol(isv[k], -1.0f, 1e-3f);
    ck_assert_float_eq_tol(isv[k + 1], 2.0f, 1e-3f);
    span = fox_atom_grid_update(isv, NULL, 0, 1, 1, -10.0f, 10.0f, -1.0f, 1e6f);
    ck_assert_float_eq(isv[k + 1], 10.0f);
    ck_assert(span > 4e4f);
    fox_atom_grid_update(isv, NULL, 0, 1, 1, -10.0f, 10.0f, NAN, INFINITY);
    ck_assert_float_eq_tol(isv[k], -1.0f, 1e-3f);
    ck_assert_float_eq(isv[k + 1], 10.0f);
    ck_assert_int_eq(fox_isv_atom_grid_slot(4), -1);
}
END_TEST

static Suite *
atoms_suite(void)
{
    Suite *s = suite_create("atoms");
    TCase *rule = tcase_create("rule");
    tcase_add_test(rule, grid_rule);
    suite_add_tcase(s, rule);
    TCase *runs = tcase_create("runs");
    tcase_add_test(runs, grid_follows_reward_scale);
    tcase_add_test(runs, static_grid_quiet_at_every_scale);
    tcase_add_test(runs, huge_rewards_bind_mech2);
    tcase_add_test(runs, adaptive_bound_follows_grid);
    tcase_add_test(runs, grid_checkpoint_and_fold_reset);
    tcase_add_test(runs, checkpoint_before_grid_loads);
    suite_add_tcase(s, runs);
    return s;
}

int
main(void)
{
    return fox_test_run_suite(atoms_suite());
}
