/*
 * foxbench — step-time benchmark of the engine on one backend.
 *
 * Reports the median (with min and max) time per full step (collect from
 * every environment + one train step) and per train step alone, each
 * measured over repeated chunks of steps after a warm-up that fills the
 * replay ring. Figures go to stdout as a markdown table row, so they can be
 * pasted into docs/performance.md with the machine and software versions.
 *
 *   foxbench [--backend cpu|cuda] [--batch N]... [--envs N] [--chunk N]
 *            [--reps N] [--set key=value]... [--engines K] [--digest]
 *            [--trace FILE]
 *
 * --engines K: K engines in this one process, each on a thread of its own
 * with its own seed (train.seed, train.seed + 1, …), one row each; they
 * start timing together once every one is warm, so that each median chunk
 * falls in the time all K run (bench/multi_run.sh MODE=engines sums them).
 * --set engine.members=K: one engine training K members side by side; a
 * step's time is the population's, and the line on stderr gives the
 * member train steps/s in all (K per step).
 * --digest: after the timed steps, the parameters' digest
 * (fox_engine_params_digest) in a last column, beside the seed: a run of
 * seed s gives the digest of seed s alone, whatever else shares the device.
 *
 * --trace (builds with CUPTI): no timing; after the warm-up, one chunk of
 * full steps and one of train steps with the device's timeline of every
 * kernel written to FILE (trace.h; bench/timeline.py reads it).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/engine.h"
#include "common/clock.h"
#include "common/log.h"
#ifdef FOX_HAVE_CUPTI
#include "bench/trace.h"
#endif

static double
now_us(void)
{
    return fox_mono_s() * 1e6;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef int (*step_fn)(fox_engine *, int, fox_step_stats *);

/* Threads, and engines, of one --engines run: far more than a device's worth. */
#define FOXBENCH_MAX_ENGINES 256

