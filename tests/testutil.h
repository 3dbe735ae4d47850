/*
 * testutil.h — the helpers every Check test shares: status assertions, an
 * engine ready to step, "key=value" configuration, the runner's main() and
 * the GPU tests' skip. One home so that a failure reads the same in every
 * suite; static inline and macros only, so each test stays one .c file.
 */
#ifndef FOX_TESTUTIL_H
#define FOX_TESTUTIL_H

#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/cpu/optim.h"
#include "gpu/engine.h"
#include "gpu/sentinel.h"
#include "common/error.h"
#ifdef FOX_HAVE_CUDA
#include "gpu/backend.h"
#endif

/* meson's exit status for a skipped test. */
#define FOX_TEST_SKIP 77

/*
 * Assert that expr returns FOX_OK; a failure names the expression, the
 * code's text and its name. _MSG adds msg, read after the call: the text the
 * callee wrote into its err buffer, or the engine's message.
 */
#define FOX_CK_OK(expr)                                                                            \
    do {                                                                                           \
        int rv_ = (expr);                                                                          \
        ck_assert_msg(rv_ == FOX_OK, "%s: %s (%s)", #expr, fox_strerror(rv_), fox_err_name(rv_));  \
    } while (0)

#define FOX_CK_OK_MSG(expr, msg)                                                                   \
    do {                                                                                           \
        int rv_ = (expr);                                                                          \
        ck_assert_msg(rv_ == FOX_OK, "%s: %s (%s): %s", #expr, fox_strerror(rv_),                  \
                      fox_err_name(rv_), (msg));                                                   \
    } while (0)

/* An engine call: the failure carries fox_engine_errmsg(e), which says why. */
#define FOX_CK_ENGINE_OK(e, expr) FOX_CK_OK_MSG(expr, (e) ? fox_engine_errmsg(e) : "")

/* Apply "key=value" pairs, up to a NULL, to c; a refused pair fails with the config's reason. */
static inline void
fox_test_set_pairs(fox_config *c, const char *const *pairs)
{
    char err[256];
    for (int i = 0; pairs[i]; i++)
        ck_assert_msg(fox_config_set_pair(c, pairs[i], err, sizeof err) == FOX_OK, "%s: %s",
                      pairs[i], err);
}

/*
 * The defaults with the small network the CPU tests train (a few thousand
 * parameters, batch 32, 16 environments) on the CPU backend; each test adds
 * its own data and training keys with fox_test_set_pairs.
 */
static inline void
fox_test_small_net(fox_config *c)
{
    static const char *const net[] = {
        "model.h1=32",    "model.h2=24",        "model.head_hidden=24", "model.aux_hidden=8",
        "model.n_cos=8",  "model.n_atoms=21",   "engine.backend=cpu",   "train.batch=32",
        "env.n_envs=16",  NULL};
    fox_config_default(c);
    fox_test_set_pairs(c, net);
}

/* The debug.inject_fault.* keys: a fault of kind in buffer at train step `step`. */
static inline void
fox_test_set_fault(fox_config *c, const char *buffer, const char *kind, int step)
{
    char kv[3][128];
    snprintf(kv[0], sizeof kv[0], "debug.inject_fault.buffer=%s", buffer);
    snprintf(kv[1], sizeof kv[1], "debug.inject_fault.kind=%s", kind);
    snprintf(kv[2], sizeof kv[2], "debug.inject_fault.step=%d", step);
    const char *pairs[] = {kv[0], kv[1], kv[2], NULL};
    fox_test_set_pairs(c, pairs);
}

/* The whole file at path, NUL-terminated (malloc'd), its size in *len (may be NULL); NULL when it cannot be read. */
static inline char *
fox_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

/* Make path, a mkstemp template ("…XXXXXX"), the name of a new empty file of the test's own. */
static inline void
fox_test_temp_file(char *path)
{
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp %s: %s", path, strerror(errno));
    close(fd);
}

/* An engine created from c with its data loaded, before any fold. */
static inline fox_engine *
fox_test_engine_loaded(const fox_config *c)
{
    fox_engine *e = NULL;
    char err[512];
    FOX_CK_OK_MSG(fox_engine_create(&e, c, err, sizeof err), err);
    FOX_CK_ENGINE_OK(e, fox_engine_load_data(e));
    return e;
}

/* An engine ready to step: created from c, data loaded, fold 0 begun. */
static inline fox_engine *
fox_test_engine(const fox_config *c)
{
    fox_engine *e = fox_test_engine_loaded(c);
    FOX_CK_ENGINE_OK(e, fox_engine_begin_fold(e, 0));
    return e;
}

/*
 * The halt of c (a fault that halts within `steps` full steps) is reported at the step it
 * happened: one run_steps call of `steps` gives the halt_info step that calls of one step
 * each stop at (a backend that runs a chunk on after a halt must not report the chunk's end).
 * Returns that step.
 */
static inline int64_t
fox_test_halt_step(const fox_config *c, int steps)
{
    fox_engine *e = fox_test_engine(c);
    ck_assert_int_eq(fox_engine_run_steps(e, steps, NULL), FOX_EHALT);
    fox_halt_info chunk;
    fox_engine_halt_info(e, &chunk);
    fox_engine_destroy(e);
    e = fox_test_engine(c);
    int k = 1;
    while (k <= steps && fox_engine_run_steps(e, 1, NULL) == FOX_OK)
        k++;
    fox_halt_info one;
    fox_engine_halt_info(e, &one);
    fox_engine_destroy(e);
    ck_assert_msg(k <= steps && one.reason != FOX_HALT_NONE, "no halt in %d single steps", steps);
    ck_assert_msg(one.step == k && chunk.step == k,
                  "halt step: %lld in one chunk, %lld in single steps, which stopped at step %d",
                  (long long)chunk.step, (long long)one.step, k);
    return k;
}

/* Do the parameters of engines a and b differ anywhere (same layout)? */
static inline int
fox_test_params_differ(fox_engine *a, fox_engine *b)
{
    size_t n = fox_engine_param_count(a);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    ck_assert(pa && pb);
    FOX_CK_ENGINE_OK(a, fox_engine_get_params(a, pa, n));
    FOX_CK_ENGINE_OK(b, fox_engine_get_params(b, pb, n));
    int differ = memcmp(pa, pb, n * sizeof *pa) != 0;
    free(pa);
    free(pb);
    return differ;
}

/* The clamps of fox_cpu_adam_step_clamped at bounds w, m, v, with no sentinel slot to flag. */
static inline fox_cpu_adam_clamp
fox_test_adam_clamp(float w, float m, float v)
{
    return (fox_cpu_adam_clamp){.w_bound = w,
                                .m_bound = m,
                                .v_bound = v,
                                .w_slot = -1,
                                .m_slot = -1,
                                .v_slot = -1,
                                .w_diag = INFINITY,
                                .m_diag = INFINITY,
                                .v_diag = INFINITY};
}

/*
 * A fault fires once per arming, whichever way it was armed, and no fold
 * reset arms it again. c arms a halting fault (debug.inject_fault.*) that
 * fires within `steps` full steps: fold 0 halts, fold 1 runs the same steps
 * clean; armed again on the live engine (fox_engine_inject_fault of
 * buffer/kind) it halts once more, and after reset_for_fold the fold runs
 * clean again.
 */
static inline void
fox_test_fault_fires_once(const fox_config *c, const char *buffer, int kind, int steps)
{
    fox_engine *e = fox_test_engine(c);
    ck_assert_int_eq(fox_engine_run_steps(e, steps, NULL), FOX_EHALT);
    FOX_CK_ENGINE_OK(e, fox_engine_begin_fold(e, 1));
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, steps, NULL));
    ck_assert_uint_eq(fox_sentinel_mask(fox_engine_flags(e)), 0);
    FOX_CK_ENGINE_OK(e, fox_engine_inject_fault(e, -1, buffer, kind, 2, 0));
    ck_assert_int_eq(fox_engine_run_steps(e, steps, NULL), FOX_EHALT);
    FOX_CK_ENGINE_OK(e, fox_engine_reset_for_fold(e));
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, steps, NULL));
    ck_assert_uint_eq(fox_sentinel_mask(fox_engine_flags(e)), 0);
    fox_engine_destroy(e);
}

