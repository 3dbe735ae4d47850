/*
 * stab.c — the CPU backend's stability system (contracts in stab.h): the
 * fused check and its table, the stability points with fault injection and
 * the inline checks, every clamp site, the ISV producers, the fold reset and
 * the halts. Every bound is read from the ISV where it is used, never cached:
 * the CUDA kernels read the same slots on the device, so a captured graph
 * never bakes a stale bound (docs/design.md).
 *
 * Order inside a clamp site, everywhere: inject, inline check (before
 * anything sanitizes the buffer: SP1 diagnostic-ordering pearl), producers
 * that read the pre-clamp buffer, the clamp, producers that read the result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/train_types.h"
#include "gpu/cpu/stab.h"

/* ---- setup and the fused-check table ------------------------------------------------ */

static float
fault_value(int kind)
{
    switch (kind) {
    case FOX_FAULT_NAN:
        return NAN;
    case FOX_FAULT_INF:
        return INFINITY;
    default:
        /* Finite but far past every threshold: exercises the threshold slots and the clamps. */
        return 1e30f;
    }
}

int
fox_cpu_stab_init(fox_cpu_stab *st, const fox_config *cfg, const fox_model_layout *lay,
                  volatile float *isv, volatile int *flags, fox_cpu_net *net, float *params,
                  float *grads, float *adam_m, float *adam_v, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    st->cfg = cfg;
    st->lay = lay;
    st->isv = isv;
    st->flags = flags;
    st->net = net;
    st->params = params;
    st->grads = grads;
    st->adam_m = adam_m;
    st->adam_v = adam_v;
    st->adaptive = cfg->bounds_mode == FOX_BOUNDS_ADAPTIVE;
    st->moving_grid = cfg->atom_grid == FOX_ATOM_GRID_MOVING;
    st->sentinel = cfg->sentinel != 0;
    st->strict = cfg->halt_rule == FOX_HALT_RULE_STRICT;
    st->fault_slot = -1;
    /* A non-"none" kind is the explicit request (debug.enable alone injects nothing). */
    if (cfg->fault_kind != FOX_FAULT_NONE) {
        st->fault_slot = fox_sentinel_fault_slot(cfg->fault_buffer);
        if (st->fault_slot < 0) {
            snprintf(err, errlen, "debug.inject_fault.buffer: '%s' names no sentinel buffer",
                     cfg->fault_buffer);
            return FOX_EINVAL;
        }
        fox_cpu_stab_arm_fault(st, st->fault_slot, cfg->fault_kind, cfg->fault_step);
    }
    for (int i = 0; i < FOX_P_COUNT; i++) {
        size_t n = fox_tensor_size(lay, i);
        int g = lay->t[i].group;
        if (n)
            st->gspan[g][st->gspans[g]++] = (fox_span){lay->t[i].offset, n};
    }
    fox_bounds_wiener_init(st->ws);
    return FOX_OK;
}

int
fox_cpu_stab_watch(fox_cpu_stab *st, int slot, const float *ptr, size_t len)
{
    if (len == 0 || !ptr)
        return FOX_OK;
    if (st->n_checks == FOX_CPU_MAX_CHECKS)
        return FOX_EINTERNAL;
    st->checks[st->n_checks++] = (fox_cpu_check){slot, ptr, len};
    return FOX_OK;
}

int
fox_cpu_stab_watch_groups(fox_cpu_stab *st, int slot, const float *base)
{
    fox_param_run runs[FOX_P_COUNT];
    int n = fox_sentinel_param_runs(slot, st->lay, runs), rv = FOX_OK;
    for (int k = 0; k < n && rv == FOX_OK; k++)
        rv = fox_cpu_stab_watch(st, slot, base + runs[k].offset, runs[k].len);
    return rv;
}

