/*
 * once.c — `foxd --once`: create the engine, load the data, walk the
 * configured folds, print one progress line per epoch to stderr and the
 * per-fold table to stdout, then where the wall time went, and keep the
 * run's record in a run directory (record.h; ./runs/<UTC time> unless
 * run.dir says otherwise). No sockets, no threads, no state directory.
 *
 * SIGINT/SIGTERM stop the walk at the next chunk; the folds finished so far
 * are still printed and the exit status says it was interrupted. A halted
 * fold is reset and the walk goes on (train.stop_on_halt=1: it stops there);
 * the table marks it, and the exit status is FOX_EXIT_HALT at the end.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "daemon/foxd.h"
#include "proto/proto.h"
#include "proto/table.h"
#include "daemon/record.h"
#include "daemon/render.h"
#include "daemon/walk.h"

static volatile sig_atomic_t interrupted;

static void
on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct once_state {
    int epochs;
    cJSON *folds; /* fold objects, for the table */
    fox_engine *engine;
    fox_record *record;
    double writing; /* seconds printing and recording, less what the engine counts itself */
    int nonfinite;  /* folds whose chosen policy's test Sharpe is not a number */
} once_state;

/* The engine's evaluation and checkpoint seconds so far: a record call's own, not writing. */
static double
engine_counted(const fox_engine *e)
{
    fox_engine_info info;
    fox_engine_get_info(e, &info);
    return info.times.eval + info.times.checkpoint;
}

/* Add the writing since t0 (engine_counted was c0 then) to the run's. */
static void
add_writing(once_state *s, double t0, double c0)
{
    s->writing += fox_mono_s() - t0 - (engine_counted(s->engine) - c0);
}

static void
once_chunk(void *arg, const fox_step_stats *st)
{
    once_state *s = arg;
    double t0 = fox_mono_s();
    fox_record_chunk(s->record, s->engine, st); /* appends isv.csv rows: nothing the engine times */
    s->writing += fox_mono_s() - t0;
}

static void
once_epoch_end(void *arg, const fox_epoch_report *r)
{
    once_state *s = arg;
    double t0 = fox_mono_s(), c0 = engine_counted(s->engine);
    char line[256];
    snprintf(line, sizeof line,
             "fold %d epoch %d/%d: loss %.4g  val Sharpe %.3f  test Sharpe %.3f  %.0f steps/s",
             r->fold, r->epoch + 1, s->epochs, r->mean_loss, r->val.sharpe, r->test.sharpe,
             r->steps_per_sec);
    fprintf(stderr, "%s\n", line);
    fox_record_note(s->record, "%s", line);
    fox_record_epoch(s->record, s->engine, r, 0);
    add_writing(s, t0, c0);
}

static void
once_fold_end(void *arg, const fox_fold_report *r)
{
    once_state *s = arg;
    double t0 = fox_mono_s(), c0 = engine_counted(s->engine);
    cJSON *fold = fox_render_fold(r);
    cJSON_AddItemToArray(s->folds, fold);
    fox_table_flagged(stderr, fold);
    /* A NaN figure comes from NaN returns, never from a policy: the run's figures are void. */
    if (!isfinite(r->test_at_best.sharpe)) {
        fprintf(stderr, "foxd: fold %d: the chosen policy's test Sharpe is %g, not a number\n",
                r->fold, r->test_at_best.sharpe);
        s->nonfinite++;
    }
    fox_record_fold(s->record, s->engine, r, 0);
    add_writing(s, t0, c0);
}

/* The table's last lines: the folds' time and the run's, from start on. */
static void
print_times(const once_state *s, double start)
{
    fox_engine_info info;
    fox_engine_get_info(s->engine, &info);
    cJSON *run = fox_render_times(&info.times, s->writing);
    fox_render_num(run, "wall_s", fox_mono_s() - start);
    fox_table_times(stdout, s->folds, run);
    cJSON_Delete(run);
}

static void
fold_list(char *buf, size_t len, int mask)
{
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < 31 && n < len; k++)
        if (mask & (1 << k))
            n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", k);
}

