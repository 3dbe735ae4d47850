/*
 * test_data.c — unit tests of gpu/data.c: the synthetic generator's
 * statistics, the no-edge generators' (random walk, GARCH) statistics, the
 * CSV loader's acceptance and each of its refusals, the features' causality
 * and values, normalization's fit range, and the fold
 * boundaries.
 *
 * Not tested here: how the environment or the trainer use these (their own
 * suites). Temporary CSV files live in one mkdtemp directory, removed at exit.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/data.h"
#include "common/error.h"
#include "tests/testutil.h"

static char tmpdir[200];

#define PATH_LEN 512

/* Write content to tmpdir/name; the path lands in path[PATH_LEN]. */
static void
write_file(char *path, const char *name, const char *content)
{
    snprintf(path, PATH_LEN, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    fputs(content, fp);
    ck_assert_int_eq(fclose(fp), 0);
}

static double
logret(const fox_series *s, int i)
{
    return log((double)s->close[i] / (double)s->close[i - 1]);
}

static int
series_zeroed(const fox_series *s)
{
    static const fox_series zero;
    return memcmp(s, &zero, sizeof(zero)) == 0;
}

/* ------------------------------------------------------------- synthetic */

START_TEST(test_synthetic_deterministic)
{
    fox_series a, b, c;
    FOX_CK_OK(fox_series_synthetic(&a, 5000, 42));
    FOX_CK_OK(fox_series_synthetic(&b, 5000, 42));
    FOX_CK_OK(fox_series_synthetic(&c, 5000, 43));
    ck_assert_int_eq(a.n, 5000);
    ck_assert_str_eq(a.source, "synthetic(seed=42)");
    ck_assert_double_eq(a.bars_per_year, 8760.0);
    ck_assert_double_eq(a.time[0], 1.7e9);
    ck_assert_double_eq(a.time[10] - a.time[9], 3600.0);
    size_t fz = 5000 * sizeof(float);
    ck_assert(memcmp(a.close, b.close, fz) == 0);
    ck_assert(memcmp(a.open, b.open, fz) == 0);
    ck_assert(memcmp(a.high, b.high, fz) == 0);
    ck_assert(memcmp(a.low, b.low, fz) == 0);
    ck_assert(memcmp(a.volume, b.volume, fz) == 0);
    ck_assert(memcmp(a.regime, b.regime, 5000) == 0);
    ck_assert(memcmp(a.time, b.time, 5000 * sizeof(double)) == 0);
    int differ = 0;
    for (int i = 1; i < 5000; i++)
        differ += a.close[i] != c.close[i];
    ck_assert_int_gt(differ, 4900);
    fox_series_fini(&a);
    fox_series_fini(&b);
    fox_series_fini(&c);
    ck_assert(series_zeroed(&a));
}
END_TEST

START_TEST(test_synthetic_refuses_short)
{
    fox_series s;
    ck_assert_int_eq(fox_series_synthetic(&s, 999, 1), FOX_EINVAL);
    ck_assert(series_zeroed(&s));
    ck_assert_int_eq(fox_series_synthetic(&s, -5, 1), FOX_EINVAL);
    ck_assert_int_eq(fox_series_synthetic(NULL, 5000, 1), FOX_EINVAL);
    fox_series_fini(&s);
    FOX_CK_OK(fox_series_synthetic(&s, 1000, 1));
    fox_series_fini(&s);
}
END_TEST

START_TEST(test_synthetic_ohlc)
{
    fox_series s;
    int n = 20000;
    FOX_CK_OK(fox_series_synthetic(&s, n, 7));
    double vol_hi = 0, vol_quiet = 0;
    int n_hi = 0, n_quiet = 0;
    for (int i = 0; i < n; i++) {
        float o = s.open[i], h = s.high[i], l = s.low[i], c = s.close[i];
        ck_assert(isfinite(o) && isfinite(h) && isfinite(l) && isfinite(c));
        ck_assert(l > 0.0f);
        ck_assert_msg(l <= fminf(o, c) && fmaxf(o, c) <= h, "bar %d: o %g h %g l %g c %g", i, o, h,
                      l, c);
        ck_assert(s.volume[i] > 0.0f);
        ck_assert(s.regime[i] >= 0 && s.regime[i] <= 3);
        /* The open gaps from the previous close by noise of σ/10, a few per cent at most. */
        if (i > 0)
            ck_assert_msg(fabs(log((double)o / s.close[i - 1])) < 0.02, "bar %d gap", i);
        if (s.regime[i] == 2) {
            vol_hi += s.volume[i];
            n_hi++;
        } else if (s.regime[i] == 3) {
            vol_quiet += s.volume[i];
            n_quiet++;
        }
    }
    ck_assert_int_gt(n_hi, 0);
    ck_assert_int_gt(n_quiet, 0);
    ck_assert_msg(vol_hi / n_hi > 2.0 * vol_quiet / n_quiet, "volume is higher in high-vol");
    fox_series_fini(&s);
}
END_TEST

START_TEST(test_synthetic_regimes)
{
    fox_series s;
    int n = 50000;
    FOX_CK_OK(fox_series_synthetic(&s, n, 11));
    int count[4] = {0}, runs[4] = {0};
    double sum2[4] = {0};
    for (int i = 0; i < n; i++) {
        int g = s.regime[i];
        count[g]++;
        if (i == 0 || s.regime[i - 1] != g)
            runs[g]++;
        if (i > 0)
            sum2[g] += logret(&s, i) * logret(&s, i);
    }
    double sd[4];
    for (int g = 0; g < 4; g++) {
        ck_assert_msg(count[g] > n / 20, "regime %d has %d bars", g, count[g]);
        double dwell = (double)count[g] / runs[g];
        ck_assert_msg(dwell > 80.0 && dwell < 600.0, "regime %d mean dwell %.1f", g, dwell);
        sd[g] = sqrt(sum2[g] / count[g]);
    }
    /* The labels are true: each regime's realized volatility has its own scale. */
    double base = 0.5 * (sd[0] + sd[1]);
    ck_assert_msg(base > 0.006 && base < 0.012, "base σ %.4f", base);
    ck_assert_msg(sd[2] / base > 1.8 && sd[2] / base < 3.5, "high-vol ratio %.2f", sd[2] / base);
    ck_assert_msg(sd[3] / base > 0.25 && sd[3] / base < 0.6, "quiet ratio %.2f", sd[3] / base);
    fox_series_fini(&s);
}
END_TEST

/* Lag-1 autocorrelation of returns over consecutive pairs of bars both in regime g. */
static double
regime_autocorr(const fox_series *s, int g)
{
    double mean = 0;
    int cnt = 0;
    for (int i = 1; i < s->n; i++)
        if (s->regime[i] == g) {
            mean += logret(s, i);
            cnt++;
        }
    mean /= cnt;
    double num = 0, den = 0;
    for (int i = 2; i < s->n; i++) {
        if (s->regime[i] != g || s->regime[i - 1] != g)
            continue;
        double r = logret(s, i) - mean, r1 = logret(s, i - 1) - mean;
        num += r * r1;
        den += r * r;
    }
    return num / den;
}

START_TEST(test_synthetic_stats)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        fox_series s;
        int n = 30000;
        FOX_CK_OK(fox_series_synthetic(&s, n, seed));
        double m = 0, m2 = 0, m4 = 0;
        for (int i = 1; i < n; i++)
            m += logret(&s, i);
        m /= n - 1;
        for (int i = 1; i < n; i++) {
            double d = logret(&s, i) - m;
            m2 += d * d;
            m4 += d * d * d * d;
        }
        m2 /= n - 1;
        m4 /= n - 1;
        double kurt = m4 / (m2 * m2);
        ck_assert_msg(kurt > 3.5, "seed %d: kurtosis %.2f, want fat tails", (int)seed, kurt);
        /* Within one regime σ is constant, so its excess kurtosis is the innovations' own. */
        double q2 = 0, q4 = 0;
        int nq = 0;
        for (int i = 1; i < n; i++)
            if (s.regime[i] == 1 && s.regime[i - 1] == 1) {
                double d = logret(&s, i);
                q2 += d * d;
                q4 += d * d * d * d;
                nq++;
            }
        q2 /= nq;
        q4 /= nq;
        ck_assert_msg(q4 / (q2 * q2) > 4.0, "seed %d: in-regime kurtosis %.2f", (int)seed,
                      q4 / (q2 * q2));
        /* Buy-and-hold is weak: the per-bar Sharpe of holding is near zero. */
        ck_assert_msg(fabs(m / sqrt(m2)) < 0.02, "seed %d: drift/σ %.4f", (int)seed, m / sqrt(m2));
        double ac_trend = regime_autocorr(&s, 0), ac_mr = regime_autocorr(&s, 1);
        ck_assert_msg(ac_trend > 0.15, "seed %d: trend autocorr %.3f", (int)seed, ac_trend);
        ck_assert_msg(ac_mr < -0.15, "seed %d: mean-reversion autocorr %.3f", (int)seed, ac_mr);
        fox_series_fini(&s);
    }
}
END_TEST

