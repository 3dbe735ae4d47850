/*
 * optim.h — the optimizer step of the CPU backend on flat float buffers:
 * the isfinite guard, the global gradient norm, the clip factor, Adam and
 * the target-network sync. Every buffer shares the parameter layout of
 * model.h, so each function is one loop over n floats (padding included:
 * padding holds zeros and stays zero).
 *
 * Not here: the adaptive clip bound (Mech 6), the post-Adam weight clamp
 * (Mech 9) and the ISV bookkeeping; the backend computes those and passes
 * plain numbers in. Thread-safe in the sense that the functions keep no
 * state; the caller owns every buffer.
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
 * Target update over n floats: polyak in (0, 1) is a soft update
 * target = (1 − polyak)·target + polyak·params; polyak 0 or ≥ 1 is a hard
 * copy (the periodic sync and the fold-boundary sync, Mech 3).
 */
void fox_cpu_target_sync(float *target, const float *params, size_t n, float polyak);

#endif
