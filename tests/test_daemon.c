/*
 * test_daemon.c — foxd's pieces without sockets: the configuration (JSON
 * file, --set, daemon keys), checkpoint path rules, the walk-forward driver
 * the trainer thread's state machine and commands, on the CPU backend
 * with a shrunken model, the control plane's CPU, and a population's
 * members as the reports render them. The sockets are
 * covered by test_daemon.sh.
 */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/answer.h"
#include "daemon/conf.h"
#include "daemon/pipes.h"
#include "daemon/cpus.h"
#include "daemon/foxd.h"
#include "daemon/render.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "proto/proto.h"
#include "daemon/trainer.h"
#include "daemon/walk.h"
#include "tests/testutil.h"

static char err[1024];
static char tmpdir[256];

static void
make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_daemon.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void
write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A model small enough for a 2-core CI machine. */
static void
tiny(fox_config *cfg)
{
    static const char *const pairs[] = {
        "model.h1=32",
        "model.h2=16",
        "model.head_hidden=16",
        "model.aux_hidden=8",
        "train.steps_per_epoch=20",
        "train.epochs=1",
        "data.synth_bars=3000",
        "engine.backend=cpu",
        "train.batch=16",
        "env.n_envs=8",
        "train.learning_starts=64",
        NULL,
    };
    fox_config_default(cfg);
    fox_test_set_pairs(cfg, pairs);
}

/* ------------------------------------------------------------------- conf */

START_TEST(test_conf_file)
{
    fox_config cfg;
    fox_dconf d;
    char path[300];
    make_tmpdir();
    snprintf(path, sizeof path, "%s/foxd.json", tmpdir);
    write_file(path, "{\"model\":{\"h1\":32,\"h2\":16},\n"
                     " \"train\":{\"epochs\":2,\"folds\":[0,2],\"lr\":0.001,\"seed\":"
                     "\"18446744073709551615\"},\n"
                     " \"data\":{\"source\":\"synthetic\"},\n"
                     " \"daemon\":{\"listen\":[\"ipc:///tmp/a.sock\",\"tcp://127.0.0.1:7000\"],\n"
                     "   \"token\":\"abc\",\"chunk_steps\":8,\"allow_insecure_remote\":true,\n"
                     "   \"tls\":{\"ca\":\"/etc/ca.pem\"}}}\n");
    fox_config_default(&cfg);
    fox_dconf_default(&d);
    FOX_CK_OK_MSG(fox_conf_load_file(&cfg, &d, path, NULL, 0, err, sizeof err), err);
    ck_assert_int_eq(cfg.h1, 32);
    ck_assert_int_eq(cfg.epochs, 2);
    ck_assert_int_eq(cfg.folds_mask, 5);
    ck_assert_uint_eq(cfg.seed, 18446744073709551615ULL);
    ck_assert(cfg.lr > 0.00099f && cfg.lr < 0.00101f);
    ck_assert_int_eq(d.n_listen, 2);
    ck_assert_str_eq(d.listen[1], "tcp://127.0.0.1:7000");
    ck_assert_str_eq(d.token, "abc");
    ck_assert_int_eq(d.chunk_steps, 8);
    ck_assert_int_eq(d.allow_insecure_remote, 1);
    ck_assert_str_eq(d.tls_ca, "/etc/ca.pem");

    /* Refusals name the file and the key path. */
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"model\":{\"h9\":1}}", "model.h9"},
        {"{\"train\":{\"epochs\":\"2\"}}", "train.epochs: expected an integer, got a string"},
        {"{\"train\":{\"epochs\":2.5}}", "train.epochs: expected an integer"},
        {"{\"train\":{\"lr\":true}}", "train.lr: expected a number"},
        {"{\"data\":{\"source\":7}}", "data.source: expected a string"},
        {"{\"train\":{\"folds\":[0,\"1\"]}}", "train.folds"},
        {"{\"train\":{\"epochs\":1,\"epochs\":2}}", "given twice"},
        {"{\"daemon\":{\"chunk_steps\":0}}", "daemon.chunk_steps"},
        {"{\"daemon\":{\"bogus\":1}}", "daemon.bogus"},
        {"{\"daemon\":{\"listen\":[1]}}", "daemon.listen"},
        {"{\"model\":{\"h1\":-5}}", "model.h1"},
        {"[1,2]", "top level"},
        {"{\"model\":\n{\"h1\":}}", ":2:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i].text);
        fox_config_default(&cfg);
        fox_dconf_default(&d);
        int rv = fox_conf_load_file(&cfg, &d, path, NULL, 0, err, sizeof err);
        ck_assert_msg(rv != 0, "%s: accepted", bad[i].text);
        ck_assert_msg(strstr(err, bad[i].want) && strstr(err, path), "%s: message '%s' lacks '%s'",
                      bad[i].text, err, bad[i].want);
    }
    ck_assert_int_ne(fox_conf_load_file(&cfg, &d, "/nonexistent/foxd.json", NULL, 0, err, sizeof err), 0);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

