/*
 * main.c — foxd's command line: build the configuration (defaults, then
 * --config FILE, then the other options in the order given) and run either
 * the batch mode (--once) or the serving daemon.
 *
 * It does not fork or daemonize: systemd runs foxd in the foreground
 * (Type=notify), and nng must never see a fork.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/cpus.h"
#include "daemon/foxd.h"
#include "common/error.h"
#include "common/log.h"
#include "daemon/notify.h"
#include "proto/proto.h"

#ifndef FOX_VERSION
#define FOX_VERSION "0.0.0"
#endif

static void
usage(FILE *out)
{
    fprintf(out,
            "usage: foxd [--config FILE] [--listen URL]... [--pub URL] [--backend auto|cpu|cuda]\n"
            "            [--once [--json]] [--out DIR] [--set key=value]... [--verbose]\n"
            "       foxd --backtest CHECKPOINT [--data CSV] [--bars [VAL:]FROM:TO] [--out DIR] ...\n"
            "\n"
            "  --config FILE   JSON config; nested objects are dotted keys (default: none)\n"
            "  --set K=V       set one config key after the file (e.g. train.epochs=3)\n"
            "  --listen URL    control endpoint (ipc://, tcp://, tls+tcp://); repeatable\n"
            "  --pub URL       event endpoint (PUB)\n"
            "  --backend B     auto (CUDA when a device is present), cpu or cuda\n"
            "  --once          train the configured folds, print the fold table, exit\n"
            "  --json          with --once: print the fold objects as JSON instead of the table\n"
            "  --out DIR       the run directory (run.dir; default runs/<UTC time>[-run.name])\n"
            "  --backtest F    apply checkpoint F greedily to the data, print it against the\n"
            "                  baselines, exit; the config defaults to F's run's config.json\n"
            "  --data CSV      the bars (data.source)\n"
            "  --bars [VAL:]FROM:TO  a backtest's bars [FROM, TO) (default: every bar with\n"
            "                  features); the trend baseline's lookback is chosen on [VAL, FROM)\n"
            "                  (default: as many bars before FROM as the range has)\n"
            "  --verbose       log debug lines\n"
            "\n"
            "exit status: 0 ok, 1 runtime error, 2 usage or config error, 3 training halted\n"
            "(--once), 130 interrupted\n");
}

/* Long options without a short form. */
enum { OPT_OUT = 256, OPT_BACKTEST, OPT_DATA, OPT_BARS };

/* The config key behind --backend: the engine table's name for it. */
#define BACKEND_KEY "engine.backend"

/* A backtest's bars (--bars): [from, to), the trend lookback chosen on [val_from, from). */
typedef struct bar_range {
    int val_from, from, to;
} bar_range;

/*
 * Pass 2: every option but --config and the mode, in command-line order
 * (--listen replaces the file's list). FOX_OK, or the error in err.
 */
static int
apply_options(int argc, char **argv, const struct option *opts, fox_config *cfg, fox_dconf *d,
              bar_range *bars, char *err, size_t errlen)
{
    int listen_given = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:s:l:p:b:ovhVj", opts, NULL)) != -1) {
        int rv = 0;
        switch (c) {
        case 's':
            rv = fox_conf_set_pair(cfg, d, optarg, err, errlen);
            break;
        case 'l':
            if (!listen_given++)
                d->n_listen = 0;
            if (d->n_listen >= FOX_DCONF_MAX_LISTEN || strlen(optarg) >= FOX_URL_MAX) {
                snprintf(err, errlen, "--listen: at most %d endpoints of %d bytes",
                         FOX_DCONF_MAX_LISTEN, FOX_URL_MAX - 1);
                rv = 1;
            } else {
                strcpy(d->listen[d->n_listen++], optarg);
            }
            break;
        case 'p':
            rv = fox_conf_set_text(cfg, d, "daemon.pub", optarg, err, errlen);
            break;
        case 'b':
            rv = fox_conf_set_text(cfg, d, BACKEND_KEY, optarg, err, errlen);
            break;
        case OPT_OUT:
            rv = fox_conf_set_text(cfg, d, "run.dir", optarg, err, errlen);
            break;
        case OPT_DATA:
            rv = fox_config_set(cfg, "data.source", optarg, err, errlen);
            break;
        case OPT_BARS:
            if (fox_proto_parse_bars(optarg, &bars->val_from, &bars->from, &bars->to) != 0) {
                snprintf(err, errlen,
                         "--bars: want FROM:TO or VAL:FROM:TO with 0 <= VAL <= FROM < TO, got '%s'",
                         optarg);
                rv = 1;
            }
            break;
        }
        if (rv)
            return FOX_EINVAL;
    }
    return FOX_OK;
}

/*
 * The configuration in force: defaults, the config file, the runtime
 * changes a serving foxd kept in its state directory (config set), then the
 * command line. The state directory is known only once the file and the
 * command line were read, so a kept file makes the whole walk start again.
 * A batch run (--once, --backtest) neither reads nor keeps runtime changes.
 */
