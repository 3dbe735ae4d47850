/*
 * test_lookahead.c — the greedy evaluation walk with predicted bars
 * (gpu/lookahead.h) against the walk of one forward pass per bar: the same
 * actions bar for bar under policies that hold and policies that change
 * every bar, through a scripted backend, walked alone or side by side with
 * other walks (as the engine walks its members); and the same evaluation figures,
 * bit for bit, from the CPU backend's network before and after training
 * (the CUDA backend's walk is tests/test_cuda_parity.c's).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/engine_impl.h"
#include "gpu/lookahead.h"
#include "tests/testutil.h"

#define BARS 3000
#define S_DIM 8
#define BAND 0.1f /* a no-trade band in the scripted Q's units: the walks keep to it alike */

/* A scripted network: Q from the state's first market feature and its portfolio features. */
typedef struct scripted {
    int chaotic; /* 0: long/flat/short by the market feature; 1: a hash of the whole state */
    int64_t rows;
} scripted;

static uint32_t
hash_bits(const float *x, int n)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        h = (h ^ b) * 16777619u;
    }
    return h;
}

static int
scripted_q_values(void *arg, const float *s, int B, float *q)
{
    scripted *sc = arg;
    for (int b = 0; b < B; b++) {
        const float *x = s + (size_t)b * S_DIM;
        float *qb = q + (size_t)b * 12;
        uint32_t h = hash_bits(x, S_DIM);
        for (int k = 0; k < 12; k++)
            qb[k] = sc->chaotic ? (float)((h >> (k * 2)) & 3u) : 0.0f;
        if (!sc->chaotic) {
            qb[0] = -x[0];   /* short */
            qb[1] = 0.3f;    /* flat */
            qb[2] = x[0];    /* long */
            qb[9] = 1.0f;    /* the slowest urgency: the position moves a third a bar */
            qb[4] = x[S_DIM - 3] > 0.5f ? 1.0f : 0.0f; /* the size depends on the position */
        }
    }
    sc->rows += B;
    return FOX_OK;
}

typedef struct scripted_world {
    fox_model_layout lay;
    fox_features feat;
    float norm[BARS * 2];
    float close[BARS];
    fox_env_bars bars;
    fox_env_params p;
} scripted_world;

static void
world_init(scripted_world *w)
{
    memset(w, 0, sizeof *w);
    const int sizes[4] = {3, 4, 2, 3};
    w->lay.S = S_DIM;
    w->lay.n_branches = 4;
    for (int d = 0, off = 0; d < 4; off += sizes[d], d++) {
        w->lay.branch_size[d] = sizes[d];
        w->lay.branch_off[d] = off;
    }
    w->lay.n_actions = 12;
    w->feat.n_bars = BARS;
    w->feat.n_feat = 2;
    w->feat.norm = w->norm;
    fox_rng rng;
    fox_rng_seed(&rng, 7);
    double logp = log(100.0);
    for (int t = 0; t < BARS; t++) {
        logp += 0.01 * (fox_rng_uniform(&rng) - 0.5);
        w->close[t] = (float)exp(logp);
        w->norm[2 * t] = (float)sin(t / 40.0);
        w->norm[2 * t + 1] = (float)(t % 7);
    }
    w->bars = (fox_env_bars){NULL, NULL, NULL, w->close};
    w->p = (fox_env_params){1e-4f, 1e-4f, 5e-5f, 1.0f, 4, 3};
}

/* Rows of one scripted forward pass: a pass of more rows is cut, as the engine cuts it. */
#define CALL_ROWS 48

/* One scripted walk of two segments: its network, its lookahead, where it is. */
typedef struct scripted_walker {
    scripted *sc;
    fox_lookahead *la;
    int t[2];
    fox_env_pos st[2];
    fox_lookahead_seg segs[2];
    int n;
    fox_lookahead_pass pass;
    int32_t (*actions)[BARS][4]; /* actions[k][t]: segment k's action at bar t */
    int64_t passes;
} scripted_walker;

static const int seg_begin[2] = {100, 1500}, seg_end[2] = {1500, BARS};

/*
 * n walks, each of two segments in lockstep, side by side as the engine walks
 * its members: every round, every walk's prepare, then every walk's pass,
 * then every walk's consume. window_max[i] bounds walk i's predictions.
 */
