/*
 * cpus.h — one CPU kept for the control plane (internal to daemon/).
 *
 * A request crosses several threads (nng's, then the libuv loop, then nng's
 * again), and each wake-up is placed by the scheduler. One placed on a CPU
 * the trainer holds waits until the trainer's time slice ends, up to a
 * scheduler tick, while another CPU may sit idle: the control plane's
 * latency tail under training. foxd therefore splits the CPUs it may use
 * (its affinity, so that a cpuset or systemd's CPUAffinity= is respected):
 * the lowest one serves requests, training threads run on the others.
 *
 * With a single CPU there is nothing to split and every call is a no-op.
 * Not thread-safe: fox_cpus_reserve_control runs once, before the other
 * threads of the serving mode start.
 */
#ifndef FOX_DAEMON_CPUS_H
#define FOX_DAEMON_CPUS_H

/*
 * Keep one CPU for the control plane: the calling thread, and every thread
 * it creates afterwards (nng's), runs on it alone; threads that exist already
 * (a BLAS library's workers) move to the training CPUs. Returns the number
 * of training CPUs (the CPUs foxd may use when nothing was split), or -1 when
 * the affinity cannot be read or set (nothing was changed then).
 */
int fox_cpus_reserve_control(void);

/* On a training thread: run on the training CPUs (a no-op when nothing was split). */
void fox_cpus_leave_control(void);

#endif
