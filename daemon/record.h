/*
 * record.h — the run directory (internal to daemon/): what a walk-forward
 * run leaves behind for the user, written as it goes by `foxd --once` and
 * by the trainer thread of a daemon.
 *
 * A run directory holds config.json (the effective engine configuration,
 * loadable again with --config), metrics.jsonl (one line per epoch and per
 * fold, the lines the daemon's state directory also keeps), epochs.csv and
 * isv.csv (the same figures and the key ISV signals as plain columns for
 * plotting), with engine.members > 1 members.csv (per epoch, the spread of
 * the members' test Sharpe), foxd.log, folds.json (the fold objects as render.c builds
 * them), and per fold k: foldk-chosen.ckpt (the epoch chosen on
 * validation), foldk-last.ckpt (the last epoch), a sidecar .json for each
 * (fold, epoch, step, validation Sharpe, time), foldk-baselines.csv (the
 * baselines of the fold report, as the engine measured them when the fold
 * began) and foldk-equity.csv (the chosen policy's cumulative net log
 * return per test bar against buy-and-hold). Pictures are drawn at the end
 * by scripts/foxplot. The record evaluates nothing itself: the equity
 * curves are the engine's own test passes, seen through the eval hook.
 *
 * What it does not do: decide when a run starts or ends (the callers do),
 * or stop a run when a file cannot be written: such failures are logged
 * once and the training goes on. One thread only (the engine's owner).
 */
#ifndef FOX_DAEMON_RECORD_H
#define FOX_DAEMON_RECORD_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "daemon/conf.h"
#include "gpu/engine.h"

typedef struct fox_record fox_record;

/*
 * Make the run directory: d->run_dir when set, else
 * <root>/<UTC time>[-run.name] (root: d->run_root when set, else the
 * caller's default_root), with -2, -3, ... added when that name is taken.
 * Writes config.json and starts copying the log there.
 */
int fox_record_open(fox_record **out, const fox_dconf *d, const char *default_root,
                    const fox_config *cfg, char *err, size_t errlen);

/* The directory's path. */
const char *fox_record_dir(const fox_record *r);

/* Start recording the engine e's evaluations (the eval hook). */
void fox_record_attach(fox_record *r, fox_engine *e);

/* A line of the run's own progress (already printed elsewhere) into foxd.log. */
void fox_record_note(fox_record *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The walk's events; op_id is the run's (0 for --once). r NULL: nothing. */
void fox_record_chunk(fox_record *r, fox_engine *e, const fox_step_stats *st);
void fox_record_epoch(fox_record *r, fox_engine *e, const fox_epoch_report *rep, int64_t op_id);
void fox_record_fold(fox_record *r, fox_engine *e, const fox_fold_report *rep, int64_t op_id);

/*
 * A backtest, once fox_engine_load_policy has taken a checkpoint and a bar
 * range: fox_engine_backtest (the greedy policy and the fold's baselines
 * over those bars) into backtest.json, backtest-baselines.csv and
 * backtest-equity.csv. *result gets {"bars", "val_bars" (where the trend
 * rule's lookback was chosen), "fold" (the fold object: the policy's
 * figures and its "baselines"), "policy", "run_dir"} (the caller owns it).
 * FOX_OK or the engine's status (fox_engine_errmsg says why).
 */
int fox_record_backtest(fox_record *r, fox_engine *e, cJSON **result);

/*
 * Close the record: folds.json from the folds reported (and partial, a fold
 * cut short, when not NULL), the pictures, the log copy stopped. Frees r;
 * NULL is safe.
 */
void fox_record_close(fox_record *r, fox_engine *e, const fox_fold_report *partial);

/*
 * Draw the pictures of the run directory dir with scripts/foxplot (found
 * beside the program, then on PATH). Returns 0 when drawn, else prints one
 * line to stderr saying why not (gnuplot missing, ...) and returns -1.
 */
int fox_record_plot(const char *dir);

#endif