int
fox_cpu_stab_watch_net(fox_cpu_stab *st, int B)
{
    int rv = FOX_OK;
    for (int i = 0; i < FOX_SENTINEL_SLOTS && rv == FOX_OK; i++) {
        if (fox_sentinel_info(i)->site != FOX_SENT_SITE_FUSED)
            continue;
        float *p;
        size_t n;
        fox_cpu_net_sentinel_buffer(st->net, i, B, &p, &n);
        rv = fox_cpu_stab_watch(st, i, p, n);
    }
    return rv;
}

void
fox_cpu_stab_check(fox_cpu_stab *st)
{
    if (!st->sentinel)
        return;
    const float *isv = (const float *)st->isv;
    for (int k = 0; k < st->n_checks; k++) {
        const fox_cpu_check *c = &st->checks[k];
        int fired = 0;
        fox_sentinel_check(c->slot, c->ptr, c->len, isv, &fired);
        if (fired)
            st->flags[c->slot] = 1;
    }
}

int
fox_cpu_stab_where(fox_cpu_stab *st, int slot, float **ptr, size_t *len)
{
    for (int k = 0; k < st->n_checks; k++)
        if (st->checks[k].slot == slot) {
            *ptr = (float *)st->checks[k].ptr;
            *len = st->checks[k].len;
            return FOX_OK;
        }
    return FOX_ENOENT;
}

/* ---- checks used inside the step ----------------------------------------------------- */

/* Check buf against slot's rule now and set its flag: inline checks and pre-clamp diagnostics. */
static void
check_now(fox_cpu_stab *st, int slot, const float *buf, size_t n)
{
    if (!st->sentinel)
        return;
    int fired = 0;
    fox_sentinel_check(slot, buf, n, (const float *)st->isv, &fired);
    if (fired)
        st->flags[slot] = 1;
}

static void
clamp_buffer(float *buf, size_t n, float bound)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = fox_clamp_finite(buf[k], bound);
}

/* One observation into an SP4 bound slot through Pearls A+D; 0 (nothing measured) is skipped. */
static void
observe(fox_cpu_stab *st, int slot, float obs)
{
    if (obs > 0.0f)
        fox_bounds_observe((float *)st->isv, st->ws, slot, obs);
}

/* A pre-SP4 signal: its fixed-rate EMA, or Pearls A+D in adaptive mode (fox_signal_observe). */
static void
signal(fox_cpu_stab *st, int slot, double x)
{
    fox_signal_observe((float *)st->isv, st->ws, slot, (float)x, st->adaptive);
}

/* ---- stability points and fault injection -------------------------------------------- */

void
fox_cpu_stab_arm_fault(fox_cpu_stab *st, int slot, int kind, int64_t step)
{
    st->fault_slot = slot;
    st->fault_value = fault_value(kind);
    st->fault_step = step;
    st->fault_done = 0;
}

void
fox_cpu_stab_begin_step(fox_cpu_stab *st, int64_t train_step, int will_train)
{
    st->fault_now =
        st->fault_slot >= 0 && !st->fault_done && will_train && train_step == st->fault_step;
}

/* Does point `slot` carry the armed fault: the fault slot's own point, or its buffer's? */
static int
fault_here(const fox_cpu_stab *st, int slot)
{
    if (!st->fault_now || st->fault_done)
        return 0;
    if (st->fault_slot == slot)
        return 1;
    /*
     * Slots without a point of their own take their buffer's: the slices of
     * params / adam_m / adam_v (37–39, 41–45, 48) and 49 (h_s2 after Mech 10).
     */
    int own = st->fault_slot;
    int shares = own == FOX_SENT_H_S2_MAX_ABS ||
                 (own >= FOX_SENT_TRUNK_ADAM_M_MAX && own <= FOX_SENT_IQN_WEIGHT_MAX &&
                  own != FOX_SENT_TARGET_Q_POST_CLIP && own != FOX_SENT_ATOM_SPAN_MAX);
    return shares && strcmp(fox_sentinel_buffer(own), fox_sentinel_buffer(slot)) == 0;
}

