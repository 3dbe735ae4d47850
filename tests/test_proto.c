/*
 * test_proto.c — the wire protocol (proto/): every command with good and bad
 * arguments, the envelope's strictness, replies, events, codes and the fold
 * table. No sockets, no engine.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/utf8.h"
#include "proto/proto.h"
#include "proto/table.h"
#include "tests/testutil.h"

#define ck_assert_fox_code(expr, code)                                                             \
    do {                                                                                           \
        int rv_ = (expr);                                                                          \
        ck_assert_msg(rv_ == (code), "%s: got %s, want %s", #expr, fox_err_name(rv_),              \
                      fox_err_name(code));                                                         \
    } while (0)

static char err[512];

/* Parse text, check the status, keep the request for inspection. */
static int
parse(fox_request *req, const char *text)
{
    return fox_proto_parse_request(req, text, strlen(text), err, sizeof err);
}

/* Parse and release; for the many cases that only check the status. */
static int
status_of(const char *text)
{
    fox_request req;
    int rv = parse(&req, text);
    fox_request_fini(&req);
    return rv;
}

/* ------------------------------------------------------------ the envelope */

START_TEST(test_envelope_good)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":7,\"cmd\":\"status\"}"), FOX_OK);
    ck_assert_int_eq(req.cmd, FOX_CMD_STATUS);
    ck_assert_int_eq(req.has_id, 1);
    ck_assert_int_eq(req.id, 7);
    ck_assert_ptr_null(req.token);
    ck_assert_int_eq(fox_request_is_mutating(&req), 0);
    fox_request_fini(&req);

    ck_assert_fox_code(parse(&req,
                             " {\"cmd\":\"pause\",\"token\":\"s3cret\",\"id\":9007199254740991,"
                             "\"v\":1,\"args\":{}}\n"),
                       FOX_OK);
    ck_assert_int_eq(req.id, FOX_PROTO_MAX_ID);
    ck_assert_str_eq(req.token, "s3cret");
    ck_assert_int_eq(fox_request_is_mutating(&req), 1);
    fox_request_fini(&req);

    /* One trailing NUL is what some clients send. */
    const char with_nul[] = "{\"v\":1,\"id\":1,\"cmd\":\"version\"}";
    ck_assert_fox_code(fox_proto_parse_request(&req, with_nul, sizeof with_nul, err, sizeof err),
                       FOX_OK);
    fox_request_fini(&req);
}
END_TEST

START_TEST(test_envelope_bad)
{
    fox_request req;
    static const char *const eproto[] = {
        "",
        "garbage",
        "{\"v\":1,\"id\":1,\"cmd\":\"status\"", /* truncated */
        "[1,2,3]",                              /* not an object */
        "\"status\"",
        "{\"id\":1,\"cmd\":\"status\"}",         /* no v */
        "{\"v\":2,\"id\":1,\"cmd\":\"status\"}", /* wrong v */
        "{\"v\":\"1\",\"id\":1,\"cmd\":\"status\"}",
        "{\"v\":1.5,\"id\":1,\"cmd\":\"status\"}",
        "{\"v\":1,\"cmd\":\"status\"}", /* no id */
        "{\"v\":1,\"id\":-1,\"cmd\":\"status\"}",
        "{\"v\":1,\"id\":1.5,\"cmd\":\"status\"}",
        "{\"v\":1,\"id\":\"7\",\"cmd\":\"status\"}",
        "{\"v\":1,\"id\":9007199254740992,\"cmd\":\"status\"}",
        "{\"v\":1,\"id\":1e300,\"cmd\":\"status\"}",
        "{\"v\":1,\"id\":1}", /* no cmd */
        "{\"v\":1,\"id\":1,\"cmd\":7}",
        "{\"v\":1,\"id\":1,\"cmd\":\"status\",\"extra\":1}",      /* unknown field */
        "{\"v\":1,\"id\":1,\"cmd\":\"status\",\"cmd\":\"stop\"}", /* duplicate */
        "{\"v\":1,\"id\":1,\"cmd\":\"status\",\"token\":5}",
        "{\"v\":1,\"id\":1,\"cmd\":\"status\"} {}", /* trailing bytes */
        "{\"v\":1,\"id\":1,\"cmd\":\"status\"}x",
    };
    for (size_t i = 0; i < sizeof eproto / sizeof eproto[0]; i++) {
        int rv = status_of(eproto[i]);
        ck_assert_msg(rv == FOX_EPROTO, "'%s': got %s (%s)", eproto[i], fox_err_name(rv), err);
        ck_assert_msg(err[0] != 0, "'%s': no reason given", eproto[i]);
    }

    /* The id survives most errors so that the reply can carry it. */
    ck_assert_fox_code(parse(&req, "{\"v\":2,\"id\":42,\"cmd\":\"status\"}"), FOX_EPROTO);
    ck_assert_int_eq(req.has_id, 1);
    ck_assert_int_eq(req.id, 42);
    fox_request_fini(&req);

    /* A NUL inside the message is not a terminator. */
    const char nul[] = "{\"v\":1,\"id\":1,\"cmd\":\"status\"}\0{}";
    ck_assert_fox_code(fox_proto_parse_request(&req, nul, sizeof nul - 1, err, sizeof err),
                       FOX_EPROTO);
    fox_request_fini(&req);

    /* A long token is refused; one of the limit passes. */
    char tok[FOX_PROTO_TOKEN_MAX + 64];
    char msg[sizeof tok + 64];
    memset(tok, 'a', FOX_PROTO_TOKEN_MAX + 1);
    tok[FOX_PROTO_TOKEN_MAX + 1] = 0;
    snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"status\",\"token\":\"%s\"}", tok);
    ck_assert_fox_code(status_of(msg), FOX_EPROTO);
    tok[FOX_PROTO_TOKEN_MAX] = 0;
    snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"status\",\"token\":\"%s\"}", tok);
    ck_assert_fox_code(status_of(msg), FOX_OK);
}
END_TEST

