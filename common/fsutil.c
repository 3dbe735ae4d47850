/* fsutil.c — atomic file writes, mkdir -p, line appends, directory locks (see fsutil.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* The pid of a "<name>.tmp.<pid>" name, or 0 for any other name. */
static long
temp_pid(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    char *end;
    while (t && strstr(t + 1, ".tmp."))
        t = strstr(t + 1, ".tmp.");
    if (!t || t == name || !t[5])
        return 0;
    long pid = strtol(t + 5, &end, 10);
    return *end == 0 && pid > 0 ? pid : 0;
}

int
fox_lock_dir(const char *dir, const char *name, int *fd, char *err, size_t errlen)
{
    char path[4096], pid[32];
    *fd = -1;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return fox_errf(err, errlen, FOX_EIO, "%s: path too long", dir);
    /* O_NOFOLLOW: a link planted in the directory must not make us truncate another file. */
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (f < 0)
        return fox_errf(err, errlen, FOX_EIO, "%s: %s", path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        ssize_t n = e == EWOULDBLOCK ? pread(f, pid, sizeof pid - 1, 0) : -1;
        close(f);
        if (e != EWOULDBLOCK)
            return fox_errf(err, errlen, FOX_EIO, "flock %s: %s", path, strerror(e));
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        return fox_errf(err, errlen, FOX_EBUSY, "%s is in use by another process (pid %s, lock %s)",
                        dir, pid[0] ? pid : "unknown", path);
    }
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)len, 0) != len) {
        int e = errno;
        close(f);
        return fox_errf(err, errlen, FOX_EIO, "write %s: %s", path, strerror(e));
    }
    *fd = f;
    return FOX_OK;
}

int
fox_remove_stale_temps(const char *dir, int depth, int *removed)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    if (!d)
        return errno == ENOENT ? FOX_OK : FOX_EIO;
    while ((de = readdir(d))) {
        char path[4096];
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path ||
            lstat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth > 0)
                fox_remove_stale_temps(path, depth - 1, removed);
            continue;
        }
        long pid = temp_pid(de->d_name);
        /* A live pid may be another writer's (or reused): leave its file alone. */
        if (S_ISREG(st.st_mode) && pid && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 &&
            errno == ESRCH && unlink(path) == 0)
            ++*removed;
    }
    closedir(d);
    return FOX_OK;
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

/* Hand each line read from fd to fn until its writers close it; then close it. */
static void
read_lines(int fd, fox_line_fn fn, void *arg)
{
    FILE *f = fdopen(fd, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    if (!f) {
        close(fd);
        return;
    }
    while ((n = getline(&line, &cap, f)) >= 0) {
        if (n > 0 && line[n - 1] == '\n')
            line[n - 1] = 0;
        fn(arg, line);
    }
    free(line);
    fclose(f);
}

int
fox_run_program(char *const argv[], fox_line_fn on_err, void *arg)
{
    extern char **environ;
    posix_spawn_file_actions_t fa, *fap = NULL;
    int p[2], status, rv;
    pid_t pid;
    if (on_err) {
        /* The pipe's ends close on exec, so that a program another thread starts holds neither. */
        if (pipe2(p, O_CLOEXEC) != 0)
            return -1;
        fap = &fa;
        if ((rv = posix_spawn_file_actions_init(fap)) != 0) {
            close(p[0]);
            close(p[1]);
            errno = rv;
            return -1;
        }
        rv = posix_spawn_file_actions_adddup2(fap, p[1], STDERR_FILENO);
    }
    if (!fap || rv == 0)
        rv = posix_spawnp(&pid, argv[0], fap, NULL, argv, environ);
    if (fap) {
        posix_spawn_file_actions_destroy(fap);
        close(p[1]);
        if (rv == 0)
            read_lines(p[0], on_err, arg);
        else
            close(p[0]);
    }
    if (rv != 0) {
        errno = rv;
        return -1;
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