static void
scripted_walks(scripted_world *w, int n, scripted *const *sc, const int *window_max,
               int32_t (*const *actions)[BARS][4], int64_t *passes)
{
    scripted_walker wk[3];
    ck_assert_int_le(n, 3);
    for (int i = 0; i < n; i++) {
        wk[i] = (scripted_walker){.sc = sc[i], .actions = actions[i]};
        wk[i].la = fox__lookahead_new(&w->lay, 2, window_max[i]);
        ck_assert_ptr_nonnull(wk[i].la);
        for (int k = 0; k < 2; k++) {
            wk[i].t[k] = seg_begin[k];
            wk[i].st[k] = (fox_env_pos){0, w->close[seg_begin[k]], 0};
        }
    }
    for (;;) {
        int walking = 0;
        for (int i = 0; i < n; i++) {
            scripted_walker *x = &wk[i];
            x->n = 0;
            for (int k = 0; k < 2; k++)
                if (x->t[k] + 1 < seg_end[k])
                    x->segs[x->n++] = (fox_lookahead_seg){k, x->t[k], seg_end[k], &x->st[k], BAND};
            walking += x->n;
            FOX_CK_OK(fox__lookahead_prepare(x->la, &w->feat, &w->p, &w->bars, x->segs, x->n,
                                             &x->pass));
            ck_assert_int_le(x->pass.rows, 2 * window_max[i]);
        }
        if (walking == 0)
            break;
        for (int i = 0; i < n; i++)
            for (int r = 0; r < wk[i].pass.rows; r += CALL_ROWS, wk[i].passes++) {
                int B = wk[i].pass.rows - r < CALL_ROWS ? wk[i].pass.rows - r : CALL_ROWS;
                FOX_CK_OK(scripted_q_values(wk[i].sc, wk[i].pass.s + (size_t)r * S_DIM, B,
                                            wk[i].pass.q + (size_t)r * 12));
            }
        for (int i = 0; i < n; i++) {
            scripted_walker *x = &wk[i];
            int32_t a[2][4];
            fox__lookahead_consume(x->la, &w->p, x->segs, x->n, a);
            for (int j = 0; j < x->n; j++) {
                int k = x->segs[j].id;
                memcpy(x->actions[k][x->t[k]], a[j], sizeof a[j]);
                fox_env_step(&w->p, &w->bars, x->t[k], &x->st[k], a[j]);
                x->t[k]++;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        passes[i] = wk[i].passes;
        fox__lookahead_free(wk[i].la);
    }
}

/* One walk alone. */
static void
scripted_walk(scripted_world *w, scripted *sc, int window_max, int32_t (*actions)[BARS][4],
              int64_t *passes)
{
    scripted_walks(w, 1, &sc, &window_max, &actions, passes);
}

static void
compare_walks(int chaotic, double max_passes_per_bar)
{
    static scripted_world w;
    static int32_t ref[2][BARS][4], fast[2][BARS][4];
    world_init(&w);
    memset(ref, 0, sizeof ref);
    memset(fast, 0, sizeof fast);
    scripted sc_ref = {chaotic, 0}, sc_fast = {chaotic, 0};
    int64_t p_ref, p_fast;
    scripted_walk(&w, &sc_ref, 1, ref, &p_ref);
    scripted_walk(&w, &sc_fast, FOX_LOOKAHEAD_MAX, fast, &p_fast);
    int changes = 0;
    for (int k = 0; k < 2; k++)
        for (int t = 1; t < BARS; t++)
            changes += memcmp(ref[k][t], ref[k][t - 1], sizeof ref[k][t]) != 0;
    double bars = (1500 - 100 - 1) + (BARS - 1500 - 1);
    printf("lookahead, %s policy: %d action changes; %lld passes and %lld rows for %.0f bars "
           "(one a bar: %lld passes)\n",
           chaotic ? "chaotic" : "holding", changes, (long long)p_fast, (long long)sc_fast.rows,
           bars, (long long)p_ref);
    ck_assert_msg(memcmp(ref, fast, sizeof ref) == 0, "the walks chose different actions");
    ck_assert_msg(changes > (chaotic ? bars / 2 : 20), "the policy too rarely changes its mind");
    ck_assert_msg(p_fast <= max_passes_per_bar * bars, "%lld passes for %.0f bars",
                  (long long)p_fast, bars);
    ck_assert_int_eq(sc_ref.rows, bars); /* one a bar: a row for each segment's every bar */
}

/* A policy that holds its action for stretches: few passes, the same actions. */
START_TEST(holding_policy_same_actions_few_passes)
{
    compare_walks(0, 0.1);
}
END_TEST

/* A policy whose action changes nearly every bar: every guess breaks, the actions still agree. */
START_TEST(chaotic_policy_same_actions)
{
    compare_walks(1, 1.0);
}
END_TEST

/*
 * Walks side by side (the engine's members), each round's halves interleaved
 * across them, choose the actions and take the passes of each walk alone:
 * a lookahead keeps nothing of another's between its prepare and its consume.
 */
START_TEST(walks_side_by_side_are_each_walk_alone)
{
    static scripted_world w;
    static int32_t alone[3][2][BARS][4], together[3][2][BARS][4];
    world_init(&w);
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    /* A holding and a chaotic policy with predictions, and the holding one a bar at a time. */
    scripted sa[3] = {{0, 0}, {1, 0}, {0, 0}}, st[3] = {{0, 0}, {1, 0}, {0, 0}};
    const int window[3] = {FOX_LOOKAHEAD_MAX, FOX_LOOKAHEAD_MAX, 1};
    int64_t p_alone[3], p_together[3];
    for (int i = 0; i < 3; i++)
        scripted_walk(&w, &sa[i], window[i], alone[i], &p_alone[i]);
    scripted *sc[3] = {&st[0], &st[1], &st[2]};
    int32_t(*acts[3])[BARS][4] = {together[0], together[1], together[2]};
    scripted_walks(&w, 3, sc, window, acts, p_together);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(memcmp(alone[i], together[i], sizeof alone[i]) == 0,
                      "walk %d chose other actions beside the others", i);
        ck_assert_int_eq(p_together[i], p_alone[i]);
        ck_assert_int_eq(st[i].rows, sa[i].rows);
    }
    /* The walks differ from each other: the check above could tell them apart. */
    ck_assert(memcmp(alone[0], alone[1], sizeof alone[0]) != 0);
    ck_assert_int_lt(p_alone[0], p_alone[2]);
}
END_TEST

/* Every bar an evaluation walk reports to the engine's per-bar hook, in order. */
typedef struct bar_log {
    int n, cap;
    struct logged_bar {
        int split, policy, bar;
        double cum;
    } *bar;
} bar_log;

static void
log_bar(void *arg, fox_split split, fox_policy policy, int bar, double cum_net)
{
    bar_log *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4096;
        l->bar = realloc(l->bar, (size_t)l->cap * sizeof *l->bar);
        ck_assert_ptr_nonnull(l->bar);
    }
    l->bar[l->n++] = (struct logged_bar){(int)split, (int)policy, bar, cum_net};
}

