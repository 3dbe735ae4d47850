/*
 * fold_reset.h — what reset_for_fold must leave, read back through the
 * backend's own state, for the CPU drills and the GPU drills alike: every
 * Adam moment zero, the target equal to the online net bit for bit, the
 * fold's counters zero, no flag set, and each ISV slot at its table's reset
 * value or, for a `keep` slot, as it was. And after a poisoned fold, a new
 * fold's ISV is finite in every slot (a `keep` slot carries over).
 */
#ifndef FOX_TEST_FOLD_RESET_H
#define FOX_TEST_FOLD_RESET_H

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/engine_impl.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"

/* The training state of e: params, target, adam_m, adam_v [np] each, in one block. */
static inline float *
fox_test_state(fox_engine *e, size_t np, fox_train_counters *c)
{
    float *s = malloc(4 * np * sizeof(float));
    ck_assert_ptr_nonnull(s);
    FOX_CK_OK(e->ops->state_io(e->m->be, 0, s, s + np, s + 2 * np, s + 3 * np, c));
    return s;
}

/*
 * An engine from cfg trains `steps` (Adam moves, the target lags, its fault sets slot `fired`
 * without a halt); after fox_engine_reset_for_fold the state is a fresh fold's, and the fold
 * trains on another `steps`.
 */
static inline void
fox_test_fold_reset(const fox_config *cfg, int steps, int fired)
{
    fox_engine *e = fox_test_engine(cfg);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, steps, NULL));
    size_t np = fox_engine_param_count(e);
    fox_train_counters c;
    float *s = fox_test_state(e, np, &c);
    const volatile float *isv = fox_engine_isv(e);
    float before[FOX_ISV_TOTAL_DIM];
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
        before[i] = isv[i];
    int moved = 0;
    for (size_t k = 0; k < np; k++)
        moved |= s[2 * np + k] != 0.0f;
    ck_assert_msg(c.adam_t > 0 && c.train_steps > 0 && moved, "not trained yet");
    ck_assert_msg(memcmp(s, s + np, np * sizeof(float)) != 0, "the target already equals params");
    ck_assert_msg(fox_engine_flags(e)[fired], "slot %d not set before the reset", fired);
    free(s);

    FOX_CK_ENGINE_OK(e, fox_engine_reset_for_fold(e));
    s = fox_test_state(e, np, &c);
    for (size_t k = 2 * np; k < 4 * np; k++)
        ck_assert_msg(s[k] == 0.0f, "Adam %s [%zu] = %g after the reset", k < 3 * np ? "m" : "v",
                      k % np, (double)s[k]);
    ck_assert_msg(memcmp(s, s + np, np * sizeof(float)) == 0, "target != params after the reset");
    ck_assert(c.adam_t == 0 && c.step == 0 && c.train_steps == 0 && c.env_steps == 0);
    free(s);
    ck_assert_uint_eq(fox_sentinel_mask(fox_engine_flags(e)), 0);
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++) {
        float v, now = isv[i];
        if (fox_isv_reset_rule(i, &v) == FOX_ISV_KEEP)
            ck_assert_msg(memcmp(&now, &before[i], sizeof now) == 0, "keep slot %s changed",
                          fox_isv_name(i));
        else
            ck_assert_msg(now == v, "%s = %g after the reset, its rule says %g", fox_isv_name(i),
                          (double)now, (double)v);
    }
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, steps, NULL));
    fox_engine_destroy(e);
}

/* Every ISV slot of e is finite (what: the drill, for the message). */
static inline void
fox_test_isv_finite(const fox_engine *e, const char *what)
{
    const volatile float *isv = fox_engine_isv(e);
    for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++) {
        float v = isv[i];
        ck_assert_msg(isfinite(v), "%s: %s = %g in the new fold", what, fox_isv_name(i), (double)v);
    }
}

#endif
