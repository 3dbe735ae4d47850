/*
 * backtest.c — `foxd --backtest CHECKPOINT`: apply a saved policy greedily
 * to the bars of the configured data (a CSV the run may never have seen),
 * print the fold table's row for it and its comparison with the engine's
 * baselines, and keep the figures and the equity picture in a run
 * directory (record.h). No sockets, no threads.
 */
#include <stdio.h>

#include "daemon/foxd.h"
#include "daemon/record.h"
#include "proto/proto.h"
#include "proto/table.h"

int
fox_backtest_main(const fox_config *cfg, const fox_dconf *d, const char *checkpoint,
                  int val_begin, int begin, int end)
{
    char err[1024] = "";
    fox_engine *e = NULL;
    fox_record *rec = NULL;
    cJSON *result = NULL;
    int rv, code = FOX_EXIT_ERROR;

    if ((rv = fox_engine_create(&e, cfg, err, sizeof err)) != FOX_OK) {
        fprintf(stderr, "foxd: engine: %s (%s)\n", err[0] ? err : fox_strerror(rv),
                fox_err_name(rv));
        return rv == FOX_EINVAL ? FOX_EXIT_USAGE : FOX_EXIT_ERROR;
    }
    if ((rv = fox_engine_load_data(e)) != FOX_OK) {
        /* The engine's message names the stage itself: "data: ...". */
        fprintf(stderr, "foxd: %s (%s)\n", fox_engine_errmsg(e), fox_err_name(rv));
        goto out;
    }
    if ((rv = fox_engine_load_policy(e, checkpoint, val_begin, begin, end)) != FOX_OK) {
        fprintf(stderr, "foxd: backtest: %s (%s)\n", fox_engine_errmsg(e), fox_err_name(rv));
        code = rv == FOX_EINVAL ? FOX_EXIT_USAGE : FOX_EXIT_ERROR;
        goto out;
    }
    if ((rv = fox_record_open(&rec, d, "runs", cfg, err, sizeof err)) != FOX_OK) {
        fprintf(stderr, "foxd: %s\n", err);
        goto out;
    }
    fox_record_attach(rec, e);
    fprintf(stderr, "foxd: backtest of %s on %s; run directory %s\n", checkpoint, cfg->data,
            fox_record_dir(rec));
    if ((rv = fox_record_backtest(rec, e, &result)) != FOX_OK) {
        fprintf(stderr, "foxd: backtest: %s (%s)\n", fox_engine_errmsg(e), fox_err_name(rv));
        goto out;
    }
    const cJSON *bars = cJSON_GetObjectItemCaseSensitive(result, "bars");
    fprintf(stdout, "backtest over bars %d to %d of %s\n",
            (int)cJSON_GetArrayItem(bars, 0)->valuedouble,
            (int)cJSON_GetArrayItem(bars, 1)->valuedouble, cfg->data);
    fox_table_backtest(stdout, result);
    fflush(stdout);
    /* render.c writes a non-finite figure as null: NaN returns, never a policy's doing. */
    const cJSON *sharpe = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(result, "policy"), "sharpe");
    if (!cJSON_IsNumber(sharpe)) {
        fprintf(stderr, "foxd: backtest: the policy's Sharpe is not a number: the data or the "
                        "checkpoint is wrong\n");
        goto out;
    }
    code = FOX_EXIT_OK;
out:
    if (rec) {
        fprintf(stderr, "foxd: run directory %s\n", fox_record_dir(rec));
        fox_record_close(rec, code == FOX_EXIT_OK ? e : NULL, NULL);
    }
    cJSON_Delete(result);
    fox_engine_destroy(e);
    return code;
}