int
fox_once_main(const fox_config *cfg, const fox_dconf *d, int json)
{
    char err[1024], folds[128];
    fox_engine *e = NULL;
    fox_engine_info info;
    once_state st = {.epochs = cfg->epochs, .folds = cJSON_CreateArray()};
    fox_walk_sink sink = {
        .chunk_done = once_chunk, .epoch_end = once_epoch_end, .fold_end = once_fold_end, .arg = &st};
    fox_walk w;
    int rv, code = FOX_EXIT_OK;
    double start = fox_mono_s();

    if (fox_config_validate(cfg, err, sizeof err) != FOX_OK ||
        fox_walk_check(cfg->folds_mask, cfg->epochs, cfg->steps_per_epoch, cfg->n_folds, err,
                       sizeof err) != FOX_OK) {
        fprintf(stderr, "foxd: config: %s\n", err);
        cJSON_Delete(st.folds);
        return FOX_EXIT_USAGE;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    err[0] = 0;
    if ((rv = fox_engine_create(&e, cfg, err, sizeof err)) != FOX_OK) {
        fprintf(stderr, "foxd: engine: %s (%s)\n", err[0] ? err : fox_strerror(rv),
                fox_err_name(rv));
        cJSON_Delete(st.folds);
        return rv == FOX_EINVAL ? FOX_EXIT_USAGE : FOX_EXIT_ERROR;
    }
    if ((rv = fox_engine_load_data(e)) != FOX_OK) {
        /* The engine's message names the stage itself: "data: ...". */
        fprintf(stderr, "foxd: %s (%s)\n", fox_engine_errmsg(e), fox_err_name(rv));
        code = FOX_EXIT_ERROR;
        goto out;
    }
    st.engine = e;
    double t0 = fox_mono_s();
    if ((rv = fox_record_open(&st.record, d, "runs", cfg, err, sizeof err)) != FOX_OK) {
        fprintf(stderr, "foxd: %s\n", err);
        code = FOX_EXIT_ERROR;
        goto out;
    }
    st.writing += fox_mono_s() - t0;
    fox_record_attach(st.record, e);
    fprintf(stderr, "foxd: run directory %s\n", fox_record_dir(st.record));
    fox_engine_get_info(e, &info);
    fox_record_note(st.record, "foxd: %s backend, %zu parameters, %d envs, batch %d, %d bars from %s",
                    info.backend, info.n_params, info.n_envs, info.batch, info.n_bars,
                    cfg->data);
    fold_list(folds, sizeof folds, cfg->folds_mask);
    fprintf(stderr,
            "foxd: %s backend, %zu parameters, %d envs, batch %d, %d bars; folds %s x %d epochs "
            "x %d steps\n"
            "foxd: P = %.0f bars a year (%s)\n",
            info.backend, info.n_params, info.n_envs, info.batch, info.n_bars, folds, cfg->epochs,
            cfg->steps_per_epoch, info.bars_per_year, info.bars_per_year_from);

    /* Chunks no longer than the ISV record's spacing, so that isv.csv gets its rows. */
    int chunk = d->chunk_steps < d->run_isv_steps ? d->chunk_steps : d->run_isv_steps;
    fox_walk_init(&w, cfg->folds_mask, cfg->epochs, cfg->steps_per_epoch);
    w.stop_on_halt = cfg->stop_on_halt;
    while (!w.done && !interrupted) {
        if ((rv = fox_walk_advance(&w, e, chunk, &sink)) == FOX_OK)
            continue;
        if (rv == FOX_EHALT) {
            fox_halt_info hi;
            fox_engine_halt_info(e, &hi);
            fprintf(stderr, "foxd: fold %d halted: %s\n", hi.fold, fox_engine_errmsg(e));
            if (w.fold < 0)
                continue; /* the walk closed the fold and goes on to the next */
            code = FOX_EXIT_HALT;
        } else {
            fprintf(stderr, "foxd: fold %d: %s (%s)\n", w.fold, fox_engine_errmsg(e),
                    fox_err_name(rv));
            code = FOX_EXIT_ERROR;
        }
        break;
    }
    if (interrupted && code == FOX_EXIT_OK) {
        fprintf(stderr, "foxd: interrupted; the table lists the folds finished so far\n");
        code = FOX_EXIT_INTERRUPT;
    }
    if (w.halted > 0 && code == FOX_EXIT_OK) {
        fprintf(stderr, "foxd: %d fold%s halted; the table marks %s\n", w.halted,
                w.halted > 1 ? "s" : "", w.halted > 1 ? "them" : "it");
        code = FOX_EXIT_HALT;
    }
    if (st.nonfinite > 0 && code == FOX_EXIT_OK) {
        fprintf(stderr, "foxd: %d fold%s ended with a test Sharpe that is not a number: the "
                        "data or the training went wrong (see above)\n",
                st.nonfinite, st.nonfinite > 1 ? "s" : "");
        code = FOX_EXIT_ERROR;
    }
    /* A fold cut short still has its finished epochs to report. */
    fox_fold_report part;
    int cut_short = code != FOX_EXIT_OK && w.fold >= 0 &&
                    fox_engine_fold_report(e, &part) == FOX_OK && part.epochs_done > 0;
    if (cut_short) {
        fprintf(stderr, "foxd: fold %d stopped after %d of %d epochs (its row shows those)\n",
                w.fold, part.epochs_done, cfg->epochs);
        cJSON_AddItemToArray(st.folds, fox_render_fold(&part));
    }
    if (json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddItemReferenceToObject(doc, "folds", st.folds);
        char *text = cJSON_PrintUnformatted(doc);
        if (text)
            printf("%s\n", text);
        cJSON_free(text);
        cJSON_Delete(doc);
        fflush(stdout);
    }
    int table = !json && (cJSON_GetArraySize(st.folds) > 0 || code == FOX_EXIT_OK);
    if (table) {
        t0 = fox_mono_s();
        fox_table_folds(stdout, st.folds);
        fflush(stdout);
        st.writing += fox_mono_s() - t0;
    }
    fprintf(stderr, "foxd: run directory %s\n", fox_record_dir(st.record));
    /* The pictures are drawn before the time lines, which count them as writing. */
    t0 = fox_mono_s();
    fox_record_close(st.record, e, cut_short ? &part : NULL);
    st.writing += fox_mono_s() - t0;
    if (table) {
        print_times(&st, start);
        fflush(stdout);
    }
out:
    fox_engine_destroy(e);
    cJSON_Delete(st.folds);
    return code;
}
