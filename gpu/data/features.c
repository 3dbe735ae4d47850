/*
 * features.c — the causal market features of every bar, their
 * normalization on a fold's training range, and the state vector a
 * backend feeds the network.
 *
 * What it does not do: read the series' future. The row of bar t uses bars
 * up to t only, and every rolling sum is pushed in bar order, so a bar's
 * features are bit-identical whatever follows it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/data.h"
#include "gpu/data/data_impl.h"

#define N_RET_LAGS 16

static const int cum_w[6] = {2, 4, 8, 16, 32, 64};
static const int win4[4] = {8, 16, 32, 64};
static const char *const time_names[4] = {"hour_sin", "hour_cos", "dow_sin", "dow_cos"};
static const int ac_w[2] = {32, 64};

void
fox_features_fini(fox_features *f)
{
    if (!f)
        return;
    free(f->raw);
    free(f->norm);
    free(f->mean);
    free(f->std);
    free(f->names);
    memset(f, 0, sizeof(*f));
}

static void
feat_put(fox_features *f, int t, int j, double v)
{
    if (j < f->n_feat)
        f->raw[(size_t)t * (size_t)f->n_feat + (size_t)j] = (float)v;
}

static void
feat_names(fox_features *f)
{
    for (int j = 0; j < f->n_feat; j++) {
        char *nm = f->names[j];
        if (j < N_RET_LAGS)
            snprintf(nm, 32, "ret_lag%d", j);
        else if (j < 22)
            snprintf(nm, 32, "cumret_%d", cum_w[j - 16]);
        else if (j < 26)
            snprintf(nm, 32, "vol_%d", win4[j - 22]);
        else if (j < 30)
            snprintf(nm, 32, "zclose_sma%d", win4[j - 26]);
        else if (j == 30)
            snprintf(nm, 32, "range_atr14");
        else if (j == 31)
            snprintf(nm, 32, "atr14_close");
        else if (j == 32)
            snprintf(nm, 32, "volume_z32");
        else if (j < 37)
            snprintf(nm, 32, "%s", time_names[j - 33]);
        else
            snprintf(nm, 32, "autocorr1_%d", ac_w[j - 37]);
    }
}

/*
 * Feature list, in order (truncated to n_feat when the state is small):
 *   0–15  ret_lag0..15     1-bar log return of bar t−k
 *   16–21 cumret_w         log(close_t / close_{t−w}), w = 2 4 8 16 32 64
 *   22–25 vol_w            std of the last w 1-bar log returns, w = 8 16 32 64
 *   26–29 zclose_smaw      (log close − its w-bar mean) / its w-bar std
 *   30    range_atr14      true range / ATR14 (close-only: |Δclose| / ATR14)
 *   31    atr14_close      ATR14 / close
 *   32    volume_z32       z-score of log(1 + volume) over 32 bars (0 without volume)
 *   33–36 hour sin/cos, day-of-week sin/cos, UTC (0 without time)
 *   37–38 autocorr1_w      lag-1 autocorrelation of 1-bar log returns over w = 32 64
 *                          bars (Σ r_t·r_{t−1} / Σ r_t²): momentum vs mean reversion
 * Bars before the warmup use the shorter history they have (missing returns
 * count as 0), so every row is finite; the trainer starts at the warmup.
 * The z-scores use log prices so that they are scale-free and the rolling
 * squares stay small whatever the price level.
 */
