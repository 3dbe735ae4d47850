/*
 * foxctl.c — the command-line client of foxd (docs/man/foxctl.1.scd).
 *
 * Every protocol command is a subcommand; output is human-readable by
 * default and the raw reply with --json. Long operations (run, checkpoint
 * save) wait for their completion on the event socket, with progress on
 * stderr, and fall back to polling `status` when events were lost. `run
 * --spawn` drives a private foxd from start to stop.
 *
 * This file is the command line and the dispatch; the commands are
 * commands.c, run-and-wait is run.c, the printers print.c, the connection
 * conn.c.
 *
 * Exit statuses: see conn.h (0 ok, 1 error reply, 2 usage, 3 no daemon,
 * 4 bad reply, 5 halted, 130 interrupted). What it does not do: retry a
 * command, or start a daemon unless asked (--spawn).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/commands.h"
#include "client/help.h"
#include "client/print.h"
#include "client/records.h"
#include "client/run.h"
#include "client/sweep.h"

volatile sig_atomic_t foxctl_interrupted;

static void
on_sigint(int sig)
{
    (void)sig;
    foxctl_interrupted = 1;
}

static void
usage(FILE *out)
{
    fprintf(
        out,
        "usage: foxctl [--url URL] [--token T] [--json] [--timeout MS] [--pub URL]\n"
        "              [--cert FILE --key FILE] [--ca FILE] [--server-name NAME] COMMAND [ARGS]\n"
        "\n"
        "commands:\n"
        "  status                          state, progress, health\n"
        "  run [--folds 0,1,2] [--epochs N] [--steps N] [--detach]\n"
        "                                  train the walk-forward; waits and prints the fold "
        "table\n"
        "  run --spawn [FOXD OPTIONS]      same on a private foxd, stopped afterwards\n"
        "  start-fold K [--epochs N] [--steps N] [--detach]\n"
        "  pause | resume | stop | reset-fold\n"
        "  isv [SLOT|NAME]... [--member N] read ISV slots (all when none given)\n"
        "  isv-list | sentinels            the slot tables\n"
        "  flags [--clear] [--member N]    sentinel flags that fired\n"
        "  checkpoint save|load [PATH]     inside foxd's state directory\n"
        "  checkpoint list DIR             checkpoints of a run or state directory\n"
        "  plot [--follow [--every S]] RUN_DIR\n"
        "                                  draw a run directory's pictures (again, or as it runs)\n"
        "  compare [--out DIR] RUN_DIR...  one picture of several runs' Sharpe and equity\n"
        "  backtest --checkpoint FILE [--data CSV] [--bars [VAL:]FROM:TO] [--out DIR]\n"
        "                                  apply a saved policy to bars (private foxd)\n"
        "  backtest --daemon --checkpoint FILE [--data CSV] [--bars [VAL:]FROM:TO]\n"
        "                                  the same on the running foxd (its state dir)\n"
        "  config get [KEY]... | config set [--force] KEY=VALUE...\n"
        "  metrics                         counters and recent epochs\n"
        "  watch [--count N] [--until EVENT]  follow the event socket\n"
        "  inject-fault BUFFER nan|inf|huge [--step N] [--member N]   (debug.enable only)\n"
        "  shutdown [--no-checkpoint]\n"
        "  version\n"
        "  raw CMD [JSON-ARGS]             send any command, print the reply\n"
        "  sweep [SPEC.json] [--endpoints URL,...] [--slurm] | sweep --gather DIR\n"
        "                                  folds x seeds x configs (foxctl sweep --help)\n"
        "  help [COMMAND]                  what a command does, its arguments\n"
        "\n"
        "The options may also follow the command, up to a '--' (foxctl status --json);\n"
        "not where a private foxd takes them (run --spawn, backtest without --daemon).\n"
        "URL defaults to $FOXD_URL, else your runtime directory's foxd.sock, else\n"
        "ipc:///run/foxd/foxd.sock. Exit status: 0 ok, 1 foxd said no, 2 usage, 3 no daemon\n"
        "answered, 4 malformed reply, 5 training halted, 130 interrupted.\n");
}

/* Commands without arguments: the wire name and the printer. */
static const struct {
    const char *name, *cmd;
    foxctl_printer human;
} plain[] = {
    {"status", "status", foxctl_print_status},
    {"version", "version", foxctl_print_version},
    {"pause", "pause", foxctl_print_state},
    {"resume", "resume", foxctl_print_state},
    {"stop", "stop", foxctl_print_state},
    {"reset-fold", "reset_fold", foxctl_print_state},
    {"isv-list", "isv_list", foxctl_print_isv_list},
    {"sentinels", "sentinel_list", foxctl_print_sentinels},
    {"metrics", "metrics", foxctl_print_metrics},
};

