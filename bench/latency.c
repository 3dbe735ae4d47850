/*
 * latency — control-plane latency of a running foxd, beside a bare nng
 * REQ/REP echo measured in the same run.
 *
 * 1. A bare echo: a REP thread in this program listens on an ipc socket in
 *    a temp directory and on tcp://127.0.0.1:<free port>; a REQ socket here
 *    sends `{"v":1,"id":N,"cmd":"status"}` and gets the same bytes back.
 * 2. foxd: `status` and `isv_read` (no args: all 171 slots), exactly as in
 *    docs/protocol.md, over the ipc and the tcp URL given, N sequential
 *    requests each after a warm-up, with foxd idle and again while it trains
 *    (this program sends the `run`; the echo is measured in both phases).
 *    The six series of a phase are interleaved request by request, so that
 *    load from other processes falls on the echo and on foxd alike.
 * 3. Training steps/s over fixed windows with and without a client sending
 *    --rate requests/s (status and isv_read alternately, over ipc), in the
 *    order off,on,on,off,... (drift cancels to first order). The rate is
 *    Δtotal_steps / Δ(snapshot time), read from `status` (as_of_step and
 *    age_ms) at both ends of a window, so it includes every step and pause.
 *    With --pid, foxd's CPU time per window is split from /proc into its
 *    serving threads (main = libuv loop, "nng:*") and the rest (trainer,
 *    OpenBLAS workers), and the load client's own CPU time is counted.
 *
 * Round trip = nng_send of the request to nng_recv of the reply, on a REQ
 * socket already connected (dialed synchronously before timing). Output:
 * markdown tables on stdout; progress on stderr. Everything is bounded:
 * every receive times out after 5 s, and a failure exits 1.
 *
 *   latency --ipc URL --tcp URL [-n N] [--warmup N] [--window S] [--pairs P]
 *           [--rate R] [--load-cmd status|isv_read|both] [--steps-per-epoch N]
 *           [--settle S] [--pid FOXD_PID] [--token T] [--no-train]
 *
 * Defaults: -n 2000, --warmup 200 rounds, --window 10 s, --pairs 2 (four
 * windows), --rate 1000, --load-cmd both, --settle 5 s of training before
 * measuring, --steps-per-epoch 1e8 (one epoch for the whole run, so that no
 * evaluation pass falls in a window). foxd must be idle at the start; the
 * run is stopped (`stop`) at the end. bench/latency.sh starts foxd for it.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "common/clock.h"

#define RECV_TIMEOUT_MS 5000

static double
now_us(void)
{
    return fox_mono_s() * 1e6;
}

static void __attribute__((noreturn)) die(const char *what, int rv)
{
    fprintf(stderr, "latency: %s: %s\n", what, rv ? nng_strerror(rv) : "failed");
    exit(1);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *token;
static int64_t next_id = 1;

/* The exact request of docs/protocol.md. */
static int
make_request(char *buf, size_t size, int64_t id, const char *cmd, const char *args)
{
    int n;
    if (token)
        n = snprintf(buf, size, "{\"v\":1,\"id\":%" PRId64 ",\"cmd\":\"%s\"%s%s,\"token\":\"%s\"}",
                     id, cmd, args ? ",\"args\":" : "", args ? args : "", token);
    else
        n = snprintf(buf, size, "{\"v\":1,\"id\":%" PRId64 ",\"cmd\":\"%s\"%s%s}", id, cmd,
                     args ? ",\"args\":" : "", args ? args : "");
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "latency: request too long\n");
        exit(1);
    }
    return n;
}

static nng_socket
req_open(const char *url)
{
    nng_socket s;
    int rv;
    if ((rv = nng_req0_open(&s)) != 0)
        die("nng_req0_open", rv);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, RECV_TIMEOUT_MS);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, RECV_TIMEOUT_MS);
    nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 16u << 20);
    if ((rv = nng_dial(s, url, NULL, 0)) != 0) {
        fprintf(stderr, "latency: dial %s: %s\n", url, nng_strerror(rv));
        exit(1);
    }
    return s;
}

/* One round trip; *reply (nng_free it) and its length; returns µs. */
static double
roundtrip(nng_socket s, const char *req, size_t len, char **reply, size_t *rlen)
{
    int rv;
    double t0 = now_us();
    if ((rv = nng_send(s, (void *)req, len, 0)) != 0)
        die("nng_send", rv);
    if ((rv = nng_recv(s, reply, rlen, NNG_FLAG_ALLOC)) != 0)
        die("nng_recv", rv);
    return now_us() - t0;
}