START_TEST(test_conf_set)
{
    fox_config cfg;
    fox_dconf d;
    fox_config_default(&cfg);
    fox_dconf_default(&d);
    FOX_CK_OK_MSG(fox_conf_set_pair(&cfg, &d, "train.epochs=7", err, sizeof err), err);
    ck_assert_int_eq(cfg.epochs, 7);
    FOX_CK_OK_MSG(fox_conf_set_pair(&cfg, &d, "daemon.ipc_mode=0600", err, sizeof err), err);
    ck_assert_int_eq(d.ipc_mode, 0600);
    FOX_CK_OK_MSG(
        fox_conf_set_pair(&cfg, &d, "daemon.listen=ipc:///a,tcp://127.0.0.1:1", err, sizeof err),
        err);
    ck_assert_int_eq(d.n_listen, 2);
    FOX_CK_OK_MSG(fox_conf_set_pair(&cfg, &d, "daemon.checkpoint_on_stop=false", err, sizeof err),
                  err);
    ck_assert_int_eq(d.checkpoint_on_stop, 0);
    ck_assert_int_ne(
        fox_conf_set_pair(&cfg, &d, "daemon.checkpoint_on_stop=maybe", err, sizeof err), 0);
    /* /metrics' deadline: at least 100 ms, or every scrape would be cut off. */
    ck_assert_int_eq(d.metrics_timeout_ms, 5000);
    FOX_CK_OK_MSG(fox_conf_set_pair(&cfg, &d, "daemon.metrics_timeout_ms=1000", err, sizeof err),
                  err);
    ck_assert_int_eq(d.metrics_timeout_ms, 1000);
    ck_assert_int_ne(fox_conf_set_pair(&cfg, &d, "daemon.metrics_timeout_ms=50", err, sizeof err),
                     0);
    ck_assert_ptr_nonnull(strstr(err, "daemon.metrics_timeout_ms"));
    ck_assert_int_ne(fox_conf_set_pair(&cfg, &d, "train.epochs", err, sizeof err), 0);
    ck_assert_int_ne(fox_conf_set_pair(&cfg, &d, "=3", err, sizeof err), 0);
    ck_assert_int_ne(fox_conf_set_pair(&cfg, &d, "nope.key=1", err, sizeof err), 0);
    /* Over the socket (d NULL) the daemon's own keys are fixed. */
    cJSON *v = cJSON_CreateString("x");
    ck_assert_int_eq(fox_conf_set_json(&cfg, NULL, "daemon.token", v, err, sizeof err), FOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "fixed"));
    cJSON_Delete(v);
    /* config_get's JSON form of keys. */
    int i = fox_conf_key_index("train.folds");
    ck_assert_int_ge(i, 0);
    cJSON *f = fox_conf_key_json(&cfg, i);
    ck_assert(cJSON_IsArray(f));
    cJSON_Delete(f);
    i = fox_conf_key_index("train.epochs");
    cJSON *e = fox_conf_key_json(&cfg, i);
    ck_assert(cJSON_IsNumber(e) && e->valueint == 7);
    cJSON_Delete(e);
    /* A member key's list: an array in JSON, or its text; an array back from config_get. */
    v = cJSON_Parse("[0.001, 0.0003]");
    FOX_CK_OK_MSG(fox_conf_set_json(&cfg, NULL, "train.lr", v, err, sizeof err), err);
    cJSON_Delete(v);
    e = fox_conf_key_json(&cfg, fox_conf_key_index("train.lr"));
    ck_assert_int_eq(cJSON_GetArraySize(e), 2);
    ck_assert_double_eq(cJSON_GetArrayItem(e, 1)->valuedouble, 0.0003);
    cJSON_Delete(e);
    v = cJSON_Parse("[\"18446744073709551615\", 3]");
    FOX_CK_OK_MSG(fox_conf_set_json(&cfg, NULL, "train.seed", v, err, sizeof err), err);
    cJSON_Delete(v);
    e = fox_conf_key_json(&cfg, fox_conf_key_index("train.seed"));
    ck_assert_str_eq(cJSON_GetArrayItem(e, 0)->valuestring, "18446744073709551615");
    cJSON_Delete(e);
    v = cJSON_CreateString("0.9,0.99");
    FOX_CK_OK_MSG(fox_conf_set_json(&cfg, NULL, "train.gamma", v, err, sizeof err), err);
    cJSON_Delete(v);
    v = cJSON_Parse("[0.1, true]");
    ck_assert_int_eq(fox_conf_set_json(&cfg, NULL, "train.gamma", v, err, sizeof err),
                     FOX_EINVAL);
    ck_assert_msg(strstr(err, "train.gamma: expected an array of numbers, got a boolean"), "%s",
                  err);
    cJSON_Delete(v);
    v = cJSON_Parse("[100, 1.5]");
    ck_assert_int_eq(fox_conf_set_json(&cfg, NULL, "train.eps_decay_steps", v, err, sizeof err),
                     FOX_EINVAL);
    cJSON_Delete(v);
}
END_TEST

