/* fsutil.c — atomic file writes, mkdir -p and line appends (see fsutil.h). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fsutil.h"

int
fox_write_atomic(const char *path, const void *data, size_t len, unsigned mode, int durable,
                 char *err, size_t errlen)
{
    char tmp[4096], dir[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return fox_errf(err, errlen, FOX_EIO, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)mode);
    if (fd < 0)
        return fox_errf(err, errlen, FOX_EIO, "%s: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return fox_errf(err, errlen, FOX_EIO, "write %s: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if ((durable && fsync(fd) != 0) || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return fox_errf(err, errlen, FOX_EIO, "fsync %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return fox_errf(err, errlen, FOX_EIO, "rename %s: %s", path, strerror(e));
    }
    if (!durable)
        return FOX_OK;
    /* The rename is durable only once the directory entry is. */
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return FOX_OK;
}

int
fox_mkdir_p(const char *path, unsigned mode, char *err, size_t errlen)
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
fox_append_line(const char *path, const char *line, char *err, size_t errlen)
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

void
fox_find_program(const char *name, const char *env, char *buf, size_t len)
{
    char self[PATH_MAX];
    const char *given = env ? getenv(env) : NULL;
    if (given && given[0]) {
        snprintf(buf, len, "%s", given);
        return;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        const char *dir = dirname(self);
        const char *cands[] = {"%s/%s", "%s/../daemon/%s", "%s/../client/%s"};
        for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
            snprintf(buf, len, cands[i], dir, name);
            if (access(buf, X_OK) == 0)
                return;
        }
    }
    snprintf(buf, len, "%s", name);
}
