/*
 * sweep.c — `foxctl sweep`: the spec (JSON file and command line), the plan
 * of jobs in the sweep's directory, the Slurm task list, and the table
 * gathered from the jobs' results. Running jobs on daemons is sweep_run.c.
 * See sweep.h and docs/operations.md ("Sweeps").
 *
 * The spec:
 *   {"folds":[0,1,2], "seeds":[1,2,3],
 *    "grid":{"train.lr":[0.0003,0.001]},         every combination is a configuration
 *    "set":{"data.source":"/data/bars.csv"},      the same for every job
 *    "job_set":{"run.dir":"{dir}/runs/{id}"},     per job: {dir} {id} {seed} {fold} {config}
 *    "epochs":3, "steps_per_epoch":500}           the run's (default: the daemon's config)
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/print.h"
#include "client/sweep.h"
#include "client/sweep_plan.h"
#include "client/sweep_run.h"
#include "common/clock.h"
#include "common/fsutil.h"
#include "common/member_keys.h"

#define MAX_ENDPOINTS 64
#define MAX_BASELINES 16
#define MAX_JOBS      100000 /* a sweep's plan, its files and its table stay a sane size */

static int
job_file_exists(const sweep_plan *p, const sweep_job *j)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/jobs/%s.json", p->dir, j->id);
    return access(path, F_OK) == 0;
}

/* ------------------------------------------------------------------- spec */

/* Command-line text as the JSON value a config key takes: a number, a bool or a string. */
static cJSON *
value_from_text(const char *s)
{
    char *end;
    double x = strtod(s, &end);
    if (s[0] && !*end && isfinite(x))
        return cJSON_CreateNumber(x);
    if (!strcmp(s, "true") || !strcmp(s, "false"))
        return cJSON_CreateBool(!strcmp(s, "true"));
    return cJSON_CreateString(s);
}

/* "a,b,c" of the command line as a JSON array of values. */
static cJSON *
list_from_text(const char *s)
{
    cJSON *a = cJSON_CreateArray();
    char *copy = strdup(s);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        cJSON_AddItemToArray(a, value_from_text(t));
    free(copy);
    return a;
}

static int
spec_error(const char *what, const char *why)
{
    fprintf(stderr, "foxctl: sweep: %s: %s\n", what, why);
    return FOXCTL_USAGE;
}

static int
is_scalar(const cJSON *v)
{
    return cJSON_IsNumber(v) || cJSON_IsString(v) || cJSON_IsBool(v);
}

/* Check a spec: known members, each of the right shape. */
static int
check_spec(const cJSON *spec)
{
    static const char *const known[] = {"folds",   "seeds",  "grid",           "set",
                                        "job_set", "epochs", "steps_per_epoch", NULL};
    if (!cJSON_IsObject(spec))
        return spec_error("spec", "must be a JSON object");
    for (const cJSON *m = spec->child; m; m = m->next) {
        int ok = 0;
        for (int i = 0; known[i]; i++)
            ok |= !strcmp(m->string, known[i]);
        if (!ok)
            return spec_error(m->string, "unknown member (folds, seeds, grid, set, job_set, "
                                         "epochs, steps_per_epoch)");
    }
    const char *lists[] = {"folds", "seeds"};
    for (int i = 0; i < 2; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(spec, lists[i]);
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0)
            return spec_error(lists[i], "must be a non-empty array of integers");
        for (const cJSON *v = a->child; v; v = v->next)
            if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
                v->valuedouble < 0 || v->valuedouble > (i ? 9007199254740991.0 : 30))
                return spec_error(lists[i], i ? "seeds are integers in [0, 2^53)"
                                              : "folds are integers in [0, 30]");
    }
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(spec, "grid");
    for (const cJSON *k = grid ? grid->child : NULL; k; k = k->next)
        if (!cJSON_IsArray(k) || cJSON_GetArraySize(k) == 0 || !is_scalar(k->child))
            return spec_error(k->string, "a grid key takes a non-empty array of values");
    if (grid && !cJSON_IsObject(grid))
        return spec_error("grid", "must be an object of key: [values]");
    const char *maps[] = {"set", "job_set"};
    for (int i = 0; i < 2; i++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(spec, maps[i]);
        if (m && !cJSON_IsObject(m))
            return spec_error(maps[i], "must be an object of key: value");
        for (const cJSON *k = m ? m->child : NULL; k; k = k->next)
            if (!is_scalar(k) || (i == 1 && !cJSON_IsString(k)))
                return spec_error(k->string, i ? "job_set values are strings" : "not a scalar");
    }
    const char *ints[] = {"epochs", "steps_per_epoch"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, ints[i]);
        if (v && (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e9 ||
                  v->valuedouble != floor(v->valuedouble)))
            return spec_error(ints[i], "must be a positive integer");
    }
    return FOXCTL_OK;
}