/*
 * Policy's walk of both splits with the member's lookahead swapped for la,
 * its figures into r, the bars its hook saw into l, and the forward passes
 * and greedy bars it counted into the run's times into *passes and *bars.
 */
static void
walk_with(fox_engine *e, fox_lookahead *la, fox_policy policy, fox_eval_result r[2], bar_log *l,
          int64_t *passes, int64_t *bars)
{
    const fox_split both[2] = {FOX_SPLIT_VALIDATION, FOX_SPLIT_TEST};
    fox_lookahead *own = e->m->ahead;
    fox_engine_times t0 = e->times;
    e->m->ahead = la;
    l->n = 0;
    fox_engine_set_eval_hook(e, log_bar, l);
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate_splits(e, both, 2, policy, r));
    fox_engine_set_eval_hook(e, NULL, NULL);
    e->m->ahead = own;
    *passes = e->times.eval_passes - t0.eval_passes;
    *bars = e->times.eval_bars - t0.eval_bars;
    /* One hook call per decision bar of each split, whatever the passes. */
    ck_assert_int_eq(l->n, r[0].bars + r[1].bars);
}

/* The two walks' figures and hook calls are the same to the bit. */
static void
assert_same_walks(fox_policy policy, const fox_eval_result rf[2], const fox_eval_result rr[2],
                  const bar_log *lf, const bar_log *lr)
{
    for (int k = 0; k < 2; k++)
        ck_assert_msg(memcmp(&rf[k], &rr[k], sizeof rf[k]) == 0,
                      "policy %d, split %d: Sharpe %.17g with predicted bars, %.17g one a bar",
                      (int)policy, k, rf[k].sharpe, rr[k].sharpe);
    ck_assert_int_eq(lf->n, lr->n);
    for (int i = 0; i < lf->n; i++) {
        const struct logged_bar *a = &lf->bar[i], *b = &lr->bar[i];
        ck_assert_msg(a->split == b->split && a->policy == (int)policy &&
                          b->policy == (int)policy && a->bar == b->bar && a->cum == b->cum,
                      "policy %d: hook call %d differs (bar %d vs %d)", (int)policy, i, a->bar,
                      b->bar);
    }
}

