/*
 * test_optim.c — unit tests of the CPU optimizer (gpu/cpu/optim.c: Adam and
 * its clamped lanes, weight decay and L1, the guard, norm and clip, the
 * target sync) and of the replay ring's priority updates
 * (gpu/cpu/replay.c).
 *
 * Not tested here: the training loop that calls these (test_engine.c) and
 * the CUDA kernels (the GPU parity suite).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/bounds.h"
#include "gpu/cpu/optim.h"
#include "gpu/cpu/replay.h"
#include "gpu/per.h"
#include "gpu/rng.h"
#include "gpu/sentinel.h"
#include "tests/net_fixture.h"
#include "tests/testutil.h"

START_TEST(test_adam_step)
{
    /*
     * By hand, t = 2 (bias corrections 1 − 0.9² = 0.19, 1 − 0.999² = 0.001999),
     * grad_scale 2, lr 0.1, eps 1e-8:
     *   [0] g = 1:  m = 0.1,   v = 0.001,   p = 1 − 0.1·(0.1/0.19)/(sqrt(0.001/0.001999) + 1e-8)
     *   [1] g = −2: m = −0.11, v = 0.01399, p = −2 − 0.1·(−0.11/0.19)/(sqrt(0.01399/0.001999) +
     * 1e-8) [2] g = 0, m = v = 0: unchanged.
     */
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, -1.0f, 0.0f};
    float m[3] = {0.0f, 0.1f, 0.0f}, v[3] = {0.0f, 0.01f, 0.0f};
    fox_cpu_adam_step(p, g, m, v, 3, 0.1f, 0.9f, 0.999f, 1e-8f, 2, 2.0f);
    /* Float rounding of 1 − 0.999 alone is 1.3e-5 relative. */
    ck_assert_double_eq_tol(m[0], 0.1, 1e-7);
    ck_assert_double_eq_tol(v[0], 0.001, 3e-5 * 0.001);
    ck_assert_double_eq_tol(m[1], -0.11, 1e-7);
    ck_assert_double_eq_tol(v[1], 0.01399, 3e-5 * 0.01399);
    ck_assert_double_eq_tol(p[0], 0.9255863186954071, 1e-6);
    ck_assert_double_eq_tol(p[1], -1.978115500315636, 1e-6);
    ck_assert_float_eq(p[2], 0.5f);

    /* t = 1 with m = v = 0: the first step moves each weight by lr·sign(g). */
    float q[2] = {0.0f, 0.0f}, gq[2] = {3.0f, -0.001f}, mq[2] = {0}, vq[2] = {0};
    fox_cpu_adam_step(q, gq, mq, vq, 2, 0.01f, 0.9f, 0.999f, 1e-12f, 1, 1.0f);
    ck_assert_double_eq_tol(q[0], -0.01, 1e-7);
    ck_assert_double_eq_tol(q[1], 0.01, 1e-7);
}
END_TEST

/*
 * The clamped step four elements at a time (SSE2) gives the bits, the
 * engagement counts, maxima and flags of the element-by-element path (calls
 * of one element), on values that engage every clamp: NaN/Inf/huge
 * gradients, m and v past their bounds, weights pushed past theirs, and a
 * length that leaves a tail.
 */
