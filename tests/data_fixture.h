/*
 * data_fixture.h — what the data tests (test_data.c, test_csv.c,
 * test_features.c) share: a bar's log return and the check that a series
 * was left zeroed. Static inline only, as in testutil.h.
 */
#ifndef FOX_TESTS_DATA_FIXTURE_H
#define FOX_TESTS_DATA_FIXTURE_H

#include <math.h>
#include <string.h>

#include "gpu/data.h"

static inline double
logret(const fox_series *s, int i)
{
    return log((double)s->close[i] / (double)s->close[i - 1]);
}

static inline int
series_zeroed(const fox_series *s)
{
    static const fox_series zero;
    return memcmp(s, &zero, sizeof(zero)) == 0;
}

#endif
