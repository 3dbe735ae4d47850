/*
 * synth.c — the seeded synthetic bar series: four Markov-switching regimes
 * with fat-tailed returns and their true labels, the embedded default
 * dataset.
 *
 * What it does not do: read files, compute features or split folds. The
 * same seed gives the same bars, bit for bit, on every machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/data.h"
#include "gpu/data/data_impl.h"
#include "gpu/rng.h"

/*
 * The four regimes. Returns follow r_t = μ + d_t with d_t = φ·d_{t−1} + σ·ε_t
 * and ε_t a unit-variance Student-t(4): the deviation state d carries across
 * a switch, so a regime's φ acts on the previous bar's move whatever its
 * regime was. Trend is the only regime with drift; its |μ| is a fraction of
 * the base σ and its sign is drawn at entry.
 *
 * What a learner can exploit, causally: trend shows as a run in cumulative
 * returns and z-scores (follow it); mean-reversion as a base-volatility
 * stretch with no run (fade the last bar); high-vol and quiet are told apart
 * by the rolling volatilities. Mean dwell 150–300 bars keeps a regime long
 * enough to be recognised from a 32–64-bar window and exploited afterwards.
 */
enum { N_REGIMES = 4 };

static const struct regime_param {
    double dwell;  /* mean bars spent in the regime (geometric) */
    double phi;    /* AR(1) coefficient of the return deviation */
    double sigma;  /* innovation scale, × SYN_SIGMA */
    double drift;  /* |μ| per bar, × SYN_SIGMA; sign drawn at entry */
    double volume; /* volume level, × SYN_VOLUME */
} syn_regime[N_REGIMES] = {
    [FOX_REGIME_TREND] = {300.0, +0.25, 1.0, 0.20, 1.0},
    [FOX_REGIME_MEANREV] = {300.0, -0.25, 1.0, 0.0, 1.0},
    [FOX_REGIME_HIGHVOL] = {150.0, +0.05, 2.5, 0.0, 2.5},
    [FOX_REGIME_QUIET] = {250.0, +0.10, 0.4, 0.0, 0.6},
};

#define SYN_SIGMA       0.008 /* base σ per hourly bar */
#define SYN_NU          4.0   /* Student-t degrees of freedom */
#define SYN_TAIL_CLIP   8.0   /* innovations clipped to ±8 unit-variance σ */
#define SYN_PRICE0      100.0
#define SYN_VOLUME      10000.0
#define SYN_T0          1.7e9
#define SYN_BAR_SECONDS 3600.0

/*
 * E[r_{t+1}] at the close of bar t: the drift plus the AR(1) carry of the
 * deviation d_t = r_t − μ_t, assuming the regime of bar t persists (it
 * leaves with probability 1/dwell ≤ 0.7 % a bar). The oracle baseline trades
 * on it; it knows the regime label and the drift, which no causal policy
 * does.
 */
static double
syn_expected_return(const fox_series *s, int t)
{
    double mu = s->drift[t];
    double r = t > 0 ? log((double)s->close[t] / (double)s->close[t - 1]) : 0.0;
    return mu + syn_regime[s->regime[t]].phi * (r - mu);
}

/* Student-t(ν = 4) scaled to unit variance: z / sqrt(χ²₄/4) · sqrt((ν−2)/ν). */
static double
syn_student_t4(fox_rng *r)
{
    double z = fox_rng_normal(r);
    double chi2 = 0.0;
    for (int i = 0; i < 4; i++) {
        double g = fox_rng_normal(r);
        chi2 += g * g;
    }
    if (chi2 < 1e-12)
        chi2 = 1e-12;
    double t = z / sqrt(chi2 / SYN_NU) * sqrt((SYN_NU - 2.0) / SYN_NU);
    /*
     * Clip at ±SYN_TAIL_CLIP σ: the fourth moment of t(4) is infinite, and one
     * 30σ bar would dominate a fold's Sharpe and the replay's TD errors.
     * The clip is far out in the tail (kurtosis stays well above 3).
     */
    return fmax(-SYN_TAIL_CLIP, fmin(SYN_TAIL_CLIP, t));
}

int
fox_series_synthetic(fox_series *s, int n, uint64_t seed)
{
    int rc = fox__series_alloc_generated(s, n);
    if (rc != FOX_OK)
        return rc;
    s->drift = malloc((size_t)n * sizeof(float));
    if (!s->drift) {
        fox_series_fini(s);
        return FOX_ENOMEM;
    }

    fox_rng rng;
    fox_rng_seed(&rng, seed);

    int reg = (int)fox_rng_below(&rng, N_REGIMES);
    double mu = 0.0;  /* current drift per bar */
    double dev = 0.0; /* d_{t−1}: last return minus its drift */
    double logp = log(SYN_PRICE0);
    double prev_close = SYN_PRICE0;
    int entering = 1;

    for (int i = 0; i < n; i++) {
        /* Markov switch: leave with probability 1/dwell, to one of the other three. */
        if (i > 0 && fox_rng_uniform(&rng) < 1.0 / syn_regime[reg].dwell) {
            reg = (reg + 1 + (int)fox_rng_below(&rng, N_REGIMES - 1)) % N_REGIMES;
            entering = 1;
        }
        const struct regime_param *p = &syn_regime[reg];
        if (entering) {
            /*
             * The trend's sign leans against the distance travelled from
             * the start, so that the drifts cancel over the series and
             * buy-and-hold stays a weak baseline; it is still a coin flip
             * near the start price, so no single trend is foreseeable.
             */
            double p_up = 0.5 - 0.35 * tanh((logp - log(SYN_PRICE0)) / 0.5);
            mu = p->drift > 0.0 ? (fox_rng_uniform(&rng) < p_up ? 1.0 : -1.0) * p->drift * SYN_SIGMA
                                : 0.0;
            entering = 0;
        }
        double sigma = p->sigma * SYN_SIGMA;
        dev = p->phi * dev + sigma * syn_student_t4(&rng);
        double r = i > 0 ? mu + dev : 0.0;
        logp += r;
        double close = exp(logp);
        s->time[i] = SYN_T0 + SYN_BAR_SECONDS * (double)i;
        fox__series_fill_bar(s, i, prev_close, close, sigma, SYN_VOLUME * p->volume, &rng);
        s->regime[i] = (int8_t)reg;
        s->drift[i] = (float)(i > 0 ? mu : 0.0);
        prev_close = close;
    }
    s->bars_per_year = 8760.0;
    s->bars_per_year_from = "the generator's hourly bars";
    s->expected_return = syn_expected_return;
    snprintf(s->source, sizeof(s->source), "synthetic(seed=%llu)", (unsigned long long)seed);
    return FOX_OK;
}
