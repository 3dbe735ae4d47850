/*
 * config_test.c — the configuration key table on its own: every key
 * round-trips through its text, every refusal names the key and why and
 * leaves the config as it was, every cross-key check of
 * fox_config_validate names the keys it compares, and a member key's list
 * gives each member its own value.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "gpu/config.h"
#include "tests/testutil.h"

START_TEST(config_keys_round_trip)
{
    fox_config c, d;
    char buf[256], err[256];
    fox_config_default(&c);
    for (int i = 0; i < fox_config_key_count(); i++) {
        const char *k = fox_config_key_name(i);
        ck_assert_int_eq(fox_config_get(&c, k, buf, sizeof buf), FOX_OK);
        d = c;
        ck_assert_msg(fox_config_set(&d, k, buf, err, sizeof err) == FOX_OK, "%s=%s: %s", k, buf,
                      err);
        ck_assert_msg(memcmp(&c, &d, sizeof c) == 0, "%s does not round-trip", k);
        ck_assert_ptr_nonnull(fox_config_key_help(i));
    }
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_OK);
    /* Floats print as the shortest text that reads back the same, not as 9 digits of noise. */
    ck_assert_int_eq(fox_config_set(&c, "train.lr", "0.0003", err, sizeof err), FOX_OK);
    ck_assert_int_eq(fox_config_get(&c, "train.lr", buf, sizeof buf), FOX_OK);
    ck_assert_str_eq(buf, "0.0003");
}
END_TEST

START_TEST(config_rejects_bad_values)
{
    fox_config c;
    char err[256];
    fox_config_default(&c);
    ck_assert_int_eq(fox_config_set(&c, "train.nope", "1", err, sizeof err), FOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "train.nope"));
    ck_assert_int_eq(fox_config_set(&c, "train.batch", "12x", err, sizeof err), FOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not an integer"));
    ck_assert_int_eq(fox_config_set(&c, "train.lr", "nan", err, sizeof err), FOX_EINVAL);
    ck_assert_int_eq(fox_config_set(&c, "train.gamma", "1.5", err, sizeof err), FOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    ck_assert_int_eq(fox_config_set(&c, "engine.backend", "tpu", err, sizeof err), FOX_EINVAL);
    ck_assert_int_eq(fox_config_set(&c, "train.folds", "0,,1", err, sizeof err), FOX_EINVAL);
    ck_assert_int_eq(fox_config_set_pair(&c, "train.folds=0,2", err, sizeof err), FOX_OK);
    ck_assert_int_eq(c.folds_mask, 5);
    ck_assert_int_eq(fox_config_set_pair(&c, "novalue", err, sizeof err), FOX_EINVAL);
    ck_assert_int_eq(fox_config_set_pair(&c, "model.v_min=20", err, sizeof err), FOX_OK);
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_EINVAL);
}
END_TEST

/* The text of err starts with "key: ", so a user knows which key to fix. */
static void
assert_names_key(const char *err, const char *key, const char *why)
{
    size_t n = strlen(key);
    ck_assert_msg(strncmp(err, key, n) == 0 && strncmp(err + n, ": ", 2) == 0,
                  "%s: message '%s' does not start with the key", key, err);
    ck_assert_msg(strstr(err, why), "%s: message '%s' does not say '%s'", key, err, why);
}

