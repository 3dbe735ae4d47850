/*
 * table.h — the per-fold result table as people read it, printed from the
 * protocol's fold objects. It is the one printer of that table: foxctl
 * prints it from a run's op_done event or from status, and `foxd --once`
 * from its own fold reports, so that both show the same columns.
 *
 * Reentrant; writes only to the FILE given.
 */
#ifndef FOX_PROTO_TABLE_H
#define FOX_PROTO_TABLE_H

#include <stdio.h>

#include <cjson/cJSON.h>

/*
 * Print the per-fold result table: folds is an array of fold objects as the
 * fold_end event carries them ({"fold","epochs","best_epoch",
 * "best_val_sharpe","test_sharpe","final_loss","steps_per_sec",
 * "bars_per_year", ...}); a missing or null number prints as "n/a".
 */
void fox_table_folds(FILE *out, const cJSON *folds);

/*
 * A fold object's choice of epoch, with no newline: "epoch 4 of 5 chosen by
 * smoothed (mean val Sharpe 1.250 of epochs 2-4)", epochs counted from 1 and
 * the figure the rule scored ("select_score"); "no epoch closed" for a fold
 * that closed none (a halt in its first epoch). The fold table's blocks and
 * foxctl's fold_end line both print it.
 */
void fox_table_choice(FILE *out, const cJSON *fold);

/* A fold object's "flagged" slots as one line, "fold 2: sentinel flags: none" (nothing without it).
 */
void fox_table_flagged(FILE *out, const cJSON *fold);

/*
 * A backtest's table: the rows and columns of a fold's block, from the
 * result of the backtest command ({"bars", "val_bars", "fold": a fold
 * object with its "baselines", ...}), then the verdict against flat and
 * buy-and-hold.
 */
void fox_table_backtest(FILE *out, const cJSON *result);

/*
 * Where the wall time went. One line for the folds of folds (their "wall_s",
 * "train_s", "eval_s", "eval_bars", "eval_passes", summed), then, when run is
 * not NULL, one for the whole run from its object ({"wall_s", "startup_s",
 * "fold_setup_s", "train_s", "eval_s", "writing_s"}: what `foxd --once`
 * measures). Prints nothing for folds without the keys.
 */
void fox_table_times(FILE *out, const cJSON *folds, const cJSON *run);

#endif