START_TEST(test_size_limit)
{
    fox_request req;
    /* Over the limit: refused before parsing, even when it is valid JSON. */
    size_t n = FOX_PROTO_MAX_MSG + 1;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    memcpy(big, "{\"v\":1,\"id\":3,\"cmd\":\"status\"}", 29);
    big[n] = 0;
    ck_assert_fox_code(fox_proto_parse_request(&req, big, n, err, sizeof err), FOX_EPROTO);
    ck_assert_int_eq(req.has_id, 0); /* not parsed at all */
    ck_assert_ptr_nonnull(strstr(err, "exceeds"));
    fox_request_fini(&req);
    /* At the limit: parsed. */
    ck_assert_fox_code(fox_proto_parse_request(&req, big, n - 1, err, sizeof err), FOX_OK);
    fox_request_fini(&req);
    free(big);

    /* 10 MiB of garbage is refused just as fast. */
    n = 10u << 20;
    big = malloc(n);
    memset(big, '{', n);
    ck_assert_fox_code(fox_proto_parse_request(&req, big, n, err, sizeof err), FOX_EPROTO);
    fox_request_fini(&req);
    free(big);

    /* Deep nesting inside the limit does not crash the parser. */
    n = 60000;
    big = malloc(n + 1);
    memset(big, '[', n);
    big[n] = 0;
    ck_assert_fox_code(fox_proto_parse_request(&req, big, n, err, sizeof err), FOX_EPROTO);
    fox_request_fini(&req);
    free(big);
}
END_TEST

START_TEST(test_unknown_command)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":5,\"cmd\":\"format_disk\"}"), FOX_EUNKNOWN);
    ck_assert_int_eq(req.id, 5);
    ck_assert_ptr_nonnull(strstr(err, "format_disk"));
    fox_request_fini(&req);
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":5,\"cmd\":\"\"}"), FOX_EUNKNOWN);
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":5,\"cmd\":\"STATUS\"}"), FOX_EUNKNOWN);
    /* Control bytes in a name are not echoed back. */
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":5,\"cmd\":\"a\\u0001b\\nc\"}"), FOX_EUNKNOWN);
    for (const char *p = err; *p; p++)
        ck_assert_msg(*p >= 0x20 && *p < 0x7f, "unprintable byte echoed");
}
END_TEST

/* ------------------------------------------------------- every command */

/* Commands that take no arguments: {} and absent args pass, anything else fails. */
START_TEST(test_no_arg_commands)
{
    static const char *const names[] = {"version",    "status",   "pause",         "resume", "stop",
                                        "reset_fold", "isv_list", "sentinel_list", "metrics"};
    char msg[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fox_request req;
        snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"%s\"}", names[i]);
        ck_assert_fox_code(parse(&req, msg), FOX_OK);
        ck_assert_str_eq(fox_cmd_name(req.cmd), names[i]);
        fox_request_fini(&req);
        snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"%s\",\"args\":{}}", names[i]);
        ck_assert_fox_code(status_of(msg), FOX_OK);
        snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"%s\",\"args\":{\"x\":1}}", names[i]);
        ck_assert_fox_code(status_of(msg), FOX_EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "args.x"));
        snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"%s\",\"args\":[]}", names[i]);
        ck_assert_fox_code(status_of(msg), FOX_EINVAL);
        snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"%s\",\"args\":null}", names[i]);
        ck_assert_fox_code(status_of(msg), FOX_EINVAL);
    }
}
END_TEST

START_TEST(test_run)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"run\"}"), FOX_OK);
    ck_assert_int_eq(req.folds_mask, 0); /* the config's */
    ck_assert_int_eq(req.epochs, 0);
    ck_assert_int_eq(fox_cmd_kind_of(req.cmd), FOX_KIND_LONG);
    fox_request_fini(&req);
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"run\",\"args\":{\"folds\":[0,2],"
                                   "\"epochs\":3,\"steps_per_epoch\":200}}"),
                       FOX_OK);
    ck_assert_int_eq(req.folds_mask, 5);
    ck_assert_int_eq(req.epochs, 3);
    ck_assert_int_eq(req.steps_per_epoch, 200);
    fox_request_fini(&req);

    static const char *const bad[] = {
        "{\"folds\":[]}",
        "{\"folds\":[0,0]}",
        "{\"folds\":[31]}",
        "{\"folds\":[-1]}",
        "{\"folds\":\"0,1\"}",
        "{\"folds\":[0.5]}",
        "{\"epochs\":0}",
        "{\"epochs\":\"3\"}",
        "{\"epochs\":1e9}",
        "{\"steps_per_epoch\":0}",
        "{\"steps_per_epoch\":true}",
        "{\"fold\":1}",
        "{\"epochs\":1,\"epochs\":2}",
    };
    char msg[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"run\",\"args\":%s}", bad[i]);
        int rv = status_of(msg);
        ck_assert_msg(rv == FOX_EINVAL, "%s: got %s", bad[i], fox_err_name(rv));
    }
}
END_TEST

START_TEST(test_start_fold)
{
    fox_request req;
    ck_assert_fox_code(
        parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"start_fold\",\"args\":{\"fold\":2}}"), FOX_OK);
    ck_assert_int_eq(req.fold, 2);
    fox_request_fini(&req);
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"start_fold\"}"), FOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "missing args.fold"));
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"start_fold\",\"args\":{\"fold\":\"2\"}}"),
        FOX_EINVAL);
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"start_fold\",\"args\":{\"fold\":2,"
                                 "\"folds\":[1]}}"),
                       FOX_EINVAL);
}
END_TEST

START_TEST(test_isv_read)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"isv_read\"}"), FOX_OK);
    ck_assert_int_eq(req.n_slots, 0);
    fox_request_fini(&req);
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"slots\":"
                                   "[16,\"Q_ABS_REF\",170]}}"),
                       FOX_OK);
    ck_assert_int_eq(req.n_slots, 3);
    ck_assert_int_eq(req.slots[0].index, 16);
    ck_assert_ptr_null(req.slots[0].name);
    ck_assert_int_eq(req.slots[1].index, -1);
    ck_assert_str_eq(req.slots[1].name, "Q_ABS_REF");
    fox_request_fini(&req);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"slots\":[-1]}}"), FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"slots\":[1.5]}}"),
        FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"slots\":[\"\"]}}"),
        FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"slots\":[[1]]}}"),
        FOX_EINVAL);
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"slots\":16}}"),
                       FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"indices\":[1]}}"),
        FOX_EINVAL);
    /* More entries than the limit. */
    char *msg = malloc(20000);
    size_t n = (size_t)sprintf(msg, "{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"slots\":[");
    for (int i = 0; i <= FOX_PROTO_MAX_SLOTS; i++)
        n += (size_t)sprintf(msg + n, "%s1", i ? "," : "");
    strcpy(msg + n, "]}}");
    ck_assert_fox_code(status_of(msg), FOX_EINVAL);
    free(msg);
}
END_TEST

