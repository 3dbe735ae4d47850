/* table.c — the per-fold result table and the flagged-slots line. See table.h. */
#include <math.h>

#include "proto/table.h"

/*
 * The columns of the fold table: the heading, the fold object's key, what is
 * added to the number (the JSON counts epochs from 0, people from 1), the
 * width and the format. Two spaces separate columns.
 */
static const struct column {
    const char *title, *key;
    double add;
    int width;
    const char *fmt;
} columns[] = {
    {"fold", "fold", 0, 4, "%*.0f"},
    {"best val Sharpe", "best_val_sharpe", 0, 15, "%*.3f"},
    {"epoch", "best_epoch", 1, 5, "%*.0f"},
    {"test Sharpe@best", "test_sharpe", 0, 17, "%*.3f"},
    {"final loss", "final_loss", 0, 10, "%*.4g"},
    {"steps/s", "steps_per_sec", 0, 9, "%*.1f"},
    {"P", "bars_per_year", 0, 7, "%*.0f"},
};
#define N_COLUMNS (int)(sizeof columns / sizeof columns[0])

/* One cell: the column's number of obj, or "n/a" when it is missing, null or not finite. */
static void
cell(FILE *out, const cJSON *obj, const struct column *c)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, c->key);
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
        fprintf(out, c->fmt, c->width, v->valuedouble + c->add);
    else
        fprintf(out, "%*s", c->width, "n/a");
}

void
fox_table_folds(FILE *out, const cJSON *folds)
{
    for (int i = 0; i < N_COLUMNS; i++)
        fprintf(out, "%s%*s", i ? "  " : "", columns[i].width, columns[i].title);
    fputc('\n', out);
    for (const cJSON *f = folds ? folds->child : NULL; f; f = f->next) {
        for (int i = 0; i < N_COLUMNS; i++) {
            if (i)
                fputs("  ", out);
            cell(out, f, &columns[i]);
        }
        fputc('\n', out);
    }
    fputs("note: best val Sharpe is the maximum over epochs, so it is selection-biased; test\n"
          "      Sharpe is measured at the epoch chosen on validation and is not. Sharpe is\n"
          "      mean/std of per-bar net returns x sqrt(P), P = bars per year; epochs count from "
          "1.\n",
          out);
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

/* One row of the backtest comparison: name, then the eval object's figures. */
static void
backtest_row(FILE *out, const char *name, const cJSON *ev)
{
    static const struct column figures[] = {
        {"Sharpe", "sharpe", 0, 8, "%*.3f"},
        {"gross", "sharpe_gross", 0, 8, "%*.3f"},
        {"max DD", "max_drawdown", 0, 8, "%*.4f"},
        {"turnover", "turnover", 0, 9, "%*.4f"},
        {"log return", "total_return", 0, 11, "%*.4f"},
    };
    if (!name) {
        fprintf(out, "%-14s", "policy");
        for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
            fprintf(out, "  %*s", figures[i].width, figures[i].title);
        fputc('\n', out);
        return;
    }
    fprintf(out, "%-14s", name);
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++) {
        fputs("  ", out);
        cell(out, ev, &figures[i]);
    }
    fputc('\n', out);
}

void
fox_table_backtest(FILE *out, const cJSON *result)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(result, "baselines");
    backtest_row(out, NULL, NULL);
    backtest_row(out, "policy", cJSON_GetObjectItemCaseSensitive(result, "policy"));
    for (const cJSON *it = b ? b->child : NULL; it; it = it->next)
        backtest_row(out, it->string, it);
    fputs("note: Sharpe net of costs and gross, annualized by sqrt(P); max DD as a fraction;\n"
          "      log return is the cumulative net log return over the bars.\n",
          out);
}
