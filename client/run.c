/*
 * run.c — run and start-fold, and the wait for their op. See run.h.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/print.h"
#include "client/run.h"
#include "common/clock.h"
#include "proto/table.h"

/*
 * The op's record in status: 0 running (or unknown), 1 done, else the exit
 * status for its failure. Fills *folds (owned) with the run's folds_done.
 */
static int
op_from_status(foxctl_opts *o, int64_t op, cJSON **folds, char *msg, size_t len)
{
    fox_reply rep;
    int state = 0;
    if (foxctl_ask(o, "status", NULL, &rep) != FOXCTL_OK)
        return FOXCTL_NODAEMON;
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(rep.result, "ops");
    for (const cJSON *it = ops ? ops->child : NULL; it; it = it->next) {
        if (foxctl_jnum(it, "op_id", 0) != (double)op)
            continue;
        const char *st = foxctl_jstr(it, "state", "running");
        snprintf(msg, len, "%s", foxctl_jstr(it, "message", ""));
        state = !strcmp(st, "done")     ? 1
                : !strcmp(st, "halted") ? FOXCTL_HALTED
                : !strcmp(st, "failed") ? FOXCTL_EREPLY
                                        : 0;
    }
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(rep.result, "run");
    if (folds && foxctl_jnum(run, "op_id", 0) == (double)op) {
        cJSON_Delete(*folds);
        *folds = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(run, "folds_done"), 1);
    }
    fox_reply_fini(&rep);
    return state;
}

/* What the bar shows besides the events: the backend and the folds in the run, from status. */
static void
progress_init(foxctl_opts *o, foxctl_progress *p)
{
    fox_reply rep;
    p->walk_start_ms = fox_mono_ms();
    if (foxctl_ask(o, "status", NULL, &rep) != FOXCTL_OK)
        return;
    const cJSON *eng = cJSON_GetObjectItemCaseSensitive(rep.result, "engine");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(rep.result, "run");
    snprintf(p->backend, sizeof p->backend, "%s", foxctl_jstr(eng, "backend", ""));
    const cJSON *folds = cJSON_GetObjectItemCaseSensitive(run, "folds");
    if (cJSON_IsArray(folds))
        p->n_folds = cJSON_GetArraySize(folds);
    fox_reply_fini(&rep);
}

/*
 * With --json, the op's end as status told it, when its op_done event never
 * came (a PUB socket drops what a slow subscriber cannot take): a line of
 * the op_done event's shape, marked "source":"status", so that a program
 * reading the events learns the outcome and the folds either way.
 */
static void
print_op_done_from_status(int64_t op, int st, const cJSON *folds)
{
    cJSON *ev = cJSON_CreateObject(), *data = cJSON_AddObjectToObject(ev, "data");
    cJSON_AddStringToObject(ev, "event", "op_done");
    cJSON_AddStringToObject(ev, "source", "status");
    cJSON_AddNumberToObject(data, "op_id", (double)op);
    cJSON_AddBoolToObject(data, "ok", st == 1);
    cJSON_AddBoolToObject(data, "halted", st == FOXCTL_HALTED);
    cJSON *result = cJSON_AddObjectToObject(data, "result");
    cJSON_AddItemToObject(result, "folds",
                          folds ? cJSON_Duplicate(folds, 1) : cJSON_CreateArray());
    foxctl_print_json(ev);
    cJSON_Delete(ev);
}

/*
 * Wait for op to finish: events first, status every few seconds (events can
 * be dropped). Returns the exit status; *folds gets the run's fold objects.
 */
int
foxctl_wait_op(foxctl_opts *o, nng_socket sub, int64_t op, cJSON **folds)
{
    foxctl_progress p = {.tty = isatty(STDERR_FILENO)};
    char msg[512] = "";
    if (p.tty && !o->json)
        progress_init(o, &p);
    int64_t last_poll = 0;
    for (;;) {
        fox_event ev;
        if (foxctl_interrupted)
            return FOXCTL_INTERRUPTED;
        int rv = foxctl_sub_next(sub, 500, &ev);
        if (rv == FOXCTL_OK) {
            foxctl_progress_gap(&p, &ev);
            if (!o->json)
                foxctl_show_event(&p, &ev);
            else
                foxctl_print_json(ev.doc);
            int mine =
                !strcmp(ev.type, "op_done") && foxctl_jnum(ev.data, "op_id", -1) == (double)op;
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
                foxctl_progress_clear(&p);
                return ok ? FOXCTL_OK : halted ? FOXCTL_HALTED : FOXCTL_EREPLY;
            }
            fox_event_fini(&ev);
        }
        int64_t now = fox_mono_ms();
        if (now - last_poll >= 3000) {
            last_poll = now;
            int st = op_from_status(o, op, folds, msg, sizeof msg);
            if (st == FOXCTL_NODAEMON)
                return st;
            if (st != 0) {
                foxctl_progress_clear(&p);
                if (o->json)
                    print_op_done_from_status(op, st, folds ? *folds : NULL);
                if (st != 1)
                    fprintf(stderr, "foxctl: op %lld: %s\n", (long long)op, msg);
                return st == 1 ? FOXCTL_OK : st;
            }
        }
    }
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
        if (!foxctl_parse_int(tok, 0, 30, &k)) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, cJSON_CreateNumber(k));
    }
    return a;
}