/*
 * The structure is learnable from causal features: two fixed rules read off
 * the feature rows (follow the 32-bar return; follow or fade the last bar
 * by the sign of the 16-lag autocorrelation) beat buy-and-hold by a clear
 * margin after a 2 bps cost. Positions are taken at the close of bar t and
 * earn bar t+1's open→close return, as in the environment.
 */
START_TEST(test_synthetic_learnable)
{
    double sum_bh = 0, sum_trend = 0, sum_ac = 0;
    int seeds = 4;
    for (uint64_t seed = 1; seed <= (uint64_t)seeds; seed++) {
        fox_series s;
        fox_features f;
        FOX_CK_OK(fox_series_synthetic(&s, 20000, seed));
        FOX_CK_OK(fox_features_compute(&f, &s, 64));
        ck_assert_int_eq(f.n_feat, FOX_MARKET_FEATURES);
        double sh[3];
        for (int rule = 0; rule < 3; rule++) {
            double sm = 0, ss = 0, pos = 0;
            int cnt = 0;
            for (int t = f.warmup; t + 1 < s.n; t++) {
                const float *z = f.raw + (size_t)t * f.n_feat;
                double np = 1.0;
                if (rule == 1) {
                    np = z[20] > 0 ? 1.0 : -1.0; /* cumret_32 */
                } else if (rule == 2) {
                    double a = 0;
                    for (int j = 0; j < 15; j++)
                        a += z[j] * z[j + 1];
                    np = (a > 0 ? 1.0 : -1.0) * (z[0] > 0 ? 1.0 : -1.0);
                }
                double r = log((double)s.close[t + 1] / s.open[t + 1]);
                double net = np * r - 0.0002 * fabs(np - pos);
                pos = np;
                sm += net;
                ss += net * net;
                cnt++;
            }
            sm /= cnt;
            sh[rule] = sm / sqrt(ss / cnt - sm * sm) * sqrt(s.bars_per_year);
        }
        sum_bh += sh[0];
        sum_trend += sh[1];
        sum_ac += sh[2];
        fox_features_fini(&f);
        fox_series_fini(&s);
    }
    double bh = sum_bh / seeds, trend = sum_trend / seeds, ac = sum_ac / seeds;
    ck_assert_msg(trend > bh + 1.0, "trend rule Sharpe %.2f vs buy-and-hold %.2f", trend, bh);
    ck_assert_msg(ac > bh + 2.0, "autocorrelation rule Sharpe %.2f vs buy-and-hold %.2f", ac, bh);
}
END_TEST

/* --------------------------------------------------------------- no edge */

/*
 * Lag-k autocorrelation of squared returns (bars 1..n−1): the signature of
 * volatility clustering, near 0 for iid returns.
 */
static double
sq_autocorr(const fox_series *s, int k)
{
    int n = s->n;
    double m = 0;
    for (int i = 1; i < n; i++)
        m += logret(s, i) * logret(s, i);
    m /= n - 1;
    double num = 0, den = 0;
    for (int i = 1; i < n; i++) {
        double a = logret(s, i) * logret(s, i) - m;
        den += a * a;
        if (i + k < n)
            num += a * (logret(s, i + k) * logret(s, i + k) - m);
    }
    return num / den;
}

/* Mean, sample variance and lag-1 autocorrelation of the log returns of bars 1..n−1. */
static void
logret_moments(const fox_series *s, double *mean, double *var, double *ac1)
{
    int n = s->n;
    double m = 0, m2 = 0, ac = 0;
    for (int i = 1; i < n; i++)
        m += logret(s, i);
    m /= n - 1;
    for (int i = 1; i < n; i++)
        m2 += (logret(s, i) - m) * (logret(s, i) - m);
    m2 /= n - 2;
    for (int i = 2; i < n; i++)
        ac += (logret(s, i) - m) * (logret(s, i - 1) - m);
    *mean = m;
    *var = m2;
    *ac1 = ac / ((n - 2) * m2);
}

/* Same bars for the same seed, other bars for another; every source by its data.source name. */
START_TEST(test_noedge_deterministic)
{
    const char *names[] = {"randomwalk", "garch"};
    for (int g = 0; g < 2; g++) {
        fox_series a, b, c;
        FOX_CK_OK(fox_series_generate(&a, names[g], 4000, 7, NULL));
        FOX_CK_OK(fox_series_generate(&b, names[g], 4000, 7, NULL));
        FOX_CK_OK(fox_series_generate(&c, names[g], 4000, 8, NULL));
        size_t fz = 4000 * sizeof(float);
        ck_assert(memcmp(a.close, b.close, fz) == 0);
        ck_assert(memcmp(a.open, b.open, fz) == 0);
        ck_assert(memcmp(a.high, b.high, fz) == 0);
        ck_assert(memcmp(a.low, b.low, fz) == 0);
        ck_assert(memcmp(a.volume, b.volume, fz) == 0);
        ck_assert(memcmp(a.regime, b.regime, 4000) == 0);
        int differ = 0;
        for (int i = 1; i < 4000; i++)
            differ += a.close[i] != c.close[i];
        ck_assert_int_gt(differ, 3900);
        char want[64];
        snprintf(want, sizeof want, "%s(seed=7)", names[g]);
        ck_assert_str_eq(a.source, want);
        ck_assert_ptr_nonnull(a.expected_return);
        for (int t = 0; t < 4000; t += 97)
            ck_assert(a.expected_return(&a, t) == 0.0);
        ck_assert_double_eq(a.bars_per_year, 17520.0);
        ck_assert_double_eq(a.time[10] - a.time[9], 1800.0);
        for (int i = 0; i < 4000; i++) {
            ck_assert(a.low[i] <= fminf(a.open[i], a.close[i]));
            ck_assert(a.high[i] >= fmaxf(a.open[i], a.close[i]));
            ck_assert(a.regime[i] == FOX_REGIME_QUIET || a.regime[i] == FOX_REGIME_HIGHVOL);
        }
        fox_series_fini(&a);
        fox_series_fini(&b);
        fox_series_fini(&c);
    }
    fox_series s;
    ck_assert_int_eq(fox_series_generate(&s, "bars.csv", 4000, 1, NULL), FOX_ENOENT);
    ck_assert_int_eq(fox_series_generate(&s, "garch", 999, 1, NULL), FOX_EINVAL);
    ck_assert(series_zeroed(&s));
    FOX_CK_OK(fox_series_generate(&s, "synthetic", 4000, 1, NULL));
    ck_assert_ptr_nonnull(s.expected_return);
    fox_series_fini(&s);
}
END_TEST

/* The sample autocorrelation of the log returns of s at lag h. */
static double
logret_autocorr(const fox_series *s, int h)
{
    double m = 0, den = 0, num = 0;
    int n = s->n;
    for (int i = 1; i < n; i++)
        m += logret(s, i);
    m /= n - 1;
    for (int i = 1; i < n; i++)
        den += (logret(s, i) - m) * (logret(s, i) - m);
    for (int i = 1 + h; i < n; i++)
        num += (logret(s, i) - m) * (logret(s, i - h) - m);
    return num / den;
}