START_TEST(test_nan_flags)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"nan_flags\"}"), FOX_OK);
    ck_assert_int_eq(fox_request_is_mutating(&req), 0);
    fox_request_fini(&req);
    ck_assert_fox_code(
        parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"nan_flags\",\"args\":{\"clear\":true}}"), FOX_OK);
    ck_assert_int_eq(req.clear, 1);
    ck_assert_int_eq(fox_request_is_mutating(&req), 1);
    fox_request_fini(&req);
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"nan_flags\",\"args\":{\"clear\":1}}"),
                       FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"nan_flags\",\"args\":{\"clear\":\"yes\"}}"),
        FOX_EINVAL);
}
END_TEST

START_TEST(test_checkpoint)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_save\"}"), FOX_OK);
    ck_assert_ptr_null(req.path);
    fox_request_fini(&req);
    ck_assert_fox_code(parse(&req,
                             "{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_load\",\"args\":{\"path\":"
                             "\"a.ckpt\"}}"),
                       FOX_OK);
    ck_assert_str_eq(req.path, "a.ckpt");
    fox_request_fini(&req);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_save\",\"args\":{\"path\":\"\"}}"),
        FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_load\",\"args\":{\"path\":7}}"),
        FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_load\",\"args\":{\"file\":\"x\"}}"),
        FOX_EINVAL);
    char *msg = malloc(4096);
    char *path = malloc(FOX_PROTO_PATH_MAX + 2);
    memset(path, 'p', FOX_PROTO_PATH_MAX + 1);
    path[FOX_PROTO_PATH_MAX + 1] = 0;
    snprintf(msg, 4096, "{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_save\",\"args\":{\"path\":\"%s\"}}",
             path);
    ck_assert_fox_code(status_of(msg), FOX_EINVAL);
    free(path);
    free(msg);
}
END_TEST

START_TEST(test_config)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"config_get\",\"args\":{\"keys\":"
                                   "[\"train.epochs\",\"model.h1\"]}}"),
                       FOX_OK);
    ck_assert_int_eq(req.n_keys, 2);
    ck_assert_str_eq(req.keys[1], "model.h1");
    fox_request_fini(&req);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"config_get\",\"args\":{\"keys\":[1]}}"), FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"config_get\",\"args\":{\"keys\":\"x\"}}"),
        FOX_EINVAL);

    ck_assert_fox_code(parse(&req,
                             "{\"v\":1,\"id\":1,\"cmd\":\"config_set\",\"args\":{\"values\":"
                             "{\"train.epochs\":3,\"data.source\":\"synthetic\",\"x\":true}}}"),
                       FOX_OK);
    ck_assert_int_eq(cJSON_GetArraySize(req.values), 3);
    ck_assert_int_eq(req.force, 0);
    fox_request_fini(&req);
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"config_set\",\"args\":{\"values\":"
                                   "{\"env.fee\":0.0002},\"force\":true}}"),
                       FOX_OK);
    ck_assert_int_eq(req.force, 1);
    fox_request_fini(&req);
    static const char *const bad[] = {
        "{\"values\":{\"a\":1},\"force\":\"yes\"}",
        "{}",              /* values required */
        "{\"values\":{}}", /* empty */
        "{\"values\":[]}",
        "{\"values\":{\"a\":null}}",
        "{\"values\":{\"a\":[1]}}",
        "{\"values\":{\"a\":{\"b\":1}}}",
        "{\"values\":{\"a\":1,\"a\":2}}",
        "{\"values\":{\"\":1}}",
        "{\"values\":{\"a\":1},\"other\":1}",
    };
    char msg[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"config_set\",\"args\":%s}", bad[i]);
        int rv = status_of(msg);
        ck_assert_msg(rv == FOX_EINVAL, "%s: got %s", bad[i], fox_err_name(rv));
    }
}
END_TEST

START_TEST(test_inject_and_shutdown)
{
    fox_request req;
    ck_assert_fox_code(parse(&req,
                             "{\"v\":1,\"id\":1,\"cmd\":\"inject_fault\",\"args\":{\"buffer\":"
                             "\"h_s2\",\"kind\":\"nan\",\"step\":20}}"),
                       FOX_OK);
    ck_assert_str_eq(req.fault_buffer, "h_s2");
    ck_assert_str_eq(req.fault_kind, "nan");
    ck_assert_int_eq(req.fault_step, 20);
    fox_request_fini(&req);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"inject_fault\",\"args\":{\"buffer\":\"h_s2\"}}"),
        FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"inject_fault\",\"args\":{\"buffer\":\"h_s2\","
                  "\"kind\":\"zero\"}}"),
        FOX_EINVAL);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"inject_fault\",\"args\":{\"buffer\":\"h_s2\","
                  "\"kind\":\"inf\",\"step\":-1}}"),
        FOX_EINVAL);

    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"shutdown\"}"), FOX_OK);
    ck_assert_int_eq(req.checkpoint, 1);
    fox_request_fini(&req);
    ck_assert_fox_code(
        parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"shutdown\",\"args\":{\"checkpoint\":false}}"),
        FOX_OK);
    ck_assert_int_eq(req.checkpoint, 0);
    fox_request_fini(&req);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"shutdown\",\"args\":{\"checkpoint\":0}}"),
        FOX_EINVAL);
}
END_TEST

START_TEST(test_backtest_args)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"backtest\",\"args\":{"
                                   "\"checkpoint\":\"runs/a/fold0-chosen.ckpt\",\"data\":"
                                   "\"/data/new.csv\",\"bars_from\":100,\"bars_to\":900,\"val_from\":40}}"),
                       FOX_OK);
    ck_assert_int_eq(req.cmd, FOX_CMD_BACKTEST);
    ck_assert_int_eq(fox_cmd_kind_of(FOX_CMD_BACKTEST), FOX_KIND_QUICK);
    ck_assert_str_eq(req.path, "runs/a/fold0-chosen.ckpt");
    ck_assert_str_eq(req.data, "/data/new.csv");
    ck_assert_int_eq(req.bars_from, 100);
    ck_assert_int_eq(req.bars_to, 900);
    ck_assert_int_eq(req.val_from, 40);
    fox_request_fini(&req);
    static const char *const bad[] = {
        "{}", "{\"data\":\"x.csv\"}", "{\"checkpoint\":\"\"}", "{\"checkpoint\":3}",
        "{\"checkpoint\":\"a\",\"bars_from\":-1}", "{\"checkpoint\":\"a\",\"bars_to\":1.5}",
        "{\"checkpoint\":\"a\",\"bars\":[1,2]}", "{\"checkpoint\":\"a\",\"val_from\":-3}"};
    char msg[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(msg, sizeof msg, "{\"v\":1,\"id\":1,\"cmd\":\"backtest\",\"args\":%s}", bad[i]);
        int rv = status_of(msg);
        ck_assert_msg(rv == FOX_EINVAL, "%s: got %s", bad[i], fox_err_name(rv));
    }
}
END_TEST