static int cmd_run_spawn(foxctl_opts *o, int argc, char **argv);

/* run and start-fold: submit, then wait for the op unless --detach. */
int
foxctl_cmd_run(foxctl_opts *o, int argc, char **argv)
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
        if (argc < 2 || !foxctl_parse_int(argv[1], 0, 30, &n)) {
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
            if (!foxctl_parse_int(optarg, 1, 1000000000, &n)) {
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
        if ((rv = foxctl_events_url(o)) != FOXCTL_OK) {
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
    rv = foxctl_ask(o, start_fold ? "start_fold" : "run", args, &rep);
    if (rv != FOXCTL_OK)
        goto out;
    int64_t op = (int64_t)foxctl_jnum(rep.result, "op_id", 0);
    char run_dir[1024];
    snprintf(run_dir, sizeof run_dir, "%s", foxctl_jstr(rep.result, "run_dir", ""));
    if (o->json)
        foxctl_print_reply(&rep);
    else
        fprintf(stderr, "op %lld accepted; run directory %s\n", (long long)op, run_dir);
    fox_reply_fini(&rep);
    if (detach)
        goto out;

    cJSON *folds = NULL;
    rv = foxctl_wait_op(o, sub, op, &folds);
    if (rv == FOXCTL_INTERRUPTED) {
        fprintf(stderr,
                "foxctl: foxctl_interrupted: the run goes on in foxd (foxctl stop ends it)\n");
    } else if (!o->json && folds && cJSON_GetArraySize(folds) > 0) {
        fox_table_folds(stdout, folds);
        fox_table_times(stdout, folds, NULL);
    }
    if (!o->json && rv != FOXCTL_INTERRUPTED && run_dir[0])
        fprintf(stderr, "run directory %s\n", run_dir);
    cJSON_Delete(folds);
out:
    if (have_sub)
        foxctl_sub_release(sub);
    return rv;
}

/* Wait for a freshly spawned foxd to answer (it loads its data first). */
static int
wait_ready(foxctl_opts *o, pid_t pid, const char *dir)
{
    for (int i = 0; i < 6000 && !foxctl_interrupted; i++) {
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
    return foxctl_interrupted ? FOXCTL_INTERRUPTED : FOXCTL_NODAEMON;
}

static int
cmd_run_spawn(foxctl_opts *o, int argc, char **argv)
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
    /* The record goes under the working directory, not the private foxd's temporary one. */
    char cwd[800], root[832];
    if (!getcwd(cwd, sizeof cwd)) {
        fprintf(stderr, "foxctl: the working directory: %s\n", strerror(errno));
        return FOXCTL_USAGE;
    }
    snprintf(root, sizeof root, "run.root=%s/runs", cwd);
    char **fargv = calloc((size_t)(argc - i) + 3, sizeof *fargv);
    if (!fargv)
        return FOXCTL_USAGE;
    fargv[0] = "--set";
    fargv[1] = root;
    for (int k = i; k < argc; k++)
        fargv[2 + k - i] = argv[k];
    rv = foxctl_spawn(&pid, dir, sizeof dir, o->url, o->pub, sizeof o->url, fargv, argc - i + 2,
                      err, sizeof err);
    free(fargv);
    if (rv != FOXCTL_OK) {
        fprintf(stderr, "foxctl: %s\n", err);
        return rv;
    }
    fprintf(stderr, "foxctl: private foxd (pid %d) in %s\n", (int)pid, dir);
    rv = wait_ready(o, pid, dir);
    if (rv == FOXCTL_OK)
        rv = foxctl_cmd_run(o, run_argc, run_argv);

    /* Stop it whatever happened: no checkpoint; the sockets' directory goes away, the
     * run directory stays. */
    fox_reply rep;
    cJSON *args = cJSON_CreateObject();
    cJSON_AddFalseToObject(args, "checkpoint");
    if (foxctl_ask(o, "shutdown", args, &rep) == FOXCTL_OK)
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
    if (rv == FOXCTL_INTERRUPTED)
        fprintf(stderr, "foxctl: interrupted; the spawned foxd (pid %d) was stopped and %s removed\n",
                (int)pid, dir);
    return rv;
}
