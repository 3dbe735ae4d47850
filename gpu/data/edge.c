/*
 * edge.c — the known-edge generators: series with one planted, tradable
 * edge whose expected return is known in closed form and whose simple rule
 * (a line of code a person would write) is known with it.
 *
 * Why they exist: a learner is tested like any other code, on inputs whose
 * right answer is known. If the agent cannot reach a good part of a one-line
 * rule's Sharpe on such a series, net of the same costs, it will not find a
 * subtler edge in real bars. Each kind plants a different edge, so that a
 * change that helps one kind only shows as such:
 *
 *   autocorr  daily bars whose return carries a lagged autocorrelation:
 *             r_t = c·r_{t−h} + √(1 − c²)·σ·z_t, c = data.edge_coef (either
 *             sign), h = data.edge_lag. Rule: sign(c)·sign(r_{t+1−h}).
 *   volmom    daily bars with GARCH(1,1) volatility and volatility-scaled
 *             momentum: r_{t+1} = σ_{t+1}·(k·m_t + z_{t+1}), m_t the sign of
 *             the trailing FOX_VOLMOM_LOOKBACK-bar return, k = data.edge_coef.
 *             Rule: the sign of the trailing FOX_VOLMOM_LOOKBACK-bar return.
 *   hours     30-minute bars whose drift is data.edge_coef × σ per bar in two
 *             windows of the UTC day, upward from 08:00 to 10:00 and downward
 *             from 14:00 to 16:00, nothing otherwise. Rule: long into the
 *             first window, short into the second, flat otherwise.
 *
 * drift[t] holds the conditional mean of r_t given everything up to bar
 * t−1, which each kind can compute at the close of t−1; the oracle trades on
 * drift[t+1] with the costs, the rule on its sign at full size. The same
 * seed gives the same bars, bit for bit, on every machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/data.h"
#include "gpu/data/data_impl.h"
#include "gpu/rng.h"

#define EDGE_PRICE0       100.0
#define EDGE_VOLUME       10000.0
#define EDGE_T0           1.7e9   /* 2023-11-14, a Tuesday */
#define EDGE_DAY_SECONDS  86400.0
#define EDGE_DAILY_SIGMA  0.01    /* σ of a daily bar (1 %) */
#define EDGE_DAILY_P      252.0   /* weekdays only */
#define EDGE_HALF_HOUR    1800.0
#define EDGE_HOURS_P      17520.0 /* 30-minute bars, 24/7 */

enum { KIND_AUTOCORR, KIND_VOLMOM, KIND_HOURS };

/* The expected return of bar t+1 at the close of bar t: drift[t+1], 0 past the end. */
static double
edge_expected_return(const fox_series *s, int t)
{
    return t + 1 < s->n ? (double)s->drift[t + 1] : 0.0;
}

/* The simple rule of every kind: the sign of what it plants, at full size. */
static double
edge_rule_position(const fox_series *s, int t)
{
    double e = edge_expected_return(s, t);
    return e > 0.0 ? 1.0 : e < 0.0 ? -1.0 : 0.0;
}

/* The time of daily bar i: weekdays only, at 21:00 UTC (a close). */
static double
daily_time(int i)
{
    /* EDGE_T0 is a Tuesday; count weekdays forward from it. */
    long week = i / 5, day = i % 5;
    long offset = day + (day >= 4 ? 2 : 0); /* Tue..Fri, then Mon after the weekend */
    return EDGE_T0 + EDGE_DAY_SECONDS * (double)(7 * week + offset) + 21.0 * 3600.0 -
           fmod(EDGE_T0, EDGE_DAY_SECONDS);
}

/* The drift of a 30-minute bar that closes at time t, in units of σ × coef. */
static double
hours_sign(double t)
{
    double open_hour = fmod(fmod(t - EDGE_HALF_HOUR, EDGE_DAY_SECONDS) + EDGE_DAY_SECONDS,
                            EDGE_DAY_SECONDS) / 3600.0;
    if (open_hour >= 8.0 && open_hour < 10.0)
        return 1.0;
    if (open_hour >= 14.0 && open_hour < 16.0)
        return -1.0;
    return 0.0;
}

