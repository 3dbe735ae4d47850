/*
 * foxctl.c — the command-line client of foxd (DESIGN.md "Command lines").
 *
 * Every protocol command is a subcommand; output is human-readable by
 * default and the raw reply with --json. Long operations (run, checkpoint
 * save) wait for their completion on the event socket, with progress on
 * stderr, and fall back to polling `status` when events were lost. `run
 * --spawn` drives a private foxd from start to stop.
 *
 * Exit statuses: see conn.h (0 ok, 1 error reply, 2 usage, 3 no daemon,
 * 4 bad reply, 5 halted, 130 interrupted). What it does not do: retry a
 * command, or start a daemon unless asked (--spawn).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/conn.h"

typedef struct opts {
    char url[1024];
    char pub[1024];
    const char *token;
    int json;
    int timeout_ms;
    foxctl_tls tls;
    foxctl_conn conn;
    int connected;
} opts;

static volatile sig_atomic_t interrupted;

static void
on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
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
        "  isv [SLOT|NAME]...              read ISV slots (all when none given)\n"
        "  isv-list | sentinels            the slot tables\n"
        "  flags [--clear]                 sentinel flags that fired\n"
        "  checkpoint save|load [PATH]     inside foxd's state directory\n"
        "  config get [KEY]... | config set KEY=VALUE...\n"
        "  metrics                         counters and recent epochs\n"
        "  watch [--count N] [--until EVENT]  follow the event socket\n"
        "  inject-fault BUFFER nan|inf|huge [--step N]   (debug.enable only)\n"
        "  shutdown [--no-checkpoint]\n"
        "  version\n"
        "  raw CMD [JSON-ARGS]             send any command, print the reply\n"
        "\n"
        "URL defaults to $FOXD_URL, else your runtime directory's foxd.sock, else\n"
        "ipc:///run/foxd/foxd.sock. Exit status: 0 ok, 1 foxd said no, 2 usage, 3 no daemon\n"
        "answered, 4 malformed reply, 5 training halted, 130 interrupted.\n");
}

/* ----------------------------------------------------------------- helpers */

