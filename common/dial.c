/*
 * dial.c — nng's synchronous dialer start within a bound (dial.h).
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "common/dial.h"

/* A synchronous dialer start on a thread of its own, so that its caller can stop waiting. */
typedef struct dial_wait {
    nng_dialer d;
    int rv, done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} dial_wait;

static void *
dial_thread(void *arg)
{
    dial_wait *w = arg;
    int rv = nng_dialer_start(w->d, 0);
    pthread_mutex_lock(&w->mu);
    w->rv = rv;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int
fox_dialer_start_within(nng_dialer d, int timeout_ms)
{
    if (timeout_ms <= 0)
        return nng_dialer_start(d, 0);
    dial_wait w = {.d = d};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_t th;
    if (pthread_create(&th, NULL, dial_thread, &w) != 0) {
        pthread_mutex_destroy(&w.mu);
        pthread_cond_destroy(&w.cv);
        return nng_dialer_start(d, 0);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = until.tv_nsec + (long long)timeout_ms * 1000000;
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    int timed_out = 0;
    pthread_mutex_lock(&w.mu);
    while (!w.done && !timed_out)
        timed_out = pthread_cond_timedwait(&w.cv, &w.mu, &until) == ETIMEDOUT;
    int late = !w.done; /* decided here: a start that ends from now on is given up */
    pthread_mutex_unlock(&w.mu);
    if (late)
        nng_dialer_close(d);
    pthread_join(th, NULL);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return late ? NNG_ETIMEDOUT : w.rv;
}

