/*
 * bounds.c — host reference passes of the SP4 maths: the three-pass p99 over
 * a buffer (or a param group's runs of it), Pearl B's per-group statistics and
 * trunk L1 rate, and the resets of the Pearl D states.
 *
 * The per-value maths (Pearls A, C, D, clamp_finite, the fixed-mode formulas,
 * the histogram's bin and percentile steps) is header-inline in bounds.h so
 * the CUDA kernels compile the same code; this file only loops over buffers.
 * Sums are in double: these are references the kernels are checked against.
 */
#include "gpu/bounds.h"

#include <float.h>
#include <string.h>

#include "common/error.h"
#include "gpu/isv.h"

/* Pass 1 over one run: min and max of the finite |x|, and how many there were. */
static void
pass_minmax(const float *x, size_t n, float *lo, float *hi, size_t *count)
{
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!isfinite(a))
            continue;
        if (a < *lo)
            *lo = a;
        if (a > *hi)
            *hi = a;
        (*count)++;
    }
}

/*
 * Pass 2 over one run: the histogram of the finite |x| over [lo, hi]. The
 * bins of four values at a time are fox_p99_bin's float steps on four lanes
 * (GCC vector extensions: SSE2 at the baseline ISA, the same IEEE
 * operations, so the same bins); a non-finite value counts in hist's spare
 * bin past the last ([FOX_P99_BINS + 1] long), which the walk never reads.
 */
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));

static void
pass_hist(const float *x, size_t n, float lo, float scale, uint32_t *hist)
{
    const i32x4 absm = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
    const i32x4 inf = {0x7f800000, 0x7f800000, 0x7f800000, 0x7f800000};
    const i32x4 last = {FOX_P99_BINS - 1, FOX_P99_BINS - 1, FOX_P99_BINS - 1, FOX_P99_BINS - 1};
    const i32x4 spare = {FOX_P99_BINS, FOX_P99_BINS, FOX_P99_BINS, FOX_P99_BINS};
    const f32x4 vlo = {lo, lo, lo, lo}, vscale = {scale, scale, scale, scale};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        i32x4 bits;
        memcpy(&bits, x + i, sizeof bits);
        bits &= absm;
        i32x4 fin = bits < inf;
        f32x4 a;
        memcpy(&a, &bits, sizeof a);
        f32x4 f = (a - vlo) * vscale;
        i32x4 b = __builtin_convertvector(f, i32x4); /* (int)f, toward zero */
        i32x4 pos = f > 0.0f;
        b &= pos; /* f > 0 ? (int)f : 0 */
        i32x4 over = b > last;
        b = (b & ~over) | (last & over);
        b = (b & fin) | (spare & ~fin);
        hist[b[0]]++;
        hist[b[1]]++;
        hist[b[2]]++;
        hist[b[3]]++;
    }
    for (; i < n; i++) {
        float a = fabsf(x[i]);
        if (isfinite(a))
            hist[fox_p99_bin(a, lo, scale)]++;
    }
}

float
fox_p99_abs_spans(const float *base, const fox_span *spans, int n_spans)
{
    if (!base || !spans || n_spans <= 0)
        return 0.0f;
    float lo = FLT_MAX, hi = 0.0f;
    size_t count = 0;
    for (int k = 0; k < n_spans; k++)
        pass_minmax(base + spans[k].offset, spans[k].len, &lo, &hi, &count);
    float p99, scale;
    if (fox_p99_degenerate(count, lo, hi, &p99, &scale))
        return p99;
    uint32_t hist[FOX_P99_BINS + 1]; /* + pass_hist's spare bin */
    memset(hist, 0, sizeof hist);
    for (int k = 0; k < n_spans; k++)
        pass_hist(base + spans[k].offset, spans[k].len, lo, scale, hist);
    return fox_p99_from_hist(hist, (uint32_t)count, lo, hi);
}

float
fox_p99_abs(const float *x, size_t n)
{
    fox_span one = {0, n};
    return fox_p99_abs_spans(x, &one, 1);
}

