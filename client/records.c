/*
 * records.c — foxctl's commands over run directories: plot (draw the
 * pictures again, or keep redrawing a running run's), compare (one
 * picture of several runs), backtest (apply a saved policy to new bars, through a
 * private `foxd --backtest`, since foxctl links no engine, or with --daemon
 * through the running foxd's backtest command) and checkpoint list.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "client/print.h"
#include "client/records.h"
#include "common/fsutil.h"
#include "proto/proto.h"
#include "proto/table.h"

/*
 * How long backtest --daemon waits for its answer unless --timeout is given:
 * the daemon answers when the backtest is done, which takes as long as its
 * bars need, far beyond the 5 s every other request gets.
 */
#define BACKTEST_TIMEOUT_MS 3600000

/* Run argv[0] (found by fox_find_program) with argv and wait: its exit status, or -1. */
static int
run_program(char *const argv[])
{
    int st = fox_run_program(argv, NULL, NULL);
    if (st < 0)
        fprintf(stderr, "foxctl: cannot run %s: %s\n", argv[0], strerror(errno));
    return st;
}

/* foxplot's exit status as foxctl's: 2 (usage) stays a usage error. */
static int
plot_status(int st)
{
    return st == 0 ? FOXCTL_OK : st == 2 ? FOXCTL_USAGE : FOXCTL_EREPLY;
}

/* 1 when path is a directory; else says why, after "foxctl: what: ". */
static int
is_dir(const char *what, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "foxctl: %s: %s: %s\n", what, path, strerror(errno));
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "foxctl: %s: %s is not a directory\n", what, path);
        return 0;
    }
    return 1;
}

/* plot --follow's stop: SIGINT or SIGTERM, while it sleeps or while foxplot draws. */
static volatile sig_atomic_t follow_stop;

static void
on_follow_stop(int sig)
{
    (void)sig;
    follow_stop = 1;
}

/*
 * Redraw dir's pictures each time metrics.jsonl has grown (an epoch or a
 * fold closed: the CSV files foxplot reads grew with it), looking every
 * `every` seconds and sleeping in between, until folds.json appears (the
 * run has closed and foxd draws the last pictures itself) or a signal
 * stops it. A picture foxplot refuses mid-run is said and drawn again at
 * the next change; no gnuplot, or a usage error, ends the follow.
 */
static int
plot_follow(const char *prog, const char *dir, int every)
{
    char metrics[PATH_MAX + 32], folds[PATH_MAX + 32], conf[PATH_MAX + 32];
    char *pargv[] = {(char *)prog, (char *)dir, NULL};
    struct sigaction sa = {.sa_handler = on_follow_stop};
    struct stat st;
    off_t drawn = -1;
    int draws = 0;
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    snprintf(folds, sizeof folds, "%s/folds.json", dir);
    snprintf(conf, sizeof conf, "%s/config.json", dir);
    if (stat(conf, &st) != 0) {
        fprintf(stderr, "foxctl: plot --follow: %s has no config.json: not a run directory (foxd "
                        "writes it as a run starts)\n",
                dir);
        return FOXCTL_USAGE;
    }
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    while (!follow_stop) {
        if (stat(folds, &st) == 0) {
            fprintf(stderr, "foxctl: plot --follow: the run in %s has ended after %d redraws; "
                            "foxd draws its last pictures\n",
                    dir, draws);
            return FOXCTL_OK;
        }
        if (stat(metrics, &st) == 0 && st.st_size != drawn) {
            drawn = st.st_size;
            int rv = run_program(pargv);
            if (rv < 0 || rv == 2 || rv == 3)
                return plot_status(rv < 0 ? 1 : rv);
            draws++;
        }
        /* A signal cuts the sleep short; the loop's test then ends the follow. */
        struct timespec ts = {.tv_sec = every};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "foxctl: plot --follow: stopped after %d redraws\n", draws);
    return FOXCTL_OK;
}

int
foxctl_cmd_plot(foxctl_opts *o, int argc, char **argv)
{
    (void)o;
    const char *dir = NULL;
    int follow = 0, every = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--follow")) {
            follow = 1;
        } else if (!strcmp(argv[i], "--every") && i + 1 < argc) {
            if (!foxctl_parse_int(argv[++i], 1, 3600, &every)) {
                fprintf(stderr, "foxctl: plot: --every '%s' is not a whole number of seconds "
                                "from 1 to 3600\n",
                        argv[i]);
                return FOXCTL_USAGE;
            }
        } else if (argv[i][0] != '-' && !dir) {
            dir = argv[i];
        } else {
            fprintf(stderr, "foxctl: plot: '%s' is not --follow, --every S or one RUN_DIR\n",
                    argv[i]);
            return FOXCTL_USAGE;
        }
    }
    if (!dir) {
        fprintf(stderr, "foxctl: plot [--follow [--every S]] RUN_DIR\n");
        return FOXCTL_USAGE;
    }
    if (!is_dir("plot", dir))
        return FOXCTL_USAGE;
    char prog[1024];
    fox_find_program("foxplot", "FOXPLOT", prog, sizeof prog);
    if (follow)
        return plot_follow(prog, dir, every);
    char *pargv[] = {prog, (char *)dir, NULL};
    return plot_status(run_program(pargv));
}

