/*
 * noedge.c — the two no-edge generators (a driftless random walk and a
 * GARCH(1,1) series) and the choice of any generator by its data.source name.
 *
 * Why they exist: a learner that trades where nothing can be earned pays the
 * costs every bar. On these series the expected return of the next bar is
 * zero whatever came before, so the best policy net of costs is flat; a
 * trained agent that does no harm stays (nearly) flat on them. GARCH adds
 * what real bars have and the random walk lacks: volatility that clusters,
 * which moves the features (rolling σ, z-scores) without moving the mean.
 *
 * The same seed gives the same bars, bit for bit, on every machine.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "gpu/data.h"
#include "gpu/data/data_impl.h"
#include "gpu/rng.h"

#define NOEDGE_PRICE0      100.0
#define NOEDGE_VOLUME      10000.0
#define NOEDGE_T0          1.7e9
#define NOEDGE_BAR_SECONDS 1800.0
/* 30-minute bars around the clock: 48 × 365. */
#define NOEDGE_BARS_PER_YEAR 17520.0

enum { GEN_RANDOMWALK, GEN_GARCH };

/* What a no-edge series expects of any next bar, whatever came before: nothing. */
static double
noedge_expected_return(const fox_series *s, int t)
{
    (void)s;
    (void)t;
    return 0.0;
}

static int
noedge_series(fox_series *s, int n, uint64_t seed, int kind)
{
    int rc = fox__series_alloc_generated(s, n);
    if (rc != FOX_OK)
        return rc;

    fox_rng rng;
    fox_rng_seed(&rng, seed ^ (kind == GEN_GARCH ? 0x6a7c4ULL : 0x7a1cULL));
    const double var0 = FOX_NOEDGE_SIGMA * FOX_NOEDGE_SIGMA;
    const double omega = var0 * (1.0 - FOX_GARCH_ALPHA - FOX_GARCH_BETA);
    double var = var0; /* σ²_t; GARCH starts at its unconditional variance */
    double r = 0.0;
    double logp = log(NOEDGE_PRICE0), prev_close = NOEDGE_PRICE0;

    for (int i = 0; i < n; i++) {
        if (kind == GEN_GARCH && i > 0)
            var = omega + FOX_GARCH_ALPHA * r * r + FOX_GARCH_BETA * var;
        double sigma = sqrt(var);
        r = i > 0 ? sigma * fox_rng_normal(&rng) : 0.0;
        logp += r;
        double close = exp(logp);
        s->time[i] = NOEDGE_T0 + NOEDGE_BAR_SECONDS * (double)i;
        /* Volume rises with volatility, as on real bars. */
        fox__series_fill_bar(s, i, prev_close, close, sigma, NOEDGE_VOLUME * sigma / FOX_NOEDGE_SIGMA,
                             &rng);
        s->regime[i] = (int8_t)(var > var0 ? FOX_REGIME_HIGHVOL : FOX_REGIME_QUIET);
        prev_close = close;
    }
    s->bars_per_year = NOEDGE_BARS_PER_YEAR;
    s->bars_per_year_from = "the generator's 30-minute bars";
    s->expected_return = noedge_expected_return;
    snprintf(s->source, sizeof(s->source), "%s(seed=%llu)",
             kind == GEN_GARCH ? "garch" : "randomwalk", (unsigned long long)seed);
    return FOX_OK;
}

int
fox_series_randomwalk(fox_series *s, int n, uint64_t seed)
{
    return noedge_series(s, n, seed, GEN_RANDOMWALK);
}

int
fox_series_garch(fox_series *s, int n, uint64_t seed)
{
    return noedge_series(s, n, seed, GEN_GARCH);
}

/* The generators by their data.source names; the first three take no parameters. */
static const struct {
    const char *name;
    int (*make)(fox_series *, int, uint64_t);
    int (*make_edge)(fox_series *, int, uint64_t, const fox_gen_params *);
} generators[] = {
    {"synthetic", fox_series_synthetic, NULL},
    {"randomwalk", fox_series_randomwalk, NULL},
    {"garch", fox_series_garch, NULL},
    {"autocorr", NULL, fox_series_autocorr},
    {"volmom", NULL, fox_series_volmom},
    {"hours", NULL, fox_series_hours},
};

int
fox_series_is_generator(const char *name)
{
    for (size_t i = 0; name && i < sizeof generators / sizeof generators[0]; i++)
        if (strcmp(name, generators[i].name) == 0)
            return 1;
    return 0;
}

int
fox_series_generate(fox_series *s, const char *name, int n, uint64_t seed,
                    const fox_gen_params *gp)
{
    static const fox_gen_params defaults = {1, 0.1};
    if (!s || !name)
        return FOX_EINVAL;
    for (size_t i = 0; i < sizeof generators / sizeof generators[0]; i++) {
        if (strcmp(name, generators[i].name) != 0)
            continue;
        if (generators[i].make)
            return generators[i].make(s, n, seed);
        return generators[i].make_edge(s, n, seed, gp ? gp : &defaults);
    }
    return FOX_ENOENT;
}