/* {dir}, {id}, {seed}, {fold}, {config} of a job_set template. */
static void
expand(char *out, size_t len, const char *tmpl, const sweep_plan *p, const sweep_job *j)
{
    size_t n = 0;
    out[0] = 0;
    for (const char *s = tmpl; *s && n + 1 < len;) {
        char val[1100] = "";
        const char *close = *s == '{' ? strchr(s, '}') : NULL;
        if (close) {
            size_t k = (size_t)(close - s - 1);
            if (k == 3 && !strncmp(s + 1, "dir", 3))
                snprintf(val, sizeof val, "%s", p->dir);
            else if (k == 2 && !strncmp(s + 1, "id", 2))
                snprintf(val, sizeof val, "%s", j->id);
            else if (k == 4 && !strncmp(s + 1, "seed", 4))
                snprintf(val, sizeof val, "%" PRIu64, j->seed);
            else if (k == 4 && !strncmp(s + 1, "fold", 4))
                snprintf(val, sizeof val, "%d", j->fold);
            else if (k == 6 && !strncmp(s + 1, "config", 6))
                snprintf(val, sizeof val, "%d", j->config);
            else
                close = NULL;
        }
        if (close) {
            n += (size_t)snprintf(out + n, len - n, "%s", val);
            s = close + 1;
        } else {
            out[n++] = *s++;
            out[n] = 0;
        }
    }
}

static void
plan_fini(sweep_plan *p)
{
    for (int i = 0; i < p->n_jobs; i++)
        cJSON_Delete(p->jobs[i].values);
    free(p->jobs);
    free(p->labels);
    cJSON_Delete(p->spec);
    memset(p, 0, sizeof *p);
}

/* *n times by (by >= 1) where the product stays within MAX_JOBS; else 0 and *n unchanged. */
static int
times_within(long *n, long by)
{
    if (*n > MAX_JOBS / by)
        return 0;
    *n *= by;
    return 1;
}

static int
too_many_jobs(int n_keys, const cJSON *folds, const cJSON *seeds)
{
    char why[200];
    snprintf(why, sizeof why,
             "the grid's %d key(s) x %d seed(s) x %d fold(s) make more than %d jobs; "
             "split the sweep or shorten the lists",
             n_keys, cJSON_GetArraySize(seeds), cJSON_GetArraySize(folds), MAX_JOBS);
    return spec_error("grid", why);
}

/* Expand the spec: configurations (the grid's product) × seeds × folds, config-major. */
static int
plan_build(sweep_plan *p)
{
    const cJSON *spec = p->spec;
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(spec, "grid");
    const cJSON *folds = cJSON_GetObjectItemCaseSensitive(spec, "folds");
    const cJSON *seeds = cJSON_GetObjectItemCaseSensitive(spec, "seeds");
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(spec, "set");
    const cJSON *job_set = cJSON_GetObjectItemCaseSensitive(spec, "job_set");
    int n_keys = grid ? cJSON_GetArraySize(grid) : 0;
    /*
     * Each factor is checked against the limit before it multiplies, so no
     * product can wrap (64 keys of 2 values would wrap to 0 jobs).
     */
    long n_cfg = 1, n_jobs;
    for (const cJSON *k = grid ? grid->child : NULL; k; k = k->next)
        if (!times_within(&n_cfg, cJSON_GetArraySize(k)))
            return too_many_jobs(n_keys, folds, seeds);
    n_jobs = n_cfg;
    if (!times_within(&n_jobs, cJSON_GetArraySize(folds)) ||
        !times_within(&n_jobs, cJSON_GetArraySize(seeds)))
        return too_many_jobs(n_keys, folds, seeds);
    p->epochs = (int)foxctl_jnum(spec, "epochs", 0);
    p->steps_per_epoch = (int)foxctl_jnum(spec, "steps_per_epoch", 0);
    p->n_configs = (int)n_cfg;
    p->labels = calloc((size_t)n_cfg, sizeof *p->labels);
    p->jobs = calloc((size_t)n_jobs, sizeof *p->jobs);
    if (!p->labels || !p->jobs)
        return spec_error("plan", "out of memory");
    for (int c = 0; c < n_cfg; c++) {
        /* Configuration c: its digits in the mixed radix of the grid's list lengths. */
        cJSON *vals = cJSON_CreateObject();
        size_t used = 0;
        int rest = c;
        const cJSON *k = grid ? grid->child : NULL;
        for (int i = 0; i < n_keys; i++, k = k->next) {
            int len = cJSON_GetArraySize(k);
            const cJSON *v = cJSON_GetArrayItem(k, rest % len);
            char text[256];
            rest /= len;
            cJSON_AddItemToObject(vals, k->string, cJSON_Duplicate(v, 1));
            foxctl_sweep_value_text(v, text, sizeof text);
            used += (size_t)snprintf(p->labels[c] + used,
                                     used < sizeof p->labels[c] ? sizeof p->labels[c] - used : 0,
                                     "%s%s=%s", used ? " " : "", k->string, text);
        }
        if (!n_keys)
            snprintf(p->labels[c], sizeof p->labels[c], "(as set)");
        for (const cJSON *s = seeds->child; s; s = s->next) {
            for (const cJSON *f = folds->child; f; f = f->next) {
                sweep_job *j = &p->jobs[p->n_jobs];
                j->lead = p->n_jobs++;
                j->next = -1;
                j->members = 1;
                j->config = c;
                j->seed = (uint64_t)s->valuedouble;
                j->fold = f->valueint;
                snprintf(j->id, sizeof j->id, "c%d-s%" PRIu64 "-f%d", c, j->seed, j->fold);
                j->values = set ? cJSON_Duplicate(set, 1) : cJSON_CreateObject();
                for (const cJSON *v = vals->child; v; v = v->next) {
                    cJSON_DeleteItemFromObjectCaseSensitive(j->values, v->string);
                    cJSON_AddItemToObject(j->values, v->string, cJSON_Duplicate(v, 1));
                }
                cJSON_DeleteItemFromObjectCaseSensitive(j->values, "train.seed");
                cJSON_AddNumberToObject(j->values, "train.seed", (double)j->seed);
                for (const cJSON *t = job_set ? job_set->child : NULL; t; t = t->next) {
                    char text[2048];
                    expand(text, sizeof text, t->valuestring, p, j);
                    cJSON_DeleteItemFromObjectCaseSensitive(j->values, t->string);
                    cJSON_AddStringToObject(j->values, t->string, text);
                }
            }
        }
        cJSON_Delete(vals);
    }
    return FOXCTL_OK;
}

