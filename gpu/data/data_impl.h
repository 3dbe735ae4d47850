/*
 * data_impl.h — what the files of the data module share and nobody else
 * sees: the series allocator that the generators and the CSV loader all
 * fill, the bar shape of the generators, and the trailing-window sums and weekday that the CSV loader's
 * regime proxy and the features both compute. Nothing outside gpu/data/
 * includes it.
 */
#ifndef FOX_DATA_IMPL_H
#define FOX_DATA_IMPL_H

#include <math.h>

#include "gpu/data.h"
#include "gpu/rng.h"

/*
 * Allocate the arrays of s for n bars: close and regime always, time, the
 * open/high/low triple and volume as asked. FOX_ENOMEM leaves s zeroed.
 */
int fox__series_alloc(fox_series *s, int n, int with_time, int with_ohl, int with_volume);

/*
 * The arrays of a generated series (every column) for n ≥ 1000 bars:
 * FOX_EINVAL for a NULL s or fewer bars, FOX_ENOMEM; s is zeroed on failure.
 */
int fox__series_alloc_generated(fox_series *s, int n);

/*
 * The bar of a generated series around its close: the open gapped from the
 * previous close by σ/10 (bar 0 opens at its close), high and low beyond
 * both by a half-normal of σ/2, volume the level times a log-normal. The
 * generators share it so that their bars have one shape; the draws come
 * from rng in a fixed order, so a seed gives the same bars bit for bit.
 */
void fox__series_fill_bar(fox_series *s, int i, double prev_close, double close, double sigma,
                          double volume_level, fox_rng *rng);

/* 0 = Sunday … 6 = Saturday, UTC; 1970-01-01 was a Thursday. */
static inline int
weekday_utc(double t)
{
    long day = (long)floor(t / 86400.0);
    return (int)(((day + 4) % 7 + 7) % 7);
}

/*
 * Trailing-window sums updated in O(1) per bar, in double. The window holds
 * the last w values pushed; before w pushes it holds all of them. Each sum
 * at bar t depends only on values pushed up to t, in a fixed order, so the
 * features of bar t are bit-identical whatever follows it.
 */
typedef struct {
    int w, count;
    double sum, sum2;
} roll;

static inline void
roll_push(roll *r, double x, double old)
{
    r->sum += x;
    r->sum2 += x * x;
    if (r->count == r->w) {
        r->sum -= old;
        r->sum2 -= old * old;
    } else {
        r->count++;
    }
}

static inline double
roll_mean(const roll *r)
{
    return r->count ? r->sum / r->count : 0.0;
}

static inline double
roll_std(const roll *r)
{
    if (r->count < 2)
        return 0.0;
    double m = r->sum / r->count;
    double var = r->sum2 / r->count - m * m;
    return var > 0.0 ? sqrt(var) : 0.0;
}

#endif
