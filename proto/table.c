/* table.c — the per-fold result table and the flagged-slots line. See table.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto/table.h"
#include "common/member_keys.h"

/*
 * The last lines of a block's note: where every figure is explained, as
 * installed (the build names the directory) and in the source, since a
 * table may be read on a machine with either.
 */
#define RESULTS_DOC                                                                               \
    "      Every figure is explained in " FOX_DOCDIR "/results.md\n"                             \
    "      (docs/results.md in the source).\n"

/*
 * The rows of a fold's block: the trained policy, then the baselines in the
 * order a reader compares against them. The policy's figures are the fold
 * object's own test_* keys; a baseline's are its object in "baselines". The
 * rule row is a known-edge generator's own simple rule; the oracle row a
 * generator's truth.
 */
static const struct row {
    const char *label, *baseline;
} rows[] = {
    {"policy", NULL},    {"trend", "trend"},   {"rule", "rule"},     {"buy & hold", "buy_hold"},
    {"flat", "flat"},    {"random", "random"}, {"oracle", "oracle"},
};
#define N_ROWS (int)(sizeof rows / sizeof rows[0])
/* The rows the verdict compares the policy with, in the order it prints them. */
enum { ROW_POLICY = 0, ROW_TREND = 1, ROW_RULE = 2, ROW_BUY_HOLD = 3, ROW_FLAT = 4 };
static const int verdict_rows[] = {ROW_FLAT, ROW_BUY_HOLD, ROW_TREND, ROW_RULE};

/*
 * The figures of a row, in the order of the columns: net Sharpe, its SE,
 * gross, turnover, DD, then (baselines only) the policy's net Sharpe minus
 * the row's on the same bars and that difference's SE (paired).
 */
enum { FIG_SHARPE, FIG_SE, FIG_GROSS, FIG_TURNOVER, FIG_DRAWDOWN, FIG_DIFF, FIG_DIFF_SE, N_FIGS };
static const char *const policy_keys[N_FIGS] = {"test_sharpe",       "test_sharpe_se",
                                                "test_sharpe_gross", "test_turnover",
                                                "test_max_drawdown", NULL,
                                                NULL};
static const char *const baseline_keys[N_FIGS] = {"sharpe",       "sharpe_se",   "sharpe_gross",
                                                  "turnover",     "max_drawdown", "policy_diff",
                                                  "policy_diff_se"};

/* A number of obj, or NaN when it is missing, null or not finite. */
static double
num(const cJSON *obj, const char *key)
{
    const cJSON *v = key ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : NAN;
}

/* Item i of array a, or NaN when it is missing or not a number. */
static double
item(const cJSON *a, int i)
{
    const cJSON *v = cJSON_GetArrayItem(a, i);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The figures of row r of fold object f into fig; 0 when the fold has no such row. */
static int
row_figures(const cJSON *f, const struct row *r, double fig[N_FIGS])
{
    const cJSON *obj = f;
    const char *const *keys = policy_keys;
    if (r->baseline) {
        obj = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "baselines"),
                                               r->baseline);
        keys = baseline_keys;
        if (!cJSON_IsObject(obj)) {
            for (int i = 0; i < N_FIGS; i++)
                fig[i] = NAN;
            return 0;
        }
    }
    for (int i = 0; i < N_FIGS; i++)
        fig[i] = num(obj, keys[i]);
    return 1;
}

/*
 * What a paired difference says: the policy beat the row when it is ahead
 * by more than the difference's standard error, lost when it is behind by
 * more, and is within one SE otherwise (the data cannot tell them apart).
 */
static const char *
paired_word(double diff, double se)
{
    if (isnan(diff) || isnan(se))
        return "n/a";
    return diff > se ? "beat" : diff < -se ? "lost" : "within SE";
}

/* One number right-aligned in width, "n/a" for NaN; pct prints a fraction as a percentage. */
static void
cell(FILE *out, double v, int width, int decimals, int pct)
{
    if (isnan(v))
        fprintf(out, "%*s", width, "n/a");
    else if (pct)
        fprintf(out, "%*.*f%%", width - 1, decimals, 100.0 * v);
    else
        fprintf(out, "%*.*f", width, decimals, v);
}