int
fox_features_compute(fox_features *f, const fox_series *s, int state_dim)
{
    if (!f)
        return FOX_EINVAL;
    memset(f, 0, sizeof(*f));
    if (!s || !s->close || s->n < 1 || state_dim - FOX_PORTFOLIO_FEATURES < 1)
        return FOX_EINVAL;
    int n = s->n;
    int nf = state_dim - FOX_PORTFOLIO_FEATURES;
    if (nf > FOX_MARKET_FEATURES)
        nf = FOX_MARKET_FEATURES;
    f->n_bars = n;
    f->n_feat = nf;
    f->warmup = FOX_FEATURE_WARMUP;
    size_t cells = (size_t)n * (size_t)nf;
    f->raw = calloc(cells, sizeof(float));
    f->norm = calloc(cells, sizeof(float));
    f->mean = calloc((size_t)nf, sizeof(float));
    f->std = calloc((size_t)nf, sizeof(float));
    f->names = calloc((size_t)nf, sizeof(*f->names));
    double *ret = malloc((size_t)n * sizeof(double)); /* 1-bar log returns */
    double *lc = malloc((size_t)n * sizeof(double));  /* log close */
    double *tr = malloc((size_t)n * sizeof(double));  /* true range */
    double *lv = s->volume ? malloc((size_t)n * sizeof(double)) : NULL;
    if (!f->raw || !f->norm || !f->mean || !f->std || !f->names || !ret || !lc || !tr ||
        (s->volume && !lv)) {
        free(ret);
        free(lc);
        free(tr);
        free(lv);
        fox_features_fini(f);
        return FOX_ENOMEM;
    }
    feat_names(f);

    roll vol[4], zc[4], atr = {14, 0, 0, 0}, vz = {32, 0, 0, 0};
    roll ac_xy[2] = {{ac_w[0], 0, 0, 0}, {ac_w[1], 0, 0, 0}};
    roll ac_xx[2] = {{ac_w[0], 0, 0, 0}, {ac_w[1], 0, 0, 0}};
    for (int k = 0; k < 4; k++) {
        vol[k] = (roll){win4[k], 0, 0, 0};
        zc[k] = (roll){win4[k], 0, 0, 0};
    }

    for (int t = 0; t < n; t++) {
        double c = s->close[t];
        lc[t] = log(c);
        ret[t] = t > 0 ? lc[t] - lc[t - 1] : 0.0;
        if (s->high && s->low) {
            double h = s->high[t], l = s->low[t];
            double pc = t > 0 ? (double)s->close[t - 1] : (s->open ? (double)s->open[t] : c);
            tr[t] = fmax(h - l, fmax(fabs(h - pc), fabs(l - pc)));
        } else {
            tr[t] = t > 0 ? fabs(c - (double)s->close[t - 1]) : 0.0;
        }
        if (lv)
            lv[t] = log1p((double)s->volume[t]);

        for (int k = 0; k < N_RET_LAGS; k++)
            feat_put(f, t, k, t - k >= 0 ? ret[t - k] : 0.0);
        for (int k = 0; k < 6; k++) {
            int b = t - cum_w[k] >= 0 ? t - cum_w[k] : 0;
            feat_put(f, t, 16 + k, lc[t] - lc[b]);
        }
        for (int k = 0; k < 4; k++) {
            int w = win4[k];
            roll_push(&vol[k], ret[t], t - w >= 0 ? ret[t - w] : 0.0);
            feat_put(f, t, 22 + k, roll_std(&vol[k]));
            roll_push(&zc[k], lc[t], t - w >= 0 ? lc[t - w] : 0.0);
            double sd = roll_std(&zc[k]);
            feat_put(f, t, 26 + k, sd > 1e-12 ? (lc[t] - roll_mean(&zc[k])) / sd : 0.0);
        }
        roll_push(&atr, tr[t], t - 14 >= 0 ? tr[t - 14] : 0.0);
        double a = roll_mean(&atr);
        double range = (s->high && s->low) ? (double)s->high[t] - (double)s->low[t] : tr[t];
        feat_put(f, t, 30, a > 0.0 ? range / a : 0.0);
        feat_put(f, t, 31, a / c);
        if (lv) {
            roll_push(&vz, lv[t], t - 32 >= 0 ? lv[t - 32] : 0.0);
            double sd = roll_std(&vz);
            feat_put(f, t, 32, sd > 1e-12 ? (lv[t] - roll_mean(&vz)) / sd : 0.0);
        }
        for (int k = 0; k < 2; k++) {
            int w = ac_w[k];
            double xy = t > 0 ? ret[t] * ret[t - 1] : 0.0;
            double old_xy = t - w > 0 ? ret[t - w] * ret[t - w - 1] : 0.0;
            roll_push(&ac_xy[k], xy, old_xy);
            roll_push(&ac_xx[k], ret[t] * ret[t], t - w >= 0 ? ret[t - w] * ret[t - w] : 0.0);
            double den = ac_xx[k].sum;
            feat_put(f, t, 37 + k, den > 1e-18 ? ac_xy[k].sum / den : 0.0);
        }
        if (s->time) {
            double tt = s->time[t];
            double hour = fmod(fmod(tt, 86400.0) + 86400.0, 86400.0) / 3600.0;
            double dow = weekday_utc(tt);
            feat_put(f, t, 33, sin(2.0 * M_PI * hour / 24.0));
            feat_put(f, t, 34, cos(2.0 * M_PI * hour / 24.0));
            feat_put(f, t, 35, sin(2.0 * M_PI * dow / 7.0));
            feat_put(f, t, 36, cos(2.0 * M_PI * dow / 7.0));
        }
    }
    free(ret);
    free(lc);
    free(tr);
    free(lv);
    /* A usable default until the trainer refits on its fold's training blocks. */
    fox_features_normalize(f, f->warmup < n ? f->warmup : 0, n);
    return FOX_OK;
}

void
fox_features_normalize(fox_features *f, int begin, int end)
{
    if (!f || !f->raw || !f->norm || f->n_feat < 1)
        return;
    int nf = f->n_feat;
    if (begin < 0)
        begin = 0;
    if (end > f->n_bars)
        end = f->n_bars;
    for (int j = 0; j < nf; j++) {
        double sum = 0.0, sum2 = 0.0;
        int cnt = end > begin ? end - begin : 0;
        for (int t = begin; t < end; t++)
            sum += f->raw[(size_t)t * nf + j];
        double mean = cnt ? sum / cnt : 0.0;
        /* Two passes: the centred sum of squares does not cancel the way E[x²]−E[x]² can. */
        for (int t = begin; t < end; t++) {
            double d = f->raw[(size_t)t * nf + j] - mean;
            sum2 += d * d;
        }
        double sd = cnt ? sqrt(sum2 / cnt) : 1.0;
        if (sd < 1e-6)
            sd = 1e-6;
        f->mean[j] = (float)mean;
        f->std[j] = (float)sd;
    }
    fox_features_apply_norm(f);
}

void
fox_features_apply_norm(fox_features *f)
{
    if (!f || !f->raw || !f->norm || f->n_feat < 1)
        return;
    int nf = f->n_feat;
    for (int t = 0; t < f->n_bars; t++) {
        for (int j = 0; j < nf; j++) {
            size_t i = (size_t)t * nf + j;
            float z = (f->raw[i] - f->mean[j]) / f->std[j];
            f->norm[i] = fminf(fmaxf(z, -FOX_FEATURE_CLIP), FOX_FEATURE_CLIP);
        }
    }
}

void
fox__state_build(const fox_features *feat, int S, int t, const float port[3], float *s)
{
    memset(s, 0, (size_t)S * sizeof *s);
    memcpy(s, feat->norm + (size_t)t * feat->n_feat, (size_t)feat->n_feat * sizeof *s);
    memcpy(s + S - FOX_PORTFOLIO_FEATURES, port, FOX_PORTFOLIO_FEATURES * sizeof *s);
}