/* A value of the wrong kind for each key type, and the reason the message must give. */
START_TEST(config_every_key_refuses_bad_text)
{
    static char too_long[4 * FOX_PATH_MAX];
    memset(too_long, 'x', sizeof too_long - 1);
    fox_config c, before;
    char err[256];
    fox_config_default(&c);
    for (int i = 0; i < fox_config_key_count(); i++) {
        const char *k = fox_config_key_name(i), *bad = NULL, *why = NULL;
        switch (fox_config_key_type(i)) {
        case FOX_CFG_INT:
            bad = "12x";
            why = strcmp(k, "train.folds") == 0 ? "not a list of fold indices" : "not an integer";
            break;
        case FOX_CFG_U64:
            bad = "-1";
            why = "not an unsigned integer";
            break;
        case FOX_CFG_FLOAT:
        case FOX_CFG_DOUBLE:
            bad = "inf";
            why = "not a finite number";
            break;
        case FOX_CFG_STR:
            bad = too_long;
            why = "too long";
            break;
        case FOX_CFG_ENUM:
            bad = "no_such_choice";
            why = "not one of the allowed choices";
            break;
        }
        ck_assert_ptr_nonnull(bad);
        before = c;
        err[0] = '\0';
        ck_assert_int_eq(fox_config_set(&c, k, bad, err, sizeof err), FOX_EINVAL);
        assert_names_key(err, k, why);
        ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "%s: a refused value changed the config",
                      k);
    }
}
END_TEST

/* Numbers above a key's range are refused with the range; the table gives every key one. */
START_TEST(config_numbers_out_of_range_name_the_key)
{
    fox_config c, before;
    char err[256];
    static const struct {
        const char *key, *value;
    } over[] = {
        {"model.h1", "8193"},        {"model.n_regimes", "5"}, {"model.order_types", "3"},
        {"train.gamma", "1.5"},      {"train.lr", "-0.1"},     {"env.episode_len", "7"},
        {"model.state_dim", "1025"}, {"train.folds", "0,9"},
    };
    fox_config_default(&c);
    for (size_t k = 0; k < sizeof over / sizeof over[0]; k++) {
        before = c;
        ck_assert_int_eq(fox_config_set(&c, over[k].key, over[k].value, err, sizeof err),
                         FOX_EINVAL);
        assert_names_key(err, over[k].key, "out of range");
        ck_assert(memcmp(&c, &before, sizeof c) == 0);
    }
}
END_TEST

/*
 * engine.cuda_math: every mode parses to its value and prints back, the default is the
 * documented greedy_tf32, and a wrong mode is refused with the key and every allowed mode.
 */
START_TEST(config_cuda_math_modes)
{
    static const struct {
        const char *text;
        int value;
    } modes[] = {{"fp32", FOX_CUDA_MATH_FP32},
                 {"greedy_tf32", FOX_CUDA_MATH_GREEDY_TF32},
                 {"tf32", FOX_CUDA_MATH_TF32},
                 {"bf16", FOX_CUDA_MATH_BF16}};
    fox_config c, before;
    char buf[64], err[256];
    fox_config_default(&c);
    ck_assert_int_eq(c.cuda_math, FOX_CUDA_MATH_GREEDY_TF32);
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        ck_assert_int_eq(fox_config_set(&c, "engine.cuda_math", modes[k].text, err, sizeof err),
                         FOX_OK);
        ck_assert_int_eq(c.cuda_math, modes[k].value);
        ck_assert_int_eq(fox_config_get(&c, "engine.cuda_math", buf, sizeof buf), FOX_OK);
        ck_assert_str_eq(buf, modes[k].text);
        ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_OK);
    }
    before = c;
    ck_assert_int_eq(fox_config_set(&c, "engine.cuda_math", "fp16", err, sizeof err), FOX_EINVAL);
    assert_names_key(err, "engine.cuda_math", "'fp16' is not one of the allowed choices");
    ck_assert_msg(strstr(err, "(fp32, greedy_tf32, tf32, bf16)"), "%s", err);
    ck_assert(memcmp(&c, &before, sizeof c) == 0);
}
END_TEST