static double
jnum(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *
jstr(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static void
print_json(const cJSON *v)
{
    char *s = cJSON_PrintUnformatted(v);
    if (s)
        puts(s);
    free(s);
}

/*
 * A reply as received: cJSON would reprint a 16-digit id rounded, so the id
 * goes back in exactly, as foxd sent it.
 */
static void
print_reply(const fox_reply *rep)
{
    char id[24];
    if (rep->has_id) {
        snprintf(id, sizeof id, "%lld", (long long)rep->id);
        cJSON_ReplaceItemInObjectCaseSensitive(rep->doc, "id", cJSON_CreateRaw(id));
    }
    print_json(rep->doc);
}

static void
list_text(char *buf, size_t len, const cJSON *arr)
{
    size_t n = 0;
    buf[0] = 0;
    for (const cJSON *it = arr ? arr->child : NULL; it && n < len; it = it->next)
        n += (size_t)snprintf(buf + n, len - n, "%s%.0f", n ? "," : "", it->valuedouble);
    if (!buf[0])
        snprintf(buf, len, "-");
}

static int
connect_once(opts *o)
{
    char err[512];
    if (o->connected)
        return FOXCTL_OK;
    int rv = foxctl_open(&o->conn, o->url, o->token, o->timeout_ms, &o->tls, err, sizeof err);
    if (rv != FOXCTL_OK) {
        fprintf(stderr, "foxctl: %s\n", err);
        foxctl_close(&o->conn);
        return rv;
    }
    o->connected = 1;
    return FOXCTL_OK;
}

/*
 * Send cmd and hand back the reply. A reply with ok:false is printed (or, with
 * --json, the whole reply) and turned into FOXCTL_EREPLY.
 */
static int
call(opts *o, const char *cmd, cJSON *args, fox_reply *rep)
{
    char err[512];
    int rv = connect_once(o);
    if (rv != FOXCTL_OK) {
        cJSON_Delete(args);
        return rv;
    }
    rv = foxctl_call(&o->conn, cmd, args, rep, err, sizeof err);
    if (rv != FOXCTL_OK) {
        fprintf(stderr, "foxctl: %s\n", err);
        return rv;
    }
    if (!rep->ok) {
        if (o->json)
            print_reply(rep);
        else
            fprintf(stderr, "foxctl: %s: %s: %s\n", cmd, rep->code_name, rep->message);
        fox_reply_fini(rep);
        return FOXCTL_EREPLY;
    }
    return FOXCTL_OK;
}

typedef void (*printer)(const cJSON *result);

/* The common case: one call, one printer. */
static int
simple(opts *o, const char *cmd, cJSON *args, printer human)
{
    fox_reply rep;
    int rv = call(o, cmd, args, &rep);
    if (rv != FOXCTL_OK)
        return rv;
    if (o->json || !human)
        o->json ? print_reply(&rep) : print_json(rep.result);
    else
        human(rep.result);
    fox_reply_fini(&rep);
    return FOXCTL_OK;
}

/* ----------------------------------------------------------------- printers */

static void
print_state(const cJSON *r)
{
    printf("%s\n", jstr(r, "state", "?"));
}

static void
print_status(const cJSON *r)
{
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(r, "run");
    const cJSON *eng = cJSON_GetObjectItemCaseSensitive(r, "engine");
    const cJSON *healthy = cJSON_GetObjectItemCaseSensitive(r, "healthy");
    char folds[128], left[128];
    printf("state    %s%s   as of step %.0f, %.0f ms ago\n", jstr(r, "state", "?"),
           cJSON_IsFalse(healthy) ? " (UNHEALTHY: stale heartbeat)" : "", jnum(r, "as_of_step", 0),
           jnum(r, "age_ms", 0));
    if (jstr(r, "phase", NULL))
        printf("phase    %s\n", jstr(r, "phase", ""));
    if (jnum(r, "fold", -1) >= 0)
        printf("fold     %.0f   epoch %.0f/%.0f   step %.0f   loss %.4g   %.1f steps/s\n",
               jnum(r, "fold", -1), jnum(r, "epoch", 0) + 1, jnum(run, "epochs", 0),
               jnum(r, "step", 0), jnum(r, "loss", NAN), jnum(r, "steps_per_sec", 0));
    if (jnum(run, "op_id", 0) > 0) {
        list_text(folds, sizeof folds, cJSON_GetObjectItemCaseSensitive(run, "folds"));
        list_text(left, sizeof left, cJSON_GetObjectItemCaseSensitive(run, "folds_left"));
        printf("run      op %.0f: folds %s (left %s), %.0f epochs x %.0f steps\n",
               jnum(run, "op_id", 0), folds, left, jnum(run, "epochs", 0),
               jnum(run, "steps_per_epoch", 0));
    }
    if (jstr(r, "halt_reason", NULL))
        printf("halted   %s\n", jstr(r, "halt_reason", ""));
    printf("engine   %s, %.0f parameters, %.0f envs, batch %.0f, %.0f bars, fingerprint %s\n",
           jstr(eng, "backend", "?"), jnum(eng, "n_params", 0), jnum(eng, "n_envs", 0),
           jnum(eng, "batch", 0), jnum(eng, "n_bars", 0), jstr(eng, "fingerprint", "?"));
    printf("daemon   up %.0f s, %.0f queued, %.0f train steps in total\n", jnum(r, "uptime_s", 0),
           jnum(r, "queue", 0), jnum(r, "total_steps", 0));
    const cJSON *done = cJSON_GetObjectItemCaseSensitive(run, "folds_done");
    if (cJSON_GetArraySize(done) > 0) {
        putchar('\n');
        fox_proto_print_folds(stdout, done);
    }
}

static void
print_version(const cJSON *r)
{
    printf("foxd %s (protocol %.0f, %s backend, fingerprint %s, events at %s)\n",
           jstr(r, "version", "?"), jnum(r, "protocol", 0), jstr(r, "backend", "?"),
           jstr(r, "fingerprint", "?"), jstr(r, "events", "?"));
}

static void
print_isv(const cJSON *r)
{
    const cJSON *slots = cJSON_GetObjectItemCaseSensitive(r, "slots");
    printf("ISV as of step %.0f\n", jnum(r, "as_of_step", 0));
    for (const cJSON *s = slots ? slots->child : NULL; s; s = s->next) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "value");
        printf("%5.0f  %-28s %s", jnum(s, "index", -1), jstr(s, "name", "?"),
               cJSON_IsNumber(v) ? "" : "non-finite\n");
        if (cJSON_IsNumber(v))
            printf("%.9g\n", v->valuedouble);
    }
}

static void
print_isv_list(const cJSON *r)
{
    const cJSON *slots = cJSON_GetObjectItemCaseSensitive(r, "slots");
    for (const cJSON *s = slots ? slots->child : NULL; s; s = s->next)
        printf("%5.0f  %-28s %-6s %s\n", jnum(s, "index", -1), jstr(s, "name", "?"),
               jstr(s, "reset", "?"), jstr(s, "doc", ""));
    printf("(%.0f slots in all; unnamed ones are reserved)\n", jnum(r, "total", 0));
}

