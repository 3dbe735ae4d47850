/*
 * test_members.c — a population in one engine (engine.members): each member
 * is the run of its own seed, and of its own values of the member keys
 * (common/member_keys.h), alone, bit for bit; a member that halts is
 * frozen while the fold goes on (down to engine.quorum); the fold report
 * carries every member's walk and their spread; a checkpoint keeps every
 * member. Built twice: on the CPU backend, and as test_cuda_members
 * (FOX_TEST_CUDA) on the CUDA backend, where members that differ in their
 * seeds alone train as one population (one step and one evaluation pass
 * for all, its products batched over the members: each member its seed
 * alone within the products' rounding), and members that hold other keys
 * apart run their chunks side by side and must still give each run's bits
 * alone; that one exits 77 (skipped) without a device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gpu/engine_impl.h"
#include "tests/testutil.h"
#ifdef FOX_TEST_CUDA
#include "gpu/cuda/debug.h"
#endif

#define SEED 7

static void
population_config(fox_config *c, int members)
{
    fox_test_small_net(c);
    /* A fold here pushes under 10000 transitions a member: a ring of 65536 never wraps, and
     * spares every member's engine the default's 56 MB zeroed (seconds under MALLOC_PERTURB_). */
    const char *pairs[] = {"data.synth_bars=6000", "train.learning_starts=256",
                           "train.replay_capacity=65536", NULL};
    fox_test_set_pairs(c, pairs);
#ifdef FOX_TEST_CUDA
    const char *device[] = {"engine.backend=cuda", "env.n_envs=64", "train.batch=64", NULL};
    fox_test_set_pairs(c, device);
#endif
    c->seed = SEED;
    c->members = members;
    /* A set slot halts its member: the halts below are the drills' faults. */
    c->halt_rule = FOX_HALT_RULE_STRICT;
}

/*
 * Each of n member-key lists into c: the list as it is (member < 0, a population's), or its
 * member-th value alone (that member's run alone).
 */
static void
set_lists(fox_config *c, const char *const lists[][2], size_t n, int member)
{
    char err[256], one[32];
    for (size_t i = 0; i < n; i++) {
        const char *v = lists[i][1];
        for (int j = 0; j < member; j++)
            v = strchr(v, ',') + 1;
        snprintf(one, sizeof one, "%.*s", (int)strcspn(v, ","), v);
        ck_assert_msg(fox_config_set(c, lists[i][0], member < 0 ? lists[i][1] : one, err,
                                     sizeof err) == FOX_OK,
                      "%s", err);
    }
}

/* Two epochs of 60 full steps each, in chunks of 20, the reports of the second kept. */
static void
two_epochs(fox_engine *e, fox_epoch_report *ep, fox_fold_report *fr)
{
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int chunk = 0; chunk < 3; chunk++)
            FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 20, NULL));
        FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, ep));
    }
    FOX_CK_OK(fox_engine_fold_report(e, fr));
}

#ifndef FOX_TEST_CUDA
/*
 * Member k of a population that ran two_epochs (its reports ep and fr)
 * against config a run alone: the same weights, bit for bit, and the same
 * walks. Its evaluation, walked side by side with the other members', is its
 * walk alone to the bit: the figures of the chosen epoch and of the last,
 * the band, and the per-bar returns of both test walks. The lone run's
 * reports go to *aep and *afr.
 */
