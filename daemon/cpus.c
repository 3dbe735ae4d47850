/* cpus.c — one CPU kept for the control plane (see cpus.h). */
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/cpus.h"

static cpu_set_t training;
static int split; /* training holds the CPUs the control plane does not use */

/* Move every thread of this process but the caller to the training CPUs. */
static void
move_others(pid_t self)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0 && tid != self)
            sched_setaffinity(tid, sizeof training, &training);
    }
    closedir(d);
}

int
fox_cpus_reserve_control(void)
{
    cpu_set_t allowed, control;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return -1;
    int n = CPU_COUNT(&allowed);
    if (n < 2)
        return n;
    int first = 0;
    while (!CPU_ISSET(first, &allowed))
        first++;
    CPU_ZERO(&control);
    CPU_SET(first, &control);
    training = allowed;
    CPU_CLR(first, &training);
    if (sched_setaffinity(0, sizeof control, &control) != 0)
        return -1;
    split = 1;
    move_others((pid_t)syscall(SYS_gettid));
    return n - 1;
}

void
fox_cpus_leave_control(void)
{
    if (split)
        sched_setaffinity(0, sizeof training, &training);
}
