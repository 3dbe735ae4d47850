/*
 * test_records.c — what a run leaves behind, on the CPU backend: the epoch
 * report's losses, the evaluation's per-bar hook, a fold walking each policy
 * over each split no more often than it must, checkpoint format 2 (and
 * format 1 still loading), the run directory of a short `foxd --once` walk
 * (each file present and parseable, the figures that must not be zero not
 * zero, the baselines CSV holding the fold object's baselines), a backtest
 * of the chosen checkpoint reproducing the fold's test figures and its
 * baselines bit for bit, a backtest on a CSV the run never saw (a fixed
 * trend lookback, no oracle) and on part of it (the lookback chosen on the
 * bars before), the refusal of a checkpoint of another layout, and the
 * pictures (valid PNG and SVG when gnuplot is installed).
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "daemon/conf.h"
#include "daemon/foxd.h"
#include "daemon/record.h"
#include "daemon/render.h"
#include "gpu/engine.h"
#include "gpu/isv.h"
#include "tests/testutil.h"

static const char *const small[] = {"data.synth_bars=6000", "train.learning_starts=256",
                                    "train.folds=0",        "train.epochs=2",
                                    "train.steps_per_epoch=40", NULL};

static void
small_config(fox_config *c)
{
    fox_test_small_net(c);
    fox_test_set_pairs(c, small);
}

static cJSON *
read_json(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = fox_test_read_file(path, NULL);
    ck_assert_msg(text, "%s is missing", path);
    cJSON *doc = cJSON_Parse(text);
    ck_assert_msg(doc, "%s is not JSON", path);
    free(text);
    return doc;
}

/* Rows of a CSV after its header; every row has the header's number of fields. */
static int
csv_rows(const char *dir, const char *name, const char *header_start)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = fox_test_read_file(path, NULL);
    ck_assert_msg(text, "%s is missing", path);
    ck_assert_msg(strncmp(text, header_start, strlen(header_start)) == 0, "%s: header '%.60s'",
                  name, text);
    int fields = 1, rows = 0;
    char *line = text, *next;
    for (const char *p = text; *p && *p != '\n'; p++)
        fields += *p == ',';
    for (line = strchr(text, '\n'); line && line[1]; line = next) {
        line++;
        next = strchr(line, '\n');
        int n = 1;
        for (const char *p = line; *p && *p != '\n'; p++)
            n += *p == ',';
        ck_assert_msg(n == fields, "%s row %d: %d fields, header has %d", name, rows + 1, n,
                      fields);
        rows++;
    }
    free(text);
    return rows;
}

static double
num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "'%s' is not a number", key);
    return v->valuedouble;
}

/* ------------------------------------------------------------------ engine */

START_TEST(epoch_report_carries_the_losses)
{
    fox_config c;
    small_config(&c);
    fox_engine *e = fox_test_engine(&c);
    fox_epoch_report rep;
    FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 40, NULL));
    FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &rep));
    const fox_step_stats *l = &rep.last;
    ck_assert_msg(l->loss > 0 && l->loss_c51 > 0 && l->loss_iqn > 0 && l->loss_aux > 0,
                  "losses %g %g %g %g", l->loss, l->loss_c51, l->loss_iqn, l->loss_aux);
    ck_assert_msg(l->grad_norm > 0 && l->epsilon > 0 && l->epsilon <= 1, "grad norm %g eps %g",
                  l->grad_norm, l->epsilon);
    ck_assert_int_eq(l->step, 40);
    ck_assert(rep.mean_loss > 0);
    fox_engine_destroy(e);
}
END_TEST

typedef struct hook_seen {
    int calls, last_bar;
    double last_cum;
} hook_seen;

static void
hook(void *arg, fox_split split, fox_policy policy, int bar, double cum)
{
    hook_seen *h = arg;
    if (split != FOX_SPLIT_TEST || policy != FOX_POLICY_GREEDY)
        return;
    h->calls++;
    h->last_bar = bar;
    h->last_cum = cum;
}

START_TEST(eval_hook_sees_every_bar)
{
    fox_config c;
    small_config(&c);
    fox_engine *e = fox_test_engine(&c);
    hook_seen h = {0};
    fox_eval_result r;
    fox_engine_info info;
    fox_engine_set_eval_hook(e, hook, &h);
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_GREEDY, &r));
    fox_engine_get_info(e, &info);
    ck_assert_int_eq(h.calls, r.bars);
    ck_assert_int_eq(h.last_bar, info.test_end - 1);
    ck_assert_msg(h.last_cum == r.total_return, "hook %.17g, report %.17g", h.last_cum,
                  r.total_return);
    fox_engine_set_eval_hook(e, NULL, NULL);
    h.calls = 0;
    FOX_CK_ENGINE_OK(e, fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_GREEDY, &r));
    ck_assert_int_eq(h.calls, 0);
    fox_engine_destroy(e);
}
END_TEST

