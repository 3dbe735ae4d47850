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

/* obj's number at key, 0 when it is missing, null or not finite. */
static double
num(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : 0.0;
}

void
fox_table_times(FILE *out, const cJSON *folds, const cJSON *run)
{
    double wall = 0, train = 0, eval = 0, bars = 0, passes = 0;
    int n = 0;
    for (const cJSON *f = folds ? folds->child : NULL; f; f = f->next) {
        if (!cJSON_GetObjectItemCaseSensitive(f, "wall_s"))
            continue;
        wall += num(f, "wall_s");
        train += num(f, "train_s");
        eval += num(f, "eval_s");
        bars += num(f, "eval_bars");
        passes += num(f, "eval_passes");
        n++;
    }
    if (n > 0)
        fprintf(out,
                "time in %d fold%s: %.2f s: training %.2f s, evaluation %.2f s (%.0f bars in %.0f "
                "forward passes), other %.2f s\n",
                n, n == 1 ? "" : "s", wall, train, eval, bars, passes, wall - train - eval);
    if (!run)
        return;
    double total = num(run, "wall_s"), parts[5] = {num(run, "startup_s"), num(run, "train_s"),
                                                   num(run, "eval_s"), num(run, "writing_s"), 0};
    parts[4] = total - parts[0] - parts[1] - parts[2] - parts[3];
    fprintf(out,
            "wall time %.2f s: start-up %.2f s, training %.2f s, evaluation %.2f s, writing %.2f "
            "s, other %.2f s\n",
            total, parts[0], parts[1], parts[2], parts[3], parts[4]);
}