/* --bars of foxd --backtest and foxctl backtest: FROM:TO or VAL:FROM:TO, in order. */
START_TEST(test_parse_bars)
{
    int v = 7, f = 0, t = 0;
    ck_assert_int_eq(fox_proto_parse_bars("100:900", &v, &f, &t), 0);
    ck_assert(v == -1 && f == 100 && t == 900);
    ck_assert_int_eq(fox_proto_parse_bars("40:100:900", &v, &f, &t), 0);
    ck_assert(v == 40 && f == 100 && t == 900);
    ck_assert_int_eq(fox_proto_parse_bars("100:100:900", &v, &f, &t), 0);
    ck_assert(v == 100);
    static const char *const bad[] = {"100",       "900:100",     "100:100",  "-1:100",
                                      "101:100:900", "1:2:3:4",   "1:2x",     "a:b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(fox_proto_parse_bars(bad[i], &v, &f, &t) == -1, "'%s' parsed", bad[i]);
}
END_TEST

START_TEST(test_command_table)
{
    /* Every command has a name that looks itself up, and a kind. */
    for (int c = 0; c < FOX_CMD_COUNT; c++) {
        ck_assert_int_eq(fox_cmd_lookup(fox_cmd_name(c)), c);
        ck_assert_int_le(fox_cmd_kind_of(c), FOX_KIND_LONG);
    }
    ck_assert_int_eq(fox_cmd_lookup("nope"), -1);
    ck_assert_str_eq(fox_cmd_name(-1), "?");
    ck_assert_int_eq(fox_cmd_kind_of(FOX_CMD_RUN), FOX_KIND_LONG);
    ck_assert_int_eq(fox_cmd_kind_of(FOX_CMD_STATUS), FOX_KIND_READ);
    ck_assert_int_eq(fox_cmd_kind_of(FOX_CMD_PAUSE), FOX_KIND_QUICK);
}
END_TEST

/* ---------------------------------------------------------- replies, events */

START_TEST(test_codes)
{
    static const char *const wire[] = {"EPROTO", "EUNKNOWN", "EINVAL", "EPERM",    "ESTATE",
                                       "EBUSY",  "ENOENT",   "EIO",    "EINTERNAL"};
    for (size_t i = 0; i < sizeof wire / sizeof wire[0]; i++) {
        int code = fox_proto_code_lookup(wire[i]);
        ck_assert_int_gt(code, 0);
        ck_assert_str_eq(fox_proto_code_name(code), wire[i]);
    }
    ck_assert_str_eq(fox_proto_code_name(FOX_EFORMAT), "EIO");
    ck_assert_str_eq(fox_proto_code_name(FOX_EMISMATCH), "EIO");
    ck_assert_str_eq(fox_proto_code_name(FOX_EHALT), "ESTATE");
    ck_assert_str_eq(fox_proto_code_name(FOX_ECUDA), "EINTERNAL");
    ck_assert_str_eq(fox_proto_code_name(FOX_ENOMEM), "EINTERNAL");
    ck_assert_int_eq(fox_proto_code_lookup("ECUDA"), -1);
    /* Every status code maps to one of the nine. */
    for (int c = 1; c < FOX_ERR_COUNT; c++)
        ck_assert_int_gt(fox_proto_code_lookup(fox_proto_code_name(c)), 0);
}
END_TEST

START_TEST(test_reply_round_trip)
{
    fox_reply rep;
    /* Ids of 16 digits travel exactly (cJSON alone would round them). */
    int64_t ids[] = {0, 7, 2147483648LL, 5831357152310049LL, FOX_PROTO_MAX_ID};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "state", "idle");
        char *s = fox_proto_reply_ok(1, ids[i], r);
        ck_assert_ptr_nonnull(s);
        ck_assert_fox_code(fox_proto_parse_reply(&rep, s, strlen(s), err, sizeof err), FOX_OK);
        ck_assert_int_eq(rep.has_id, 1);
        ck_assert_int_eq(rep.id, ids[i]);
        ck_assert_int_eq(rep.ok, 1);
        ck_assert_str_eq(cJSON_GetObjectItem(rep.result, "state")->valuestring, "idle");
        fox_reply_fini(&rep);
        free(s);
    }
    char *s = fox_proto_reply_error(1, 9, FOX_EMISMATCH, "fingerprint 1 != 2");
    ck_assert_fox_code(fox_proto_parse_reply(&rep, s, strlen(s), err, sizeof err), FOX_OK);
    ck_assert_int_eq(rep.ok, 0);
    ck_assert_str_eq(rep.code_name, "EIO");
    ck_assert_int_eq(rep.code, FOX_EIO);
    ck_assert_str_eq(rep.message, "fingerprint 1 != 2");
    fox_reply_fini(&rep);
    free(s);

    s = fox_proto_reply_error(0, 0, FOX_EPROTO, NULL);
    ck_assert_ptr_nonnull(strstr(s, "\"id\":null"));
    ck_assert_ptr_nonnull(strstr(s, fox_strerror(FOX_EPROTO)));
    ck_assert_fox_code(fox_proto_parse_reply(&rep, s, strlen(s), err, sizeof err), FOX_OK);
    ck_assert_int_eq(rep.has_id, 0);
    fox_reply_fini(&rep);
    free(s);

    /* Client side: requests parse on the server side as sent. */
    cJSON *args = cJSON_CreateObject();
    cJSON_AddNumberToObject(args, "fold", 1);
    s = fox_proto_request(5831357152310049LL, "start_fold", args, "tok");
    fox_request req;
    ck_assert_fox_code(fox_proto_parse_request(&req, s, strlen(s), err, sizeof err), FOX_OK);
    ck_assert_int_eq(req.id, 5831357152310049LL);
    ck_assert_int_eq(req.fold, 1);
    ck_assert_str_eq(req.token, "tok");
    fox_request_fini(&req);
    free(s);

    ck_assert_fox_code(fox_proto_parse_reply(&rep, "{\"v\":1}", 7, err, sizeof err), FOX_EPROTO);
    fox_reply_fini(&rep);
    ck_assert_fox_code(
        fox_proto_parse_reply(&rep, "{\"v\":1,\"id\":1,\"ok\":true}", 24, err, sizeof err),
        FOX_EPROTO);
    fox_reply_fini(&rep);
}
END_TEST