static void
print_flags(const cJSON *r)
{
    const cJSON *cleared = cJSON_GetObjectItemCaseSensitive(r, "cleared");
    const cJSON *fired = cJSON_GetObjectItemCaseSensitive(r, "fired");
    if (cleared) {
        printf("cleared %d flag(s)", cJSON_GetArraySize(cleared));
        for (const cJSON *c = cleared->child; c; c = c->next)
            printf("%s %s", c == cleared->child ? ":" : ",", c->valuestring);
        putchar('\n');
        return;
    }
    if (cJSON_GetArraySize(fired) == 0) {
        printf("no sentinel flag set\n");
        return;
    }
    for (const cJSON *f = fired->child; f; f = f->next)
        printf("slot %2.0f  %-24s buffer %-16s%s\n", jnum(f, "slot", -1), jstr(f, "name", "?"),
               jstr(f, "buffer", "?"),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "halts")) ? "  (halts)" : "");
}

static void
print_sentinels(const cJSON *r)
{
    const cJSON *slots = cJSON_GetObjectItemCaseSensitive(r, "slots");
    for (const cJSON *s = slots ? slots->child : NULL; s; s = s->next)
        printf("%3.0f  %-24s %-16s %-10s %s%s\n", jnum(s, "slot", -1), jstr(s, "name", "?"),
               jstr(s, "buffer", ""), jstr(s, "kind", ""), jstr(s, "rule", ""),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "halts")) ? " (halts)" : "");
}

static void
print_config(const cJSON *r)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, "values");
    for (const cJSON *it = v ? v->child : NULL; it; it = it->next) {
        char *s = cJSON_PrintUnformatted(it);
        printf("%s = %s\n", it->string, s ? s : "?");
        free(s);
    }
    const cJSON *applied = cJSON_GetObjectItemCaseSensitive(r, "applied");
    if (applied) {
        printf("applied:");
        for (const cJSON *a = applied->child; a; a = a->next)
            printf(" %s", a->valuestring);
        printf("%s\n", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "engine_recreated"))
                           ? " (engine recreated)"
                           : "");
    }
}

static void
print_epoch_line(FILE *out, const cJSON *e, double epochs)
{
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(e, "val");
    const cJSON *test = cJSON_GetObjectItemCaseSensitive(e, "test");
    fprintf(out, "fold %.0f epoch %.0f", jnum(e, "fold", -1), jnum(e, "epoch", 0) + 1);
    if (epochs > 0)
        fprintf(out, "/%.0f", epochs);
    fprintf(out, ": loss %.4g  val Sharpe %.3f  test Sharpe %.3f  %.0f steps/s\n",
            jnum(e, "mean_loss", NAN), jnum(val, "sharpe", NAN), jnum(test, "sharpe", NAN),
            jnum(e, "steps_per_sec", 0));
}

static void
print_metrics(const cJSON *r)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "counters");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive(r, "epochs");
    const cJSON *folds = cJSON_GetObjectItemCaseSensitive(r, "folds");
    printf("steps %.0f  epochs %.0f  folds %.0f  halts %.0f  checkpoints %.0f\n",
           jnum(c, "total_steps", 0), jnum(c, "epochs", 0), jnum(c, "folds", 0),
           jnum(c, "halts", 0), jnum(c, "checkpoints", 0));
    printf("requests %.0f (errors %.0f, busy %.0f, resends answered %.0f)  events %.0f\n",
           jnum(c, "requests", 0), jnum(c, "request_errors", 0), jnum(c, "busy", 0),
           jnum(c, "dedup_hits", 0), jnum(c, "events", 0));
    for (const cJSON *e = epochs ? epochs->child : NULL; e; e = e->next)
        print_epoch_line(stdout, e, 0);
    if (cJSON_GetArraySize(folds) > 0)
        fox_proto_print_folds(stdout, folds);
}

static void
print_loaded(const cJSON *r)
{
    printf("checkpoint loaded from %s (parameters %s)\n", jstr(r, "path", "?"),
           jstr(r, "params_digest", "?"));
}

static void
print_shutdown(const cJSON *r)
{
    const char *ck = jstr(r, "checkpoint", NULL);
    const char *ckerr = jstr(r, "checkpoint_error", NULL);
    if (ck)
        printf("foxd is stopping; checkpoint saved to %s\n", ck);
    else if (ckerr)
        printf("foxd is stopping; the checkpoint FAILED: %s\n", ckerr);
    else
        printf("foxd is stopping (no checkpoint)\n");
}

/* ------------------------------------------------------------ events, waits */

typedef struct progress {
    int tty;
    int bar_shown;
    uint64_t last_seq;
    double epochs;
} progress;

static void
clear_bar(progress *p)
{
    if (p->bar_shown)
        fputs("\r\033[K", stderr);
    p->bar_shown = 0;
}

/* Note a seq gap: PUB dropped events for this subscriber. */
static void
check_gap(progress *p, const fox_event *ev)
{
    if (p->last_seq && ev->seq > p->last_seq + 1) {
        clear_bar(p);
        fprintf(stderr, "! missed %llu event(s) (seq %llu..%llu)\n",
                (unsigned long long)(ev->seq - p->last_seq - 1),
                (unsigned long long)p->last_seq + 1, (unsigned long long)ev->seq - 1);
    }
    p->last_seq = ev->seq;
}

