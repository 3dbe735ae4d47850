/*
 * hostile — what clients sending the worst request they can cost everyone
 * else: a training foxd's `status` requests/s (one client, sequential) and
 * its training steps/s, in windows without and with K hostile clients that
 * send, as fast as their replies come back, an unauthenticated request of
 * N distinct keys (about 10 bytes each: 5,800 keys make 58 KB, inside the
 * 64 KiB limit).
 *
 * The windows run in the order off,on,on,off,... so that drift cancels to
 * first order. Steps/s is Δas_of_step / Δ(snapshot time) from `status` at
 * both ends of a window, as in bench/latency.c. bench/hostile.sh starts
 * foxd, runs this and prints the machine's load average before and after,
 * since the figures depend on it.
 *
 *   hostile --tcp URL --ipc URL --token T [--clients K] [--keys N]
 *           [--shape top|args] [--key-pad B] [--window S] [--pairs P]
 *           [--steps-per-epoch N]
 *
 * --shape top puts the keys beside "cmd":"config_set" at the top of the
 * request, args puts them in args.values; --key-pad makes each key B bytes
 * longer (fewer, longer keys fill the same size). foxd must be started with a
 * tcp:// listener for --tcp (the hostile clients and the status client use
 * it) and ipc:// for --ipc (the `run` is sent there with the token). Output:
 * a markdown table on stdout.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "common/clock.h"

#define RECV_TIMEOUT_MS 10000
#define MAX_CLIENTS     64

static const char *tcp_url, *ipc_url, *token = "";
static int n_clients = 4, n_keys = 5800, window_s = 10, pairs = 2, steps_per_epoch = 2000;
static int shape_args, key_pad;
static char *worst;
static size_t worst_len;
static atomic_int hostile_on, quit;
static atomic_long hostile_sent;

static void
die(const char *what, int rv)
{
    fprintf(stderr, "hostile: %s: %s\n", what, rv ? nng_strerror(rv) : "failed");
    exit(1);
}

static nng_socket
dial(const char *url)
{
    nng_socket s;
    int rv;
    if ((rv = nng_req0_open(&s)) != 0 || (rv = nng_dial(s, url, NULL, 0)) != 0)
        die(url, rv);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, RECV_TIMEOUT_MS);
    nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    return s;
}

/* Send text, return the reply's document (the caller deletes it). */
static cJSON *
call(nng_socket s, const char *text, size_t len)
{
    char *reply = NULL;
    size_t rlen = 0;
    int rv;
    if ((rv = nng_send(s, (void *)text, len, 0)) != 0 ||
        (rv = nng_recv(s, &reply, &rlen, NNG_FLAG_ALLOC)) != 0)
        die("request", rv);
    cJSON *doc = cJSON_ParseWithLength(reply, rlen);
    nng_free(reply, rlen);
    if (!doc)
        die("reply is not JSON", 0);
    return doc;
}

static void
build_worst(void)
{
    static char pad[1024];
    size_t cap = (size_t)n_keys * (16 + (size_t)key_pad) + 256, n;
    memset(pad, 'x', sizeof pad);
    worst = malloc(cap);
    if (!worst)
        die("out of memory", 0);
    n = (size_t)snprintf(worst, cap, "{\"v\":1,\"id\":1,\"cmd\":\"config_set\"%s",
                         shape_args ? ",\"args\":{\"values\":{" : "");
    for (int i = 0; i < n_keys; i++)
        n += (size_t)snprintf(worst + n, cap - n, "%s\"%.*sk%04d\":1", (i || !shape_args) ? "," : "",
                              key_pad, pad, i);
    n += (size_t)snprintf(worst + n, cap - n, "%s}", shape_args ? "}}" : "");
    worst_len = n;
}

static void *
hostile_main(void *arg)
{
    (void)arg;
    nng_socket s = dial(tcp_url);
    while (!atomic_load(&quit)) {
        if (!atomic_load(&hostile_on)) {
            usleep(10000);
            continue;
        }
        cJSON_Delete(call(s, worst, worst_len));
        atomic_fetch_add(&hostile_sent, 1);
    }
    nng_close(s);
    return NULL;
}

typedef struct snap {
    double as_of_step, t; /* t: when the trainer's snapshot was taken, our clock */
} snap;

static snap
status_snap(nng_socket s)
{
    static const char req[] = "{\"v\":1,\"id\":2,\"cmd\":\"status\"}";
    double t0 = fox_mono_s();
    cJSON *doc = call(s, req, sizeof req - 1);
    double t1 = fox_mono_s();
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(doc, "result");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(res, "as_of_step");
    const cJSON *age = cJSON_GetObjectItemCaseSensitive(res, "age_ms");
    if (!cJSON_IsNumber(step) || !cJSON_IsNumber(age))
        die("status without as_of_step and age_ms", 0);
    snap sn = {step->valuedouble, (t0 + t1) / 2 - age->valuedouble / 1000};
    cJSON_Delete(doc);
    return sn;
}