START_TEST(config_validate_names_the_keys)
{
    static const struct {
        const char *pairs[3];
        const char *keys[2];
    } bad[] = {
        {{"model.v_min=5", "model.v_max=5", NULL}, {"model.v_min", "model.v_max"}},
        {{"train.eps_start=0.1", "train.eps_end=0.2", NULL}, {"train.eps_end", "train.eps_start"}},
        {{"data.folds=2", "train.folds=2", NULL}, {"train.folds", "data.folds"}},
        {{"debug.inject_fault.kind=nan", NULL},
         {"debug.inject_fault.kind", "debug.inject_fault.buffer"}},
    };
    char err[256];
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        fox_config c;
        fox_config_default(&c);
        fox_test_set_pairs(&c, bad[k].pairs);
        err[0] = '\0';
        ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_EINVAL);
        for (int j = 0; j < 2; j++)
            ck_assert_msg(strstr(err, bad[k].keys[j]), "'%s' does not name %s", err,
                          bad[k].keys[j]);
    }
    /* The state width is range-checked on set, so only a struct written directly reaches this. */
    fox_config c;
    fox_config_default(&c);
    c.state_dim = 6;
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "model.state_dim"), "%s", err);
    /* No message buffer is fine: the code alone still comes back. */
    ck_assert_int_eq(fox_config_validate(&c, NULL, 0), FOX_EINVAL);
}
END_TEST

START_TEST(config_lookup_edges)
{
    fox_config c;
    char buf[64], err[256];
    fox_config_default(&c);
    ck_assert_int_eq(fox_config_get(&c, "train.nope", buf, sizeof buf), FOX_ENOENT);
    ck_assert_ptr_null(fox_config_key_name(-1));
    ck_assert_ptr_null(fox_config_key_name(fox_config_key_count()));
    ck_assert_ptr_null(fox_config_key_help(fox_config_key_count()));
    ck_assert_int_eq(fox_config_set(&c, NULL, "1", err, sizeof err), FOX_EINVAL);
    ck_assert_int_eq(fox_config_set(&c, "train.batch", NULL, err, sizeof err), FOX_EINVAL);
    ck_assert_int_eq(fox_config_set_pair(&c, "=1", err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "expected key=value"), "%s", err);
    char long_key[200];
    memset(long_key, 'k', sizeof long_key);
    snprintf(long_key + 150, sizeof long_key - 150, "=1");
    ck_assert_int_eq(fox_config_set_pair(&c, long_key, err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "key too long"), "%s", err);
    /* Keys are unique: the table is the one place a key exists. */
    for (int i = 0; i < fox_config_key_count(); i++)
        for (int j = i + 1; j < fox_config_key_count(); j++)
            ck_assert_msg(strcmp(fox_config_key_name(i), fox_config_key_name(j)) != 0,
                          "key %s twice", fox_config_key_name(i));
    int sizes[FOX_MAX_BRANCHES];
    ck_assert_int_eq(fox_config_branches(&c, sizes), FOX_MAX_BRANCHES);
    ck_assert_int_eq(sizes[0], 3);
    ck_assert_int_eq(sizes[1], c.size_levels);
}
END_TEST