/*
 * The CPU backend's network, untrained and trained: the fold figures and the
 * per-bar hook's calls are identical; the baselines, which take no forward
 * pass, walk the same and count no pass.
 */
START_TEST(engine_walks_identical)
{
    fox_config c;
    fox_test_small_net(&c);
    /* A no-trade band as well: the action depends on the position besides Q. */
    const char *pairs[] = {"data.synth_bars=6000", "train.learning_starts=256", "policy.band=2",
                           NULL};
    fox_test_set_pairs(&c, pairs);
    fox_engine *e = fox_test_engine(&c);
    /* The CPU backend walks one pass a bar (its eval_lookahead); CUDA predicts. */
    ck_assert_int_eq(fox_cpu_backend_ops.eval_lookahead, 1);
    fox_lookahead *ref = fox__lookahead_new(&e->lay, FOX_EVAL_SPLITS_MAX, 1);
    fox_lookahead *fast = fox__lookahead_new(&e->lay, FOX_EVAL_SPLITS_MAX, FOX_LOOKAHEAD_MAX);
    bar_log lf = {0}, lr = {0};
    int64_t pf, barsf, pr, barsr;
    for (int round = 0; round < 3; round++) {
        fox_eval_result rf[2], rr[2];
        walk_with(e, fast, FOX_POLICY_GREEDY, rf, &lf, &pf, &barsf);
        walk_with(e, ref, FOX_POLICY_GREEDY, rr, &lr, &pr, &barsr);
        printf("engine walk after %d steps: Sharpe val %.4f test %.4f, turnover %.4f; "
               "%lld passes for %lld bars (one a bar: %lld passes)\n",
               round * 300, rf[0].sharpe, rf[1].sharpe, rf[1].turnover, (long long)pf,
               (long long)barsf, (long long)pr);
        assert_same_walks(FOX_POLICY_GREEDY, rf, rr, &lf, &lr);
        ck_assert_int_eq(barsf, barsr);
        ck_assert_int_eq(barsf, rf[0].bars + rf[1].bars);
        ck_assert_int_lt(pf, pr);
        FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 300, NULL));
    }
    for (int p = FOX_POLICY_BUY_HOLD; p < FOX_POLICY_RULE; p++) { /* the regime generator has no rule */
        fox_eval_result rf[2], rr[2];
        walk_with(e, fast, (fox_policy)p, rf, &lf, &pf, &barsf);
        walk_with(e, ref, (fox_policy)p, rr, &lr, &pr, &barsr);
        assert_same_walks((fox_policy)p, rf, rr, &lf, &lr);
        /* A rule takes no forward pass, and its bars are no greedy bars. */
        ck_assert_int_eq(pf + pr, 0);
        ck_assert_int_eq(barsf + barsr, 0);
    }
    free(lf.bar);
    free(lr.bar);
    fox__lookahead_free(fast);
    fox__lookahead_free(ref);
    fox_engine_destroy(e);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("lookahead");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, holding_policy_same_actions_few_passes);
    tcase_add_test(tc, chaotic_policy_same_actions);
    tcase_add_test(tc, walks_side_by_side_are_each_walk_alone);
    tcase_add_test(tc, engine_walks_identical);
    suite_add_tcase(s, tc);
    return fox_test_run_suite(s);
}