static int
build_config(int argc, char **argv, const struct option *opts, const char *config_path, int batch,
             fox_config *cfg, fox_dconf *d, bar_range *bars, char *err, size_t errlen)
{
    char path[FOX_PATH_MAX + 32], msg[900], keys[512];
    for (int pass = 0; pass < 2; pass++) {
        fox_config_default(cfg);
        fox_dconf_default(d);
        if (config_path &&
            fox_conf_load_file(cfg, d, config_path, NULL, 0, msg, sizeof msg) != FOX_OK)
            return fox_errf(err, errlen, FOX_EINVAL, "config %s", msg);
        if (pass == 1 &&
            fox_conf_load_file(cfg, NULL, path, keys, sizeof keys, msg, sizeof msg) != FOX_OK)
            return fox_errf(err, errlen, FOX_EINVAL,
                            "runtime changes %s (remove the file to start without them)", msg);
        /* Values a client changed at run time outlive a restart: say which, and from where. */
        if (pass == 1)
            fox_log(FOX_LOG_INFO, "runtime changes loaded from %s: %s", path,
                    keys[0] ? keys : "(none)");
        if (apply_options(argc, argv, opts, cfg, d, bars, err, errlen) != FOX_OK)
            return FOX_EINVAL;
        if (pass == 0 && (batch || fox_conf_overrides_path(d, path, sizeof path) != FOX_OK ||
                          access(path, F_OK) != 0))
            break;
    }
    return FOX_OK;
}

/* The config.json of the run directory that holds checkpoint, into buf; 0 when there is none. */
static int
run_config_of(const char *checkpoint, char *buf, size_t len)
{
    const char *slash = strrchr(checkpoint, '/');
    int dir = slash ? (int)(slash - checkpoint) : 0;
    snprintf(buf, len, "%.*s%sconfig.json", dir, checkpoint, slash ? "/" : "");
    return access(buf, R_OK) == 0;
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'},  {"set", required_argument, 0, 's'},
        {"listen", required_argument, 0, 'l'},  {"pub", required_argument, 0, 'p'},
        {"backend", required_argument, 0, 'b'}, {"once", no_argument, 0, 'o'},
        {"verbose", no_argument, 0, 'v'},       {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},       {"json", no_argument, 0, 'j'},
        {"out", required_argument, 0, OPT_OUT},
        {"backtest", required_argument, 0, OPT_BACKTEST}, {"data", required_argument, 0, OPT_DATA},
        {"bars", required_argument, 0, OPT_BARS},     {0, 0, 0, 0}};
    fox_config cfg;
    fox_dconf d;
    char err[1024];
    const char *config_path = NULL, *backtest = NULL;
    int once = 0, json = 0, c;
    bar_range bars = {-1, -1, 0};

    fox_config_default(&cfg);
    fox_dconf_default(&d);
    fox__journal_on();

    /* Pass 1: the config file and the mode, so that the file comes before every other option. */
    while ((c = getopt_long(argc, argv, "c:s:l:p:b:ovhVj", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config_path = optarg;
            break;
        case 'o':
            once = 1;
            break;
        case 'j':
            json = 1;
            break;
        case OPT_BACKTEST:
            backtest = optarg;
            break;
        case 'v':
            fox_log_level = FOX_LOG_DEBUG;
            break;
        case 'h':
            usage(stdout);
            return FOX_EXIT_OK;
        case 'V':
            printf("foxd %s\n", FOX_VERSION);
            return FOX_EXIT_OK;
        case '?':
            usage(stderr);
            return FOX_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "foxd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return FOX_EXIT_USAGE;
    }
    /* A backtest reads the configuration its checkpoint was trained with, when that is known. */
    char beside[FOX_PATH_MAX + 16];
    if (backtest && !config_path && run_config_of(backtest, beside, sizeof beside))
        config_path = beside;
    /* A configuration foxd refuses is a start-up error: logged, at priority err in the journal. */
    if (build_config(argc, argv, opts, config_path, once || backtest, &cfg, &d, &bars, err,
                     sizeof err) != FOX_OK) {
        fox_log(FOX_LOG_ERR, "%s", err);
        return FOX_EXIT_USAGE;
    }
    /* --once and --backtest open no socket and read no token: the daemon keys only need to parse. */
    if (!once && !backtest && fox_dconf_finish(&d, err, sizeof err) != 0) {
        fox_log(FOX_LOG_ERR, "%s", err);
        return FOX_EXIT_USAGE;
    }
    if (json && !once) {
        fprintf(stderr, "foxd: --json goes with --once\n");
        return FOX_EXIT_USAGE;
    }
    if (backtest) {
        if (!d.run_name[0])
            snprintf(d.run_name, sizeof d.run_name, "backtest");
        return fox_backtest_main(&cfg, &d, backtest, bars.val_from, bars.from, bars.to);
    }
    if (once)
        return fox_once_main(&cfg, &d, json);
    /*
     * Serving: one CPU is the loop's and nng's threads' alone (cpus.h), the
     * others train. With every core in BLAS, OpenBLAS workers spin in
     * sched_yield and each request's CPU comes out of training (measured:
     * 17-41 % slower at 1000 req/s on 2 cores, within noise with one core
     * kept free); a request woken on the trainer's CPU waits for its time
     * slice (docs/performance.md).
     */
    int training_cpus = fox_cpus_reserve_control();
    long cores = training_cpus > 0 ? training_cpus : sysconf(_SC_NPROCESSORS_ONLN) - 1;
    if (cfg.threads == 0 && cores > 0)
        cfg.threads = (int)cores;
    return fox_serve_main(&cfg, &d);
}
