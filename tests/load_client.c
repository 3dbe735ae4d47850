/*
 * load_client.c — N concurrent REQ clients x M read requests against foxd:
 * every request must be answered, with its own id, ok:true. Used by
 * test_daemon.sh while foxd trains.
 *
 * usage: load_client URL CLIENTS REQUESTS
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "proto/proto.h"

static const char *url;
static int requests;

typedef struct result {
    int sent, answered, wrong;
    char why[256];
} result;

static void *
client(void *arg)
{
    result *r = arg;
    static const char *const cmds[] = {"status", "isv_read", "nan_flags", "version"};
    nng_socket s;
    int rv;
    if ((rv = nng_req0_open(&s)) != 0 || (rv = nng_dial(s, url, NULL, 0)) != 0) {
        snprintf(r->why, sizeof r->why, "dial: %s", nng_strerror(rv));
        return NULL;
    }
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
    nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    for (int i = 0; i < requests; i++) {
        int64_t id = (int64_t)(uintptr_t)arg % 100000 * 100000 + i;
        char *req = fox_proto_request(id, cmds[i % 4], NULL, NULL);
        char *buf = NULL;
        size_t len = 0;
        r->sent++;
        if ((rv = nng_send(s, req, strlen(req), 0)) != 0 ||
            (rv = nng_recv(s, &buf, &len, NNG_FLAG_ALLOC)) != 0) {
            snprintf(r->why, sizeof r->why, "request %d: %s", i, nng_strerror(rv));
            free(req);
            break;
        }
        free(req);
        fox_reply rep;
        char err[256];
        if (fox_proto_parse_reply(&rep, buf, len, err, sizeof err) == FOX_OK && rep.ok &&
            rep.has_id && rep.id == id)
            r->answered++;
        else
            r->wrong++;
        fox_reply_fini(&rep);
        nng_free(buf, len);
    }
    nng_close(s);
    return NULL;
}

int
main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: load_client URL CLIENTS REQUESTS\n");
        return 2;
    }
    url = argv[1];
    int n = atoi(argv[2]);
    requests = atoi(argv[3]);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    result *res = calloc((size_t)n, sizeof *res);
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, client, &res[i]);
    int sent = 0, answered = 0, wrong = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        sent += res[i].sent;
        answered += res[i].answered;
        wrong += res[i].wrong;
        if (res[i].why[0])
            fprintf(stderr, "client %d: %s\n", i, res[i].why);
    }
    printf("%d clients x %d requests: %d sent, %d answered, %d wrong\n", n, requests, sent,
           answered, wrong);
    free(th);
    free(res);
    return answered == n * requests ? 0 : 1;
}