START_TEST(test_adam_clamped_lanes_match_scalar)
{
    enum { N = 1003 };
    static float p[2][N], g[N], m[2][N], v[2][N];
    fox_rng r;
    fox_rng_seed(&r, 7);
    for (int k = 0; k < N; k++) {
        g[k] = fox_rng_normal(&r) * (k % 97 == 5 ? 1e6f : 0.1f);
        p[0][k] = fox_rng_normal(&r) * (k % 89 == 3 ? 2.9f : 0.5f);
        m[0][k] = fox_rng_normal(&r) * (k % 83 == 1 ? 50.0f : 0.01f);
        v[0][k] = fabsf((float)fox_rng_normal(&r)) * (k % 79 == 2 ? 50.0f : 1e-4f);
    }
    g[10] = NAN;
    g[11] = INFINITY;
    g[1001] = -INFINITY;
    memcpy(p[1], p[0], sizeof p[0]);
    memcpy(m[1], m[0], sizeof m[0]);
    memcpy(v[1], v[0], sizeof v[0]);
    fox_cpu_adam_clamp c[2] = {{.w_bound = 3.0f,
                                .m_bound = 1.0f,
                                .v_bound = 2.0f,
                                .w_slot = 44,
                                .m_slot = 36,
                                .v_slot = 40,
                                .w_diag = 3.0f,
                                .m_diag = 10.0f,
                                .v_diag = INFINITY}};
    c[1] = c[0];
    int flags[2][FOX_SENTINEL_SLOTS] = {{0}};
    for (int step = 1; step <= 3; step++) {
        fox_cpu_adam_step_clamped(p[0], g, m[0], v[0], N, 0.5f, 0.9f, 0.999f, 1e-8f, step, 1.0f,
                                  &c[0], flags[0]);
        for (int k = 0; k < N; k++)
            fox_cpu_adam_step_clamped(p[1] + k, g + k, m[1] + k, v[1] + k, 1, 0.5f, 0.9f, 0.999f,
                                      1e-8f, step, 1.0f, &c[1], flags[1]);
    }
    ck_assert_msg(memcmp(p[0], p[1], sizeof p[0]) == 0, "weights differ");
    ck_assert_msg(memcmp(m[0], m[1], sizeof m[0]) == 0, "m differs");
    ck_assert_msg(memcmp(v[0], v[1], sizeof v[0]) == 0, "v differs");
    ck_assert_msg(memcmp(flags[0], flags[1], sizeof flags[0]) == 0, "flags differ");
    ck_assert_uint_eq(c[0].w_engaged, c[1].w_engaged);
    ck_assert_uint_eq(c[0].m_engaged, c[1].m_engaged);
    ck_assert_uint_eq(c[0].v_engaged, c[1].v_engaged);
    ck_assert_uint_eq(c[0].total, c[1].total);
    ck_assert(c[0].w_max == c[1].w_max && c[0].m_max == c[1].m_max && c[0].v_max == c[1].v_max);
    /* Every clamp engaged, or the comparison proves little. */
    ck_assert_uint_gt(c[0].w_engaged, 0);
    ck_assert_uint_gt(c[0].m_engaged, 0);
    ck_assert_uint_gt(c[0].v_engaged, 0);
    ck_assert_int_eq(flags[0][36], 1);
    ck_assert_int_eq(flags[0][44], 1);
}
END_TEST

/*
 * The isfinite guard skips an element whose gradient is NaN or ±Inf: its m,
 * v and weight keep their bits (the seeds' Adam kernels return early), even
 * with momentum that would otherwise move it; every other element moves.
 * Bad gradients sit inside a four-lane group and in the scalar tail.
 */
START_TEST(test_adam_nonfinite_grad_skips_element)
{
    enum { N = 11 };
    float p[N], g[N], m[N], v[N], p0[N], m0[N], v0[N];
    for (int k = 0; k < N; k++) {
        p[k] = 0.5f - 0.1f * (float)k;
        g[k] = 0.01f * (float)(k + 1);
        m[k] = 0.02f;
        v[k] = 1e-3f;
    }
    const int bad[3] = {1, 6, 9};
    g[bad[0]] = NAN;
    g[bad[1]] = INFINITY;
    g[bad[2]] = -INFINITY;
    memcpy(p0, p, sizeof p);
    memcpy(m0, m, sizeof m);
    memcpy(v0, v, sizeof v);
    fox_cpu_adam_clamp c = fox_test_adam_clamp(100.0f, INFINITY, INFINITY);
    fox_cpu_adam_step_clamped(p, g, m, v, N, 0.1f, 0.9f, 0.999f, 1e-8f, 5, 1.0f, &c, NULL);
    for (int k = 0; k < N; k++) {
        int skipped = k == bad[0] || k == bad[1] || k == bad[2];
        if (skipped) {
            ck_assert_msg(memcmp(&p[k], &p0[k], sizeof p[k]) == 0, "weight %d moved", k);
            ck_assert_msg(memcmp(&m[k], &m0[k], sizeof m[k]) == 0, "m %d moved", k);
            ck_assert_msg(memcmp(&v[k], &v0[k], sizeof v[k]) == 0, "v %d moved", k);
        } else {
            ck_assert_msg(p[k] != p0[k] && m[k] != m0[k] && v[k] != v0[k], "element %d still", k);
        }
    }
    ck_assert_uint_eq(c.w_engaged + c.m_engaged + c.v_engaged, 0);
}
END_TEST