/*
 * Make the sweep's directory, or check that an existing one holds this very
 * spec; mark the jobs whose result is there as done.
 */
static int
plan_open_dir(sweep_plan *p)
{
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/jobs", p->dir);
    if (fox_mkdir_p(path, 0755, err, sizeof err) != FOX_OK) {
        fprintf(stderr, "foxctl: sweep: %s\n", err);
        return FOXCTL_USAGE;
    }
    snprintf(path, sizeof path, "%s/plan.json", p->dir);
    if (access(path, F_OK) == 0) {
        cJSON *old = foxctl_sweep_read_json(path, err, sizeof err);
        int same = old && cJSON_Compare(cJSON_GetObjectItemCaseSensitive(old, "spec"), p->spec, 1);
        cJSON_Delete(old);
        if (!same) {
            fprintf(stderr, "foxctl: sweep: %s holds another sweep (its plan.json has another "
                            "spec); give a new --dir\n", p->dir);
            return FOXCTL_USAGE;
        }
    }
    cJSON *plan = cJSON_CreateObject();
    cJSON_AddItemToObject(plan, "spec", cJSON_Duplicate(p->spec, 1));
    cJSON *cfgs = cJSON_AddArrayToObject(plan, "configs");
    for (int c = 0; c < p->n_configs; c++)
        cJSON_AddItemToArray(cfgs, cJSON_CreateString(p->labels[c]));
    cJSON *jobs = cJSON_AddArrayToObject(plan, "jobs");
    int done = 0;
    for (int i = 0; i < p->n_jobs; i++) {
        sweep_job *j = &p->jobs[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", j->id);
        cJSON_AddNumberToObject(o, "config", j->config);
        cJSON_AddNumberToObject(o, "seed", (double)j->seed);
        cJSON_AddNumberToObject(o, "fold", j->fold);
        cJSON_AddItemToObject(o, "values", cJSON_Duplicate(j->values, 1));
        cJSON_AddItemToArray(jobs, o);
        if (job_file_exists(p, j)) {
            j->state = SWEEP_DONE;
            done++;
        }
    }
    int rv = foxctl_sweep_write_json(path, plan);
    cJSON_Delete(plan);
    if (done)
        fprintf(stderr, "sweep: %s: %d of %d jobs already done, skipped\n", p->dir, done,
                p->n_jobs);
    return rv;
}

/* ----------------------------------------------------------------- packing */

#define PACK_MAX 64 /* engine.members' limit */

/*
 * Why the jobs of a configuration (values, train.seed aside) cannot train
 * as members of one engine, or NULL when they can. Members share their
 * data: a file, or a generator's series drawn from an explicit data.seed.
 * A generator with data.seed unset draws it from train.seed, so each seed
 * has its own series. Generators are named by bare words ("synthetic",
 * "randomwalk", "garch"); a CSV path has a dot or a slash, and a source
 * this cannot tell apart stays unpacked, which is always right.
 */
static const char *
pack_refused(const cJSON *values, int has_job_set)
{
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(values, "engine.members");
    const cJSON *data_seed = cJSON_GetObjectItemCaseSensitive(values, "data.seed");
    const char *source = foxctl_jstr(values, "data.source", NULL);
    if (has_job_set)
        return "job_set gives each job values of its own";
    if (members)
        return "the sweep sets engine.members itself";
    if (cJSON_IsNumber(data_seed) && data_seed->valuedouble != 0)
        return NULL;
    if (source && strpbrk(source, "./"))
        return NULL;
    return "its data comes from train.seed (a generator with data.seed unset): set data.seed to "
           "pack its seeds";
}

/*
 * The family of configuration c: its index in the grid's product over the
 * keys that are not member keys. Configurations of one family differ in
 * member keys alone (their jobs, in those and the seed): their jobs of one
 * fold can train as the members of one engine.
 */
static int
config_family(const sweep_plan *p, int c)
{
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(p->spec, "grid");
    int family = 0, radix = 1;
    for (const cJSON *k = grid ? grid->child : NULL; k; k = k->next) {
        int len = cJSON_GetArraySize(k), digit = c % len;
        c /= len;
        if (fox_member_key_index(k->string) < 0) {
            family += digit * radix;
            radix *= len;
        }
    }
    return family;
}

/* Jobs in the order packs are cut from: family, fold, configuration, seed. */
static const sweep_job *sort_jobs;
static const int *sort_family;
static int
by_family_fold_config_seed(const void *a, const void *b)
{
    const sweep_job *x = &sort_jobs[*(const int *)a], *y = &sort_jobs[*(const int *)b];
    int fx = sort_family[x->config], fy = sort_family[y->config];
    if (fx != fy)
        return fx < fy ? -1 : 1;
    if (x->fold != y->fold)
        return x->fold < y->fold ? -1 : 1;
    if (x->config != y->config)
        return x->config < y->config ? -1 : 1;
    return x->seed < y->seed ? -1 : x->seed > y->seed;
}

/*
 * Say on stderr what the packs became: how many jobs in how many runs, the
 * keys their members hold apart, and the grid's keys that keep jobs in
 * runs of their own (an engine's members share every other key).
 */
static void
pack_report(const sweep_plan *p, int packed)
{
    char apart[256] = "", alone[256] = "", keys[256] = "";
    size_t used = 0, n_keys = 0;
    for (int i = 0; i < FOX_MEMBER_KEYS; i++) {
        int listed = 0;
        for (int j = 0; j < p->n_jobs && !listed; j++)
            listed = p->jobs[j].lead == j && p->jobs[j].members > 1 &&
                     foxctl_sweep_pack_apart(p, &p->jobs[j], fox_member_key(i));
        if (listed)
            used += (size_t)snprintf(apart + used, sizeof apart - used, "%s%s", used ? ", " : "",
                                     fox_member_key(i));
        n_keys += (size_t)snprintf(keys + n_keys, sizeof keys - n_keys, "%s%s",
                                   n_keys ? ", " : "", fox_member_key(i));
    }
    used = 0;
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(p->spec, "grid");
    for (const cJSON *k = grid ? grid->child : NULL; k; k = k->next)
        if (fox_member_key_index(k->string) < 0 && cJSON_GetArraySize(k) > 1 &&
            used < sizeof alone)
            used += (size_t)snprintf(alone + used, sizeof alone - used, "%s%s", used ? ", " : "",
                                     k->string);
    if (packed)
        fprintf(stderr, "sweep: %d jobs packed into %d run%s, members apart in %s (each job a "
                        "member of one engine; --no-pack runs them one by one)\n",
                packed, p->packs, p->packs == 1 ? "" : "s", apart);
    if (alone[0])
        fprintf(stderr, "sweep: jobs apart in %s train in runs of their own (an engine's members "
                        "differ only in %s)\n",
                alone, keys);
}

/*
 * Pack the pending jobs: per family of configurations (config_family) and
 * fold, up to PACK_MAX jobs at a time become one run with engine.members =
 * their number, member k with the k-th job's seed and values
 * (foxctl_sweep_run_values). Says on stderr what became of the jobs, which
 * configurations stay unpacked, and why.
 */
static int
plan_pack(sweep_plan *p)
{
    int packed = 0, n = 0;
    int has_job_set = cJSON_GetObjectItemCaseSensitive(p->spec, "job_set") != NULL;
    int *order = malloc((size_t)(p->n_jobs ? p->n_jobs : 1) * sizeof *order);
    int *family = malloc((size_t)p->n_configs * sizeof *family);
    char *refused = calloc((size_t)p->n_configs, 1);
    if (!order || !family || !refused) {
        free(order);
        free(family);
        free(refused);
        return spec_error("plan", "out of memory");
    }
    for (int c = 0; c < p->n_configs; c++)
        family[c] = config_family(p, c);
    for (int i = 0; i < p->n_jobs; i++) {
        const sweep_job *j = &p->jobs[i];
        /* Every job of a configuration has its values but train.seed: its first one speaks. */
        if (!refused[j->config] && (i == 0 || j->config != p->jobs[i - 1].config)) {
            const char *why = pack_refused(j->values, has_job_set);
            if (why) {
                refused[j->config] = 1;
                fprintf(stderr, "sweep: configuration %d [%s] is not packed: %s\n", j->config,
                        p->labels[j->config], why);
            }
        }
        if (j->state == SWEEP_PENDING && !refused[j->config])
            order[n++] = i;
    }
    sort_jobs = p->jobs;
    sort_family = family;
    qsort(order, (size_t)n, sizeof *order, by_family_fold_config_seed);
    for (int a = 0, b; a < n; a = b) {
        sweep_job *lead = &p->jobs[order[a]], *last = lead;
        for (b = a + 1; b < n && b - a < PACK_MAX; b++) {
            sweep_job *j = &p->jobs[order[b]];
            if (family[j->config] != family[lead->config] || j->fold != lead->fold)
                break;
            j->lead = order[a];
            j->member = b - a;
            last->next = order[b];
            last = j;
        }
        lead->members = b - a;
        if (lead->members > 1) {
            p->packs++;
            packed += lead->members;
        }
    }
    pack_report(p, packed);
    free(order);
    free(family);
    free(refused);
    return FOXCTL_OK;
}

/* ---------------------------------------------------------------- gather */

typedef struct stat_acc {
    double sum, sum2;
    int n;
} stat_acc;

static void
acc_add(stat_acc *a, double x)
{
    a->sum += x;
    a->sum2 += x * x;
    a->n++;
}

/* The standard error of the mean of a's n ≥ 2 values (sample variance). */
static double
acc_se(const stat_acc *a)
{
    double m = a->sum / a->n, var = (a->sum2 - a->n * m * m) / (a->n - 1);
    return sqrt(var > 0 ? var : 0) / sqrt(a->n);
}

/* "m ± se" (se over seeds; none with one seed), or "n/a". */
static void
acc_text(const stat_acc *a, char *buf, size_t len)
{
    if (a->n == 0)
        snprintf(buf, len, "n/a");
    else if (a->n < 2)
        snprintf(buf, len, "%.3f", a->sum / a->n);
    else
        snprintf(buf, len, "%.3f ± %.3f", a->sum / a->n, acc_se(a));
}

static void
acc_json(cJSON *o, const char *name, const stat_acc *a)
{
    cJSON *s = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(s, "n", a->n);
    if (a->n)
        cJSON_AddNumberToObject(s, "mean", a->sum / a->n);
    if (a->n > 1)
        cJSON_AddNumberToObject(s, "se", acc_se(a));
}

/* A baseline's Sharpe, by whichever name its object uses. */
static int
baseline_sharpe(const cJSON *b, double *x)
{
    static const char *const names[] = {"sharpe", "test_sharpe", "net_sharpe", "sharpe_net"};
    if (cJSON_IsNumber(b)) {
        *x = b->valuedouble;
        return 1;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, names[i]);
        if (cJSON_IsNumber(v)) {
            *x = v->valuedouble;
            return 1;
        }
    }
    return 0;
}