static void
header(FILE *out, const char *first)
{
    fprintf(out, "  %-14s %10s %8s %8s %9s %8s   %s\n", first, "net Sharpe", "± SE", "gross",
            "turnover", "max DD", "policy - row ± SE (paired)");
}

static void
figures_line(FILE *out, const char *label, const double fig[N_FIGS])
{
    fprintf(out, "  %-14s ", label);
    cell(out, fig[FIG_SHARPE], 10, 3, 0);
    fputs(isnan(fig[FIG_SE]) ? "    " : "  ± ", out);
    cell(out, fig[FIG_SE], 6, 3, 0);
    fputc(' ', out);
    cell(out, fig[FIG_GROSS], 8, 3, 0);
    fputc(' ', out);
    cell(out, fig[FIG_TURNOVER], 9, 4, 0);
    fputc(' ', out);
    cell(out, fig[FIG_DRAWDOWN], 8, 1, 1);
    if (!isnan(fig[FIG_DIFF])) {
        fprintf(out, "   %+7.3f ± ", fig[FIG_DIFF]);
        cell(out, fig[FIG_DIFF_SE], 5, 3, 0);
        fprintf(out, " %s", paired_word(fig[FIG_DIFF], fig[FIG_DIFF_SE]));
    }
    fputc('\n', out);
}

/* The row's label: the trend rule names its lookback. */
static void
row_label(char *buf, size_t len, const cJSON *f, const struct row *r)
{
    double k = num(f, "trend_k");
    if (r->baseline && !strcmp(r->baseline, "trend") && !isnan(k))
        snprintf(buf, len, "trend k=%.0f", k);
    else
        snprintf(buf, len, "%s", r->label);
}

/* v with the given decimals into buf, or "n/a" (for text inside a sentence). */
static const char *
text(char buf[32], double v, int decimals)
{
    if (isnan(v))
        return "n/a";
    snprintf(buf, 32, "%.*f", decimals, v);
    return buf;
}

/* The rows of a fold object under the columns' header: the policy, then every baseline it has. */
static void
rows_block(FILE *out, const cJSON *f)
{
    header(out, "");
    for (int i = 0; i < N_ROWS; i++) {
        double fig[N_FIGS];
        char label[32];
        if (!row_figures(f, &rows[i], fig) && rows[i].baseline &&
            (!strcmp(rows[i].baseline, "oracle") || !strcmp(rows[i].baseline, "rule")))
            continue; /* real data has no oracle and no rule: no row rather than one of n/a */
        row_label(label, sizeof label, f, &rows[i]);
        figures_line(out, label, fig);
    }
}

/* Under a halted fold's first line: "  halted: <kind> at step N"; its figures are those of the
 * epochs it closed, and the means leave it out. */
static void
halted_mark(FILE *out, const cJSON *fold)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(fold, "halted");
    if (!cJSON_IsObject(h))
        return;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(h, "kind");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(h, "step");
    fprintf(out, "  halted: %s at step %.0f; the figures are those of the epochs it closed\n",
            cJSON_IsString(kind) ? kind->valuestring : "?",
            cJSON_IsNumber(step) ? step->valuedouble : -1.0);
}

/* The epochs of a fold, counted from 1 as people count them, and the rule's score of the choice. */
void
fox_table_choice(FILE *out, const cJSON *f)
{
    char a[32], b[32], c[32];
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(f, "select");
    double window = num(f, "select_window");
    double epochs = num(f, "epochs");
    double best = num(f, "best_epoch") + 1;
    if (epochs == 0) {
        fputs("no epoch closed", out);
        return;
    }
    fprintf(out, "epoch %s of %s chosen by ", text(a, best, 0), text(b, epochs, 0));
    /* The window in use: epochs before a full window are scored on the ones that exist. */
    if (!isnan(best) && best < window)
        window = best;
    if (cJSON_IsString(sel) && !strcmp(sel->valuestring, "smoothed") && window > 1)
        fprintf(out, "smoothed (mean val Sharpe %s of epochs %s-%s)",
                text(a, num(f, "select_score"), 3), text(b, best + 1 - window, 0),
                text(c, best, 0));
    else if (cJSON_IsString(sel) && !strcmp(sel->valuestring, "smoothed"))
        fprintf(out, "smoothed (val Sharpe %s of that epoch alone)",
                text(a, num(f, "select_score"), 3));
    else
        fprintf(out, "%s (val Sharpe %s)", cJSON_IsString(sel) ? sel->valuestring : "best",
                text(a, num(f, "select_score"), 3));
}

