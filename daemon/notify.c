/* notify.c — sd_notify wrappers, or nothing without libsystemd (see notify.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/notify.h"

#ifdef FOX_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

static void
journal_sink(int level, const char *line)
{
    sd_journal_print(level, "%s", line);
}
#endif

int
fox__journal_on(void)
{
#ifdef FOX_HAVE_SYSTEMD
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    /* Only when stderr is still that stream: not when it was redirected elsewhere. */
    if (js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
        (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino) {
        fox_log_sink = journal_sink;
        return 1;
    }
#endif
    return 0;
}

void
fox__journal_off(void)
{
    fox_log_sink = NULL;
}

void
fox__notify(const char *fmt, ...)
{
#ifdef FOX_HAVE_SYSTEMD
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    sd_notify(0, buf);
#else
    (void)fmt;
#endif
}

uint64_t
fox__watchdog_usec(void)
{
#ifdef FOX_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0)
        return usec;
#endif
    return 0;
}