START_TEST(test_dconf_finish)
{
    fox_dconf d;
    char path[300];
    make_tmpdir();
    fox_dconf_default(&d);
    snprintf(d.runtime_dir, sizeof d.runtime_dir, "%s", tmpdir);
    snprintf(d.state_dir, sizeof d.state_dir, "%s/state", tmpdir);
    snprintf(path, sizeof path, "%s/token", tmpdir);
    write_file(path, "s3cret\n");
    chmod(path, 0600);
    snprintf(d.token_file, sizeof d.token_file, "%s", path);
    FOX_CK_OK_MSG(fox_dconf_finish(&d, err, sizeof err), err);
    ck_assert_int_eq(d.n_listen, 1);
    ck_assert_ptr_nonnull(strstr(d.listen[0], tmpdir));
    ck_assert_ptr_nonnull(strstr(d.pub, "foxd-events.sock"));
    ck_assert_str_eq(d.token, "s3cret");
    ck_assert_ptr_nonnull(strstr(d.metrics_textfile, "/state/foxd.prom"));
    write_file(path, "two\nlines\n");
    fox_dconf_default(&d);
    snprintf(d.token_file, sizeof d.token_file, "%s", path);
    ck_assert_int_ne(fox_dconf_finish(&d, err, sizeof err), 0);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

START_TEST(test_ckpt_paths)
{
    fox_dconf d;
    char out[FOX_PATH_MAX];
    fox_dconf_default(&d);
    snprintf(d.state_dir, sizeof d.state_dir, "/var/lib/foxd");
    FOX_CK_OK_MSG(fox_answer_ckpt_path(&d, NULL, 1, out, sizeof out, err, sizeof err), err);
    ck_assert_str_eq(out, "/var/lib/foxd/foxd.ckpt");
    FOX_CK_OK_MSG(fox_answer_ckpt_path(&d, "runs/a.ckpt", 0, out, sizeof out, err, sizeof err),
                  err);
    ck_assert_str_eq(out, "/var/lib/foxd/runs/a.ckpt");
    FOX_CK_OK_MSG(
        fox_answer_ckpt_path(&d, "/var/lib/foxd/b.ckpt", 1, out, sizeof out, err, sizeof err), err);
    ck_assert_str_eq(out, "/var/lib/foxd/b.ckpt");
    ck_assert_int_eq(fox_answer_ckpt_path(&d, "../x", 0, out, sizeof out, err, sizeof err),
                     FOX_EPERM);
    ck_assert_int_eq(fox_answer_ckpt_path(&d, "a/../../x", 0, out, sizeof out, err, sizeof err),
                     FOX_EPERM);
    ck_assert_int_eq(fox_answer_ckpt_path(&d, "/etc/passwd", 0, out, sizeof out, err, sizeof err),
                     FOX_EPERM);
    ck_assert_int_eq(
        fox_answer_ckpt_path(&d, "/var/lib/foxdX/a.ckpt", 0, out, sizeof out, err, sizeof err),
        FOX_EPERM);
    /* "..x" is a name, not a parent; a name, though, that no checkpoint may have. */
    ck_assert_int_eq(fox_answer_ckpt_path(&d, "..x.ckpt", 0, out, sizeof out, err, sizeof err),
                     FOX_EPERM);
    ck_assert_ptr_nonnull(strstr(err, "not starting with '.'"));
    /* The daemon's own files in the state directory are not checkpoints: saving over one
     * would break every later start. */
    static const char *const theirs[] = {"foxd.overrides.json", "metrics.jsonl", "data/a.csv",
                                         "/var/lib/foxd/metrics.jsonl", ".ckpt", "a.ckpt/",
                                         "a b.ckpt", "a.ckpt.tmp.1", ".hidden.ckpt"};
    for (size_t i = 0; i < sizeof theirs / sizeof theirs[0]; i++) {
        ck_assert_msg(fox_answer_ckpt_path(&d, theirs[i], 1, out, sizeof out, err, sizeof err) ==
                          FOX_EPERM,
                      "saved to '%s'", theirs[i]);
        ck_assert_ptr_nonnull(strstr(err, ".ckpt"));
    }
    /* A save is a bare name: the subdirectories hold runs and data. */
    ck_assert_int_eq(fox_answer_ckpt_path(&d, "runs/a.ckpt", 1, out, sizeof out, err, sizeof err),
                     FOX_EPERM);
    ck_assert_ptr_nonnull(strstr(err, "no '/'"));
}
END_TEST

/* ------------------------------------------------------------------- walk */

typedef struct counts {
    int begins, chunks, epochs, folds;
} counts;

static void
c_begin(void *a, int f)
{
    (void)f;
    ((counts *)a)->begins++;
}
static void
c_chunk(void *a, const fox_step_stats *s)
{
    (void)s;
    ((counts *)a)->chunks++;
}
static void
c_epoch(void *a, const fox_epoch_report *r)
{
    (void)r;
    ((counts *)a)->epochs++;
}
static void
c_fold(void *a, const fox_fold_report *r)
{
    ck_assert_int_eq(r->epochs_done, 2);
    ((counts *)a)->folds++;
}

/* A slot's `halts` in nan_flags and sentinel_list follows engine.halt_rule: only strict halts. */
START_TEST(test_render_halts_follow_the_rule)
{
    int flags[FOX_SENTINEL_SLOTS] = {0};
    flags[FOX_SENT_H_S2] = 1;
    flags[FOX_SENT_TRUNK_ADAM_M_MAX] = 1;
    for (int rule = FOX_HALT_RULE_SEEDS; rule <= FOX_HALT_RULE_STRICT; rule++) {
        cJSON *r = fox_render_nan_flags(flags, rule);
        const cJSON *fired = cJSON_GetObjectItem(r, "fired");
        ck_assert_int_eq(cJSON_GetArraySize(fired), 2);
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(fired, 0), "halts")) ==
                  (rule == FOX_HALT_RULE_STRICT));
        ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(fired, 1), "halts")));
        cJSON_Delete(r);
        r = fox_render_sentinel_list(rule);
        const cJSON *slots = cJSON_GetObjectItem(r, "slots");
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(slots, FOX_SENT_H_S2),
                                                   "halts")) == (rule == FOX_HALT_RULE_STRICT));
        cJSON_Delete(r);
    }
}
END_TEST

START_TEST(test_walk)
{
    fox_config cfg;
    fox_engine *e;
    fox_walk w;
    counts n = {0};
    fox_walk_sink sink = {c_begin, c_chunk, c_epoch, c_fold, &n};
    tiny(&cfg);
    FOX_CK_OK_MSG(fox_engine_create(&e, &cfg, err, sizeof err), err);
    FOX_CK_OK_MSG(fox_engine_load_data(e), err);
    FOX_CK_OK_MSG(fox_walk_check(5, 2, 10, cfg.n_folds, err, sizeof err), err);
    fox_walk_init(&w, 5, 2, 10);
    int calls = 0;
    while (!w.done && calls++ < 1000)
        FOX_CK_OK_MSG(fox_walk_advance(&w, e, 4, &sink), err);
    ck_assert_int_eq(n.begins, 2);
    ck_assert_int_eq(n.epochs, 4);
    ck_assert_int_eq(n.folds, 2);
    ck_assert_int_eq(n.chunks, 4 * 3); /* 10 steps in chunks of 4: 4, 4, 2 */
    cJSON *j = NULL;
    fox_fold_report fr;
    FOX_CK_OK_MSG(fox_engine_fold_report(e, &fr), err);
    j = fox_render_fold(&fr);
    ck_assert_int_eq(cJSON_GetObjectItem(j, "fold")->valueint, 2);
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(j, "bars_per_year"));
    /* The figures a reader judges the fold by: the policy's with its SE, and every baseline's. */
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "test_sharpe_se")));
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "test_sharpe_last")));
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "test_sharpe_mean")));
    ck_assert_str_eq(cJSON_GetObjectItem(j, "select")->valuestring, "smoothed");
    const cJSON *b = cJSON_GetObjectItem(j, "baselines");
    const char *names[] = {"buy_hold", "flat", "random", "trend", "oracle"};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(b, names[i]),
                                                         "sharpe_se")),
                      "baselines.%s", names[i]);
    ck_assert_double_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "flat"), "sharpe")->valuedouble,
                        0.0);
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "oracle_fraction")) ||
              cJSON_IsNull(cJSON_GetObjectItem(j, "oracle_fraction")));
    cJSON_Delete(j);
    fox_engine_destroy(e);

    ck_assert_int_ne(fox_walk_check(0, 1, 1, 3, err, sizeof err), 0);
    ck_assert_int_ne(fox_walk_check(8, 1, 1, 3, err, sizeof err), 0);
    ck_assert_int_ne(fox_walk_check(1, 0, 1, 3, err, sizeof err), 0);
    ck_assert_int_ne(fox_walk_check(1, 1, 0, 3, err, sizeof err), 0);
}
END_TEST