typedef struct baselines {
    char names[MAX_BASELINES][48];
    int n;
} baselines;

static int
baseline_index(baselines *bl, const char *name)
{
    for (int i = 0; i < bl->n; i++)
        if (!strcmp(bl->names[i], name))
            return i;
    if (bl->n == MAX_BASELINES)
        return -1;
    snprintf(bl->names[bl->n], sizeof bl->names[0], "%s", name);
    return bl->n++;
}

/*
 * The baselines a fold object carries, as "baselines": {name: {sharpe...}}
 * or [{name, sharpe...}]; absent ones are simply not there.
 */
static int
fold_baselines(const cJSON *fold, baselines *bl, double x[MAX_BASELINES], int have[MAX_BASELINES])
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(fold, "baselines");
    int n = 0;
    memset(have, 0, MAX_BASELINES * sizeof *have);
    for (const cJSON *it = b ? b->child : NULL; it; it = it->next) {
        const char *name = cJSON_IsArray(b) ? foxctl_jstr(it, "name", NULL) : it->string;
        double v;
        int k;
        if (name && baseline_sharpe(it, &v) && (k = baseline_index(bl, name)) >= 0) {
            x[k] = v;
            have[k] = 1;
            n++;
        }
    }
    return n;
}

typedef struct seed_cell {
    uint64_t seed;
    stat_acc policy, base[MAX_BASELINES];
} seed_cell;

