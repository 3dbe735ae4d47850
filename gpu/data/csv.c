/*
 * csv.c — the CSV loader: a header naming the columns, strict numbers and
 * times, every bad row refused with "path:line: reason", then the inferred
 * bars per year and the causal regime proxy that buckets evaluation
 * reports.
 *
 * What it does not do: fill gaps, resample or guess a column the header
 * does not name. A refused file leaves the series zeroed.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "gpu/data.h"
#include "gpu/data/data_impl.h"

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

enum { COL_TIME, COL_OPEN, COL_HIGH, COL_LOW, COL_CLOSE, COL_VOLUME, N_COLS };

static const char *const col_label[N_COLS] = {"time", "open", "high", "low", "close", "volume"};

static int
col_kind(const char *name)
{
    static const struct {
        const char *name;
        int kind;
    } alias[] = {
        {"time", COL_TIME},     {"timestamp", COL_TIME}, {"date", COL_TIME}, {"datetime", COL_TIME},
        {"open", COL_OPEN},     {"high", COL_HIGH},      {"low", COL_LOW},   {"close", COL_CLOSE},
        {"volume", COL_VOLUME}, {"vol", COL_VOLUME},
    };
    for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++)
        if (strcasecmp(name, alias[i].name) == 0)
            return alias[i].kind;
    return -1;
}

/* Trim blanks and one pair of surrounding double quotes, in place. */
static char *
trim_field(char *f)
{
    while (*f == ' ' || *f == '\t')
        f++;
    size_t len = strlen(f);
    while (len > 0 && (f[len - 1] == ' ' || f[len - 1] == '\t'))
        f[--len] = '\0';
    if (len >= 2 && f[0] == '"' && f[len - 1] == '"') {
        f[len - 1] = '\0';
        f++;
    }
    return f;
}

/* Split line at commas in place; returns the field count (fields[] gets at most cap). */
static int
split_fields(char *line, char **fields, int cap)
{
    int nf = 0;
    char *p = line;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (nf < cap)
            fields[nf] = trim_field(p);
        nf++;
        if (!comma)
            break;
        p = comma + 1;
    }
    return nf;
}

/*
 * Strict decimal parse: the whole field must be a decimal number. strtod
 * also reads hex ("0x1p3"), "inf" and "nan", which no price file means:
 * those are refused, -2 for a non-finite value (spelled, or beyond a
 * double's range), -1 for anything else that is not a number.
 */