/* One event, as a human reads it (progress on stderr). */
static void
show_event(progress *p, const fox_event *ev)
{
    const cJSON *d = ev->data;
    if (!strcmp(ev->type, "step")) {
        double spe = jnum(d, "steps_per_epoch", 0), in = jnum(d, "step_in_epoch", 0);
        double frac = spe > 0 ? in / spe : 0;
        if (!p->tty)
            return;
        int fill = (int)(frac * 30);
        fprintf(stderr,
                "\r\033[Kfold %.0f epoch %.0f/%.0f [%.*s%.*s] %3.0f%%  loss %.4g  %.0f steps/s",
                jnum(d, "fold", -1), jnum(d, "epoch", 0) + 1, jnum(d, "epochs", 0), fill,
                "##############################", 30 - fill, "..............................",
                frac * 100, jnum(d, "loss", NAN), jnum(d, "steps_per_sec", 0));
        p->bar_shown = 1;
        return;
    }
    clear_bar(p);
    if (!strcmp(ev->type, "epoch_end")) {
        print_epoch_line(stderr, d, jnum(d, "epochs", p->epochs));
    } else if (!strcmp(ev->type, "fold_begin")) {
        p->epochs = jnum(d, "epochs", 0);
        fprintf(stderr, "fold %.0f begins: %.0f epochs x %.0f steps\n", jnum(d, "fold", -1),
                jnum(d, "epochs", 0), jnum(d, "steps_per_epoch", 0));
    } else if (!strcmp(ev->type, "fold_end")) {
        fprintf(stderr, "fold %.0f done: best val Sharpe %.3f at epoch %.0f, test Sharpe %.3f\n",
                jnum(d, "fold", -1), jnum(d, "best_val_sharpe", NAN), jnum(d, "best_epoch", -1) + 1,
                jnum(d, "test_sharpe", NAN));
        fox_proto_print_flagged(stderr, d);
    } else if (!strcmp(ev->type, "halt")) {
        fprintf(stderr, "HALT fold %.0f: %s\n", jnum(d, "fold", -1), jstr(d, "reason", "?"));
    } else if (!strcmp(ev->type, "state")) {
        fprintf(stderr, "state %s -> %s\n", jstr(d, "prev", "?"), jstr(d, "state", "?"));
    } else if (!strcmp(ev->type, "op_done")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "error");
        fprintf(stderr, "op %.0f (%s) %s%s%s\n", jnum(d, "op_id", 0), jstr(d, "cmd", "?"),
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "ok")) ? "done" : "failed",
                e ? ": " : "", e ? jstr(e, "message", "") : "");
    } else {
        char *s = cJSON_PrintUnformatted(d);
        fprintf(stderr, "%s %s\n", ev->type, s ? s : "");
        free(s);
    }
}

/* The events URL: --pub, else what foxd says in `version`. */
static int
events_url(opts *o)
{
    fox_reply rep;
    if (o->pub[0])
        return FOXCTL_OK;
    int rv = call(o, "version", NULL, &rep);
    if (rv != FOXCTL_OK)
        return rv;
    snprintf(o->pub, sizeof o->pub, "%s", jstr(rep.result, "events", ""));
    fox_reply_fini(&rep);
    if (!o->pub[0]) {
        fprintf(stderr, "foxctl: foxd did not name its event socket; give --pub\n");
        return FOXCTL_EBADREPLY;
    }
    return FOXCTL_OK;
}

/*
 * The op's record in status: 0 running (or unknown), 1 done, else the exit
 * status for its failure. Fills *folds (owned) with the run's folds_done.
 */
static int
op_from_status(opts *o, int64_t op, cJSON **folds, char *msg, size_t len)
{
    fox_reply rep;
    int state = 0;
    if (call(o, "status", NULL, &rep) != FOXCTL_OK)
        return FOXCTL_NODAEMON;
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(rep.result, "ops");
    for (const cJSON *it = ops ? ops->child : NULL; it; it = it->next) {
        if (jnum(it, "op_id", 0) != (double)op)
            continue;
        const char *st = jstr(it, "state", "running");
        snprintf(msg, len, "%s", jstr(it, "message", ""));
        state = !strcmp(st, "done")     ? 1
                : !strcmp(st, "halted") ? FOXCTL_HALTED
                : !strcmp(st, "failed") ? FOXCTL_EREPLY
                                        : 0;
    }
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(rep.result, "run");
    if (folds && jnum(run, "op_id", 0) == (double)op) {
        cJSON_Delete(*folds);
        *folds = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(run, "folds_done"), 1);
    }
    fox_reply_fini(&rep);
    return state;
}