/* The table of a sweep's directory: per configuration, mean ± SE over seeds. */
static int
gather(const char *dir, int quiet_missing)
{
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    cJSON *plan = foxctl_sweep_read_json(path, err, sizeof err);
    if (!plan) {
        fprintf(stderr, "foxctl: sweep --gather: %s\n", err);
        return FOXCTL_USAGE;
    }
    const cJSON *cfgs = cJSON_GetObjectItemCaseSensitive(plan, "configs");
    const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(plan, "jobs");
    int n_cfg = cJSON_GetArraySize(cfgs), n_jobs = cJSON_GetArraySize(jobs);
    baselines bl = {.n = 0};
    seed_cell *cells = calloc((size_t)(n_jobs ? n_jobs : 1), sizeof *cells);
    int *cell_cfg = calloc((size_t)(n_jobs ? n_jobs : 1), sizeof *cell_cfg);
    int n_cells = 0, n_done = 0, n_failed = 0;
    cJSON *summary = cJSON_CreateObject();
    cJSON *jrows = cJSON_CreateArray();

    printf("%-14s %4s %5s %4s %11s  %s\n", "job", "cfg", "seed", "fold", "test Sharpe",
           "result (run directory)");
    for (const cJSON *j = jobs ? jobs->child : NULL; j; j = j->next) {
        const char *id = foxctl_jstr(j, "id", "?");
        int c = (int)foxctl_jnum(j, "config", 0);
        uint64_t seed = (uint64_t)foxctl_jnum(j, "seed", 0);
        snprintf(path, sizeof path, "%s/jobs/%s.json", dir, id);
        cJSON *rec = access(path, F_OK) == 0 ? foxctl_sweep_read_json(path, err, sizeof err) : NULL;
        const cJSON *folds = cJSON_GetObjectItemCaseSensitive(rec, "folds");
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "id", id);
        if (!rec || !cJSON_IsArray(folds) || cJSON_GetArraySize(folds) == 0) {
            char failed[1200];
            snprintf(failed, sizeof failed, "%s/jobs/%s.failed.json", dir, id);
            cJSON *frec =
                access(failed, F_OK) == 0 ? foxctl_sweep_read_json(failed, err, sizeof err) : NULL;
            /* A Slurm task that failed left its log; say where it is. */
            char log[1200], why_log[1300];
            snprintf(log, sizeof log, "%s/logs/%s.log", dir, id);
            snprintf(why_log, sizeof why_log, "not finished (log: %s)", log);
            const char *why = frec                     ? foxctl_jstr(frec, "error", "failed")
                              : access(log, F_OK) == 0 ? why_log
                                                       : "not finished";
            n_failed += frec != NULL;
            if (!quiet_missing || frec)
                printf("%-14s %4d %5" PRIu64 " %4.0f %11s  %s\n", id, c, seed,
                       foxctl_jnum(j, "fold", 0), "-", why);
            cJSON_AddStringToObject(row, "state", frec ? "failed" : "missing");
            cJSON_AddStringToObject(row, "error", why);
            cJSON_Delete(frec);
            cJSON_Delete(rec);
            cJSON_AddItemToArray(jrows, row);
            continue;
        }
        n_done++;
        int k;
        for (k = 0; k < n_cells && !(cell_cfg[k] == c && cells[k].seed == seed); k++)
            ;
        if (k == n_cells) {
            cell_cfg[n_cells] = c;
            cells[n_cells++].seed = seed;
        }
        const char *where = foxctl_jstr(rec, "run_dir", NULL);
        for (const cJSON *f = folds->child; f; f = f->next) {
            double x[MAX_BASELINES];
            int have[MAX_BASELINES];
            double ts = foxctl_jnum(f, "test_sharpe", NAN);
            if (isfinite(ts))
                acc_add(&cells[k].policy, ts);
            fold_baselines(f, &bl, x, have);
            for (int b = 0; b < bl.n; b++)
                if (have[b] && isfinite(x[b]))
                    acc_add(&cells[k].base[b], x[b]);
            printf("%-14s %4d %5" PRIu64 " %4.0f %11.3f  %s\n", id, c, seed,
                   foxctl_jnum(f, "fold", 0), ts, where ? where : path);
        }
        cJSON_AddStringToObject(row, "state", "done");
        cJSON_AddStringToObject(row, "result", path);
        if (where)
            cJSON_AddStringToObject(row, "run_dir", where);
        cJSON_AddItemToArray(jrows, row);
        cJSON_Delete(rec);
    }

    /* Per configuration: each seed's mean over its folds, then mean ± SE over the seeds. */
    printf("\n%-40s %5s  %-16s", "configuration", "seeds", "test Sharpe");
    for (int b = 0; b < bl.n; b++)
        printf("  %-16s", bl.names[b]);
    printf("\n");
    cJSON *crow = cJSON_AddArrayToObject(summary, "configs");
    for (int c = 0; c < n_cfg; c++) {
        stat_acc pol = {0}, base[MAX_BASELINES] = {{0}};
        for (int k = 0; k < n_cells; k++) {
            if (cell_cfg[k] != c)
                continue;
            if (cells[k].policy.n)
                acc_add(&pol, cells[k].policy.sum / cells[k].policy.n);
            for (int b = 0; b < bl.n; b++)
                if (cells[k].base[b].n)
                    acc_add(&base[b], cells[k].base[b].sum / cells[k].base[b].n);
        }
        char text[64];
        const cJSON *label = cJSON_GetArrayItem(cfgs, c);
        acc_text(&pol, text, sizeof text);
        printf("%-40s %5d  %-16s", cJSON_IsString(label) ? label->valuestring : "?", pol.n, text);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "config", cJSON_IsString(label) ? label->valuestring : "?");
        acc_json(o, "test_sharpe", &pol);
        cJSON *bo = cJSON_AddObjectToObject(o, "baselines");
        for (int b = 0; b < bl.n; b++) {
            acc_text(&base[b], text, sizeof text);
            printf("  %-16s", text);
            acc_json(bo, bl.names[b], &base[b]);
        }
        printf("\n");
        cJSON_AddItemToArray(crow, o);
    }
    printf("%d of %d jobs done, %d failed (%s)\n", n_done, n_jobs, n_failed, dir);
    cJSON_AddNumberToObject(summary, "jobs", n_jobs);
    cJSON_AddNumberToObject(summary, "done", n_done);
    cJSON_AddNumberToObject(summary, "failed", n_failed);
    cJSON_AddItemToObject(summary, "job_results", jrows);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    int rv = foxctl_sweep_write_json(path, summary);
    cJSON_Delete(summary);
    cJSON_Delete(plan);
    free(cells);
    free(cell_cfg);
    if (rv != FOXCTL_OK)
        return rv;
    return n_done == n_jobs ? FOXCTL_OK : FOXCTL_EREPLY;
}