/* Every parameter of e finite? what names the case in the failure. */
static inline void
fox_test_params_finite(fox_engine *e, const char *what)
{
    size_t n = fox_engine_param_count(e);
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    FOX_CK_ENGINE_OK(e, fox_engine_get_params(e, p, n));
    size_t bad = 0;
    for (size_t k = 0; k < n; k++)
        bad += !isfinite(p[k]);
    free(p);
    ck_assert_msg(bad == 0, "%s: %zu of %zu parameters not finite", what, bad, n);
}

/*
 * engine.halt_rule on the fault c arms (NaN in h_s2 within the first of
 * `epochs` epochs of `steps` full steps). Under seeds the Mech 10 clamp
 * sanitizes it and training goes on: slot 12 is set and stays set, in the
 * flags and the fold report, every epoch closes, the last one still moves
 * the weights, no halt, every parameter finite. Under strict the same fault
 * halts the first epoch through halt_nan, naming the slot.
 */
static inline void
fox_test_halt_rule_h_s2(const fox_config *c, int epochs, int steps)
{
    fox_config seeds = *c, strict = *c;
    seeds.halt_rule = FOX_HALT_RULE_SEEDS;
    strict.halt_rule = FOX_HALT_RULE_STRICT;
    fox_engine *e = fox_test_engine(&seeds);
    size_t n = fox_engine_param_count(e);
    float *before = malloc(n * sizeof *before), *after = malloc(n * sizeof *after);
    ck_assert(before && after);
    for (int k = 0; k < epochs; k++) {
        FOX_CK_ENGINE_OK(e, fox_engine_get_params(e, before, n));
        FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, steps, NULL));
        fox_epoch_report rep;
        FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &rep));
        ck_assert_msg(fox_engine_flags(e)[FOX_SENT_H_S2], "seeds: h_s2 not flagged by epoch %d",
                      k);
    }
    FOX_CK_ENGINE_OK(e, fox_engine_get_params(e, after, n));
    ck_assert_msg(memcmp(before, after, n * sizeof *after) != 0,
                  "seeds: the last epoch moved no weight");
    free(before);
    free(after);
    fox_halt_info h;
    fox_engine_halt_info(e, &h);
    ck_assert_int_eq(h.reason, FOX_HALT_NONE);
    fox_fold_report fr;
    FOX_CK_ENGINE_OK(e, fox_engine_fold_report(e, &fr));
    ck_assert_msg(fr.flagged >> FOX_SENT_H_S2 & 1, "seeds: fold report flags %llx",
                  (unsigned long long)fr.flagged);
    fox_test_params_finite(e, "seeds, NaN in h_s2");
    fox_engine_destroy(e);

    e = fox_test_engine(&strict);
    ck_assert_int_eq(fox_engine_run_steps(e, steps, NULL), FOX_EHALT);
    fox_engine_halt_info(e, &h);
    ck_assert_int_eq(h.reason, FOX_HALT_NAN);
    ck_assert_msg(strstr(fox_engine_errmsg(e), "halt_nan: slots 12 h_s2"), "strict: '%s'",
                  fox_engine_errmsg(e));
    fox_engine_destroy(e);
}

