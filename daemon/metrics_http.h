/*
 * metrics_http.h — the opt-in Prometheus endpoint of foxd (internal to
 * daemon/): GET /metrics over HTTP/1.1 at daemon.metrics_listen (an
 * http:// URL on loopback unless daemon.allow_insecure_remote), served on
 * the daemon's libuv loop.
 *
 * It is a small server of its own rather than nng's because a listener
 * facing other local users must bound what they can hold: nng 1.5.2's HTTP
 * server accepts every connection and keeps a silent or slow one open for
 * as long as its peer likes. Here every connection counts against a cap
 * (the listener's share of the descriptors), and each has
 * daemon.metrics_timeout_ms from its accept to send its request and take
 * the reply; then it is closed. A connection beyond the cap is left in the
 * kernel's accept queue, holding no descriptor of foxd's, until one
 * closes. Every reply says Connection: close; a request line and headers
 * longer than 8 KiB get 431, a malformed request 400, any other path 404,
 * a method other than GET or HEAD on /metrics 405.
 *
 * What it does not do: keep-alive, request bodies, chunked encoding, TLS
 * or authentication.
 *
 * Threads: the loop thread alone, for every call and callback. The loop
 * publishes the text (the same as the textfile's) every second, and a
 * scrape gets a copy of the latest, so a scrape never touches the trainer.
 */
#ifndef FOX_DAEMON_METRICS_HTTP_H
#define FOX_DAEMON_METRICS_HTTP_H

#include <stddef.h>

#include <uv.h>

#include "daemon/conf.h"

typedef struct fox_metrics_http fox_metrics_http;

/*
 * Listen on d->metrics_listen with a cap of d->max_connections connections
 * and d->metrics_timeout_ms for each. FOX_EINVAL (not http://HOST:PORT, or
 * a host that does not resolve), FOX_EIO (cannot listen) or FOX_ENOMEM,
 * with err naming the key and the URL; nothing is left open then.
 */
int fox_metrics_http_start(fox_metrics_http **out, uv_loop_t *loop, const fox_dconf *d, char *err,
                           size_t errlen);

/* Allow cap connections at once (at least 1): the listener's share of the descriptor budget. */
void fox_metrics_http_set_cap(fox_metrics_http *m, int cap);

/* Replace the text scrapes get (copied). */
void fox_metrics_http_publish(fox_metrics_http *m, const char *text);

/*
 * Close the listener and every connection; the memory goes once the loop
 * has run their close callbacks (NULL: nothing to do).
 */
void fox_metrics_http_stop(fox_metrics_http *m);

#endif