/* A foxd reply must be ok:true for our id; an echo reply must be our bytes. */
static int
reply_ok(int echo, const char *req, size_t len, const char *rep, size_t rlen, int64_t id)
{
    if (echo)
        return rlen == len && memcmp(req, rep, len) == 0;
    char head[64];
    int n = snprintf(head, sizeof head, "{\"v\":1,\"id\":%" PRId64 ",\"ok\":true", id);
    return rlen >= (size_t)n && memcmp(rep, head, (size_t)n) == 0;
}

/* ------------------------------------------------------------- series */

typedef struct series {
    char name[96];
    int n;
    double p50, p99, max, mean;
    size_t req_bytes, rep_bytes;
} series;

static series results[64];
static int n_results;

static void
summarize(series *r, double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += t[i];
    r->n = n;
    r->mean = sum / n;
    r->p50 = t[(n - 1) / 2];
    int k = (int)((99LL * n + 99) / 100) - 1; /* nearest rank */
    r->p99 = t[k < 0 ? 0 : k];
    r->max = t[n - 1];
}

/* The six series of one phase, measured interleaved: round r sends one
 * request of each series in turn (each waits for its reply), so a burst of
 * load from other processes falls on every series alike. warm rounds are
 * sent first and discarded. */
typedef struct track {
    const char *name;
    nng_socket *s;
    int echo;
    const char *cmd;
} track;

static void
measure_phase(const char *phase, const track *tr, int nt, int n, int warm)
{
    double *t = calloc((size_t)n * (size_t)nt, sizeof *t);
    if (!t)
        die("out of memory", 0);
    series *r = &results[n_results];
    char req[512];
    for (int i = -warm; i < n; i++) {
        for (int k = 0; k < nt; k++) {
            int64_t id = next_id++;
            size_t len = (size_t)make_request(req, sizeof req, id, tr[k].cmd, NULL);
            char *rep;
            size_t rlen;
            double us = roundtrip(*tr[k].s, req, len, &rep, &rlen);
            if (!reply_ok(tr[k].echo, req, len, rep, rlen, id)) {
                fprintf(stderr, "latency: %s: unexpected reply: %.*s\n", tr[k].name,
                        (int)(rlen > 300 ? 300 : rlen), rep);
                exit(1);
            }
            if (i >= 0) {
                t[(size_t)k * (size_t)n + (size_t)i] = us;
                r[k].req_bytes = len;
                r[k].rep_bytes = rlen;
            }
            nng_free(rep, rlen);
        }
    }
    for (int k = 0; k < nt; k++) {
        snprintf(r[k].name, sizeof r[k].name, "%s, %s", tr[k].name, phase);
        summarize(&r[k], t + (size_t)k * (size_t)n, n);
        fprintf(stderr, "  %-34s p50 %7.1f  p99 %7.1f  max %8.1f µs\n", r[k].name, r[k].p50,
                r[k].p99, r[k].max);
    }
    n_results += nt;
    free(t);
}

/* ---------------------------------------------------------- echo server */

static nng_socket echo_sock;

static void *
echo_thread(void *arg)
{
    (void)arg;
    for (;;) {
        char *buf;
        size_t len;
        int rv = nng_recv(echo_sock, &buf, &len, NNG_FLAG_ALLOC);
        if (rv == NNG_ECLOSED)
            return NULL;
        if (rv != 0)
            continue;
        if (nng_send(echo_sock, buf, len, NNG_FLAG_ALLOC) != 0)
            nng_free(buf, len);
    }
}

/* ---------------------------------------------------------- foxd calls */

/* One request; the parsed result object (cJSON_Delete the returned root). */
static cJSON *
call(nng_socket s, const char *cmd, const char *args, cJSON **result, double *t_mid)
{
    char req[1024];
    int64_t id = next_id++;
    size_t len = (size_t)make_request(req, sizeof req, id, cmd, args);
    char *rep;
    size_t rlen;
    double t0 = now_us();
    double us = roundtrip(s, req, len, &rep, &rlen);
    if (t_mid)
        *t_mid = t0 + us / 2;
    cJSON *root = cJSON_ParseWithLength(rep, rlen);
    cJSON *ok = root ? cJSON_GetObjectItemCaseSensitive(root, "ok") : NULL;
    if (!cJSON_IsTrue(ok)) {
        fprintf(stderr, "latency: %s: %.*s\n", cmd, (int)(rlen > 400 ? 400 : rlen), rep);
        exit(1);
    }
    nng_free(rep, rlen);
    *result = cJSON_GetObjectItemCaseSensitive(root, "result");
    return root;
}