/*
 * A weight that is not finite is zeroed whatever its gradient: skipped by
 * the isfinite guard with a non-finite gradient (m and v kept), through
 * Mech 9's clamp_finite with a finite one; on the four-lane path and the
 * scalar tail alike.
 */
START_TEST(test_adam_zeroes_a_nonfinite_weight)
{
    enum { N = 10 };
    float p[N], g[N], m[N], v[N];
    for (int k = 0; k < N; k++) {
        p[k] = 0.5f;
        g[k] = 0.01f;
        m[k] = 0.02f;
        v[k] = 1e-3f;
    }
    /* Skipped in a group the lanes hand to the scalar path whole. */
    p[1] = NAN;
    g[1] = NAN;
    /* Updated on the lanes, all four gradients finite. */
    p[6] = INFINITY;
    /* Skipped in the scalar tail. */
    p[9] = -INFINITY;
    g[9] = NAN;
    fox_cpu_adam_clamp c = fox_test_adam_clamp(100.0f, INFINITY, INFINITY);
    fox_cpu_adam_step_clamped(p, g, m, v, N, 0.1f, 0.9f, 0.999f, 1e-8f, 5, 1.0f, &c, NULL);
    ck_assert(p[1] == 0.0f && p[6] == 0.0f && p[9] == 0.0f);
    ck_assert(m[1] == 0.02f && v[1] == 1e-3f && m[9] == 0.02f && v[9] == 1e-3f);
}
END_TEST

/*
 * Pearl B's consumers in the clamped step, by hand (t = 1, m = v = 0: the
 * update is lr · sign(g)): decoupled weight decay takes lr · wd · p0 off the
 * updated weight, the L1 step then shrinks |p| by lr · l1, to 0 at most, and
 * Mech 9's clamp comes last. Rates of 0 change nothing (the default).
 */
START_TEST(test_adam_weight_decay_and_l1)
{
    float p[4] = {1.0f, -0.5f, 0.02f, 3.0f}, g[4] = {1.0f, -1.0f, 1.0f, -1.0f};
    float m[4] = {0}, v[4] = {0};
    fox_cpu_adam_clamp c = fox_test_adam_clamp(2.0f, INFINITY, INFINITY);
    c.wd = 2.0f;
    c.l1 = 0.5f;
    fox_cpu_adam_step_clamped(p, g, m, v, 4, 0.01f, 0.9f, 0.999f, 1e-12f, 1, 1.0f, &c, NULL);
    /* [0]: 1 − 0.01 = 0.99, − 0.01·2·1 = 0.97, shrunk by 0.005 → 0.965 */
    ck_assert_double_eq_tol(p[0], 0.965, 1e-6);
    /* [1]: −0.5 + 0.01 = −0.49, + 0.01·2·0.5 = −0.48, shrunk → −0.475 */
    ck_assert_double_eq_tol(p[1], -0.475, 1e-6);
    /* [2]: 0.02 − 0.01 = 0.01, − 0.01·2·0.02 = 0.0096, shrunk → 0.0046 */
    ck_assert_double_eq_tol(p[2], 0.0046, 1e-6);
    /* [3]: 3.01 − 0.06 = 2.95 − 0.005 = 2.945, then Mech 9 clamps it to 2 */
    ck_assert(p[3] == 2.0f);
    ck_assert_uint_eq(c.w_engaged, 1);
    /* The proximal step stops at zero: a weight inside lr · l1 lands on exactly 0. */
    float q[2] = {0.003f, -0.002f}, gq[2] = {0.0f, 0.0f}, mq[2] = {0}, vq[2] = {0};
    c.wd = 0.0f;
    fox_cpu_adam_step_clamped(q, gq, mq, vq, 2, 0.01f, 0.9f, 0.999f, 1e-12f, 1, 1.0f, &c, NULL);
    ck_assert(q[0] == 0.0f && q[1] == 0.0f);
    ck_assert(fox_adam_regularize(0.7f, 0.9f, 0.01f, 0.0f, 0.0f) == 0.7f);
    ck_assert(fox_adam_regularize(0.7f, 0.9f, 0.01f, NAN, -1.0f) == 0.7f);
}
END_TEST