float
fox_q_ref_obs(const float *tq, size_t rows, int nt, float bound)
{
    if (!tq || rows == 0 || nt <= 0)
        return NAN;
    double s = 0.0;
    for (size_t r = 0; r < rows; r++)
        s += fox_q_ref_row(tq + r * (size_t)nt, nt, bound);
    return (float)(s / (double)rows);
}

int
fox_pearl_b_group(const float *w, const float *g, const float *m, const float *v,
                  const fox_span *spans, int n_spans, fox_group_stats *out)
{
    if (!out || !spans || n_spans <= 0)
        return FOX_EINVAL;
    out->weight_p99 = w ? fox_p99_abs_spans(w, spans, n_spans) : NAN;
    out->adam_m_p99 = m ? fox_p99_abs_spans(m, spans, n_spans) : NAN;
    out->adam_v_p99 = v ? fox_p99_abs_spans(v, spans, n_spans) : NAN;
    out->wd_rate = NAN;
    if (w && g) {
        double dot = 0.0, sq = 0.0;
        for (int k = 0; k < n_spans; k++) {
            const float *wk = w + spans[k].offset, *gk = g + spans[k].offset;
            for (size_t i = 0; i < spans[k].len; i++) {
                /* A non-finite gradient is the sentinel's business, not the rate's. */
                if (!isfinite(wk[i]) || !isfinite(gk[i]))
                    continue;
                dot += (double)wk[i] * gk[i];
                sq += (double)wk[i] * wk[i];
            }
        }
        out->wd_rate = fox_wd_rate((float)dot, (float)sq);
    }
    return FOX_OK;
}

float
fox_entropy_deficit(const float *g, int rows, int cols)
{
    if (!g || rows <= 0 || cols <= 1)
        return 0.0f;
    double total = 0.0, plogp = 0.0;
    int live = 0;
    /* Column norms first: p_i needs their sum. Two passes keep memory at O(1). */
    for (int i = 0; i < cols; i++) {
        double s = fox_column_sq(g, rows, cols, i);
        if (s > 0.0) {
            total += sqrt(s);
            live++;
        }
    }
    if (live < 2 || !(total > 0.0))
        return 0.0f;
    for (int i = 0; i < cols; i++) {
        double s = fox_column_sq(g, rows, cols, i);
        if (s > 0.0) {
            double p = sqrt(s) / total;
            plogp += p * log(p);
        }
    }
    return fox_entropy_deficit_of((double)live, total, plogp);
}

float
fox_pearl_b_l1_rate(const float *w, const float *g, int rows, int cols)
{
    if (!w || !g || rows <= 0 || cols <= 0)
        return 0.0f;
    double sw = 0.0, sg = 0.0;
    size_t n = (size_t)rows * cols, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(w[i]) || !isfinite(g[i]))
            continue;
        sw += fabs((double)w[i]);
        sg += fabs((double)g[i]);
        k++;
    }
    if (k == 0)
        return 0.0f;
    return fox_l1_rate_of(sw, sg, (double)k, fox_entropy_deficit(g, rows, cols));
}

void
fox_bounds_observe_group(float *isv, fox_wiener_state *ws, int group, const fox_group_stats *st)
{
    if (fox_isv_weight_bound_slot(group) < 0)
        return;
    /* NaN statistics are "not observed": fox_pearls_ad_update ignores them. */
    fox_bounds_observe(isv, ws, fox_isv_weight_bound_slot(group), st->weight_p99);
    fox_bounds_observe(isv, ws, fox_isv_adam_m_bound_slot(group), st->adam_m_p99);
    fox_bounds_observe(isv, ws, fox_isv_adam_v_bound_slot(group), st->adam_v_p99);
    fox_bounds_observe(isv, ws, fox_isv_wd_rate_slot(group), st->wd_rate);
}

void
fox_bounds_wiener_reset(fox_wiener_state *ws)
{
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        if (fox_isv_reset_rule(i, NULL) != FOX_ISV_KEEP)
            memset(&ws[i], 0, sizeof ws[i]);
}

void
fox_bounds_wiener_init(fox_wiener_state *ws)
{
    memset(ws, 0, FOX_ISV_TOTAL_DIM * sizeof ws[0]);
}
