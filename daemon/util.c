/* util.c — error formatting, clocks, mkdir -p, atomic writes (see util.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "daemon/util.h"

static int64_t
clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
fox__mono_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

int64_t
fox__wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}

int
fox__mkdir_p(const char *path, unsigned mode, char *err, size_t errlen)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf)
        return fox_errf(err, errlen, FOX_EIO, "%s: path too long", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, mode) != 0 && errno != EEXIST)
                return fox_errf(err, errlen, FOX_EIO, "mkdir %s: %s", buf, strerror(errno));
            *p = c;
            if (c == 0)
                break;
        }
    }
    return FOX_OK;
}

int
fox__append_line(const char *path, const char *line, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0)
        return fox_errf(err, errlen, FOX_EIO, "%s: %s", path, strerror(errno));
    /* One write per line: O_APPEND keeps concurrent lines whole. */
    size_t n = strlen(line);
    char buf[8192];
    int rv = FOX_OK;
    if (n + 1 <= sizeof buf) {
        memcpy(buf, line, n);
        buf[n] = '\n';
        if (write(fd, buf, n + 1) != (ssize_t)(n + 1))
            rv = fox_errf(err, errlen, FOX_EIO, "write %s: %s", path, strerror(errno));
    } else if (write(fd, line, n) != (ssize_t)n || write(fd, "\n", 1) != 1) {
        rv = fox_errf(err, errlen, FOX_EIO, "write %s: %s", path, strerror(errno));
    }
    close(fd);
    return rv;
}