int
foxctl_cmd_compare(foxctl_opts *o, int argc, char **argv)
{
    (void)o;
    const char *out = ".";
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--out")) {
        out = argv[2];
        first = 3;
    }
    if (argc - first < 1) {
        fprintf(stderr, "foxctl: compare [--out DIR] RUN_DIR...\n");
        return FOXCTL_USAGE;
    }
    if (!is_dir("compare --out", out))
        return FOXCTL_USAGE;
    for (int i = first; i < argc; i++) {
        if (argv[i][0] == '-') {
            fprintf(stderr, "foxctl: compare: '%s': --out DIR comes first, then the run "
                            "directories\n",
                    argv[i]);
            return FOXCTL_USAGE;
        }
        if (!is_dir("compare", argv[i]))
            return FOXCTL_USAGE;
    }
    char prog[1024];
    char **pargv = calloc((size_t)(argc - first) + 4, sizeof *pargv);
    if (!pargv)
        return FOXCTL_EREPLY;
    int n = 0;
    fox_find_program("foxplot", "FOXPLOT", prog, sizeof prog);
    pargv[n++] = prog;
    pargv[n++] = "--compare";
    pargv[n++] = (char *)out;
    for (int i = first; i < argc; i++)
        pargv[n++] = argv[i];
    int st = run_program(pargv);
    free(pargv);
    return plot_status(st);
}

/* backtest --daemon: the running foxd does it; paths are the daemon's (the checkpoint inside its
 * state directory). */
static int
backtest_on_daemon(foxctl_opts *o, int argc, char **argv)
{
    cJSON *args = cJSON_CreateObject();
    for (int i = 1; i < argc; i++) {
        int val_from, from, to;
        if (!strcmp(argv[i], "--daemon"))
            continue;
        if (i + 1 < argc && !strcmp(argv[i], "--checkpoint")) {
            cJSON_AddStringToObject(args, "checkpoint", argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--data")) {
            cJSON_AddStringToObject(args, "data", argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--bars") &&
                   fox_proto_parse_bars(argv[i + 1], &val_from, &from, &to) == 0) {
            cJSON_AddNumberToObject(args, "bars_from", from);
            cJSON_AddNumberToObject(args, "bars_to", to);
            if (val_from >= 0)
                cJSON_AddNumberToObject(args, "val_from", val_from);
            i++;
        } else {
            fprintf(stderr, "foxctl: backtest --daemon: '%s' is not --checkpoint FILE, --data CSV "
                            "or --bars [VAL:]FROM:TO\n",
                    argv[i]);
            cJSON_Delete(args);
            return FOXCTL_USAGE;
        }
    }
    fox_reply rep;
    if (!o->timeout_given)
        o->timeout_ms = BACKTEST_TIMEOUT_MS;
    /*
     * A long wait blocks in nng, where the SIGINT flag is never looked at:
     * Ctrl-C ends foxctl at once instead. Nothing is left to clean up, and
     * foxd goes on with the backtest either way.
     */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int rv = foxctl_ask(o, "backtest", args, &rep);
    if (rv == FOXCTL_NODAEMON)
        fprintf(stderr, "foxctl: backtest --daemon: a foxd that got the request goes on with "
                        "the backtest and writes its run directory under its state directory's "
                        "runs/ (give --timeout MS to wait longer)\n");
    if (rv != FOXCTL_OK)
        return rv;
    if (o->json) {
        foxctl_print_reply(&rep);
    } else {
        fox_table_backtest(stdout, rep.result);
        fprintf(stderr, "run directory %s\n", foxctl_jstr(rep.result, "run_dir", "?"));
    }
    fox_reply_fini(&rep);
    return FOXCTL_OK;
}

int
foxctl_cmd_backtest(foxctl_opts *o, int argc, char **argv)
{
    const char *ckpt = NULL;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--daemon"))
            return backtest_on_daemon(o, argc, argv);
    char foxd[1024];
    char **fargv = calloc((size_t)argc + 4, sizeof *fargv);
    int n = 0;
    if (!fargv)
        return FOXCTL_USAGE;
    fox_find_program("foxd", "FOXD", foxd, sizeof foxd);
    fargv[n++] = foxd;
    fargv[n++] = "--backtest";
    n++; /* the checkpoint, once found */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc)
            ckpt = argv[++i];
        else
            fargv[n++] = argv[i]; /* --data, --bars, --out and foxd's own options */
    }
    if (!ckpt) {
        fprintf(stderr, "foxctl: backtest --checkpoint FILE [--data CSV] [--bars [VAL:]FROM:TO] "
                        "[--out DIR] [FOXD OPTIONS]\n");
        free(fargv);
        return FOXCTL_USAGE;
    }
    fargv[2] = (char *)ckpt;
    fargv[n] = NULL;
    int st = run_program(fargv);
    free(fargv);
    return plot_status(st);
}

