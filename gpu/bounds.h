/*
 * bounds.h — the maths of the numerical-stability bounds, shared by both
 * backends: the fixed-mode (SP3) bound formulas, clamp_finite, the SP4 p99
 * producer (256-bin three-pass histogram), Pearl A (first observation
 * replaces the zero sentinel), Pearl D (Wiener-optimal EMA rate), Pearl C
 * (engagement-rate correction) and Pearl B (per-param-group statistics).
 *
 * The small per-value pieces are header-inline and marked FOX_HD, so the
 * CUDA backend compiles the very same code into its kernels (Pearls A+D run
 * in the producer kernel's tail, on the device, with no host sync); the
 * whole-buffer passes (p99, Pearl B) are host reference implementations in
 * bounds.c that the CUDA kernels must agree with.
 *
 * It does not own any buffer, launch anything or decide when a producer runs
 * (the engine does), and it reads no config: every constant below is
 * structural (a bin count, a percentile, a seed multiplier), not a knob.
 *
 * Threading: pure functions plus functions that write only what they are
 * given; safe from any thread. C and C++ (nvcc) compatible.
 */
#ifndef FOX_BOUNDS_H
#define FOX_BOUNDS_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/isv.h" /* fox_isv_eff: every bound scales with an ISV slot */
#include "gpu/rng.h" /* FOX_HD */

/* ---- structural constants ------------------------------------------------------------- */

/* p99 producer: 256 linear bins give ~0.4 % of the range per bin at the top (seed). */
enum { FOX_P99_BINS = 256 };
#define FOX_P99_PERCENTILE 0.99f

/* Pearl D: one uniform meta-rate for every variance tracker, never tuned per signal. */
#define FOX_PEARL_ALPHA_META 1e-3f
/* Divisor floor, Adam-ε category: keeps 0/0 at 0 on a signal with no variance yet. */
#define FOX_PEARL_EPS_DIV 1e-8f
/* Pearl C: a p99 bound is exceeded by 1 % of values by definition... */
#define FOX_PEARL_C_EXPECTED_RATE 0.01f
/* ...and a sustained engagement rate above twice that means the clamp feeds its own bound. */
#define FOX_PEARL_C_SATURATION 2.0f

/* Fixed-mode (SP3) multipliers, from the seeds' smokes. */
#define FOX_MECH1_TARGET_Q_MULT 10.0f  /* Mech 1: |target Q| ≤ 10 × q_eff */
#define FOX_MECH2_ATOM_MULT     10.0f  /* Mech 2: |atom| ≤ 10 × q_eff (same scale as Mech 1) */
#define FOX_MECH6_CLIP_MULT     10.0f  /* Mech 6: the clip follows 10 × the norm's EMA */
#define FOX_MECH6_CAP_MULT      100.0f /* Mech 6: clip ≤ 100 × slow EMA × q_eff */
#define FOX_MECH6_MIN_CLIP      1.0f   /* Mech 6: cold-start floor of the clip */
#define FOX_MECH6_SLOW_ALPHA    1e-3f  /* Mech 6: slow EMA rate (half-life ~693 steps) */
#define FOX_MECH9_WEIGHT_MULT   100.0f /* Mech 9: |w| ≤ 100 × q_eff, 10× below slots 44/45/48 */
#define FOX_MECH10_H_S2_MULT    100.0f /* Mech 10: |h_s2| ≤ 100 × h_eff, 10× below slot 49 */
#define FOX_BWD_GUARD_MULT      1e6f   /* SP1 Phase C: backward input guards, 1e6 × eff */

/*
 * Rate of the pre-SP4 ISV signal EMAs (Q_ABS_REF, Q_DIR_ABS_REF,
 * H_S2_RMS_EMA, AUX_LABEL_SCALE_EMA, GRAD_NORM_EMA) in fixed mode:
 * half-life ~69 steps, one observation per train step. Adaptive mode runs
 * them through Pearls A+D (fox_signal_observe), as SP4 replaces every
 * hard-coded EMA rate; the SP4 bound slots always do.
 */
#define FOX_SIGNAL_EMA_ALPHA 0.01f

/* ---- state ------------------------------------------------------------------------------ */