/* ----------------------------------------------------------------- Slurm */

/*
 * tasks.tsv: line k is array task k, "<id>\t--set\tkey=value\t...", the
 * arguments of its `foxd --once --json`; scripts/foxhunt-sweep.sbatch reads
 * it. Tabs separate arguments so that values may hold spaces.
 */
static int
write_slurm_tasks(const sweep_plan *p)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/tasks.tsv", p->dir);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (int i = 0; buf && i < p->n_jobs; i++) {
        const sweep_job *j = &p->jobs[i];
        char line[8192];
        size_t k = (size_t)snprintf(line, sizeof line, "%s\t--set\ttrain.folds=%d", j->id, j->fold);
        if (p->epochs)
            k += (size_t)snprintf(line + k, sizeof line - k, "\t--set\ttrain.epochs=%d", p->epochs);
        if (p->steps_per_epoch)
            k += (size_t)snprintf(line + k, sizeof line - k, "\t--set\ttrain.steps_per_epoch=%d",
                                  p->steps_per_epoch);
        for (const cJSON *v = j->values->child; v && k < sizeof line; v = v->next) {
            char text[2048];
            foxctl_sweep_value_text(v, text, sizeof text);
            if (strchr(text, '\t') || strchr(text, '\n')) {
                free(buf);
                return spec_error(v->string, "a value for Slurm may not hold a tab or newline");
            }
            k += (size_t)snprintf(line + k, sizeof line - k, "\t--set\t%s=%s", v->string, text);
        }
        if (k >= sizeof line - 1) {
            free(buf);
            return spec_error(j->id, "task line too long");
        }
        while (buf && n + k + 2 > cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            buf = b;
        }
        if (buf) {
            memcpy(buf + n, line, k);
            n += k;
            buf[n++] = '\n';
        }
    }
    if (!buf)
        return spec_error("tasks.tsv", "out of memory");
    char err[512];
    int rv = fox_write_atomic(path, buf, n, 0644, 1, err, sizeof err);
    free(buf);
    if (rv != FOX_OK)
        return spec_error("tasks.tsv", err);
    return FOXCTL_OK;
}