/* ------------------------------------------------------------ checkpoint list */

typedef struct ckpt_entry {
    char name[1100]; /* relative to the listed directory */
    off_t size;
    time_t mtime;
    cJSON *meta; /* the sidecar, NULL when there is none */
} ckpt_entry;

typedef struct ckpt_list {
    ckpt_entry *v;
    int n, cap;
} ckpt_list;

static cJSON *
read_sidecar(const char *ckpt_path)
{
    char path[1200];
    size_t len = strlen(ckpt_path);
    snprintf(path, sizeof path, "%.*s.json", (int)(len - 5), ckpt_path);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char buf[4096];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = 0;
    return cJSON_Parse(buf);
}

/* Checkpoints in dir/rel, and in its subdirectories down to depth (a state dir's runs/<run>/). */
static void
scan(ckpt_list *l, const char *root, const char *rel, int depth)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[2100], sub[1100];
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
        if (stat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth > 0)
                scan(l, root, sub, depth - 1);
            continue;
        }
        size_t len = strlen(de->d_name);
        if (!S_ISREG(st.st_mode) || len < 6 || strcmp(de->d_name + len - 5, ".ckpt") != 0)
            continue;
        if (l->n == l->cap) {
            int cap = l->cap ? 2 * l->cap : 32;
            ckpt_entry *v = realloc(l->v, (size_t)cap * sizeof *v);
            if (!v)
                break;
            l->v = v;
            l->cap = cap;
        }
        ckpt_entry *e = &l->v[l->n++];
        snprintf(e->name, sizeof e->name, "%s", sub);
        e->size = st.st_size;
        e->mtime = st.st_mtime;
        e->meta = read_sidecar(path);
    }
    closedir(d);
}

static int
by_name(const void *a, const void *b)
{
    return strcmp(((const ckpt_entry *)a)->name, ((const ckpt_entry *)b)->name);
}

/* A sidecar's number as text, "-" when the sidecar or the number is missing. */
static void
meta_text(const cJSON *meta, const char *key, const char *fmt, double add, char *buf, size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, key);
    if (cJSON_IsNumber(v))
        snprintf(buf, len, fmt, v->valuedouble + add);
    else
        snprintf(buf, len, "-");
}

int
foxctl_cmd_checkpoint_list(foxctl_opts *o, int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "foxctl: checkpoint list DIR (a run directory or foxd's state "
                        "directory)\n");
        return FOXCTL_USAGE;
    }
    const char *root = argv[2];
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "foxctl: checkpoint list: %s is not a directory\n", root);
        return FOXCTL_USAGE;
    }
    ckpt_list l = {0};
    scan(&l, root, "", 2);
    qsort(l.v, (size_t)l.n, sizeof *l.v, by_name);
    cJSON *all = o->json ? cJSON_CreateArray() : NULL;
    if (!o->json)
        printf("%-48s %4s %5s %8s %8s %9s  %s\n", "name", "fold", "epoch", "step", "val Shrp",
               "size", "time (UTC)");
    for (int i = 0; i < l.n; i++) {
        ckpt_entry *e = &l.v[i];
        char fold[16], epoch[16], step[24], val[24], when[32];
        struct tm tm;
        gmtime_r(&e->mtime, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        if (all) {
            cJSON *j = e->meta ? cJSON_Duplicate(e->meta, 1) : cJSON_CreateObject();
            cJSON_AddStringToObject(j, "name", e->name);
            cJSON_AddNumberToObject(j, "size", (double)e->size);
            cJSON_AddStringToObject(j, "time", when);
            cJSON_AddItemToArray(all, j);
        } else {
            meta_text(e->meta, "fold", "%.0f", 0, fold, sizeof fold);
            meta_text(e->meta, "epoch", "%.0f", 1, epoch, sizeof epoch); /* people count from 1 */
            meta_text(e->meta, "step", "%.0f", 0, step, sizeof step);
            meta_text(e->meta, "val_sharpe", "%.3f", 0, val, sizeof val);
            printf("%-48s %4s %5s %8s %8s %8.1fM  %s\n", e->name, fold, epoch, step, val,
                   (double)e->size / (1024.0 * 1024.0), when);
        }
        cJSON_Delete(e->meta);
    }
    if (all) {
        foxctl_print_json(all);
        cJSON_Delete(all);
    } else if (l.n == 0) {
        printf("(no checkpoints in %s)\n", root);
    }
    free(l.v);
    return FOXCTL_OK;
}