/*
 * A population's fold and epoch objects: "members" with the spread and each
 * member's walk, a halted member's kind, step and slot by name; nothing of
 * it for one member, whose objects stay as they were.
 */
START_TEST(test_members_render)
{
    static fox_fold_report fr;
    static fox_epoch_report ep;
    memset(&fr, 0, sizeof fr);
    fr.n_members = 3;
    fr.members_training = 2;
    fr.members_n = 3;
    fr.members_mean = 0.25;
    fr.members_se = 0.125;
    fr.members_best = 2;
    fr.members_worst = 1;
    for (int k = 0; k < 3; k++) {
        fr.members[k].seed = 7 + (uint64_t)k;
        fr.members[k].best_epoch = k;
        fr.members[k].test_at_best.sharpe = 0.5 * k - 0.25;
        fr.members[k].halt_slot = -1;
    }
    fr.members[1].halt_reason = FOX_HALT_NAN;
    fr.members[1].halt_step = 130;
    fr.members[1].halt_slot = fox_sentinel_index("h_s2");
    fr.members[2].halt_reason = FOX_HALT_GRAD_COLLAPSE;
    fr.members[2].halt_step = 150;
    cJSON *j = fox_render_fold(&fr);
    const cJSON *m = cJSON_GetObjectItem(j, "members");
    ck_assert(cJSON_IsObject(m));
    ck_assert_int_eq(cJSON_GetObjectItem(m, "n")->valueint, 3);
    ck_assert_int_eq(cJSON_GetObjectItem(m, "training")->valueint, 2);
    ck_assert_double_eq(cJSON_GetObjectItem(m, "mean")->valuedouble, 0.25);
    ck_assert_double_eq(cJSON_GetObjectItem(m, "se")->valuedouble, 0.125);
    ck_assert_int_eq(cJSON_GetObjectItem(m, "best")->valueint, 2);
    ck_assert_int_eq(cJSON_GetObjectItem(m, "worst")->valueint, 1);
    const cJSON *each = cJSON_GetObjectItem(m, "each");
    ck_assert_int_eq(cJSON_GetArraySize(each), 3);
    const cJSON *e0 = cJSON_GetArrayItem(each, 0), *e1 = cJSON_GetArrayItem(each, 1),
                *e2 = cJSON_GetArrayItem(each, 2);
    ck_assert_int_eq(cJSON_GetObjectItem(e1, "seed")->valueint, 8);
    ck_assert_int_eq(cJSON_GetObjectItem(e1, "epoch")->valueint, 1);
    ck_assert_double_eq(cJSON_GetObjectItem(e2, "test_sharpe")->valuedouble, 0.75);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(e0, "halt")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(e0, "halt_step")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(e0, "halt_slot")));
    ck_assert_str_eq(cJSON_GetObjectItem(e1, "halt")->valuestring, "nan");
    ck_assert_int_eq(cJSON_GetObjectItem(e1, "halt_step")->valueint, 130);
    ck_assert_str_eq(cJSON_GetObjectItem(e1, "halt_slot")->valuestring, "h_s2");
    ck_assert_str_eq(cJSON_GetObjectItem(e2, "halt")->valuestring, "grad_collapse");
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(e2, "halt_slot")));
    ck_assert_ptr_null(cJSON_GetObjectItem(e0, "train.lr")); /* no key held apart: none */
    cJSON_Delete(j);
    /* Members that hold train.lr apart: each names its own, and nothing else. */
    int lr = fox_member_key_index("train.lr");
    fr.member_keys = 1u << lr;
    for (int k = 0; k < 3; k++) {
        fr.members[k].values[lr] = 0.001 * (k + 1);
        fr.members[k].values[fox_member_key_index("train.gamma")] = 0.9;
    }
    j = fox_render_fold(&fr);
    each = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "members"), "each");
    const cJSON *m2 = cJSON_GetArrayItem(each, 2);
    ck_assert_double_eq(cJSON_GetObjectItem(m2, "train.lr")->valuedouble, 0.003);
    ck_assert_ptr_null(cJSON_GetObjectItem(m2, "train.gamma"));
    cJSON_Delete(j);
    fr.n_members = 1;
    j = fox_render_fold(&fr);
    ck_assert_ptr_null(cJSON_GetObjectItem(j, "members"));
    cJSON_Delete(j);

    memset(&ep, 0, sizeof ep);
    ep.n_members = 2;
    ep.members[0].training = 1;
    ep.members[0].test_sharpe = 1.5;
    ep.members[1].val_sharpe = NAN;
    ep.members[1].test_sharpe = NAN;
    j = fox_render_epoch(&ep);
    const cJSON *a = cJSON_GetObjectItem(j, "members");
    ck_assert_int_eq(cJSON_GetArraySize(a), 2);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "training")));
    ck_assert_double_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "test_sharpe")->valuedouble,
                        1.5);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 1), "training")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 1), "test_sharpe")));
    cJSON_Delete(j);
    ep.n_members = 1;
    j = fox_render_epoch(&ep);
    ck_assert_ptr_null(cJSON_GetObjectItem(j, "members"));
    cJSON_Delete(j);

    /* A member outside the population: the error names the member and the range. */
    char msg[160];
    ck_assert_int_eq(fox_member_check(2, 3, msg, sizeof msg), FOX_OK);
    ck_assert_int_eq(fox_member_check(3, 3, msg, sizeof msg), FOX_EINVAL);
    ck_assert_str_eq(msg, "args.member 3 is outside [0, 3): engine.members is 3");
}
END_TEST

