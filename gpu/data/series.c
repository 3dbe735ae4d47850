/*
 * series.c — the lifecycle of a fox_series: the allocation that the
 * generators and the CSV loader share, the bar shape the generators share,
 * and fini.
 *
 * Every array hangs from the struct and is host memory; the engine copies
 * what it needs to the device. A struct that failed to fill is left zeroed,
 * so fini on it is always safe.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/data.h"
#include "gpu/data/data_impl.h"
#include "gpu/rng.h"

void
fox_series_fini(fox_series *s)
{
    if (!s)
        return;
    free(s->time);
    free(s->open);
    free(s->high);
    free(s->low);
    free(s->close);
    free(s->volume);
    free(s->regime);
    free(s->drift);
    memset(s, 0, sizeof(*s));
}

int
fox__series_alloc(fox_series *s, int n, int with_time, int with_ohl, int with_volume)
{
    size_t nz = (size_t)n;
    s->n = n;
    s->close = malloc(nz * sizeof(float));
    s->regime = malloc(nz * sizeof(int8_t));
    if (with_time)
        s->time = malloc(nz * sizeof(double));
    if (with_ohl) {
        s->open = malloc(nz * sizeof(float));
        s->high = malloc(nz * sizeof(float));
        s->low = malloc(nz * sizeof(float));
    }
    if (with_volume)
        s->volume = malloc(nz * sizeof(float));
    if (!s->close || !s->regime || (with_time && !s->time) ||
        (with_ohl && (!s->open || !s->high || !s->low)) || (with_volume && !s->volume)) {
        fox_series_fini(s);
        return FOX_ENOMEM;
    }
    return FOX_OK;
}

int
fox__series_alloc_generated(fox_series *s, int n)
{
    if (!s)
        return FOX_EINVAL;
    memset(s, 0, sizeof(*s));
    if (n < 1000)
        return FOX_EINVAL;
    return fox__series_alloc(s, n, 1, 1, 1);
}

void
fox__series_fill_bar(fox_series *s, int i, double prev_close, double close, double sigma,
                     double volume_level, fox_rng *rng)
{
    double open = i > 0 ? prev_close * exp(sigma / 10.0 * fox_rng_normal(rng)) : close;
    double hi = fmax(open, close) * exp(0.5 * sigma * fabs(fox_rng_normal(rng)));
    double lo = fmin(open, close) * exp(-0.5 * sigma * fabs(fox_rng_normal(rng)));
    s->open[i] = (float)open;
    s->close[i] = (float)close;
    /* Rounding to float is monotone, but clamp anyway so the invariant holds bit for bit. */
    s->high[i] = fmaxf((float)hi, fmaxf(s->open[i], s->close[i]));
    s->low[i] = fminf((float)lo, fminf(s->open[i], s->close[i]));
    s->volume[i] = (float)(volume_level * exp(0.35 * fox_rng_normal(rng)));
}
