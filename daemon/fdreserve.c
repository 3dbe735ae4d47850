/* fdreserve.c — descriptors in reserve for the checkpoint (see fdreserve.h). */
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon/fdreserve.h"

/* A checkpoint opens its temp file and its directory; the rest is margin. */
#define RESERVE 8

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

void
fox_fd_reserve_release(void)
{
    for (int i = 0; i < RESERVE; i++)
        if (reserve[i] >= 0) {
            close(reserve[i]);
            reserve[i] = -1;
        }
}