START_TEST(test_event_round_trip)
{
    fox_event ev;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "fold", 2);
    char *s = fox_proto_event(1234567890123456ULL, 1700000000123LL, "fold_end", d);
    /* The type comes first, so a SUB prefix selects it. */
    ck_assert_int_eq(strncmp(s, "{\"event\":\"fold_end\"", 19), 0);
    ck_assert_fox_code(fox_proto_parse_event(&ev, s, strlen(s), err, sizeof err), FOX_OK);
    ck_assert_str_eq(ev.type, "fold_end");
    ck_assert_uint_eq(ev.seq, 1234567890123456ULL);
    ck_assert_int_eq(ev.time_ms, 1700000000123LL);
    ck_assert_int_eq(cJSON_GetObjectItem(ev.data, "fold")->valueint, 2);
    fox_event_fini(&ev);
    free(s);
    ck_assert_fox_code(fox_proto_parse_event(&ev, "{\"event\":\"x\"}", 13, err, sizeof err),
                       FOX_EPROTO);
    fox_event_fini(&ev);
}
END_TEST

/* A fold object as render.c writes it, with the policy's and the baselines' figures given. */
static const char fold_json[] =
    "{\"fold\":%d,\"epochs\":5,\"best_epoch\":3,\"best_val_sharpe\":1.5,\"test_sharpe\":%g,"
    "\"test_sharpe_gross\":1.1,\"test_max_drawdown\":0.125,\"test_turnover\":0.0123,"
    "\"final_loss\":0.01,\"steps_per_sec\":400,\"bars_per_year\":8760,\"flagged\":[],"
    "\"test_sharpe_se\":%g,\"test_bars\":2000,\"select\":\"smoothed\",\"select_window\":3,"
    "\"select_score\":1.25,\"test_sharpe_last\":0.25,\"test_sharpe_mean\":0.5,\"trend_k\":64,"
    "\"trend_k_tried\":3,\"baselines\":{"
    "\"buy_hold\":{\"sharpe\":%g,\"sharpe_gross\":0.4,\"max_drawdown\":0.3,\"turnover\":0.0005,"
    "\"sharpe_se\":%g,\"policy_diff\":0.5,\"policy_diff_se\":0.3},"
    "\"flat\":{\"sharpe\":0,\"sharpe_gross\":0,\"max_drawdown\":0,\"turnover\":0,\"sharpe_se\":0,"
    "\"policy_diff\":%g,\"policy_diff_se\":0.9},"
    "\"random\":{\"sharpe\":-3,\"sharpe_gross\":-2,\"max_drawdown\":0.6,\"turnover\":0.37,"
    "\"sharpe_se\":1},"
    "\"trend\":{\"sharpe\":2,\"sharpe_gross\":2.1,\"max_drawdown\":0.5,\"turnover\":0.07,"
    "\"sharpe_se\":1,\"policy_diff\":-1,\"policy_diff_se\":0.4},"
    "\"oracle\":%s},\"oracle_fraction\":%s%s}";

static char *
print_table(const char *json)
{
    cJSON *folds = cJSON_Parse(json);
    ck_assert_ptr_nonnull(folds);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fox_table_folds(f, folds);
    fclose(f);
    cJSON_Delete(folds);
    return buf;
}

