/*
 * log.c — one line per event: to the journal through a sink foxd installs
 * under systemd, else on stderr after an ISO-8601 UTC timestamp and the
 * level's name.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "common/log.h"

int fox_log_level = FOX_LOG_INFO;
fox_log_sink_fn fox_log_sink = NULL;

static const char *const level_names[] = {"emerg", "alert", "crit",  "err",
                                          "warning", "notice", "info", "debug"};

void
fox_log_write(int level, const char *fmt, ...)
{
    char line[1024], stamp[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (fox_log_sink) {
        fox_log_sink(level, line);
        return;
    }
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(stderr, "%s.%03ldZ %s: %s\n", stamp, ts.tv_nsec / 1000000L,
            level_names[level >= 0 && level <= 7 ? level : 7], line);
}