static void
member_as_alone(fox_engine *pop, const fox_epoch_report *ep, const fox_fold_report *fr, int k,
                const fox_config *a, fox_epoch_report *aep, fox_fold_report *afr)
{
    fox_engine *alone = fox_test_engine(a);
    two_epochs(alone, aep, afr);
    uint64_t d, da;
    FOX_CK_ENGINE_OK(pop, fox_engine_params_digest(pop, k, &d));
    FOX_CK_ENGINE_OK(alone, fox_engine_params_digest(alone, 0, &da));
    ck_assert_msg(d == da, "member %d's weights differ from its run alone", k);
    ck_assert_uint_eq(fr->members[k].seed, a->seed);
    ck_assert_int_eq(fr->members[k].best_epoch, afr->best_epoch);
    ck_assert_double_eq(fr->members[k].best_val_sharpe, afr->best_val_sharpe);
    ck_assert(memcmp(&fr->members[k].test_at_best, &afr->test_at_best,
                     sizeof afr->test_at_best) == 0);
    ck_assert_float_eq(fr->members[k].band, afr->band);
    ck_assert_double_eq(ep->members[k].test_sharpe, aep->test.sharpe);
    ck_assert_double_eq(ep->members[k].val_sharpe, aep->val.sharpe);
    ck_assert_double_eq(ep->members[k].test_turnover, aep->test.turnover);
    ck_assert_float_eq(ep->members[k].band, aep->band);
    ck_assert_int_eq(ep->members[k].training, 1);
    int bars = afr->test_at_best.bars;
    ck_assert_int_gt(bars, 0);
    ck_assert(memcmp(pop->members[k].greedy_ret, alone->members[0].greedy_ret,
                     (size_t)bars * sizeof(float)) == 0);
    ck_assert(memcmp(pop->members[k].chosen_ret, alone->members[0].chosen_ret,
                     (size_t)bars * sizeof(float)) == 0);
    fox_engine_destroy(alone);
}
#endif

#ifndef FOX_TEST_CUDA
/* Under each band rule (the loop's _i): validation's walks twice an epoch, fixed's once. */
START_TEST(member_equals_its_seed_alone)
{
    enum { K = 3 };
    fox_config c;
    population_config(&c, K);
    c.band_rule = _i;
    fox_engine *pop = fox_test_engine(&c);
    static fox_epoch_report ep;
    static fox_fold_report fr;
    two_epochs(pop, &ep, &fr);
    ck_assert_int_eq(fr.n_members, K);
    ck_assert_int_eq(fr.members_training, K);
    ck_assert_int_eq(fr.lead, 0);
    ck_assert_int_eq(ep.n_members, K);
    ck_assert_uint_eq(fr.member_keys, 0); /* seeds alone: no values apart */
    uint64_t digest[K];
    double sum = 0.0, sum2 = 0.0;
    int64_t passes = 0, greedy_bars = 0;
    for (int k = 0; k < K; k++) {
        /* Alone: train.seed + k on the population's data (data.seed). */
        fox_config a;
        population_config(&a, 1);
        a.band_rule = _i;
        a.seed = SEED + (uint64_t)k;
        a.data_seed = SEED;
        static fox_epoch_report aep;
        static fox_fold_report afr;
        member_as_alone(pop, &ep, &fr, k, &a, &aep, &afr);
        FOX_CK_ENGINE_OK(pop, fox_engine_params_digest(pop, k, &digest[k]));
        /* Its passes are cut as alone: the population's are the members' own, summed. */
        passes += afr.eval_passes;
        greedy_bars += afr.eval_bars;
        if (k == 0) {
            /* The policy's rows are member 0's: a population of one is that run. */
            ck_assert_double_eq(fr.test_at_best.sharpe, afr.test_at_best.sharpe);
            ck_assert_double_eq(fr.vs[FOX_POLICY_FLAT].diff, afr.vs[FOX_POLICY_FLAT].diff);
            ck_assert_double_eq(fr.vs[FOX_POLICY_FLAT].se, afr.vs[FOX_POLICY_FLAT].se);
            ck_assert_double_eq(ep.test.sharpe, aep.test.sharpe);
        }
        /* The baselines are the data's, whatever the learner's seed. */
        ck_assert_double_eq(fr.test_policy[FOX_POLICY_RANDOM].sharpe,
                            afr.test_policy[FOX_POLICY_RANDOM].sharpe);
        double s = fr.members[k].test_at_best.sharpe;
        sum += s;
        sum2 += s * s;
    }
    ck_assert_msg(digest[0] != digest[1] && digest[1] != digest[2],
                  "members with different seeds trained the same weights");
    ck_assert_int_eq(fr.eval_passes, passes);
    ck_assert_int_eq(fr.eval_bars, greedy_bars);
    ck_assert_int_eq(fr.members_n, K);
    double mean = sum / K, se = sqrt((sum2 - K * mean * mean) / (K - 1) / K);
    ck_assert_double_eq_tol(fr.members_mean, mean, 1e-12);
    ck_assert_double_eq_tol(fr.members_se, se, 1e-12);
    for (int k = 0; k < K; k++) {
        ck_assert(fr.members[fr.members_best].test_at_best.sharpe >=
                  fr.members[k].test_at_best.sharpe);
        ck_assert(fr.members[fr.members_worst].test_at_best.sharpe <=
                  fr.members[k].test_at_best.sharpe);
    }
    fox_engine_destroy(pop);
}
END_TEST
#else
/* ||a − b|| / ||b − c|| over n floats. */
static double
rel_l2(const float *a, const float *b, const float *c, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += ((double)b[i] - c[i]) * ((double)b[i] - c[i]);
    }
    return sqrt(num / den);
}

