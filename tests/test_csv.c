/*
 * test_csv.c — unit tests of the CSV loader (gpu/data/csv.c): its
 * acceptance (OHLCV, close only, dates and offsets, the price column, the
 * bars a year, the regime proxy) and each of its refusals.
 *
 * Not tested here: the generators (test_data.c), the features and the folds
 * (test_features.c). Temporary CSV files live in one mkdtemp directory,
 * removed at exit.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "gpu/data.h"
#include "tests/data_fixture.h"
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

static Suite *
csv_suite(void)
{
    Suite *su = suite_create("csv");
    TCase *tc = tcase_create("csv");
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
    snprintf(tmpdir, sizeof(tmpdir), "%s/fox_test_csv.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = fox_test_run_suite(csv_suite());
    remove_tmpdir();
    return rc;
}