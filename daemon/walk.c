/*
 * walk.c — the walk-forward driver and the JSON form of its reports.
 * See walk.h; the engine does the training, this file only sequences it.
 */
#include <math.h>

#include "gpu/sentinel.h"
#include "common/error.h"
#include "daemon/walk.h"

void
fox_walk_init(fox_walk *w, int folds_mask, int epochs, int steps_per_epoch)
{
    w->folds_mask = folds_mask;
    w->epochs = epochs;
    w->steps_per_epoch = steps_per_epoch;
    w->fold = -1;
    w->epoch = 0;
    w->step_in_epoch = 0;
    w->done = folds_mask == 0;
}

int
fox_walk_check(int folds_mask, int epochs, int steps_per_epoch, int n_folds, char *err,
               size_t errlen)
{
    if (folds_mask <= 0)
        return fox_errf(err, errlen, FOX_EINVAL, "no fold selected");
    if (n_folds < 1 || n_folds > 30 || (folds_mask >> n_folds) != 0)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "fold mask 0x%x selects a fold beyond the %d folds of the data", folds_mask,
                        n_folds);
    if (epochs < 1)
        return fox_errf(err, errlen, FOX_EINVAL, "epochs must be at least 1 (got %d)", epochs);
    if (steps_per_epoch < 1)
        return fox_errf(err, errlen, FOX_EINVAL, "steps_per_epoch must be at least 1 (got %d)",
                        steps_per_epoch);
    return FOX_OK;
}

int
fox_walk_advance(fox_walk *w, fox_engine *e, int chunk, const fox_walk_sink *sink)
{
    int rv;

    if (w->done)
        return FOX_OK;
    if (w->fold < 0) {
        int k = __builtin_ctz((unsigned)w->folds_mask);
        if ((rv = fox_engine_begin_fold(e, k)) != FOX_OK)
            return rv;
        w->fold = k;
        w->epoch = 0;
        w->step_in_epoch = 0;
        if (sink && sink->fold_begin)
            sink->fold_begin(sink->arg, k);
        return FOX_OK;
    }

    int n = w->steps_per_epoch - w->step_in_epoch;
    if (n > chunk)
        n = chunk;
    fox_step_stats st;
    if ((rv = fox_engine_run_steps(e, n, &st)) != FOX_OK)
        return rv;
    w->step_in_epoch += n;
    if (sink && sink->chunk_done)
        sink->chunk_done(sink->arg, &st);
    if (w->step_in_epoch < w->steps_per_epoch)
        return FOX_OK;

    fox_epoch_report er;
    if ((rv = fox_engine_end_epoch(e, &er)) != FOX_OK)
        return rv;
    w->epoch++;
    w->step_in_epoch = 0;
    if (sink && sink->epoch_end)
        sink->epoch_end(sink->arg, &er);
    if (w->epoch < w->epochs)
        return FOX_OK;

    fox_fold_report fr;
    if ((rv = fox_engine_fold_report(e, &fr)) != FOX_OK)
        return rv;
    w->folds_mask &= ~(1 << w->fold);
    w->fold = -1;
    w->done = w->folds_mask == 0;
    if (sink && sink->fold_end)
        sink->fold_end(sink->arg, &fr);
    return FOX_OK;
}

void
fox_walk_json_num(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

cJSON *
fox_walk_mask_json(int mask)
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; a && k < 31; k++)
        if (mask & (1 << k))
            cJSON_AddItemToArray(a, cJSON_CreateNumber(k));
    return a;
}

cJSON *
fox_walk_slots_json(uint64_t mask)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < FOX_SENTINEL_SLOTS; i++)
        if (mask >> i & 1)
            cJSON_AddItemToArray(a, cJSON_CreateString(fox_sentinel_name(i)));
    return a;
}

cJSON *
fox_walk_eval_json(const fox_eval_result *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    fox_walk_json_num(o, "sharpe", r->sharpe);
    fox_walk_json_num(o, "sharpe_gross", r->sharpe_gross);
    fox_walk_json_num(o, "max_drawdown", r->max_drawdown);
    fox_walk_json_num(o, "turnover", r->turnover);
    fox_walk_json_num(o, "total_return", r->total_return);
    fox_walk_json_num(o, "bars_per_year", r->bars_per_year);
    cJSON_AddNumberToObject(o, "bars", r->bars);
    return o;
}

cJSON *
fox_walk_fold_json(const fox_fold_report *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "fold", r->fold);
    cJSON_AddNumberToObject(o, "epochs", r->epochs_done);
    cJSON_AddNumberToObject(o, "best_epoch", r->best_epoch);
    fox_walk_json_num(o, "best_val_sharpe", r->best_val_sharpe);
    fox_walk_json_num(o, "test_sharpe", r->test_at_best.sharpe);
    fox_walk_json_num(o, "test_sharpe_gross", r->test_at_best.sharpe_gross);
    fox_walk_json_num(o, "test_max_drawdown", r->test_at_best.max_drawdown);
    fox_walk_json_num(o, "test_turnover", r->test_at_best.turnover);
    fox_walk_json_num(o, "final_loss", r->final_loss);
    fox_walk_json_num(o, "steps_per_sec", r->steps_per_sec);
    fox_walk_json_num(o, "bars_per_year", r->bars_per_year);
    cJSON_AddItemToObject(o, "flagged", fox_walk_slots_json(r->flagged));
    return o;
}

cJSON *
fox_walk_epoch_json(const fox_epoch_report *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "fold", r->fold);
    cJSON_AddNumberToObject(o, "epoch", r->epoch);
    cJSON_AddNumberToObject(o, "step", (double)r->last.step);
    fox_walk_json_num(o, "loss", r->last.loss);
    fox_walk_json_num(o, "mean_loss", r->mean_loss);
    fox_walk_json_num(o, "loss_c51", r->last.loss_c51);
    fox_walk_json_num(o, "loss_iqn", r->last.loss_iqn);
    fox_walk_json_num(o, "loss_aux", r->last.loss_aux);
    fox_walk_json_num(o, "grad_norm", r->last.grad_norm);
    fox_walk_json_num(o, "epsilon", r->last.epsilon);
    fox_walk_json_num(o, "steps_per_sec", r->steps_per_sec);
    cJSON_AddItemToObject(o, "val", fox_walk_eval_json(&r->val));
    cJSON_AddItemToObject(o, "test", fox_walk_eval_json(&r->test));
    return o;
}