/*
 * Members that differ in their seeds alone are one population on the
 * device: their step is one step of all, every launch over the members and
 * every product one batched call. The first chunk fills each ring member by
 * member, as alone, so that each member holds its seed's weights alone bit
 * for bit; then the chunks run as one step of all three. cuBLAS sums a
 * product batched over the members in another order than the product alone,
 * so from there a member is its seed alone within the products' rounding:
 * what a member trained in those steps (its weights' move) is its seed's
 * alone to 1e-2 of that move, where a member that took another member's
 * buffers would be off by the whole move. The walks that end an epoch run
 * as one pass of all members a round, and the report's spread is the
 * members' own. The loop's _i 1 runs it with prioritized replay, adaptive
 * bounds and the moving atom grid, whose kernels and buffers the defaults
 * leave out; _i 2 with members that hold every member key apart, each
 * member's step constants (its learning rate, γ, ε schedule and costs)
 * read by the population's launches from its own counters.
 */
static void
population_variant(fox_config *c, int variant, int member)
{
    static const char *const extras[][2] = {{"train.prioritized", "1"},
                                            {"engine.bounds_mode", "adaptive"},
                                            {"model.atom_grid", "moving"}};
    static const char *const lists[][2] = {
        {"train.lr", "0.0003,0.003,0.001"},  {"train.gamma", "0.9,0.8,0.95"},
        {"train.eps_end", "0.05,0.2,0.1"},   {"train.eps_start", "1,0.8,0.6"},
        {"train.eps_decay_steps", "50,80,120"}, {"env.train_cost_mult", "1,2,1.5"},
        {"policy.band", "0,2,8"}};
    if (variant == 1)
        set_lists(c, extras, sizeof extras / sizeof extras[0], -1);
    if (variant == 2)
        set_lists(c, lists, sizeof lists / sizeof lists[0], member);
}