/*
 * The known-edge generators plant what they say: autocorr the autocorrelation
 * of its lag and sign and none at other lags, hours a drift of either sign in
 * its two windows and none outside, volmom a drift that follows the trailing
 * return's sign; each expects drift[t+1] at bar t, and its rule trades the sign.
 */
START_TEST(test_known_edges)
{
    fox_series s, same;
    fox_gen_params ar3 = {3, -0.2};
    FOX_CK_OK(fox_series_generate(&s, "autocorr", 40000, 5, &ar3));
    FOX_CK_OK(fox_series_generate(&same, "autocorr", 40000, 5, &ar3));
    ck_assert(memcmp(s.close, same.close, 40000 * sizeof(float)) == 0);
    fox_series_fini(&same);
    /* Sampling error of an autocorrelation over 40,000 bars: about 0.005. */
    ck_assert_msg(fabs(logret_autocorr(&s, 3) + 0.2) < 0.03, "lag 3: %f", logret_autocorr(&s, 3));
    ck_assert_msg(fabs(logret_autocorr(&s, 1)) < 0.03, "lag 1: %f", logret_autocorr(&s, 1));
    ck_assert_str_eq(s.rule_name, "-sign of the return 2 bars back");
    ck_assert_double_eq(s.bars_per_year, 252.0);
    for (int t = 100; t < 200; t++) {
        double want = -0.2 * logret(&s, t - 2);
        /* The generator's r before float rounding of the closes: close, not exact. */
        ck_assert_msg(fabs(s.expected_return(&s, t) - want) < 1e-5, "bar %d: %g against %g", t,
                      s.expected_return(&s, t), want);
        double e = s.expected_return(&s, t);
        ck_assert(s.rule_position(&s, t) == (e > 0 ? 1.0 : e < 0 ? -1.0 : 0.0));
        /* Daily bars on weekdays only. */
        int wd = (int)(((long)floor(s.time[t] / 86400.0) + 4) % 7); /* 1970-01-01: Thursday */
        ck_assert_msg(wd >= 1 && wd <= 5, "bar %d on weekday %d", t, wd);
    }
    fox_series_fini(&s);

    fox_gen_params hours = {1, 0.15};
    FOX_CK_OK(fox_series_generate(&s, "hours", 40000, 5, &hours));
    double sum[3] = {0}, cnt[3] = {0}; /* up window, down window, elsewhere */
    for (int i = 1; i < s.n; i++) {
        double open_hour = fmod(s.time[i] - 1800.0, 86400.0) / 3600.0;
        int k = open_hour >= 8 && open_hour < 10 ? 0 : open_hour >= 14 && open_hour < 16 ? 1 : 2;
        sum[k] += logret(&s, i);
        cnt[k]++;
        ck_assert((s.drift[i] > 0) == (k == 0) && (s.drift[i] < 0) == (k == 1));
    }
    /* 0.15 σ a bar, σ = 0.001; 3,300 bars in each window: the SE of a mean is about 1.7e-5. */
    ck_assert_msg(fabs(sum[0] / cnt[0] - 1.5e-4) < 6e-5, "up window %g", sum[0] / cnt[0]);
    ck_assert_msg(fabs(sum[1] / cnt[1] + 1.5e-4) < 6e-5, "down window %g", sum[1] / cnt[1]);
    ck_assert_msg(fabs(sum[2] / cnt[2]) < 3e-5, "elsewhere %g", sum[2] / cnt[2]);
    ck_assert_str_eq(s.rule_name, "long 08-10 UTC, short 14-16 UTC, else flat");
    fox_series_fini(&s);

    fox_gen_params mom = {1, 0.1};
    FOX_CK_OK(fox_series_generate(&s, "volmom", 40000, 5, &mom));
    double agree = 0;
    for (int t = FOX_VOLMOM_LOOKBACK + 1; t + 1 < s.n; t++) {
        double trail = log((double)s.close[t] / (double)s.close[t - FOX_VOLMOM_LOOKBACK]);
        ck_assert(s.rule_position(&s, t) == (trail > 0 ? 1.0 : trail < 0 ? -1.0 : 0.0) ||
                  fabs(trail) < 1e-6);
        agree += s.rule_position(&s, t) * logret(&s, t + 1);
    }
    ck_assert_msg(agree > 0.0, "the trailing sign does not predict: %g", agree);
    fox_series_fini(&s);
}
END_TEST

/*
 * The random walk has no drift: over several seeds the mean log return is
 * within 3 standard errors of 0, its σ is the advertised one, and neither
 * returns nor squared returns are autocorrelated.
 */
START_TEST(test_randomwalk_stats)
{
    for (uint64_t seed = 1; seed <= 4; seed++) {
        fox_series s;
        int n = 40000;
        FOX_CK_OK(fox_series_randomwalk(&s, n, seed));
        double m, m2, ac;
        logret_moments(&s, &m, &m2, &ac);
        double se = sqrt(m2 / (n - 1));
        ck_assert_msg(fabs(m) < 3.0 * se, "seed %d: mean %.3g, SE %.3g", (int)seed, m, se);
        ck_assert_msg(fabs(sqrt(m2) / FOX_NOEDGE_SIGMA - 1.0) < 0.02, "seed %d: σ %.5f",
                      (int)seed, sqrt(m2));
        /* 1/√n ≈ 0.005: four SE of an iid lag-1 autocorrelation. */
        ck_assert_msg(fabs(ac) < 0.02, "seed %d: lag-1 autocorr %.4f", (int)seed, ac);
        ck_assert_msg(fabs(sq_autocorr(&s, 1)) < 0.02, "seed %d: squared autocorr %.4f",
                      (int)seed, sq_autocorr(&s, 1));
        fox_series_fini(&s);
    }
}
END_TEST

/*
 * GARCH(1,1): squared returns are autocorrelated (volatility clusters, and
 * the autocorrelation decays roughly as (α+β)^k), returns themselves are not
 * (no edge), the mean is within 3 SE of 0, and the sample variance matches
 * the unconditional ω/(1 − α − β) within 10 % on average over seeds. The
 * labels follow the conditional σ: high-vol bars move more than quiet ones.
 */
START_TEST(test_garch_stats)
{
    double var_sum = 0;
    int seeds = 4;
    const double omega = FOX_NOEDGE_SIGMA * FOX_NOEDGE_SIGMA * (1 - FOX_GARCH_ALPHA - FOX_GARCH_BETA);
    const double var_uncond = omega / (1 - FOX_GARCH_ALPHA - FOX_GARCH_BETA);
    for (uint64_t seed = 1; seed <= (uint64_t)seeds; seed++) {
        fox_series s;
        int n = 40000;
        FOX_CK_OK(fox_series_garch(&s, n, seed));
        double m, m2, ac, hi2 = 0, lo2 = 0;
        int n_hi = 0, n_lo = 0;
        logret_moments(&s, &m, &m2, &ac);
        for (int i = 1; i < n; i++) {
            double d = logret(&s, i) - m;
            if (s.regime[i] == FOX_REGIME_HIGHVOL) {
                hi2 += d * d;
                n_hi++;
            } else {
                lo2 += d * d;
                n_lo++;
            }
        }
        var_sum += m2;
        /* Under clustering the plain SE understates the mean's error; 3 SE still holds. */
        double se = sqrt(m2 / (n - 1));
        ck_assert_msg(fabs(m) < 3.0 * se, "seed %d: mean %.3g, SE %.3g", (int)seed, m, se);
        ck_assert_msg(fabs(ac) < 0.03, "seed %d: lag-1 autocorr %.4f", (int)seed, ac);
        double ac1 = sq_autocorr(&s, 1), ac10 = sq_autocorr(&s, 10);
        ck_assert_msg(ac1 > 0.05, "seed %d: squared lag-1 autocorr %.4f", (int)seed, ac1);
        ck_assert_msg(ac10 > 0.02 && ac10 < ac1, "seed %d: squared lag-10 autocorr %.4f",
                      (int)seed, ac10);
        ck_assert_int_gt(n_hi, n / 10);
        ck_assert_int_gt(n_lo, n / 10);
        ck_assert_msg(hi2 / n_hi > 1.5 * lo2 / n_lo, "seed %d: high-vol/quiet variance %.2f",
                      (int)seed, (hi2 / n_hi) / (lo2 / n_lo));
        fox_series_fini(&s);
    }
    double ratio = var_sum / seeds / var_uncond;
    ck_assert_msg(fabs(ratio - 1.0) < 0.10, "sample/unconditional variance %.3f", ratio);
}
END_TEST