/* Write the fault into the first element the armed slot watches (buf[0] at its own point). */
static void
inject(fox_cpu_stab *st, int slot, float *buf, size_t n)
{
    if (!fault_here(st, slot) || n == 0)
        return;
    float *at = buf;
    size_t len;
    if (st->fault_slot != slot)
        fox_cpu_stab_where(st, st->fault_slot, &at, &len);
    at[0] = st->fault_value;
    st->fault_done = 1;
}

/*
 * Mech 10 site on h_s2 [n]: slot 12 checked inline before the clamp sanitizes
 * it (SP1 pearl) and slot 49 on the pre-clamp values; in adaptive mode
 * H_S2_BOUND is produced from them; the clamp at 100 × max(H_S2_RMS_EMA, 1)
 * (fixed) or max(H_S2_BOUND, 1) (adaptive); then H_S2_RMS_EMA from the
 * clamped h_s2, so an outlier cannot loosen its own clamp.
 */
static void
site_h_s2(fox_cpu_stab *st, float *h, size_t n)
{
    check_now(st, FOX_SENT_H_S2, h, n);
    check_now(st, FOX_SENT_H_S2_MAX_ABS, h, n);
    if (st->adaptive)
        observe(st, FOX_ISV_H_S2_BOUND, fox_p99_abs(h, n));
    float bound = st->adaptive ? fox_bound_adaptive(st->isv[FOX_ISV_H_S2_BOUND])
                               : fox_bound_h_s2_fixed(st->isv[FOX_ISV_H_S2_RMS_EMA]);
    clamp_buffer(h, n, bound);
    double ss = 0.0;
    for (size_t k = 0; k < n; k++)
        ss += (double)h[k] * h[k];
    if (n)
        signal(st, FOX_ISV_H_S2_RMS_EMA, sqrt(ss / (double)n));
}

/*
 * Mech 1 site on the IQN targets θ′ [n = rows × NT]: Q_ABS_REF from their
 * rows' expected values, winsorized at the slot's own Mech 1 bound
 * (fox_q_ref_row), and in adaptive mode TARGET_Q_BOUND from their p99, both
 * producers before their consumers (the SP4 order of a buffer clamp); slot
 * 46 on the pre-clip values; the clip at 10 × max(Q_ABS_REF, 1) (fixed) or
 * max(TARGET_Q_BOUND, 1) (adaptive).
 */
static void
site_target_q(fox_cpu_stab *st, float *tq, size_t n)
{
    int nt = st->lay->NT;
    signal(st, FOX_ISV_Q_ABS_REF,
           fox_q_ref_obs(tq, n / (size_t)nt, nt,
                         fox_bound_target_q_fixed(st->isv[FOX_ISV_Q_ABS_REF])));
    if (st->adaptive)
        observe(st, FOX_ISV_TARGET_Q_BOUND, fox_p99_abs(tq, n));
    check_now(st, FOX_SENT_TARGET_Q_POST_CLIP, tq, n);
    float bound = st->adaptive ? fox_bound_adaptive(st->isv[FOX_ISV_TARGET_Q_BOUND])
                               : fox_bound_target_q_fixed(st->isv[FOX_ISV_Q_ABS_REF]);
    clamp_buffer(tq, n, bound);
}

/*
 * d_h_s2 before the trunk backward: slot 35 inline, then the SP1 Phase C
 * guard at 1e6 × max(H_S2_RMS_EMA, 1), so that a poisoned head cannot carry
 * NaN or overflow into every trunk weight's gradient.
 */
static void
site_d_h_s2_post_iqn(fox_cpu_stab *st, float *dh, size_t n)
{
    check_now(st, FOX_SENT_D_H_S2_POST_IQN, dh, n);
    clamp_buffer(dh, n, fox_bound_backward_guard(st->isv[FOX_ISV_H_S2_RMS_EMA]));
}

void
fox_cpu_stab_point(void *ctx, int slot, float *buf, size_t n)
{
    fox_cpu_stab *st = ctx;
    inject(st, slot, buf, n);
    switch (slot) {
    case FOX_SENT_H_S2:
        site_h_s2(st, buf, n);
        break;
    case FOX_SENT_TARGET_Q_POST_CLIP:
        site_target_q(st, buf, n);
        break;
    case FOX_SENT_D_H_S2_POST_MAIN:
    case FOX_SENT_D_H_S2_POST_AUX:
        check_now(st, slot, buf, n);
        break;
    case FOX_SENT_D_H_S2_POST_IQN:
        site_d_h_s2_post_iqn(st, buf, n);
        break;
    default:
        break;
    }
}