START_TEST(test_fold_table)
{
    char json[8192], one[3000];
    size_t k = (size_t)snprintf(json, sizeof json, "[");
    snprintf(one, sizeof one, fold_json, 0, 1.0, 0.6, 0.5, 0.8, 1.0,
             "{\"sharpe\":8,\"sharpe_gross\":9,\"max_drawdown\":0.2,\"turnover\":0.6,"
             "\"sharpe_se\":1.2}",
             "0.125", "");
    k += (size_t)snprintf(json + k, sizeof json - k, "%s,", one);
    snprintf(one, sizeof one, fold_json, 1, 0.5, 0.8, -0.5, 0.6, 0.5, "null", "null", "");
    k += (size_t)snprintf(json + k, sizeof json - k, "%s,", one);
    /* A halted fold: every row leaves it out of the means alike, and the table says so. */
    snprintf(one, sizeof one, fold_json, 2, -9.0, 0.6, 5.0, 0.8, -9.0, "null", "null",
             ",\"halted\":{\"kind\":\"halt_nan\",\"step\":130,\"slots\":[]}");
    k += (size_t)snprintf(json + k, sizeof json - k, "%s]", one);
    char *buf = print_table(json);
    /* A block per fold: the choice, then a row per policy with its five figures. */
    ck_assert_msg(strstr(buf, "fold 0: epoch 4 of 5 chosen by smoothed (mean val Sharpe 1.250 of "
                              "epochs 2-4); test split 2000 bars, P = 8760\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, "net Sharpe    ± SE    gross  turnover   max DD   policy - row ± SE "
                              "(paired)\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, "  policy              1.000  ±  0.600    1.100    0.0123    12.5%\n"),
                  "%s", buf);
    /* Each baseline's row ends with the paired difference and what it says. */
    ck_assert_msg(strstr(buf, "  trend k=64          2.000  ±  1.000    2.100    0.0700    50.0"
                              "%    -1.000 ± 0.400 lost\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, "  buy & hold          0.500  ±  0.800    0.400    0.0005    30.0"
                              "%    +0.500 ± 0.300 beat\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, "  flat                0.000  ±  0.000    0.000    0.0000     0.0"
                              "%    +1.000 ± 0.900 beat\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, "  oracle              8.000  ±  1.200    9.000    0.6000    20.0%\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, "  policy/oracle 0.12; policy test Sharpe at the chosen epoch 1.000, "
                              "last 0.250, mean over epochs 0.500\n"),
                  "%s", buf);
    /* Fold 1 has no oracle (real data): no oracle row, the fraction n/a. */
    const char *f1 = strstr(buf, "fold 1: ");
    ck_assert_ptr_nonnull(f1);
    const char *mean = strstr(buf, "mean of 2 folds\n");
    ck_assert_msg(mean != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "left out of every row's mean: fold 2 (halted)\n"), "%s", buf);
    ck_assert_msg(!memmem(f1, (size_t)(mean - f1), "  oracle ", 9), "%s", f1);
    ck_assert_ptr_nonnull(strstr(f1, "  policy/oracle n/a;"));
    /* The mean block: means of the figures, the SE of a mean √(Σ SE²)/n, the oracle of one fold. */
    ck_assert_msg(strstr(mean, "  policy              0.750  ±  0.500    1.100    0.0123    12.5%\n"),
                  "%s", mean);
    ck_assert_msg(strstr(mean, "  buy & hold          0.000  ±  0.500    0.400    0.0005    30.0"
                               "%    +0.500 ± 0.212 beat\n"),
                  "%s", mean);
    ck_assert_msg(strstr(mean, "  oracle              8.000  ±  1.200"), "%s", mean);
    /*
     * The verdicts read the paired differences: the mean over folds, the SE √(Σ SE²)/n. Flat:
     * +0.75 ± 0.636 beats; buy-and-hold +0.5 ± 0.212 beats; the trend rule −1 ± 0.283 lost.
     */
    ck_assert_msg(strstr(mean, "verdict: policy vs flat: beat (net Sharpe +0.750 ± 0.636, paired on "
                               "the same bars)\n"),
                  "%s", mean);
    ck_assert_msg(strstr(mean, "verdict: policy vs buy-and-hold: beat (net Sharpe +0.500 ± 0.212, "
                               "paired on the same bars)\n"),
                  "%s", mean);
    ck_assert_msg(strstr(mean, "verdict: policy vs the trend rule: lost (net Sharpe -1.000 ± 0.283, "
                               "paired on the same bars)\n"),
                  "%s", mean);
    /* No fold has a generator's rule: no rule row and no verdict against one. */
    ck_assert_msg(!strstr(buf, "  rule ") && !strstr(buf, "generator's rule"), "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "selection-biased"));
    /* Readable in 100-120 columns. */
    for (const char *line = buf; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        ck_assert_msg(n <= 110, "a line of %zu characters: %.*s", n, (int)n, line);
        line += n + (nl != NULL);
    }
    free(buf);

    /* A fold object from an older foxd, or a partial one: every missing figure prints n/a. */
    buf = print_table("[{\"fold\":1,\"best_val_sharpe\":null}]");
    ck_assert_msg(strstr(buf, "fold 1: epoch n/a of n/a chosen by best (val Sharpe n/a); test "
                              "split n/a bars, P = n/a\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, "  policy                n/a       n/a      n/a       n/a      n/a\n"),
                  "%s", buf);
    ck_assert_msg(!strstr(buf, "nan"), "%s", buf);
    /* Without test bars it has nothing to average: left out, and no verdict drawn from nothing. */
    ck_assert_msg(strstr(buf, "left out of every row's mean: fold 1 (no test bars)\nno fold to "
                              "average\n"),
                  "%s", buf);
    ck_assert_msg(!strstr(buf, "verdict"), "%s", buf);
    free(buf);

    /*
     * A gap smaller than its SE is no win: +0.108 ± 0.734 against flat is indistinguishable,
     * and a known-edge generator's rule gets its row and its verdict.
     */
    buf = print_table("[{\"fold\":0,\"epochs\":5,\"best_epoch\":4,\"test_sharpe\":0.108,"
                      "\"test_bars\":900,\"rule\":\"sign of the last return\",\"baselines\":{"
                      "\"flat\":{\"sharpe\":0,\"policy_diff\":0.108,\"policy_diff_se\":0.734},"
                      "\"rule\":{\"sharpe\":1.2,\"policy_diff\":-1.092,\"policy_diff_se\":0.5}}}]");
    ck_assert_msg(strstr(buf, "verdict: policy vs flat: indistinguishable (net Sharpe +0.108 ± "
                              "0.734, paired on the same bars)\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, "  rule                1.200"), "%s", buf);
    ck_assert_msg(strstr(buf, "  rule: sign of the last return"), "%s", buf);
    ck_assert_msg(strstr(buf, "verdict: policy vs the generator's rule: lost (net Sharpe -1.092 ± "
                              "0.500, paired on the same bars)\n"),
                  "%s", buf);
    free(buf);
    /* Every fold halted: nothing to average, and no verdict drawn from nothing. */
    buf = print_table("[{\"fold\":0,\"epochs\":0,\"test_bars\":900,"
                      "\"halted\":{\"kind\":\"halt_nan\",\"step\":3}}]");
    ck_assert_msg(strstr(buf, "no fold to average\n") && !strstr(buf, "verdict"), "%s", buf);
    free(buf);
    buf = print_table("[]");
    ck_assert_str_eq(buf, "no fold finished\n");
    free(buf);

    /* The choice shows the rule's score, whatever the rule; a fold that closed no epoch says so. */
    buf = print_table("[{\"fold\":2,\"epochs\":3,\"best_epoch\":1,\"best_val_sharpe\":0.9,"
                      "\"select\":\"last\",\"select_window\":1,\"select_score\":0.75},"
                      "{\"fold\":3,\"epochs\":0,\"best_epoch\":-1,\"best_val_sharpe\":null,"
                      "\"select\":\"smoothed\",\"select_window\":3,\"select_score\":null,"
                      "\"halted\":{\"kind\":\"halt_nan\",\"step\":12}}]");
    ck_assert_msg(strstr(buf, "fold 2: epoch 2 of 3 chosen by last (val Sharpe 0.750); "), "%s",
                  buf);
    ck_assert_msg(strstr(buf, "fold 3: no epoch closed; test split "), "%s", buf);
    ck_assert_msg(strstr(buf, "halted: halt_nan at step 12; "), "%s", buf);
    ck_assert_msg(!strstr(buf, "epoch 0 of 0"), "%s", buf);
    free(buf);
}
END_TEST

/*
 * A population's fold objects: the members line under the rows (the spread
 * over seeds, the best and worst member with the values the members hold
 * apart, every halted member with its step and slot, and whether the policy
 * is their ensemble), the mean block's line
 * over the folds' members, and none of it for a fold of one member.
 */
START_TEST(test_members_table)
{
    char json[8192], one[3000];
    static const char members0[] =
        ",\"members\":{\"n\":8,\"lead\":0,\"training\":7,\"measured\":8,\"mean\":0.42,"
        "\"se\":0.11,\"best\":3,\"worst\":5,\"each\":["
        "{\"member\":0,\"test_sharpe\":0.5,\"halt\":null},"
        "{\"member\":1,\"test_sharpe\":0.4,\"halt\":null},"
        "{\"member\":2,\"test_sharpe\":0.3,\"halt\":\"nan\",\"halt_step\":130,"
        "\"halt_slot\":\"h_s2\"},"
        "{\"member\":3,\"test_sharpe\":0.91,\"halt\":null},"
        "{\"member\":4,\"test_sharpe\":0.4,\"halt\":null},"
        "{\"member\":5,\"test_sharpe\":-0.12,\"halt\":null},"
        "{\"member\":6,\"test_sharpe\":0.5,\"halt\":null},"
        "{\"member\":7,\"test_sharpe\":0.47,\"halt\":\"grad_collapse\",\"halt_step\":150,"
        "\"halt_slot\":null}]}";
    static const char members1[] =
        ",\"members\":{\"n\":2,\"lead\":-1,\"training\":2,\"measured\":2,\"mean\":0.18,"
        "\"se\":0.2,\"best\":0,\"worst\":1,\"each\":["
        "{\"member\":0,\"test_sharpe\":0.38,\"halt\":null,"
        "\"train.lr\":0.0003,\"policy.band\":2},"
        "{\"member\":1,\"test_sharpe\":-0.02,\"halt\":null,"
        "\"train.lr\":0.001,\"policy.band\":0}]}";
    size_t k = (size_t)snprintf(json, sizeof json, "[");
    snprintf(one, sizeof one, fold_json, 0, 1.0, 0.6, 0.5, 0.8, 1.0, "null", "null", members0);
    k += (size_t)snprintf(json + k, sizeof json - k, "%s,", one);
    snprintf(one, sizeof one, fold_json, 1, 1.0, 0.6, 0.5, 0.8, 1.0, "null", "null", members1);
    k += (size_t)snprintf(json + k, sizeof json - k, "%s]", one);
    char *buf = print_table(json);
    ck_assert_msg(strstr(buf,
                         "\n  members (8, 7 training): test Sharpe 0.42 ± 0.11 (mean ± SE over "
                         "members), best #3 0.91, worst #5 -0.12; #2 halted at step 130 "
                         "(h_s2), #7 halted at step 150 (grad_collapse)\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf,
                         "\n  members (2, 2 training): test Sharpe 0.18 ± 0.20 (mean ± SE over "
                         "members), best #0 (train.lr=0.0003 policy.band=2) 0.38, worst #1 "
                         "(train.lr=0.001 policy.band=0) -0.02; the policy is their "
                         "ensemble\n"),
                  "%s", buf);
    /* The mean of the members' means, (0.42 + 0.18) / 2, its SE sqrt(0.11² + 0.2²) / 2. */
    ck_assert_msg(strstr(buf, "\n  members: test Sharpe 0.300 ± 0.114 (the folds' mean over "
                              "members, averaged; SE pooled over 2 folds)\n"),
                  "%s", buf);
    free(buf);
    /* One member: the table is what it was before populations. */
    snprintf(one, sizeof one, fold_json, 0, 1.0, 0.6, 0.5, 0.8, 1.0, "null", "null", "");
    snprintf(json, sizeof json, "[%s]", one);
    buf = print_table(json);
    ck_assert_msg(!strstr(buf, "members"), "%s", buf);
    free(buf);
}
END_TEST

/* args.member of the per-member commands: absent reads -1, out of range names the range. */
START_TEST(test_member_arg)
{
    fox_request req;
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"isv_read\"}"), FOX_OK);
    ck_assert_int_eq(req.member, -1);
    fox_request_fini(&req);
    ck_assert_fox_code(
        parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"member\":2}}"), FOX_OK);
    ck_assert_int_eq(req.member, 2);
    fox_request_fini(&req);
    ck_assert_fox_code(
        parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"nan_flags\",\"args\":{\"member\":0}}"), FOX_OK);
    ck_assert_int_eq(req.member, 0);
    ck_assert_int_eq(fox_request_is_mutating(&req), 0);
    fox_request_fini(&req);
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"inject_fault\",\"args\":{"
                                   "\"buffer\":\"h_s2\",\"kind\":\"nan\",\"member\":63}}"),
                       FOX_OK);
    ck_assert_int_eq(req.member, 63);
    fox_request_fini(&req);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"isv_read\",\"args\":{\"member\":64}}"), FOX_EINVAL);
    ck_assert_msg(strstr(err, "args.member must be an integer in [0, 63]"), "%s", err);
    ck_assert_fox_code(
        status_of("{\"v\":1,\"id\":1,\"cmd\":\"nan_flags\",\"args\":{\"member\":-1}}"), FOX_EINVAL);
    /* A clear clears every member's flags: asking it of one member is refused, not half done. */
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"nan_flags\",\"args\":{"
                                 "\"clear\":true,\"member\":1}}"),
                       FOX_EINVAL);
    ck_assert_msg(strstr(err, "clears every member's flags"), "%s", err);
    /* Commands with nothing per member take no member. */
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"status\",\"args\":{\"member\":1}}"),
                       FOX_EINVAL);
}
END_TEST