/*
 * Pearl D state of one producer: the seeds' wiener_state, three floats. All
 * zero is the fold-boundary state (together with a zero ISV slot it is the
 * Pearl A sentinel).
 *   sample_var  EMA of ½(x_t − x_{t−1})²: the sampling-noise power. A level
 *               shift cancels in a first difference, so this sees the noise.
 *   diff_var    EMA of (x_t − m)(x_{t−1} − m), m the current estimate: the
 *               power of the deviation that persists from one sample to the
 *               next, i.e. the level difference the estimate has not yet
 *               followed. White noise averages to ≤ 0 here.
 *   x_lag       the previous observation.
 */
typedef struct fox_wiener_state {
    float sample_var;
    float diff_var;
    float x_lag;
} fox_wiener_state;

/* Pearl C state of one clamp (one per param group): EMA of its engagement rate. */
typedef struct fox_pearl_c_state {
    float rate_ema;
} fox_pearl_c_state;

/* A run of floats inside a flat buffer (one tensor of a param group). */
typedef struct fox_span {
    size_t offset;
    size_t len;
} fox_span;

/* Pearl B: one param group's statistics of one step (NaN = not observed). */
typedef struct fox_group_stats {
    float weight_p99; /* p99 |w|       → WEIGHT_BOUND_<group> */
    float adam_m_p99; /* p99 |Adam m|  → ADAM_M_BOUND_<group> */
    float adam_v_p99; /* p99 Adam v    → ADAM_V_BOUND_<group> */
    float wd_rate;    /* |w·g| / max(‖w‖², ε) → WD_RATE_<group> */
} fox_group_stats;

/* ---- shared per-value maths (host and device) ------------------------------------------ */

/* clamp_finite: NaN/Inf → 0, finite values clamped to ±bound. */
FOX_HD float
fox_clamp_finite(float v, float bound)
{
    if (!isfinite(v))
        return 0.0f;
    return v > bound ? bound : (v < -bound ? -bound : v);
}

/* Mech 1 fixed mode: TARGET_Q_BOUND = 10 × max(Q_ABS_REF, 1). */
FOX_HD float
fox_bound_target_q_fixed(float q_abs_ref)
{
    return FOX_MECH1_TARGET_Q_MULT * fox_isv_eff(q_abs_ref);
}

/*
 * Q_ABS_REF's observation of one row of raw IQN targets (sample b, branch d),
 * θ′_j = r + γⁿ(1 − done)·q′(τ′_j) [nt]: |mean_j clamp_finite(θ′_j, bound)|,
 * the magnitude of the Bellman target r + γⁿ·E[Q′] of the expected Q. The
 * slot is the Q scale of Mechs 1, 2, 5, 6 and 9, so it observes the Q the
 * targets state, where the rewards enter unbounded: the C51 head's E[Q]
 * (what it observed before) lies on the atom grid, which Mech 2 bounds by
 * this very scale, so rewards that outgrow the grid never reached it. bound
 * is Mech 1's fixed bound on the slot before this observation
 * (fox_bound_target_q_fixed), the winsorizer that keeps one outlier (or an
 * injected fault) from dragging the scale, and so its own clip, up: the
 * scale grows at most to 10 × itself per observation; a non-finite target
 * counts as 0, as the clip makes it. The batch's observation is the mean of
 * the rows (fox_q_ref_obs on the host; the CUDA loss kernel's first launch
 * on the device), taken before Mech 1 and slot 46 read the slot.
 */
FOX_HD float
fox_q_ref_row(const float *tq, int nt, float bound)
{
    float s = 0.0f;
    for (int j = 0; j < nt; j++)
        s += fox_clamp_finite(tq[j], bound);
    return fabsf(s / (float)nt);
}

/*
 * The unit of the IQN's values in a train step. With the moving atom grid
 * (model.atom_grid = moving) it is Q_ABS_REF as the step begins, the mean
 * magnitude of the Bellman targets, not floored at 1 as q_eff is (1 while
 * the slot is unset, FOX_TD_UNIT_MIN against a degenerate one). The IQN head
 * outputs values in this unit (its quantiles are unit × output, online and
 * target alike) and its quantile Huber loss takes the TD errors in it, so
 * that the head's weights, its loss and the gradient it sends into the trunk
 * are the same at any reward scale, as the C51 head's are on a grid that
 * moves with the rewards. With the static support the unit is 1, the values
 * in the support's own units (q_eff as the unit there lowered the default
 * walk's volmom from +0.63 to +0.33; docs/stability.md).
 */
