/*
 * optim.h — the optimizer step of the CPU backend on flat float buffers:
 * the isfinite guard, the global gradient norm, the clip factor, Adam and
 * the target-network sync. Every buffer shares the parameter layout of
 * model.h, so each function is one loop over n floats (padding included:
 * padding holds zeros and stays zero).
 *
 * The clamped Adam step carries the Mech 9 post-Adam weight clamp and, in
 * adaptive mode, the SP4 clamps of m and v, with their engagement flags set
 * inside the loop (the CPU twin of the Adam kernel). Not here: where the
 * bounds come from (Mech 6's clip, the ISV bounds): the backend reads them
 * from the ISV (stab.c) and passes plain numbers in. Thread-safe in the sense
 * that the functions keep no state; the caller owns every buffer.
 */
#ifndef FOX_CPU_OPTIM_H
#define FOX_CPU_OPTIM_H

#include <stddef.h>
#include <stdint.h>

/*
 * isfinite guard: every NaN or ±Inf in grads [n] becomes 0. *nonfinite
 * (may be NULL) receives how many were replaced.
 */
void fox_cpu_grad_sanitize(float *grads, size_t n, size_t *nonfinite);

/* Global L2 norm of grads [n], accumulated in double. */
double fox_cpu_grad_norm(const float *grads, size_t n);

/*
 * The isfinite guard without touching grads: the L2 norm of the finite
 * elements only, *nonfinite (may be NULL) receiving how many were skipped.
 * The clamped Adam step skips the same elements, so the pair computes what
 * sanitize + norm + Adam computed while the sentinel still sees the raw
 * gradient.
 */
double fox_cpu_grad_norm_finite(const float *grads, size_t n, size_t *nonfinite);

/*
 * Factor that brings a gradient of norm `norm` to at most max_norm:
 * min(1, max_norm / norm). 1 when max_norm ≤ 0 (clipping off) or norm is 0;
 * 0 when norm is not finite, so that a poisoned step moves nothing.
 */
float fox_cpu_clip_scale(double norm, float max_norm);

/*
 * One bias-corrected Adam step over n floats, t ≥ 1 the step number
 * (after increment; t < 1 is taken as 1): g = grad_scale·grads; m = b1·m + (1 − b1)·g;
 * v = b2·v + (1 − b2)·g²; params −= lr·(m/(1 − b1^t)) / (sqrt(v/(1 − b2^t)) + eps).
 * The bias corrections are computed once, in double.
 */
void fox_cpu_adam_step(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                       float b1, float b2, float eps, int64_t t, float grad_scale);

/*
 * Bounds and engagement report of one clamped Adam call (one tensor, whose
 * param group gives the bounds). Bounds of INFINITY are off. A clamp
 * "engages" on a value beyond its bound (or not finite: clamp_finite makes it
 * 0); when the engaged value's magnitude also reaches diag, the sentinel slot
 * is set in the loop. That is the in-kernel engagement flag: the fused check
 * reads the buffer after the clamp and could never see such a value.
 */
typedef struct fox_cpu_adam_clamp {
    float w_bound;                /* Mech 9: post-Adam |w| ≤ w_bound */
    float m_bound;                /* adaptive mode: |m| ≤ m_bound */
    float v_bound;                /* adaptive mode: v ≤ v_bound */
    int w_slot, m_slot, v_slot;   /* slot of each engagement flag; -1 for none */
    float w_diag, m_diag, v_diag; /* the slot's threshold (INFINITY: no flag) */
    /* accumulated over calls, for Pearl C */
    size_t w_engaged, m_engaged, v_engaged, total;
    float w_max, m_max, v_max; /* largest finite pre-clamp magnitude of an engaged value */
    /* Pearl B's consumers, before the weight clamp (fox_adam_regularize); 0: off */
    float wd; /* decoupled weight-decay rate */
    float l1; /* L1 proximal rate */
} fox_cpu_adam_clamp;

/*
 * fox_cpu_adam_step with the isfinite guard (an element whose gradient is
 * not finite is skipped: its m, v and weight keep their values, a
 * non-finite weight aside, which is zeroed, and the gradient stays in grads
 * for the sentinel), then m and v clamped at their
 * bounds, the update, c's weight decay and L1 step (fox_adam_regularize),
 * and the weight clamped at its bound, each clamp
 * reporting to c and, past its diag, to flags (may be NULL).
 */
void fox_cpu_adam_step_clamped(float *params, const float *grads, float *m, float *v, size_t n,
                               float lr, float b1, float b2, float eps, int64_t t, float grad_scale,
                               fox_cpu_adam_clamp *c, volatile int *flags);

/*
 * Target update over n floats: polyak in (0, 1) is a soft update
 * target = (1 − polyak)·target + polyak·params; polyak 0 or ≥ 1 is a hard
 * copy (the periodic sync and the fold-boundary sync, Mech 3).
 */
void fox_cpu_target_sync(float *target, const float *params, size_t n, float polyak);

#endif
