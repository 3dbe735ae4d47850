/* metrics_http.c — GET /metrics on nng's HTTP server (see metrics_http.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "common/error.h"
#include "common/log.h"
#include "daemon/metrics_http.h"

/* Prometheus' text exposition format. */
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct fox_metrics_http {
    nng_http_server *server;
    nng_http_handler *handler;
    pthread_mutex_t lock;
    char *text; /* the latest published text */
};

static void
serve(nng_aio *aio)
{
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    fox_metrics_http *m = nng_http_handler_get_data(h);
    nng_http_res *res;
    int rv;
    if ((rv = nng_http_res_alloc(&res)) != 0) {
        nng_aio_finish(aio, rv);
        return;
    }
    pthread_mutex_lock(&m->lock);
    const char *text = m->text ? m->text : "";
    rv = nng_http_res_copy_data(res, text, strlen(text));
    pthread_mutex_unlock(&m->lock);
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Content-Type", CONTENT_TYPE);
    if (rv != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

int
fox_metrics_http_start(fox_metrics_http **out, const char *url, char *err, size_t errlen)
{
    nng_url *u = NULL;
    int rv;
    fox_metrics_http *m = calloc(1, sizeof *m);
    *out = NULL;
    if (!m)
        return fox_errf(err, errlen, FOX_ENOMEM, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    if (strncmp(url, "http://", 7) != 0 || (rv = nng_url_parse(&u, url)) != 0) {
        free(m);
        return fox_errf(err, errlen, FOX_EINVAL, "daemon.metrics_listen %s: want http://HOST:PORT",
                        url);
    }
    rv = nng_http_server_hold(&m->server, u);
    nng_url_free(u);
    if (rv == 0 && (rv = nng_http_handler_alloc(&m->handler, "/metrics", serve)) == 0) {
        nng_http_handler_set_data(m->handler, m, NULL);
        if ((rv = nng_http_server_add_handler(m->server, m->handler)) != 0)
            nng_http_handler_free(m->handler);
    }
    if (rv == 0)
        rv = nng_http_server_start(m->server);
    if (rv != 0) {
        if (m->server)
            nng_http_server_release(m->server);
        free(m);
        return fox_errf(err, errlen, FOX_EIO, "daemon.metrics_listen %s: %s", url,
                        nng_strerror(rv));
    }
    fox_log(FOX_LOG_INFO, "serving Prometheus metrics at %s/metrics", url);
    *out = m;
    return FOX_OK;
}

void
fox_metrics_http_publish(fox_metrics_http *m, const char *text)
{
    char *copy = strdup(text);
    if (!copy)
        return; /* out of memory: scrapes keep the previous text */
    pthread_mutex_lock(&m->lock);
    free(m->text);
    m->text = copy;
    pthread_mutex_unlock(&m->lock);
}

void
fox_metrics_http_stop(fox_metrics_http *m)
{
    if (!m)
        return;
    /* Stop waits for handlers in progress; release frees the handler with the server. */
    nng_http_server_stop(m->server);
    nng_http_server_release(m->server);
    free(m->text);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
