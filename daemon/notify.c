/* notify.c — sd_notify wrappers, or nothing without libsystemd (see notify.h). */
#include <stdarg.h>
#include <stdio.h>

#include "daemon/notify.h"

#ifdef FOX_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

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
