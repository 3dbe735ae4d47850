/* log.c — sd-daemon prefixed lines on stderr. */
#include <stdarg.h>
#include <stdio.h>

#include "common/log.h"

int fox_log_level = FOX_LOG_INFO;

void
fox_log_write(int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "<%d>%s\n", level, line);
}