/*
 * Wait for op to finish: events first, status every few seconds (events can
 * be dropped). Returns the exit status; *folds gets the run's fold objects.
 */
static int
wait_op(opts *o, nng_socket sub, int64_t op, cJSON **folds)
{
    progress p = {.tty = isatty(STDERR_FILENO)};
    char msg[512] = "";
    int64_t last_poll = 0;
    for (;;) {
        fox_event ev;
        if (interrupted)
            return FOXCTL_INTERRUPTED;
        int rv = foxctl_sub_next(sub, 500, &ev);
        if (rv == FOXCTL_OK) {
            check_gap(&p, &ev);
            if (!o->json)
                show_event(&p, &ev);
            else
                print_json(ev.doc);
            int mine = !strcmp(ev.type, "op_done") && jnum(ev.data, "op_id", -1) == (double)op;
            if (mine) {
                const cJSON *r = cJSON_GetObjectItemCaseSensitive(ev.data, "result");
                const cJSON *f = cJSON_GetObjectItemCaseSensitive(r, "folds");
                int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev.data, "ok"));
                int halted = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev.data, "halted"));
                if (folds && f) {
                    cJSON_Delete(*folds);
                    *folds = cJSON_Duplicate(f, 1);
                }
                fox_event_fini(&ev);
                clear_bar(&p);
                return ok ? FOXCTL_OK : halted ? FOXCTL_HALTED : FOXCTL_EREPLY;
            }
            fox_event_fini(&ev);
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        if (now - last_poll >= 3000) {
            last_poll = now;
            int st = op_from_status(o, op, folds, msg, sizeof msg);
            if (st == FOXCTL_NODAEMON)
                return st;
            if (st != 0) {
                clear_bar(&p);
                if (st != 1)
                    fprintf(stderr, "foxctl: op %lld: %s\n", (long long)op, msg);
                return st == 1 ? FOXCTL_OK : st;
            }
        }
    }
}

/* ------------------------------------------------------------------ commands */

static int
parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || errno || v < lo || v > hi)
        return 0;
    *out = (int)v;
    return 1;
}

static cJSON *
folds_arg(const char *s)
{
    cJSON *a = cJSON_CreateArray();
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int k;
        if (!parse_int(tok, 0, 30, &k)) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, cJSON_CreateNumber(k));
    }
    return a;
}

static int cmd_run_spawn(opts *o, int argc, char **argv);

/* run and start-fold: submit, then wait for the op unless --detach. */
static int
cmd_run(opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"folds", required_argument, 0, 'f'}, {"epochs", required_argument, 0, 'e'},
        {"steps", required_argument, 0, 's'}, {"detach", no_argument, 0, 'd'},
        {"spawn", no_argument, 0, 'S'},       {0, 0, 0, 0}};
    int start_fold = !strcmp(argv[0], "start-fold");
    int detach = 0, n, c;
    cJSON *args = cJSON_CreateObject();

    if (!start_fold && argc > 1 && !strcmp(argv[1], "--spawn")) {
        cJSON_Delete(args);
        return cmd_run_spawn(o, argc - 1, argv + 1);
    }
    if (start_fold) {
        if (argc < 2 || !parse_int(argv[1], 0, 30, &n)) {
            fprintf(stderr, "foxctl: start-fold K: K is a fold number\n");
            cJSON_Delete(args);
            return FOXCTL_USAGE;
        }
        cJSON_AddNumberToObject(args, "fold", n);
        argc--;
        argv++;
    }
    optind = 1;
    while ((c = getopt_long(argc, argv, "+", lo, NULL)) != -1) {
        switch (c) {
        case 'f': {
            cJSON *f = folds_arg(optarg);
            if (!f || start_fold) {
                fprintf(stderr, "foxctl: --folds takes a list like 0,1,2\n");
                cJSON_Delete(args);
                return FOXCTL_USAGE;
            }
            cJSON_AddItemToObject(args, "folds", f);
            break;
        }
        case 'e':
        case 's':
            if (!parse_int(optarg, 1, 1000000000, &n)) {
                fprintf(stderr, "foxctl: --%s takes a positive integer\n",
                        c == 'e' ? "epochs" : "steps");
                cJSON_Delete(args);
                return FOXCTL_USAGE;
            }
            cJSON_AddNumberToObject(args, c == 'e' ? "epochs" : "steps_per_epoch", n);
            break;
        case 'd':
            detach = 1;
            break;
        default:
            cJSON_Delete(args);
            return FOXCTL_USAGE;
        }
    }

    /* Subscribe before submitting, so that no event of the op can be missed. */
    nng_socket sub;
    int have_sub = 0, rv;
    char err[512];
    if (!detach) {
        if ((rv = events_url(o)) != FOXCTL_OK) {
            cJSON_Delete(args);
            return rv;
        }
        if ((rv = foxctl_sub_open(&sub, o->pub, &o->tls, err, sizeof err)) != FOXCTL_OK) {
            fprintf(stderr, "foxctl: events: %s\n", err);
            cJSON_Delete(args);
            return rv;
        }
        have_sub = 1;
    }
    fox_reply rep;
    rv = call(o, start_fold ? "start_fold" : "run", args, &rep);
    if (rv != FOXCTL_OK)
        goto out;
    int64_t op = (int64_t)jnum(rep.result, "op_id", 0);
    if (o->json)
        print_reply(&rep);
    else
        fprintf(stderr, "op %lld accepted\n", (long long)op);
    fox_reply_fini(&rep);
    if (detach)
        goto out;

    cJSON *folds = NULL;
    rv = wait_op(o, sub, op, &folds);
    if (rv == FOXCTL_INTERRUPTED) {
        fprintf(stderr, "foxctl: interrupted: the run goes on in foxd (foxctl stop ends it)\n");
    } else if (!o->json && folds && cJSON_GetArraySize(folds) > 0) {
        fox_proto_print_folds(stdout, folds);
    }
    cJSON_Delete(folds);
