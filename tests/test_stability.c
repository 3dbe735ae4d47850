/*
 * test_stability.c — the maths of the numerical-stability system and what
 * ties its tables together: clamp_finite and the fixed-mode formulas, the
 * 256-bin p99, Pearls A–D (the seed's tests), the Pearl D states' reset
 * against the ISV rules, the layout fingerprint over both tables, and
 * docs/stability.md against both tables.
 *
 * Each slot table on its own is tested beside it (gpu/isv_test.c,
 * gpu/sentinel_test.c). It does not run the engine: wiring these into a
 * training step is tested with the engine.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gpu/bounds.h"
#include "common/error.h"
#include "gpu/isv.h"
#include "gpu/layout.h"
#include "gpu/model.h"
#include "gpu/rng.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static int
cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank 99th percentile of |x| (the seed's "sorted ground truth"). */
static float
sorted_p99_abs(const float *x, size_t n)
{
    float *a = malloc(n * sizeof *a);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]))
            a[k++] = fabsf(x[i]);
    qsort(a, k, sizeof *a, cmp_float);
    size_t rank = (size_t)ceil(0.99 * (double)k); /* 1-based */
    float v = a[rank - 1];
    free(a);
    return v;
}

static float
range_abs(const float *x, size_t n)
{
    float lo = FLT_MAX, hi = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!isfinite(a))
            continue;
        lo = a < lo ? a : lo;
        hi = a > hi ? a : hi;
    }
    return hi - lo;
}

static uint32_t
float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- Pearl D states follow the ISV reset rules -------------------------------------------- */

START_TEST(wiener_reset_follows_isv_rules)
{
    fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        ws[i] = (fox_wiener_state){1.0f, 2.0f, 3.0f};
    fox_bounds_wiener_reset(ws);
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++) {
        int keep = fox_isv_reset_rule(i, NULL) == FOX_ISV_KEEP;
        ck_assert(ws[i].x_lag == (keep ? 3.0f : 0.0f));
        ck_assert(ws[i].sample_var == (keep ? 1.0f : 0.0f));
        ck_assert(ws[i].diff_var == (keep ? 2.0f : 0.0f));
    }
    fox_bounds_wiener_init(ws);
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        ck_assert(ws[i].x_lag == 0.0f && ws[i].sample_var == 0.0f && ws[i].diff_var == 0.0f);
}
END_TEST

/* ---- clamp_finite and fixed-mode formulas ------------------------------------------------- */

START_TEST(clamp_finite_cases)
{
    ck_assert(fox_clamp_finite(NAN, 10.0f) == 0.0f);
    ck_assert(fox_clamp_finite(INFINITY, 10.0f) == 0.0f);
    ck_assert(fox_clamp_finite(-INFINITY, 10.0f) == 0.0f);
    ck_assert(fox_clamp_finite(1e30f, 10.0f) == 10.0f);
    ck_assert(fox_clamp_finite(-FLT_MAX, 10.0f) == -10.0f);
    ck_assert(fox_clamp_finite(0.5f, 10.0f) == 0.5f);
    ck_assert(fox_clamp_finite(-7.25f, 10.0f) == -7.25f);
    ck_assert(fox_clamp_finite(10.0f, 10.0f) == 10.0f);
    ck_assert(fox_clamp_finite(0.0f, 10.0f) == 0.0f);
}
END_TEST

START_TEST(fixed_mode_formulas)
{
    /* Mech 1 / 2: 10 × max(Q_ABS_REF, 1); ε on the multiplier, never on the bound. */
    ck_assert(fox_bound_target_q_fixed(0.0f) == 10.0f);
    ck_assert(fox_bound_target_q_fixed(0.5f) == 10.0f);
    ck_assert(fox_bound_target_q_fixed(3.0f) == 30.0f);
    ck_assert(fox_bound_target_q_fixed(NAN) == 10.0f);
    ck_assert(fox_bound_target_q_fixed(INFINITY) == 10.0f);
    ck_assert(fox_bound_atom_fixed(4.0f) == 40.0f);
    /* Mech 9: 100 × max(Q_ABS_REF, 1). */
    ck_assert(fox_bound_weight_fixed(50.0f) == 5000.0f);
    ck_assert(fox_bound_weight_fixed(0.0f) == 100.0f);
    /* Mech 10: 100 × max(H_S2_RMS_EMA, 1). */
    ck_assert(fox_bound_h_s2_fixed(0.0f) == 100.0f);
    ck_assert(fox_bound_h_s2_fixed(2.0f) == 200.0f);
    /* Mech 6 cap: 100 × slow EMA × max(Q_ABS_REF, 1), floored at MIN_CLIP. */
    ck_assert(fox_bound_grad_clip_cap(0.0f, 0.0f) == 1.0f);
    ck_assert(fox_bound_grad_clip_cap(0.5f, 2.0f) == 100.0f);
    ck_assert(fox_bound_grad_clip_cap(2.0f, 0.0f) == 200.0f);
    ck_assert(fox_bound_grad_clip_cap(NAN, 1.0f) == 1.0f);
    /* SP1 Phase C: backward inputs are guarded at 1e6 × max(isv, 1). */
    ck_assert(fox_bound_backward_guard(0.0f) == 1e6f);
    ck_assert(fox_bound_backward_guard(2.0f) == 2e6f);
    /* Adaptive consumers floor the Pearl A sentinel at 1. */
    ck_assert(fox_bound_adaptive(0.0f) == 1.0f);
    ck_assert(fox_bound_adaptive(7.5f) == 7.5f);
    /* Fixed-rate EMA with the zero sentinel. */
    ck_assert(fox_ema_first(0.0f, 4.0f, 0.1f) == 4.0f);
    ck_assert_float_eq_tol(fox_ema_first(4.0f, 5.0f, 0.1f), 4.1f, 1e-6f);
    ck_assert(fox_ema_first(4.0f, NAN, 0.1f) == 4.0f);
}
END_TEST

