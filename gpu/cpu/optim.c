/*
 * optim.c — gradient guard, norm, clip factor, Adam and target sync for the
 * CPU backend (contracts in optim.h). Plain loops; the CUDA twins must give
 * the same numbers up to float rounding (the norm's order of summation is
 * the only expected difference).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "../bounds.h"
#include "optim.h"

void
fox_cpu_grad_sanitize(float *grads, size_t n, size_t *nonfinite)
{
    size_t bad = 0;
    for (size_t k = 0; k < n; k++)
        if (!isfinite(grads[k])) {
            grads[k] = 0.0f;
            bad++;
        }
    if (nonfinite)
        *nonfinite = bad;
}

double
fox_cpu_grad_norm(const float *grads, size_t n)
{
    double sum = 0.0;
    for (size_t k = 0; k < n; k++)
        sum += (double)grads[k] * (double)grads[k];
    return sqrt(sum);
}

double
fox_cpu_grad_norm_finite(const float *grads, size_t n, size_t *nonfinite)
{
    double sum = 0.0;
    size_t bad = 0;
    for (size_t k = 0; k < n; k++) {
        if (isfinite(grads[k]))
            sum += (double)grads[k] * (double)grads[k];
        else
            bad++;
    }
    if (nonfinite)
        *nonfinite = bad;
    return sqrt(sum);
}

float
fox_cpu_clip_scale(double norm, float max_norm)
{
    if (!isfinite(norm))
        return 0.0f;
    if (!(max_norm > 0.0f) || norm <= (double)max_norm)
        return 1.0f;
    return (float)((double)max_norm / norm);
}

/*
 * One clamp site of the Adam loop, the slow path: a finite x within ±bound
 * passes; otherwise it is engaged (counted, its magnitude kept for Pearl C,
 * flagged past diag) and clamp_finite'd. A bound of INFINITY still engages
 * on NaN and ±Inf, so that no Adam state stays poisoned past the step that
 * reported it.
 */
static __attribute__((noinline, cold)) float
engage(float x, float bound, float diag, int slot, size_t *engaged, float *max_abs,
       volatile int *flags)
{
    float a = fabsf(x);
    if (a <= bound) /* false for NaN; a = Inf ≤ INFINITY passes, hence the test below */
        if (a != INFINITY)
            return x;
    (*engaged)++;
    if (isfinite(a) && a > *max_abs)
        *max_abs = a;
    /* !(a < diag): a NaN fires too. */
    if (flags && slot >= 0 && !(a < diag))
        flags[slot] = 1;
    return fox_clamp_finite(x, bound);
}

/* The fast path's limit: !(|x| <= lim) is "beyond bound, or NaN, or ±Inf" in one comparison. */
static float
limit_of(float bound)
{
    return bound < FLT_MAX ? bound : FLT_MAX;
}

/* Out of bound is rare (a fault, or the 1 % tail of an SP4 p99 bound): keep it off the hot path. */
#define OUT_OF(x, lim) __builtin_expect(!(fabsf(x) <= (lim)), 0)

void
fox_cpu_adam_step_clamped(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                          float b1, float b2, float eps, int64_t t, float grad_scale,
                          fox_cpu_adam_clamp *c, volatile int *flags)
{
    double tt = t < 1 ? 1.0 : (double)t;
    float bc1 = (float)(1.0 - pow((double)b1, tt));
    float bc2 = (float)(1.0 - pow((double)b2, tt));
    float mlim = limit_of(c->m_bound), vlim = limit_of(c->v_bound), wlim = limit_of(c->w_bound);
    for (size_t k = 0; k < n; k++) {
        /* The isfinite guard: a poisoned gradient moves nothing. */
        float g = fabsf(grads[k]) <= FLT_MAX ? grads[k] * grad_scale : 0.0f;
        float mk = b1 * m[k] + (1.0f - b1) * g;
        float vk = b2 * v[k] + (1.0f - b2) * g * g;
        /* m and v are clamped before the update reads them, the weight after it. */
        if (OUT_OF(mk, mlim))
            mk = engage(mk, c->m_bound, c->m_diag, c->m_slot, &c->m_engaged, &c->m_max, flags);
        if (OUT_OF(vk, vlim))
            vk = engage(vk, c->v_bound, c->v_diag, c->v_slot, &c->v_engaged, &c->v_max, flags);
        m[k] = mk;
        v[k] = vk;
        float p = params[k] - lr * (mk / bc1) / (sqrtf(vk / bc2) + eps);
        if (OUT_OF(p, wlim))
            p = engage(p, c->w_bound, c->w_diag, c->w_slot, &c->w_engaged, &c->w_max, flags);
        params[k] = p;
    }
    c->total += n;
}

void
fox_cpu_adam_step(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                  float b1, float b2, float eps, int64_t t, float grad_scale)
{
    /* t < 1 would divide by 1 − b^0 = 0; treat it as the first step. */
    double tt = t < 1 ? 1.0 : (double)t;
    float bc1 = (float)(1.0 - pow((double)b1, tt));
    float bc2 = (float)(1.0 - pow((double)b2, tt));
    for (size_t k = 0; k < n; k++) {
        float g = grads[k] * grad_scale;
        m[k] = b1 * m[k] + (1.0f - b1) * g;
        v[k] = b2 * v[k] + (1.0f - b2) * g * g;
        float mhat = m[k] / bc1, vhat = v[k] / bc2;
        params[k] -= lr * mhat / (sqrtf(vhat) + eps);
    }
}

void
fox_cpu_target_sync(float *target, const float *params, size_t n, float polyak)
{
    if (!(polyak > 0.0f) || polyak >= 1.0f) {
        memcpy(target, params, n * sizeof *target);
        return;
    }
    for (size_t k = 0; k < n; k++)
        target[k] = (1.0f - polyak) * target[k] + polyak * params[k];
}