#define FOX_TD_UNIT_MIN 1e-6f

FOX_HD float
fox_td_scale(int moving_grid, float q_abs_ref)
{
    if (!moving_grid)
        return 1.0f;
    if (!isfinite(q_abs_ref) || !(q_abs_ref > 0.0f))
        return 1.0f; /* unset (the zero sentinel of a fold's first step) */
    return fmaxf(q_abs_ref, FOX_TD_UNIT_MIN);
}

/* Mech 2 fixed mode: atom positions within ±10 × max(Q_ABS_REF, 1). */
FOX_HD float
fox_bound_atom_fixed(float q_abs_ref)
{
    return FOX_MECH2_ATOM_MULT * fox_isv_eff(q_abs_ref);
}

/* Mech 9 fixed mode: post-Adam |w| ≤ 100 × max(Q_ABS_REF, 1). */
FOX_HD float
fox_bound_weight_fixed(float q_abs_ref)
{
    return FOX_MECH9_WEIGHT_MULT * fox_isv_eff(q_abs_ref);
}

/* Mech 10 fixed mode: |h_s2| ≤ 100 × max(H_S2_RMS_EMA, 1). */
FOX_HD float
fox_bound_h_s2_fixed(float h_s2_rms_ema)
{
    return FOX_MECH10_H_S2_MULT * fox_isv_eff(h_s2_rms_ema);
}

/*
 * Mech 6 cap on the adaptive global-norm clip: 100 × slow EMA × max(Q_ABS_REF,
 * 1), floored at MIN_CLIP = 1 for the cold start (slow EMA still 0), as the
 * seed has it. The slow EMA persists across folds (its ISV rule is keep), so
 * a new fold starts with the cap of the gradient scale seen so far instead
 * of the cold-start floor.
 */
FOX_HD float
fox_bound_grad_clip_cap(float grad_norm_slow_ema, float q_abs_ref)
{
    float s = isfinite(grad_norm_slow_ema) && grad_norm_slow_ema > 0.0f ? grad_norm_slow_ema : 0.0f;
    float cap = FOX_MECH6_CAP_MULT * s * fox_isv_eff(q_abs_ref);
    return cap > FOX_MECH6_MIN_CLIP ? cap : FOX_MECH6_MIN_CLIP;
}

/*
 * Mech 6 in fixed mode: the adaptive clip 10 × GRAD_NORM_EMA, floored at
 * MIN_CLIP and capped by fox_bound_grad_clip_cap.
 */
FOX_HD float
fox_bound_grad_clip_fixed(float grad_norm_ema, float grad_norm_slow_ema, float q_abs_ref)
{
    float e = isfinite(grad_norm_ema) && grad_norm_ema > 0.0f ? grad_norm_ema : 0.0f;
    float clip = FOX_MECH6_CLIP_MULT * e;
    clip = clip > FOX_MECH6_MIN_CLIP ? clip : FOX_MECH6_MIN_CLIP;
    float cap = fox_bound_grad_clip_cap(grad_norm_slow_ema, q_abs_ref);
    return clip < cap ? clip : cap;
}

/* SP1 Phase C guard on backward inputs: 1e6 × max(isv, 1) (ISV 21 or 96). */
FOX_HD float
fox_bound_backward_guard(float isv_scale)
{
    return FOX_BWD_GUARD_MULT * fox_isv_eff(isv_scale);
}

/*
 * Adaptive (SP4) mode: what a consumer clamps at, given a bound slot's value.
 * The only floor is the cold-start one (Pearl A's sentinel reads as 1). Rate
 * slots (WD_RATE_*, L1_LAMBDA) are read raw: 0 means "off", which is safe.
 */
FOX_HD float
fox_bound_adaptive(float isv_bound)
{
    return fox_isv_eff(isv_bound);
}

/* Plain EMA for fixed-rate producers, with the Pearl A sentinel: 0 is replaced, not blended. */
FOX_HD float
fox_ema_first(float x_mean, float x, float alpha)
{
    if (!isfinite(x))
        return x_mean;
    return x_mean == 0.0f ? x : x_mean + alpha * (x - x_mean);
}