static int
parse_number(const char *f, double *out)
{
    if (*f == '\0')
        return -1;
    char *end;
    errno = 0;
    double v = strtod(f, &end);
    if (end == f || *end != '\0')
        return -1;
    if (!isfinite(v))
        return -2;
    if (f[strspn(f, "0123456789+-.eE")] != '\0')
        return -1;
    *out = v;
    return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's days_from_civil). */
static long
days_from_civil(long y, long m, long d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    long yoe = y - era * 400;
    long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int
read_digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return -1;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

/*
 * "YYYY-MM-DD", or "YYYY-MM-DD[ T]HH:MM[:SS[.fff]]" with an optional zone:
 * "Z", "±HH:MM", "±HHMM" or "±HH". The result is UTC: a local time minus
 * its offset; a time without a zone is read as UTC.
 */
static int
parse_iso8601(const char *f, double *out)
{
    const char *p = f;
    int y, mo, d, h = 0, mi = 0, sec = 0, oh = 0, om = 0, sign = 0;
    double frac = 0.0;
    if (read_digits(&p, 4, &y) || *p++ != '-' || read_digits(&p, 2, &mo) || *p++ != '-' ||
        read_digits(&p, 2, &d))
        return -1;
    if (*p == ' ' || *p == 'T') {
        p++;
        if (read_digits(&p, 2, &h) || *p++ != ':' || read_digits(&p, 2, &mi))
            return -1;
        if (*p == ':') {
            p++;
            if (read_digits(&p, 2, &sec))
                return -1;
            if (*p == '.') {
                double scale = 0.1;
                if (!isdigit((unsigned char)*++p))
                    return -1;
                for (; isdigit((unsigned char)*p); p++, scale /= 10.0)
                    frac += (*p - '0') * scale;
            }
        }
        if (*p == 'Z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            sign = *p++ == '+' ? 1 : -1;
            if (read_digits(&p, 2, &oh))
                return -1;
            if (*p == ':')
                p++;
            if (isdigit((unsigned char)*p) && read_digits(&p, 2, &om))
                return -1;
            if (oh > 23 || om > 59)
                return -1;
        }
    }
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -1;
    *out = (double)days_from_civil(y, mo, d) * 86400.0 + h * 3600.0 + mi * 60.0 + sec + frac -
           sign * (oh * 3600.0 + om * 60.0);
    return 0;
}

/* Whether a time field is ISO-8601 text rather than a number of seconds. */
static int
is_iso_time(const char *f)
{
    return strlen(f) >= 10 && f[4] == '-';
}

static int
parse_time(const char *f, double *out)
{
    if (is_iso_time(f))
        return parse_iso8601(f, out);
    return parse_number(f, out) == 0 ? 0 : -1;
}

/*
 * Unix seconds stay below 1e11 until the year 5138: a larger number is a
 * count of smaller units, which would make the bars per year (and the hour
 * and weekday features) wrong by a factor of a thousand or more. The unit
 * the time field f (read as t) most likely is, or NULL for seconds.
 */
static const char *
time_unit_guess(const char *f, double t)
{
    double a = fabs(t);
    if (is_iso_time(f) || a < 1e11)
        return NULL;
    return a < 1e14 ? "milliseconds" : a < 1e17 ? "microseconds" : "nanoseconds";
}

/*
 * Bars per year from the timestamps themselves: the bars present per year
 * of data, (n − 1) intervals over the span in years of 365.2425 days. A
 * market's hours, weekends and holidays are in the count as they are in the
 * file, so a 24-hour market and an exchange-hours one both come out right
 * without a calendar. Without a time column (or a span) the daily 252;
 * data.bars_per_year overrides either.
 */
static double
infer_bars_per_year(const double *t, int n)
{
    const double year = 365.2425 * 86400.0;
    if (!t || n < 2 || !(t[n - 1] > t[0]))
        return 252.0;
    return (double)(n - 1) / ((t[n - 1] - t[0]) / year);
}

/* 1-bar log return of bar t (0 for the first bar, which has no predecessor). */
static double
close_return(const fox_series *s, int t)
{
    return t > 0 ? log((double)s->close[t] / (double)s->close[t - 1]) : 0.0;
}

/* --- expanding median: a max-heap of the lower half and a min-heap of the upper half. */

typedef struct {
    double *lo, *hi; /* lo: max-heap, hi: min-heap */
    int nlo, nhi;
} median_heap;

static void
heap_push(double *h, int *n, double v, int maxheap)
{
    int i = (*n)++;
    h[i] = v;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (maxheap ? h[p] >= h[i] : h[p] <= h[i])
            break;
        double tmp = h[p];
        h[p] = h[i];
        h[i] = tmp;
        i = p;
    }
}

static double
heap_pop(double *h, int *n, int maxheap)
{
    double top = h[0];
    h[0] = h[--(*n)];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && (maxheap ? h[l] > h[m] : h[l] < h[m]))
            m = l;
        if (r < *n && (maxheap ? h[r] > h[m] : h[r] < h[m]))
            m = r;
        if (m == i)
            break;
        double tmp = h[m];
        h[m] = h[i];
        h[i] = tmp;
        i = m;
    }
    return top;
}

static void
median_add(median_heap *m, double v)
{
    if (m->nlo == 0 || v <= m->lo[0])
        heap_push(m->lo, &m->nlo, v, 1);
    else
        heap_push(m->hi, &m->nhi, v, 0);
    if (m->nlo > m->nhi + 1)
        heap_push(m->hi, &m->nhi, heap_pop(m->lo, &m->nlo, 1), 0);
    else if (m->nhi > m->nlo)
        heap_push(m->lo, &m->nlo, heap_pop(m->hi, &m->nhi, 0), 1);
}

static double
median_get(const median_heap *m)
{
    if (m->nlo > m->nhi)
        return m->lo[0];
    return 0.5 * (m->lo[0] + m->hi[0]);
}

/*
 * Causal regime proxy for real data, from bars ≤ t only: volatile when the
 * trailing 64-bar return volatility exceeds the median of all such values so
 * far, rising when the trailing 32-bar log return is ≥ 0. Labels:
 * 0 calm-rising, 1 calm-falling, 2 volatile-rising, 3 volatile-falling.
 * These are not the synthetic labels (trend, mean-reversion, high-vol,
 * quiet): they only bucket evaluation reports.
 */
