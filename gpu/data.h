/*
 * data.h — bar series, causal features and walk-forward folds.
 *
 * A series comes from a seeded generator (the embedded default:
 * regime-switching, fat-tailed, with true regime labels; or one of the two
 * no-edge series, a random walk and GARCH(1,1)) or from a CSV file (OHLCV
 * or close-only), refused with file, line and reason when bad.
 * Features are causal: the row of bar t uses bars ≤ t only. Folds are
 * anchored walk-forward: the series splits into K+1 blocks; fold k trains on
 * blocks 0..k and evaluates on block k+1 (first half validation, second half
 * test). Plain data, no threads, no backend.
 *
 * Functions that fill a struct overwrite it without freeing what it held:
 * call the matching fini first when reusing one. On failure the struct is
 * left zeroed, so fini on it is always safe. The files behind this door
 * live in gpu/data/: series.c (allocation, fini), synth.c (the default
 * generator), noedge.c (the no-edge generators and the choice by name),
 * csv.c (the loader), features.c and folds.c.
 */
#ifndef FOX_DATA_H
#define FOX_DATA_H

#include <stddef.h>
#include <stdint.h>

/* Portfolio features appended after the market features in every state. */
#define FOX_PORTFOLIO_FEATURES 3
#define FOX_FEATURE_CLIP 5.0f
/* Market features per bar (fewer when the state is smaller); first bar with all defined. */
#define FOX_MARKET_FEATURES 39
#define FOX_FEATURE_WARMUP 65

/*
 * The bars per year the engine accepts from the timestamps: one bar a year
 * to one a second. Outside, the times are in another unit (or the rows are
 * not bars); data.bars_per_year overrides the check with the operator's P.
 */
#define FOX_MIN_BARS_PER_YEAR 1.0
#define FOX_MAX_BARS_PER_YEAR (365.2425 * 86400.0)

typedef struct fox_series fox_series;

struct fox_series {
    int n;               /* bars */
    double *time;        /* seconds since the epoch; NULL when the file has none */
    float *open, *high, *low, *close, *volume; /* open/high/low NULL when close-only; volume may be NULL */
    int8_t *regime;      /* [n] regime label 0..3: true for synthetic, causal proxy for CSV */
    double bars_per_year;/* inferred: synthetic 8760 (hourly, 24/7); CSV from the timestamps */
    char source[256];    /* "synthetic(seed=…)" or the path */
    const char *bars_per_year_from; /* how bars_per_year was found (a static string) */
    /*
     * The generator's truth, for the oracle baseline: expected_return(s, t)
     * is the expected log return of bar t+1 given what the generator knew at
     * the close of bar t (its regime, drift and state), drift[t] the drift it
     * used on bar t. Each generator sets its own function; both are NULL for
     * a CSV, which has no truth.
     */
    double (*expected_return)(const fox_series *s, int t);
    float *drift;
    /*
     * A known-edge generator's simple rule: the position in [-1, 1] it takes
     * at the close of bar t, and what it does in words (rule_name). NULL and
     * "" for every other series; the regime-switching default's simple rule
     * is the trend rule every series gets.
     */
    double (*rule_position)(const fox_series *s, int t);
    char rule_name[64];
};

/* The parameters of the known-edge generators (data.edge_lag, data.edge_coef). */
typedef struct fox_gen_params {
    int edge_lag;     /* autocorr: the lag h of the autocorrelation */
    double edge_coef; /* autocorr: c; volmom: k; hours: the windows' drift in units of σ */
} fox_gen_params;

/* Generate n bars (n ≥ 1000) of the regime-switching synthetic series. */
int fox_series_synthetic(fox_series *s, int n, uint64_t seed);

/*
 * The no-edge generators: series whose expected return is zero at every bar
 * given everything before it, so that no policy can earn anything net of
 * costs in expectation and the right answer is to stay flat. Both are
 * 30-minute bars, 24/7 (P = 17520), with a per-bar σ of FOX_NOEDGE_SIGMA on
 * average (a daily σ of about 0.7 %). Their labels name the volatility state
 * only (FOX_REGIME_QUIET, or FOX_REGIME_HIGHVOL where GARCH's conditional σ
 * exceeds its unconditional σ): nothing in them is tradable, and their
 * expected_return says so (0 at every bar, so the oracle stays flat).
 *
 * randomwalk: Gaussian log returns of constant σ, no drift.
 * garch: GARCH(1,1), r_t = σ_t·z_t with z_t standard normal and
 * σ²_t = ω + α·r²_{t−1} + β·σ²_{t−1}, ω = FOX_NOEDGE_SIGMA²·(1 − α − β), so
 * that the unconditional variance ω/(1 − α − β) is FOX_NOEDGE_SIGMA².
 */