/*
 * Pearl D: the Wiener-optimal EMA rate α* = diff_var / (diff_var + sample_var
 * + ε): the power of the level change the estimate has not followed, over
 * that plus the sampling noise. A stationary signal drives diff_var to ≤ 0
 * and α to 0 (anchor); a step drives diff_var up and α towards 1 (track).
 * On a zero state α = 0, not 1: Pearl D does not subsume Pearl A at t = 0.
 */
FOX_HD float
fox_wiener_alpha(const fox_wiener_state *s)
{
    float d = s->diff_var > 0.0f ? s->diff_var : 0.0f;
    float n = s->sample_var > 0.0f ? s->sample_var : 0.0f;
    float a = d / (d + n + FOX_PEARL_EPS_DIV);
    return a < 1.0f ? a : 1.0f;
}

/*
 * Pearl D alone: update s with observation x and return the new estimate.
 * An empty state (all zero) has no previous observation yet, so the first
 * call only records x_lag and leaves the estimate alone. A non-finite x is
 * ignored (the sentinel reports it; it must not poison a bound).
 */
FOX_HD float
fox_pearl_d_update(float x_mean, fox_wiener_state *s, float x)
{
    if (!isfinite(x))
        return x_mean;
    if (s->sample_var == 0.0f && s->diff_var == 0.0f && s->x_lag == 0.0f) {
        s->x_lag = x;
        return x_mean;
    }
    const float a = FOX_PEARL_ALPHA_META;
    float innov = x - x_mean;
    float prev = s->x_lag - x_mean;
    float step = x - s->x_lag;
    s->sample_var += a * (0.5f * step * step - s->sample_var);
    s->diff_var += a * (innov * prev - s->diff_var);
    s->x_lag = x;
    return x_mean + fox_wiener_alpha(s) * innov;
}

/*
 * Pearls A + D (the seeds' pearls_ad_update): Pearl A fires only when both the
 * estimate and x_lag are zero (the fold-boundary sentinel): the observation
 * replaces the estimate directly, bypassing the Wiener maths. Once x_lag holds
 * an observation, an estimate that crosses zero later does not re-fire it.
 * Otherwise Pearl D.
 */
FOX_HD float
fox_pearls_ad_update(float x_mean, fox_wiener_state *s, float x)
{
    if (!isfinite(x))
        return x_mean;
    if (x_mean == 0.0f && s->x_lag == 0.0f) {
        s->x_lag = x;
        return x;
    }
    return fox_pearl_d_update(x_mean, s, x);
}

/* One observation into ISV slot `slot` through Pearls A+D; ws is indexed by ISV slot. */
FOX_HD void
fox_bounds_observe(float *isv, fox_wiener_state *ws, int slot, float obs)
{
    isv[slot] = fox_pearls_ad_update(isv[slot], &ws[slot], obs);
}

/*
 * One observation of a pre-SP4 signal slot: fixed mode (SP3) its EMA at
 * FOX_SIGNAL_EMA_ALPHA with the zero sentinel; adaptive mode (SP4) Pearls
 * A+D with the slot's Wiener state ws[slot], the rate the seeds' SP4 puts
 * on "7 existing pre-SP4 producers". A non-finite x is ignored either way.
 */
FOX_HD void
fox_signal_observe(float *isv, fox_wiener_state *ws, int slot, float x, int adaptive)
{
    if (adaptive)
        fox_bounds_observe(isv, ws, slot, x);
    else
        isv[slot] = fox_ema_first(isv[slot], x, FOX_SIGNAL_EMA_ALPHA);
}

/* ---- the moving C51 atom grid: its update rule and Mech 2 at its write ---------------- */

/*
 * The grid's EMA rate per train step: each end moves this share of the way
 * to the batch's extreme target. At the default g = γⁿ = 0.9³ the grid
 * settles within about 1 / (rate × (1 − g)) ≈ 75 train steps on the range
 * the returns reach; a smaller rate would only slow that, since the batch
 * extremes it averages already move slowly.
 */
#define FOX_ATOM_GRID_RATE 0.05f
/* The narrowest grid Mech 2 writes, as a share of its bound (Δz must stay a usable divisor). */
#define FOX_ATOM_GRID_MIN_SPAN 1e-3f