/* ------------------------------------------------------------ the command */

static void
usage_sweep(FILE *out)
{
    fprintf(out,
            "usage: foxctl sweep [SPEC.json] [--folds 0,1,2] [--seeds 1,2,3] [--grid KEY=V1,V2]...\n"
            "                    [--set KEY=V]... [--epochs N] [--steps N] [--dir DIR]\n"
            "                    [--endpoints URL,...] [--attempts N] [--wait S] [--no-pack]\n"
            "                    | --slurm\n"
            "       foxctl sweep --gather DIR\n"
            "Runs folds x seeds x configurations, one fold per job from a fresh engine, over\n"
            "the endpoints (default: --url), keeps each result in DIR/jobs/ as it arrives and\n"
            "prints per configuration the test Sharpe, mean ± SE over seeds, and the baselines.\n"
            "The same spec and --dir again skips finished jobs. Jobs of one fold that differ\n"
            "only in their seed and member keys (train.lr, train.gamma, train.eps_*,\n"
            "policy.band, env.train_cost_mult) train as the members of one engine\n"
            "(engine.members) where their data is the same (a CSV, or data.seed set);\n"
            "--no-pack runs each alone. --slurm writes DIR/tasks.tsv\n"
            "for " FOX_SBATCH " (scripts/ in the source)\n"
            "instead of running.\n");
}

static int
set_member(cJSON *spec, const char *name, cJSON *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(spec, name);
    cJSON_AddItemToObject(spec, name, v);
    return FOXCTL_OK;
}

/* KEY=VALUE of --grid (a list) or --set into spec's object member. */
static int
add_pair(cJSON *spec, const char *member, const char *pair, int list)
{
    const char *eq = strchr(pair, '=');
    if (!eq || eq == pair || !eq[1])
        return spec_error(pair, "expected KEY=VALUE");
    cJSON *m = cJSON_GetObjectItemCaseSensitive(spec, member);
    if (!m)
        m = cJSON_AddObjectToObject(spec, member);
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(eq - pair), pair);
    cJSON_DeleteItemFromObjectCaseSensitive(m, key);
    cJSON_AddItemToObject(m, key, list ? list_from_text(eq + 1) : value_from_text(eq + 1));
    return FOXCTL_OK;
}

