/*
 * notify.c — sd_notify wrappers, or nothing without libsystemd, and the
 * journal's log sinks (see notify.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/notify.h"

#ifdef FOX_HAVE_SYSTEMD
/* Where sd_journal sends entries: journald's native socket. */
#define JOURNAL_SOCKET "/run/systemd/journal/socket"

/*
 * Without this, sd_journal_print records its own call site as CODE_FILE,
 * CODE_LINE and CODE_FUNC: every entry would claim to come from the sink.
 */
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#endif

/* A line on the journal's stream: journald reads the "<N>" prefix as its priority. */
static void
stream_sink(int level, const char *line)
{
    fprintf(stderr, "<%d>%s\n", level, line);
}

#ifdef FOX_HAVE_SYSTEMD
static void
journal_sink(int level, const char *line)
{
    /* A socket that refuses the entry (journald gone, the file stale): the stream still takes it. */
    if (sd_journal_print(level, "%s", line) < 0)
        stream_sink(level, line);
}
#endif

int
fox__journal_on(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    /* Only when stderr is still that stream: not when it was redirected elsewhere. */
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) != 0 ||
        (unsigned long long)st.st_dev != dev || (unsigned long long)st.st_ino != ino)
        return 0;
#ifdef FOX_HAVE_SYSTEMD
    /*
     * libsystemd drops an entry without an error when the socket does not
     * exist (a root directory or container without /run/systemd/journal),
     * so the stream carries the lines then.
     */
    struct stat sock;
    if (stat(JOURNAL_SOCKET, &sock) == 0 && S_ISSOCK(sock.st_mode)) {
        fox_log_sink = journal_sink;
        return 1;
    }
#endif
    fox_log_sink = stream_sink;
    return 1;
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