/* ------------------------------------------------ strings and hostile sizes */

START_TEST(test_strings)
{
    fox_request req;
    /* Invalid UTF-8 anywhere: refused before it can be echoed into a reply. */
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"vers\xffion\"}"), FOX_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "not valid UTF-8"));
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"\xc0\xaf\"}"), FOX_EPROTO);
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"\xed\xa0\x80\"}"), FOX_EPROTO);
    /* An escaped NUL would cut the string: "version\u0000garbage" must not run version. */
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"version\\u0000garbage\"}"),
                       FOX_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "\\u0000"));
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_save\","
                                 "\"args\":{\"path\":\"x\\u0000/../../y\"}}"),
                       FOX_EPROTO);
    /* An escaped backslash followed by "u0000" is plain text, and valid UTF-8 passes. */
    ck_assert_fox_code(parse(&req, "{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_save\","
                                   "\"args\":{\"path\":\"a\\\\u0000\\u00e9\xc3\xa9\"}}"),
                       FOX_OK);
    ck_assert_str_eq(req.path, "a\\u0000\xc3\xa9\xc3\xa9");
    fox_request_fini(&req);

    /* A message cut inside a character still makes a reply that is valid UTF-8. */
    char *r = fox_proto_reply_error(1, 1, FOX_EINVAL, "cut \xc3");
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(fox_utf8_valid(r, strlen(r), NULL), 1);
    free(r);
}
END_TEST

/* {"v":1,"id":1,"cmd":"status" and n keys "k0".."k<n-1>" (without the closing brace) into buf. */
static size_t
many_keys(char *buf, int n)
{
    size_t len = (size_t)snprintf(buf, FOX_PROTO_MAX_MSG, "{\"v\":1,\"id\":1,\"cmd\":\"status\"");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, FOX_PROTO_MAX_MSG - len, ",\"k%d\":0", i);
    return len;
}

