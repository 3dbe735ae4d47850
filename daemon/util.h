/*
 * util.h — small helpers shared by foxd's files (internal to daemon/):
 * formatted error messages, clocks, directories and atomic file writes.
 * Nothing here keeps state; every function is thread-safe.
 */
#ifndef FOX_DAEMON_UTIL_H
#define FOX_DAEMON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h" /* fox_errf */

/* Milliseconds on the monotonic clock (intervals) and since the epoch (stamps). */
int64_t fox__mono_ms(void);
int64_t fox__wall_ms(void);

/* mkdir -p with mode for the directories it creates. FOX_EIO with a message. */
int fox__mkdir_p(const char *path, unsigned mode, char *err, size_t errlen);


/* Append one line (a newline is added) to path, creating it 0640. */
int fox__append_line(const char *path, const char *line, char *err, size_t errlen);

#endif