/* ------------------------------------------------------------------- CSV */

START_TEST(test_csv_good_ohlcv)
{
    /* Hourly bars around the clock, with a byte-order mark, quoted and unknown columns. */
    char path[PATH_LEN], *buf = malloc(1 << 20);
    size_t k = (size_t)sprintf(buf, "%s",
                               "\xEF\xBB\xBF"
                               "Timestamp,Open,High,Low,\"Close\",Adj Close,Vol\n");
    int rows = 300;
    for (int i = 0; i < rows; i++) {
        double c = 100.0 + 10.0 * sin(i * 0.1);
        k += (size_t)sprintf(buf + k, "%d,%.4f,%.4f,%.4f,%.4f,%.4f,%d\n", 1700000000 + 3600 * i, c,
                             c + 1.0, c - 1.5, c + 0.5, c, 1000 + i);
    }
    write_file(path, "good_ohlcv.csv", buf);
    free(buf);
    fox_series s;
    char err[512] = "";
    FOX_CK_OK(fox_series_load_csv(&s, path, NULL, 100, err, sizeof(err)));
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(s.n, rows);
    ck_assert_str_eq(s.source, path);
    ck_assert_ptr_nonnull(s.time);
    ck_assert_ptr_nonnull(s.open);
    ck_assert_ptr_nonnull(s.volume);
    ck_assert_double_eq(s.time[0], 1700000000.0);
    ck_assert_double_eq(s.time[rows - 1], 1700000000.0 + 3600.0 * (rows - 1));
    ck_assert_float_eq_tol(s.close[3], (float)(100.0 + 10.0 * sin(0.3) + 0.5), 1e-3f);
    ck_assert_float_eq_tol(s.high[3], (float)(100.0 + 10.0 * sin(0.3) + 1.0), 1e-3f);
    ck_assert_float_eq(s.volume[7], 1007.0f);
    /* Bars present per year of timestamps: one an hour, a year of 365.2425 days. */
    ck_assert_double_eq_tol(s.bars_per_year, 365.2425 * 24.0, 1e-6);
    for (int i = 0; i < rows; i++)
        ck_assert(s.regime[i] >= 0 && s.regime[i] <= 3);
    fox_series_fini(&s);
    ck_assert(series_zeroed(&s));
}
END_TEST

START_TEST(test_csv_good_close_only)
{
    /* Daily dates, CRLF line ends, blank lines, no trailing newline. */
    char path[PATH_LEN], *buf = malloc(1 << 20);
    size_t k = (size_t)sprintf(buf, "date,close\r\n\r\n");
    int rows = 400;
    for (int i = 0; i < rows; i++) {
        int y = 2020 + i / 336, m = 1 + (i / 28) % 12, d = 1 + i % 28;
        k += (size_t)sprintf(buf + k, "%04d-%02d-%02d,%.2f%s", y, m, d, 50.0 + i * 0.25,
                             i + 1 < rows ? "\r\n" : "");
        if (i == 100)
            k += (size_t)sprintf(buf + k, "  \r\n");
    }
    write_file(path, "good_close.csv", buf);
    free(buf);
    fox_series s;
    char err[512] = "";
    FOX_CK_OK(fox_series_load_csv(&s, path, NULL, rows, err, sizeof(err)));
    ck_assert_int_eq(s.n, rows);
    ck_assert_ptr_null(s.open);
    ck_assert_ptr_null(s.high);
    ck_assert_ptr_null(s.low);
    ck_assert_ptr_null(s.volume);
    ck_assert_ptr_nonnull(s.time);
    ck_assert_double_eq(s.time[0], 1577836800.0); /* 2020-01-01T00:00:00Z */
    ck_assert_float_eq(s.close[rows - 1], 50.0f + (rows - 1) * 0.25f);
    /* 399 intervals from 2020-01-01 to 2021-03-08: 366 + 31 + 28 + 7 = 432 days. */
    ck_assert_double_eq_tol(s.bars_per_year, 399.0 / (432.0 / 365.2425), 1e-6);
    fox_series_fini(&s);

    /* No time column at all: 252 bars a year, no time array. */
    write_file(path, "close_no_time.csv", "close\n10\n11\n10.5\n12\n");
    FOX_CK_OK(fox_series_load_csv(&s, path, NULL, 4, err, sizeof(err)));
    ck_assert_int_eq(s.n, 4);
    ck_assert_ptr_null(s.time);
    ck_assert_double_eq(s.bars_per_year, 252.0);
    fox_series_fini(&s);
}
END_TEST

START_TEST(test_csv_iso_dates)
{
    /* 5-minute bars of a 14:30–21:00 UTC session, weekdays only, both ISO spellings. */
    char path[PATH_LEN], *buf = malloc(1 << 20);
    size_t k = (size_t)sprintf(buf, "time,close,volume\n");
    int rows = 0;
    for (int day = 2; day <= 12; day++) {
        if (day == 6 || day == 7) /* 2024-01-06/07 are Saturday and Sunday */
            continue;
        for (int b = 0; b < 78; b++) {
            int minutes = 14 * 60 + 30 + 5 * b;
            const char *fmt = day % 2 ? "2024-01-%02dT%02d:%02d:00Z,%.2f,%d\n"
                                      : "2024-01-%02d %02d:%02d,%.2f,%d\n";
            k += (size_t)sprintf(buf + k, fmt, day, minutes / 60, minutes % 60, 100.0 + 0.01 * rows,
                                 500 + rows % 7);
            rows++;
        }
    }
    write_file(path, "iso.csv", buf);
    free(buf);
    fox_series s;
    char err[512] = "";
    FOX_CK_OK(fox_series_load_csv(&s, path, NULL, 100, err, sizeof(err)));
    ck_assert_int_eq(s.n, rows);
    ck_assert_double_eq(s.time[0], 1704205800.0); /* 2024-01-02T14:30:00Z */
    ck_assert_double_eq(s.time[1] - s.time[0], 300.0);
    /* 701 intervals over 2024-01-02 14:30 .. 2024-01-12 20:55, 10 days 6 h 25 min. */
    double span = 10 * 86400.0 + 6 * 3600.0 + 25 * 60.0;
    ck_assert_double_eq_tol(s.bars_per_year, 701.0 / (span / (365.2425 * 86400.0)), 1e-6);
    fox_series_fini(&s);
}
END_TEST

