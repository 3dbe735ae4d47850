/*
 * data.c — bar series (seeded synthetic generator, CSV loader), causal
 * features with train-range normalization, and anchored walk-forward folds.
 *
 * What it does not do: no environment stepping, no fills or costs, no
 * threads, no device memory. Every array here is host memory owned by the
 * struct it hangs from; the engine copies what it needs to the device.
 *
 * Functions that fill a struct overwrite it without freeing what it held:
 * call the matching fini first when reusing one. On failure the struct is
 * left zeroed, so fini on it is always safe.
 */
#include "gpu/data.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "gpu/rng.h"

/* ---------------------------------------------------------------- helpers */

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

void
fox_series_fini(fox_series *s)
{
    if (!s)
        return;
    free(s->time);
    free(s->open);
    free(s->high);
    free(s->low);
    free(s->close);
    free(s->volume);
    free(s->regime);
    memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------ synthetic series */

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
enum { REG_TREND = 0, REG_MEANREV = 1, REG_HIGHVOL = 2, REG_QUIET = 3, N_REGIMES = 4 };

static const struct regime_param {
    double dwell;  /* mean bars spent in the regime (geometric) */
    double phi;    /* AR(1) coefficient of the return deviation */
    double sigma;  /* innovation scale, × SYN_SIGMA */
    double drift;  /* |μ| per bar, × SYN_SIGMA; sign drawn at entry */
    double volume; /* volume level, × SYN_VOLUME */
} syn_regime[N_REGIMES] = {
    [REG_TREND] = {300.0, +0.25, 1.0, 0.20, 1.0},
    [REG_MEANREV] = {300.0, -0.25, 1.0, 0.0, 1.0},
    [REG_HIGHVOL] = {150.0, +0.05, 2.5, 0.0, 2.5},
    [REG_QUIET] = {250.0, +0.10, 0.4, 0.0, 0.6},
};

#define SYN_SIGMA       0.008 /* base σ per hourly bar */
#define SYN_NU          4.0   /* Student-t degrees of freedom */
#define SYN_TAIL_CLIP   8.0   /* innovations clipped to ±8 unit-variance σ */
#define SYN_PRICE0      100.0
#define SYN_VOLUME      10000.0
#define SYN_T0          1.7e9
#define SYN_BAR_SECONDS 3600.0

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

static int
series_alloc(fox_series *s, int n, int with_time, int with_ohl, int with_volume)
{
    size_t nz = (size_t)n;
    s->n = n;
    s->close = malloc(nz * sizeof(float));
    s->regime = malloc(nz * sizeof(int8_t));
    if (with_time)
        s->time = malloc(nz * sizeof(double));
    if (with_ohl) {
        s->open = malloc(nz * sizeof(float));
        s->high = malloc(nz * sizeof(float));
        s->low = malloc(nz * sizeof(float));
    }
    if (with_volume)
        s->volume = malloc(nz * sizeof(float));
    if (!s->close || !s->regime || (with_time && !s->time) ||
        (with_ohl && (!s->open || !s->high || !s->low)) || (with_volume && !s->volume)) {
        fox_series_fini(s);
        return FOX_ENOMEM;
    }
    return FOX_OK;
}

int
fox_series_synthetic(fox_series *s, int n, uint64_t seed)
{
    if (!s)
        return FOX_EINVAL;
    memset(s, 0, sizeof(*s));
    if (n < 1000)
        return FOX_EINVAL;
    int rc = series_alloc(s, n, 1, 1, 1);
    if (rc != FOX_OK)
        return rc;

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
        double open = i > 0 ? prev_close * exp(sigma / 10.0 * fox_rng_normal(&rng)) : close;
        double hi = fmax(open, close) * exp(0.5 * sigma * fabs(fox_rng_normal(&rng)));
        double lo = fmin(open, close) * exp(-0.5 * sigma * fabs(fox_rng_normal(&rng)));

        s->time[i] = SYN_T0 + SYN_BAR_SECONDS * (double)i;
        s->open[i] = (float)open;
        s->close[i] = (float)close;
        /* Rounding to float is monotone, but clamp anyway so the invariant holds bit for bit. */
        s->high[i] = fmaxf((float)hi, fmaxf(s->open[i], s->close[i]));
        s->low[i] = fminf((float)lo, fminf(s->open[i], s->close[i]));
        s->volume[i] = (float)(SYN_VOLUME * p->volume * exp(0.35 * fox_rng_normal(&rng)));
        s->regime[i] = (int8_t)reg;
        prev_close = close;
    }
    s->bars_per_year = 8760.0;
    snprintf(s->source, sizeof(s->source), "synthetic(seed=%llu)", (unsigned long long)seed);
    return FOX_OK;
}

