/*
 * walk.c — the walk-forward driver. See walk.h; the engine does the
 * training, this file only sequences it.
 */
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
    w->stop_on_halt = 0;
    w->halted = 0;
}

/* Close the fold in progress with report fr: the walk moves on to the next one. */
static void
close_fold(fox_walk *w, const fox_fold_report *fr, const fox_walk_sink *sink)
{
    w->folds_mask &= ~(1 << w->fold);
    w->fold = -1;
    w->done = w->folds_mask == 0;
    if (sink && sink->fold_end)
        sink->fold_end(sink->arg, fr);
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
    fox_fold_report fr;
    if ((rv = fox_engine_run_steps(e, n, &st)) != FOX_OK) {
        if (rv != FOX_EHALT || w->stop_on_halt || fox_engine_fold_report(e, &fr) != FOX_OK)
            return rv;
        w->halted++;
        close_fold(w, &fr, sink);
        return FOX_EHALT;
    }
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

    if ((rv = fox_engine_fold_report(e, &fr)) != FOX_OK)
        return rv;
    close_fold(w, &fr, sink);
    return FOX_OK;
}