#define FOX_NOEDGE_SIGMA 0.001
#define FOX_GARCH_ALPHA  0.06
#define FOX_GARCH_BETA   0.92
int fox_series_randomwalk(fox_series *s, int n, uint64_t seed);
int fox_series_garch(fox_series *s, int n, uint64_t seed);

/*
 * The known-edge generators (edge.c says what each plants and its rule):
 * autocorr (daily bars, a lag-h autocorrelation of either sign), volmom
 * (daily bars, GARCH volatility, momentum scaled by it) and hours (30-minute
 * bars, a drift in two windows of the day). Their expected_return is the
 * planted conditional mean and rule_position the simple rule that trades it.
 */
#define FOX_VOLMOM_LOOKBACK 20
int fox_series_autocorr(fox_series *s, int n, uint64_t seed, const fox_gen_params *gp);
int fox_series_volmom(fox_series *s, int n, uint64_t seed, const fox_gen_params *gp);
int fox_series_hours(fox_series *s, int n, uint64_t seed, const fox_gen_params *gp);

/*
 * The generator data.source names ("synthetic", "randomwalk", "garch",
 * "autocorr", "volmom", "hours"): n bars from seed, the known-edge kinds
 * with gp (NULL: lag 1, coef 0.1). FOX_ENOENT when name is none of them (a
 * CSV path).
 */
int fox_series_generate(fox_series *s, const char *name, int n, uint64_t seed,
                        const fox_gen_params *gp);
/* 1 when name is one of those generators, 0 for anything else (a CSV path). */
int fox_series_is_generator(const char *name);

/* The regime labels of the generators (the synthetic series' four regimes). */
enum { FOX_REGIME_TREND = 0, FOX_REGIME_MEANREV = 1, FOX_REGIME_HIGHVOL = 2, FOX_REGIME_QUIET = 3 };

/*
 * Load a CSV with a header naming its columns: time (optional; unix seconds
 * or ISO-8601 with an optional offset, "Z", "+05:30", read as UTC), open,
 * high, low (optional, all three or none), close (required), volume
 * (optional). price_column (NULL or "" for close) names the column read as
 * the price instead, for a file of several series: the others are then
 * carried, not read, and open/high/low/volume too unless it names the close
 * column itself. Refuses missing columns, values that are not decimal
 * numbers (hex, "inf", "nan") or not finite, prices and volumes a float
 * cannot hold (a price must stay positive as a float), non-positive
 * prices, high < low, numeric times too large for unix seconds (milli-,
 * micro-, nanoseconds), non-increasing time and fewer than min_rows rows,
 * with "path:line: reason" in err. bars_per_year is the bars
 * present per year of timestamps (252 without a time column).
 */
int fox_series_load_csv(fox_series *s, const char *path, const char *price_column, int min_rows,
                        char *err, size_t errlen);

void fox_series_fini(fox_series *s);

typedef struct fox_features {
    int n_bars;
    int n_feat;          /* market features per bar (≤ state_dim − FOX_PORTFOLIO_FEATURES) */
    int warmup;          /* first bar whose features are all defined */
    float *raw;          /* [n_bars × n_feat] causal, un-normalized */
    float *norm;         /* [n_bars × n_feat] (raw − mean)/std clipped to ±FOX_FEATURE_CLIP */
    float *mean, *std;   /* [n_feat] fitted by fox_features_normalize */
    char (*names)[32];   /* [n_feat] feature names, for docs and debugging */
} fox_features;

int fox_features_compute(fox_features *f, const fox_series *s, int state_dim);

/* Fit mean/std on bars [begin, end) only and fill norm for every bar. */
void fox_features_normalize(fox_features *f, int begin, int end);

/* Fill norm for every bar from the mean/std in f (fitted, or restored with a saved policy). */
void fox_features_apply_norm(fox_features *f);

void fox_features_fini(fox_features *f);

/*
 * The state of bar t, as the network sees it, into s [S]: the normalized
 * market features of bar t first, zeros up to S − FOX_PORTFOLIO_FEATURES,
 * then the portfolio features port. Shared by the engine's evaluation and
 * both backends, so that training and evaluation build one and the same
 * state.
 */
void fox__state_build(const fox_features *feat, int S, int t, const float port[3], float *s);

typedef struct fox_fold {
    int train_begin, train_end; /* [begin, end) bar indices */
    int val_begin, val_end;
    int test_begin, test_end;
} fox_fold;

/* Bars of fold k of n_folds (K) on a series of n bars whose first valid bar is warmup. */
int fox_fold_split(int n, int warmup, int n_folds, int k, fox_fold *out);

#endif