/* Median, min, max µs per step over reps chunks of chunk steps. */
static int
time_steps(fox_engine *e, step_fn fn, int chunk, int reps, double out[3])
{
    double *t = calloc((size_t)reps, sizeof *t);
    if (!t)
        return FOX_ENOMEM;
    for (int r = 0; r < reps; r++) {
        double t0 = now_us();
        int rv = fn(e, chunk, NULL);
        if (rv != FOX_OK) {
            free(t);
            return rv;
        }
        t[r] = (now_us() - t0) / chunk;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    out[0] = t[reps / 2];
    out[1] = t[0];
    out[2] = t[reps - 1];
    free(t);
    return FOX_OK;
}

/* One engine's run: its config in, its figures (or its error) out. */
typedef struct bench_run {
    fox_config cfg;
    int chunk, reps, digest;
    const char *trace;
    pthread_barrier_t *together; /* every engine at the same point: warm, then between timings */
    fox_engine_info info;
    double full[3], train[3];
    uint64_t params_digest;
    int rv;
    char err[512];
} bench_run;

/*
 * An engine's whole life on its own thread (it owns the engine): create,
 * warm up, time full steps, then train steps. It reaches both barriers even
 * after a failure, so that the others never wait for it in vain.
 */
static void *
run_engine(void *arg)
{
    bench_run *r = arg;
    fox_engine *e = NULL;
    int rv = fox_engine_create(&e, &r->cfg, r->err, sizeof r->err);
    if (rv == FOX_OK && (rv = fox_engine_load_data(e)) == FOX_OK &&
        (rv = fox_engine_begin_fold(e, 0)) == FOX_OK) {
        fox_engine_get_info(e, &r->info);
        if (r->chunk <= 0)
            r->chunk = strcmp(r->info.backend, "cpu") == 0 ? 5 : 200;
        /* Warm up until the ring holds learning_starts transitions and a few train steps ran. */
        rv = fox_engine_run_steps(e, r->cfg.learning_starts / r->info.n_envs + 3, NULL);
    }
    pthread_barrier_wait(r->together);
    if (rv == FOX_OK)
        rv = time_steps(e, fox_engine_run_steps, r->chunk, r->reps, r->full);
    pthread_barrier_wait(r->together);
    if (rv == FOX_OK)
        rv = time_steps(e, fox_engine_train_only, r->chunk, r->reps, r->train);
    if (rv == FOX_OK && r->digest)
        rv = fox_engine_params_digest(e, 0, &r->params_digest);
    if (rv != FOX_OK && e)
        snprintf(r->err, sizeof r->err, "%s", fox_engine_errmsg(e));
#ifdef FOX_HAVE_CUPTI
    if (rv == FOX_OK && r->trace)
        rv = fox_trace_end(r->trace, r->err, sizeof r->err);
#endif
    fox_engine_destroy(e);
    r->rv = rv;
    return NULL;
}

/* K engines of cfg at once, engine i with seed cfg.seed + i; their rows on stdout. */
static int
bench_engines(const fox_config *cfg, int k, int chunk, int reps, int digest, const char *trace)
{
    bench_run *runs = calloc((size_t)k, sizeof *runs);
    pthread_t *threads = calloc((size_t)k, sizeof *threads);
    pthread_barrier_t together;
    int started = 0, failed = 0;
    if (!runs || !threads || pthread_barrier_init(&together, NULL, (unsigned)k) != 0) {
        fprintf(stderr, "foxbench: out of memory for %d engines\n", k);
        free(runs);
        free(threads);
        return 1;
    }
    for (int i = 0; i < k; i++) {
        runs[i] = (bench_run){.cfg = *cfg, .chunk = chunk, .reps = reps, .digest = digest,
                              .trace = trace, .together = &together};
        runs[i].cfg.seed = cfg->seed + (uint64_t)i;
    }
    for (; started < k; started++)
        if (pthread_create(&threads[started], NULL, run_engine, &runs[started]) != 0)
            break;
    if (started < k) {
        /* The barrier counts k: without every thread it would never open. */
        fprintf(stderr, "foxbench: cannot start the thread of engine %d of %d\n", started, k);
        exit(1);
    }
    for (int i = 0; i < k; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&together);
    double sum = 0;
    for (int i = 0; i < k; i++) {
        const bench_run *r = &runs[i];
        if (r->rv != FOX_OK) {
            fprintf(stderr, "foxbench: engine %d (seed %" PRIu64 "): %s\n", i, r->cfg.seed,
                    r->err[0] ? r->err : fox_strerror(r->rv));
            failed = 1;
            continue;
        }
        printf("| %s | %d | %d | %zu | %.0f [%.0f–%.0f] | %.0f [%.0f–%.0f] |", r->info.backend,
               r->info.batch, r->info.n_envs, r->info.n_params, r->full[0], r->full[1],
               r->full[2], r->train[0], r->train[1], r->train[2]);
        if (k > 1 || digest)
            printf(" %" PRIu64 " |", r->cfg.seed);
        if (digest)
            printf(" %016" PRIx64 " |", r->params_digest);
        printf("\n");
        sum += 1e6 / r->train[0] * r->info.n_members;
    }
    fflush(stdout);
    int members = runs[0].info.n_members;
    if ((k > 1 || members > 1) && !failed)
        fprintf(stderr,
                "foxbench: %d engine%s of %d member%s, batch %d: %.0f member train steps/s in "
                "all\n",
                k, k > 1 ? "s" : "", members, members > 1 ? "s" : "", runs[0].info.batch, sum);
    free(runs);
    free(threads);
    return failed;
}

static void
usage(void)
{
    fprintf(stderr, "usage: foxbench [--backend cpu|cuda] [--batch N]... [--envs N] [--chunk N] "
                    "[--reps N] [--set key=value]... [--engines K] [--digest] [--trace FILE]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    fox_config base;
    char err[512];
    int batches[16], n_batches = 0, chunk = 0, reps = 15, engines = 1, digest = 0;
    const char *trace = NULL;
    fox_config_default(&base);
    fox_log_level = FOX_LOG_WARNING;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rv = FOX_OK;
        if (strcmp(a, "--digest") == 0) {
            digest = 1;
            continue;
        }
        if (!v)
            usage();
        if (strcmp(a, "--backend") == 0)
            rv = fox_config_set(&base, "engine.backend", v, err, sizeof err);
        else if (strcmp(a, "--batch") == 0 && n_batches < 16)
            batches[n_batches++] = atoi(v);
        else if (strcmp(a, "--envs") == 0)
            rv = fox_config_set(&base, "env.n_envs", v, err, sizeof err);
        else if (strcmp(a, "--chunk") == 0)
            chunk = atoi(v);
        else if (strcmp(a, "--reps") == 0)
            reps = atoi(v);
        else if (strcmp(a, "--engines") == 0)
            engines = atoi(v);
        else if (strcmp(a, "--set") == 0)
            rv = fox_config_set_pair(&base, v, err, sizeof err);
        else if (strcmp(a, "--trace") == 0)
            trace = v;
        else
            usage();
        if (rv != FOX_OK) {
            fprintf(stderr, "foxbench: %s\n", err);
            return 2;
        }
        i++;
    }
    if (engines < 1 || engines > FOXBENCH_MAX_ENGINES) {
        fprintf(stderr, "foxbench: --engines takes 1 to %d\n", FOXBENCH_MAX_ENGINES);
        return 2;
    }
    if (n_batches == 0)
        batches[n_batches++] = 0;
    if (trace) {
#ifdef FOX_HAVE_CUPTI
        if (n_batches > 1 || engines > 1) {
            fprintf(stderr, "foxbench: --trace takes one --batch and one engine\n");
            return 2;
        }
        if (fox_trace_begin(err, sizeof err) != FOX_OK) {
            fprintf(stderr, "foxbench: %s\n", err);
            return 1;
        }
        reps = 1; /* one chunk of each under the tracer, whose timings mean nothing */
#else
        fprintf(stderr, "foxbench: --trace needs a build with CUPTI\n");
        return 2;
#endif
    }
    if (reps < 1)
        reps = 1;
    printf("| backend | batch | envs | params | full step µs (median [min–max]) | "
           "train step µs (median [min–max]) |%s%s\n|---|---|---|---|---|---|%s%s\n",
           engines > 1 || digest ? " seed |" : "", digest ? " params digest |" : "",
           engines > 1 || digest ? "---|" : "", digest ? "---|" : "");
    for (int b = 0; b < n_batches; b++) {
        fox_config cfg = base;
        cfg.batch = batches[b];
        if (bench_engines(&cfg, engines, chunk, reps, digest, trace) != 0)
            return 1;
    }
    return 0;
}