/*
 * The seeds rule on the fault c arms in a slot 0–35 within `steps` full
 * steps: the slot is set, and either the run trains on, the fault sanitized,
 * or it halts through halt_nan on the non-finite loss or gradient norm the
 * fault reached, never on the slot alone; every parameter is finite either
 * way. Returns 1 if it halted.
 */
static inline int
fox_test_seeds_drill(const fox_config *c, int steps)
{
    const char *name = c->fault_buffer;
    ck_assert_int_eq(c->halt_rule, FOX_HALT_RULE_SEEDS);
    fox_engine *e = fox_test_engine(c);
    int rv = fox_engine_run_steps(e, steps, NULL);
    ck_assert_msg(rv == FOX_OK || rv == FOX_EHALT, "%s: %s", name, fox_engine_errmsg(e));
    ck_assert_msg(fox_engine_flags(e)[fox_sentinel_index(name)], "%s: not flagged", name);
    if (rv == FOX_EHALT) {
        fox_halt_info h;
        fox_engine_halt_info(e, &h);
        ck_assert_int_eq(h.reason, FOX_HALT_NAN);
        ck_assert_msg(strncmp(h.message, "halt_nan: loss ", 15) == 0, "%s: halted on '%s'", name,
                      h.message);
    }
    fox_test_params_finite(e, name);
    fox_engine_destroy(e);
    return rv == FOX_EHALT;
}

/* One engine's life for fox_test_engines_same_bits: its config in, its results out. */
typedef struct fox_test_run {
    fox_config cfg;
    int steps;
    uint64_t digest;    /* of the parameters after the steps */
    double test_sharpe; /* of the epoch closed after them */
    int rv;
    char err[512];
} fox_test_run;