/* ISO-8601 with offsets and fractions, converted to UTC, as exports write them. */
START_TEST(test_csv_iso_offsets)
{
    char path[PATH_LEN];
    write_file(path, "offsets.csv",
               "time,close\n"
               "2020-01-02T09:30:00+00:00,10\n"  /* 1577957400 */
               "2020-01-02T10:30:00Z,11\n"       /* 1577961000 */
               "2020-01-02T16:30:00+05:30,12\n"  /* 11:00 UTC: 1577962800 */
               "2020-01-02T06:30:00-0500,13\n"   /* 11:30 UTC: 1577964600 */
               "2020-01-02T13:00:00+01,14\n"     /* 12:00 UTC: 1577966400 */
               "2020-01-02 12:30:00.250Z,15\n"); /* 1577968200.25 */
    fox_series s;
    char err[512] = "";
    FOX_CK_OK(fox_series_load_csv(&s, path, NULL, 6, err, sizeof(err)));
    ck_assert_double_eq(s.time[0], 1577957400.0);
    ck_assert_double_eq(s.time[1], 1577961000.0);
    ck_assert_double_eq(s.time[2], 1577962800.0);
    ck_assert_double_eq(s.time[3], 1577964600.0);
    ck_assert_double_eq(s.time[4], 1577966400.0);
    ck_assert_double_eq(s.time[5], 1577968200.25);
    fox_series_fini(&s);

    /* An offset that moves a later local time before an earlier one is refused as such. */
    write_file(path, "offsets_back.csv",
               "time,close\n2020-01-02T10:00:00Z,10\n2020-01-02T12:00:00+05:00,11\n");
    ck_assert_int_eq(fox_series_load_csv(&s, path, NULL, 1, err, sizeof(err)), FOX_EFORMAT);
    ck_assert_msg(strstr(err, ":3: non-increasing time"), "%s", err);
    const char *bad[] = {"2020-01-02T10:00:00+5", "2020-01-02T10:00:00+24:00",
                         "2020-01-02T10:00:00+05:60", "2020-01-02T10:00:00.Z",
                         "2020-01-02T10:00:00 +01:00"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char content[128];
        snprintf(content, sizeof content, "time,close\n%s,10\n", bad[i]);
        write_file(path, "offsets_bad.csv", content);
        ck_assert_int_eq(fox_series_load_csv(&s, path, NULL, 1, err, sizeof(err)), FOX_EFORMAT);
        ck_assert_msg(strstr(err, ":2: bad time"), "%s: %s", bad[i], err);
        ck_assert(series_zeroed(&s));
    }
}
END_TEST

/* data.price_column: one index of several, none named close. */
START_TEST(test_csv_price_column)
{
    char path[PATH_LEN], *buf = malloc(1 << 20);
    size_t k = (size_t)sprintf(buf, "Date,SPX,NDX,DAX,Nikkei\n");
    for (int i = 0; i < 300; i++)
        k += (size_t)sprintf(buf + k, "%d,%.2f,%.2f,%.2f,%.2f\n", 1600000000 + 86400 * i,
                             3000.0 + i, 11000.0 + 2 * i, 13000.0 - i, 23000.0 + 0.5 * i);
    write_file(path, "indices.csv", buf);
    free(buf);
    fox_series s;
    char err[512] = "";
    /* Without the key the file has no price to read, and the message says how to pick one. */
    ck_assert_int_eq(fox_series_load_csv(&s, path, NULL, 100, err, sizeof(err)), FOX_EFORMAT);
    ck_assert_msg(strstr(err, ":1: missing close column") && strstr(err, "data.price_column"),
                  "%s", err);
    FOX_CK_OK(fox_series_load_csv(&s, path, "dax", 100, err, sizeof(err)));
    ck_assert_int_eq(s.n, 300);
    ck_assert_float_eq(s.close[0], 13000.0f);
    ck_assert_float_eq(s.close[299], 13000.0f - 299.0f);
    ck_assert_ptr_null(s.open);
    ck_assert_ptr_null(s.volume);
    ck_assert_double_eq(s.time[1] - s.time[0], 86400.0);
    fox_series_fini(&s);

    /* An unknown name is refused with the header's names; so is the time column. */
    ck_assert_int_eq(fox_series_load_csv(&s, path, "FTSE", 100, err, sizeof(err)), FOX_EFORMAT);
    ck_assert_msg(strstr(err, ":1: data.price_column 'FTSE' names no column") &&
                      strstr(err, "'Nikkei'"),
                  "%s", err);
    ck_assert(series_zeroed(&s));
    ck_assert_int_eq(fox_series_load_csv(&s, path, "date", 100, err, sizeof(err)), FOX_EFORMAT);
    ck_assert_msg(strstr(err, "names the time column"), "%s", err);

    /* Naming the close column itself keeps the OHLCV set; another column drops it. */
    write_file(path, "ohlc_plus.csv",
               "time,open,high,low,close,volume,other\n1,10,12,9,11,5,70\n2,11,13,10,12,6,71\n");
    FOX_CK_OK(fox_series_load_csv(&s, path, "Close", 2, err, sizeof(err)));
    ck_assert_ptr_nonnull(s.open);
    ck_assert_float_eq(s.close[1], 12.0f);
    fox_series_fini(&s);
    FOX_CK_OK(fox_series_load_csv(&s, path, "other", 2, err, sizeof(err)));
    ck_assert_ptr_null(s.open);
    ck_assert_ptr_null(s.volume);
    ck_assert_float_eq(s.close[1], 71.0f);
    fox_series_fini(&s);
}
END_TEST

/*
 * P from the timestamps over a year of 30-minute bars: an exchange session
 * (13 bars on weekdays), a 24-hour market on weekdays, and one that never
 * closes. 2023 has 260 weekdays.
 */
static double
year_of_bars(const char *name, int weekdays_only, int first_bar, int bars_a_day)
{
    char path[PATH_LEN], *buf = malloc(8 << 20);
    size_t k = (size_t)sprintf(buf, "time,close\n");
    double t0 = 1672531200.0; /* 2023-01-01T00:00:00Z, a Sunday */
    for (int day = 0; day < 365; day++) {
        int wd = day % 7; /* 0 = Sunday */
        if (weekdays_only && (wd == 0 || wd == 6))
            continue;
        for (int b = 0; b < bars_a_day; b++)
            k += (size_t)sprintf(buf + k, "%.0f,%.2f\n",
                                 t0 + day * 86400.0 + (first_bar + b) * 1800.0, 100.0 + 0.001 * b);
    }
    write_file(path, name, buf);
    free(buf);
    fox_series s;
    char err[512] = "";
    FOX_CK_OK(fox_series_load_csv(&s, path, NULL, 100, err, sizeof(err)));
    double P = s.bars_per_year;
    fox_series_fini(&s);
    return P;
}

START_TEST(test_csv_bars_per_year)
{
    double session = year_of_bars("session.csv", 1, 29, 13); /* 14:30–21:00 UTC */
    double fx = year_of_bars("fx.csv", 1, 0, 48);
    double crypto = year_of_bars("crypto.csv", 0, 0, 48);
    /* The year's first and last weekends lie outside the span: about 1 % too many over a year. */
    ck_assert_msg(fabs(session / (13.0 * 260.0) - 1.0) < 0.015, "session P %.1f", session);
    ck_assert_msg(fabs(fx / (48.0 * 260.0) - 1.0) < 0.015, "24-hour weekday P %.1f", fx);
    ck_assert_msg(fabs(crypto / (48.0 * 365.2425) - 1.0) < 0.01, "24/7 P %.1f", crypto);
}
END_TEST

/* The CSV regime proxy: calm and rising, then volatile and falling. */
START_TEST(test_csv_regime_proxy)
{
    char path[PATH_LEN], *buf = malloc(1 << 20);
    size_t k = (size_t)sprintf(buf, "close\n");
    double c = 100.0;
    for (int i = 0; i < 400; i++) {
        double r = i < 200 ? 0.001 + (i % 2 ? 0.001 : -0.001) : -0.004 + (i % 2 ? 0.03 : -0.03);
        c *= exp(r);
        k += (size_t)sprintf(buf + k, "%.6f\n", c);
    }
    write_file(path, "proxy.csv", buf);
    free(buf);
    fox_series s;
    char err[512] = "";
    FOX_CK_OK(fox_series_load_csv(&s, path, NULL, 400, err, sizeof(err)));
    ck_assert_int_eq(s.regime[150], 0); /* calm, rising */
    ck_assert_int_eq(s.regime[199], 0);
    ck_assert_int_eq(s.regime[300], 3); /* volatile, falling */
    ck_assert_int_eq(s.regime[399], 3);
    fox_series_fini(&s);
}
END_TEST

typedef struct {
    const char *name;
    const char *content;
    int min_rows;
    int rc;
    int line;           /* 0: no line number (the file cannot be opened) */
    const char *reason; /* a substring of the message */
    const char *reason2;
} bad_csv;

