/*
 * clock.h — the two clocks the programs read, in milliseconds: the
 * monotonic one for intervals and timeouts (it never jumps when the wall
 * clock is set), and the wall clock for time stamps a person or another
 * machine reads. Header-only so that the client links it without the
 * engine. Thread-safe.
 */
#ifndef FOX_CLOCK_H
#define FOX_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline int64_t
fox_clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds on the monotonic clock: only differences mean something. */
static inline int64_t
fox_mono_ms(void)
{
    return fox_clock_ms(CLOCK_MONOTONIC);
}

/* Seconds on the monotonic clock to the nanosecond: intervals shorter than a millisecond add up. */
static inline double
fox_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Milliseconds since the epoch. */
static inline int64_t
fox_wall_ms(void)
{
    return fox_clock_ms(CLOCK_REALTIME);
}

/*
 * The UTC time now as prefix + "20260101T120000Z" into buf: a name for a
 * run's or a sweep's directory that sorts by time and reads the same in
 * every time zone.
 */
static inline void
fox_utc_stamp(char *buf, size_t len, const char *prefix)
{
    char fmt[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    snprintf(fmt, sizeof fmt, "%s%%Y%%m%%dT%%H%%M%%SZ", prefix);
    strftime(buf, len, fmt, &tm);
}

#endif