static int
edge_series(fox_series *s, int n, uint64_t seed, int kind, const fox_gen_params *gp)
{
    int rc = fox__series_alloc_generated(s, n);
    if (rc != FOX_OK)
        return rc;
    s->drift = calloc((size_t)n, sizeof(float));
    double *ret = calloc((size_t)n, sizeof(double));
    if (!s->drift || !ret) {
        free(ret);
        fox_series_fini(s);
        return FOX_ENOMEM;
    }
    fox_rng rng;
    fox_rng_seed(&rng, seed ^ (0xed6e0ULL + (uint64_t)kind));
    const double c = gp->edge_coef;
    const int lag = gp->edge_lag;
    const double sigma0 = kind == KIND_HOURS ? FOX_NOEDGE_SIGMA : EDGE_DAILY_SIGMA;
    const double var0 = sigma0 * sigma0;
    const double omega = var0 * (1.0 - FOX_GARCH_ALPHA - FOX_GARCH_BETA);
    double var = var0, trail = 0.0; /* volmom: σ²_t and the trailing return */
    double logp = log(EDGE_PRICE0), prev_close = EDGE_PRICE0;

    for (int i = 0; i < n; i++) {
        double t = kind == KIND_HOURS ? EDGE_T0 + EDGE_HALF_HOUR * (double)i : daily_time(i);
        double mu = 0.0, sigma = sigma0, noise_scale = 1.0;
        switch (kind) {
        case KIND_AUTOCORR:
            mu = i - lag >= 0 ? c * ret[i - lag] : 0.0;
            noise_scale = sqrt(1.0 - c * c);
            break;
        case KIND_VOLMOM:
            if (i > 0)
                var = omega + FOX_GARCH_ALPHA * ret[i - 1] * ret[i - 1] + FOX_GARCH_BETA * var;
            sigma = sqrt(var);
            mu = i > FOX_VOLMOM_LOOKBACK ? sigma * c * (trail > 0.0 ? 1.0 : trail < 0.0 ? -1.0 : 0.0)
                                         : 0.0;
            break;
        default:
            mu = c * sigma0 * hours_sign(t);
            break;
        }
        double r = i > 0 ? mu + noise_scale * sigma * fox_rng_normal(&rng) : 0.0;
        ret[i] = r;
        if (kind == KIND_VOLMOM) {
            trail += r;
            if (i - FOX_VOLMOM_LOOKBACK >= 0)
                trail -= ret[i - FOX_VOLMOM_LOOKBACK];
        }
        logp += r;
        double close = exp(logp);
        s->time[i] = t;
        fox__series_fill_bar(s, i, prev_close, close, sigma, EDGE_VOLUME * sigma / sigma0, &rng);
        s->drift[i] = (float)(i > 0 ? mu : 0.0);
        s->regime[i] = (int8_t)(mu != 0.0 ? FOX_REGIME_TREND : FOX_REGIME_QUIET);
        prev_close = close;
    }
    free(ret);
    s->expected_return = edge_expected_return;
    s->rule_position = edge_rule_position;
    s->bars_per_year = kind == KIND_HOURS ? EDGE_HOURS_P : EDGE_DAILY_P;
    switch (kind) {
    case KIND_AUTOCORR:
        s->bars_per_year_from = "the generator's daily bars (weekdays)";
        if (lag == 1)
            snprintf(s->rule_name, sizeof s->rule_name, "%ssign of the last return",
                     c < 0.0 ? "-" : "");
        else
            snprintf(s->rule_name, sizeof s->rule_name, "%ssign of the return %d bars back",
                     c < 0.0 ? "-" : "", lag - 1);
        snprintf(s->source, sizeof s->source, "autocorr(lag=%d,coef=%g,seed=%llu)", lag, c,
                 (unsigned long long)seed);
        break;
    case KIND_VOLMOM:
        s->bars_per_year_from = "the generator's daily bars (weekdays)";
        snprintf(s->rule_name, sizeof s->rule_name, "%ssign of the %d-bar return",
                 c < 0.0 ? "-" : "", FOX_VOLMOM_LOOKBACK);
        snprintf(s->source, sizeof s->source, "volmom(coef=%g,seed=%llu)", c,
                 (unsigned long long)seed);
        break;
    default:
        s->bars_per_year_from = "the generator's 30-minute bars";
        snprintf(s->rule_name, sizeof s->rule_name, "%s 08-10 UTC, %s 14-16 UTC, else flat",
                 c < 0.0 ? "short" : "long", c < 0.0 ? "long" : "short");
        snprintf(s->source, sizeof s->source, "hours(coef=%g,seed=%llu)", c,
                 (unsigned long long)seed);
        break;
    }
    return FOX_OK;
}

int
fox_series_autocorr(fox_series *s, int n, uint64_t seed, const fox_gen_params *gp)
{
    return edge_series(s, n, seed, KIND_AUTOCORR, gp);
}

int
fox_series_volmom(fox_series *s, int n, uint64_t seed, const fox_gen_params *gp)
{
    return edge_series(s, n, seed, KIND_VOLMOM, gp);
}

int
fox_series_hours(fox_series *s, int n, uint64_t seed, const fox_gen_params *gp)
{
    return edge_series(s, n, seed, KIND_HOURS, gp);
}