int
foxctl_cmd_sweep(foxctl_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"endpoints", required_argument, 0, 'E'}, {"dir", required_argument, 0, 'd'},
        {"folds", required_argument, 0, 'f'},     {"seeds", required_argument, 0, 'S'},
        {"grid", required_argument, 0, 'g'},      {"set", required_argument, 0, 's'},
        {"epochs", required_argument, 0, 'e'},    {"steps", required_argument, 0, 'n'},
        {"attempts", required_argument, 0, 'a'},  {"wait", required_argument, 0, 'w'},
        {"slurm", no_argument, 0, 'L'},           {"gather", required_argument, 0, 'G'},
        {"no-pack", no_argument, 0, 'P'},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    sweep_plan p;
    memset(&p, 0, sizeof p);
    sweep_run_opts ro = {.attempts = 3, .wait_s = 300};
    char *endpoints = NULL, *eps[MAX_ENDPOINTS];
    const char *gather_dir = NULL;
    int slurm = 0, pack = 1, c, n, rv = FOXCTL_OK;
    cJSON *cli = cJSON_CreateObject();

    /* 0, not 1: GNU getopt starts afresh and permutes, so SPEC.json may come first. */
    optind = 0;
    while (rv == FOXCTL_OK && (c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'E':
            endpoints = optarg;
            break;
        case 'd':
            snprintf(p.dir, sizeof p.dir, "%s", optarg);
            break;
        case 'f':
        case 'S':
            rv = set_member(cli, c == 'f' ? "folds" : "seeds", list_from_text(optarg));
            break;
        case 'g':
        case 's':
            rv = add_pair(cli, c == 'g' ? "grid" : "set", optarg, c == 'g');
            break;
        case 'e':
        case 'n':
        case 'a':
        case 'w':
            if (!foxctl_parse_int(optarg, 1, 1000000000, &n)) {
                rv = spec_error(optarg, "expected a positive integer");
                break;
            }
            if (c == 'a')
                ro.attempts = n;
            else if (c == 'w')
                ro.wait_s = n;
            else
                rv = set_member(cli, c == 'e' ? "epochs" : "steps_per_epoch",
                                cJSON_CreateNumber(n));
            break;
        case 'L':
            slurm = 1;
            break;
        case 'P':
            pack = 0;
            break;
        case 'G':
            gather_dir = optarg;
            break;
        case 'h':
            usage_sweep(stdout);
            cJSON_Delete(cli);
            return FOXCTL_OK;
        default:
            rv = FOXCTL_USAGE;
        }
    }
    if (rv != FOXCTL_OK || optind < argc - 1) {
        usage_sweep(stderr);
        cJSON_Delete(cli);
        return FOXCTL_USAGE;
    }
    if (gather_dir) {
        cJSON_Delete(cli);
        return gather(gather_dir, 0);
    }

    /* The spec: the file's, then the command line's members over it. */
    char err[512];
    p.spec = optind < argc ? foxctl_sweep_read_json(argv[optind], err, sizeof err)
                           : cJSON_CreateObject();
    if (!p.spec) {
        cJSON_Delete(cli);
        return spec_error("spec", err);
    }
    for (cJSON *m = cli->child; m; m = m->next) {
        cJSON *cur = cJSON_GetObjectItemCaseSensitive(p.spec, m->string);
        if (cJSON_IsObject(m) && cJSON_IsObject(cur)) {
            for (cJSON *k = m->child; k; k = k->next) {
                cJSON_DeleteItemFromObjectCaseSensitive(cur, k->string);
                cJSON_AddItemToObject(cur, k->string, cJSON_Duplicate(k, 1));
            }
        } else {
            set_member(p.spec, m->string, cJSON_Duplicate(m, 1));
        }
    }
    cJSON_Delete(cli);
    if (cJSON_IsObject(p.spec) && !cJSON_GetObjectItemCaseSensitive(p.spec, "seeds"))
        cJSON_AddItemToObject(p.spec, "seeds", list_from_text("1"));
    if (cJSON_IsObject(p.spec) && !cJSON_GetObjectItemCaseSensitive(p.spec, "folds"))
        cJSON_AddItemToObject(p.spec, "folds", list_from_text("0,1,2"));
    if ((rv = check_spec(p.spec)) != FOXCTL_OK || (rv = plan_build(&p)) != FOXCTL_OK)
        goto out;
    if (endpoints) {
        for (char *save = NULL, *t = strtok_r(endpoints, ",", &save); t;
             t = strtok_r(NULL, ",", &save)) {
            if (ro.n_endpoints == MAX_ENDPOINTS) {
                snprintf(err, sizeof err, "at most %d endpoints", MAX_ENDPOINTS);
                rv = spec_error("--endpoints", err);
                goto out;
            }
            eps[ro.n_endpoints++] = t;
        }
    } else {
        eps[ro.n_endpoints++] = o->url;
    }
    ro.endpoints = eps;
    if (!slurm && (rv = foxctl_sweep_check_endpoints(&ro)) != FOXCTL_OK)
        goto out;
    if (!p.dir[0])
        fox_utc_stamp(p.dir, sizeof p.dir, "sweep-");
    if ((rv = plan_open_dir(&p)) != FOXCTL_OK)
        goto out;

    if (slurm) {
        if ((rv = write_slurm_tasks(&p)) != FOXCTL_OK)
            goto out;
        /* The installed task where there is one; else this foxctl runs from its source tree. */
        const char *task =
            access(FOX_SBATCH, R_OK) == 0 ? FOX_SBATCH : "scripts/foxhunt-sweep.sbatch";
        printf("%d tasks in %s/tasks.tsv; submit them and the gather step with:\n"
               "  id=$(sbatch --parsable --array=0-%d %s %s)\n"
               "  sbatch --dependency=afterany:$id --wrap 'foxctl sweep --gather %s'\n",
               p.n_jobs, p.dir, p.n_jobs - 1, task, p.dir, p.dir);
        goto out;
    }
    fprintf(stderr, "sweep: %d jobs (%d configurations) over %d endpoint(s), results in %s\n",
            p.n_jobs, p.n_configs, ro.n_endpoints, p.dir);
    if (pack && (rv = plan_pack(&p)) != FOXCTL_OK)
        goto out;
    rv = foxctl_sweep_run(o, &p, &ro);
    int grv = gather(p.dir, rv != FOXCTL_OK);
    if (rv == FOXCTL_OK)
        rv = grv;
out:
    plan_fini(&p);
    return rv;
}