out:
    if (have_sub)
        foxctl_sub_release(sub);
    return rv;
}

/* Wait for a freshly spawned foxd to answer (it loads its data first). */
static int
wait_ready(opts *o, pid_t pid, const char *dir)
{
    for (int i = 0; i < 6000 && !interrupted; i++) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            char log[1200], line[1024];
            fprintf(stderr, "foxctl: the private foxd exited (status %d) before answering:\n",
                    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
            snprintf(log, sizeof log, "%s/foxd.log", dir);
            FILE *f = fopen(log, "r");
            while (f && fgets(line, sizeof line, f))
                fprintf(stderr, "  %s", line);
            if (f)
                fclose(f);
            return FOXCTL_EREPLY;
        }
        char err[256];
        foxctl_conn c;
        if (foxctl_open(&c, o->url, o->token, 1000, NULL, err, sizeof err) == FOXCTL_OK) {
            foxctl_close(&c);
            return FOXCTL_OK;
        }
        foxctl_close(&c);
        usleep(50000);
    }
    return interrupted ? FOXCTL_INTERRUPTED : FOXCTL_NODAEMON;
}

static int
cmd_run_spawn(opts *o, int argc, char **argv)
{
    char dir[512];
    pid_t pid;
    char err[512];
    int rv, status;

    /* foxctl run's own options may come first; everything else is foxd's. */
    char *run_argv[8] = {"run"};
    int run_argc = 1, i = 1;
    for (; i < argc && run_argc < 7; i++) {
        if (!strcmp(argv[i], "--folds") || !strcmp(argv[i], "--epochs") ||
            !strcmp(argv[i], "--steps")) {
            if (i + 1 >= argc)
                break;
            run_argv[run_argc++] = argv[i++];
            run_argv[run_argc++] = argv[i];
        } else {
            break;
        }
    }
    rv = foxctl_spawn(&pid, dir, sizeof dir, o->url, o->pub, sizeof o->url, argv + i, argc - i, err,
                      sizeof err);
    if (rv != FOXCTL_OK) {
        fprintf(stderr, "foxctl: %s\n", err);
        return rv;
    }
    fprintf(stderr, "foxctl: private foxd (pid %d) in %s\n", (int)pid, dir);
    rv = wait_ready(o, pid, dir);
    if (rv == FOXCTL_OK)
        rv = cmd_run(o, run_argc, run_argv);

    /* Stop it whatever happened: no checkpoint, the directory goes away. */
    fox_reply rep;
    cJSON *args = cJSON_CreateObject();
    cJSON_AddFalseToObject(args, "checkpoint");
    if (call(o, "shutdown", args, &rep) == FOXCTL_OK)
        fox_reply_fini(&rep);
    if (o->connected) {
        foxctl_close(&o->conn);
        o->connected = 0;
    }
    for (int k = 0; k < 300 && waitpid(pid, &status, WNOHANG) != pid; k++) {
        if (k == 200)
            kill(pid, SIGTERM);
        usleep(50000);
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    foxctl_spawn_cleanup(dir);
    return rv;
}

static int
cmd_isv(opts *o, int argc, char **argv)
{
    cJSON *args = cJSON_CreateObject();
    if (argc > 1) {
        cJSON *slots = cJSON_AddArrayToObject(args, "slots");
        for (int i = 1; i < argc; i++) {
            int k;
            if (parse_int(argv[i], 0, 65535, &k))
                cJSON_AddItemToArray(slots, cJSON_CreateNumber(k));
            else
                cJSON_AddItemToArray(slots, cJSON_CreateString(argv[i]));
        }
    }
    return simple(o, "isv_read", args, print_isv);
}

static int
cmd_flags(opts *o, int argc, char **argv)
{
    cJSON *args = NULL;
    if (argc > 1) {
        if (strcmp(argv[1], "--clear") != 0 || argc > 2) {
            fprintf(stderr, "foxctl: flags [--clear]\n");
            return FOXCTL_USAGE;
        }
        args = cJSON_CreateObject();
        cJSON_AddTrueToObject(args, "clear");
    }
    return simple(o, "nan_flags", args, print_flags);
}

static int
cmd_checkpoint(opts *o, int argc, char **argv)
{
    if (argc < 2 || argc > 3 || (strcmp(argv[1], "save") && strcmp(argv[1], "load"))) {
        fprintf(stderr, "foxctl: checkpoint save|load [PATH]\n");
        return FOXCTL_USAGE;
    }
    cJSON *args = cJSON_CreateObject();
    if (argc == 3)
        cJSON_AddStringToObject(args, "path", argv[2]);
    if (!strcmp(argv[1], "load"))
        return simple(o, "checkpoint_load", args, print_loaded);

    nng_socket sub;
    char err[512];
    int rv;
    if ((rv = events_url(o)) != FOXCTL_OK ||
        (rv = foxctl_sub_open(&sub, o->pub, &o->tls, err, sizeof err)) != FOXCTL_OK) {
        if (rv != FOXCTL_OK && rv != FOXCTL_EREPLY && rv != FOXCTL_EBADREPLY)
            fprintf(stderr, "foxctl: events: %s\n", err);
        cJSON_Delete(args);
        return rv;
    }
    fox_reply rep;
    rv = call(o, "checkpoint_save", args, &rep);
    if (rv == FOXCTL_OK) {
        int64_t op = (int64_t)jnum(rep.result, "op_id", 0);
        char path[1100], digest[40];
        snprintf(path, sizeof path, "%s", jstr(rep.result, "path", "?"));
        snprintf(digest, sizeof digest, "%s", jstr(rep.result, "params_digest", "?"));
        if (o->json)
            print_reply(&rep);
        fox_reply_fini(&rep);
        rv = wait_op(o, sub, op, NULL);
        if (rv == FOXCTL_OK && !o->json)
            printf("checkpoint saved to %s (parameters %s)\n", path, digest);
    }
    foxctl_sub_release(sub);
    return rv;
}

/* KEY=VALUE: the value as JSON when it parses (3, true, "x"), else as a string. */
static int
cmd_config(opts *o, int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "get")) {
        cJSON *args = cJSON_CreateObject();
        if (argc > 2) {
            cJSON *keys = cJSON_AddArrayToObject(args, "keys");
            for (int i = 2; i < argc; i++)
                cJSON_AddItemToArray(keys, cJSON_CreateString(argv[i]));
        }
        return simple(o, "config_get", args, print_config);
    }
    if (argc >= 3 && !strcmp(argv[1], "set")) {
        cJSON *args = cJSON_CreateObject();
        cJSON *values = cJSON_AddObjectToObject(args, "values");
        for (int i = 2; i < argc; i++) {
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
        return simple(o, "config_set", args, print_config);
    }
    fprintf(stderr, "foxctl: config get [KEY]... | config set KEY=VALUE...\n");
    return FOXCTL_USAGE;
}