/* Structural constants: compile-time, not config (a change here is a code change). */
_Static_assert(FOX_P99_BINS == 256, "256 bins (seed)");
_Static_assert(sizeof(fox_wiener_state) == 3 * sizeof(float), "wiener_state is 3 floats (seed)");
_Static_assert(FOX_ISV_TOTAL_DIM == 171 && FOX_SENTINEL_SLOTS == 50, "table sizes");

START_TEST(meta_constants_structural)
{
    ck_assert(FOX_P99_PERCENTILE == 0.99f);
    ck_assert(FOX_PEARL_ALPHA_META == 1e-3f);
    ck_assert(FOX_PEARL_EPS_DIV == 1e-8f);
    ck_assert(FOX_PEARL_EPS_CLAMP_FLOOR == 1.0f);
    ck_assert_float_eq_tol(FOX_PEARL_C_EXPECTED_RATE, 1.0f - FOX_P99_PERCENTILE, 1e-7f);
    ck_assert(FOX_MECH1_TARGET_Q_MULT == 10.0f && FOX_MECH2_ATOM_MULT == 10.0f);
    ck_assert(FOX_MECH6_CAP_MULT == 100.0f && FOX_MECH6_MIN_CLIP == 1.0f);
    ck_assert(FOX_MECH9_WEIGHT_MULT == 100.0f && FOX_MECH10_H_S2_MULT == 100.0f);
    ck_assert(FOX_BWD_GUARD_MULT == 1e6f);
    /* Clamp vs diagnostic is 10×: slot 44 over Mech 9, slot 49 over Mech 10. */
    ck_assert(fox_sentinel_info(44)->mult == 10.0f * FOX_MECH9_WEIGHT_MULT);
    ck_assert(fox_sentinel_info(49)->mult == 10.0f * FOX_MECH10_H_S2_MULT);
}
END_TEST

/* ---- p99 ----------------------------------------------------------------------------------- */

enum { NSAMP = 4096 };

/* The seed's test: 4096 N(0,1) samples, p99 of |x| (≈ 2.576) within 5 %. */
START_TEST(p99_normal)
{
    static float x[NSAMP];
    fox_rng r;
    fox_rng_seed(&r, 42);
    for (int i = 0; i < NSAMP; i++)
        x[i] = (float)fox_rng_normal(&r);
    float p = fox_p99_abs(x, NSAMP);
    float truth = sorted_p99_abs(x, NSAMP);
    ck_assert_msg(fabsf(p - 2.5758f) / 2.5758f < 0.05f, "p99 %g vs 2.576", (double)p);
    ck_assert_msg(fabsf(p - truth) / truth < 0.05f, "p99 %g vs sorted %g", (double)p,
                  (double)truth);
    ck_assert_msg(fabsf(p - truth) <= range_abs(x, NSAMP) / FOX_P99_BINS * 1.001f,
                  "p99 %g more than a bin from %g", (double)p, (double)truth);
}
END_TEST

/* Heavy tails: Student-t(3) within 5 %, Cauchy (a ratio of normals) within one bin. */
START_TEST(p99_heavy_tailed)
{
    static float t3[NSAMP], cauchy[NSAMP];
    fox_rng r;
    fox_rng_seed(&r, 7);
    for (int i = 0; i < NSAMP; i++) {
        double z = fox_rng_normal(&r), c = 0.0;
        for (int k = 0; k < 3; k++) {
            double u = fox_rng_normal(&r);
            c += u * u;
        }
        t3[i] = (float)(z / sqrt(c / 3.0));
        cauchy[i] = (float)(fox_rng_normal(&r) / fox_rng_normal(&r));
    }
    float p = fox_p99_abs(t3, NSAMP), truth = sorted_p99_abs(t3, NSAMP);
    ck_assert_msg(fabsf(p - truth) / truth < 0.05f, "t3 p99 %g vs %g", (double)p, (double)truth);
    ck_assert(fabsf(p - truth) <= range_abs(t3, NSAMP) / FOX_P99_BINS * 1.001f);
    /*
     * Cauchy's max is ~40× its p99, so a linear bin is ~15 % of p99 wide here;
     * the guarantee is one bin (the seed chose linear bins for resolution at
     * the top of the range, where the clamps act).
     */
    p = fox_p99_abs(cauchy, NSAMP);
    truth = sorted_p99_abs(cauchy, NSAMP);
    float bin = range_abs(cauchy, NSAMP) / FOX_P99_BINS;
    ck_assert_msg(fabsf(p - truth) <= bin * 1.001f, "cauchy p99 %g vs %g, bin %g", (double)p,
                  (double)truth, (double)bin);
}
END_TEST