/* A member key's comma list: one value a member, checked, printed back, resolved per member. */
START_TEST(config_member_lists)
{
    fox_config c, before, m;
    char buf[FOX_MEMBER_LIST_MAX], err[256];
    fox_config_default(&c);
    const char *pairs[] = {"engine.members=3", "train.lr=0.001,0.00030,3e-4",
                           "policy.band=0,2,8", "train.seed=5,9,11", "train.eps_decay_steps=100",
                           NULL};
    fox_test_set_pairs(&c, pairs);
    ck_assert_int_eq(fox_config_get(&c, "train.lr", buf, sizeof buf), FOX_OK);
    ck_assert_str_eq(buf, "0.001,0.0003,0.0003"); /* each value as the key prints one */
    ck_assert_float_eq(c.lr, 0.001f);                /* the field: member 0's */
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_OK);
    static const float band[3] = {0, 2, 8};
    static const uint64_t seed[3] = {5, 9, 11};
    for (int k = 0; k < 3; k++) {
        fox_config_member(&c, k, &m);
        ck_assert_float_eq(m.lr, k ? 0.0003f : 0.001f);
        ck_assert_float_eq(m.band, band[k]);
        ck_assert_uint_eq(m.seed, seed[k]);
        ck_assert_int_eq(m.eps_decay_steps, 100);
        ck_assert_int_eq(fox_config_get(&m, "policy.band", buf, sizeof buf), FOX_OK);
        ck_assert_msg(!strchr(buf, ','), "member %d still holds a list: %s", k, buf);
    }
    /* Without a seed list, member k takes train.seed + k. */
    ck_assert_int_eq(fox_config_set(&c, "train.seed", "40", err, sizeof err), FOX_OK);
    fox_config_member(&c, 2, &m);
    ck_assert_uint_eq(m.seed, 42);
    ck_assert_float_eq(m.band, 8.0f);

    /* A list of another length than engine.members: the key, its count and engine.members. */
    ck_assert_int_eq(fox_config_set(&c, "train.gamma", "0.9,0.99", err, sizeof err), FOX_OK);
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "train.gamma: 2 values for engine.members = 3"), "%s", err);
    ck_assert_int_eq(fox_config_set(&c, "train.gamma", "0.95", err, sizeof err), FOX_OK);
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_OK);

    /* Each member's values meet the cross-key checks. */
    ck_assert_int_eq(fox_config_set(&c, "train.eps_start", "0.5", err, sizeof err), FOX_OK);
    ck_assert_int_eq(fox_config_set(&c, "train.eps_end", "0.1,0.1,0.9", err, sizeof err), FOX_OK);
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_EINVAL);
    ck_assert_msg(strstr(err, "train.eps_start (member 2)"), "%s", err);
    ck_assert_int_eq(fox_config_set(&c, "train.eps_end", "0.1", err, sizeof err), FOX_OK);
    /* The ensemble walks one band. */
    ck_assert_int_eq(fox_config_set(&c, "policy.members", "ensemble", err, sizeof err), FOX_OK);
    ck_assert_int_eq(fox_config_validate(&c, err, sizeof err), FOX_EINVAL);
    assert_names_key(err, "policy.band", "policy.members=ensemble");

    /* A bad value anywhere in a list is refused as the key's one would be, changing nothing. */
    static const struct {
        const char *key, *value, *why;
    } bad[] = {{"train.lr", "0.1,2", "out of range"},
               {"train.gamma", "0.9,,0.8", "empty value"},
               {"train.eps_decay_steps", "10,1.5", "not an integer"},
               {"train.seed", "1,-2", "not an unsigned integer"},
               {"env.train_cost_mult", "1,x", "not a finite number"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        before = c;
        ck_assert_int_eq(fox_config_set(&c, bad[k].key, bad[k].value, err, sizeof err),
                         FOX_EINVAL);
        assert_names_key(err, bad[k].key, bad[k].why);
        ck_assert(memcmp(&c, &before, sizeof c) == 0);
    }
    char many[4 * FOX_MEMBER_LIST_MAX] = "0.5";
    for (int k = 1; k <= FOX_MEMBERS_MAX; k++)
        strcat(many, ",0.5");
    ck_assert_int_eq(fox_config_set(&c, "train.gamma", many, err, sizeof err), FOX_EINVAL);
    assert_names_key(err, "train.gamma", "more than 64 values");
    /* Other keys take no list. */
    ck_assert_int_eq(fox_config_set(&c, "train.batch", "64,128", err, sizeof err), FOX_EINVAL);
}
END_TEST

static Suite *
config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("keys");
    tcase_add_test(tc, config_keys_round_trip);
    tcase_add_test(tc, config_rejects_bad_values);
    tcase_add_test(tc, config_every_key_refuses_bad_text);
    tcase_add_test(tc, config_numbers_out_of_range_name_the_key);
    tcase_add_test(tc, config_cuda_math_modes);
    tcase_add_test(tc, config_validate_names_the_keys);
    tcase_add_test(tc, config_lookup_edges);
    tcase_add_test(tc, config_member_lists);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return fox_test_run_suite(config_suite());
}
