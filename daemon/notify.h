/*
 * notify.h — systemd notification for foxd (internal to daemon/): READY,
 * STATUS, WATCHDOG, STOPPING, EXTEND_TIMEOUT_USEC through libsystemd's
 * sd_notify. Without libsystemd (or outside a unit: no NOTIFY_SOCKET) every
 * call is a no-op, so foxd runs the same from a terminal.
 *
 * Thread-safe (sd_notify opens a datagram socket per call); the environment
 * is never unset, since unsetenv is not thread-safe.
 */
#ifndef FOX_DAEMON_NOTIFY_H
#define FOX_DAEMON_NOTIFY_H

#include <stdint.h>

/* Send one notification, printf-style ("STATUS=%s"). */
void fox__notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog period in microseconds when systemd asks for one, else 0. Call before threads start.
 */
uint64_t fox__watchdog_usec(void);

/*
 * When stderr is the journal's stream (systemd's JOURNAL_STREAM names it),
 * send log lines to the journal with their priority instead of stamping
 * them: as entries through journald's native socket (sd_journal_print), or,
 * without libsystemd or that socket, on the stream with a "<N>" priority
 * prefix. Returns 1 when it did. fox__journal_off goes back to stderr (a
 * log file replaced it). Call before threads start.
 */
int fox__journal_on(void);
void fox__journal_off(void);

#endif