/* A member's values of the keys the members hold apart, " (train.lr=0.001)"; none: nothing. */
static void
member_values(FILE *out, const cJSON *member)
{
    int n = 0;
    for (int i = 0; i < FOX_MEMBER_KEYS; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(member, fox_member_key(i));
        if (cJSON_IsNumber(x))
            fprintf(out, "%s%s=%g", n++ ? " " : " (", x->string, x->valuedouble);
    }
    if (n)
        fputc(')', out);
}

/*
 * A population's line under a fold's rows (its "members" object, present
 * when engine.members > 1): the spread of the members' test Sharpe at their
 * own chosen epochs over seeds, the best and worst member (with its values
 * of the keys the members hold apart), and every member that halted with the
 * step and the slot that stopped it.
 */
static void
members_line(FILE *out, const cJSON *f)
{
    char a[32], b[32], c[32], d[32];
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(f, "members");
    if (!cJSON_IsObject(m))
        return;
    const cJSON *each = cJSON_GetObjectItemCaseSensitive(m, "each");
    double best = num(m, "best"), worst = num(m, "worst");
    fprintf(out, "  members (%s, %s training): test Sharpe %s ± %s (mean ± SE over members)",
            text(a, num(m, "n"), 0), text(b, num(m, "training"), 0), text(c, num(m, "mean"), 2),
            text(d, num(m, "se"), 2));
    if (!isnan(best)) {
        const cJSON *x = cJSON_GetArrayItem(each, (int)best);
        fprintf(out, ", best #%.0f", best);
        member_values(out, x);
        fprintf(out, " %s", text(a, num(x, "test_sharpe"), 2));
    }
    if (!isnan(worst)) {
        const cJSON *x = cJSON_GetArrayItem(each, (int)worst);
        fprintf(out, ", worst #%.0f", worst);
        member_values(out, x);
        fprintf(out, " %s", text(a, num(x, "test_sharpe"), 2));
    }
    int halted = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, each)
    {
        const cJSON *halt = cJSON_GetObjectItemCaseSensitive(x, "halt");
        const cJSON *slot = cJSON_GetObjectItemCaseSensitive(x, "halt_slot");
        if (!cJSON_IsString(halt))
            continue;
        fprintf(out, "%s#%s halted at step %s (%s)", halted++ ? ", " : "; ",
                text(a, num(x, "member"), 0), text(b, num(x, "halt_step"), 0),
                cJSON_IsString(slot) ? slot->valuestring : halt->valuestring);
    }
    /* policy.members = ensemble: the rows above are the members' decision together. */
    if (num(m, "lead") == -1.0)
        fputs("; the policy is their ensemble", out);
    fputc('\n', out);
}