START_TEST(p99_degenerate)
{
    static float z[NSAMP];
    memset(z, 0, sizeof z);
    ck_assert(fox_p99_abs(z, NSAMP) == 0.0f); /* all zero: caller skips the update */
    ck_assert(fox_p99_abs(z, 0) == 0.0f);
    ck_assert(fox_p99_abs(NULL, 0) == 0.0f);
    for (int i = 0; i < NSAMP; i++)
        z[i] = (i & 1) ? -3.5f : 3.5f;
    ck_assert(fox_p99_abs(z, NSAMP) == 3.5f); /* all |x| equal */
    float one = -2.0f;
    ck_assert(fox_p99_abs(&one, 1) == 2.0f);
    for (int i = 0; i < NSAMP; i++)
        z[i] = NAN;
    ck_assert(fox_p99_abs(z, NSAMP) == 0.0f); /* nothing finite */
}
END_TEST

START_TEST(p99_skips_nonfinite_and_spans)
{
    static float x[NSAMP + 3];
    fox_rng r;
    fox_rng_seed(&r, 3);
    for (int i = 0; i < NSAMP; i++)
        x[i] = (float)fox_rng_normal(&r);
    float clean = fox_p99_abs(x, NSAMP);
    x[NSAMP] = NAN;
    x[NSAMP + 1] = INFINITY;
    x[NSAMP + 2] = -INFINITY;
    ck_assert(fox_p99_abs(x, NSAMP + 3) == clean);
    /* Two runs of one buffer = their concatenation. */
    fox_span sp[2] = {{0, 1000}, {1000, NSAMP - 1000}};
    ck_assert(fox_p99_abs_spans(x, sp, 2) == clean);
    ck_assert(fox_p99_abs_spans(x, sp, 0) == 0.0f);
    /* Pass 2's bin: the range's ends land in the first and last bins. */
    ck_assert_int_eq(fox_p99_bin(0.0f, 0.0f, 256.0f / 4.0f), 0);
    ck_assert_int_eq(fox_p99_bin(4.0f, 0.0f, 256.0f / 4.0f), FOX_P99_BINS - 1);
    ck_assert_int_eq(fox_p99_bin(2.0f, 0.0f, 256.0f / 4.0f), 128);
}
END_TEST

/* ---- Pearls A and D (the seed's six tests) --------------------------------------------------- */

START_TEST(pearl_a_replaces_sentinel)
{
    fox_wiener_state s = {0.0f, 0.0f, 0.0f};
    float m = fox_pearls_ad_update(0.0f, &s, 3.7f);
    ck_assert(m == 3.7f); /* the first observation, not an EMA step towards it */
    ck_assert(s.x_lag == 3.7f);
    ck_assert(s.sample_var == 0.0f && s.diff_var == 0.0f); /* Wiener maths bypassed */
    /* Through the ISV: a zero bound slot takes the first p99 observation. */
    float isv[FOX_ISV_TOTAL_DIM];
    fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    fox_bounds_wiener_init(ws);
    fox_bounds_observe(isv, ws, FOX_ISV_TARGET_Q_BOUND, 12.5f);
    ck_assert(isv[FOX_ISV_TARGET_Q_BOUND] == 12.5f);
    /* A non-finite observation is ignored, the sentinel stays. */
    fox_bounds_observe(isv, ws, FOX_ISV_H_S2_BOUND, NAN);
    ck_assert(isv[FOX_ISV_H_S2_BOUND] == 0.0f && ws[FOX_ISV_H_S2_BOUND].x_lag == 0.0f);
}
END_TEST

START_TEST(pearl_a_only_when_both_zero)
{
    /* Estimate 0 but x_lag set (the signal crossed zero after bootstrap): Pearl D, no replace. */
    fox_wiener_state s = {0.5f, 0.0f, 2.0f};
    float m = fox_pearls_ad_update(0.0f, &s, 5.0f);
    ck_assert_msg(m != 5.0f, "Pearl A re-fired: %g", (double)m);
    ck_assert(fabsf(m) < 5.0f);
    /* x_lag 0 but an estimate set: Pearl D. */
    fox_wiener_state s2 = {0.5f, 0.1f, 0.0f};
    m = fox_pearls_ad_update(1.5f, &s2, 5.0f);
    ck_assert(m != 5.0f);
    /* After A and some D steps, driving the estimate to 0 does not re-arm A. */
    fox_wiener_state s3 = {0.0f, 0.0f, 0.0f};
    m = fox_pearls_ad_update(0.0f, &s3, 1.0f);
    for (int i = 0; i < 10; i++)
        m = fox_pearls_ad_update(m, &s3, 1.0f + 0.01f * (float)(i & 1));
    ck_assert(s3.x_lag != 0.0f);
    m = fox_pearls_ad_update(0.0f, &s3, 9.0f);
    ck_assert_msg(m != 9.0f, "Pearl A re-fired after D: %g", (double)m);
}
END_TEST

START_TEST(pearl_d_does_not_subsume_a)
{
    /* On a zero state the Wiener rate is 0, not 1: without Pearl A the sentinel never leaves 0. */
    fox_wiener_state s = {0.0f, 0.0f, 0.0f};
    ck_assert(fox_wiener_alpha(&s) == 0.0f);
    float m = fox_pearl_d_update(0.0f, &s, 4.0f);
    ck_assert(m == 0.0f);
    ck_assert(s.x_lag == 4.0f); /* it only learned its lag */
    /* With Pearl A it is the observation at once. */
    fox_wiener_state s2 = {0.0f, 0.0f, 0.0f};
    ck_assert(fox_pearls_ad_update(0.0f, &s2, 4.0f) == 4.0f);
}
END_TEST