static const bad_csv bad_files[] = {
    {"missing.csv", NULL, 1, FOX_ENOENT, 0, "cannot open", "No such file"},
    {"empty.csv", "", 1, FOX_EFORMAT, 1, "empty file", "header"},
    {"blank.csv", "\n  \r\n\n", 1, FOX_EFORMAT, 1, "empty file", NULL},
    {"noheader.csv", "1700000000,10\n1700003600,11\n", 1, FOX_EFORMAT, 1, "no header row", NULL},
    {"noclose.csv", "time,open,volume\n1,2,3\n", 1, FOX_EFORMAT, 1, "missing close column", NULL},
    {"dupclose.csv", "time,close,CLOSE\n1,2,3\n", 1, FOX_EFORMAT, 1, "duplicate close column",
     "'CLOSE'"},
    {"duptime.csv", "\ntime,timestamp,close\n1,2,3\n", 1, FOX_EFORMAT, 2, "duplicate time column",
     NULL},
    {"partial.csv", "time,open,high,close\n1,2,3,2\n", 1, FOX_EFORMAT, 1, "partial OHLC",
     "missing low"},
    {"fields.csv", "time,close\n1,10\n2,11\n3,12,13\n4,14\n", 1, FOX_EFORMAT, 4,
     "expected 2 fields", "found 3"},
    {"fields_short.csv", "time,close,volume\n1,10,5\n2,11\n", 1, FOX_EFORMAT, 3,
     "expected 3 fields", "found 2"},
    {"nonnum.csv", "time,close\n1,10\n2,abc\n", 1, FOX_EFORMAT, 3, "non-numeric value 'abc'",
     "column 'close'"},
    {"nonnum_vol.csv", "time,close,Volume\r\n1,10,5\r\n2,11,lots\r\n", 1, FOX_EFORMAT, 3,
     "non-numeric value 'lots'", "column 'Volume'"},
    {"empty_field.csv", "time,close\n1,10\n2,\n", 1, FOX_EFORMAT, 3, "non-numeric value ''",
     "column 'close'"},
    {"badtime.csv", "date,close\n2024-01-02,10\n2024-13-01,11\n", 1, FOX_EFORMAT, 3, "bad time",
     "'2024-13-01'"},
    {"badtime_text.csv", "time,close\n1,10\nyesterday,11\n", 1, FOX_EFORMAT, 3, "bad time",
     "column 'time'"},
    {"nan.csv", "time,close\n1,10\n2,11\n3,nan\n", 1, FOX_EFORMAT, 4, "non-finite value 'nan'",
     "column 'close'"},
    {"inf.csv", "time,open,high,low,close\n1,10,11,9,10\n2,10,inf,9,10\n", 1, FOX_EFORMAT, 3,
     "non-finite value 'inf'", "column 'high'"},
    {"zero.csv", "time,close\n1,10\n2,0\n", 1, FOX_EFORMAT, 3, "non-positive price", "'close'"},
    {"negative.csv", "time,open,high,low,close\n1,10,11,-9,10\n", 1, FOX_EFORMAT, 2,
     "non-positive price", "'low'"},
    {"negvol.csv", "time,close,volume\n1,10,5\n2,11,-1\n", 1, FOX_EFORMAT, 3, "negative volume",
     NULL},
    {"highlow.csv", "time,open,high,low,close\n1,10,11,9,10\n2,10,9,10,10\n", 1, FOX_EFORMAT, 3,
     "high 9 < low 10", NULL},
    {"openout.csv", "time,open,high,low,close\n1,12,11,9,10\n", 1, FOX_EFORMAT, 2,
     "open 12 outside [low 9, high 11]", NULL},
    {"closeout.csv", "time,open,high,low,close\n1,10,11,9,10\n2,10,11,9,8.5\n", 1, FOX_EFORMAT, 3,
     "close 8.5 outside [low 9, high 11]", NULL},
    {"timeback.csv", "time,close\n1,10\n3,11\n2,12\n", 1, FOX_EFORMAT, 4, "non-increasing time '2'",
     "line 3"},
    {"timeequal.csv", "date,close\n2024-01-02,10\n2024-01-02,11\n", 1, FOX_EFORMAT, 3,
     "non-increasing time", NULL},
    /* strtod reads these; no price file means them. */
    {"hex.csv", "time,close\n1,10\n2,0x1p3\n", 1, FOX_EFORMAT, 3, "non-numeric value '0x1p3'",
     "decimal only"},
    {"hextime.csv", "time,close\n0x10,10\n", 1, FOX_EFORMAT, 2, "bad time '0x10'", NULL},
    {"infinity.csv", "time,close\n1,10\n2,Infinity\n", 1, FOX_EFORMAT, 3,
     "non-finite value 'Infinity'", NULL},
    {"overflow.csv", "time,close\n1,10\n2,1e400\n", 1, FOX_EFORMAT, 3,
     "non-finite value '1e400'", NULL},
    /* Finite doubles that a float makes inf or 0: a NaN Sharpe, later, with no word why. */
    {"floatbig.csv", "time,close\n1,10\n2,1e39\n", 1, FOX_EFORMAT, 3,
     "price '1e39' in column 'close' is outside what a float holds", NULL},
    {"floattiny.csv", "time,close\n1,10\n2,1e-46\n", 1, FOX_EFORMAT, 3,
     "price '1e-46' in column 'close' is outside what a float holds", NULL},
    {"floatvol.csv", "time,close,volume\n1,10,1e39\n", 1, FOX_EFORMAT, 2,
     "volume '1e39'", NULL},
    /* Times in smaller units than seconds: P would be off by 1e3 to 1e9. */
    {"millis.csv", "time,close\n1700000000000,10\n", 1, FOX_EFORMAT, 2, "looks like milliseconds",
     "data.bars_per_year"},
    {"nanos.csv", "time,close\n1700000000000000000,10\n", 1, FOX_EFORMAT, 2,
     "looks like nanoseconds", "unix seconds"},
    {"fewrows.csv", "time,close\n1,10\n2,11\n3,12\n", 10, FOX_EFORMAT, 4, "3 data rows",
     "fewer than the 10 required"},
    {"headeronly.csv", "time,close\n", 1, FOX_EFORMAT, 1, "0 data rows", NULL},
};

START_TEST(test_csv_bad)
{
    const bad_csv *b = &bad_files[_i];
    char path[PATH_LEN];
    if (b->content)
        write_file(path, b->name, b->content);
    else
        snprintf(path, sizeof(path), "%s/%s", tmpdir, b->name);
    fox_series s;
    memset(&s, 0xAB, sizeof(s)); /* the loader must not trust what it is given */
    char err[512] = "";
    int rc = fox_series_load_csv(&s, path, NULL, b->min_rows, err, sizeof(err));
    ck_assert_msg(rc == b->rc, "%s: got %s, want %s (%s)", b->name, fox_err_name(rc),
                  fox_err_name(b->rc), err);
    ck_assert_msg(series_zeroed(&s), "%s: series not left zeroed", b->name);
    char prefix[PATH_LEN + 32];
    if (b->line > 0)
        snprintf(prefix, sizeof(prefix), "%s:%d: ", path, b->line);
    else
        snprintf(prefix, sizeof(prefix), "%s: ", path);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "%s: message '%s' lacks '%s'", b->name,
                  err, prefix);
    ck_assert_msg(strstr(err, b->reason) != NULL, "%s: message '%s' lacks '%s'", b->name, err,
                  b->reason);
    if (b->reason2)
        ck_assert_msg(strstr(err, b->reason2) != NULL, "%s: message '%s' lacks '%s'", b->name, err,
                      b->reason2);
    fox_series_fini(&s);
}
END_TEST

/*
 * Bars a millisecond apart in unix seconds give a P of 3e10: refused by the
 * engine with the key that overrides it, and accepted once it is set.
 */