/* ---------------------------------------------------------------- trainer */

/* The hooks: completed commands and events, collected for the test thread. */
typedef struct collector {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    fox_tcmd *done;
    int n_events;
    char last_op_done[4096];
    int op_done_count;
} collector;

static collector col = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, "", 0};

static void
on_done(void *arg, fox_tcmd *c)
{
    (void)arg;
    pthread_mutex_lock(&col.lock);
    c->next = col.done;
    col.done = c;
    pthread_cond_broadcast(&col.cond);
    pthread_mutex_unlock(&col.lock);
}

/* Events are rendered as the server renders them, so the op_done text is what a subscriber sees. */
static void
on_event(void *arg, const fox_tevent *ev)
{
    (void)arg;
    cJSON *data = fox_render_event(ev);
    pthread_mutex_lock(&col.lock);
    col.n_events++;
    if (!strcmp(fox_render_event_name(ev), "op_done")) {
        char *s = cJSON_PrintUnformatted(data);
        snprintf(col.last_op_done, sizeof col.last_op_done, "%s", s);
        free(s);
        col.op_done_count++;
        pthread_cond_broadcast(&col.cond);
    }
    pthread_mutex_unlock(&col.lock);
    cJSON_Delete(data);
}

/* A completed command's result as the reply carries it. */
static int
result_true(const fox_tcmd *c, const char *key)
{
    cJSON *r = fox_render_result(c);
    int yes = cJSON_IsTrue(cJSON_GetObjectItem(r, key));
    cJSON_Delete(r);
    return yes;
}

/* Submit and wait for the completion; returns it (caller frees). */
static fox_tcmd *
roundtrip(fox_trainer *t, fox_tcmd *c)
{
    pthread_mutex_lock(&col.lock);
    col.done = NULL;
    pthread_mutex_unlock(&col.lock);
    ck_assert_int_eq(fox_trainer_submit(t, c), 0);
    pthread_mutex_lock(&col.lock);
    while (!col.done)
        pthread_cond_wait(&col.cond, &col.lock);
    fox_tcmd *r = col.done;
    col.done = NULL;
    pthread_mutex_unlock(&col.lock);
    ck_assert_ptr_eq(r, c);
    return r;
}

static int
simple_cmd(fox_trainer *t, int cmd)
{
    fox_tcmd *c = calloc(1, sizeof *c);
    c->cmd = cmd;
    roundtrip(t, c);
    int st = c->status;
    free(c);
    return st;
}

static void
wait_op_done(int count)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 120;
    pthread_mutex_lock(&col.lock);
    while (col.op_done_count < count)
        ck_assert_int_eq(pthread_cond_timedwait(&col.cond, &col.lock, &ts), 0);
    pthread_mutex_unlock(&col.lock);
}

static int
state_of(fox_trainer *t)
{
    static fox_snapshot s;
    fox_trainer_snapshot(t, &s);
    return s.state;
}