START_TEST(population_member_near_its_seed_alone)
{
    enum { K = 3 };
    fox_config c;
    population_config(&c, K);
    population_variant(&c, _i, -1);
    fox_engine *pop = fox_test_engine(&c), *alone[K];
    size_t n = fox_engine_param_count(pop);
    float *w0 = malloc(K * n * sizeof *w0), *wp = malloc(n * sizeof *wp),
          *wa = malloc(n * sizeof *wa);
    ck_assert(w0 && wp && wa);
    FOX_CK_ENGINE_OK(pop, fox_engine_run_steps(pop, 20, NULL));
    for (int k = 0; k < K; k++) {
        fox_config a;
        population_config(&a, 1);
        population_variant(&a, _i, k);
        a.seed = SEED + (uint64_t)k;
        a.data_seed = SEED;
        alone[k] = fox_test_engine(&a);
        FOX_CK_ENGINE_OK(alone[k], fox_engine_run_steps(alone[k], 20, NULL));
        uint64_t d, da;
        FOX_CK_ENGINE_OK(pop, fox_engine_params_digest(pop, k, &d));
        FOX_CK_ENGINE_OK(alone[k], fox_engine_params_digest(alone[k], 0, &da));
        ck_assert_msg(d == da, "member %d's weights differ from its run alone before the "
                      "population's first step", k);
        FOX_CK_ENGINE_OK(pop, fox_engine_member_params(pop, k, w0 + k * n, n));
    }
    fox_cuda_pop_rounds pr;
    fox_cuda_debug_pop_rounds(pop->members[0].be, &pr);
    ck_assert_int_eq(pr.steps_alone, 1);
    ck_assert_int_eq(pr.steps_together, 0);
    FOX_CK_ENGINE_OK(pop, fox_engine_run_steps(pop, 10, NULL));
    fox_cuda_debug_pop_rounds(pop->members[0].be, &pr);
    ck_assert_int_eq(pr.steps_together, 1);
    for (int k = 0; k < K; k++) {
        FOX_CK_ENGINE_OK(alone[k], fox_engine_run_steps(alone[k], 10, NULL));
        FOX_CK_ENGINE_OK(pop, fox_engine_member_params(pop, k, wp, n));
        FOX_CK_ENGINE_OK(alone[k], fox_engine_member_params(alone[k], 0, wa, n));
        double r = rel_l2(wp, wa, w0 + k * n, n);
        fprintf(stderr, "population (variant %d) member %d: ||w - alone|| / ||alone's move|| = %.3g\n",
                _i, k, r);
        ck_assert_msg(r < 1e-2, "member %d: %g of its move off its run alone", k, r);
        fox_engine_destroy(alone[k]);
    }
    /* The epochs' walks: one pass of all three a round; the spread is the members'. */
    static fox_epoch_report ep;
    static fox_fold_report fr;
    two_epochs(pop, &ep, &fr);
    fox_cuda_debug_pop_rounds(pop->members[0].be, &pr);
    ck_assert_int_eq(pr.steps_alone, 1);
    ck_assert_int_eq(pr.steps_together, 7);
    ck_assert_int_gt(pr.passes_together, 0);
    ck_assert_int_eq(pr.passes_alone, 0);
    ck_assert_int_eq(fr.n_members, K);
    ck_assert_int_eq(fr.members_training, K);
    double sum = 0.0;
    for (int k = 0; k < K; k++) {
        ck_assert_uint_eq(fr.members[k].seed, SEED + (uint64_t)k);
        ck_assert(isfinite(fr.members[k].test_at_best.sharpe));
        sum += fr.members[k].test_at_best.sharpe;
    }
    ck_assert_double_eq_tol(fr.members_mean, sum / K, 1e-12);
    free(w0);
    free(wp);
    free(wa);
    fox_engine_destroy(pop);
}
END_TEST
#endif

#ifndef FOX_TEST_CUDA
/*
 * Members that hold the member keys apart (a list a key, one value a
 * member): each is the run of its own values alone, bit for bit, and the
 * fold report names the values of the keys that differ. Members 0 and 1
 * share a seed (train.seed's list), so only their values set them apart.
 */