/* ------------------------------------------------------------ CSV loader */

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

/* Strict decimal parse: the whole field must be a number (finite or not). */
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

/* "YYYY-MM-DD[ T]HH:MM[:SS][Z]" or "YYYY-MM-DD", read as UTC. */
static int
parse_iso8601(const char *f, double *out)
{
    const char *p = f;
    int y, mo, d, h = 0, mi = 0, sec = 0;
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
        }
        if (*p == 'Z')
            p++;
    }
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -1;
    *out = (double)days_from_civil(y, mo, d) * 86400.0 + h * 3600.0 + mi * 60.0 + sec;
    return 0;
}

static int
parse_time(const char *f, double *out)
{
    if (strlen(f) >= 10 && f[4] == '-')
        return parse_iso8601(f, out);
    if (parse_number(f, out) != 0 || !isfinite(*out))
        return -1;
    return 0;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 0 = Sunday … 6 = Saturday, UTC; 1970-01-01 was a Thursday. */
static int
weekday_utc(double t)
{
    long day = (long)floor(t / 86400.0);
    return (int)(((day + 4) % 7 + 7) % 7);
}

/*
 * Bars per year from the median spacing. Daily or coarser (≥ 20 h): 252
 * trading days. Intraday on weekdays only with overnight gaps (≥ 8 h): a
 * 6.5-hour exchange session, 252 days. Anything else trades around the
 * clock: seconds per year over the spacing. Deliberately simple: half-days,
 * holidays and other session lengths are not modelled, and the config's
 * bars_per_year overrides this when set.
 */
static double
infer_bars_per_year(const double *t, int n)
{
    if (!t || n < 2)
        return 252.0;
    double *dt = malloc((size_t)(n - 1) * sizeof(double));
    if (!dt)
        return 252.0;
    int weekdays_only = 1, overnight = 0;
    for (int i = 0; i + 1 < n; i++) {
        dt[i] = t[i + 1] - t[i];
        if (dt[i] >= 8.0 * 3600.0)
            overnight = 1;
    }
    for (int i = 0; i < n; i++) {
        int wd = weekday_utc(t[i]);
        if (wd == 0 || wd == 6)
            weekdays_only = 0;
    }
    qsort(dt, (size_t)(n - 1), sizeof(double), cmp_double);
    double med = dt[(n - 1) / 2];
    free(dt);
    if (med >= 20.0 * 3600.0)
        return 252.0;
    if (weekdays_only && overnight)
        return 252.0 * (6.5 * 3600.0 / med);
    return 365.0 * 24.0 * 3600.0 / med;
}

/*
 * Trailing-window sums updated in O(1) per bar, in double. The window holds
 * the last w values pushed; before w pushes it holds all of them. Each sum
 * at bar t depends only on values pushed up to t, in a fixed order, so the
 * features of bar t are bit-identical whatever follows it.
 */
typedef struct {
    int w, count;
    double sum, sum2;
} roll;

static void
roll_push(roll *r, double x, double old)
{
    r->sum += x;
    r->sum2 += x * x;
    if (r->count == r->w) {
        r->sum -= old;
        r->sum2 -= old * old;
    } else {
        r->count++;
    }
}

static double
roll_mean(const roll *r)
{
    return r->count ? r->sum / r->count : 0.0;
}

static double
roll_std(const roll *r)
{
    if (r->count < 2)
        return 0.0;
    double m = r->sum / r->count;
    double var = r->sum2 / r->count - m * m;
    return var > 0.0 ? sqrt(var) : 0.0;
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
    FILE *fp = fopen(path, "rb");
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

int
fox_series_load_csv(fox_series *s, const char *path, int min_rows, char *err, size_t errlen)
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
    int ncols = split_fields(line, fields, CSV_MAX_COLS);
    if (ncols > CSV_MAX_COLS) {
        rc = csv_fail(&c, lineno, "%d columns, more than the %d supported", ncols, CSV_MAX_COLS);
        goto out;
    }
    double probe;
    if (parse_number(fields[0], &probe) == 0 || parse_time(fields[0], &probe) == 0) {
        rc =
            csv_fail(&c, lineno, "no header row: first line starts with the value '%s'", fields[0]);
        goto out;
    }
    int where[N_COLS];
    char names[N_COLS][48];
    for (int k = 0; k < N_COLS; k++)
        where[k] = -1;
    for (int i = 0; i < ncols; i++) {
        int k = col_kind(fields[i]);
        if (k < 0)
            continue; /* unknown columns (adj close, symbol, …) are carried, not read */
        if (where[k] >= 0) {
            rc = csv_fail(&c, lineno, "duplicate %s column '%s' (fields %d and %d)", col_label[k],
                          fields[i], where[k] + 1, i + 1);
            goto out;
        }
        where[k] = i;
        snprintf(names[k], sizeof(names[k]), "%s", fields[i]);
    }
    if (where[COL_CLOSE] < 0) {
        rc = csv_fail(&c, lineno, "missing close column (header needs 'close')");
        goto out;
    }
    int n_ohl = (where[COL_OPEN] >= 0) + (where[COL_HIGH] >= 0) + (where[COL_LOW] >= 0);
    if (n_ohl != 0 && n_ohl != 3) {
        rc =
            csv_fail(&c, lineno, "partial OHLC set: open, high and low go together (missing%s%s%s)",
                     where[COL_OPEN] < 0 ? " open" : "", where[COL_HIGH] < 0 ? " high" : "",
                     where[COL_LOW] < 0 ? " low" : "");
        goto out;
    }
    int has_time = where[COL_TIME] >= 0, has_ohl = n_ohl == 3, has_vol = where[COL_VOLUME] >= 0;

    /* Every data row is one line, so the line count bounds the row count. */
    int cap = 1;
    for (const char *q = cursor; q < end; q++)
        cap += *q == '\n';
    if (cap > 0x7ffffff0) {
        rc = csv_fail(&c, header_line, "too many lines");
        goto out;
    }
    rc = series_alloc(s, cap, has_time, has_ohl, has_vol);
    if (rc != FOX_OK)
        goto out;

    int n = 0, prev_time_line = 0;
    while ((line = next_line(&cursor, end)) != NULL) {
        lineno++;
        if (is_blank(line))
            continue;
        int nf = split_fields(line, fields, CSV_MAX_COLS);
        if (nf != ncols) {
            rc = csv_fail(&c, lineno, "expected %d fields as in the header, found %d", ncols, nf);
            goto fail;
        }
        double v[N_COLS] = {0};
        for (int k = 0; k < N_COLS; k++) {
            if (where[k] < 0)
                continue;
            const char *f = fields[where[k]];
            if (k == COL_TIME) {
                if (parse_time(f, &v[k]) != 0) {
                    rc = csv_fail(&c, lineno,
                                  "bad time '%s' in column '%s' (want unix seconds or "
                                  "YYYY-MM-DD[ HH:MM[:SS]])",
                                  f, names[k]);
                    goto fail;
                }
                continue;
            }
            if (parse_number(f, &v[k]) != 0) {
                rc = csv_fail(&c, lineno, "non-numeric value '%s' in column '%s'", f, names[k]);
                goto fail;
            }
            if (!isfinite(v[k])) {
                rc = csv_fail(&c, lineno, "non-finite value '%s' (NaN/Inf) in column '%s'", f,
                              names[k]);
                goto fail;
            }
            if (k == COL_VOLUME ? v[k] < 0.0 : v[k] <= 0.0) {
                rc = csv_fail(&c, lineno, "%s %s '%s' in column '%s'",
                              k == COL_VOLUME ? "negative" : "non-positive",
                              k == COL_VOLUME ? "volume" : "price", f, names[k]);
                goto fail;
            }
        }
        if (has_ohl) {
            double o = v[COL_OPEN], h = v[COL_HIGH], l = v[COL_LOW], cl = v[COL_CLOSE];
            if (h < l) {
                rc = csv_fail(&c, lineno, "high %g < low %g", h, l);
                goto fail;
            }
            if (o < l || o > h || cl < l || cl > h) {
                int bad_open = o < l || o > h;
                rc = csv_fail(&c, lineno, "%s %g outside [low %g, high %g]",
                              bad_open ? "open" : "close", bad_open ? o : cl, l, h);
                goto fail;
            }
            s->open[n] = (float)o;
            s->high[n] = (float)h;
            s->low[n] = (float)l;
        }
        if (has_time) {
            if (n > 0 && !(v[COL_TIME] > s->time[n - 1])) {
                rc = csv_fail(&c, lineno,
                              "non-increasing time '%s' in column '%s' (not after line %d)",
                              fields[where[COL_TIME]], names[COL_TIME], prev_time_line);
                goto fail;
            }
            s->time[n] = v[COL_TIME];
            prev_time_line = lineno;
        }
        s->close[n] = (float)v[COL_CLOSE];
        if (has_vol)
            s->volume[n] = (float)v[COL_VOLUME];
        n++;
    }
    int need = min_rows > 1 ? min_rows : 1;
    if (n < need) {
        rc = csv_fail(&c, lineno, "%d data rows, fewer than the %d required", n, need);
        goto fail;
    }
    s->n = n;
    s->bars_per_year = infer_bars_per_year(s->time, n);
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

/* -------------------------------------------------------------- features */

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
    for (int t = 0; t < f->n_bars; t++) {
        for (int j = 0; j < nf; j++) {
            size_t i = (size_t)t * nf + j;
            float z = (f->raw[i] - f->mean[j]) / f->std[j];
            f->norm[i] = fminf(fmaxf(z, -FOX_FEATURE_CLIP), FOX_FEATURE_CLIP);
        }
    }
}

/* ----------------------------------------------------------------- folds */

int
fox_fold_split(int n, int warmup, int n_folds, int k, fox_fold *out)
{
    if (!out || n_folds < 1 || k < 0 || k >= n_folds || warmup < 0 || n <= warmup)
        return FOX_EINVAL;
    int usable = n - warmup;
    int len = usable / (n_folds + 1);
    if (len < 100)
        return FOX_EINVAL;
    /*
     * Block b is [warmup + b·len, warmup + (b+1)·len); the remainder, fewer
     * than K+1 bars, joins the last block so that no bar is dropped.
     */
    int eval_begin = warmup + (k + 1) * len;
    int eval_end = k + 1 == n_folds ? n : eval_begin + len;
    int mid = eval_begin + len / 2;
    out->train_begin = warmup;
    out->train_end = eval_begin;
    out->val_begin = eval_begin;
    out->val_end = mid;
    out->test_begin = mid;
    out->test_end = eval_end;
    return FOX_OK;
}
