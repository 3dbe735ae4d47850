/*
 * test_features.c — unit tests of the features (gpu/data/features.c: their
 * values, their causality, normalization's fit range), the fold boundaries
 * (gpu/data/folds.c) and the series' and features' lifecycles.
 *
 * Not tested here: the generators (test_data.c), the CSV loader
 * (test_csv.c), how the environment or the trainer use these (their own
 * suites).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/data.h"
#include "tests/data_fixture.h"
#include "tests/testutil.h"

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
features_suite(void)
{
    Suite *su = suite_create("features");
    TCase *tc = tcase_create("features");
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

int
main(void)
{
    return fox_test_run_suite(features_suite());
}