static void
fold_block(FILE *out, const cJSON *f)
{
    char a[32], b[32], c[32], d[32];
    fprintf(out, "fold %s: ", text(a, num(f, "fold"), 0));
    fox_table_choice(out, f);
    fprintf(out, "; test split %s bars, P = %s", text(a, num(f, "test_bars"), 0),
            text(b, num(f, "bars_per_year"), 0));
    fputc('\n', out);
    halted_mark(out, f);
    rows_block(out, f);
    members_line(out, f);
    const cJSON *band = cJSON_GetObjectItemCaseSensitive(f, "band");
    if (cJSON_IsString(band) && !strcmp(band->valuestring, "flat"))
        fputs("  no-trade band: stays out (no band's validation net Sharpe beat its SE)\n", out);
    else if (cJSON_IsNumber(band) && band->valuedouble > 0)
        fprintf(out, "  no-trade band: %g x the cost of a change\n", band->valuedouble);
    const cJSON *rule = cJSON_GetObjectItemCaseSensitive(f, "rule");
    if (cJSON_IsString(rule))
        fprintf(out, "  rule: %s (the generator's planted edge, traded at full size)\n",
                rule->valuestring);
    fprintf(out,
            "  policy/oracle %s; policy test Sharpe at the chosen epoch %s, last %s, mean over "
            "epochs %s\n",
            text(a, num(f, "oracle_fraction"), 2), text(b, num(f, "test_sharpe"), 3),
            text(c, num(f, "test_sharpe_last"), 3), text(d, num(f, "test_sharpe_mean"), 3));
    fprintf(out, "  final loss %s, %s steps/s\n", text(a, num(f, "final_loss"), 4),
            text(b, num(f, "steps_per_sec"), 1));
}

/* Mean of each figure of a row over the folds that have it; the SE of the mean for FIG_SE. */
typedef struct row_mean {
    double sum[N_FIGS];
    int n[N_FIGS];
} row_mean;

static void
mean_add(row_mean *m, const double fig[N_FIGS])
{
    for (int i = 0; i < N_FIGS; i++)
        if (!isnan(fig[i])) {
            /* Folds' test splits do not overlap: the SE of a mean adds variances. */
            m->sum[i] += i == FIG_SE || i == FIG_DIFF_SE ? fig[i] * fig[i] : fig[i];
            m->n[i]++;
        }
}

static void
mean_get(const row_mean *m, double fig[N_FIGS])
{
    for (int i = 0; i < N_FIGS; i++)
        fig[i] = !m->n[i]             ? NAN
                 : i == FIG_SE || i == FIG_DIFF_SE ? sqrt(m->sum[i]) / m->n[i]
                               : m->sum[i] / m->n[i];
}

/*
 * A verdict line: the policy against one row, by the paired difference of
 * their net Sharpe ratios on the same bars (the mean over folds, its SE the
 * folds' SEs added in quadrature: the test splits do not overlap). "beat"
 * only when the policy is ahead by more than one SE, "lost" when behind by
 * more, "indistinguishable" otherwise.
 */
static void
verdict(FILE *out, const char *name, const double base[N_FIGS])
{
    double d = base[FIG_DIFF], se = base[FIG_DIFF_SE];
    fprintf(out, "verdict: policy vs %s: ", name);
    if (isnan(d) || isnan(se)) {
        fputs("n/a (no paired figures)\n", out);
        return;
    }
    const char *w = paired_word(d, se);
    fprintf(out, "%s (net Sharpe %+.3f ± %.3f, paired on the same bars)\n",
            !strcmp(w, "within SE") ? "indistinguishable" : w, d, se);
}

/* The verdict lines against flat, buy-and-hold, the trend rule and a generator's rule. */
static void
verdicts(FILE *out, const double fig[N_ROWS][N_FIGS], const int present[N_ROWS])
{
    static const char *const names[N_ROWS] = {[ROW_FLAT] = "flat",
                                              [ROW_BUY_HOLD] = "buy-and-hold",
                                              [ROW_TREND] = "the trend rule",
                                              [ROW_RULE] = "the generator's rule"};
    for (size_t i = 0; i < sizeof verdict_rows / sizeof verdict_rows[0]; i++)
        if (present[verdict_rows[i]])
            verdict(out, names[verdict_rows[i]], fig[verdict_rows[i]]);
}

/*
 * Why a fold stays out of the means, or NULL when it counts: a halted fold's
 * figures are those of the epochs it closed, and a fold without test bars
 * has none. Every row leaves it out alike, so the means compare like with
 * like.
 */
static const char *
excluded_why(const cJSON *f)
{
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(f, "halted")))
        return "halted";
    double bars = num(f, "test_bars"), epochs = num(f, "epochs");
    if (isnan(bars) || bars < 2)
        return "no test bars";
    if (!isnan(epochs) && epochs < 1)
        return "no epoch closed";
    return NULL;
}