START_TEST(test_sanitize_norm_clip)
{
    float g[7] = {1.0f, NAN, INFINITY, -INFINITY, 2.0f, -NAN, -2.0f};
    size_t bad = 99;
    fox_cpu_grad_sanitize(g, 7, &bad);
    ck_assert_uint_eq(bad, 4);
    const float want[7] = {1.0f, 0.0f, 0.0f, 0.0f, 2.0f, 0.0f, -2.0f};
    for (int k = 0; k < 7; k++)
        ck_assert_float_eq(g[k], want[k]);
    fox_cpu_grad_sanitize(g, 7, NULL);
    ck_assert_double_eq_tol(fox_cpu_grad_norm(g, 7), 3.0, 1e-12);

    ck_assert_float_eq(fox_cpu_clip_scale(10.0, 5.0f), 0.5f);
    ck_assert_float_eq(fox_cpu_clip_scale(1.0, 5.0f), 1.0f);
    ck_assert_float_eq(fox_cpu_clip_scale(5.0, 5.0f), 1.0f);
    ck_assert_float_eq(fox_cpu_clip_scale(0.0, 5.0f), 1.0f);
    ck_assert_float_eq(fox_cpu_clip_scale(1e6, 0.0f), 1.0f); /* clipping off */
    ck_assert_float_eq(fox_cpu_clip_scale(INFINITY, 5.0f), 0.0f);
    ck_assert_float_eq(fox_cpu_clip_scale(NAN, 5.0f), 0.0f);
}
END_TEST

START_TEST(test_target_sync)
{
    float p[3] = {1.0f, 2.0f, 3.0f}, t[3] = {0.0f, 0.0f, 1.0f};
    fox_cpu_target_sync(t, p, 3, 0.25f);
    ck_assert_float_eq(t[0], 0.25f);
    ck_assert_float_eq(t[1], 0.5f);
    ck_assert_float_eq(t[2], 1.5f);
    fox_cpu_target_sync(t, p, 3, 0.0f);
    ck_assert_int_eq(memcmp(t, p, sizeof p), 0);
    float u[3] = {0};
    fox_cpu_target_sync(u, p, 3, 1.0f);
    ck_assert_int_eq(memcmp(u, p, sizeof p), 0);
}
END_TEST

/* A prioritized ring's leaf of slot i: priority^alpha. */
static double
leaf(const fox_replay *rb, int i)
{
    return rb->tree[rb->leaves + i];
}

/* A prioritized ring of capacity and alpha after n pushes of an empty transition. */
static void
filled_ring(fox_replay *rb, int capacity, float alpha, int n)
{
    FOX_CK_OK(fox_replay_init(rb, capacity, 1, alpha));
    fox_transition t;
    memset(&t, 0, sizeof t);
    for (int k = 0; k < n; k++)
        fox_replay_push(rb, &t);
}

/*
 * Priorities drawn before a collection's pushes reach only the slots those
 * pushes left alone (a full step gathers its batch before it collects): a
 * slot pushed over holds a new transition at the ring's max priority.
 */
