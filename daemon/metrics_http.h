/*
 * metrics_http.h — the opt-in Prometheus endpoint of foxd (internal to
 * daemon/): GET /metrics on nng's own HTTP server, at daemon.metrics_listen
 * (an http:// URL on loopback unless daemon.allow_insecure_remote).
 *
 * Threads: the loop thread publishes the text (the same as the textfile's)
 * every second; nng's threads answer scrapes with a copy of the latest, so
 * a scrape never touches the trainer or the loop's counters.
 */
#ifndef FOX_DAEMON_METRICS_HTTP_H
#define FOX_DAEMON_METRICS_HTTP_H

#include <stddef.h>

typedef struct fox_metrics_http fox_metrics_http;

/* Listen on url and serve /metrics. FOX_EINVAL (bad URL) or FOX_EIO (cannot listen) with err. */
int fox_metrics_http_start(fox_metrics_http **out, const char *url, char *err, size_t errlen);

/* Replace the text scrapes get (copied). */
void fox_metrics_http_publish(fox_metrics_http *m, const char *text);

/* Stop the server and free everything (NULL: nothing to do). */
void fox_metrics_http_stop(fox_metrics_http *m);

#endif
