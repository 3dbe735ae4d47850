/* table.c — the per-fold result table and the flagged-slots line. See table.h. */
#include <math.h>

#include "proto/table.h"

/* One number of obj, plus add (the JSON counts epochs from 0, people from 1). */
static void
cell(FILE *out, const cJSON *obj, const char *key, double add, int width, const char *fmt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
        fprintf(out, fmt, width, v->valuedouble + add);
    else
        fprintf(out, "%*s", width, "n/a");
}

void
fox_table_folds(FILE *out, const cJSON *folds)
{
    fprintf(out, "%4s  %15s  %5s  %17s  %10s  %9s  %7s\n", "fold", "best val Sharpe", "epoch",
            "test Sharpe@best", "final loss", "steps/s", "P");
    for (const cJSON *f = folds ? folds->child : NULL; f; f = f->next) {
        cell(out, f, "fold", 0, 4, "%*.0f");
        fputs("  ", out);
        cell(out, f, "best_val_sharpe", 0, 15, "%*.3f");
        fputs("  ", out);
        cell(out, f, "best_epoch", 1, 5, "%*.0f");
        fputs("  ", out);
        cell(out, f, "test_sharpe", 0, 17, "%*.3f");
        fputs("  ", out);
        cell(out, f, "final_loss", 0, 10, "%*.4g");
        fputs("  ", out);
        cell(out, f, "steps_per_sec", 0, 9, "%*.1f");
        fputs("  ", out);
        cell(out, f, "bars_per_year", 0, 7, "%*.0f");
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