/* Every evaluation pass's bars, per split and policy. */
static void
count_bars(void *arg, fox_split split, fox_policy policy, int bar, double cum)
{
    int (*bars)[FOX_POLICY_COUNT] = arg;
    (void)bar;
    (void)cum;
    bars[split][policy]++;
}

/*
 * A fold walks each baseline over the test bars once, when it begins (the
 * trend rule also over validation, once per lookback tried), and the policy
 * over both splits once per epoch: nothing twice.
 */
START_TEST(a_fold_evaluates_nothing_twice)
{
    fox_config c;
    small_config(&c);
    fox_engine *e = fox_test_engine_loaded(&c);
    int bars[2][FOX_POLICY_COUNT] = {{0}};
    fox_epoch_report ep;
    fox_fold_report fr;
    fox_engine_set_eval_hook(e, count_bars, bars);
    FOX_CK_ENGINE_OK(e, fox_engine_begin_fold(e, 0));
    for (int k = 0; k < 2; k++) {
        FOX_CK_ENGINE_OK(e, fox_engine_run_steps(e, 40, NULL));
        FOX_CK_ENGINE_OK(e, fox_engine_end_epoch(e, &ep));
    }
    FOX_CK_ENGINE_OK(e, fox_engine_fold_report(e, &fr));
    int nv = ep.val.bars, nt = ep.test.bars;
    /* The validation rule walks validation once per band it weighs. */
    int val_walks = c.band_rule == FOX_BAND_RULE_VALIDATION ? FOX_BAND_CHOICES_N : 1;
    ck_assert_int_eq(bars[FOX_SPLIT_VALIDATION][FOX_POLICY_GREEDY], 2 * nv * val_walks);
    ck_assert_int_eq(bars[FOX_SPLIT_TEST][FOX_POLICY_GREEDY], 2 * nt);
    ck_assert_int_eq(bars[FOX_SPLIT_VALIDATION][FOX_POLICY_TREND], FOX_TREND_K_COUNT * nv);
    ck_assert_int_eq(fr.trend_k_tried, FOX_TREND_K_COUNT);
    ck_assert(fr.has_oracle);
    ck_assert(!fr.has_rule); /* the regime generator's rule is the trend rule */
    for (int p = FOX_POLICY_BUY_HOLD; p < FOX_POLICY_COUNT; p++) {
        int walked = p == FOX_POLICY_RULE ? 0 : nt;
        ck_assert_msg(bars[FOX_SPLIT_TEST][p] == walked, "policy %d: %d test bars walked, %d there",
                      p, bars[FOX_SPLIT_TEST][p], walked);
        if (p != FOX_POLICY_TREND)
            ck_assert_int_eq(bars[FOX_SPLIT_VALIDATION][p], 0);
    }
    fox_engine_destroy(e);
}
END_TEST

/* Rewrite a format-2 checkpoint as format 1 wrote it: no normalization, version 1. */
static void
downgrade_to_v1(const char *v2, const char *v1, size_t n_params)
{
    size_t len;
    char *buf = fox_test_read_file(v2, &len);
    ck_assert_ptr_nonnull(buf);
    const size_t hdr = 56, counters = 56;
    size_t payload = 16 * n_params + 4 * FOX_ISV_TOTAL_DIM + counters;
    ck_assert_msg(len > hdr + payload, "format 2 keeps more than format 1");
    uint32_t version = 1;
    uint64_t pb = payload;
    memcpy(buf + 8, &version, 4);
    memcpy(buf + 40, &pb, 8);
    uint32_t pcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)buf + hdr, (uInt)payload);
    memcpy(buf + 48, &pcrc, 4);
    uint32_t hcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)buf, 52);
    memcpy(buf + 52, &hcrc, 4);
    FILE *f = fopen(v1, "wb");
    ck_assert_int_eq(fwrite(buf, 1, hdr + payload, f), hdr + payload);
    fclose(f);
    free(buf);
}