/* Branch d's grid is unset (both ends 0: created, or reset for a fold; a write never is). */
FOX_HD int
fox_atom_grid_unset(const float *isv, int d)
{
    int k = fox_isv_atom_grid_slot(d);
    return isv[k] == 0.0f && isv[k + 1] == 0.0f;
}

/* Branch d's live grid [*lo, *hi] from the ISV: the configured [v_min, v_max] while unset. */
FOX_HD void
fox_atom_grid_live(const float *isv, int d, float v_min, float v_max, float *lo, float *hi)
{
    int k = fox_isv_atom_grid_slot(d), unset = fox_atom_grid_unset(isv, d);
    *lo = unset ? v_min : isv[k];
    *hi = unset ? v_max : isv[k + 1];
}

/*
 * The grid a branch's update reduces the batch's Bellman targets over: the
 * live grid, except that a moving grid still unset (a fold's first train
 * step) counts as [0, 0], so that its targets are the batch's rewards and
 * its first update starts from their range (fox_atom_grid_update) instead of
 * moving there from the configured support, which fits one reward scale only
 * (from ±10 to rewards of ±0.03 took ~340 train steps at 5 % a step).
 */
FOX_HD void
fox_atom_grid_base(const float *isv, int moving, int d, float v_min, float v_max, float *lo,
                   float *hi)
{
    if (moving && fox_atom_grid_unset(isv, d)) {
        *lo = 0.0f;
        *hi = 0.0f;
        return;
    }
    fox_atom_grid_live(isv, d, v_min, v_max, lo, hi);
}

/*
 * The targets a grid update moves toward, from the batch's lowest and highest
 * Bellman target over the grid (tz_lo, tz_hi): under model.atom_grid =
 * static the configured support itself, so that the grid stays there and
 * only Mech 2's clamp acts on it; under moving the batch's.
 */
FOX_HD void
fox_atom_grid_targets(int moving, float v_min, float v_max, float *tz_lo, float *tz_hi)
{
    if (!moving) {
        *tz_lo = v_min;
        *tz_hi = v_max;
    }
}

/*
 * One train step of branch d's grid, before the projection. tz_lo and tz_hi
 * are the batch's lowest and highest Bellman targets over the live grid,
 * min_b (r_b + g_b·lo) and max_b (r_b + g_b·hi), g_b = γⁿ(1 − done_b): each
 * end moves FOX_ATOM_GRID_RATE of the way toward them, so the grid follows
 * the range the projection sends mass to (an end whose target is not finite
 * stays). A moving grid still unset takes its targets, the batch's reward
 * range (fox_atom_grid_base), as they are, once Q_ABS_REF has its first
 * observation (the fold's first train step observes it after this update):
 * before that it stays unset, on the configured support, because Mech 2's
 * bound on the start would be 10 × max(unset, 1) whatever the rewards'
 * scale. In adaptive mode ATOM_POS_BOUND_d observes the moved grid's largest
 * |z| (Pearls A+D, ws indexed by ISV slot; NULL in fixed mode). Mech 2 then
 * clamps both ends to ±bound (10 × q_eff fixed, max(ATOM_POS_BOUND_d, 1)
 * adaptive); a grid the clamp empties or narrows below FOX_ATOM_GRID_MIN_SPAN
 * × bound is written as [−bound, bound]. The grid goes into the ISV; the
 * return value is the moved grid's span before the clamp, which slot 47
 * compares (0 when the grid waited).
 */
FOX_HD float
fox_atom_grid_update(float *isv, fox_wiener_state *ws, int adaptive, int moving, int d,
                     float v_min, float v_max, float tz_lo, float tz_hi)
{
    float lo, hi;
    int fresh = moving && fox_atom_grid_unset(isv, d);
    if (fresh && !(isv[FOX_ISV_Q_ABS_REF] > 0.0f))
        return 0.0f; /* the scale Mech 2 bounds the start by is not yet observed */
    float rate = fresh ? 1.0f : FOX_ATOM_GRID_RATE;
    fox_atom_grid_base(isv, moving, d, v_min, v_max, &lo, &hi);
    if (isfinite(tz_lo))
        lo += rate * (tz_lo - lo);
    if (isfinite(tz_hi))
        hi += rate * (tz_hi - hi);
    float bound;
    if (adaptive) {
        int slot = fox_isv_atom_pos_bound_slot(d);
        float ext = fmaxf(fabsf(lo), fabsf(hi));
        if (ext > 0.0f && isfinite(ext))
            fox_bounds_observe(isv, ws, slot, ext);
        bound = fox_bound_adaptive(isv[slot]);
    } else {
        bound = fox_bound_atom_fixed(isv[FOX_ISV_Q_ABS_REF]);
    }
    float span = hi - lo;
    float clo = fox_clamp_finite(lo, bound), chi = fox_clamp_finite(hi, bound);
    if (!(chi - clo >= FOX_ATOM_GRID_MIN_SPAN * bound)) {
        clo = -bound;
        chi = bound;
    }
    int k = fox_isv_atom_grid_slot(d);
    isv[k] = clo;
    isv[k + 1] = chi;
    return span;
}

