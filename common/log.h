/*
 * log.h — one line per event to stderr, with sd-daemon "<N>" priority
 * prefixes so that journald files each line at its level.
 *
 * fox_log() checks the level before evaluating its arguments. Thread-safe:
 * each line is written with a single fprintf on an unbuffered stream, and the
 * copy (fox_log_copy_to) under a lock.
 */
#ifndef FOX_LOG_H
#define FOX_LOG_H

enum { FOX_LOG_ERR = 3, FOX_LOG_WARNING = 4, FOX_LOG_NOTICE = 5, FOX_LOG_INFO = 6, FOX_LOG_DEBUG = 7 };

extern int fox_log_level; /* lines above this priority are dropped; default INFO */

void fox_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Also append every line from now on to path (a run directory's log),
 * without the priority prefix; NULL stops the copy. Returns 0, 1 when a
 * copy is already going elsewhere (it goes on there, path is not opened),
 * or -1 with errno when path cannot be opened.
 */
int fox_log_copy_to(const char *path);
/* Append one line of a program's own progress output to that copy only. */
void fox_log_copy_line(const char *line);

#define fox_log(level, ...)                                                                        \
    do {                                                                                           \
        if ((level) <= fox_log_level)                                                              \
            fox_log_write((level), __VA_ARGS__);                                                   \
    } while (0)

#endif