static int
usage(void)
{
    fprintf(stderr, "usage: hostile --tcp URL --ipc URL --token T [--clients K] [--keys N] "
                    "[--shape top|args] [--key-pad B] [--window S] [--pairs P] "
                    "[--steps-per-epoch N]\n");
    return 2;
}

int
main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        if (!strcmp(a, "--tcp"))
            tcp_url = v;
        else if (!strcmp(a, "--ipc"))
            ipc_url = v;
        else if (!strcmp(a, "--token"))
            token = v;
        else if (!strcmp(a, "--clients"))
            n_clients = atoi(v);
        else if (!strcmp(a, "--keys"))
            n_keys = atoi(v);
        else if (!strcmp(a, "--shape"))
            shape_args = !strcmp(v, "args");
        else if (!strcmp(a, "--key-pad"))
            key_pad = atoi(v);
        else if (!strcmp(a, "--window"))
            window_s = atoi(v);
        else if (!strcmp(a, "--pairs"))
            pairs = atoi(v);
        else if (!strcmp(a, "--steps-per-epoch"))
            steps_per_epoch = atoi(v);
        else
            return usage();
        i++;
    }
    if (!tcp_url || !ipc_url || n_clients < 1 || n_clients > MAX_CLIENTS || n_keys < 1 ||
        key_pad < 0 || key_pad > 1024 || window_s < 1 || pairs < 1)
        return usage();
    build_worst();

    char run[512];
    nng_socket ctl = dial(ipc_url);
    snprintf(run, sizeof run,
             "{\"v\":1,\"id\":3,\"cmd\":\"run\",\"args\":{\"epochs\":1000000,"
             "\"steps_per_epoch\":%d},\"token\":\"%s\"}",
             steps_per_epoch, token);
    cJSON *r = call(ctl, run, strlen(run));
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")))
        die("run refused", 0);
    cJSON_Delete(r);
    nng_socket probe = dial(tcp_url);
    snap a;
    do {
        sleep(1);
        a = status_snap(probe);
    } while (a.as_of_step < 1);

    pthread_t th[MAX_CLIENTS];
    for (int i = 0; i < n_clients; i++)
        pthread_create(&th[i], NULL, hostile_main, NULL);
    printf("hostile request: %zu bytes, %d keys (%s), %d clients over %s\n", worst_len, n_keys,
           shape_args ? "args.values" : "top level", n_clients, tcp_url);
    printf("\n");
    printf("| window (%d s) | hostile clients | status req/s | training steps/s | hostile req/s |\n",
           window_s);
    printf("|---|---|---|---|---|\n");
    double sum[2][3] = {{0}};
    for (int w = 0; w < 2 * pairs; w++) {
        int on = (w % 4 == 1 || w % 4 == 2);
        atomic_store(&hostile_on, on);
        usleep(500000); /* let the hostile clients start or stop */
        long h0 = atomic_load(&hostile_sent);
        snap b = status_snap(probe);
        double t0 = fox_mono_s(), t1;
        long n = 0;
        static const char req[] = "{\"v\":1,\"id\":4,\"cmd\":\"status\"}";
        while ((t1 = fox_mono_s()) - t0 < window_s) {
            cJSON_Delete(call(probe, req, sizeof req - 1));
            n++;
        }
        snap e = status_snap(probe);
        long h1 = atomic_load(&hostile_sent);
        double rps = (double)n / (t1 - t0), sps = (e.as_of_step - b.as_of_step) / (e.t - b.t);
        double hps = (double)(h1 - h0) / (t1 - t0);
        printf("| %d | %s | %.0f | %.1f | %.0f |\n", w + 1, on ? "on" : "off", rps, sps, hps);
        fflush(stdout);
        sum[on][0] += rps;
        sum[on][1] += sps;
        sum[on][2] += hps;
    }
    atomic_store(&quit, 1);
    for (int i = 0; i < n_clients; i++)
        pthread_join(th[i], NULL);
    printf("| mean | off | %.0f | %.1f | |\n", sum[0][0] / pairs, sum[0][1] / pairs);
    printf("| mean | on | %.0f | %.1f | %.0f |\n", sum[1][0] / pairs, sum[1][1] / pairs,
           sum[1][2] / pairs);
    printf("\nstatus req/s %.0f -> %.0f, training steps/s %+.0f %%\n", sum[0][0] / pairs,
           sum[1][0] / pairs, 100.0 * (sum[1][1] / sum[0][1] - 1));
    nng_close(probe);
    nng_close(ctl);
    free(worst);
    return 0;
}