/*
 * Pearl C: feed one step's engagement count of an in-kernel clamp (engaged of
 * total values clamped). The rate's EMA (meta-rate) is compared with the rate a
 * p99 bound implies (1 %); above twice that for long enough, the clamp is
 * feeding its own bound (post-clamp values can never exceed it), so the bound
 * is forced up to step_max, the pre-clamp maximum of the step, and the EMA is
 * re-armed at the expected rate. Returns 1 when saturation was detected.
 */
FOX_HD int
fox_pearl_c_update(fox_pearl_c_state *s, float engaged, float total, float step_max, float *bound)
{
    if (!(total > 0.0f) || !isfinite(engaged))
        return 0;
    s->rate_ema += FOX_PEARL_ALPHA_META * (engaged / total - s->rate_ema);
    if (!(s->rate_ema > FOX_PEARL_C_SATURATION * FOX_PEARL_C_EXPECTED_RATE))
        return 0;
    s->rate_ema = FOX_PEARL_C_EXPECTED_RATE;
    if (isfinite(step_max) && step_max > *bound)
        *bound = step_max;
    return 1;
}

/*
 * Mech 6 in adaptive mode (SP4), the clip of one step from its unclipped
 * global norm. GRAD_NORM_EMA observes the norm itself through Pearls A+D,
 * so it follows the gradient distribution's level up as well as down (fed
 * the norm winsorized at a clip equal to the bound, the bound could only
 * fall); Pearl D is the defence against the lone outlier that the fixed
 * mode's winsorizer stands for, as a spike in a stationary norm moves an
 * anchored estimate by α ≈ 0. GRAD_CLIP_BOUND is the norm's p99 about that
 * level: level + z₉₉ · σ, with σ² the Wiener state's sample_var (the EMA of
 * ½(x_t − x_{t−1})², the noise power) and z₉₉ the standard normal's 99th
 * percentile. The clip is max(GRAD_CLIP_BOUND, 1). A non-finite norm is not
 * observed. The clip is capped as in fixed mode (fox_bound_grad_clip_cap:
 * 100 × the slow norm EMA × max(Q_ABS_REF, 1)), the seeds' cap. The slow
 * EMA is fed the norm winsorized at the last clip, so the cap rises at most
 * by a factor 1 + 99 × FOX_MECH6_SLOW_ALPHA (about 1.1) a step: the level
 * may jump with a sudden rise of the norm, the clip follows it only at that
 * pace, so that a burst of exploding gradients is clipped, not followed,
 * while a lasting change of scale is reached within some hundred steps.
 * Updates both slots and ws; returns the clip.
 */
#define FOX_P99_NORMAL_Z 2.3263479f

FOX_HD float
fox_bound_grad_clip_adaptive(float *isv, fox_wiener_state *ws, float norm)
{
    if (isfinite(norm) && norm > 0.0f)
        fox_bounds_observe(isv, ws, FOX_ISV_GRAD_NORM_EMA, norm);
    float noise = ws[FOX_ISV_GRAD_NORM_EMA].sample_var;
    float bound = isv[FOX_ISV_GRAD_NORM_EMA] + FOX_P99_NORMAL_Z * sqrtf(noise > 0.0f ? noise : 0.0f);
    isv[FOX_ISV_GRAD_CLIP_BOUND] = bound;
    float clip = fox_bound_adaptive(bound);
    float cap = fox_bound_grad_clip_cap(isv[FOX_ISV_GRAD_NORM_SLOW_EMA], isv[FOX_ISV_Q_ABS_REF]);
    return clip < cap ? clip : cap;
}