START_TEST(test_csv_implausible_bars_per_year)
{
    char path[PATH_LEN], *buf = malloc(1 << 20), err[512];
    size_t k = (size_t)sprintf(buf, "time,close\n");
    for (int i = 0; i < 1000; i++)
        k += (size_t)sprintf(buf + k, "%.3f,%.4f\n", 1700000000.0 + 0.001 * i,
                             100.0 + sin(0.1 * i));
    write_file(path, "subsecond.csv", buf);
    free(buf);
    fox_config c;
    fox_test_small_net(&c);
    snprintf(c.data, sizeof c.data, "%s", path);
    fox_engine *e = NULL;
    FOX_CK_OK_MSG(fox_engine_create(&e, &c, err, sizeof err), err);
    ck_assert_int_eq(fox_engine_load_data(e), FOX_EINVAL);
    ck_assert_msg(strstr(fox_engine_errmsg(e), "data.bars_per_year") &&
                      strstr(fox_engine_errmsg(e), "unix seconds") &&
                      strstr(fox_engine_errmsg(e), path),
                  "%s", fox_engine_errmsg(e));
    fox_engine_destroy(e);
    c.bars_per_year = 8760;
    FOX_CK_OK_MSG(fox_engine_create(&e, &c, err, sizeof err), err);
    FOX_CK_ENGINE_OK(e, fox_engine_load_data(e));
    fox_engine_destroy(e);
}
END_TEST

START_TEST(test_csv_small_err_buffer)
{
    char path[PATH_LEN], err[8];
    write_file(path, "trunc.csv", "time,close\n1,abc\n");
    fox_series s;
    ck_assert_int_eq(fox_series_load_csv(&s, path, NULL, 1, err, sizeof(err)), FOX_EFORMAT);
    ck_assert_int_eq(strlen(err), 7);
    ck_assert_int_eq(fox_series_load_csv(&s, path, NULL, 1, NULL, 0), FOX_EFORMAT);
}
END_TEST

/* -------------------------------------------------------------- features */

static double
brute_std(const double *x, int n)
{
    double m = 0, v = 0;
    for (int i = 0; i < n; i++)
        m += x[i];
    m /= n;
    for (int i = 0; i < n; i++)
        v += (x[i] - m) * (x[i] - m);
    return sqrt(v / n);
}

START_TEST(test_features_values)
{
    fox_series s;
    fox_features f;
    FOX_CK_OK(fox_series_synthetic(&s, 3000, 5));
    FOX_CK_OK(fox_features_compute(&f, &s, 64));
    ck_assert_int_eq(f.n_bars, 3000);
    ck_assert_int_eq(f.n_feat, FOX_MARKET_FEATURES);
    ck_assert_int_eq(f.warmup, 65);
    ck_assert_str_eq(f.names[0], "ret_lag0");
    ck_assert_str_eq(f.names[15], "ret_lag15");
    ck_assert_str_eq(f.names[21], "cumret_64");
    ck_assert_str_eq(f.names[25], "vol_64");
    ck_assert_str_eq(f.names[36], "dow_cos");
    for (size_t i = 0; i < (size_t)f.n_bars * f.n_feat; i++)
        ck_assert(isfinite(f.raw[i]) && isfinite(f.norm[i]));
    /* Against brute-force definitions, at bars where the rolling sums have run a while. */
    int ts[] = {65, 500, 1777, 2999};
    for (size_t q = 0; q < sizeof(ts) / sizeof(ts[0]); q++) {
        int t = ts[q];
        const float *z = f.raw + (size_t)t * f.n_feat;
        ck_assert_double_eq_tol(z[0], logret(&s, t), 1e-6);
        ck_assert_double_eq_tol(z[7], logret(&s, t - 7), 1e-6);
        ck_assert_double_eq_tol(z[18], log((double)s.close[t] / s.close[t - 8]), 1e-6);
        double r[64], lc[64];
        for (int i = 0; i < 64; i++) {
            r[i] = logret(&s, t - i);
            lc[i] = log((double)s.close[t - i]);
        }
        ck_assert_double_eq_tol(z[23], brute_std(r, 16), 1e-6);
        ck_assert_double_eq_tol(z[25], brute_std(r, 64), 1e-6);
        double m32 = 0;
        for (int i = 0; i < 32; i++)
            m32 += lc[i] / 32;
        ck_assert_double_eq_tol(z[28], (lc[0] - m32) / brute_std(lc, 32), 1e-3);
        double atr = 0;
        for (int i = 0; i < 14; i++) {
            int u = t - i;
            double h = s.high[u], l = s.low[u], pc = s.close[u - 1];
            atr += fmax(h - l, fmax(fabs(h - pc), fabs(l - pc))) / 14;
        }
        ck_assert_double_eq_tol(z[30], (s.high[t] - s.low[t]) / atr, 1e-4);
        ck_assert_double_eq_tol(z[31], atr / s.close[t], 1e-6);
        double hour = fmod(s.time[t], 86400.0) / 3600.0;
        ck_assert_double_eq_tol(z[33], sin(2 * M_PI * hour / 24), 1e-6);
    }
    fox_features_fini(&f);

    /* A small state truncates the list; too small a state is refused. */
    FOX_CK_OK(fox_features_compute(&f, &s, 16));
    ck_assert_int_eq(f.n_feat, 13);
    ck_assert_str_eq(f.names[12], "ret_lag12");
    ck_assert_double_eq_tol(f.raw[(size_t)100 * 13 + 12], logret(&s, 88), 1e-6);
    fox_features_fini(&f);
    ck_assert_int_eq(fox_features_compute(&f, &s, FOX_PORTFOLIO_FEATURES), FOX_EINVAL);
    fox_features_fini(&f);
    ck_assert_int_eq(fox_features_compute(&f, NULL, 40), FOX_EINVAL);
    fox_series_fini(&s);
}
END_TEST

static void
scale_after(fox_series *s, int t)
{
    for (int i = t + 1; i < s->n; i++) {
        float k = (float)(1.0 + 999.0 * ((i * 7919) % 101) / 100.0);
        s->close[i] *= k;
        if (s->open) {
            s->open[i] *= k;
            s->high[i] *= k * 3.0f;
            s->low[i] *= k * 0.1f;
        }
        if (s->volume)
            s->volume[i] *= 50.0f * k;
        if (s->time)
            s->time[i] += 12345.0 * i;
    }
}

START_TEST(test_features_causal)
{
    /* OHLCV with time, and the same closes as a close-only series without time or volume. */
    for (int variant = 0; variant < 2; variant++) {
        fox_series s;
        FOX_CK_OK(fox_series_synthetic(&s, 4000, 9));
        if (variant == 1) {
            free(s.open);
            free(s.high);
            free(s.low);
            free(s.volume);
            free(s.time);
            s.open = s.high = s.low = s.volume = NULL;
            s.time = NULL;
        }
        fox_features a, b;
        FOX_CK_OK(fox_features_compute(&a, &s, 40));
        int t = 1500;
        scale_after(&s, t);
        FOX_CK_OK(fox_features_compute(&b, &s, 40));
        size_t row = (size_t)a.n_feat * sizeof(float);
        ck_assert_msg(memcmp(a.raw, b.raw, (size_t)(t + 1) * row) == 0,
                      "variant %d: rows 0..t changed when later bars did", variant);
        ck_assert_msg(memcmp(a.raw + (size_t)(t + 1) * a.n_feat, b.raw + (size_t)(t + 1) * a.n_feat,
                             row) != 0,
                      "variant %d: row t+1 should see the change", variant);
        fox_features_fini(&a);
        fox_features_fini(&b);
        fox_series_fini(&s);
    }
}
END_TEST