/* Stationary N(5, 1): the estimate anchors (α → small) near the true level. */
START_TEST(pearl_d_anchors_stationary)
{
    fox_rng r;
    fox_rng_seed(&r, 11);
    fox_wiener_state s = {0.0f, 0.0f, 0.0f};
    float m = 0.0f;
    double alpha_sum = 0.0, err_sum = 0.0;
    int tail = 0;
    for (int t = 0; t < 20000; t++) {
        m = fox_pearls_ad_update(m, &s, 5.0f + (float)fox_rng_normal(&r));
        if (t >= 15000) {
            alpha_sum += fox_wiener_alpha(&s);
            err_sum += fabs(m - 5.0);
            tail++;
        }
    }
    double alpha_mean = alpha_sum / tail, err_mean = err_sum / tail;
    ck_assert_msg(alpha_mean < 0.05, "alpha did not anchor: %g", alpha_mean);
    ck_assert_msg(err_mean < 0.15, "estimate wandered: mean |m - 5| = %g", err_mean);
    /* Far smoother than the signal (σ = 1): a plain copy would have mean error 0.8. */
}
END_TEST

/* A step 1 → 3 after a long quiet stretch: α rises and the estimate follows. */
START_TEST(pearl_d_tracks_step_change)
{
    fox_rng r;
    fox_rng_seed(&r, 12);
    fox_wiener_state s = {0.0f, 0.0f, 0.0f};
    float m = 0.0f;
    for (int t = 0; t < 5000; t++)
        m = fox_pearls_ad_update(m, &s, 1.0f + 0.1f * (float)fox_rng_normal(&r));
    float alpha_before = fox_wiener_alpha(&s);
    ck_assert_msg(fabsf(m - 1.0f) < 0.05f, "before the step: %g", (double)m);
    float alpha_max = 0.0f;
    int t_reach = -1;
    for (int t = 0; t < 2000; t++) {
        m = fox_pearls_ad_update(m, &s, 3.0f + 0.1f * (float)fox_rng_normal(&r));
        float a = fox_wiener_alpha(&s);
        alpha_max = a > alpha_max ? a : alpha_max;
        if (t_reach < 0 && fabsf(m - 3.0f) < 0.05f * 3.0f)
            t_reach = t;
    }
    ck_assert_msg(alpha_max > 10.0f * alpha_before + 0.1f, "alpha %g -> max %g",
                  (double)alpha_before, (double)alpha_max);
    ck_assert_msg(t_reach >= 0 && t_reach < 200, "within 5 %% of the new level after %d steps",
                  t_reach);
    ck_assert_msg(fabsf(m - 3.0f) < 0.05f * 3.0f, "after the step: %g", (double)m);
}
END_TEST

/* A VALUE-reset slot (H_S2_RMS_EMA = 1.0) with a fresh state: D primes x_lag, then converges. */
START_TEST(pearl_d_from_neutral_value)
{
    fox_rng r;
    fox_rng_seed(&r, 13);
    fox_wiener_state s = {0.0f, 0.0f, 0.0f};
    float m = 1.0f;
    m = fox_pearls_ad_update(m, &s, 0.3f);
    ck_assert(m == 1.0f && s.x_lag == 0.3f); /* no Pearl A, no jump from a missing lag */
    for (int t = 0; t < 2000; t++)
        m = fox_pearls_ad_update(m, &s, 0.3f + 0.01f * (float)fox_rng_normal(&r));
    ck_assert_msg(fabsf(m - 0.3f) < 0.015f, "from neutral 1.0: %g", (double)m);
}
END_TEST

/* One step of Mech 6 in adaptive mode as the backends take it: the slow EMA first. */
static float
adaptive_clip_step(float *isv, fox_wiener_state *ws, float norm)
{
    float last = isv[FOX_ISV_GRAD_CLIP];
    float x = last > 0.0f && norm > last ? last : norm;
    isv[FOX_ISV_GRAD_NORM_SLOW_EMA] =
        fox_ema_first(isv[FOX_ISV_GRAD_NORM_SLOW_EMA], x, FOX_MECH6_SLOW_ALPHA);
    return isv[FOX_ISV_GRAD_CLIP] = fox_bound_grad_clip_adaptive(isv, ws, norm);
}

/*
 * SP4 Mech 6: a gradient norm that grows tenfold, then falls back. The
 * adaptive bound follows it up and down (fed the norm winsorized at the
 * clip, it could never rise above max(first observation, 1)), and on the
 * stationary stretch the clip engages on about the 1 % of steps a p99
 * implies.
 */