/*
 * Pearl B's consumers in the Adam step (the seeds' dqn_adam_update_kernel
 * order: the update, the L1 proximal step, then Mech 9's clamp): p is the
 * weight after the Adam update, p0 the weight before it. Decoupled weight
 * decay (AdamW) takes lr · wd · p0 off; the L1 proximal step then shrinks
 * |p| by lr · l1, to 0 at most (soft thresholding). A rate that is not a
 * positive finite number is off (0, the Pearl A sentinel, means off).
 */
FOX_HD float
fox_adam_regularize(float p, float p0, float lr, float wd, float l1)
{
    if (isfinite(wd) && wd > 0.0f)
        p -= lr * wd * p0;
    if (isfinite(l1) && l1 > 0.0f) {
        float s = fabsf(p) - lr * l1;
        p = s > 0.0f ? copysignf(s, p) : 0.0f;
    }
    return p;
}

/* Pearl B weight-decay rate from the equilibrium of d‖w‖²/dt = 2 w·g − 2λ‖w‖². */
FOX_HD float
fox_wd_rate(float w_dot_g, float w_sumsq)
{
    float den = w_sumsq > FOX_PEARL_EPS_DIV ? w_sumsq : FOX_PEARL_EPS_DIV;
    return fabsf(w_dot_g) / den;
}

/*
 * p99 between passes 1 and 2, from the count of finite |x| and their min lo
 * and max hi: the degenerate cases return 1 with *p99 set — 0 when nothing
 * is finite or all is zero, hi when every value is equal or the range is so
 * narrow that the bin scale overflows (every value is hi to float
 * precision); otherwise 0 with *scale = BINS / (hi − lo) for pass 2.
 */
FOX_HD int
fox_p99_degenerate(unsigned long long count, float lo, float hi, float *p99, float *scale)
{
    *p99 = 0.0f;
    *scale = 0.0f;
    if (count == 0 || hi == 0.0f)
        return 1;
    *p99 = hi;
    if (hi == lo)
        return 1;
    float s = (float)FOX_P99_BINS / (hi - lo);
    if (!(s < FLT_MAX))
        return 1;
    *p99 = 0.0f;
    *scale = s;
    return 0;
}

/* p99 pass 2: bin of |x| = a in [lo, hi] (scale = BINS / (hi − lo)), clamped to the last bin. */
FOX_HD int
fox_p99_bin(float a, float lo, float scale)
{
    float f = (a - lo) * scale;
    int b = f > 0.0f ? (int)f : 0;
    return b < FOX_P99_BINS ? b : FOX_P99_BINS - 1;
}

/*
 * p99 pass 3: from the histogram of n values over [lo, hi], the 99th
 * percentile, walking cumulative counts from the top (the tail is 1 % of n)
 * and interpolating linearly inside the bin that holds it. The sample's
 * nearest-rank p99 lies in that same bin, so the error is at most one bin.
 */
FOX_HD float
fox_p99_from_hist(const uint32_t *hist, uint32_t n, float lo, float hi)
{
    float w = (hi - lo) / (float)FOX_P99_BINS;
    float tail = (1.0f - FOX_P99_PERCENTILE) * (float)n;
    float above = 0.0f;
    for (int b = FOX_P99_BINS - 1; b >= 0; b--) {
        float c = (float)hist[b];
        if (c > 0.0f && tail < above + c) {
            float frac = (tail - above) / c;
            return lo + ((float)(b + 1) - frac) * w;
        }
        above += c;
    }
    return lo;
}

/* ---- host reference passes (bounds.c) -------------------------------------------------- */

