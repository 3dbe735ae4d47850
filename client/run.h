/*
 * run.h — foxctl's run and start-fold (internal to client/): submit the
 * walk, then wait for its op on the event socket, with progress on stderr,
 * polling `status` when events were lost, and print the fold table. With
 * --spawn the same runs on a private foxd, started and stopped here.
 */
#ifndef FOX_CLIENT_RUN_H
#define FOX_CLIENT_RUN_H

#include "client/ask.h"

/*
 * Wait for op to finish: events on sub first, `status` every few seconds
 * (events can be dropped). Returns the exit status; *folds (may be NULL)
 * gets the run's fold objects.
 */
int foxctl_wait_op(foxctl_opts *o, nng_socket sub, int64_t op, cJSON **folds);

/* run [--folds N,N] [--epochs N] [--steps N] [--detach] [--spawn ...] | start-fold K ... */
int foxctl_cmd_run(foxctl_opts *o, int argc, char **argv);

#endif