/* ---- producers and the other clamp sites ---------------------------------------------- */

float
fox_cpu_stab_pre_step(fox_cpu_stab *st, const float *labels, int B)
{
    double s = 0.0;
    for (int b = 0; b < B; b++)
        s += fabsf(labels[b]);
    signal(st, FOX_ISV_AUX_LABEL_SCALE_EMA, s / B);
    fox_cpu_net_set_td_scale(st->net, fox_td_scale(st->moving_grid, st->isv[FOX_ISV_Q_ABS_REF]));
    /* The loss divides by it: floor the divisor (the seeds' 1e-6 hazard never reaches it). */
    float scale = st->isv[FOX_ISV_AUX_LABEL_SCALE_EMA];
    return isfinite(scale) && scale > 1e-8f ? scale : 1e-8f;
}

void
fox_cpu_stab_q_dir_signal(fox_cpu_stab *st, double q_dir_abs)
{
    signal(st, FOX_ISV_Q_DIR_ABS_REF, q_dir_abs);
}

void
fox_cpu_stab_sync_atoms(fox_cpu_stab *st)
{
    const fox_model_layout *lay = st->lay;
    for (int d = 0; d < lay->n_branches; d++) {
        float lo, hi;
        fox_atom_grid_live((const float *)st->isv, d, lay->v_min, lay->v_max, &lo, &hi);
        fox_cpu_net_set_support(st->net, d, lo, hi);
    }
}

/*
 * Mech 2 site, once per train step before the forward: every branch's grid
 * moves toward the batch's Bellman targets over it and is clamped at its
 * write (fox_atom_grid_update: the rule, ATOM_POS_BOUND's observation, the
 * clamp). Slot 47 is checked on the widest moved grid's span before the
 * clamp; the net takes the clamped grids (fox_cpu_net_set_support), and slot
 * 47's point follows the write.
 */
void
fox_cpu_stab_atoms(fox_cpu_stab *st, const float *r, const float *done, int B, float gamma_n)
{
    const fox_model_layout *lay = st->lay;
    float *isv = (float *)st->isv;
    float span = 0.0f;
    for (int d = 0; d < lay->n_branches; d++) {
        float lo, hi, tz_lo = INFINITY, tz_hi = -INFINITY;
        fox_atom_grid_base(isv, st->moving_grid, d, lay->v_min, lay->v_max, &lo, &hi);
        for (int b = 0; b < B; b++) {
            float g = gamma_n * (1.0f - done[b]);
            tz_lo = fminf(tz_lo, r[b] + g * lo);
            tz_hi = fmaxf(tz_hi, r[b] + g * hi);
        }
        fox_atom_grid_targets(st->moving_grid, lay->v_min, lay->v_max, &tz_lo, &tz_hi);
        float s = fox_atom_grid_update(isv, st->adaptive ? st->ws : NULL, st->adaptive,
                                       st->moving_grid, d, lay->v_min, lay->v_max, tz_lo, tz_hi);
        /* A NaN span must win the maximum: slot 47 counts it as exceeding. */
        span = isnan(s) || s > span ? s : span;
    }
    fox_cpu_stab_sync_atoms(st);
    float t;
    if (st->sentinel && fox_sentinel_threshold(FOX_SENT_ATOM_SPAN_MAX, isv, &t) == FOX_OK &&
        !(span < t))
        st->flags[FOX_SENT_ATOM_SPAN_MAX] = 1;
    float *z;
    size_t nz;
    fox_cpu_net_sentinel_buffer(st->net, FOX_SENT_ATOM_SPAN_MAX, 1, &z, &nz);
    fox_cpu_stab_point(st, FOX_SENT_ATOM_SPAN_MAX, z, nz);
}