#ifdef __cplusplus
extern "C" {
#endif

/*
 * p99 of |x| over x [n], the three passes: (1) min and max of |x|, (2) a
 * 256-bin linear histogram over [min, max], (3) fox_p99_from_hist.
 * Non-finite values are skipped (the sentinel reports them; a bound must not
 * become NaN). Returns 0 when there is nothing to measure (n = 0, nothing
 * finite, or all zero: the caller then skips the ISV update, as in the seed)
 * and the common value when every |x| is equal.
 */
float fox_p99_abs(const float *x, size_t n);

/* The same over several runs of one buffer (a param group's tensors, padding excluded). */
float fox_p99_abs_spans(const float *base, const fox_span *spans, int n_spans);

/*
 * Q_ABS_REF's observation of a batch's raw IQN targets tq [rows × nt]: the
 * mean of fox_q_ref_row over the rows, summed in row order in double; NaN
 * (not observed) when rows or nt is 0.
 */
float fox_q_ref_obs(const float *tq, size_t rows, int nt, float bound);

/*
 * Pearl B: one group's statistics over the runs spans of the flat buffers
 * (shared layout): p99 |w|, p99 |m|, p99 v and the weight-decay rate
 * |w·g| / max(‖w‖², ε). A NULL buffer leaves its statistics NaN ("not
 * observed", skipped by fox_bounds_observe). FOX_EINVAL on bad arguments.
 */
int fox_pearl_b_group(const float *w, const float *g, const float *m, const float *v,
                      const fox_span *spans, int n_spans, fox_group_stats *out);

/*
 * Pearl B trunk L1 rate over one weight matrix w, g [rows × cols] (row-major
 * [out × in]; the engine passes the trunk's input layer, GRN1 W2 [H1 × S]):
 * λ = (mean|g| / max(mean|w|, ε)) × D, D = (log K − H) / log K the entropy
 * deficit of the gradient's direction over input features, with p_i =
 * ‖g[:, i]‖ / Σ_j ‖g[:, j]‖ and H = −Σ p_i log p_i. A column whose gradient
 * is exactly zero (a zero-padded state feature) is not a feature and does not
 * count in K. D = 0 (no pruning) when the gradient is uniform, zero, or has
 * fewer than two live features.
 */
float fox_pearl_b_l1_rate(const float *w, const float *g, int rows, int cols);

/* The entropy deficit D alone (same definition), in [0, 1]. */
float fox_entropy_deficit(const float *g, int rows, int cols);

/* Σ_r g[r, i]² over the finite entries of column i of g [rows × cols] (the entropy deficit's norms). */
FOX_HD double
fox_column_sq(const float *g, int rows, int cols, int i)
{
    double s = 0.0;
    for (int r = 0; r < rows; r++) {
        double x = g[(size_t)r * cols + i];
        if (isfinite(x))
            s += x * x;
    }
    return s;
}

/*
 * The entropy deficit's last step from its column norms: `live` columns with
 * a non-zero norm, their total and Σ p log p (p = norm / total): (log K +
 * Σ p log p) / log K clamped to [0, 1]; 0 with fewer than two live columns.
 */
FOX_HD float
fox_entropy_deficit_of(double live, double total, double plogp)
{
    if (live < 2.0 || !(total > 0.0))
        return 0.0f;
    double logk = log(live);
    double d = (logk + plogp) / logk; /* (log K − H) / log K with H = −Σ p log p */
    return (float)(d < 0.0 ? 0.0 : (d > 1.0 ? 1.0 : d));
}

/* The L1 rate from Σ|w|, Σ|g| over k finite pairs and the entropy deficit: (mean|g| / mean|w|)·D. */
FOX_HD float
fox_l1_rate_of(double sum_w, double sum_g, double k, float deficit)
{
    if (!(k > 0.0))
        return 0.0f;
    double mw = sum_w / k, mg = sum_g / k;
    double ratio = mg / (mw > FOX_PEARL_EPS_DIV ? mw : FOX_PEARL_EPS_DIV);
    return (float)(ratio * (double)deficit);
}

/* Feed one group's statistics into its four SP4 slots through Pearls A+D. */
void fox_bounds_observe_group(float *isv, fox_wiener_state *ws, int group,
                              const fox_group_stats *st);

/*
 * Fold-boundary reset of the Pearl D states ws [FOX_ISV_TOTAL_DIM], indexed
 * by ISV slot: zeroed for every slot whose ISV rule is not KEEP, so that a
 * ZERO slot is back to the full Pearl A sentinel (estimate 0 and x_lag 0).
 * reset_for_fold calls it next to fox_isv_reset. fox_bounds_wiener_init
 * zeroes all of them (creation).
 */
void fox_bounds_wiener_reset(fox_wiener_state *ws);
void fox_bounds_wiener_init(fox_wiener_state *ws);

#ifdef __cplusplus
}
#endif

#endif
