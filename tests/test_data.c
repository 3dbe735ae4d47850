/*
 * test_data.c — unit tests of the bar generators (gpu/data/synth.c,
 * gpu/data/noedge.c): the synthetic generator's statistics and the no-edge
 * generators' (random walk, GARCH), each source by its data.source name.
 *
 * Not tested here: the CSV loader (test_csv.c), the features, their
 * normalization and the folds (test_features.c), how the environment or the
 * trainer use these (their own suites).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "gpu/data.h"
#include "tests/data_fixture.h"
#include "tests/testutil.h"

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
    return su;
}

int
main(void)
{
    return fox_test_run_suite(data_suite());
}