START_TEST(member_equals_its_values_alone)
{
    enum { K = 3 };
    static const char *const lists[][2] = {
        {"train.seed", "7,7,3"},           {"train.lr", "0.0003,0.003,0.001"},
        {"policy.band", "0,2,8"},          {"train.gamma", "0.9,0.8,0.95"},
        {"env.train_cost_mult", "1,2,1.5"}, {"train.eps_end", "0.05,0.05,0.05"},
    };
    static const double lr[K] = {0.0003, 0.003, 0.001}, band[K] = {0, 2, 8};
    char err[256];
    fox_config c;
    population_config(&c, K);
    FOX_CK_OK(fox_config_set(&c, "policy.band_rule", "fixed", err, sizeof err));
    set_lists(&c, lists, sizeof lists / sizeof lists[0], -1);
    fox_engine *pop = fox_test_engine(&c);
    static fox_epoch_report ep;
    static fox_fold_report fr;
    two_epochs(pop, &ep, &fr);
    uint64_t digest[K];
    for (int k = 0; k < K; k++) {
        /* Alone: the k-th value of every list, as one value, on the population's data. */
        fox_config a;
        population_config(&a, 1);
        FOX_CK_OK(fox_config_set(&a, "policy.band_rule", "fixed", err, sizeof err));
        set_lists(&a, lists, sizeof lists / sizeof lists[0], k);
        a.data_seed = SEED;
        static fox_epoch_report aep;
        static fox_fold_report afr;
        member_as_alone(pop, &ep, &fr, k, &a, &aep, &afr);
        FOX_CK_ENGINE_OK(pop, fox_engine_params_digest(pop, k, &digest[k]));
        if (k == 0)
            ck_assert_float_eq(ep.last.epsilon, aep.last.epsilon); /* the lead's ε, reported */
        /* policy.band_rule = fixed: the member walks at its own band. */
        ck_assert_float_eq(fr.members[k].band, (float)band[k]);
        ck_assert_double_eq(fr.members[k].values[fox_member_key_index("train.lr")], lr[k]);
        ck_assert_double_eq(fr.members[k].values[fox_member_key_index("policy.band")], band[k]);
    }
    ck_assert_msg(digest[0] != digest[1], "one seed, two learning rates: the same weights");
    /* The keys the members hold apart; not the seed (its own field), not the ε they share. */
    unsigned want = 0;
    for (size_t i = 1; i < 5; i++)
        want |= 1u << fox_member_key_index(lists[i][0]);
    ck_assert_uint_eq(fr.member_keys, want);
    fox_engine_destroy(pop);
}
END_TEST
#endif

/* A NaN in member `member`'s h_s2, 2 train steps from now: a halt under engine.halt_rule=strict. */
static void
fault_member(fox_engine *e, int member)
{
    FOX_CK_ENGINE_OK(e, fox_engine_inject_fault(e, member, "h_s2", FOX_FAULT_NAN, 2, 0));
}

#ifdef FOX_TEST_CUDA
/*
 * A member of a population that halts is frozen inside the population's
 * step: the same fault armed in every member (so that each member's step
 * has the same points, and the step of all stays one), due in member 1
 * alone. Its weights stay while the other two train on, and every chunk
 * after the rings filled is one step of all three.
 */
START_TEST(population_member_halts_alone)
{
    enum { K = 3 };
    fox_config c;
    population_config(&c, K);
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 40, NULL));
    FOX_CK_ENGINE_OK(e, fox_engine_inject_fault(e, -1, "h_s2", FOX_FAULT_NAN, 1000000, 0));
    fault_member(e, 1);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 10, NULL));
    fox_halt_info h;
    FOX_CK_OK(fox_engine_member_halt_info(e, 1, &h));
    ck_assert_int_eq(h.reason, FOX_HALT_NAN);
    FOX_CK_OK(fox_engine_member_halt_info(e, 0, &h));
    ck_assert_int_eq(h.reason, FOX_HALT_NONE);
    fox_engine_halt_info(e, &h);
    ck_assert_int_eq(h.reason, FOX_HALT_NONE);
    uint64_t d[K], after[K];
    for (int k = 0; k < K; k++)
        FOX_CK_ENGINE_OK(e, fox_engine_params_digest(e, k, &d[k]));
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 20, NULL));
    for (int k = 0; k < K; k++)
        FOX_CK_ENGINE_OK(e, fox_engine_params_digest(e, k, &after[k]));
    ck_assert_msg(d[1] == after[1], "a halted member trained on in the population's step");
    ck_assert_msg(d[0] != after[0] && d[2] != after[2], "a member stopped training");
    fox_cuda_pop_rounds pr;
    fox_cuda_debug_pop_rounds(e->members[0].be, &pr);
    ck_assert_int_eq(pr.steps_alone, 1);
    ck_assert_int_eq(pr.steps_together, 2);
    fox_engine_destroy(e);
}
END_TEST
#endif

/* The greedy test bars an evaluation hook saw. */
static void
count_greedy_test(void *arg, fox_split split, fox_policy policy, int bar, double cum)
{
    (void)bar;
    (void)cum;
    if (split == FOX_SPLIT_TEST && policy == FOX_POLICY_GREEDY)
        ++*(int *)arg;
}