START_TEST(adaptive_grad_clip_follows_norm)
{
    fox_rng r;
    fox_rng_seed(&r, 21);
    float isv[FOX_ISV_TOTAL_DIM] = {0};
    fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_bounds_wiener_init(ws);
    float first = 0.0f, peak = 0.0f;
    int engaged = 0, counted = 0;
    for (int t = 0; t < 9000; t++) {
        /* 2 for 3,000 steps, a ramp to 20 over 3,000, then 2 again; 20 % noise. */
        float level = t < 3000   ? 2.0f
                      : t < 6000 ? 2.0f + 18.0f * (float)(t - 3000) / 3000.0f
                                 : 2.0f;
        float norm = level * (1.0f + 0.2f * (float)fox_rng_normal(&r));
        norm = norm > 0.05f ? norm : 0.05f;
        float clip = adaptive_clip_step(isv, ws, norm);
        if (t == 0)
            first = clip;
        if (t >= 1000 && t < 3000) {
            engaged += norm > clip;
            counted++;
        }
        if (t == 5999)
            peak = isv[FOX_ISV_GRAD_CLIP_BOUND];
    }
    float end = isv[FOX_ISV_GRAD_CLIP_BOUND];
    double rate = (double)engaged / counted;
    printf("adaptive clip: first %.3g, at the ramp's top %.3g (level 20), 3,000 steps after the "
           "fall %.3g (level 2); stationary engagement %.4f\n",
           (double)first, (double)peak, (double)end, rate);
    ck_assert_msg(peak > 20.0f, "the bound did not follow the norm up: %g", (double)peak);
    ck_assert_msg(end < 5.0f, "the bound did not follow the norm down: %g", (double)end);
    ck_assert_msg(rate > 0.001 && rate < 0.03, "the clip engages on %.4f of stationary steps",
                  rate);
    /* A non-finite norm is not observed. */
    float level = isv[FOX_ISV_GRAD_NORM_EMA], before = isv[FOX_ISV_GRAD_CLIP_BOUND];
    ck_assert(fox_bound_grad_clip_adaptive(isv, ws, NAN) == fox_bound_adaptive(before));
    ck_assert(isv[FOX_ISV_GRAD_NORM_EMA] == level && isv[FOX_ISV_GRAD_CLIP_BOUND] == before);
}
END_TEST

/*
 * SP4 Mech 6's cap: a norm that jumps from 2 to 10,000 and stays there. The
 * p99 bound about the level jumps with it within two steps; the clip, capped
 * at 100 × the slow EMA × max(Q_ABS_REF, 1), rises at most ×(1 + 99 α) a
 * step (the seeds' cap), and still reaches the new scale once it lasts.
 */
START_TEST(adaptive_grad_clip_capped)
{
    float isv[FOX_ISV_TOTAL_DIM] = {0};
    fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_bounds_wiener_init(ws);
    for (int t = 0; t < 3000; t++)
        adaptive_clip_step(isv, ws, 2.0f);
    float last = isv[FOX_ISV_GRAD_CLIP], clip = last;
    const float pace = 1.0f + (FOX_MECH6_CAP_MULT - 1.0f) * FOX_MECH6_SLOW_ALPHA;
    for (int t = 0; t < 2000; t++) {
        clip = adaptive_clip_step(isv, ws, 1e4f);
        float cap =
            fox_bound_grad_clip_cap(isv[FOX_ISV_GRAD_NORM_SLOW_EMA], isv[FOX_ISV_Q_ABS_REF]);
        ck_assert_msg(clip <= cap, "step %d: clip %g above the cap %g", t, (double)clip,
                      (double)cap);
        if (t > 0)
            ck_assert_msg(clip <= last * pace * 1.0001f, "step %d: the clip went from %g to %g", t,
                          (double)last, (double)clip);
        if (t == 2)
            ck_assert_msg(isv[FOX_ISV_GRAD_CLIP_BOUND] > 20.0f * clip,
                          "the bound %g did not jump ahead of the capped clip %g",
                          (double)isv[FOX_ISV_GRAD_CLIP_BOUND], (double)clip);
        last = clip;
    }
    ck_assert_msg(clip > 5e3f, "a lasting change of scale was never reached: clip %g",
                  (double)clip);
}
END_TEST

/* ---- Pearls B and C ------------------------------------------------------------------------- */

START_TEST(pearl_c_engagement)
{
    fox_pearl_c_state s = {0.0f};
    float bound = 5.0f;
    /* The theoretical 1 % engagement never trips it. */
    for (int t = 0; t < 20000; t++)
        ck_assert_int_eq(fox_pearl_c_update(&s, 10.0f, 1000.0f, 50.0f, &bound), 0);
    ck_assert(bound == 5.0f);
    /* Saturation (half the values pinned at the bound): detected, bound forced to step_max. */
    int t_fire = -1;
    for (int t = 0; t < 1000 && t_fire < 0; t++)
        if (fox_pearl_c_update(&s, 500.0f, 1000.0f, 50.0f, &bound))
            t_fire = t;
    ck_assert_msg(t_fire >= 0 && t_fire < 100, "saturation detected at %d", t_fire);
    ck_assert(bound == 50.0f);
    ck_assert(s.rate_ema == FOX_PEARL_C_EXPECTED_RATE); /* re-armed */
    /* A bump never lowers a bound, and nothing happens without values. */
    s.rate_ema = 1.0f;
    ck_assert_int_eq(fox_pearl_c_update(&s, 1.0f, 1.0f, 20.0f, &bound), 1);
    ck_assert(bound == 50.0f);
    ck_assert_int_eq(fox_pearl_c_update(&s, 0.0f, 0.0f, 20.0f, &bound), 0);
}
END_TEST