START_TEST(checkpoint_format_1_still_loads)
{
    fox_config c;
    small_config(&c);
    char dir[] = "/tmp/foxrecXXXXXX", v2[256], v1[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(v2, sizeof v2, "%s/v2.ckpt", dir);
    snprintf(v1, sizeof v1, "%s/v1.ckpt", dir);
    fox_engine *a = fox_test_engine(&c), *b = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(a, fox_engine_run_steps(a, 30, NULL));
    FOX_CK_ENGINE_OK(a, fox_engine_checkpoint_save(a, v2));
    size_t n = fox_engine_param_count(a);
    downgrade_to_v1(v2, v1, n);
    FOX_CK_ENGINE_OK(b, fox_engine_checkpoint_load(b, v1));
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    FOX_CK_ENGINE_OK(a, fox_engine_get_params(a, pa, n));
    FOX_CK_ENGINE_OK(b, fox_engine_get_params(b, pb, n));
    ck_assert_msg(memcmp(pa, pb, n * sizeof *pa) == 0, "format 1 restored other parameters");
    /* A backtest needs the normalization that format 1 never kept: said, not guessed. */
    ck_assert_int_eq(fox_engine_load_policy(b, v1, -1, -1, 0), FOX_EFORMAT);
    ck_assert_msg(strstr(fox_engine_errmsg(b), "format 1"), "%s", fox_engine_errmsg(b));
    free(pa);
    free(pb);
    fox_engine_destroy(a);
    fox_engine_destroy(b);
    unlink(v1);
    unlink(v2);
    rmdir(dir);
}
END_TEST

/*
 * Copy checkpoint src to dst with size bytes of val written at payload
 * offset off, and both CRCs made right again: a file whose values are out
 * of range but which no CRC would catch.
 */
static void
poke_checkpoint(const char *src, const char *dst, size_t off, const void *val, size_t size)
{
    size_t len;
    char *buf = fox_test_read_file(src, &len);
    ck_assert_ptr_nonnull(buf);
    const size_t hdr = 56;
    ck_assert(hdr + off + size <= len);
    memcpy(buf + hdr + off, val, size);
    uint32_t pcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)buf + hdr,
                                    (uInt)(len - hdr));
    memcpy(buf + 48, &pcrc, 4);
    uint32_t hcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)buf, 52);
    memcpy(buf + 52, &hcrc, 4);
    FILE *f = fopen(dst, "wb");
    ck_assert_int_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
}