/* The per-bar hook (the run's equity curves) sees the policy's walk, not every member's. */
START_TEST(eval_hook_sees_the_policy_walk)
{
    int bars[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        fox_config c;
        population_config(&c, k ? 3 : 1);
        fox_engine *e = fox_test_engine(&c);
        fox_engine_set_eval_hook(e, count_greedy_test, &bars[k]);
        FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 40, NULL));
        static fox_epoch_report ep;
        FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &ep));
        fox_engine_set_eval_hook(e, NULL, NULL);
        fox_engine_destroy(e);
    }
    ck_assert_int_gt(bars[0], 0);
    ck_assert_int_eq(bars[1], bars[0]);
}
END_TEST

START_TEST(halted_member_is_frozen_and_the_fold_goes_on)
{
    enum { K = 3 };
    fox_config c;
    population_config(&c, K);
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 40, NULL));
    fault_member(e, 1);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 10, NULL));
    fox_halt_info h;
    FOX_CK_OK(fox_engine_member_halt_info(e, 1, &h));
    ck_assert_int_eq(h.reason, FOX_HALT_NAN);
    ck_assert_int_eq(h.member, 1);
    ck_assert_msg(strstr(h.message, "member 1") && strstr(h.message, "h_s2"), "%s", h.message);
    FOX_CK_OK(fox_engine_member_halt_info(e, 0, &h));
    ck_assert_int_eq(h.reason, FOX_HALT_NONE);
    fox_engine_halt_info(e, &h);
    ck_assert_int_eq(h.reason, FOX_HALT_NONE); /* the fold itself goes on */
    ck_assert_int_eq(fox_engine_member_halt_info(e, K, &h), FOX_EINVAL);

    /* Frozen: its weights stay; the others train on. */
    uint64_t d1, d1_after, d0, d0_after;
    FOX_CK_ENGINE_OK(e, fox_engine_params_digest(e, 1, &d1));
    FOX_CK_ENGINE_OK(e, fox_engine_params_digest(e, 0, &d0));
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 20, NULL));
    FOX_CK_ENGINE_OK(e, fox_engine_params_digest(e, 1, &d1_after));
    FOX_CK_ENGINE_OK(e, fox_engine_params_digest(e, 0, &d0_after));
    ck_assert_msg(d1 == d1_after, "a halted member trained on");
    ck_assert_msg(d0 != d0_after, "member 0 stopped training");

    static fox_epoch_report ep;
    static fox_fold_report fr;
    FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &ep));
    ck_assert_int_eq(ep.members[1].training, 0);
    ck_assert(isnan(ep.members[1].test_sharpe));
    ck_assert_int_eq(ep.members[0].training, 1);
    FOX_CK_OK(fox_engine_fold_report(e, &fr));
    ck_assert_int_eq(fr.members_training, K - 1);
    ck_assert_int_eq(fr.members[1].halt_reason, FOX_HALT_NAN);
    ck_assert_int_eq(fr.members[1].halt_slot, FOX_SENT_H_S2);
    ck_assert_int_eq(fr.members[1].best_epoch, -1);
    ck_assert_int_eq(fr.members_n, K - 1); /* the mean is over members that chose an epoch */
    ck_assert_int_eq(fr.lead, 0);
    ck_assert_int_eq(fr.halt_reason, FOX_HALT_NONE);

    /* Member 0 halts too: the policy's rows move to member 2, the first still training. */
    fault_member(e, 0);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 10, NULL));
    FOX_CK_OK(fox_engine_fold_report(e, &fr));
    ck_assert_int_eq(fr.lead, 2);
    ck_assert_int_eq(fr.members_training, 1);

    /* The last one halts: fewer than engine.quorum (1) left, the fold halts naming it. */
    fault_member(e, 2);
    ck_assert_int_eq(fox_engine_run_steps(e, 10, NULL), FOX_EHALT);
    fox_engine_halt_info(e, &h);
    ck_assert_int_eq(h.reason, FOX_HALT_NAN);
    ck_assert_int_eq(h.member, 2);
    ck_assert_msg(strstr(fox_engine_errmsg(e), "member 2"), "%s", fox_engine_errmsg(e));
    ck_assert_int_eq(fox_engine_run_steps(e, 1, NULL), FOX_ESTATE);

    /* A fold reset brings every member back. */
    FOX_CK_ENGINE_OK(e, fox_engine_reset_for_fold(e));
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 10, NULL));
    fox_engine_info info;
    fox_engine_get_info(e, &info);
    ck_assert_int_eq(info.n_members, K);
    ck_assert_int_eq(info.members_training, K);
    fox_engine_destroy(e);
}
END_TEST

