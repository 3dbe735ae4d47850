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
 *            [--reps N] [--set key=value]... [--trace FILE]
 *
 * --trace (builds with CUPTI): no timing; after the warm-up, one chunk of
 * full steps and one of train steps with the device's timeline of every
 * kernel written to FILE (trace.h; bench/timeline.py reads it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/engine.h"
#include "common/log.h"
#ifdef FOX_HAVE_CUPTI
#include "bench/trace.h"
#endif

static double
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef int (*step_fn)(fox_engine *, int, fox_step_stats *);

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

static void
usage(void)
{
    fprintf(stderr, "usage: foxbench [--backend cpu|cuda] [--batch N]... [--envs N] [--chunk N] "
                    "[--reps N] [--set key=value]... [--trace FILE]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    fox_config base;
    char err[512];
    int batches[16], n_batches = 0, chunk = 0, reps = 15;
    const char *trace = NULL;
    fox_config_default(&base);
    fox_log_level = FOX_LOG_WARNING;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rv = FOX_OK;
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
    if (n_batches == 0)
        batches[n_batches++] = 0;
    if (trace) {
#ifdef FOX_HAVE_CUPTI
        if (n_batches > 1) {
            fprintf(stderr, "foxbench: --trace takes one --batch\n");
            return 2;
        }
        if (fox_trace_begin(err, sizeof err) != FOX_OK) {
            fprintf(stderr, "foxbench: %s\n", err);
            return 1;
        }
#else
        fprintf(stderr, "foxbench: --trace needs a build with CUPTI\n");
        return 2;
#endif
    }
    if (reps < 1)
        reps = 1;
    printf("| backend | batch | envs | params | full step µs (median [min–max]) | "
           "train step µs (median [min–max]) |\n|---|---|---|---|---|---|\n");
    for (int b = 0; b < n_batches; b++) {
        fox_config cfg = base;
        cfg.batch = batches[b];
        fox_engine *e = NULL;
        int rv = fox_engine_create(&e, &cfg, err, sizeof err);
        if (rv != FOX_OK) {
            fprintf(stderr, "foxbench: %s\n", err);
            return 1;
        }
        fox_engine_info info;
        double full[3], train[3];
        if ((rv = fox_engine_load_data(e)) == FOX_OK &&
            (rv = fox_engine_begin_fold(e, 0)) == FOX_OK) {
            fox_engine_get_info(e, &info);
            int ch = chunk > 0 ? chunk : (strcmp(info.backend, "cpu") == 0 ? 5 : 200);
            /* Warm up until the ring holds learning_starts transitions and a few train steps ran.
             */
            int warm = cfg.learning_starts / info.n_envs + 3;
            rv = fox_engine_run_steps(e, warm, NULL);
            if (trace)
                reps = 1; /* one chunk of each under the tracer, whose timings mean nothing */
            if (rv == FOX_OK)
                rv = time_steps(e, fox_engine_run_steps, ch, reps, full);
            if (rv == FOX_OK)
                rv = time_steps(e, fox_engine_train_only, ch, reps, train);
        }
#ifdef FOX_HAVE_CUPTI
        if (rv == FOX_OK && trace && (rv = fox_trace_end(trace, err, sizeof err)) != FOX_OK) {
            fprintf(stderr, "foxbench: %s\n", err);
            fox_engine_destroy(e);
            return 1;
        }
#endif
        if (rv != FOX_OK) {
            fprintf(stderr, "foxbench: %s\n", fox_engine_errmsg(e));
            fox_engine_destroy(e);
            return 1;
        }
        printf("| %s | %d | %d | %zu | %.0f [%.0f–%.0f] | %.0f [%.0f–%.0f] |\n", info.backend,
               info.batch, info.n_envs, info.n_params, full[0], full[1], full[2], train[0],
               train[1], train[2]);
        fflush(stdout);
        fox_engine_destroy(e);
    }
    return 0;
}