/*
 * The mean block's members line: over the folds that count and carry a
 * population, the mean of the members' mean test Sharpe, its SE pooled as
 * the rows' are (the folds' SEs in quadrature over their count: the test
 * splits do not overlap). Nothing when no fold had more than one member.
 */
static void
members_mean_line(FILE *out, const row_mean *m)
{
    char a[32], b[32];
    double fig[N_FIGS];
    if (!m->n[FIG_SHARPE])
        return;
    mean_get(m, fig);
    fprintf(out,
            "  members: test Sharpe %s ± %s (the folds' mean over members, averaged; SE pooled "
            "over %d fold%s)\n",
            text(a, fig[FIG_SHARPE], 3), text(b, fig[FIG_SE], 3), m->n[FIG_SHARPE],
            m->n[FIG_SHARPE] == 1 ? "" : "s");
}

/* The members' mean and SE of fold f into m, when it has a population with a chosen epoch. */
static void
members_add(row_mean *m, const cJSON *f)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(f, "members");
    double fig[N_FIGS];
    for (int i = 0; i < N_FIGS; i++)
        fig[i] = NAN;
    fig[FIG_SHARPE] = num(o, "mean");
    fig[FIG_SE] = num(o, "se");
    if (cJSON_IsObject(o) && !isnan(fig[FIG_SHARPE]))
        mean_add(m, fig);
}

void
fox_table_folds(FILE *out, const cJSON *folds)
{
    row_mean means[N_ROWS], members;
    memset(means, 0, sizeof means);
    memset(&members, 0, sizeof members);
    int n_folds = 0, n_seen = 0;
    char excluded[256] = "";
    size_t ex_len = 0;
    for (const cJSON *f = folds ? folds->child : NULL; f; f = f->next) {
        fold_block(out, f);
        fputc('\n', out);
        n_seen++;
        const char *why = excluded_why(f);
        if (why) {
            if (ex_len < sizeof excluded)
                ex_len += (size_t)snprintf(excluded + ex_len, sizeof excluded - ex_len,
                                           "%sfold %.0f (%s)", ex_len ? ", " : "", num(f, "fold"),
                                           why);
            continue;
        }
        for (int i = 0; i < N_ROWS; i++) {
            double fig[N_FIGS];
            if (row_figures(f, &rows[i], fig))
                mean_add(&means[i], fig);
        }
        members_add(&members, f);
        n_folds++;
    }
    if (n_seen == 0) {
        fputs("no fold finished\n", out);
        return;
    }
    if (excluded[0])
        fprintf(out, "left out of every row's mean: %s\n", excluded);
    if (n_folds == 0) {
        fputs("no fold to average\n", out);
        return;
    }
    char first[32];
    snprintf(first, sizeof first, "mean of %d fold%s", n_folds, n_folds == 1 ? "" : "s");
    fprintf(out, "%s\n", first);
    header(out, "");
    double fig[N_ROWS][N_FIGS];
    int present[N_ROWS];
    for (int i = 0; i < N_ROWS; i++) {
        mean_get(&means[i], fig[i]);
        present[i] = means[i].n[FIG_SHARPE] > 0;
        if (rows[i].baseline && !present[i] &&
            (!strcmp(rows[i].baseline, "oracle") || !strcmp(rows[i].baseline, "rule")))
            continue;
        figures_line(out, rows[i].label, fig[i]);
    }
    members_mean_line(out, &members);
    verdicts(out, fig, present);
    fputs("note: net Sharpe is mean/std of per-bar net returns x sqrt(P) on the test split, at\n"
          "      the epoch chosen on validation; ± SE is its standard error (Mertens); the\n"
          "      best val Sharpe behind a choice is selection-biased, the test figures are not.\n"
          "      policy - row is the difference of net Sharpe on the same bars, its SE from a\n"
          "      block bootstrap of the paired returns: beat or lost only beyond one SE.\n"
          "      Turnover is mean |change of position| per bar; max DD the worst fall of\n"
          "      cumulative net return.\n",
          out);
    fputs(RESULTS_DOC, out);
}

