/*
 * optim.c — gradient guard, norm, clip factor, Adam and target sync for the
 * CPU backend (contracts in optim.h). Plain loops, but for Adam, which takes
 * four elements at a time with SSE2 where the target has it (adam_lanes:
 * the same operations in the same order as the plain adam_elem, so the same
 * bits). The CUDA twins must give the same numbers up to float rounding
 * (the norm's order of summation is the only expected difference).
 */
#include <float.h>
#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "gpu/bounds.h"
#include "gpu/cpu/optim.h"

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

/* The constants of one clamped Adam call. */
typedef struct adam_consts {
    float lr, b1, b2, eps, bc1, bc2, scale, mlim, vlim, wlim, wd, l1;
} adam_consts;

/* Element k of the clamped step: the scalar path, and the lanes' fallback. */
static inline void
adam_elem(float *params, const float *grads, float *m, float *v, size_t k, const adam_consts *a,
          fox_cpu_adam_clamp *c, volatile int *flags)
{
    /*
     * The isfinite guard (the seeds' Adam kernels): a non-finite gradient
     * skips the element's update entirely, so m, v and the weight keep their
     * values; counting it as 0 would still move the weight by its momentum.
     * A weight that is itself not finite (slot 14: only a fault can put one
     * past Mech 9) poisons its own gradient through what it feeds, so the
     * skip would keep it for good: it is zeroed, as the clamp_finite of Mech
     * 9 zeroes it when its gradient is finite.
     */
    if (!(fabsf(grads[k]) <= FLT_MAX)) {
        if (!(fabsf(params[k]) <= FLT_MAX))
            params[k] = 0.0f;
        return;
    }
    float g = grads[k] * a->scale;
    float mk = a->b1 * m[k] + (1.0f - a->b1) * g;
    float vk = a->b2 * v[k] + (1.0f - a->b2) * g * g;
    /* m and v are clamped before the update reads them, the weight after it. */
    if (OUT_OF(mk, a->mlim))
        mk = engage(mk, c->m_bound, c->m_diag, c->m_slot, &c->m_engaged, &c->m_max, flags);
    if (OUT_OF(vk, a->vlim))
        vk = engage(vk, c->v_bound, c->v_diag, c->v_slot, &c->v_engaged, &c->v_max, flags);
    m[k] = mk;
    v[k] = vk;
    float p = params[k] - a->lr * (mk / a->bc1) / (sqrtf(vk / a->bc2) + a->eps);
    p = fox_adam_regularize(p, params[k], a->lr, a->wd, a->l1);
    if (OUT_OF(p, a->wlim))
        p = engage(p, c->w_bound, c->w_diag, c->w_slot, &c->w_engaged, &c->w_max, flags);
    params[k] = p;
}

#ifdef __SSE2__
/*
 * Four elements at once with SSE2: the same IEEE operations in the same
 * order as adam_elem (divide and square root are correctly rounded either
 * way), so the same bits. Returns the next k; a group whose m or v leaves
 * its bound goes through adam_elem whole, so engagements keep their order.
 */
static size_t
adam_lanes(float *params, const float *grads, float *m, float *v, size_t n, const adam_consts *a,
           fox_cpu_adam_clamp *c, volatile int *flags)
{
    const __m128 absm = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
    const __m128 fmax = _mm_set1_ps(FLT_MAX), scale = _mm_set1_ps(a->scale);
    const __m128 b1 = _mm_set1_ps(a->b1), b1c = _mm_set1_ps(1.0f - a->b1);
    const __m128 b2 = _mm_set1_ps(a->b2), b2c = _mm_set1_ps(1.0f - a->b2);
    const __m128 mlim = _mm_set1_ps(a->mlim), vlim = _mm_set1_ps(a->vlim);
    const __m128 wlim = _mm_set1_ps(a->wlim), lr = _mm_set1_ps(a->lr);
    const __m128 bc1 = _mm_set1_ps(a->bc1), bc2 = _mm_set1_ps(a->bc2), eps = _mm_set1_ps(a->eps);
    size_t k = 0;
    for (; k + 4 <= n; k += 4) {
        __m128 gr = _mm_loadu_ps(grads + k);
        /* A non-finite gradient in the group: adam_elem skips it, the others go the same way. */
        if (__builtin_expect(_mm_movemask_ps(_mm_cmple_ps(_mm_and_ps(gr, absm), fmax)) != 0xf, 0)) {
            for (size_t j = k; j < k + 4; j++)
                adam_elem(params, grads, m, v, j, a, c, flags);
            continue;
        }
        __m128 g = _mm_mul_ps(gr, scale);
        __m128 mk = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(m + k)), _mm_mul_ps(b1c, g));
        __m128 vk =
            _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(v + k)), _mm_mul_ps(_mm_mul_ps(b2c, g), g));
        __m128 in = _mm_and_ps(_mm_cmple_ps(_mm_and_ps(mk, absm), mlim),
                               _mm_cmple_ps(_mm_and_ps(vk, absm), vlim));
        if (__builtin_expect(_mm_movemask_ps(in) != 0xf, 0)) {
            for (size_t j = k; j < k + 4; j++)
                adam_elem(params, grads, m, v, j, a, c, flags);
            continue;
        }
        _mm_storeu_ps(m + k, mk);
        _mm_storeu_ps(v + k, vk);
        __m128 step = _mm_div_ps(_mm_mul_ps(lr, _mm_div_ps(mk, bc1)),
                                 _mm_add_ps(_mm_sqrt_ps(_mm_div_ps(vk, bc2)), eps));
        __m128 p = _mm_sub_ps(_mm_loadu_ps(params + k), step);
        int win = _mm_movemask_ps(_mm_cmple_ps(_mm_and_ps(p, absm), wlim));
        _mm_storeu_ps(params + k, p);
        if (__builtin_expect(win != 0xf, 0))
            for (int j = 0; j < 4; j++)
                if (!(win >> j & 1))
                    params[k + j] = engage(params[k + j], c->w_bound, c->w_diag, c->w_slot,
                                           &c->w_engaged, &c->w_max, flags);
    }
    return k;
}
#endif

void
fox_cpu_adam_step_clamped(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                          float b1, float b2, float eps, int64_t t, float grad_scale,
                          fox_cpu_adam_clamp *c, volatile int *flags)
{
    double tt = t < 1 ? 1.0 : (double)t;
    adam_consts a = {lr,
                     b1,
                     b2,
                     eps,
                     (float)(1.0 - pow((double)b1, tt)),
                     (float)(1.0 - pow((double)b2, tt)),
                     grad_scale,
                     limit_of(c->m_bound),
                     limit_of(c->v_bound),
                     limit_of(c->w_bound),
                     c->wd,
                     c->l1};
    size_t k = 0;
#ifdef __SSE2__
    /* The lanes have no regularizer: with one on, every element takes the scalar path. */
    if (!(c->wd > 0.0f) && !(c->l1 > 0.0f))
        k = adam_lanes(params, grads, m, v, n, &a, c, flags);
#endif
    for (; k < n; k++)
        adam_elem(params, grads, m, v, k, &a, c, flags);
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
