/*
 * fdreserve.h — descriptors kept in reserve for the checkpoint (internal to
 * daemon/). A flood of connections can use up every descriptor the process
 * may open; the stop checkpoint then fails and the run's state is lost. foxd
 * holds a few descriptors open on /dev/null and gives them back just before
 * it writes a checkpoint, then takes them again.
 *
 * Not thread-safe: the trainer thread alone takes and releases; the first
 * take happens before it starts.
 */
#ifndef FOX_DAEMON_FDRESERVE_H
#define FOX_DAEMON_FDRESERVE_H

/* Raise the soft descriptor limit to the hard one; returns the limit now in force. */
long fox_fd_raise_limit(void);

/* Take the reserve (a no-op for the descriptors already held). */
void fox_fd_reserve_take(void);

/* Give the reserve back so that the next open() calls succeed. */
void fox_fd_reserve_release(void);

/*
 * How many connections all listeners together may hold under a descriptor
 * limit of limit (fox_fd_raise_limit's): the limit less the descriptors open
 * now (the reserve among them) and a margin for the files the trainer and
 * the loop open while they run. Call it once every fixed descriptor is open.
 * Never below 1; -1 when there is no limit or /proc/self/fd cannot be read.
 */
int fox_fd_connection_budget(long limit);

#endif