float
fox_cpu_stab_grad_clip(fox_cpu_stab *st, double *norm)
{
    volatile float *isv = st->isv;
    *norm = fox_cpu_grad_norm_finite(st->grads, st->lay->n_params, NULL);
    /*
     * Fixed mode winsorizes at the last step's clip before feeding the EMAs,
     * so that one outlier step cannot drag its own clip up (the seeds' ratchet
     * pathology); the first step of a fold (GRAD_CLIP at its zero sentinel)
     * feeds raw. Adaptive mode's level sees the unclipped norm, or its bound,
     * the clip itself, could only fall (fox_bound_grad_clip_adaptive).
     */
    float last = isv[FOX_ISV_GRAD_CLIP];
    float x = last > 0.0f && *norm > last ? last : (float)*norm;
    isv[FOX_ISV_GRAD_NORM_SLOW_EMA] =
        fox_ema_first(isv[FOX_ISV_GRAD_NORM_SLOW_EMA], x, FOX_MECH6_SLOW_ALPHA);
    float clip;
    if (st->adaptive) {
        clip = fox_bound_grad_clip_adaptive((float *)isv, st->ws, (float)*norm);
    } else {
        signal(st, FOX_ISV_GRAD_NORM_EMA, x);
        clip = fox_bound_grad_clip_fixed(isv[FOX_ISV_GRAD_NORM_EMA],
                                         isv[FOX_ISV_GRAD_NORM_SLOW_EMA], isv[FOX_ISV_Q_ABS_REF]);
    }
    /* train.grad_clip stays an absolute ceiling when set. */
    if (st->cfg->grad_clip > 0.0f && st->cfg->grad_clip < clip)
        clip = st->cfg->grad_clip;
    isv[FOX_ISV_GRAD_CLIP] = clip;
    return fox_cpu_clip_scale(*norm, clip);
}

/* The threshold of slot (INFINITY when the slot is -1 or the sentinel is off: no flag). */
static float
diag_of(const fox_cpu_stab *st, int slot)
{
    float t;
    if (slot < 0 || !st->sentinel || fox_sentinel_threshold(slot, (const float *)st->isv, &t))
        return INFINITY;
    return t;
}

/* Group g's Adam bounds for this step, read from the ISV now. */
static void
adam_bounds(const fox_cpu_stab *st, int g, fox_cpu_adam_clamp *c)
{
    volatile float *isv = st->isv;
    memset(c, 0, sizeof *c);
    if (st->adaptive) {
        c->w_bound = fox_bound_adaptive(isv[fox_isv_weight_bound_slot(g)]);
        c->m_bound = fox_bound_adaptive(isv[fox_isv_adam_m_bound_slot(g)]);
        c->v_bound = fox_bound_adaptive(isv[fox_isv_adam_v_bound_slot(g)]);
    } else {
        c->w_bound = fox_bound_weight_fixed(isv[FOX_ISV_Q_ABS_REF]);
        c->m_bound = INFINITY;
        c->v_bound = INFINITY;
    }
    c->wd = st->cfg->pearl_wd ? isv[fox_isv_wd_rate_slot(g)] : 0.0f;
    c->w_slot = fox_sentinel_group_slot(FOX_SENT_FAMILY_WEIGHT, g);
    c->m_slot = fox_sentinel_group_slot(FOX_SENT_FAMILY_ADAM_M, g);
    c->v_slot = fox_sentinel_group_slot(FOX_SENT_FAMILY_ADAM_V, g);
    c->w_diag = diag_of(st, c->w_slot);
    c->m_diag = diag_of(st, c->m_slot);
    c->v_diag = diag_of(st, c->v_slot);
}

