/*
 * log.h — one line per event, at a syslog priority. On stderr each line
 * starts with an ISO-8601 UTC timestamp and the level's name
 * ("2026-01-02T03:04:05.678Z notice: ready"); a program that knows better
 * (foxd under systemd: the journal, with the priority as a field) installs
 * a sink instead.
 *
 * fox_log() checks the level before evaluating its arguments. Thread-safe:
 * each line is written with a single fprintf on an unbuffered stream, or
 * one call of the sink (which must be thread-safe itself), and the copy
 * (fox_log_copy_to) under a lock.
 */
#ifndef FOX_LOG_H
#define FOX_LOG_H

enum { FOX_LOG_ERR = 3, FOX_LOG_WARNING = 4, FOX_LOG_NOTICE = 5, FOX_LOG_INFO = 6, FOX_LOG_DEBUG = 7 };

extern int fox_log_level; /* lines above this priority are dropped; default INFO */

/* Where lines go instead of stderr when set (before threads start). */
typedef void (*fox_log_sink_fn)(int level, const char *line);
extern fox_log_sink_fn fox_log_sink;

void fox_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Also append every line from now on to path (a run directory's log),
 * with its timestamp and level's name, whichever sink the line goes to;
 * NULL stops the copy. Returns 0, 1 when a copy is already going elsewhere
 * (it goes on there, path is not opened), or -1 with errno when path
 * cannot be opened.
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