START_TEST(pearl_b_group_stats)
{
    enum { N = 3000 };
    static float w[N + 64], g[N + 64], m[N + 64], v[N + 64];
    fox_rng r;
    fox_rng_seed(&r, 5);
    for (int i = 0; i < N + 64; i++) {
        w[i] = (float)fox_rng_normal(&r);
        g[i] = 0.01f * (float)fox_rng_normal(&r) + 0.001f * w[i];
        m[i] = 0.1f * g[i];
        v[i] = g[i] * g[i];
    }
    /* Two tensors with 64 floats of layout padding between them. */
    fox_span sp[2] = {{0, 1000}, {1064, N - 1000}};
    fox_group_stats st;
    FOX_CK_OK(fox_pearl_b_group(w, g, m, v, sp, 2, &st));
    ck_assert(st.weight_p99 == fox_p99_abs_spans(w, sp, 2));
    ck_assert(st.adam_m_p99 == fox_p99_abs_spans(m, sp, 2));
    ck_assert(st.adam_v_p99 == fox_p99_abs_spans(v, sp, 2));
    double dot = 0.0, sq = 0.0;
    for (int k = 0; k < 2; k++)
        for (size_t i = sp[k].offset; i < sp[k].offset + sp[k].len; i++) {
            dot += (double)w[i] * g[i];
            sq += (double)w[i] * w[i];
        }
    ck_assert_float_eq_tol(st.wd_rate, fabs(dot) / sq, 1e-5 * fabs(dot) / sq);
    /* Missing buffers leave NaN, which the ISV update skips. */
    FOX_CK_OK(fox_pearl_b_group(w, NULL, NULL, v, sp, 2, &st));
    ck_assert(isnan(st.adam_m_p99) && isnan(st.wd_rate) && isfinite(st.weight_p99));
    float isv[FOX_ISV_TOTAL_DIM];
    fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    fox_bounds_wiener_init(ws);
    fox_bounds_observe_group(isv, ws, FOX_GROUP_IQN, &st);
    ck_assert(isv[FOX_ISV_WEIGHT_BOUND_IQN] == st.weight_p99); /* Pearl A */
    ck_assert(isv[FOX_ISV_ADAM_V_BOUND_IQN] == st.adam_v_p99);
    ck_assert(isv[FOX_ISV_ADAM_M_BOUND_IQN] == 0.0f && isv[FOX_ISV_WD_RATE_IQN] == 0.0f);
    ck_assert(isv[FOX_ISV_WEIGHT_BOUND_GRN1] == 0.0f);       /* other groups untouched */
    fox_bounds_observe_group(isv, ws, FOX_GROUP_COUNT, &st); /* bad group: no write */
    ck_assert_int_eq(fox_pearl_b_group(w, g, m, v, sp, 0, &st), FOX_EINVAL);
    /* Weight decay with w = 0 stays finite (ε floor). */
    ck_assert(isfinite(fox_wd_rate(0.0f, 0.0f)) && fox_wd_rate(0.0f, 0.0f) == 0.0f);
}
END_TEST

START_TEST(pearl_b_l1_entropy_deficit)
{
    enum { R = 32, C = 64 };
    static float w[R * C], g[R * C];
    fox_rng r;
    fox_rng_seed(&r, 9);
    for (int i = 0; i < R * C; i++) {
        w[i] = 0.1f * (float)fox_rng_normal(&r);
        g[i] = 0.01f * (float)fox_rng_normal(&r);
    }
    /* Gradient spread evenly over the features: D ≈ 0, little pruning. */
    float d_uniform = fox_entropy_deficit(g, R, C);
    ck_assert_msg(d_uniform < 0.02f, "uniform D = %g", (double)d_uniform);
    /* 20 zero-padded features (zero gradient columns) must not look like differentiation. */
    for (int row = 0; row < R; row++)
        for (int c = 44; c < C; c++)
            g[row * C + c] = 0.0f;
    float d_padded = fox_entropy_deficit(g, R, C);
    ck_assert_msg(d_padded < 0.02f, "padding inflated D to %g", (double)d_padded);
    /* Concentrated on two features: D → 1. */
    for (int row = 0; row < R; row++)
        for (int c = 0; c < C; c++)
            g[row * C + c] = c == 0 ? 1.0f : (c == 1 ? 1e-6f : 0.0f);
    float d_conc = fox_entropy_deficit(g, R, C);
    ck_assert_msg(d_conc > 0.99f, "concentrated D = %g", (double)d_conc);
    /* Moderately concentrated on a few of many live features: D strictly between. */
    for (int row = 0; row < R; row++)
        for (int c = 0; c < C; c++)
            g[row * C + c] = c < 4 ? 1.0f : 0.01f;
    float d_mid = fox_entropy_deficit(g, R, C);
    ck_assert(d_mid > 0.1f && d_mid < 0.9f);
    /* λ = mean|g| / mean|w| × D. */
    double sw = 0.0, sg = 0.0;
    for (int i = 0; i < R * C; i++) {
        sw += fabsf(w[i]);
        sg += fabsf(g[i]);
    }
    float l1 = fox_pearl_b_l1_rate(w, g, R, C);
    ck_assert_float_eq_tol(l1, (sg / sw) * d_mid, 1e-4 * (sg / sw) * d_mid);
    /* No gradient, one feature: no pruning. */
    memset(g, 0, sizeof g);
    ck_assert(fox_pearl_b_l1_rate(w, g, R, C) == 0.0f);
    ck_assert(fox_entropy_deficit(g, R, 1) == 0.0f);
}
END_TEST

/* ---- fingerprint --------------------------------------------------------------------------- */