START_TEST(test_trainer)
{
    fox_config cfg;
    fox_dconf d;
    fox_trainer *t;
    fox_trainer_hooks hooks = {on_done, on_event, NULL};
    char path[400];

    make_tmpdir();
    tiny(&cfg);
    fox_dconf_default(&d);
    snprintf(d.state_dir, sizeof d.state_dir, "%s", tmpdir);
    d.chunk_steps = 4;
    FOX_CK_OK_MSG(fox_trainer_start(&t, &cfg, &d, &hooks, err, sizeof err), err);
    ck_assert_int_eq(state_of(t), FOX_TSTATE_IDLE);

    /* Wrong states. */
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_PAUSE), FOX_ESTATE);
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_RESUME), FOX_ESTATE);
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_STOP), FOX_ESTATE);

    /* A whole run: accepted at once, completed by op_done with every fold. */
    fox_tcmd *c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_RUN;
    c->folds_mask = 3;
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_OK);
    ck_assert_int_gt(c->op_id, 0);
    ck_assert(result_true(c, "accepted"));
    free(c);
    wait_op_done(1);
    ck_assert_ptr_nonnull(strstr(col.last_op_done, "\"ok\":true"));
    ck_assert_int_eq(state_of(t), FOX_TSTATE_IDLE);
    static fox_snapshot s;
    fox_trainer_snapshot(t, &s);
    ck_assert_int_eq(s.n_done, 2);
    ck_assert_int_eq(s.epochs_total, 2);
    ck_assert_int_gt(s.total_steps, 0);
    snprintf(path, sizeof path, "%s/metrics.jsonl", tmpdir);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_gt(st.st_size, 0);

    /* A bad fold is refused before anything starts. */
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_START_FOLD;
    c->fold = 7;
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_EINVAL);
    free(c);

    /* A long run: pause, resume, stop. */
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_START_FOLD;
    c->fold = 0;
    c->steps_per_epoch = 1000000;
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_OK);
    free(c);
    ck_assert_int_eq(state_of(t), FOX_TSTATE_TRAINING);
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_CONFIG_SET), FOX_ESTATE); /* idle only */
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_PAUSE), FOX_OK);
    ck_assert_int_eq(state_of(t), FOX_TSTATE_PAUSED);
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_RESET_FOLD), FOX_OK);
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_RESUME), FOX_OK);
    ck_assert_int_eq(state_of(t), FOX_TSTATE_TRAINING);
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_RESET_FOLD), FOX_ESTATE); /* not while training */
    ck_assert_int_eq(simple_cmd(t, FOX_CMD_STOP), FOX_OK);
    ck_assert_int_eq(state_of(t), FOX_TSTATE_IDLE);
    wait_op_done(2);
    ck_assert_ptr_nonnull(strstr(col.last_op_done, "\"ok\":false"));

    /* config_set: a bad key changes nothing; the run's own keys keep the engine. */
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_CONFIG_SET;
    c->values = cJSON_Parse("{\"train.epochs\":2,\"model.h9\":1}");
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(c->message, "model.h9"));
    cJSON_Delete(c->values);
    free(c);
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_CONFIG_SET;
    c->values = cJSON_Parse("{\"train.epochs\":2}");
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_OK);
    /* The whole result, in the key order clients see. */
    cJSON *rendered = fox_render_result(c);
    char *text = cJSON_PrintUnformatted(rendered);
    ck_assert_str_eq(text, "{\"applied\":[\"train.epochs\"],\"engine_recreated\":false,"
                           "\"state\":\"idle\"}");
    free(text);
    cJSON_Delete(rendered);
    cJSON_Delete(c->values);
    free(c);
    /* A key that recreates the engine is refused while it holds training, unless forced. */
    fox_trainer_snapshot(t, &s);
    int64_t trained = s.total_steps;
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_CONFIG_SET;
    c->values = cJSON_Parse("{\"train.epochs\":3,\"model.h1\":24}");
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_ESTATE);
    snprintf(path, sizeof path,
             "config_set model.h1: this key recreates the engine, which would discard its %lld "
             "train steps",
             (long long)trained);
    ck_assert_msg(strstr(c->message, path), "refusal: %s", c->message);
    ck_assert_ptr_nonnull(strstr(c->message, "force"));
    c->force = 1;
    c->status = FOX_OK;
    c->message[0] = 0;
    roundtrip(t, c);
    ck_assert_msg(c->status == FOX_OK, "forced: %s", c->message);
    ck_assert(result_true(c, "engine_recreated"));
    cJSON_Delete(c->values);
    free(c);
    fox_trainer_snapshot(t, &s);
    ck_assert_int_eq(s.cfg.h1, 24);
    ck_assert_int_eq(s.cfg.epochs, 3);
    ck_assert_int_eq(s.total_steps, 0);
    /* The new engine holds nothing: a further change needs no force. */
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_CONFIG_SET;
    c->values = cJSON_Parse("{\"env.fee\":0.0002}");
    roundtrip(t, c);
    ck_assert_msg(c->status == FOX_OK, "untrained engine: %s", c->message);
    cJSON_Delete(c->values);
    free(c);

    /* ISV and flags are readable at any time. */
    float isv[FOX_ISV_TOTAL_DIM];
    ck_assert_int_eq(fox_trainer_read_isv(t, 0, isv, FOX_ISV_TOTAL_DIM), FOX_ISV_TOTAL_DIM);

    /* Checkpoints: save (long: op_done), load back, refuse a corrupt file untouched. */
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_CHECKPOINT_SAVE;
    snprintf(c->path, sizeof c->path, "%s/a.ckpt", tmpdir);
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_OK);
    ck_assert_int_gt(c->op_id, 0);
    free(c);
    wait_op_done(3); /* the run, the stopped one, then this save */
    ck_assert_ptr_nonnull(strstr(col.last_op_done, "\"ok\":true"));
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_CHECKPOINT_LOAD;
    snprintf(c->path, sizeof c->path, "%s/a.ckpt", tmpdir);
    roundtrip(t, c);
    ck_assert_msg(c->status == FOX_OK, "load: %s", c->message);
    free(c);
    snprintf(path, sizeof path, "%s/bad.ckpt", tmpdir);
    write_file(path, "this is not a checkpoint at all, not even close to one");
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_CHECKPOINT_LOAD;
    snprintf(c->path, sizeof c->path, "%s", path);
    roundtrip(t, c);
    ck_assert_int_ne(c->status, FOX_OK);
    ck_assert_str_eq(fox_proto_code_name(c->status), "EIO");
    free(c);
    ck_assert_int_eq(state_of(t), FOX_TSTATE_IDLE);

    /* inject_fault needs debug.enable. */
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_INJECT_FAULT;
    snprintf(c->fault_buffer, sizeof c->fault_buffer, "h_s2");
    snprintf(c->fault_kind, sizeof c->fault_kind, "nan");
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_EPERM);
    free(c);

    /* Shutdown: the last command; later ones are refused. */
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_SHUTDOWN;
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_OK);
    ck_assert_int_eq(c->exit_after, 1);
    free(c);
    c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_PAUSE;
    ck_assert_int_eq(fox_trainer_submit(t, c), FOX_ESTATE);
    free(c);
    fox_trainer_destroy(t);

    snprintf(path, sizeof path, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(path), 0);
}
END_TEST

/* A config_set of one key on t; returns the completed command (caller frees). */
static fox_tcmd *
config_set(fox_trainer *t, const char *json, int force)
{
    fox_tcmd *c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_CONFIG_SET;
    c->values = cJSON_Parse(json);
    c->force = force;
    roundtrip(t, c);
    cJSON_Delete(c->values);
    c->values = NULL;
    return c;
}

/* A stop with its checkpoint at state_dir/foxd.ckpt; returns the rendered result. */
static char *
stop_with_checkpoint(fox_trainer *t, const char *state_dir)
{
    fox_tcmd *c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_SHUTDOWN;
    c->checkpoint = 1;
    snprintf(c->path, sizeof c->path, "%s/foxd.ckpt", state_dir);
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_OK);
    cJSON *r = fox_render_result(c);
    char *text = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    free(c);
    fox_trainer_destroy(t);
    return text;
}

/*
 * Training survives a configuration change: a stop after a forced change
 * keeps the trained checkpoint, and an engine that resumed one holds
 * training as much as one that ran.
 */
