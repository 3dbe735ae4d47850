/*
 * fdreserve.c — descriptors in reserve for the checkpoint and the records,
 * and the connections' share of the rest (see fdreserve.h).
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon/fdreserve.h"

/*
 * A checkpoint opens its temp file and its directory, a record file one at
 * a time, the run's close foxplot's pipe; the rest is margin.
 */
#define RESERVE 8

/*
 * Descriptors kept free beside the reserve for what the loop and nng open
 * while they run: the metrics textfile, the log file reopened, the ipc
 * probe's connection, and the connections a flood has made that nng has
 * accepted but not yet handed over for the cap to close.
 */
#define MARGIN 32

static int reserve[RESERVE] = {-1, -1, -1, -1, -1, -1, -1, -1};

long
fox_fd_raise_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur == RLIM_INFINITY ? -1 : (long)rl.rlim_cur;
}

void
fox_fd_reserve_take(void)
{
    for (int i = 0; i < RESERVE; i++)
        if (reserve[i] < 0)
            reserve[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void
reserve_release(void)
{
    for (int i = 0; i < RESERVE; i++)
        if (reserve[i] >= 0) {
            close(reserve[i]);
            reserve[i] = -1;
        }
}

typedef struct reserve_job {
    int (*fn)(void *arg);
    void *arg;
    int private_table; /* whether unshare gave the thread its own table */
    int rv;
} reserve_job;

static void *
reserve_thread(void *p)
{
    reserve_job *j = p;
    if (unshare(CLONE_FILES) != 0)
        return NULL;
    j->private_table = 1;
    /* Closed in this thread's copy only: the process's table keeps them taken. */
    for (int i = 0; i < RESERVE; i++)
        if (reserve[i] >= 0)
            close(reserve[i]);
    j->rv = j->fn(j->arg);
    return NULL;
}

int
fox_fd_reserve_run(int (*fn)(void *arg), void *arg, int own_table)
{
    reserve_job j = {fn, arg, 0, 0};
    pthread_t th;
    if (own_table && pthread_create(&th, NULL, reserve_thread, &j) == 0) {
        pthread_join(th, NULL);
        if (j.private_table)
            return j.rv;
    }
    reserve_release();
    j.rv = fn(arg);
    fox_fd_reserve_take();
    return j.rv;
}

int
fox_fd_connection_budget(long limit)
{
    DIR *d = opendir("/proc/self/fd");
    if (limit < 0 || !d) {
        if (d)
            closedir(d);
        return -1;
    }
    /* "." and ".." are not descriptors, and the directory's own is gone once it closes. */
    long open_now = -1;
    for (struct dirent *e; (e = readdir(d));)
        open_now += e->d_name[0] != '.';
    closedir(d);
    long budget = limit - open_now - MARGIN;
    return budget < 1 ? 1 : budget > (1 << 30) ? 1 << 30 : (int)budget;
}