void
fox_table_flagged(FILE *out, const cJSON *fold)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(fold, "flagged");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(fold, "fold");
    if (!cJSON_IsArray(a))
        return;
    fprintf(out, "fold %.0f: sentinel flags:", cJSON_IsNumber(f) ? f->valuedouble : -1.0);
    const cJSON *s;
    int n = 0;
    cJSON_ArrayForEach(s, a)
    {
        if (cJSON_IsString(s))
            fprintf(out, "%s %s", n++ ? "," : "", s->valuestring);
    }
    fprintf(out, "%s\n", n ? "" : " none");
}

/* A backtest's result: its fold object's rows, as a fold's block shows them, and the verdict. */
void
fox_table_backtest(FILE *out, const cJSON *result)
{
    char a[32], b[32], c[32], d[32];
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(result, "fold");
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(result, "val_bars");
    fprintf(out, "backtest of the policy of fold %s, epoch %s: %s bars, P = %s\n",
            text(a, num(f, "fold"), 0), text(b, num(f, "best_epoch") + 1, 0),
            text(c, num(f, "test_bars"), 0), text(d, num(f, "bars_per_year"), 0));
    if (num(f, "trend_k_tried") > 0)
        fprintf(out, "  trend k: the best of %s lookbacks on the validation bars %s to %s\n",
                text(a, num(f, "trend_k_tried"), 0),
                text(b, item(val, 0), 0), text(c, item(val, 1), 0));
    else
        fprintf(out, "  trend k: fixed at %s, too few bars before the range to choose it on\n",
                text(a, num(f, "trend_k"), 0));
    rows_block(out, f);
    fprintf(out, "  policy/oracle %s\n", text(a, num(f, "oracle_fraction"), 2));
    double fig[N_ROWS][N_FIGS];
    int present[N_ROWS];
    for (int i = 0; i < N_ROWS; i++)
        present[i] = row_figures(f, &rows[i], fig[i]);
    verdicts(out, fig, present);
    fputs("note: net Sharpe is mean/std of per-bar net returns x sqrt(P) over the backtest's\n"
          "      bars; ± SE is its standard error (Mertens). policy - row is the difference of\n"
          "      net Sharpe on the same bars, its SE from a block bootstrap of the paired\n"
          "      returns: beat or lost only beyond one SE. Turnover is mean |change of\n"
          "      position| per bar; max DD the worst fall of cumulative net return.\n",
          out);
    fputs(RESULTS_DOC, out);
}

/* A time or count of obj to add up: 0 where num has none. */
static double
amount(const cJSON *obj, const char *key)
{
    double v = num(obj, key);
    return isnan(v) ? 0.0 : v;
}

void
fox_table_times(FILE *out, const cJSON *folds, const cJSON *run)
{
    double wall = 0, train = 0, eval = 0, bars = 0, passes = 0;
    int n = 0;
    for (const cJSON *f = folds ? folds->child : NULL; f; f = f->next) {
        if (!cJSON_GetObjectItemCaseSensitive(f, "wall_s"))
            continue;
        wall += amount(f, "wall_s");
        train += amount(f, "train_s");
        eval += amount(f, "eval_s");
        bars += amount(f, "eval_bars");
        passes += amount(f, "eval_passes");
        n++;
    }
    if (n > 0)
        fprintf(out,
                "time in %d fold%s: %.2f s: training %.2f s, evaluation %.2f s (%.0f bars in %.0f "
                "forward passes), other %.2f s\n",
                n, n == 1 ? "" : "s", wall, train, eval, bars, passes, wall - train - eval);
    if (!run)
        return;
    double total = amount(run, "wall_s"), parts[5] = {amount(run, "startup_s"), amount(run, "train_s"),
                                                   amount(run, "eval_s"), amount(run, "writing_s"), 0};
    parts[4] = total - parts[0] - parts[1] - parts[2] - parts[3];
    fprintf(out,
            "wall time %.2f s: start-up %.2f s, training %.2f s, evaluation %.2f s, writing %.2f "
            "s, other %.2f s\n",
            total, parts[0], parts[1], parts[2], parts[3], parts[4]);
}