/* A checkpoint with valid CRCs but values no run writes is refused, with the value named. */
START_TEST(checkpoint_refuses_values_out_of_range)
{
    fox_config c;
    small_config(&c);
    char dir[] = "/tmp/foxrecXXXXXX", good[256], bad[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(good, sizeof good, "%s/good.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    fox_engine *a = fox_test_engine(&c), *b = fox_test_engine_loaded(&c);
    FOX_CK_ENGINE_OK(a, fox_engine_run_steps(a, 30, NULL));
    FOX_CK_ENGINE_OK(a, fox_engine_checkpoint_save(a, good));
    size_t np = fox_engine_param_count(a);
    const size_t counters = 16 * np + 4 * FOX_ISV_TOTAL_DIM, norm = counters + 56;
    const float nan = NAN, huge = 1e30f, negative = -1.0f, zero = 0.0f;
    const int32_t int_min = INT32_MIN;
    const struct {
        size_t off;
        const void *val;
        size_t size;
        const char *why;
    } cases[] = {
        {4 * 3, &nan, 4, "weight 3 is nan"},
        {0, &huge, 4, "weight 0 is 1e+30"},
        {4 * np + 4 * 7, &huge, 4, "target weight 7"},
        {12 * np, &negative, 4, "Adam v 0 is -1"},
        {counters + 52, &int_min, 4, "epochs done -2147483648"},
        {counters + 48, &(int32_t){99}, 4, "fold 99"},
        {norm + 8 + 4 * 10, &nan, 4, "feature 10's normalization is mean nan"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        poke_checkpoint(good, bad, cases[i].off, cases[i].val, cases[i].size);
        ck_assert_msg(fox_engine_checkpoint_load(b, bad) == FOX_EFORMAT, "%s: loaded",
                      cases[i].why);
        ck_assert_msg(strstr(fox_engine_errmsg(b), cases[i].why), "'%s' lacks '%s'",
                      fox_engine_errmsg(b), cases[i].why);
    }
    /* A zero std would divide the backtest's features by zero. */
    char *text = fox_test_read_file(good, NULL);
    int32_t nf;
    memcpy(&nf, text + 56 + norm, sizeof nf);
    free(text);
    poke_checkpoint(good, bad, norm + 8 + 4 * (size_t)nf + 4 * 2, &zero, 4);
    ck_assert_int_eq(fox_engine_load_policy(b, bad, -1, -1, 0), FOX_EFORMAT);
    ck_assert_msg(strstr(fox_engine_errmsg(b), "feature 2's normalization") &&
                      strstr(fox_engine_errmsg(b), "std 0"),
                  "%s", fox_engine_errmsg(b));
    /* The file as saved still loads. */
    FOX_CK_ENGINE_OK(b, fox_engine_checkpoint_load(b, good));
    fox_engine_destroy(a);
    fox_engine_destroy(b);
    unlink(good);
    unlink(bad);
    rmdir(dir);
}
END_TEST

START_TEST(load_policy_refuses_another_layout)
{
    fox_config c, c2;
    small_config(&c);
    small_config(&c2);
    fox_test_set_pairs(&c2, (const char *const[]){"model.h1=48", NULL});
    char dir[] = "/tmp/foxrecXXXXXX", path[256], want[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/a.ckpt", dir);
    fox_engine *a = fox_test_engine(&c), *b = fox_test_engine_loaded(&c2);
    FOX_CK_ENGINE_OK(a, fox_engine_checkpoint_save(a, path));
    fox_engine_info ia, ib;
    fox_engine_get_info(a, &ia);
    fox_engine_get_info(b, &ib);
    ck_assert_int_eq(fox_engine_load_policy(b, path, -1, -1, 0), FOX_EMISMATCH);
    snprintf(want, sizeof want, "%016" PRIx64, ia.fingerprint);
    ck_assert_msg(strstr(fox_engine_errmsg(b), want), "%s", fox_engine_errmsg(b));
    snprintf(want, sizeof want, "%016" PRIx64, ib.fingerprint);
    ck_assert_msg(strstr(fox_engine_errmsg(b), want), "%s", fox_engine_errmsg(b));
    /* A range without features is refused with the range named; so is a validation after it. */
    ck_assert_int_eq(fox_engine_load_policy(a, path, -1, 0, 100), FOX_EINVAL);
    ck_assert_msg(strstr(fox_engine_errmsg(a), "[0, 100)"), "%s", fox_engine_errmsg(a));
    ck_assert_int_eq(fox_engine_load_policy(a, path, 900, 800, 1000), FOX_EINVAL);
    ck_assert_msg(strstr(fox_engine_errmsg(a), "validation bars [900, 800)"), "%s",
                  fox_engine_errmsg(a));
    /* A fold is not a backtest: its figures stay the fold's. */
    fox_fold_report fr;
    ck_assert_int_eq(fox_engine_backtest(a, &fr), FOX_ESTATE);
    fox_engine_destroy(a);
    fox_engine_destroy(b);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* --------------------------------------------------------------- the record */

static int
file_starts(const char *dir, const char *name, const char *magic, size_t n)
{
    char path[1024];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *buf = fox_test_read_file(path, &len);
    int ok = buf && len >= n && memcmp(buf, magic, n) == 0;
    free(buf);
    return ok;
}

static int
svg_file(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *buf = fox_test_read_file(path, NULL);
    int ok = buf && strstr(buf, "<svg") && strstr(buf, "</svg>");
    free(buf);
    return ok;
}

static int
have_gnuplot(void)
{
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/* A close-only CSV of n hourly bars (a seeded random walk) the run never saw. */
static void
write_csv(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    double p = 100.0;
    uint64_t s = 12345;
    fprintf(f, "time,close\n");
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        p *= exp(((double)(s >> 11) / 9007199254740992.0 - 0.5) * 0.02);
        fprintf(f, "%d,%.6f\n", 1600000000 + 3600 * i, p);
    }
    fclose(f);
}

/*
 * v as a JSON file keeps it: cJSON prints 15 significant digits where they
 * read back within its tolerance, so folds.json may hold the neighbour of
 * the CSV's exact figure.
 */
static double
as_json(double v)
{
    cJSON *n = cJSON_CreateNumber(v);
    char *text = cJSON_PrintUnformatted(n);
    double back = strtod(text, NULL);
    cJSON_free(text);
    cJSON_Delete(n);
    return back;
}

/*
 * <dir>/<name>, a baselines CSV, holds every baseline of fold object f with
 * the same numbers, bit for bit (the trend rule with its lookback), and
 * nothing else (its figures exact, the object's as JSON keeps them). Returns its rows.
 */
static int
baselines_csv_matches(const char *dir, const char *name, const cJSON *f)
{
    static const char *const keys[] = {"sharpe",       "sharpe_se",    "sharpe_gross", "turnover",
                                       "max_drawdown", "total_return", "bars"};
    const int n_keys = (int)(sizeof keys / sizeof keys[0]);
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(f, "baselines");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = fox_test_read_file(path, NULL);
    ck_assert_msg(text, "%s is missing", path);
    const char *header = "baseline,sharpe,sharpe_se,sharpe_gross,turnover,max_drawdown,"
                         "total_return,bars,lookback\n";
    ck_assert_msg(!strncmp(text, header, strlen(header)), "%s: header '%.80s'", name, text);
    int rows = 0, in_fold = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, want) in_fold += cJSON_IsObject(b);
    for (char *save = NULL, *line = strtok_r(text + strlen(header), "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *field = strchr(line, ',');
        ck_assert_msg(field, "%s: row '%s'", name, line);
        *field++ = 0;
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(want, line);
        ck_assert_msg(cJSON_IsObject(o), "%s: baseline %s is not in the fold object", name, line);
        for (int k = 0; k < n_keys; k++) {
            char *end;
            double v = strtod(field, &end);
            ck_assert_msg(end != field && *end == ',', "%s %s: %s unreadable", name, line, keys[k]);
            ck_assert_msg(as_json(v) == num(o, keys[k]), "%s %s: %s %.17g, the fold object %.17g",
                          name, line, keys[k], v, num(o, keys[k]));
            field = end + 1;
        }
        if (!strcmp(line, "trend"))
            ck_assert_msg(atof(field) == num(f, "trend_k"), "%s: trend lookback %s", name, field);
        else
            ck_assert_msg(*field == 0, "%s %s: a lookback '%s'", name, line, field);
        rows++;
    }
    ck_assert_int_eq(rows, in_fold);
    free(text);
    return rows;
}

START_TEST(once_leaves_a_complete_run_directory)
{
    char root[] = "/tmp/foxrunXXXXXX", run[512], bt[512], bt2[512], bt3[512], csv[512], ckpt[600];
    ck_assert_ptr_nonnull(mkdtemp(root));
    snprintf(run, sizeof run, "%s/run", root);
    snprintf(bt, sizeof bt, "%s/bt", root);
    snprintf(bt2, sizeof bt2, "%s/bt-csv", root);
    snprintf(bt3, sizeof bt3, "%s/bt-csv-part", root);
    snprintf(csv, sizeof csv, "%s/new.csv", root);
    fox_config c;
    fox_dconf d;
    small_config(&c);
    /* Two folds: what the record keeps of one must not leak into the next. */
    fox_test_set_pairs(&c, (const char *const[]){"train.folds=0,1", NULL});
    fox_dconf_default(&d);
    snprintf(d.run_dir, sizeof d.run_dir, "%s", run);
    d.run_isv_steps = 8;
    ck_assert_int_eq(fox_once_main(&c, &d, 0), FOX_EXIT_OK);

    /* config.json reads back as the same configuration. */
    fox_config back;
    fox_config_default(&back);
    char path[700], err[512];
    snprintf(path, sizeof path, "%s/config.json", run);
    ck_assert_msg(fox_conf_load_file(&back, NULL, path, NULL, 0, err, sizeof err) == FOX_OK, "%s", err);
    cJSON *ca = fox_render_config(&c, NULL, 0), *cb = fox_render_config(&back, NULL, 0);
    ck_assert_msg(cJSON_Compare(ca, cb, 1), "config.json does not read back as the run's");
    cJSON_Delete(ca);
    cJSON_Delete(cb);

    /* metrics.jsonl: two epochs and a line per fold, every figure of training filled. */
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    char *text = fox_test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    int epochs = 0, folds = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        ck_assert_msg(o, "metrics.jsonl: not JSON: %.80s", line);
        const char *type = cJSON_GetObjectItemCaseSensitive(o, "type")->valuestring;
        if (!strcmp(type, "epoch")) {
            static const char *const nonzero[] = {"step",     "loss",      "mean_loss", "loss_c51",
                                                  "loss_iqn", "loss_aux",  "grad_norm", "epsilon",
                                                  "steps_per_sec", "time_ms"};
            for (size_t k = 0; k < sizeof nonzero / sizeof nonzero[0]; k++)
                ck_assert_msg(num(o, nonzero[k]) != 0, "epoch %d: %s is 0", epochs, nonzero[k]);
            ck_assert(num(cJSON_GetObjectItemCaseSensitive(o, "test"), "bars") > 0);
            epochs++;
        } else {
            ck_assert_str_eq(type, "fold");
            ck_assert(num(o, "final_loss") != 0 && num(o, "steps_per_sec") != 0);
            folds++;
        }
        cJSON_Delete(o);
    }
    free(text);
    ck_assert_int_eq(epochs, 4);
    ck_assert_int_eq(folds, 2);

    ck_assert_int_eq(csv_rows(run, "epochs.csv",
                              "fold,epoch,step,loss,mean_loss,loss_c51,loss_iqn,loss_aux,"
                              "grad_norm,epsilon,val_sharpe,test_sharpe,val_sharpe_se,"
                              "test_sharpe_se\n"),
                     4);
    ck_assert_int_ge(csv_rows(run, "isv.csv", "fold,step,total_steps,Q_ABS_REF"), 5);
    snprintf(path, sizeof path, "%s/foxd.log", run);
    text = fox_test_read_file(path, NULL);
    ck_assert_msg(text && strstr(text, "fold 0 epoch 2/2"), "foxd.log lacks the progress");
    free(text);

    cJSON *summary = read_json(run, "folds.json");
    const cJSON *folds_done = cJSON_GetObjectItemCaseSensitive(summary, "folds");
    ck_assert_int_eq(cJSON_GetArraySize(folds_done), 2);
    for (int k = 0; k < 2; k++) {
        const cJSON *f = cJSON_GetArrayItem(folds_done, k);
        char name[64];
        /* The baselines CSV is the fold object's: all five on synthetic data, oracle included. */
        snprintf(name, sizeof name, "fold%d-baselines.csv", k);
        ck_assert_int_eq(baselines_csv_matches(run, name, f), 5);
        /*
         * The equity picture's data: a row per test return, ending where the
         * fold's own buy-and-hold pass ended.
         */
        snprintf(name, sizeof name, "fold%d-equity.csv", k);
        ck_assert_int_eq(csv_rows(run, name, "bar,policy,buy_and_hold"), (int)num(f, "test_bars"));
        snprintf(path, sizeof path, "%s/%s", run, name);
        text = fox_test_read_file(path, NULL);
        /* The last row's third field; a time may follow it. */
        text[strlen(text) - 1] = 0;
        const char *last_row = strrchr(text, '\n') + 1;
        double got = NAN, want = num(cJSON_GetObjectItemCaseSensitive(
                                         cJSON_GetObjectItemCaseSensitive(f, "baselines"),
                                         "buy_hold"),
                                     "total_return");
        sscanf(last_row, "%*d,%*f,%lf", &got);
        ck_assert_msg(fabs(got - want) <= 1e-8 * fmax(1.0, fabs(want)),
                      "fold %d: buy-and-hold's equity ends at %s, its pass at %.9g", k, last_row,
                      want);
        free(text);
    }
    const cJSON *fold = cJSON_GetArrayItem(folds_done, 0);
    cJSON *chosen = read_json(run, "fold0-chosen.json"), *last = read_json(run, "fold0-last.json");
    ck_assert(num(chosen, "epoch") == num(fold, "best_epoch"));
    ck_assert(num(chosen, "val_sharpe") == num(fold, "best_val_sharpe"));
    ck_assert(num(last, "epoch") == 1 && num(last, "step") == 80);
    snprintf(ckpt, sizeof ckpt, "%s/fold0-last.ckpt", run);
    ck_assert_int_eq(access(ckpt, R_OK), 0);

    /*
     * The chosen checkpoint on the fold's own test bars, the trend rule's
     * lookback chosen on its validation bars: the fold's figures, bit for bit.
     */
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(chosen, "test_bars");
    const cJSON *vb = cJSON_GetObjectItemCaseSensitive(chosen, "val_bars");
    snprintf(ckpt, sizeof ckpt, "%s/fold0-chosen.ckpt", run);
    fox_dconf d2;
    fox_dconf_default(&d2);
    snprintf(d2.run_dir, sizeof d2.run_dir, "%s", bt);
    ck_assert(cJSON_GetArrayItem(vb, 1)->valuedouble == cJSON_GetArrayItem(tb, 0)->valuedouble);
    ck_assert_int_eq(fox_backtest_main(&c, &d2, ckpt, (int)cJSON_GetArrayItem(vb, 0)->valuedouble,
                                       (int)cJSON_GetArrayItem(tb, 0)->valuedouble,
                                       (int)cJSON_GetArrayItem(tb, 1)->valuedouble),
                     FOX_EXIT_OK);
    cJSON *res = read_json(bt, "backtest.json");
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(res, "policy");
    ck_assert_msg(num(pol, "sharpe") == num(fold, "test_sharpe"), "Sharpe %.17g vs %.17g",
                  num(pol, "sharpe"), num(fold, "test_sharpe"));
    ck_assert(num(pol, "sharpe_gross") == num(fold, "test_sharpe_gross"));
    ck_assert(num(pol, "max_drawdown") == num(fold, "test_max_drawdown"));
    ck_assert(num(pol, "turnover") == num(fold, "test_turnover"));
    ck_assert(num(pol, "sharpe") == num(chosen, "test_sharpe"));
    /* Its baselines are the fold's, by the same code on the same bars: every figure, every file. */
    const cJSON *bfold = cJSON_GetObjectItemCaseSensitive(res, "fold");
    ck_assert_msg(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(bfold, "baselines"),
                                cJSON_GetObjectItemCaseSensitive(fold, "baselines"), 1),
                  "the backtest's baselines are not the fold's");
    ck_assert(num(bfold, "trend_k") == num(fold, "trend_k"));
    ck_assert(num(bfold, "trend_k_tried") == FOX_TREND_K_COUNT);
    ck_assert(num(bfold, "oracle_fraction") == num(fold, "oracle_fraction"));
    char *bl = fox_test_read_file(strcat(strcpy(path, run), "/fold0-baselines.csv"), NULL);
    char *bbl = fox_test_read_file(strcat(strcpy(path, bt), "/backtest-baselines.csv"), NULL);
    ck_assert_msg(bl && bbl && !strcmp(bl, bbl), "backtest-baselines.csv:\n%s\nfold:\n%s", bbl,
                  bl);
    free(bl);
    free(bbl);
    cJSON_Delete(res);

    /* On a CSV the run never saw: every bar with features is walked. */
    write_csv(csv, 3000);
    fox_config cc = c;
    ck_assert_int_eq(fox_config_set(&cc, "data.source", csv, err, sizeof err), FOX_OK);
    snprintf(d2.run_dir, sizeof d2.run_dir, "%s", bt2);
    ck_assert_int_eq(fox_backtest_main(&cc, &d2, ckpt, -1, -1, 0), FOX_EXIT_OK);
    res = read_json(bt2, "backtest.json");
    const cJSON *bars = cJSON_GetObjectItemCaseSensitive(res, "bars");
    ck_assert(cJSON_GetArrayItem(bars, 1)->valuedouble == 3000);
    ck_assert(num(cJSON_GetObjectItemCaseSensitive(res, "policy"), "bars") > 2000);
    ck_assert_int_gt(csv_rows(bt2, "backtest-equity.csv", "bar,policy,buy_and_hold,time\n"),
                     2000);
    /* A series with times: each row ends with its bar's time, as the CSV gave it. */
    snprintf(path, sizeof path, "%s/backtest-equity.csv", bt2);
    text = fox_test_read_file(path, NULL);
    int bar0 = -1;
    double eq0, bh0, time0 = 0;
    ck_assert_int_eq(sscanf(strchr(text, '\n') + 1, "%d,%lf,%lf,%lf", &bar0, &eq0, &bh0, &time0),
                     4);
    ck_assert_msg(time0 == 1600000000.0 + 3600.0 * bar0, "bar %d: time %.17g", bar0, time0);
    free(text);
    /* No bars before the first with features: the trend rule's fixed lookback; a CSV, no oracle. */
    bfold = cJSON_GetObjectItemCaseSensitive(res, "fold");
    ck_assert(num(bfold, "trend_k_tried") == 0 && num(bfold, "trend_k") == FOX_TREND_K_FIXED);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(bfold, "baselines"), "oracle")));
    ck_assert_int_eq(baselines_csv_matches(bt2, "backtest-baselines.csv", bfold), 4);
    cJSON_Delete(res);
    /* Its second half: the lookback chosen on the first half's last bars, as a fold's. */
    snprintf(d2.run_dir, sizeof d2.run_dir, "%s", bt3);
    ck_assert_int_eq(fox_backtest_main(&cc, &d2, ckpt, -1, 1500, 3000), FOX_EXIT_OK);
    res = read_json(bt3, "backtest.json");
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(res, "val_bars");
    ck_assert(cJSON_GetArrayItem(val, 0)->valuedouble > 0 &&
              cJSON_GetArrayItem(val, 1)->valuedouble == 1500);
    bfold = cJSON_GetObjectItemCaseSensitive(res, "fold");
    ck_assert(num(bfold, "trend_k_tried") == FOX_TREND_K_COUNT);
    ck_assert_int_eq(baselines_csv_matches(bt3, "backtest-baselines.csv", bfold), 4);
    cJSON_Delete(res);

    /* Pictures: valid PNG and SVG where gnuplot is installed. */
    if (have_gnuplot()) {
        static const char *const pics[] = {"fold0-loss", "fold0-sharpe", "fold0-equity", "isv"};
        char name[64];
        for (size_t k = 0; k < sizeof pics / sizeof pics[0]; k++) {
            snprintf(name, sizeof name, "%s.png", pics[k]);
            ck_assert_msg(file_starts(run, name, "\x89PNG\r\n\x1a\n", 8), "%s: not a PNG", name);
            snprintf(name, sizeof name, "%s.svg", pics[k]);
            ck_assert_msg(svg_file(run, name), "%s: not an SVG", name);
        }
        ck_assert(file_starts(bt2, "backtest-equity.png", "\x89PNG\r\n\x1a\n", 8));
        ck_assert(svg_file(bt2, "backtest-equity.svg"));
    } else {
        fprintf(stderr, "test_records: gnuplot is not installed: the pictures are not checked\n");
    }
    cJSON_Delete(summary);
    cJSON_Delete(chosen);
    cJSON_Delete(last);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* --------------------------------------------------- hostile names and roots */

/*
 * fox_record_open with run.root root and run.name name: its status, the
 * error in err, the run directory made in dir (dirlen bytes).
 */
static int
open_fresh(const char *root, const char *name, char *dir, size_t dirlen, char *err, size_t errlen)
{
    fox_config c;
    fox_dconf d;
    fox_record *r = NULL;
    fox_config_default(&c);
    fox_dconf_default(&d);
    snprintf(d.run_root, sizeof d.run_root, "%s", root);
    snprintf(d.run_name, sizeof d.run_name, "%s", name);
    int rv = fox_record_open(&r, &d, "runs", &c, err, errlen);
    snprintf(dir, dirlen, "%s", r ? fox_record_dir(r) : "");
    fox_record_close(r, NULL, NULL);
    return rv;
}

/* <base>/aaa.../aaa... of exactly len bytes, in components of at most 100. */
static void
deep_path(char *path, const char *base, int len)
{
    int n = snprintf(path, (size_t)len + 1, "%s", base);
    for (; n < len; n++)
        path[n] = n % 100 ? 'a' : '/';
    path[n - 1] = 'z';
    path[n] = 0;
}

START_TEST(run_directory_refuses_hostile_names_and_roots)
{
    char root[] = "/tmp/foxrunXXXXXX", err[1200], path[1100];
    ck_assert_ptr_nonnull(mkdtemp(root));
    fox_dconf d;
    fox_dconf_default(&d);

    /* A newline or an escape in a name would forge log lines; '/' would leave the root. */
    static const char *const names[] = {"a\nfold 0 halted", "a\x1b[2J", "a\tb", "a/b", ".."};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ck_assert_msg(fox_conf_set_text(NULL, &d, "run.name", names[i], err, sizeof err) ==
                          FOX_EINVAL,
                      "run.name '%s' accepted", names[i]);
        ck_assert_msg(strstr(err, "run.name"), "the error names no key: %s", err);
    }
    ck_assert_int_eq(fox_conf_set_text(NULL, &d, "run.root", "/tmp/a\nb", err, sizeof err),
                     FOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "run.root: control character 0x0a"));
    FOX_CK_OK_MSG(fox_conf_set_text(NULL, &d, "run.name", "q'; x", err, sizeof err), err);

    /* A root of 951 bytes holds the run whole; one too long for the run's name is refused,
     * not cut short to an ancestor. */
    char dir[1200];
    deep_path(path, root, 951);
    FOX_CK_OK_MSG(open_fresh(path, "long", dir, sizeof dir, err, sizeof err), err);
    ck_assert_msg(!strncmp(dir, path, 951) && dir[951] == '/', "the run went to %s", dir);
    deep_path(path, root, 1010);
    ck_assert_int_eq(open_fresh(path, "long", dir, sizeof dir, err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "run.root") && strstr(err, "1010 bytes"), "%s", err);
    ck_assert_msg(access(path, F_OK) != 0, "%s was made", path);

    /* A root others may write to: refused unless sticky, where no one else may rename. */
    ck_assert_int_eq(chmod(root, 0777), 0);
    ck_assert_int_eq(open_fresh(root, "open", dir, sizeof dir, err, sizeof err), FOX_EPERM);
    ck_assert_msg(strstr(err, "run.root") && strstr(err, "not sticky"), "%s", err);
    ck_assert_int_eq(chmod(root, 01777), 0);
    FOX_CK_OK_MSG(open_fresh(root, "sticky", dir, sizeof dir, err, sizeof err), err);

    /* A symlink planted where the run goes (this second's name and the next few) is not
     * followed: the run gets a name of its own, the link's target stays empty. */
    char target[1100], stamp[32];
    snprintf(target, sizeof target, "%s/elsewhere", root);
    ck_assert_int_eq(mkdir(target, 0700), 0);
    time_t now = time(NULL);
    for (int s = 0; s < 5; s++) {
        time_t t = now + s;
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", gmtime(&t));
        snprintf(path, sizeof path, "%s/%s-planted", root, stamp);
        ck_assert_int_eq(symlink(target, path), 0);
    }
    FOX_CK_OK_MSG(open_fresh(root, "planted", dir, sizeof dir, err, sizeof err), err);
    ck_assert_msg(rmdir(target) == 0, "the run went through a planted symlink");
    struct stat st;
    ck_assert_msg(lstat(dir, &st) == 0 && S_ISDIR(st.st_mode), "the run is %s", dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("records");
    TCase *tc = tcase_create("records");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, epoch_report_carries_the_losses);
    tcase_add_test(tc, eval_hook_sees_every_bar);
    tcase_add_test(tc, a_fold_evaluates_nothing_twice);
    tcase_add_test(tc, checkpoint_format_1_still_loads);
    tcase_add_test(tc, load_policy_refuses_another_layout);
    tcase_add_test(tc, checkpoint_refuses_values_out_of_range);
    tcase_add_test(tc, once_leaves_a_complete_run_directory);
    tcase_add_test(tc, run_directory_refuses_hostile_names_and_roots);
    suite_add_tcase(s, tc);
    return fox_test_run_suite(s);
}