static double
num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

typedef struct snap {
    char state[32];
    double as_of_step, t_us; /* t_us: when the snapshot was taken, our clock */
    double daemon_rate;
} snap;

static snap
status(nng_socket s)
{
    cJSON *res;
    double t_mid;
    cJSON *root = call(s, "status", NULL, &res, &t_mid);
    snap sn;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(res, "state");
    snprintf(sn.state, sizeof sn.state, "%s", cJSON_IsString(st) ? st->valuestring : "?");
    sn.as_of_step = num(res, "as_of_step");
    sn.t_us = t_mid - num(res, "age_ms") * 1000.0;
    sn.daemon_rate = num(res, "steps_per_sec");
    cJSON_Delete(root);
    return sn;
}

/* ---------------------------------------------------------- load client */

typedef struct load {
    const char *url;
    double rate;
    atomic_int stop;
    long sent, late;
    double t_us, cpu_us;
    double *lat;
    long lat_cap;
} load;

/* The load client's commands, in turn (--load-cmd). */
static const char *load_cmds[2] = {"status", "isv_read"};
static int n_load_cmds = 2;

static void *
load_thread(void *arg)
{
    load *L = arg;
    nng_socket s = req_open(L->url);
    double period = 1e6 / L->rate, t0 = now_us(), next = t0;
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    char req[512];
    while (!atomic_load(&L->stop)) {
        double now = now_us();
        if (next > now) {
            struct timespec ts = {0, (long)((next - now) * 1000)};
            nanosleep(&ts, NULL);
        } else if (now - next > 10 * period) {
            L->late++; /* fell behind by 10 periods: do not burst to catch up */
            next = now;
        }
        int64_t id = 1000000000 + L->sent;
        size_t len =
            (size_t)make_request(req, sizeof req, id, load_cmds[L->sent % n_load_cmds], NULL);
        char *rep;
        size_t rlen;
        double us = roundtrip(s, req, len, &rep, &rlen);
        if (!reply_ok(0, req, len, rep, rlen, id)) {
            fprintf(stderr, "latency: load client: unexpected reply\n");
            exit(1);
        }
        nng_free(rep, rlen);
        if (L->sent < L->lat_cap)
            L->lat[L->sent] = us;
        L->sent++;
        next += period;
    }
    L->t_us = now_us() - t0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    L->cpu_us = (double)(c1.tv_sec - c0.tv_sec) * 1e6 + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-3;
    nng_close(s);
    return NULL;
}

/* ---------------------------------------------------------------- main */