START_TEST(test_many_keys)
{
    /* 5,800 distinct keys (about 54 KB): refused by the byte scan, before any node is built. */
    enum { N = 5800, REPS = 20 };
    char *buf = malloc(FOX_PROTO_MAX_MSG);
    size_t n = many_keys(buf, N);
    snprintf(buf + n, FOX_PROTO_MAX_MSG - n, "}");
    ck_assert_uint_lt(n, FOX_PROTO_MAX_MSG);
    fox_request req;
    double refuse = 1e9, build = 1e9; /* best of REPS, ms */
    for (int r = 0; r < REPS; r++) {
        struct timespec t0, t1, t2;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rv = fox_proto_parse_request(&req, buf, strlen(buf), err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        cJSON_Delete(cJSON_Parse(buf));
        clock_gettime(CLOCK_MONOTONIC, &t2);
        ck_assert_fox_code(rv, FOX_EPROTO);
        ck_assert_ptr_null(req.doc); /* nothing was built */
        fox_request_fini(&req);
        double a = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        double b = (double)(t2.tv_sec - t1.tv_sec) * 1e3 + (double)(t2.tv_nsec - t1.tv_nsec) / 1e6;
        refuse = a < refuse ? a : refuse;
        build = b < build ? b : build;
    }
    ck_assert_ptr_nonnull(strstr(err, "more than 1024 values"));
    /* The refusal costs a scan of the bytes: well under what building the document would. */
    ck_assert_msg(refuse < build / 2, "refusing %d keys took %.3f ms, building them %.3f ms", N,
                  refuse, build);

    /* At the limit the document is built, and a duplicate among many keys is found (linearly). */
    n = many_keys(buf, FOX_PROTO_MAX_VALUES - 4);
    snprintf(buf + n, FOX_PROTO_MAX_MSG - n, ",\"k17\":1}");
    ck_assert_fox_code(status_of(buf), FOX_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "'k17' given twice"));
    n = many_keys(buf, FOX_PROTO_MAX_VALUES - 3);
    snprintf(buf + n, FOX_PROTO_MAX_MSG - n, ",\"k17\":1}");
    ck_assert_fox_code(status_of(buf), FOX_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "more than 1024 values"));
    /* Commas inside strings are text, not values. */
    n = (size_t)snprintf(buf, FOX_PROTO_MAX_MSG, "{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_save\","
                                                 "\"args\":{\"path\":\"");
    memset(buf + n, ',', 1000);
    snprintf(buf + n + 1000, FOX_PROTO_MAX_MSG - n - 1000, "\"}}");
    ck_assert_fox_code(status_of(buf), FOX_OK);
    free(buf);

    /* Nesting deeper than any request: refused by the scan, with where. */
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"status\",\"args\":"
                                 "[[[[[[[[1]]]]]]]]}"),
                       FOX_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "deeper than 8"));
    /* Brackets and quotes inside a string, escaped quotes too, are no structure. */
    ck_assert_fox_code(status_of("{\"v\":1,\"id\":1,\"cmd\":\"checkpoint_save\",\"args\":"
                                 "{\"path\":\"[[[[[[[[[[\\\"{{{{{{{{{\"}}"),
                       FOX_OK);
}
END_TEST

/* The two steps give what the one call gives, and the envelope alone reads no args. */
START_TEST(test_envelope_then_args)
{
    fox_request req;
    const char *bad_args = "{\"v\":1,\"id\":5,\"cmd\":\"run\",\"args\":{\"epochs\":0},"
                           "\"token\":\"t\"}";
    ck_assert_fox_code(fox_proto_parse_envelope(&req, bad_args, strlen(bad_args), err, sizeof err),
                       FOX_OK);
    ck_assert_int_eq(req.cmd, FOX_CMD_RUN);
    ck_assert_str_eq(req.token, "t");
    ck_assert_int_eq(req.epochs, 0);
    ck_assert_fox_code(fox_proto_parse_args(&req, err, sizeof err), FOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "args.epochs"));
    fox_request_fini(&req);
    const char *good = "{\"v\":1,\"id\":5,\"cmd\":\"run\",\"args\":{\"epochs\":3}}";
    ck_assert_fox_code(fox_proto_parse_envelope(&req, good, strlen(good), err, sizeof err), FOX_OK);
    ck_assert_fox_code(fox_proto_parse_args(&req, err, sizeof err), FOX_OK);
    ck_assert_int_eq(req.epochs, 3);
    fox_request_fini(&req);
}
END_TEST

START_TEST(test_runtime_dir)
{
    char buf[256];
    setenv("RUNTIME_DIRECTORY", "/run/foxd:/run/other", 1);
    ck_assert_fox_code(fox_proto_default_runtime_dir(buf, sizeof buf), FOX_OK);
    ck_assert_str_eq(buf, "/run/foxd");
    unsetenv("RUNTIME_DIRECTORY");
    ck_assert_fox_code(fox_proto_default_runtime_dir(buf, sizeof buf), FOX_OK);
    ck_assert_int_eq(buf[0], '/');
    ck_assert_fox_code(fox_proto_default_runtime_dir(buf, 4), FOX_EINVAL);
}
END_TEST

static Suite *
proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *tc = tcase_create("envelope");
    tcase_add_test(tc, test_envelope_good);
    tcase_add_test(tc, test_envelope_bad);
    tcase_add_test(tc, test_size_limit);
    tcase_add_test(tc, test_unknown_command);
    suite_add_tcase(s, tc);
    tc = tcase_create("commands");
    tcase_add_test(tc, test_no_arg_commands);
    tcase_add_test(tc, test_run);
    tcase_add_test(tc, test_start_fold);
    tcase_add_test(tc, test_isv_read);
    tcase_add_test(tc, test_nan_flags);
    tcase_add_test(tc, test_checkpoint);
    tcase_add_test(tc, test_config);
    tcase_add_test(tc, test_inject_and_shutdown);
    tcase_add_test(tc, test_member_arg);
    tcase_add_test(tc, test_command_table);
    tcase_add_test(tc, test_backtest_args);
    tcase_add_test(tc, test_parse_bars);
    suite_add_tcase(s, tc);
    tc = tcase_create("replies");
    tcase_add_test(tc, test_codes);
    tcase_add_test(tc, test_reply_round_trip);
    tcase_add_test(tc, test_event_round_trip);
    tcase_add_test(tc, test_fold_table);
    tcase_add_test(tc, test_members_table);
    tcase_add_test(tc, test_runtime_dir);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_many_keys);
    tcase_add_test(tc, test_envelope_then_args);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return fox_test_run_suite(proto_suite());
}