static const struct {
    const char *name;
    int (*fn)(foxctl_opts *, int, char **);
} commands[] = {
    {"run", foxctl_cmd_run},
    {"start-fold", foxctl_cmd_run},
    {"isv", foxctl_cmd_isv},
    {"flags", foxctl_cmd_flags},
    {"checkpoint", foxctl_cmd_checkpoint},
    {"config", foxctl_cmd_config},
    {"watch", foxctl_cmd_watch},
    {"inject-fault", foxctl_cmd_inject},
    {"shutdown", foxctl_cmd_shutdown},
    {"raw", foxctl_cmd_raw},
    {"sweep", foxctl_cmd_sweep},
    {"plot", foxctl_cmd_plot},
    {"compare", foxctl_cmd_compare},
    {"backtest", foxctl_cmd_backtest},
};

/* The options of every command; --help and --version only before the command. */
static const struct option global_opts[] = {{"url", required_argument, 0, 'u'},
                                            {"token", required_argument, 0, 't'},
                                            {"json", no_argument, 0, 'j'},
                                            {"timeout", required_argument, 0, 'T'},
                                            {"pub", required_argument, 0, 'p'},
                                            {"cert", required_argument, 0, 'c'},
                                            {"key", required_argument, 0, 'k'},
                                            {"ca", required_argument, 0, 'a'},
                                            {"server-name", required_argument, 0, 'n'},
                                            {"help", no_argument, 0, 'h'},
                                            {"version", no_argument, 0, 'V'},
                                            {0, 0, 0, 0}};
#define N_AFTER_COMMAND 9 /* the entries of global_opts a command's arguments may hold */

/* Apply global option c; FOXCTL_OK, or FOXCTL_USAGE after saying why. */
static int
apply_global(foxctl_opts *o, int c, char *arg)
{
    switch (c) {
    case 'u':
        snprintf(o->url, sizeof o->url, "%s", arg);
        break;
    case 't':
        o->token = arg;
        break;
    case 'j':
        o->json = 1;
        break;
    case 'T':
        if (!foxctl_parse_int(arg, 1, 86400000, &o->timeout_ms)) {
            fprintf(stderr, "foxctl: --timeout takes milliseconds, got '%s'\n", arg);
            return FOXCTL_USAGE;
        }
        o->timeout_given = 1;
        break;
    case 'p':
        snprintf(o->pub, sizeof o->pub, "%s", arg);
        break;
    case 'c':
        o->tls.cert = arg;
        break;
    case 'k':
        o->tls.key = arg;
        break;
    case 'a':
        o->tls.ca = arg;
        break;
    case 'n':
        o->tls.server_name = arg;
        break;
    default:
        return FOXCTL_USAGE;
    }
    return FOXCTL_OK;
}

/* Whether a command hands the options after its own to a foxd it starts (whose --pub and
 * --json are its own). */
static int
feeds_foxd(int argc, char **argv)
{
    if (!strcmp(argv[0], "run"))
        return argc > 1 && !strcmp(argv[1], "--spawn");
    if (strcmp(argv[0], "backtest") != 0)
        return 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--daemon"))
            return 0;
    return 1;
}

