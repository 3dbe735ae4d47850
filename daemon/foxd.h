/*
 * foxd.h — foxd's two modes (internal to daemon/): the batch run of
 * `foxd --once` and the serving daemon. main.c builds the configuration and
 * calls one of them; each returns the process exit status.
 */
#ifndef FOX_DAEMON_FOXD_H
#define FOX_DAEMON_FOXD_H

#include "daemon/conf.h"

/* Exit statuses of foxd, documented in --help and docs/operations.md. */
enum {
    FOX_EXIT_OK = 0,
    FOX_EXIT_ERROR = 1, /* runtime failure: engine, data, socket, I/O */
    FOX_EXIT_USAGE = 2, /* bad command line or configuration */
    FOX_EXIT_HALT = 3,  /* training halted by the stability system (--once) */
    FOX_EXIT_INTERRUPT = 130
};

/*
 * Train the configured folds, print progress to stderr and the fold table to
 * stdout, or with json the fold objects ({"folds":[...]}, as the protocol
 * renders them) for a program to read.
 */
int fox_once_main(const fox_config *cfg, const fox_dconf *d, int json);

/*
 * Apply the policy of checkpoint greedily to bars [begin, end) of the
 * configured data (begin < 0, end ≤ 0: all bars with features), print its
 * block of the fold table (the policy against the baselines; the trend
 * rule's lookback chosen on [val_begin, begin), val_begin < 0: the
 * engine's default), and keep a run directory (runs/<UTC time>-backtest
 * unless run.dir says otherwise).
 */
int fox_backtest_main(const fox_config *cfg, const fox_dconf *d, const char *checkpoint,
                      int val_begin, int begin, int end);

/* Serve until shutdown or SIGTERM/SIGINT. */
int fox_serve_main(const fox_config *cfg, const fox_dconf *d);

#endif