START_TEST(test_replay_update_skips_pushed_over)
{
    fox_replay rb;
    filled_ring(&rb, 8, 1.0f, 6);
    fox_transition t;
    memset(&t, 0, sizeof t);
    uint64_t drawn = rb.pushes;
    for (int k = 0; k < 4; k++) /* slots 6, 7, 0, 1 */
        fox_replay_push(&rb, &t);
    const int32_t idx[4] = {0, 2, 7, 5};
    const float prio[4] = {3.0f, 4.0f, 5.0f, 6.0f};
    fox_replay_update(&rb, idx, prio, 4, drawn);
    ck_assert_double_eq(leaf(&rb, 0), 1.0);
    ck_assert_double_eq(leaf(&rb, 7), 1.0);
    ck_assert_double_eq_tol(leaf(&rb, 2), 4.0, 1e-5);
    ck_assert_double_eq_tol(leaf(&rb, 5), 6.0, 1e-5);
    ck_assert_float_eq_tol(rb.max_priority, 6.0f, 1e-5f);
    /* Nothing pushed since the draw: every slot takes its priority. */
    fox_replay_update(&rb, idx, prio, 4, rb.pushes);
    ck_assert_double_eq_tol(leaf(&rb, 0), 3.0, 1e-5);
    ck_assert_double_eq_tol(leaf(&rb, 7), 5.0, 1e-5);
    /* A whole ring's pushes since the draw: no slot does. */
    drawn = rb.pushes;
    for (int k = 0; k < 8; k++)
        fox_replay_push(&rb, &t);
    const float low[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    fox_replay_update(&rb, idx, low, 4, drawn);
    for (int k = 0; k < 4; k++)
        ck_assert_double_eq_tol(leaf(&rb, idx[k]), 6.0, 1e-5);
    fox_replay_clear(&rb);
    ck_assert_uint_eq(rb.pushes, 0);
    fox_replay_fini(&rb);
}
END_TEST

/*
 * The update in batch order: of a slot drawn twice the last entry stays, a
 * non-finite priority takes the max as it stands at its entry (raised by an
 * earlier one), and every inner node is exactly the sum of its children
 * (gpu/per.h), whatever the order of pushes and updates.
 */
START_TEST(test_replay_update_batch_order)
{
    fox_replay rb;
    filled_ring(&rb, 10, 0.5f, 10);
    fox_transition t;
    memset(&t, 0, sizeof t);
    const int32_t idx[5] = {3, 4, 3, 6, 8};
    const float prio[5] = {9.0f, 16.0f, 4.0f, NAN, 1.0f};
    fox_replay_update(&rb, idx, prio, 5, rb.pushes);
    float p16 = 16.0f + FOX_PER_PRIORITY_EPS;
    ck_assert(rb.tree[rb.leaves + 3] == fox_per_leaf(4.0f + FOX_PER_PRIORITY_EPS, 0.5f));
    ck_assert(rb.tree[rb.leaves + 6] == fox_per_leaf(p16, 0.5f));
    ck_assert(rb.max_priority == p16);
    for (int round = 0; round < 50; round++) {
        int32_t j[3] = {round % 10, (round * 7) % 10, (round * 3 + 1) % 10};
        float q[3] = {0.1f * round, 1.0f / (1 + round), 3.3f};
        fox_replay_update(&rb, j, q, 3, rb.pushes);
        fox_replay_push(&rb, &t);
    }
    for (int node = 1; node < rb.leaves; node++)
        ck_assert(rb.tree[node] == rb.tree[2 * node] + rb.tree[2 * node + 1]);
    for (int i = 10; i < rb.leaves; i++)
        ck_assert(rb.tree[rb.leaves + i] == 0.0);
    /* The draw from given uniforms: slot i holds mass [prefix_i, prefix_i + leaf_i). */
    int32_t out[4];
    float w[4];
    const float u[4] = {0.0f, 0.5f, 0.25f, 0.999f};
    fox_replay_sample_at(&rb, 4, 0.4f, u, out, w);
    double slice = rb.tree[1] / 4.0, prefix = 0.0;
    for (int b = 0; b < 4; b++) {
        double m = ((double)b + u[b]) * slice;
        prefix = 0.0;
        for (int i = 0; i < out[b]; i++)
            prefix += rb.tree[rb.leaves + i];
        ck_assert(m >= prefix - 1e-12 && m < prefix + rb.tree[rb.leaves + out[b]] + 1e-12);
        ck_assert(w[b] > 0.0f && w[b] <= 1.0f);
    }
    fox_replay_fini(&rb);
}
END_TEST

static Suite *
optim_suite(void)
{
    Suite *su = suite_create("optim");
    TCase *tc = tcase_create("optim");
    tcase_add_test(tc, test_adam_step);
    tcase_add_test(tc, test_adam_clamped_lanes_match_scalar);
    tcase_add_test(tc, test_adam_nonfinite_grad_skips_element);
    tcase_add_test(tc, test_adam_zeroes_a_nonfinite_weight);
    tcase_add_test(tc, test_adam_weight_decay_and_l1);
    tcase_add_test(tc, test_sanitize_norm_clip);
    tcase_add_test(tc, test_target_sync);
    suite_add_tcase(su, tc);

    tc = tcase_create("replay");
    tcase_add_test(tc, test_replay_update_skips_pushed_over);
    tcase_add_test(tc, test_replay_update_batch_order);
    suite_add_tcase(su, tc);
    return su;
}

int
main(void)
{
    return fox_test_run_suite(optim_suite());
}
