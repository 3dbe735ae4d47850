/*
 * fdreserve.h — descriptors kept in reserve for the checkpoint and the run
 * directory (internal to daemon/). A flood of connections can use up every
 * descriptor the process may open; the stop checkpoint and the records then
 * fail and the run's state is lost. foxd holds a few descriptors open on
 * /dev/null and frees them for those writes only, on a thread whose
 * descriptor table is its own (fox_fd_reserve_run): descriptors freed in
 * the process's table would go to the next connection nng accepts.
 *
 * Not thread-safe: the trainer thread alone takes, releases and runs; the
 * first take happens before it starts.
 */
#ifndef FOX_DAEMON_FDRESERVE_H
#define FOX_DAEMON_FDRESERVE_H

/* Raise the soft descriptor limit to the hard one; returns the limit now in force. */
long fox_fd_raise_limit(void);

/* Take the reserve (a no-op for the descriptors already held): once before the trainer starts. */
void fox_fd_reserve_take(void);

/*
 * Run fn(arg) with the reserve free to it and return what fn returns. fn
 * runs on a thread of its own, whose descriptor table is a private copy of
 * the process's with the reserve closed in it: descriptors only fn can
 * take. The caller waits. fn must keep no descriptor past its return and
 * must not send on an nng socket (nng writes from the caller's thread, on
 * descriptor numbers the copy no longer shares). The copy holds every
 * connection open until fn returns. Where the kernel or a seccomp filter
 * refuses the private table, or own_table is 0, fn runs on the caller with
 * the reserve given back to the process's table around it, which a flood
 * may take first. own_table must be 0 when fn calls into a GPU driver: the
 * driver keeps descriptors of its own and may open more during a call, and
 * a table private to one thread would close those when the thread ends.
 */
int fox_fd_reserve_run(int (*fn)(void *arg), void *arg, int own_table);

/*
 * How many connections all listeners together may hold under a descriptor
 * limit of limit (fox_fd_raise_limit's): the limit less the descriptors open
 * now (the reserve among them) and a margin for the files the trainer and
 * the loop open while they run. Call it once every fixed descriptor is open.
 * Never below 1; -1 when there is no limit or /proc/self/fd cannot be read.
 */
int fox_fd_connection_budget(long limit);

#endif