void
fox_cpu_stab_adam(fox_cpu_stab *st, int64_t t, float grad_scale)
{
    const fox_config *c = st->cfg;
    for (int g = 0; g < FOX_GROUP_COUNT; g++) {
        adam_bounds(st, g, &st->adam[g]);
        for (int k = 0; k < st->gspans[g]; k++) {
            size_t o = st->gspan[g][k].offset;
            /* The L1 step acts where its rate is measured: the trunk's input layer, GRN1 W2. */
            st->adam[g].l1 = c->pearl_l1 && o == st->lay->t[FOX_P_GRN1_W2].offset
                                 ? st->isv[FOX_ISV_L1_LAMBDA]
                                 : 0.0f;
            fox_cpu_adam_step_clamped(st->params + o, st->grads + o, st->adam_m + o, st->adam_v + o,
                                      st->gspan[g][k].len, c->lr, c->adam_b1, c->adam_b2,
                                      c->adam_eps, t, grad_scale, &st->adam[g],
                                      st->sentinel ? st->flags : NULL);
        }
    }
}

/* Pearl C on one in-kernel clamp: feed its engagement, bump the bound slot when saturated. */
static void
pearl_c(fox_cpu_stab *st, int fam, int g, int slot, size_t engaged, size_t total, float step_max)
{
    float bound = st->isv[slot];
    if (fox_pearl_c_update(&st->pc[fam][g], (float)engaged, (float)total, step_max, &bound))
        st->isv[slot] = bound;
}

void
fox_cpu_stab_post_adam(fox_cpu_stab *st)
{
    if (!st->adaptive)
        return;
    const fox_model_layout *lay = st->lay;
    float *isv = (float *)st->isv;
    for (int g = 0; g < FOX_GROUP_COUNT; g++) {
        if (!st->gspans[g])
            continue;
        fox_group_stats gs;
        fox_pearl_b_group(st->params, st->grads, st->adam_m, st->adam_v, st->gspan[g],
                          st->gspans[g], &gs);
        fox_bounds_observe_group(isv, st->ws, g, &gs);
        const fox_cpu_adam_clamp *a = &st->adam[g];
        pearl_c(st, FOX_CPU_FAM_W, g, fox_isv_weight_bound_slot(g), a->w_engaged, a->total,
                a->w_max);
        pearl_c(st, FOX_CPU_FAM_M, g, fox_isv_adam_m_bound_slot(g), a->m_engaged, a->total,
                a->m_max);
        pearl_c(st, FOX_CPU_FAM_V, g, fox_isv_adam_v_bound_slot(g), a->v_engaged, a->total,
                a->v_max);
    }
    /* The trunk's L1 rate, on its input layer GRN1 W2 [H1 × S]. */
    size_t o = lay->t[FOX_P_GRN1_W2].offset;
    float l1 = fox_pearl_b_l1_rate(st->params + o, st->grads + o, lay->t[FOX_P_GRN1_W2].rows,
                                   lay->t[FOX_P_GRN1_W2].cols);
    fox_bounds_observe(isv, st->ws, FOX_ISV_L1_LAMBDA, l1);
}

/* ---- halts and the fold boundary ------------------------------------------------------ */

int
fox_cpu_stab_halt(fox_cpu_stab *st, int trained, float loss, double norm, int *reason, char *msg,
                  size_t len)
{
    int slot_halts = st->strict && fox_sentinel_halt_text(st->flags, NULL, 0) > 0;
    int halt = fox_halt_decide(slot_halts, trained, loss, norm, &st->collapse_run);
    if (halt == FOX_HALT_NONE)
        return FOX_OK;
    *reason = halt;
    fox_sentinel_halt_message(msg, len, halt, st->flags, trained ? loss : 0.0f,
                              trained ? (float)norm : 0.0f);
    return FOX_EHALT;
}

void
fox_cpu_stab_reset_fold(fox_cpu_stab *st)
{
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        st->flags[i] = 0;
    fox_isv_reset((float *)st->isv);
    fox_bounds_wiener_reset(st->ws);
    memset(st->pc, 0, sizeof st->pc);
    st->collapse_run = 0;
    /*
     * A fault fires once per arming: a spent one stays spent across the
     * boundary (re-arming it here made it fire again in every later fold at
     * the same step). A fault not yet reached keeps its step in the new fold.
     */
    st->fault_now = 0;
}
