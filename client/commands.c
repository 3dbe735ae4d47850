/*
 * commands.c — foxctl's subcommands that take arguments. See commands.h.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/commands.h"
#include "client/print.h"
#include "client/records.h"
#include "client/run.h"

/* The highest member index foxctl sends; foxd checks it against its engine.members. */
#define MEMBER_MAX 63

/*
 * Take "--member N" out of argv (anywhere after the command's name) into
 * *member; -1 when absent. 0, or FOXCTL_USAGE with the reason printed.
 */
static int
take_member(const char *cmd, int *argc, char **argv, int *member)
{
    *member = -1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--member") != 0)
            continue;
        if (*member >= 0 || i + 1 >= *argc ||
            !foxctl_parse_int(argv[i + 1], 0, MEMBER_MAX, member)) {
            fprintf(stderr, "foxctl: %s: --member takes one member index in [0, %d]\n", cmd,
                    MEMBER_MAX);
            return FOXCTL_USAGE;
        }
        memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 2) * sizeof *argv);
        *argc -= 2;
        i--;
    }
    return 0;
}

/* args with "member" added when one was given (args created when NULL). */
static cJSON *
with_member(cJSON *args, int member)
{
    if (member < 0)
        return args;
    if (!args)
        args = cJSON_CreateObject();
    cJSON_AddNumberToObject(args, "member", member);
    return args;
}

int
foxctl_cmd_isv(foxctl_opts *o, int argc, char **argv)
{
    int member;
    if (take_member("isv", &argc, argv, &member))
        return FOXCTL_USAGE;
    cJSON *args = with_member(cJSON_CreateObject(), member);
    if (argc > 1) {
        cJSON *slots = cJSON_AddArrayToObject(args, "slots");
        for (int i = 1; i < argc; i++) {
            int k;
            if (foxctl_parse_int(argv[i], 0, 65535, &k))
                cJSON_AddItemToArray(slots, cJSON_CreateNumber(k));
            else
                cJSON_AddItemToArray(slots, cJSON_CreateString(argv[i]));
        }
    }
    return foxctl_simple(o, "isv_read", args, foxctl_print_isv);
}

int
foxctl_cmd_flags(foxctl_opts *o, int argc, char **argv)
{
    cJSON *args = NULL;
    int member;
    if (take_member("flags", &argc, argv, &member))
        return FOXCTL_USAGE;
    if (argc > 1) {
        if (strcmp(argv[1], "--clear") != 0 || argc > 2) {
            fprintf(stderr, "foxctl: flags [--clear] [--member N]\n");
            return FOXCTL_USAGE;
        }
        args = cJSON_CreateObject();
        cJSON_AddTrueToObject(args, "clear");
    }
    return foxctl_simple(o, "nan_flags", with_member(args, member), foxctl_print_flags);
}

int
foxctl_cmd_checkpoint(foxctl_opts *o, int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "list"))
        return foxctl_cmd_checkpoint_list(o, argc, argv);
    if (argc < 2 || argc > 3 || (strcmp(argv[1], "save") && strcmp(argv[1], "load"))) {
        fprintf(stderr, "foxctl: checkpoint save|load [PATH] | checkpoint list DIR\n");
        return FOXCTL_USAGE;
    }
    cJSON *args = cJSON_CreateObject();
    if (argc == 3)
        cJSON_AddStringToObject(args, "path", argv[2]);
    if (!strcmp(argv[1], "load"))
        return foxctl_simple(o, "checkpoint_load", args, foxctl_print_loaded);

    nng_socket sub;
    char err[512];
    int rv;
    if ((rv = foxctl_events_url(o)) != FOXCTL_OK ||
        (rv = foxctl_sub_open(&sub, o->pub, &o->tls, err, sizeof err)) != FOXCTL_OK) {
        if (rv != FOXCTL_OK && rv != FOXCTL_EREPLY && rv != FOXCTL_EBADREPLY)
            fprintf(stderr, "foxctl: events: %s\n", err);
        cJSON_Delete(args);
        return rv;
    }
    fox_reply rep;
    rv = foxctl_ask(o, "checkpoint_save", args, &rep);
    if (rv == FOXCTL_OK) {
        int64_t op = (int64_t)foxctl_jnum(rep.result, "op_id", 0);
        char path[1100], digest[40];
        snprintf(path, sizeof path, "%s", foxctl_jstr(rep.result, "path", "?"));
        snprintf(digest, sizeof digest, "%s", foxctl_jstr(rep.result, "params_digest", "?"));
        if (o->json)
            foxctl_print_reply(&rep);
        fox_reply_fini(&rep);
        rv = foxctl_wait_op(o, sub, op, NULL);
        if (rv == FOXCTL_OK && !o->json)
            printf("checkpoint saved to %s (parameters %s)\n", path, digest);
    }
    foxctl_sub_release(sub);
    return rv;
}