START_TEST(test_trainer_keeps_training)
{
    fox_config cfg;
    fox_dconf d;
    fox_trainer *t;
    fox_trainer_hooks hooks = {on_done, on_event, NULL};
    char path[400], *text;
    size_t n0, n1;

    make_tmpdir();
    tiny(&cfg);
    fox_dconf_default(&d);
    snprintf(d.state_dir, sizeof d.state_dir, "%s", tmpdir);
    d.chunk_steps = 4;
    pthread_mutex_lock(&col.lock);
    col.op_done_count = 0;
    pthread_mutex_unlock(&col.lock);
    FOX_CK_OK_MSG(fox_trainer_start(&t, &cfg, &d, &hooks, err, sizeof err), err);
    fox_tcmd *c = calloc(1, sizeof *c);
    c->cmd = FOX_CMD_START_FOLD;
    roundtrip(t, c);
    ck_assert_int_eq(c->status, FOX_OK);
    free(c);
    wait_op_done(1);
    text = stop_with_checkpoint(t, tmpdir);
    ck_assert_ptr_nonnull(strstr(text, "\"checkpoint\":\""));
    free(text);
    snprintf(path, sizeof path, "%s/foxd.ckpt", tmpdir);
    char *trained = fox_test_read_file(path, &n0);
    ck_assert_ptr_nonnull(trained);

    /* The start resumes it: a key that recreates the engine is refused, then forced. */
    FOX_CK_OK_MSG(fox_trainer_start(&t, &cfg, &d, &hooks, err, sizeof err), err);
    c = config_set(t, "{\"env.fee\":0.0002}", 0);
    ck_assert_int_eq(c->status, FOX_ESTATE);
    ck_assert_msg(strstr(c->message, "config_set env.fee: this key recreates the engine"),
                  "resumed: %s", c->message);
    free(c);
    c = config_set(t, "{\"env.fee\":0.0002}", 1);
    ck_assert_msg(c->status == FOX_OK, "forced: %s", c->message);
    free(c);

    /* The untrained engine's stop leaves the trained checkpoint as it was. */
    text = stop_with_checkpoint(t, tmpdir);
    ck_assert_msg(strstr(text, "\"checkpoint\":null,\"checkpoint_kept\":\""), "stop: %s", text);
    free(text);
    char *after = fox_test_read_file(path, &n1);
    ck_assert_ptr_nonnull(after);
    ck_assert_uint_eq(n1, n0);
    ck_assert(memcmp(after, trained, n0) == 0);
    free(after);
    free(trained);

    snprintf(path, sizeof path, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(path), 0);
}
END_TEST

START_TEST(test_trainer_start_fails)
{
    fox_config cfg;
    fox_dconf d;
    fox_trainer *t = (fox_trainer *)1;
    fox_trainer_hooks hooks = {on_done, on_event, NULL};
    tiny(&cfg);
    fox_dconf_default(&d);
    FOX_CK_OK_MSG(fox_config_set(&cfg, "data.source", "/nonexistent/bars.csv", err, sizeof err),
                  err);
    ck_assert_int_ne(fox_trainer_start(&t, &cfg, &d, &hooks, err, sizeof err), 0);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/bars.csv"));
}
END_TEST

/*
 * A serve whose setup fails before any endpoint is prepared tears down the
 * half-built server: an error exit, and no descriptor it never opened
 * closed (the ipc lock of an unprepared set is none, not descriptor 0).
 */
START_TEST(test_serve_setup_fails)
{
    fox_config cfg;
    fox_dconf d;
    tiny(&cfg);
    fox_dconf_default(&d);
    snprintf(d.state_dir, sizeof d.state_dir, "/proc/foxd-test/state");
    int null = open("/dev/null", O_RDONLY);
    ck_assert_int_ge(null, 0);
    ck_assert_int_eq(dup2(null, STDIN_FILENO), STDIN_FILENO);
    close(null);
    ck_assert_int_eq(fox_serve_main(&cfg, &d), FOX_EXIT_ERROR);
    ck_assert_msg(fcntl(STDIN_FILENO, F_GETFD) != -1, "the failed serve closed descriptor 0");
}
END_TEST

/* The activity table of control connections: lookups survive growth and removals. */
START_TEST(test_pipes)
{
    enum { N = 1000 };
    fox_pipes t;
    uint32_t idle[N];
    FOX_CK_OK(fox_pipes_init(&t));
    /* Sequential ids, as nng gives them, well past the first capacity. */
    for (uint32_t id = 1; id <= N; id++)
        FOX_CK_OK(fox_pipes_add(&t, id, 0, 0, 1000));
    ck_assert_uint_eq(t.used, N);
    /* Every other one removed: the rest must still be found. */
    for (uint32_t id = 2; id <= N; id += 2)
        fox_pipes_remove(&t, id);
    fox_pipes_remove(&t, 5 * N); /* never added */
    ck_assert_uint_eq(t.used, N / 2);
    /* A request in flight keeps a pipe out of the idle ones however old it is. */
    fox_pipes_begin(&t, 1);
    fox_pipes_begin(&t, 3);
    fox_pipes_begin(&t, 3);
    fox_pipes_end(&t, 3, 1500);
    ck_assert_int_eq(fox_pipes_expired(&t, 1999, 1000, 0, idle, N), 0);
    int n = fox_pipes_expired(&t, 2000, 1000, 0, idle, N);
    ck_assert_int_eq(n, N / 2 - 2);
    for (int i = 0; i < n; i++)
        ck_assert(idle[i] % 2 == 1 && idle[i] != 1 && idle[i] != 3);
    /* 3 has one request left; once it ends the idle time counts from then. */
    fox_pipes_end(&t, 3, 2100);
    ck_assert_int_eq(fox_pipes_expired(&t, 3000, 1000, 0, idle, N), N / 2 - 2);
    ck_assert_int_eq(fox_pipes_expired(&t, 3100, 1000, 0, idle, N), N / 2 - 1);
    /* 3 keeps asking: never idle, it is old once connected 5 s ago, and only between requests. */
    fox_pipes_begin(&t, 3);
    fox_pipes_end(&t, 3, 5900);
    ck_assert_int_eq(fox_pipes_expired(&t, 6000, 1000, 0, idle, N), N / 2 - 2);
    ck_assert_int_eq(fox_pipes_expired(&t, 6000, 1000, 5000, idle, N), N / 2 - 1);
    ck_assert_int_eq(fox_pipes_expired(&t, 6000, 0, 5000, idle, N), N / 2 - 1);
    ck_assert_int_eq(fox_pipes_expired(&t, 6000, 0, 5001, idle, N), 0);
    fox_pipes_begin(&t, 3);
    ck_assert_int_eq(fox_pipes_expired(&t, 6000, 0, 5000, idle, N), N / 2 - 2);
    fox_pipes_end(&t, 3, 6000);
    /* The batch bound holds. */
    ck_assert_int_eq(fox_pipes_expired(&t, 9000, 1000, 0, idle, 7), 7);
    for (uint32_t id = 1; id <= N; id += 2)
        fox_pipes_remove(&t, id);
    ck_assert_uint_eq(t.used, 0);
    ck_assert_int_eq(fox_pipes_expired(&t, 9000, 1000, 1000, idle, N), 0);
    fox_pipes_fini(&t);
}
END_TEST