static int
cmd_watch(opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"count", required_argument, 0, 'c'}, {"until", required_argument, 0, 'u'}, {0, 0, 0, 0}};
    int count = 0, c, rv;
    const char *until = NULL;
    char err[512];
    optind = 1;
    while ((c = getopt_long(argc, argv, "+", lo, NULL)) != -1) {
        if (c == 'c' && parse_int(optarg, 1, 1 << 30, &count))
            continue;
        if (c == 'u') {
            until = optarg;
            continue;
        }
        fprintf(stderr, "foxctl: watch [--count N] [--until EVENT]\n");
        return FOXCTL_USAGE;
    }
    if ((rv = events_url(o)) != FOXCTL_OK)
        return rv;
    nng_socket sub;
    if ((rv = foxctl_sub_open(&sub, o->pub, &o->tls, err, sizeof err)) != FOXCTL_OK) {
        fprintf(stderr, "foxctl: events: %s\n", err);
        return rv;
    }
    progress p = {.tty = isatty(STDERR_FILENO)};
    int seen = 0;
    rv = FOXCTL_OK;
    while (!interrupted) {
        fox_event ev;
        int r = foxctl_sub_next(sub, 500, &ev);
        if (r == FOXCTL_NODAEMON) {
            rv = r;
            break;
        }
        if (r != FOXCTL_OK)
            continue;
        check_gap(&p, &ev);
        if (o->json) {
            print_json(ev.doc);
            fflush(stdout);
        } else {
            show_event(&p, &ev);
        }
        int stop = (count && ++seen >= count) || (until && !strcmp(ev.type, until));
        fox_event_fini(&ev);
        if (stop)
            break;
    }
    clear_bar(&p);
    foxctl_sub_release(sub);
    return interrupted ? FOXCTL_INTERRUPTED : rv;
}