static uint64_t
fp_of(const fox_isv_slot_info *tab, int n, const char *const *sent, int version)
{
    return fox__layout_fingerprint_of(tab, n, FOX_ISV_TOTAL_DIM, sent, FOX_SENTINEL_SLOTS,
                                   0x1234abcdULL, version);
}

START_TEST(fingerprint_changes)
{
    int n = fox_isv_named_count();
    fox_isv_slot_info tab[FOX_ISV_TOTAL_DIM];
    const char *sent[FOX_SENTINEL_SLOTS];
    for (int k = 0; k < n; k++)
        tab[k] = *fox_isv_named(k);
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        sent[i] = fox_sentinel_name(i);
    uint64_t base = fp_of(tab, n, sent, 1);
    ck_assert(base == fox_layout_fingerprint(0x1234abcdULL, 1)); /* the real tables */
    ck_assert(base == fox_layout_fingerprint(0x1234abcdULL, 1)); /* deterministic */
    ck_assert(base != fp_of(tab, n, sent, 2));                   /* format version */
    ck_assert(base != fox_layout_fingerprint(0x1234abceULL, 1)); /* model layout */
    fox_isv_slot_info saved = tab[3];
    tab[3].index += 1; /* an ISV slot moved */
    ck_assert(base != fp_of(tab, n, sent, 1));
    tab[3] = saved;
    tab[3].name = "RENAMED";
    ck_assert(base != fp_of(tab, n, sent, 1));
    tab[3] = saved;
    ck_assert(base != fp_of(tab, n - 1, sent, 1)); /* a slot dropped */
    ck_assert(base == fp_of(tab, n, sent, 1));
    sent[30] = "aux_d_h_s2_renamed"; /* a sentinel renamed */
    ck_assert(base != fp_of(tab, n, sent, 1));
    sent[30] = fox_sentinel_name(30);
    ck_assert(base != fox__layout_fingerprint_of(tab, n, FOX_ISV_TOTAL_DIM + 1, sent,
                                              FOX_SENTINEL_SLOTS, 0x1234abcdULL, 1));
}
END_TEST

START_TEST(fingerprint_float_slots)
{
    uint64_t fp = fox_layout_fingerprint(0xfeedfacecafebeefULL, 3);
    float isv[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    fox_isv_store_fingerprint(isv, fp);
    /* Both halves are normal finite floats: they survive JSON and NaN scans of the ISV. */
    ck_assert(isnormal(isv[FOX_ISV_FINGERPRINT_LO]) && isnormal(isv[FOX_ISV_FINGERPRINT_HI]));
    ck_assert_int_eq(fox_sentinel_check_nonfinite(isv, FOX_ISV_TOTAL_DIM), 0);
    ck_assert(fox_isv_load_fingerprint(isv) == fp);
    /* A checkpoint copies the ISV as floats; the fingerprint comes back bit-exact. */
    float copy[FOX_ISV_TOTAL_DIM];
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        copy[i] = isv[i];
    ck_assert(fox_isv_load_fingerprint(copy) == fp);
    /* Reset keeps it. */
    fox_isv_reset(isv);
    ck_assert(fox_isv_load_fingerprint(isv) == fp);
    /* Store/load is lossless for any 64-bit value, NaN bit patterns included (memcpy only). */
    static const uint64_t odd[] = {0, ~0ULL, 0x7fc000017f800000ULL, 0x00000001ffffffffULL,
                                   0x8000000000000000ULL};
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++) {
        fox_isv_store_fingerprint(isv, odd[k]);
        ck_assert(fox_isv_load_fingerprint(isv) == odd[k]);
        ck_assert_uint_eq(float_bits(isv[FOX_ISV_FINGERPRINT_LO]), (uint32_t)odd[k]);
    }
    /* Many fingerprints: every half stays a normal float. */
    for (int v = 0; v < 2000; v++) {
        uint64_t f = fox_layout_fingerprint(fox_rng_mix((uint64_t)v), v);
        fox_isv_store_fingerprint(isv, f);
        ck_assert(isnormal(isv[FOX_ISV_FINGERPRINT_LO]) && isnormal(isv[FOX_ISV_FINGERPRINT_HI]));
        ck_assert(fabsf(isv[FOX_ISV_FINGERPRINT_LO]) < 2.0f);
    }
}
END_TEST

/* ---- docs/stability.md lists every slot of both tables at its index ----------------------- */

static char *
read_doc(void)
{
    /* Meson and the direct gcc line both run from the directory the source path is relative to. */
    static const char *const cands[] = {"docs/stability.md", "../docs/stability.md",
                                        "../../docs/stability.md"};
    char path[1024];
    const char *root = getenv("FOX_SOURCE_ROOT");
    char *doc = NULL;
    if (root) {
        snprintf(path, sizeof path, "%s/docs/stability.md", root);
        doc = fox_test_read_file(path, NULL);
    }
    if (!doc) {
        const char *src = __FILE__, *slash = strrchr(src, '/');
        if (slash) {
            snprintf(path, sizeof path, "%.*s/../docs/stability.md", (int)(slash - src), src);
            doc = fox_test_read_file(path, NULL);
        }
    }
    for (size_t k = 0; !doc && k < sizeof cands / sizeof cands[0]; k++)
        doc = fox_test_read_file(cands[k], NULL);
    return doc;
}