/* KEY=VALUE: the value as JSON when it parses (3, true, "x"), else as a string. */
int
foxctl_cmd_config(foxctl_opts *o, int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "get")) {
        cJSON *args = cJSON_CreateObject();
        if (argc > 2) {
            cJSON *keys = cJSON_AddArrayToObject(args, "keys");
            for (int i = 2; i < argc; i++)
                cJSON_AddItemToArray(keys, cJSON_CreateString(argv[i]));
        }
        return foxctl_simple(o, "config_get", args, foxctl_print_config);
    }
    if (argc >= 3 && !strcmp(argv[1], "set")) {
        cJSON *args = cJSON_CreateObject();
        cJSON *values = cJSON_AddObjectToObject(args, "values");
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--force")) {
                cJSON_AddTrueToObject(args, "force");
                continue;
            }
            char *eq = strchr(argv[i], '=');
            if (!eq || eq == argv[i]) {
                fprintf(stderr, "foxctl: config set KEY=VALUE: got '%s'\n", argv[i]);
                cJSON_Delete(args);
                return FOXCTL_USAGE;
            }
            *eq = 0;
            cJSON *v = cJSON_Parse(eq + 1);
            if (!v || cJSON_IsArray(v) || cJSON_IsObject(v) || cJSON_IsNull(v)) {
                cJSON_Delete(v);
                v = cJSON_CreateString(eq + 1);
            }
            cJSON_AddItemToObject(values, argv[i], v);
        }
        if (!values->child) {
            fprintf(stderr, "foxctl: config set [--force] KEY=VALUE...: no KEY=VALUE given\n");
            cJSON_Delete(args);
            return FOXCTL_USAGE;
        }
        return foxctl_simple(o, "config_set", args, foxctl_print_config);
    }
    fprintf(stderr, "foxctl: config get [KEY]... | config set [--force] KEY=VALUE...\n");
    return FOXCTL_USAGE;
}

int
foxctl_cmd_watch(foxctl_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"count", required_argument, 0, 'c'}, {"until", required_argument, 0, 'u'}, {0, 0, 0, 0}};
    int count = 0, c, rv;
    const char *until = NULL;
    char err[512];
    optind = 1;
    while ((c = getopt_long(argc, argv, "+", lo, NULL)) != -1) {
        if (c == 'c' && foxctl_parse_int(optarg, 1, 1 << 30, &count))
            continue;
        if (c == 'u') {
            until = optarg;
            continue;
        }
        fprintf(stderr, "foxctl: watch [--count N] [--until EVENT]\n");
        return FOXCTL_USAGE;
    }
    if ((rv = foxctl_events_url(o)) != FOXCTL_OK)
        return rv;
    nng_socket sub;
    if ((rv = foxctl_sub_open(&sub, o->pub, &o->tls, err, sizeof err)) != FOXCTL_OK) {
        fprintf(stderr, "foxctl: events: %s\n", err);
        return rv;
    }
    foxctl_progress p = {.tty = isatty(STDERR_FILENO)};
    int seen = 0;
    rv = FOXCTL_OK;
    while (!foxctl_interrupted) {
        fox_event ev;
        int r = foxctl_sub_next(sub, 500, &ev);
        if (r == FOXCTL_NODAEMON) {
            rv = r;
            break;
        }
        if (r != FOXCTL_OK)
            continue;
        foxctl_progress_gap(&p, &ev);
        if (o->json) {
            foxctl_print_json(ev.doc);
            fflush(stdout);
        } else {
            foxctl_show_event(&p, &ev);
        }
        int stop = (count && ++seen >= count) || (until && !strcmp(ev.type, until));
        fox_event_fini(&ev);
        if (stop)
            break;
    }
    foxctl_progress_clear(&p);
    foxctl_sub_release(sub);
    return foxctl_interrupted ? FOXCTL_INTERRUPTED : rv;
}

int
foxctl_cmd_inject(foxctl_opts *o, int argc, char **argv)
{
    int step = 0, member;
    if (take_member("inject-fault", &argc, argv, &member))
        return FOXCTL_USAGE;
    if (argc != 3 && !(argc == 5 && !strcmp(argv[3], "--step") &&
                       foxctl_parse_int(argv[4], 0, 1 << 30, &step))) {
        fprintf(stderr, "foxctl: inject-fault BUFFER nan|inf|huge [--step N] [--member N]\n");
        return FOXCTL_USAGE;
    }
    cJSON *args = cJSON_CreateObject();
    cJSON_AddStringToObject(args, "buffer", argv[1]);
    cJSON_AddStringToObject(args, "kind", argv[2]);
    if (argc == 5)
        cJSON_AddNumberToObject(args, "step", step);
    with_member(args, member);
    return foxctl_simple(o, "inject_fault", args, NULL);
}

int
foxctl_cmd_shutdown(foxctl_opts *o, int argc, char **argv)
{
    cJSON *args = NULL;
    if (argc == 2 && !strcmp(argv[1], "--no-checkpoint")) {
        args = cJSON_CreateObject();
        cJSON_AddFalseToObject(args, "checkpoint");
    } else if (argc != 1) {
        fprintf(stderr, "foxctl: shutdown [--no-checkpoint]\n");
        return FOXCTL_USAGE;
    }
    return foxctl_simple(o, "shutdown", args, foxctl_print_shutdown);
}

int
foxctl_cmd_raw(foxctl_opts *o, int argc, char **argv)
{
    cJSON *args = NULL;
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "foxctl: raw CMD [JSON-ARGS]\n");
        return FOXCTL_USAGE;
    }
    if (argc == 3 && !(args = cJSON_Parse(argv[2]))) {
        fprintf(stderr, "foxctl: raw: the arguments are not JSON\n");
        return FOXCTL_USAGE;
    }
    o->json = 1;
    return foxctl_simple(o, argv[1], args, NULL);
}
