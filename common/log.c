/*
 * log.c — one line per event: to the journal through a sink foxd installs
 * under systemd, else on stderr after an ISO-8601 UTC timestamp and the
 * level's name; and a copy of each line into a file (a run's foxd.log).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "common/log.h"

int fox_log_level = FOX_LOG_INFO;
fox_log_sink_fn fox_log_sink = NULL;

static const char *const level_names[] = {"emerg", "alert", "crit",  "err",
                                          "warning", "notice", "info", "debug"};

static pthread_mutex_t copy_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *copy_file;

int
fox_log_copy_to(const char *path)
{
    pthread_mutex_lock(&copy_lock);
    if (path && copy_file) {
        pthread_mutex_unlock(&copy_lock);
        return 1;
    }
    FILE *f = path ? fopen(path, "ae") : NULL;
    if (f)
        setvbuf(f, NULL, _IOLBF, 0);
    FILE *old = copy_file;
    copy_file = f;
    pthread_mutex_unlock(&copy_lock);
    if (old)
        fclose(old);
    return path && !f ? -1 : 0;
}

void
fox_log_copy_line(const char *line)
{
    pthread_mutex_lock(&copy_lock);
    if (copy_file)
        fprintf(copy_file, "%s\n", line);
    pthread_mutex_unlock(&copy_lock);
}

void
fox_log_write(int level, const char *fmt, ...)
{
    char line[1024], stamp[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    char stamped[sizeof line + 64];
    snprintf(stamped, sizeof stamped, "%s.%03ldZ %s: %s", stamp, ts.tv_nsec / 1000000L,
             level_names[level >= 0 && level <= 7 ? level : 7], line);
    /* The run's copy is a plain file wherever the main line goes, so it keeps the stamp. */
    fox_log_copy_line(stamped);
    if (fox_log_sink)
        fox_log_sink(level, line);
    else
        fprintf(stderr, "%s\n", stamped);
}
