/* log.c — sd-daemon prefixed lines on stderr, and their copy into a file. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "common/log.h"

int fox_log_level = FOX_LOG_INFO;

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
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "<%d>%s\n", level, line);
    fox_log_copy_line(line);
}
