/*
 * records.h — foxctl's commands over run directories (internal to client/):
 * plot [--follow] RUN_DIR, compare RUN_DIR..., backtest --checkpoint FILE ..., checkpoint list DIR. They
 * read and run things on this machine; only backtest --daemon asks foxd.
 */
#ifndef FOX_CLIENT_RECORDS_H
#define FOX_CLIENT_RECORDS_H

#include "client/ask.h"

/*
 * plot [--follow [--every S]] RUN_DIR: draw the run directory's pictures
 * again (scripts/foxplot); with --follow, again each time a running run's
 * metrics.jsonl grows, until the run ends or SIGINT/SIGTERM. It installs
 * handlers for both signals for the rest of the process.
 */
int foxctl_cmd_plot(foxctl_opts *o, int argc, char **argv);

/* compare [--out DIR] RUN_DIR...: one picture of the runs, compare.{png,svg} in DIR (default .). */
int foxctl_cmd_compare(foxctl_opts *o, int argc, char **argv);

/* backtest --checkpoint FILE [--data CSV] [--bars [VAL:]FROM:TO] [--out DIR] [FOXD OPTIONS] | --daemon. */
int foxctl_cmd_backtest(foxctl_opts *o, int argc, char **argv);

/* checkpoint list DIR: the checkpoints of a run or state directory, with their sidecars. */
int foxctl_cmd_checkpoint_list(foxctl_opts *o, int argc, char **argv);

#endif