static int
regime_proxy(fox_series *s)
{
    int n = s->n;
    median_heap m = {malloc((size_t)n * sizeof(double)), malloc((size_t)n * sizeof(double)), 0, 0};
    if (!m.lo || !m.hi) {
        free(m.lo);
        free(m.hi);
        return FOX_ENOMEM;
    }
    roll vol = {64, 0, 0.0, 0.0};
    for (int t = 0; t < n; t++) {
        roll_push(&vol, close_return(s, t), t >= 64 ? close_return(s, t - 64) : 0.0);
        double v = roll_std(&vol);
        median_add(&m, v);
        int volatile_ = v > median_get(&m);
        int back = t >= 32 ? t - 32 : 0;
        int falling = s->close[t] < s->close[back];
        s->regime[t] = (int8_t)(2 * volatile_ + falling);
    }
    free(m.lo);
    free(m.hi);
    return FOX_OK;
}

typedef struct {
    const char *path;
    char *err;
    size_t errlen;
} csv_ctx;

static int csv_fail(const csv_ctx *c, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
csv_fail(const csv_ctx *c, int line, const char *fmt, ...)
{
    if (c->err && c->errlen > 0) {
        int k = snprintf(c->err, c->errlen, "%s:%d: ", c->path, line);
        if (k >= 0 && (size_t)k < c->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return FOX_EFORMAT;
}

static int
read_whole_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO must not hang; fstat then refuses it (and devices). */
    struct stat sb;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *fp = NULL;
    if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        close(fd);
        set_err(err, errlen, "%s: not a regular file", path);
        return FOX_EIO;
    }
    if (fd >= 0 && !(fp = fdopen(fd, "rb")))
        close(fd);
    if (!fp) {
        int e = errno;
        set_err(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return e == ENOENT ? FOX_ENOENT : FOX_EIO;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        return FOX_ENOMEM;
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(fp);
                return FOX_ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        set_err(err, errlen, "%s: read error", path);
        return FOX_EIO;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return FOX_OK;
}

/* Next line of the buffer, NUL-terminated in place with any '\r' removed; NULL at the end. */
static char *
next_line(char **cursor, char *end)
{
    char *p = *cursor;
    if (p >= end)
        return NULL;
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *stop = nl ? nl : end;
    *cursor = nl ? nl + 1 : end;
    *stop = '\0';
    if (stop > p && stop[-1] == '\r')
        stop[-1] = '\0';
    return p;
}

static int
is_blank(const char *l)
{
    for (; *l; l++)
        if (!isspace((unsigned char)*l))
            return 0;
    return 1;
}

#define CSV_MAX_COLS 256

/*
 * data.price_column: the header's column named price (case-insensitive)
 * becomes the close. Unless it is the close column itself, the open, high,
 * low and volume columns are left unread, since in a file of several series
 * they need not belong to the one picked.
 */
static int
pick_price_column(const csv_ctx *c, int lineno, const char *price, char **fields, int ncols,
                  int where[N_COLS], char names[N_COLS][48])
{
    int at = -1;
    for (int i = 0; i < ncols && at < 0; i++)
        if (strcasecmp(fields[i], price) == 0)
            at = i;
    if (at < 0) {
        char list[512];
        size_t len = 0;
        list[0] = '\0';
        for (int i = 0; i < ncols && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'", i ? ", " : "",
                                    fields[i]);
        return csv_fail(c, lineno, "data.price_column '%s' names no column of the header (%s)",
                        price, list);
    }
    if (at == where[COL_TIME])
        return csv_fail(c, lineno, "data.price_column '%s' names the time column", price);
    if (at == where[COL_CLOSE])
        return FOX_OK;
    for (int k = 0; k < N_COLS; k++)
        if (k != COL_TIME)
            where[k] = -1;
    where[COL_CLOSE] = at;
    snprintf(names[COL_CLOSE], sizeof names[COL_CLOSE], "%s", fields[at]);
    return FOX_OK;
}

/* The header's columns: where each kind sits (−1: absent) and its name as written. */
typedef struct csv_header {
    int ncols;
    int where[N_COLS];
    char names[N_COLS][48];
} csv_header;

/*
 * The header row (line lineno, split into fields): which column holds what,
 * the price column data.price_column names, and the columns that must come
 * together.
 */
static int
read_header(const csv_ctx *c, int lineno, char *line, char **fields, const char *price_column,
            csv_header *h)
{
    int ncols = split_fields(line, fields, CSV_MAX_COLS);
    if (ncols > CSV_MAX_COLS)
        return csv_fail(c, lineno, "%d columns, more than the %d supported", ncols, CSV_MAX_COLS);
    double probe;
    if (parse_number(fields[0], &probe) == 0 || parse_time(fields[0], &probe) == 0)
        return csv_fail(c, lineno, "no header row: first line starts with the value '%s'",
                        fields[0]);
    h->ncols = ncols;
    for (int k = 0; k < N_COLS; k++)
        h->where[k] = -1;
    for (int i = 0; i < ncols; i++) {
        int k = col_kind(fields[i]);
        if (k < 0)
            continue; /* unknown columns (adj close, symbol, …) are carried, not read */
        if (h->where[k] >= 0)
            return csv_fail(c, lineno, "duplicate %s column '%s' (fields %d and %d)",
                            col_label[k], fields[i], h->where[k] + 1, i + 1);
        h->where[k] = i;
        snprintf(h->names[k], sizeof(h->names[k]), "%s", fields[i]);
    }
    if (price_column && price_column[0]) {
        int rc = pick_price_column(c, lineno, price_column, fields, ncols, h->where, h->names);
        if (rc != FOX_OK)
            return rc;
    }
    if (h->where[COL_CLOSE] < 0)
        return csv_fail(c, lineno,
                        "missing close column (header needs 'close', or set data.price_column "
                        "to the column to read)");
    int n_ohl = (h->where[COL_OPEN] >= 0) + (h->where[COL_HIGH] >= 0) + (h->where[COL_LOW] >= 0);
    if (n_ohl != 0 && n_ohl != 3)
        return csv_fail(c, lineno,
                        "partial OHLC set: open, high and low go together (missing%s%s%s)",
                        h->where[COL_OPEN] < 0 ? " open" : "", h->where[COL_HIGH] < 0 ? " high" : "",
                        h->where[COL_LOW] < 0 ? " low" : "");
    return FOX_OK;
}

/*
 * The values of one data row (line lineno, split into fields) into v, each
 * checked on its own: a time in seconds, a decimal, finite number a float
 * holds, a positive price, a volume not below 0.
 */
static int
read_row(const csv_ctx *c, int lineno, char **fields, const csv_header *h, double v[N_COLS])
{
    for (int k = 0; k < N_COLS; k++) {
        if (h->where[k] < 0)
            continue;
        const char *f = fields[h->where[k]];
        const char *name = h->names[k];
        if (k == COL_TIME) {
            if (parse_time(f, &v[k]) != 0)
                return csv_fail(c, lineno,
                                "bad time '%s' in column '%s' (want unix seconds or "
                                "YYYY-MM-DD[THH:MM[:SS]][Z|+HH:MM])",
                                f, name);
            const char *unit = time_unit_guess(f, v[k]);
            if (unit)
                return csv_fail(c, lineno,
                                "time '%s' in column '%s' looks like %s since 1970, not "
                                "seconds: give unix seconds (data.bars_per_year and the hour "
                                "and weekday features are read from them)",
                                f, name, unit);
            continue;
        }
        int pr = parse_number(f, &v[k]);
        if (pr == -2)
            return csv_fail(c, lineno, "non-finite value '%s' (NaN/Inf) in column '%s'", f, name);
        if (pr != 0)
            return csv_fail(c, lineno, "non-numeric value '%s' in column '%s' (decimal only)", f,
                            name);
        if (k == COL_VOLUME ? v[k] < 0.0 : v[k] <= 0.0)
            return csv_fail(c, lineno, "%s %s '%s' in column '%s'",
                            k == COL_VOLUME ? "negative" : "non-positive",
                            k == COL_VOLUME ? "volume" : "price", f, name);
        /* Bars are kept as floats: a price must stay finite and non-zero there, or its
         * log returns become inf or NaN and every Sharpe after them NaN. */
        if (v[k] > FLT_MAX || (k != COL_VOLUME && v[k] < FLT_MIN))
            return csv_fail(c, lineno,
                            "%s '%s' in column '%s' is outside what a float holds [%g, %g]",
                            k == COL_VOLUME ? "volume" : "price", f, name,
                            k == COL_VOLUME ? 0.0 : (double)FLT_MIN, (double)FLT_MAX);
    }
    return FOX_OK;
}

/*
 * Row n of the series from the values v of line lineno, with the checks
 * that span columns or rows: a bar's open and close inside its range, times
 * that increase (prev_time_line: the line of the last time, for the error).
 */
static int
store_row(const csv_ctx *c, int lineno, char **fields, const csv_header *h, const double v[N_COLS],
          fox_series *s, int n, int *prev_time_line)
{
    if (s->open) {
        double o = v[COL_OPEN], hi = v[COL_HIGH], l = v[COL_LOW], cl = v[COL_CLOSE];
        if (hi < l)
            return csv_fail(c, lineno, "high %g < low %g", hi, l);
        if (o < l || o > hi || cl < l || cl > hi) {
            int bad_open = o < l || o > hi;
            return csv_fail(c, lineno, "%s %g outside [low %g, high %g]",
                            bad_open ? "open" : "close", bad_open ? o : cl, l, hi);
        }
        s->open[n] = (float)o;
        s->high[n] = (float)hi;
        s->low[n] = (float)l;
    }
    if (s->time) {
        if (n > 0 && !(v[COL_TIME] > s->time[n - 1]))
            return csv_fail(c, lineno, "non-increasing time '%s' in column '%s' (not after line %d)",
                            fields[h->where[COL_TIME]], h->names[COL_TIME], *prev_time_line);
        s->time[n] = v[COL_TIME];
        *prev_time_line = lineno;
    }
    s->close[n] = (float)v[COL_CLOSE];
    if (s->volume)
        s->volume[n] = (float)v[COL_VOLUME];
    return FOX_OK;
}

int
fox_series_load_csv(fox_series *s, const char *path, const char *price_column, int min_rows,
                    char *err, size_t errlen)
{
    if (!s)
        return FOX_EINVAL;
    memset(s, 0, sizeof(*s));
    if (!path) {
        set_err(err, errlen, "no CSV path given");
        return FOX_EINVAL;
    }
    if (err && errlen)
        err[0] = '\0';

    char *buf = NULL;
    size_t len = 0;
    int rc = read_whole_file(path, &buf, &len, err, errlen);
    if (rc != FOX_OK)
        return rc;
    csv_ctx c = {path, err, errlen};
    char *cursor = buf, *end = buf + len;
    char **fields = NULL;
    int lineno = 0;

    if (memchr(buf, '\0', len)) {
        /* A NUL would silently cut a line short: name the line it sits on. */
        int l = 1;
        for (const char *q = buf; *q; q++)
            l += *q == '\n';
        rc = csv_fail(&c, l, "NUL byte: not a text CSV file");
        goto out;
    }
    /* A UTF-8 byte-order mark, as spreadsheet exports write, is not part of the first name. */
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
        cursor += 3;

    /* Header: the first non-blank line. */
    char *line;
    do {
        line = next_line(&cursor, end);
        lineno++;
    } while (line && is_blank(line));
    if (!line) {
        rc = csv_fail(&c, 1, "empty file: expected a header row naming the columns");
        goto out;
    }
    fields = malloc(CSV_MAX_COLS * sizeof(char *));
    if (!fields) {
        rc = FOX_ENOMEM;
        goto out;
    }
    int header_line = lineno;
    csv_header h;
    if ((rc = read_header(&c, lineno, line, fields, price_column, &h)) != FOX_OK)
        goto out;

    /* Every data row is one line, so the line count bounds the row count. */
    int cap = 1;
    for (const char *q = cursor; q < end; q++)
        cap += *q == '\n';
    if (cap > 0x7ffffff0) {
        rc = csv_fail(&c, header_line, "too many lines");
        goto out;
    }
    rc = fox__series_alloc(s, cap, h.where[COL_TIME] >= 0, h.where[COL_OPEN] >= 0,
                           h.where[COL_VOLUME] >= 0);
    if (rc != FOX_OK)
        goto out;

    int n = 0, prev_time_line = 0;
    while ((line = next_line(&cursor, end)) != NULL) {
        lineno++;
        if (is_blank(line))
            continue;
        int nf = split_fields(line, fields, CSV_MAX_COLS);
        if (nf != h.ncols) {
            rc = csv_fail(&c, lineno, "expected %d fields as in the header, found %d", h.ncols,
                          nf);
            goto fail;
        }
        double v[N_COLS] = {0};
        if ((rc = read_row(&c, lineno, fields, &h, v)) != FOX_OK ||
            (rc = store_row(&c, lineno, fields, &h, v, s, n, &prev_time_line)) != FOX_OK)
            goto fail;
        n++;
    }
    int need = min_rows > 1 ? min_rows : 1;
    if (n < need) {
        rc = csv_fail(&c, lineno, "%d data rows, fewer than the %d required", n, need);
        goto fail;
    }
    s->n = n;
    s->bars_per_year = infer_bars_per_year(s->time, n);
    s->bars_per_year_from = s->time && s->time[n - 1] > s->time[0] ? "inferred from the timestamps"
                                                                 : "no times: daily bars";
    snprintf(s->source, sizeof(s->source), "%s", path);
    rc = regime_proxy(s);
    if (rc != FOX_OK)
        goto fail;
    goto out;

fail:
    fox_series_fini(s);
out:
    free(fields);
    free(buf);
    return rc;
}