/* One peer address holds at most peer_max pipes; the ones it closes free their places. */
START_TEST(test_pipes_peer)
{
    fox_pipes t;
    FOX_CK_OK(fox_pipes_init(&t));
    for (uint32_t id = 1; id <= 3; id++)
        FOX_CK_OK(fox_pipes_add(&t, id, 7, 3, 0));
    ck_assert_int_eq(fox_pipes_add(&t, 4, 7, 3, 0), FOX_EBUSY);
    FOX_CK_OK(fox_pipes_add(&t, 5, 8, 3, 0)); /* another peer */
    FOX_CK_OK(fox_pipes_add(&t, 6, 0, 3, 0)); /* not counted (ipc) */
    FOX_CK_OK(fox_pipes_add(&t, 7, 7, 0, 0)); /* no limit */
    fox_pipes_remove(&t, 7);
    fox_pipes_remove(&t, 2);
    FOX_CK_OK(fox_pipes_add(&t, 4, 7, 3, 0));
    ck_assert_int_eq(fox_pipes_add(&t, 8, 7, 3, 0), FOX_EBUSY);
    ck_assert_uint_eq(t.used, 5);
    fox_pipes_fini(&t);
}
END_TEST

/* ------------------------------------------------------------------- cpus */

/* A thread that waits until told to leave, so that its affinity can be read meanwhile. */
static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;
static int park_leave;

static void *
parked(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&park_lock);
    while (!park_leave)
        pthread_cond_wait(&park_cond, &park_lock);
    pthread_mutex_unlock(&park_lock);
    return NULL;
}

/* A thread that leaves the control CPU, as the trainer does, and reports where it may run. */
static void *
leaver(void *arg)
{
    fox_cpus_leave_control();
    pthread_getaffinity_np(pthread_self(), sizeof(cpu_set_t), arg);
    return NULL;
}

/*
 * In a child process (the affinity is the process's own to change): with
 * `one_cpu`, first confine it to one CPU. Returns 0, or the number of the
 * first check that failed.
 */
static int
cpus_child(int one_cpu)
{
    cpu_set_t allowed, mine, got, control, training;
    pthread_t before, after;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return 1;
    int lowest = 0;
    while (!CPU_ISSET(lowest, &allowed))
        lowest++;
    if (one_cpu) {
        CPU_ZERO(&allowed);
        CPU_SET(lowest, &allowed);
        if (sched_setaffinity(0, sizeof allowed, &allowed) != 0)
            return 2;
    }
    int n = CPU_COUNT(&allowed);
    CPU_ZERO(&control);
    CPU_SET(lowest, &control);
    training = allowed;
    if (n > 1)
        CPU_CLR(lowest, &training);

    if (pthread_create(&before, NULL, parked, NULL) != 0)
        return 3;
    int r = fox_cpus_reserve_control();
    if (r != (n > 1 ? n - 1 : n))
        return 4;
    sched_getaffinity(0, sizeof mine, &mine);
    /* The caller keeps the lowest CPU (all it had, with one). */
    if (!CPU_EQUAL(&mine, n > 1 ? &control : &allowed))
        return 5;
    /* A thread that existed before goes to the training CPUs. */
    pthread_getaffinity_np(before, sizeof got, &got);
    if (!CPU_EQUAL(&got, &training))
        return 6;
    /* A training thread started afterwards leaves the control CPU. */
    if (pthread_create(&after, NULL, leaver, &got) != 0 || pthread_join(after, NULL) != 0)
        return 7;
    if (!CPU_EQUAL(&got, &training))
        return 8;
    pthread_mutex_lock(&park_lock);
    park_leave = 1;
    pthread_cond_broadcast(&park_cond);
    pthread_mutex_unlock(&park_lock);
    pthread_join(before, NULL);
    return 0;
}

static void
check_cpus(int one_cpu)
{
    int status;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(cpus_child(one_cpu));
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "control CPU check %d failed (one_cpu=%d)", WEXITSTATUS(status), one_cpu);
}

START_TEST(test_cpus_split)
{
    /* On a one-CPU machine this is the one-CPU case again: nothing to split. */
    check_cpus(0);
}
END_TEST

START_TEST(test_cpus_one)
{
    check_cpus(1);
}
END_TEST

static Suite *
daemon_suite(void)
{
    Suite *s = suite_create("daemon");
    TCase *tc = tcase_create("conf");
    tcase_add_test(tc, test_conf_file);
    tcase_add_test(tc, test_conf_set);
    tcase_add_test(tc, test_dconf_finish);
    tcase_add_test(tc, test_ckpt_paths);
    tcase_add_test(tc, test_pipes);
    tcase_add_test(tc, test_pipes_peer);
    tcase_add_test(tc, test_cpus_split);
    tcase_add_test(tc, test_cpus_one);
    tcase_add_test(tc, test_members_render);
    tcase_add_test(tc, test_render_halts_follow_the_rule);
    suite_add_tcase(s, tc);
    tc = tcase_create("training");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_walk);
    tcase_add_test(tc, test_trainer);
    tcase_add_test(tc, test_trainer_keeps_training);
    tcase_add_test(tc, test_trainer_start_fails);
    tcase_add_test(tc, test_serve_setup_fails);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return fox_test_run_suite(daemon_suite());
}