/* The text between <!-- NAME:begin --> and <!-- NAME:end --> (in place), or NULL. */
static char *
doc_section(char *doc, const char *name)
{
    char open[64], close[64];
    snprintf(open, sizeof open, "<!-- %s:begin -->", name);
    snprintf(close, sizeof close, "<!-- %s:end -->", name);
    char *a = strstr(doc, open), *b = a ? strstr(a, close) : NULL;
    if (!a || !b)
        return NULL;
    *b = '\0';
    return a + strlen(open);
}

static void
isv_row(const fox_isv_slot_info *s, char *buf, size_t len)
{
    if (s->rule == FOX_ISV_VALUE)
        snprintf(buf, len, "| %d | %s | value %g |", s->index, s->name, (double)s->value);
    else
        snprintf(buf, len, "| %d | %s | %s |", s->index, s->name, fox_isv_rule_name(s->rule));
}

static void
sentinel_row(int i, char *buf, size_t len)
{
    const fox_sentinel_slot_info *s = fox_sentinel_info(i);
    snprintf(buf, len, "| %d | %s | %s | %s |", i, s->name, s->buffer[0] ? s->buffer : "-",
             s->site == FOX_SENT_SITE_NONE ? "reserved" : fox_sentinel_kind_name(s->kind));
}

/* Every row of section (lines starting "| <digit>") must start with one of want[], once each. */
static void
check_rows(char *section, char (*want)[160], int n, const char *what)
{
    int seen[FOX_ISV_TOTAL_DIM] = {0};
    ck_assert_int_le(n, FOX_ISV_TOTAL_DIM);
    for (char *line = strtok(section, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "| ", 2) != 0 || line[2] < '0' || line[2] > '9')
            continue;
        int hit = -1;
        for (int k = 0; k < n && hit < 0; k++)
            if (strncmp(line, want[k], strlen(want[k])) == 0)
                hit = k;
        ck_assert_msg(hit >= 0, "%s: stale row in docs/stability.md: %s", what, line);
        ck_assert_msg(!seen[hit], "%s: row twice: %s", what, want[hit]);
        seen[hit] = 1;
    }
    for (int k = 0; k < n; k++)
        ck_assert_msg(seen[k], "%s: docs/stability.md lacks the row\n%s ... |", what, want[k]);
}

START_TEST(doc_lists_every_slot)
{
    char *doc = read_doc();
    ck_assert_msg(doc, "docs/stability.md not found (set FOX_SOURCE_ROOT)");
    char *isv_sec = doc_section(doc, "isv-table");
    ck_assert_msg(isv_sec, "docs/stability.md: no <!-- isv-table:begin/end --> section");
    int n = fox_isv_named_count();
    static char isv_want[FOX_ISV_TOTAL_DIM][160];
    for (int k = 0; k < n; k++)
        isv_row(fox_isv_named(k), isv_want[k], sizeof isv_want[k]);
    check_rows(isv_sec, isv_want, n, "ISV");
    free(doc);

    doc = read_doc();
    char *sent_sec = doc_section(doc, "sentinel-table");
    ck_assert_msg(sent_sec, "docs/stability.md: no <!-- sentinel-table:begin/end --> section");
    static char sent_want[FOX_SENTINEL_SLOTS][160];
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        sentinel_row(i, sent_want[i], sizeof sent_want[i]);
    check_rows(sent_sec, sent_want, FOX_SENTINEL_SLOTS, "sentinel");
    free(doc);
}
END_TEST

/* ---- suite ---------------------------------------------------------------------------- */

static Suite *
stability_suite(void)
{
    Suite *s = suite_create("stability");
    TCase *tables = tcase_create("tables");
    tcase_add_test(tables, wiener_reset_follows_isv_rules);
    tcase_add_test(tables, doc_lists_every_slot);
    suite_add_tcase(s, tables);

    TCase *maths = tcase_create("maths");
    tcase_add_test(maths, clamp_finite_cases);
    tcase_add_test(maths, fixed_mode_formulas);
    tcase_add_test(maths, meta_constants_structural);
    tcase_add_test(maths, p99_normal);
    tcase_add_test(maths, p99_heavy_tailed);
    tcase_add_test(maths, p99_degenerate);
    tcase_add_test(maths, p99_skips_nonfinite_and_spans);
    suite_add_tcase(s, maths);

    TCase *pearls = tcase_create("pearls");
    tcase_add_test(pearls, pearl_a_replaces_sentinel);
    tcase_add_test(pearls, pearl_a_only_when_both_zero);
    tcase_add_test(pearls, pearl_d_does_not_subsume_a);
    tcase_add_test(pearls, pearl_d_anchors_stationary);
    tcase_add_test(pearls, pearl_d_tracks_step_change);
    tcase_add_test(pearls, pearl_d_from_neutral_value);
    tcase_add_test(pearls, pearl_c_engagement);
    tcase_add_test(pearls, adaptive_grad_clip_follows_norm);
    tcase_add_test(pearls, adaptive_grad_clip_capped);
    tcase_add_test(pearls, pearl_b_group_stats);
    tcase_add_test(pearls, pearl_b_l1_entropy_deficit);
    suite_add_tcase(s, pearls);

    TCase *fp = tcase_create("fingerprint");
    tcase_add_test(fp, fingerprint_changes);
    tcase_add_test(fp, fingerprint_float_slots);
    suite_add_tcase(s, fp);
    return s;
}

int
main(void)
{
    return fox_test_run_suite(stability_suite());
}