START_TEST(quorum_halts_the_fold)
{
    fox_config c;
    population_config(&c, 3);
    char err[256];
    c.quorum = 4;
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "engine.quorum"), "%s", err);
    c.quorum = 3;
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 40, NULL));
    fault_member(e, 2);
    ck_assert_int_eq(fox_engine_run_steps(e, 10, NULL), FOX_EHALT);
    fox_halt_info h;
    fox_engine_halt_info(e, &h);
    ck_assert_int_eq(h.member, 2);
    ck_assert_int_eq(fox_engine_inject_fault(e, 3, "h_s2", FOX_FAULT_NAN, 0, 0), FOX_EINVAL);
    fox_engine_destroy(e);
}
END_TEST

START_TEST(checkpoint_keeps_every_member)
{
    fox_config c;
    population_config(&c, 2);
    fox_engine *e = fox_test_engine(&c);
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 40, NULL));
    char path[] = "/tmp/fox_members_XXXXXX";
    fox_test_temp_file(path);
    FOX_CK_ENGINE_OK(e, fox_engine_checkpoint_save(e, path));
    fox_engine *back = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(back, fox_engine_checkpoint_load(back, path));
    for (int k = 0; k < 2; k++) {
        uint64_t a, b;
        FOX_CK_ENGINE_OK(e, fox_engine_params_digest(e, k, &a));
        FOX_CK_ENGINE_OK(back, fox_engine_params_digest(back, k, &b));
        ck_assert_msg(a == b, "member %d changed in the round trip", k);
    }
    /* Another population size is refused by name, and the engine keeps what it had. */
    fox_config one;
    population_config(&one, 1);
    fox_engine *single = fox_test_engine_loaded(&one);
    ck_assert_int_eq(fox_engine_checkpoint_load(single, path), FOX_EMISMATCH);
    ck_assert_msg(strstr(fox_engine_errmsg(single), "2 members"), "%s",
                  fox_engine_errmsg(single));
    /* A backtest takes the population's member 0. */
    FOX_CK_ENGINE_OK(single, fox_engine_load_policy(single, path, -1, 3000, 0));
    uint64_t d0, s0;
    FOX_CK_ENGINE_OK(back, fox_engine_params_digest(back, 0, &d0));
    FOX_CK_ENGINE_OK(single, fox_engine_params_digest(single, 0, &s0));
    ck_assert(d0 == s0);
    unlink(path);
    fox_engine_destroy(single);
    fox_engine_destroy(back);
    fox_engine_destroy(e);
}
END_TEST

/*
 * policy.members = ensemble: the fold's policy is the greedy decision on the
 * mean expected Q of the members still training. Training is untouched (each
 * member still its seed alone); the ensemble's Q is the members' mean; its
 * chosen epoch's checkpoint, backtested on the fold's own bars, gives the
 * fold's figure; one member alone is refused.
 */
START_TEST(ensemble_decides_on_the_members_mean_q)
{
    enum { K = 3 };
    fox_config c;
    population_config(&c, K);
    char err[256];
    c.members = 1;
    c.policy_members = FOX_POLICY_MEMBERS_ENSEMBLE;
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "policy.members=ensemble"), "%s", err);
    c.members = K;
    fox_engine *e = fox_test_engine(&c);
    static fox_epoch_report ep;
    static fox_fold_report fr;
    two_epochs(e, &ep, &fr);
    ck_assert_int_eq(fr.lead, -1);
    ck_assert_int_eq(ep.lead, -1);
    ck_assert(isfinite(fr.test_at_best.sharpe));
    ck_assert_int_eq(fr.members_n, K);