static int
cmd_inject(opts *o, int argc, char **argv)
{
    int step = 0;
    if (argc != 3 &&
        !(argc == 5 && !strcmp(argv[3], "--step") && parse_int(argv[4], 0, 1 << 30, &step))) {
        fprintf(stderr, "foxctl: inject-fault BUFFER nan|inf|huge [--step N]\n");
        return FOXCTL_USAGE;
    }
    cJSON *args = cJSON_CreateObject();
    cJSON_AddStringToObject(args, "buffer", argv[1]);
    cJSON_AddStringToObject(args, "kind", argv[2]);
    if (argc == 5)
        cJSON_AddNumberToObject(args, "step", step);
    return simple(o, "inject_fault", args, NULL);
}

static int
cmd_shutdown(opts *o, int argc, char **argv)
{
    cJSON *args = NULL;
    if (argc == 2 && !strcmp(argv[1], "--no-checkpoint")) {
        args = cJSON_CreateObject();
        cJSON_AddFalseToObject(args, "checkpoint");
    } else if (argc != 1) {
        fprintf(stderr, "foxctl: shutdown [--no-checkpoint]\n");
        return FOXCTL_USAGE;
    }
    return simple(o, "shutdown", args, print_shutdown);
}

static int
cmd_raw(opts *o, int argc, char **argv)
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
    return simple(o, argv[1], args, NULL);
}

/* Commands without arguments: the wire name and the printer. */
static const struct {
    const char *name, *cmd;
    printer human;
} plain[] = {
    {"status", "status", print_status},
    {"version", "version", print_version},
    {"pause", "pause", print_state},
    {"resume", "resume", print_state},
    {"stop", "stop", print_state},
    {"reset-fold", "reset_fold", print_state},
    {"isv-list", "isv_list", print_isv_list},
    {"sentinels", "sentinel_list", print_sentinels},
    {"metrics", "metrics", print_metrics},
};

static const struct {
    const char *name;
    int (*fn)(opts *, int, char **);
} commands[] = {
    {"run", cmd_run},     {"start-fold", cmd_run},        {"isv", cmd_isv},
    {"flags", cmd_flags}, {"checkpoint", cmd_checkpoint}, {"config", cmd_config},
    {"watch", cmd_watch}, {"inject-fault", cmd_inject},   {"shutdown", cmd_shutdown},
    {"raw", cmd_raw},
};

int
main(int argc, char **argv)
{
    static const struct option lo[] = {{"url", required_argument, 0, 'u'},
                                       {"token", required_argument, 0, 't'},
                                       {"json", no_argument, 0, 'j'},
                                       {"timeout", required_argument, 0, 'T'},
                                       {"pub", required_argument, 0, 'p'},
                                       {"cert", required_argument, 0, 'c'},
                                       {"key", required_argument, 0, 'k'},
                                       {"ca", required_argument, 0, 'a'},
                                       {"server-name", required_argument, 0, 'n'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    opts o = {.timeout_ms = 5000};
    int c, rv = FOXCTL_USAGE;

    foxctl_default_url(o.url, sizeof o.url);
    if (getenv("FOXD_TOKEN"))
        o.token = getenv("FOXD_TOKEN");
    while ((c = getopt_long(argc, argv, "+hj", lo, NULL)) != -1) {
        switch (c) {
        case 'u':
            snprintf(o.url, sizeof o.url, "%s", optarg);
            break;
        case 't':
            o.token = optarg;
            break;
        case 'j':
            o.json = 1;
            break;
        case 'T':
            if (!parse_int(optarg, 1, 86400000, &o.timeout_ms)) {
                fprintf(stderr, "foxctl: --timeout takes milliseconds\n");
                return FOXCTL_USAGE;
            }
            break;
        case 'p':
            snprintf(o.pub, sizeof o.pub, "%s", optarg);
            break;
        case 'c':
            o.tls.cert = optarg;
            break;
        case 'k':
            o.tls.key = optarg;
            break;
        case 'a':
            o.tls.ca = optarg;
            break;
        case 'n':
            o.tls.server_name = optarg;
            break;
        case 'h':
            usage(stdout);
            return FOXCTL_OK;
        default:
            usage(stderr);
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
    for (size_t i = 0; i < sizeof plain / sizeof plain[0] && !found; i++) {
        if (strcmp(name, plain[i].name) != 0)
            continue;
        found = 1;
        if (nargc != 1) {
            fprintf(stderr, "foxctl: %s takes no arguments\n", name);
            rv = FOXCTL_USAGE;
        } else {
            rv = simple(&o, plain[i].cmd, NULL, plain[i].human);
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