/*
 * Global options among a command's arguments, as systemctl takes them
 * (`foxctl status --json`): applied and taken out, up to a "--", so that the
 * command sees only its own. *argc is updated.
 */
static int
take_globals(foxctl_opts *o, int *argc, char **argv)
{
    int n = 1, rv;
    if (feeds_foxd(*argc, argv))
        return FOXCTL_OK;
    for (int i = 1; i < *argc; i++) {
        const char *a = strcmp(argv[i], "-j") ? argv[i] : "--json";
        const struct option *g = NULL;
        if (!strcmp(a, "--")) {
            while (i < *argc)
                argv[n++] = argv[i++];
            break;
        }
        size_t len = strncmp(a, "--", 2) == 0 ? strcspn(a + 2, "=") : 0;
        for (int k = 0; k < N_AFTER_COMMAND && len; k++)
            if (strlen(global_opts[k].name) == len && !strncmp(a + 2, global_opts[k].name, len))
                g = &global_opts[k];
        if (!g) {
            argv[n++] = argv[i];
            continue;
        }
        char *value = a[2 + len] == '=' ? argv[i] + 3 + len : NULL;
        if (g->has_arg == required_argument && !value && i + 1 < *argc)
            value = argv[++i];
        if ((g->has_arg == required_argument) != (value != NULL)) {
            fprintf(stderr, "foxctl: --%s %s\n", g->name,
                    value ? "takes no value" : "needs a value");
            return FOXCTL_USAGE;
        }
        if ((rv = apply_global(o, g->val, value)) != FOXCTL_OK)
            return rv;
    }
    *argc = n;
    argv[n] = NULL;
    return FOXCTL_OK;
}

int
main(int argc, char **argv)
{
    foxctl_opts o = {.timeout_ms = 5000};
    int c, rv = FOXCTL_USAGE;

    foxctl_default_url(o.url, sizeof o.url);
    if (getenv("FOXD_TOKEN"))
        o.token = getenv("FOXD_TOKEN");
    while ((c = getopt_long(argc, argv, "+hj", global_opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            return FOXCTL_OK;
        case 'V':
            printf("foxctl %s (protocol v%d)\n", FOX_VERSION, FOX_PROTO_VERSION);
            return FOXCTL_OK;
        case '?':
            usage(stderr);
            return FOXCTL_USAGE;
        default:
            if (apply_global(&o, c, optarg) != FOXCTL_OK)
                return FOXCTL_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return FOXCTL_USAGE;
    }
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    const char *name = argv[optind];
    int nargc = argc - optind;
    char **nargv = argv + optind;
    int found = 0;
    if (take_globals(&o, &nargc, nargv) != FOXCTL_OK)
        return FOXCTL_USAGE;
    /* Help needs no daemon. */
    if (strcmp(name, "help") == 0)
        return nargc > 2 ? (usage(stderr), FOXCTL_USAGE) : foxctl_help(nargc == 2 ? nargv[1] : NULL);
    for (size_t i = 0; i < sizeof plain / sizeof plain[0] && !found; i++) {
        if (strcmp(name, plain[i].name) != 0)
            continue;
        found = 1;
        if (nargc != 1) {
            fprintf(stderr, "foxctl: %s takes no arguments\n", name);
            rv = FOXCTL_USAGE;
        } else {
            rv = foxctl_simple(&o, plain[i].cmd, NULL, plain[i].human);
        }
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0] && !found; i++) {
        if (strcmp(name, commands[i].name) == 0) {
            found = 1;
            rv = commands[i].fn(&o, nargc, nargv);
        }
    }
    if (!found) {
        fprintf(stderr, "foxctl: unknown command '%s'\n", name);
        usage(stderr);
    }
    if (o.connected)
        foxctl_close(&o.conn);
    return rv;
}