#ifndef FOX_TEST_CUDA
    /*
     * Training is each member's alone: member 2 equals its seed's run (on the device, within the
     * population's batched products: population_member_near_its_seed_alone).
     */
    fox_config a;
    population_config(&a, 1);
    a.seed = SEED + 2;
    a.data_seed = SEED;
    static fox_epoch_report aep;
    static fox_fold_report afr;
    member_as_alone(e, &ep, &fr, 2, &a, &aep, &afr);
#endif

    /* The ensemble's Q is the mean of the members'. */
    enum { B = 4 };
    int S = c.state_dim, A = 0;
    fox_engine_info info;
    fox_engine_get_info(e, &info);
    fox_model_layout lay;
    FOX_CK_OK(fox_model_layout_init(&lay, &c));
    A = lay.n_actions;
    float *s = calloc((size_t)B * S, sizeof(float)), *q = calloc((size_t)B * A, sizeof(float));
    float *mean = calloc((size_t)B * A, sizeof(float)), *one = calloc((size_t)B * A, sizeof(float));
    for (int i = 0; i < B * S; i++)
        s[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
    for (int k = 0; k < K; k++) {
        FOX_CK_OK(fox__engine_q_start(e, &e->members[k], s, B));
        FOX_CK_OK(fox__engine_q_finish(e, &e->members[k], B, one));
        for (int i = 0; i < B * A; i++)
            mean[i] += one[i] / K;
    }
    FOX_CK_OK(fox__engine_q_start(e, &e->ensemble, s, B));
    FOX_CK_OK(fox__engine_q_finish(e, &e->ensemble, B, q));
    for (int i = 0; i < B * A; i++)
        ck_assert_float_eq_tol(q[i], mean[i], 1e-5f);

    /* The chosen epoch's checkpoint, backtested on the fold's bars, is the fold's policy. */
    char path[] = "/tmp/fox_ensemble_XXXXXX";
    fox_test_temp_file(path);
    ck_assert_int_eq(fr.best_epoch, 1); /* the last of two epochs under the smoothed rule */
    FOX_CK_ENGINE_OK(e, fox_engine_checkpoint_save(e, path));
    fox_engine *bt = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(bt, fox_engine_load_policy(bt, path, info.val_begin, info.test_begin,
                                                info.test_end));
    static fox_fold_report bfr;
    FOX_CK_ENGINE_OK(bt, fox_engine_backtest(bt, &bfr));
    ck_assert_int_eq(bfr.lead, -1);
    ck_assert_double_eq(bfr.test_at_best.sharpe, fr.test_at_best.sharpe);
    unlink(path);
    free(s);
    free(q);
    free(mean);
    free(one);
    fox_engine_destroy(bt);
    fox_engine_destroy(e);
}
END_TEST

int
main(void)
{
#ifdef FOX_TEST_CUDA
    fox_test_require_cuda("test_cuda_members");
#endif
    Suite *s = suite_create("members");
    TCase *tc = tcase_create("population");
    tcase_set_timeout(tc, 300);
#ifndef FOX_TEST_CUDA
    tcase_add_loop_test(tc, member_equals_its_seed_alone, FOX_BAND_RULE_FIXED,
                        FOX_BAND_RULE_VALIDATION + 1);
#else
    tcase_add_loop_test(tc, population_member_near_its_seed_alone, 0, 3);
    tcase_add_test(tc, population_member_halts_alone);
#endif
#ifndef FOX_TEST_CUDA
    tcase_add_test(tc, member_equals_its_values_alone);
#endif
    tcase_add_test(tc, eval_hook_sees_the_policy_walk);
    tcase_add_test(tc, halted_member_is_frozen_and_the_fold_goes_on);
    tcase_add_test(tc, quorum_halts_the_fold);
    tcase_add_test(tc, checkpoint_keeps_every_member);
    tcase_add_test(tc, ensemble_decides_on_the_members_mean_q);
    suite_add_tcase(s, tc);
#ifdef FOX_TEST_CUDA
    return fox_test_run_suite_nofork(s);
#else
    return fox_test_run_suite(s);
#endif
}