/* utime + stime in seconds of /proc/PID[/task/TID]/stat, or -1. */
static double
stat_cpu_s(const char *path)
{
    char buf[1024];
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    /* after ")": fields 3-13, then utime and stime (proc(5)) */
    if (!p ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds of foxd's threads in two groups: serving (the main thread, which
 * runs the libuv loop, and nng's own threads, named "nng:*") and training
 * (every other thread: the trainer, OpenBLAS workers, the ipc self-probe). */
typedef struct tcpu {
    double serving, training;
} tcpu;

static int
threads_cpu(long pid, tcpu *out)
{
    char path[96], comm[64];
    snprintf(path, sizeof path, "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    out->serving = out->training = 0;
    if (!d)
        return -1;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        long tid = atol(e->d_name);
        snprintf(path, sizeof path, "/proc/%ld/task/%ld/stat", pid, tid);
        double c = stat_cpu_s(path);
        if (c < 0)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/task/%ld/comm", pid, tid);
        FILE *f = fopen(path, "r");
        comm[0] = 0;
        if (f) {
            if (!fgets(comm, sizeof comm, f))
                comm[0] = 0;
            fclose(f);
        }
        if (tid == pid || strncmp(comm, "nng:", 4) == 0)
            out->serving += c;
        else
            out->training += c;
        n++;
    }
    closedir(d);
    return n;
}

static void
sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void
loadavg(char *buf, size_t size)
{
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = 0;
    if (f) {
        if (!fgets(buf, (int)size, f))
            buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
}

static void
usage(void)
{
    fprintf(
        stderr,
        "usage: latency --ipc URL --tcp URL [-n N] [--warmup N] [--window S] [--pairs P]\n"
        "               [--rate R] [--steps-per-epoch N] [--settle S] [--token T] [--no-train]\n"
        "               [--pid FOXD_PID] [--load-cmd status|isv_read|both]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {{"ipc", required_argument, 0, 'i'},
                                         {"tcp", required_argument, 0, 't'},
                                         {"n", required_argument, 0, 'n'},
                                         {"warmup", required_argument, 0, 'w'},
                                         {"window", required_argument, 0, 'W'},
                                         {"pairs", required_argument, 0, 'p'},
                                         {"rate", required_argument, 0, 'r'},
                                         {"steps-per-epoch", required_argument, 0, 'S'},
                                         {"settle", required_argument, 0, 's'},
                                         {"token", required_argument, 0, 'k'},
                                         {"no-train", no_argument, 0, 'x'},
                                         {"pid", required_argument, 0, 'P'},
                                         {"load-cmd", required_argument, 0, 'L'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *ipc = NULL, *tcp = NULL;
    int n = 2000, warm = 200, pairs = 2, train = 1, c;
    long spe = 100000000, pid = 0;
    double window = 10, rate = 1000, settle = 5;
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
            ipc = optarg;
            break;
        case 't':
            tcp = optarg;
            break;
        case 'n':
            n = atoi(optarg);
            break;
        case 'w':
            warm = atoi(optarg);
            break;
        case 'W':
            window = atof(optarg);
            break;
        case 'p':
            pairs = atoi(optarg);
            break;
        case 'r':
            rate = atof(optarg);
            break;
        case 'S':
            spe = atol(optarg);
            break;
        case 's':
            settle = atof(optarg);
            break;
        case 'k':
            token = optarg;
            break;
        case 'x':
            train = 0;
            break;
        case 'P':
            pid = atol(optarg);
            break;
        case 'L':
            if (!strcmp(optarg, "both"))
                break;
            if (strcmp(optarg, "status") && strcmp(optarg, "isv_read"))
                usage();
            load_cmds[0] = optarg;
            n_load_cmds = 1;
            break;
        default:
            usage();
        }
    }
    if (!ipc || !tcp || n < 1 || warm < 0 || window <= 0 || pairs < 1 || rate <= 0 || spe < 1)
        usage();

    char la0[128], la1[128];
    loadavg(la0, sizeof la0);

    /* The echo server: one REP socket on an ipc path and on a free loopback tcp port. */
    char dir[] = "/tmp/foxlat.XXXXXX", echo_ipc[128], echo_tcp[64];
    if (!mkdtemp(dir))
        die("mkdtemp", 0);
    snprintf(echo_ipc, sizeof echo_ipc, "ipc://%s/echo.sock", dir);
    int rv;
    nng_listener lt = NNG_LISTENER_INITIALIZER;
    if ((rv = nng_rep0_open(&echo_sock)) != 0 || (rv = nng_listen(echo_sock, echo_ipc, NULL, 0)) ||
        (rv = nng_listen(echo_sock, "tcp://127.0.0.1:0", &lt, 0)) != 0)
        die("echo listen", rv);
    int port = 0;
    if ((rv = nng_listener_get_int(lt, NNG_OPT_TCP_BOUND_PORT, &port)) != 0)
        die("echo port", rv);
    snprintf(echo_tcp, sizeof echo_tcp, "tcp://127.0.0.1:%d", port);
    pthread_t et;
    pthread_create(&et, NULL, echo_thread, NULL);

    nng_socket e_ipc = req_open(echo_ipc), e_tcp = req_open(echo_tcp);
    nng_socket f_ipc = req_open(ipc), f_tcp = req_open(tcp);

    snap s0 = status(f_ipc);
    if (train && strcmp(s0.state, "idle") != 0) {
        fprintf(stderr, "latency: foxd is %s, not idle\n", s0.state);
        return 1;
    }
    fprintf(stderr, "phase 1: foxd %s (n=%d, warm-up %d)\n", s0.state, n, warm);
    const track tracks[] = {
        {"echo ipc", &e_ipc, 1, "status"},        {"echo tcp", &e_tcp, 1, "status"},
        {"foxd status ipc", &f_ipc, 0, "status"}, {"foxd isv_read ipc", &f_ipc, 0, "isv_read"},
        {"foxd status tcp", &f_tcp, 0, "status"}, {"foxd isv_read tcp", &f_tcp, 0, "isv_read"},
    };
    const int nt = (int)(sizeof tracks / sizeof tracks[0]);
    measure_phase("foxd idle", tracks, nt, n, warm);

    double win_rate[64], win_sent[64], win_dsps[64], win_tr[64], win_oth[64];
    int win_on[64], n_win = 0;
    load L = {0};
    if (train) {
        char args[128];
        cJSON *res;
        snprintf(args, sizeof args, "{\"folds\":[0],\"epochs\":1,\"steps_per_epoch\":%ld}", spe);
        cJSON_Delete(call(f_ipc, "run", args, &res, NULL));
        double t0 = now_us();
        snap a;
        do {
            sleep_s(0.1);
            a = status(f_ipc);
            if (now_us() - t0 > 60e6) {
                fprintf(stderr, "latency: training did not start within 60 s (%s)\n", a.state);
                return 1;
            }
        } while (strcmp(a.state, "training") != 0 || a.as_of_step < 1);
        sleep_s(settle);
        a = status(f_ipc);
        fprintf(stderr, "phase 2: foxd training (%.0f steps/s by its last chunk)\n", a.daemon_rate);
        measure_phase("foxd training", tracks, nt, n, warm);

        fprintf(stderr, "phase 3: steps/s, %d x %.0f s windows, client at %.0f req/s\n", 2 * pairs,
                window, rate);
        L.url = ipc;
        L.rate = rate;
        L.lat_cap = (long)(rate * window * pairs * 1.5) + 1000;
        L.lat = calloc((size_t)L.lat_cap, sizeof *L.lat);
        long lat_n = 0;
        for (int p = 0; p < pairs && n_win < 62; p++) {
            for (int j = 0; j < 2; j++) {
                int on = (p % 2 == 0) ? j : !j; /* off,on, on,off, ... */
                load Lw = {.url = L.url,
                           .rate = L.rate,
                           .lat = L.lat + lat_n,
                           .lat_cap = L.lat_cap - lat_n};
                atomic_init(&Lw.stop, 0);
                pthread_t lth;
                if (on)
                    pthread_create(&lth, NULL, load_thread, &Lw);
                static tcpu c0, c1;
                int have_cpu = pid && threads_cpu(pid, &c0) > 0;
                double w0 = now_us();
                snap b = status(f_ipc);
                sleep_s(window);
                snap e = status(f_ipc);
                have_cpu = have_cpu && threads_cpu(pid, &c1) > 0;
                double w1 = now_us();
                if (on) {
                    atomic_store(&Lw.stop, 1);
                    pthread_join(lth, NULL);
                    lat_n += Lw.sent < Lw.lat_cap ? Lw.sent : Lw.lat_cap;
                    L.sent += Lw.sent;
                    L.cpu_us += Lw.cpu_us;
                    L.late += Lw.late;
                }
                if (strcmp(b.state, "training") || strcmp(e.state, "training")) {
                    fprintf(stderr, "latency: foxd left training (%s)\n", e.state);
                    return 1;
                }
                win_on[n_win] = on;
                win_rate[n_win] = (e.as_of_step - b.as_of_step) / ((e.t_us - b.t_us) / 1e6);
                win_sent[n_win] = on ? Lw.sent / (Lw.t_us / 1e6) : 0;
                win_dsps[n_win] = e.daemon_rate;
                win_tr[n_win] = win_oth[n_win] = -1;
                if (have_cpu) {
                    win_tr[n_win] = (c1.training - c0.training) / ((w1 - w0) / 1e6);
                    win_oth[n_win] = (c1.serving - c0.serving) / ((w1 - w0) / 1e6);
                }
                fprintf(stderr, "  window %d client %-3s %7.1f steps/s\n", n_win + 1,
                        on ? "on" : "off", win_rate[n_win]);
                n_win++;
            }
        }
        series *r = &results[n_results++];
        snprintf(r->name, sizeof r->name, "load client ipc (%ld %s at %.0f/s), foxd training",
                 lat_n, n_load_cmds == 2 ? "status/isv_read" : load_cmds[0], rate);
        if (lat_n > 0)
            summarize(r, L.lat, (int)lat_n);
        else
            n_results--;
        cJSON *res2;
        cJSON_Delete(call(f_ipc, "stop", NULL, &res2, NULL));
    }
    loadavg(la1, sizeof la1);

    nng_close(e_ipc);
    nng_close(e_tcp);
    nng_close(f_ipc);
    nng_close(f_tcp);
    nng_close(echo_sock);
    pthread_join(et, NULL);
    char path[160];
    snprintf(path, sizeof path, "%s/echo.sock", dir);
    unlink(path);
    rmdir(dir);

    /* ------------------------------------------------------------ tables */
    printf("| round trip (%d sequential requests each, interleaved) | req B | reply B | p50 µs | "
           "p99 µs | max µs | "
           "p99 / echo p99 |\n|---|---:|---:|---:|---:|---:|---:|\n",
           n);
    for (int i = 0; i < n_results; i++) {
        series *r = &results[i];
        /* The echo of the same transport and phase. */
        const char *tp = strstr(r->name, " tcp") ? "tcp" : "ipc";
        const char *ph = strstr(r->name, "training") ? "training" : "idle";
        double ref = 0;
        for (int j = 0; j < n_results; j++)
            if (!strncmp(results[j].name, "echo ", 5) && strstr(results[j].name, tp) &&
                strstr(results[j].name, ph))
                ref = results[j].p99;
        if (r->req_bytes)
            printf("| %s | %zu | %zu ", r->name, r->req_bytes, r->rep_bytes);
        else
            printf("| %s | — | — ", r->name);
        printf("| %.0f | %.0f | %.0f | ", r->p50, r->p99, r->max);
        if (strncmp(r->name, "echo ", 5) && ref > 0)
            printf("%.2f× |\n", r->p99 / ref);
        else
            printf("— |\n");
    }
    if (train && n_win > 0) {
        double son = 0, soff = 0;
        int non = 0, noff = 0;
        double ton = 0, toff = 0, oon = 0, ooff = 0;
        printf("\n| window (%.0f s) | client | steps/s (Δas_of_step / Δt) | foxd's last-chunk "
               "steps/s | client req/s | training threads CPU s/s | training CPU ms/step | "
               "serving threads CPU s/s |\n|---:|---|---:|---:|---:|---:|---:|---:|\n",
               window);
        for (int i = 0; i < n_win; i++) {
            printf("| %d | %s | %.1f | %.1f | %.0f | ", i + 1, win_on[i] ? "on" : "off",
                   win_rate[i], win_dsps[i], win_sent[i]);
            if (win_tr[i] >= 0)
                printf("%.2f | %.2f | %.3f |\n", win_tr[i], 1000 * win_tr[i] / win_rate[i],
                       win_oth[i]);
            else
                printf("— | — | — |\n");
            if (win_on[i])
                son += win_rate[i], ton += win_tr[i] / win_rate[i], oon += win_oth[i], non++;
            else
                soff += win_rate[i], toff += win_tr[i] / win_rate[i], ooff += win_oth[i], noff++;
        }
        double m_on = son / non, m_off = soff / noff;
        printf("\nsteps/s: %.1f without the client, %.1f with it (%+.2f %%); client: %ld "
               "requests (%s), %ld times fell 10 periods behind, %.0f µs of its own CPU per "
               "request\n",
               m_off, m_on, 100.0 * (m_on - m_off) / m_off, L.sent,
               n_load_cmds == 2 ? "status and isv_read in turn" : load_cmds[0], L.late,
               L.sent ? L.cpu_us / (double)L.sent : 0);
        if (pid && win_tr[0] >= 0)
            printf("foxd training threads (trainer + OpenBLAS workers): %.2f ms of CPU per step "
                   "without the client, %.2f with it (%+.2f %%); serving threads (libuv loop + "
                   "nng): %.3f CPU s/s without, %.3f with, i.e. %.0f µs of CPU per request\n",
                   1000 * toff / noff, 1000 * ton / non,
                   100.0 * (ton / non - toff / noff) / (toff / noff), ooff / noff, oon / non,
                   1e6 * (oon / non - ooff / noff) / rate);
    }
    printf("\nload average (/proc/loadavg) before: %s; after: %s\n", la0, la1);
    free(L.lat);
    return 0;
}