START_TEST(test_features_normalize)
{
    fox_series s;
    fox_features a, b;
    FOX_CK_OK(fox_series_synthetic(&s, 4000, 3));
    FOX_CK_OK(fox_features_compute(&a, &s, 40));
    int begin = 1000, end = 2500, nf = a.n_feat;
    fox_features_normalize(&a, begin, end);
    for (int j = 0; j < nf; j++) {
        double m = 0, v = 0;
        for (int t = begin; t < end; t++)
            m += a.raw[(size_t)t * nf + j];
        m /= end - begin;
        for (int t = begin; t < end; t++) {
            double d = a.raw[(size_t)t * nf + j] - m;
            v += d * d;
        }
        double sd = fmax(sqrt(v / (end - begin)), 1e-6);
        ck_assert_double_eq_tol(a.mean[j], m, 1e-6 + 1e-5 * fabs(m));
        ck_assert_double_eq_tol(a.std[j], sd, 1e-5 * sd);
        for (int t = 0; t < a.n_bars; t++) {
            float x = a.norm[(size_t)t * nf + j];
            ck_assert(x >= -FOX_FEATURE_CLIP && x <= FOX_FEATURE_CLIP);
        }
    }
    /* Bars after the fit range change; the fitted statistics must not. */
    scale_after(&s, end + 10);
    FOX_CK_OK(fox_features_compute(&b, &s, 40));
    fox_features_normalize(&b, begin, end);
    ck_assert(memcmp(a.mean, b.mean, (size_t)nf * sizeof(float)) == 0);
    ck_assert(memcmp(a.std, b.std, (size_t)nf * sizeof(float)) == 0);
    /* Rows outside the range, poked directly: statistics unchanged, their norm clipped. */
    for (int j = 0; j < nf; j++) {
        b.raw[(size_t)10 * nf + j] = 1e9f;
        b.raw[(size_t)3000 * nf + j] = -1e9f;
    }
    fox_features_normalize(&b, begin, end);
    ck_assert(memcmp(a.mean, b.mean, (size_t)nf * sizeof(float)) == 0);
    ck_assert(memcmp(a.std, b.std, (size_t)nf * sizeof(float)) == 0);
    ck_assert_float_eq(b.norm[(size_t)10 * nf + 0], FOX_FEATURE_CLIP);
    ck_assert_float_eq(b.norm[(size_t)3000 * nf + 0], -FOX_FEATURE_CLIP);
    /* Changing a bar inside the range does move them. */
    b.raw[(size_t)1200 * nf + 0] += 1.0f;
    fox_features_normalize(&b, begin, end);
    ck_assert(a.mean[0] != b.mean[0]);
    fox_features_fini(&a);
    fox_features_fini(&b);

    /* A constant feature (no time: hour/day encodings are 0) hits the std floor. */
    free(s.time);
    s.time = NULL;
    FOX_CK_OK(fox_features_compute(&a, &s, 40));
    fox_features_normalize(&a, 100, 3000);
    ck_assert_float_eq(a.std[33], 1e-6f);
    ck_assert_float_eq(a.norm[(size_t)500 * nf + 33], 0.0f);
    fox_features_fini(&a);
    fox_series_fini(&s);
}
END_TEST

/* ----------------------------------------------------------------- folds */

START_TEST(test_folds)
{
    int n = 10065, warmup = 65, K = 3, len = 2500;
    fox_fold prev = {0};
    for (int k = 0; k < K; k++) {
        fox_fold f;
        FOX_CK_OK(fox_fold_split(n, warmup, K, k, &f));
        ck_assert_int_eq(f.train_begin, warmup);
        ck_assert_int_eq(f.train_end, warmup + (k + 1) * len);
        ck_assert_int_eq(f.val_begin, f.train_end);
        ck_assert_int_eq(f.val_end, f.val_begin + len / 2);
        ck_assert_int_eq(f.test_begin, f.val_end);
        ck_assert_int_eq(f.test_end, warmup + (k + 2) * len);
        ck_assert_int_le(f.test_end, n);
        if (k > 0) {
            /* Anchored: the previous fold's evaluation block joins training. */
            ck_assert_int_eq(f.train_end, prev.test_end);
            ck_assert_int_gt(f.train_end, prev.train_end);
        }
        prev = f;
    }
    ck_assert_int_eq(prev.test_end, n);

    /* A remainder joins the last block's test half; blocks stay disjoint. */
    fox_fold f;
    FOX_CK_OK(fox_fold_split(10067, warmup, K, 2, &f));
    ck_assert_int_eq(f.test_end, 10067);
    ck_assert_int_eq(f.val_begin, warmup + 3 * len);

    ck_assert_int_eq(fox_fold_split(n, warmup, K, -1, &f), FOX_EINVAL);
    ck_assert_int_eq(fox_fold_split(n, warmup, K, 3, &f), FOX_EINVAL);
    ck_assert_int_eq(fox_fold_split(n, warmup, 0, 0, &f), FOX_EINVAL);
    ck_assert_int_eq(fox_fold_split(n, warmup, K, 0, NULL), FOX_EINVAL);
    ck_assert_int_eq(fox_fold_split(warmup + 4 * 99 + 3, warmup, K, 0, &f), FOX_EINVAL);
    FOX_CK_OK(fox_fold_split(warmup + 4 * 100, warmup, K, 0, &f));
    ck_assert_int_eq(fox_fold_split(50, warmup, K, 0, &f), FOX_EINVAL);
}
END_TEST

START_TEST(test_fini_safe)
{
    fox_series s = {0};
    fox_features f = {0};
    fox_series_fini(&s);
    fox_series_fini(&s);
    fox_series_fini(NULL);
    fox_features_fini(&f);
    fox_features_fini(&f);
    fox_features_fini(NULL);
    fox_features_normalize(&f, 0, 10); /* nothing to normalize: a no-op */
    /* Half-built: some arrays set, the rest NULL. */
    s.close = malloc(16);
    s.regime = malloc(4);
    s.n = 4;
    fox_series_fini(&s);
    ck_assert(series_zeroed(&s));
    f.raw = malloc(16);
    f.n_feat = 2;
    fox_features_fini(&f);
    ck_assert_ptr_null(f.raw);
}
END_TEST

static Suite *
data_suite(void)
{
    Suite *su = suite_create("data");
    TCase *tc = tcase_create("synthetic");
    tcase_add_test(tc, test_synthetic_deterministic);
    tcase_add_test(tc, test_synthetic_refuses_short);
    tcase_add_test(tc, test_synthetic_ohlc);
    tcase_add_test(tc, test_synthetic_regimes);
    tcase_add_test(tc, test_synthetic_stats);
    tcase_add_test(tc, test_synthetic_learnable);
    suite_add_tcase(su, tc);
    tc = tcase_create("noedge");
    tcase_add_test(tc, test_noedge_deterministic);
    tcase_add_test(tc, test_known_edges);
    tcase_add_test(tc, test_randomwalk_stats);
    tcase_add_test(tc, test_garch_stats);
    suite_add_tcase(su, tc);
    tc = tcase_create("csv");
    tcase_add_test(tc, test_csv_good_ohlcv);
    tcase_add_test(tc, test_csv_good_close_only);
    tcase_add_test(tc, test_csv_iso_dates);
    tcase_add_test(tc, test_csv_iso_offsets);
    tcase_add_test(tc, test_csv_price_column);
    tcase_add_test(tc, test_csv_bars_per_year);
    tcase_add_test(tc, test_csv_regime_proxy);
    tcase_add_loop_test(tc, test_csv_bad, 0, (int)(sizeof(bad_files) / sizeof(bad_files[0])));
    tcase_add_test(tc, test_csv_small_err_buffer);
    tcase_add_test(tc, test_csv_implausible_bars_per_year);
    suite_add_tcase(su, tc);
    tc = tcase_create("features");
    tcase_add_test(tc, test_features_values);
    tcase_add_test(tc, test_features_causal);
    tcase_add_test(tc, test_features_normalize);
    suite_add_tcase(su, tc);
    tc = tcase_create("folds");
    tcase_add_test(tc, test_folds);
    tcase_add_test(tc, test_fini_safe);
    suite_add_tcase(su, tc);
    return su;
}

static void
remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmpdir);
}

int
main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/fox_test_data.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = fox_test_run_suite(data_suite());
    remove_tmpdir();
    return rc;
}