/* Create, fold 0, steps full steps, one epoch closed (an evaluation), the digest, destroy. */
static inline void *
fox_test_run_engine(void *arg)
{
    fox_test_run *r = arg;
    fox_engine *e = NULL;
    fox_epoch_report rep;
    r->rv = fox_engine_create(&e, &r->cfg, r->err, sizeof r->err);
    if (r->rv == FOX_OK && (r->rv = fox_engine_load_data(e)) == FOX_OK &&
        (r->rv = fox_engine_begin_fold(e, 0)) == FOX_OK &&
        (r->rv = fox_engine_run_steps(e, r->steps, NULL)) == FOX_OK &&
        (r->rv = fox_engine_end_epoch(e, &rep)) == FOX_OK &&
        (r->rv = fox_engine_params_digest(e, 0, &r->digest)) == FOX_OK)
        r->test_sharpe = rep.test.sharpe;
    if (r->rv != FOX_OK && e)
        snprintf(r->err, sizeof r->err, "%s", fox_engine_errmsg(e));
    fox_engine_destroy(e);
    return NULL;
}

#define FOX_TEST_MAX_ENGINES 8

/*
 * k engines of c, seeds c->seed + i, each on its own thread at once and
 * unsynchronized (one creating while another steps, captures or evaluates),
 * end with the parameters and the test Sharpe of each seed run alone, bit
 * for bit; and the seeds' own runs differ, so that the comparison is of
 * something.
 */
static inline void
fox_test_engines_same_bits(const fox_config *c, int k, int steps)
{
    fox_test_run alone[FOX_TEST_MAX_ENGINES], together[FOX_TEST_MAX_ENGINES];
    pthread_t threads[FOX_TEST_MAX_ENGINES];
    ck_assert_int_le(k, FOX_TEST_MAX_ENGINES);
    for (int i = 0; i < k; i++) {
        alone[i] = (fox_test_run){.cfg = *c, .steps = steps};
        alone[i].cfg.seed = c->seed + (uint64_t)i;
        together[i] = alone[i];
        fox_test_run_engine(&alone[i]);
        ck_assert_msg(alone[i].rv == FOX_OK, "seed %d alone: %s", i, alone[i].err);
    }
    ck_assert_msg(alone[0].digest != alone[1].digest, "two seeds gave the same parameters");
    for (int i = 0; i < k; i++)
        ck_assert_int_eq(pthread_create(&threads[i], NULL, fox_test_run_engine, &together[i]), 0);
    for (int i = 0; i < k; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < k; i++) {
        ck_assert_msg(together[i].rv == FOX_OK, "engine %d of %d: %s", i, k, together[i].err);
        ck_assert_msg(together[i].digest == alone[i].digest,
                      "engine %d of %d on threads: parameters %016llx, alone %016llx", i, k,
                      (unsigned long long)together[i].digest, (unsigned long long)alone[i].digest);
        ck_assert_msg(memcmp(&together[i].test_sharpe, &alone[i].test_sharpe, sizeof(double)) == 0,
                      "engine %d of %d on threads: test Sharpe %.17g, alone %.17g", i, k,
                      together[i].test_sharpe, alone[i].test_sharpe);
    }
}

static inline int
fox_test_run_suite_fork(Suite *s, enum fork_status fork)
{
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, fork);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr), ran = srunner_ntests_run(sr);
    srunner_free(sr);
    /* meson picks cases by CK_RUN_CASE: a name no case has would otherwise pass, running none. */
    if (ran == 0) {
        const char *rc = getenv("CK_RUN_CASE");
        fprintf(stderr, "no test ran: CK_RUN_CASE=%s names no case of this suite\n",
                rc ? rc : "(unset)");
        return EXIT_FAILURE;
    }
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* main()'s body: run s, fork as CK_FORK says (Check's default); the exit status. */
static inline int
fox_test_run_suite(Suite *s)
{
    return fox_test_run_suite_fork(s, CK_FORK_GETENV);
}

/* The same without fork, for the GPU tests: a CUDA context does not survive fork(). */
static inline int
fox_test_run_suite_nofork(Suite *s)
{
    return fox_test_run_suite_fork(s, CK_NOFORK);
}

#ifdef FOX_HAVE_CUDA
/*
 * The GPU tests' first line: without a CUDA device (as on CI) print
 * "<name>: skipped: <why>" and exit 77, which meson counts as skipped; with
 * one, print which.
 */
static inline void
fox_test_require_cuda(const char *name)
{
    char why[256];
    if (!fox_cuda_backend_ops.available(why, sizeof why)) {
        printf("%s: skipped: %s\n", name, why);
        exit(FOX_TEST_SKIP);
    }
    printf("device: %s\n", why);
}
#endif

#endif /* FOX_TESTUTIL_H */
