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

/* After a halted fold's row: "  halted: <kind> at step N"; its cells are the epochs it closed. */
static void
halted_mark(FILE *out, const cJSON *fold)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(fold, "halted");
    if (!cJSON_IsObject(h))
        return;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(h, "kind");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(h, "step");
    fprintf(out, "  halted: %s at step %.0f", cJSON_IsString(kind) ? kind->valuestring : "?",
            cJSON_IsNumber(step) ? step->valuedouble : -1.0);
}

void
fox_table_folds(FILE *out, const cJSON *folds)
{
    for (int i = 0; i < N_COLUMNS; i++)
        fprintf(out, "%s%*s", i ? "  " : "", columns[i].width, columns[i].title);
    fputc('\n', out);
    for (const cJSON *f = folds ? folds->child : NULL; f; f = f->next) {
        /* A fold halted before its first epoch closed has no figures, only its number. */
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(f, "epochs");
        int none = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(f, "halted")) &&
                   cJSON_IsNumber(ep) && ep->valuedouble == 0;
        for (int i = 0; i < N_COLUMNS; i++) {
            if (i)
                fputs("  ", out);
            if (none && i > 0)
                fprintf(out, "%*s", columns[i].width, "n/a");
            else
                cell(out, f, &columns[i]);
        }
        halted_mark(out, f);
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
