/*
 * metrics_http.c — GET /metrics on a small HTTP/1.1 server on the daemon's
 * loop, with a connection cap and a deadline per connection (see
 * metrics_http.h).
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "daemon/metrics_http.h"

/* Prometheus' text exposition format. */
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* A request line and headers beyond this get 431: Prometheus sends a few hundred bytes. */
#define HEADER_MAX  8192
#define DISCARD     4096 /* what a peer sends after its request is read into this and dropped */
#define WAIT_LOG_MS 1000 /* at most one line about connections left waiting this often */

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t deadline;
    uv_write_t write;
    uv_shutdown_t shutdown;
    fox_metrics_http *m;
    struct conn *prev, *next; /* the server's open connections */
    int handles;              /* of tcp and deadline, not closed yet: freed at 0 */
    int closing;
    int answered;  /* the reply is on its way: what arrives now is dropped */
    int sent;      /* the reply has left */
    int peer_done; /* the peer closed its side after the request */
    char *reply;
    size_t len;
    char head[HEADER_MAX];
} conn;

struct fox_metrics_http {
    uv_tcp_t listener;
    int listener_open;
    int stopping;
    int cap;     /* connections at once */
    int open;    /* connections accepted and not yet freed */
    int waiting; /* the kernel has a connection ready that waits for a free slot */
    int timeout_ms;
    int64_t wait_logged_ms;
    char url[FOX_URL_MAX];
    conn *conns;
    char *text; /* the latest published text */
    char discard[DISCARD];
};

static void accept_one(fox_metrics_http *m);

static void
free_if_done(fox_metrics_http *m)
{
    if (m->stopping && !m->listener_open && m->open == 0) {
        free(m->text);
        free(m);
    }
}

static void
on_conn_closed(uv_handle_t *h)
{
    conn *c = h->data;
    fox_metrics_http *m = c->m;
    if (--c->handles > 0)
        return;
    free(c->reply);
    free(c);
    m->open--;
    /* A slot is free: the connection the kernel holds for us gets it. */
    if (m->waiting && !m->stopping && m->open < m->cap)
        accept_one(m);
    free_if_done(m);
}

static void
close_conn(conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->m->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->deadline, on_conn_closed);
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void
on_deadline(uv_timer_t *t)
{
    close_conn(t->data);
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    conn *c = req->data;
    if (status < 0 && status != UV_ECANCELED)
        close_conn(c);
}

static void
on_written(uv_write_t *req, int status)
{
    conn *c = req->data;
    if (status == UV_ECANCELED)
        return;
    c->sent = 1;
    /*
     * Half-close and read on until the peer closes (or the deadline): a
     * close with its unread bytes still queued would send a reset, which
     * may destroy the reply before the peer reads it.
     */
    if (status < 0 || c->peer_done ||
        uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown))
        close_conn(c);
}

/* Queue the reply: the status line, the headers every reply has, extra ones, then body. */
static void
reply(conn *c, int status, const char *reason, const char *extra, const char *body, int head_only)
{
    size_t body_len = strlen(body);
    const char *fmt = "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s\r\n";
    const char *type = status == 200 ? CONTENT_TYPE : "text/plain; charset=utf-8";
    int n = snprintf(NULL, 0, fmt, status, reason, type, body_len, extra);
    size_t len = (size_t)n + (head_only ? 0 : body_len);
    c->answered = 1;
    c->reply = malloc(len + 1);
    if (!c->reply) {
        close_conn(c); /* out of memory: the scrape fails, the daemon goes on */
        return;
    }
    snprintf(c->reply, (size_t)n + 1, fmt, status, reason, type, body_len, extra);
    if (!head_only)
        memcpy(c->reply + n, body, body_len);
    uv_buf_t buf = uv_buf_init(c->reply, (unsigned)len);
    c->write.data = c;
    c->shutdown.data = c;
    if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0)
        close_conn(c);
}

/* The next space-separated word of [*p, end): its start and length; *p moves past it. */
static size_t
word(const char **p, const char *end, const char **start)
{
    *start = *p;
    while (*p < end && **p != ' ')
        (*p)++;
    size_t n = (size_t)(*p - *start);
    if (*p < end)
        (*p)++;
    return n;
}

/* Answer the request whose line and headers are c->head[0, len). */
static void
answer(conn *c)
{
    const char *p = c->head, *eol = memchr(c->head, '\n', c->len), *method, *target, *version;
    const char *end = eol > c->head && eol[-1] == '\r' ? eol - 1 : eol;
    size_t nm = word(&p, end, &method), nt = word(&p, end, &target), nv = word(&p, end, &version);
    if (nm == 0 || nt == 0 || nv != 8 || memcmp(version, "HTTP/1.", 7) != 0 || p != end) {
        reply(c, 400, "Bad Request", "", "400 bad request: want METHOD /metrics HTTP/1.x\n", 0);
        return;
    }
    const char *query = memchr(target, '?', nt);
    size_t path_len = query ? (size_t)(query - target) : nt;
    if (path_len != 8 || memcmp(target, "/metrics", 8) != 0) {
        reply(c, 404, "Not Found", "", "404 not found: foxd serves /metrics only\n", 0);
        return;
    }
    int head_only = nm == 4 && memcmp(method, "HEAD", 4) == 0;
    if (!head_only && !(nm == 3 && memcmp(method, "GET", 3) == 0)) {
        reply(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n",
              "405 method not allowed: GET or HEAD\n", 0);
        return;
    }
    reply(c, 200, "OK", "", c->m->text ? c->m->text : "", head_only);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;
    (void)suggested;
    if (c->answered)
        *buf = uv_buf_init(c->m->discard, DISCARD);
    else
        *buf = uv_buf_init(c->head + c->len, (unsigned)(HEADER_MAX - c->len));
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = s->data;
    (void)buf;
    if (nread < 0) {
        /* The peer is done (or gone): close once the reply has left, at once before it. */
        uv_read_stop(s);
        c->peer_done = 1;
        if (!c->answered || c->sent)
            close_conn(c);
        return;
    }
    if (c->answered || nread == 0)
        return;
    size_t from = c->len > 3 ? c->len - 3 : 0;
    c->len += (size_t)nread;
    /* The headers end at an empty line; some clients end their lines with a bare LF. */
    for (size_t i = from; i < c->len; i++)
        if (c->head[i] == '\n' && ((i >= 1 && c->head[i - 1] == '\n') ||
                                   (i >= 2 && c->head[i - 1] == '\r' && c->head[i - 2] == '\n'))) {
            answer(c);
            return;
        }
    if (c->len == HEADER_MAX)
        reply(c, 431, "Request Header Fields Too Large", "",
              "431 request header fields too large: 8 KiB at most\n", 0);
}

static void
accept_one(fox_metrics_http *m)
{
    conn *c = calloc(1, sizeof *c);
    m->waiting = 0;
    if (!c) {
        /*
         * Out of memory: the connection stays in the kernel's queue for the
         * next close to take; with none open, until the next set_cap.
         */
        m->waiting = 1;
        return;
    }
    c->m = m;
    uv_tcp_init(m->listener.loop, &c->tcp);
    uv_timer_init(m->listener.loop, &c->deadline);
    c->tcp.data = c->deadline.data = c;
    c->handles = 2;
    m->open++;
    c->next = m->conns;
    if (m->conns)
        m->conns->prev = c;
    m->conns = c;
    if (uv_accept((uv_stream_t *)&m->listener, (uv_stream_t *)&c->tcp) != 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        close_conn(c);
        return;
    }
    uv_timer_start(&c->deadline, on_deadline, (uint64_t)m->timeout_ms, 0);
}

static void
on_connection(uv_stream_t *server, int status)
{
    fox_metrics_http *m = server->data;
    if (status < 0) {
        fox_log(FOX_LOG_DEBUG, "%s: accept: %s", m->url, uv_strerror(status));
        return;
    }
    if (m->open < m->cap) {
        accept_one(m);
        return;
    }
    /*
     * Not accepting stops libuv watching the listener until the next
     * uv_accept: the rest stay in the kernel's queue, holding no descriptor.
     */
    m->waiting = 1;
    int64_t now = fox_mono_ms();
    if (now - m->wait_logged_ms >= WAIT_LOG_MS) {
        m->wait_logged_ms = now;
        fox_log(FOX_LOG_WARNING,
                "%s: %d connections open; new ones wait (daemon.max_connections or this "
                "listener's share of the descriptors; daemon.metrics_timeout_ms closes each)",
                m->url, m->open);
    }
}

/* http://HOST:PORT[/] into host and port; HOST may be [v6], a name or empty (every address). */
static int
split_url(const char *url, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *h = url + 7, *colon, *end;
    if (strncmp(url, "http://", 7) != 0)
        return FOX_EINVAL;
    if (*h == '[') {
        const char *close = strchr(h, ']');
        if (!close || close[1] != ':')
            return FOX_EINVAL;
        h++;
        colon = close + 1;
        end = close;
    } else {
        colon = strchr(h, ':');
        end = colon;
    }
    if (!colon || (size_t)(end - h) >= hostlen)
        return FOX_EINVAL;
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = 0;
    size_t n = strcspn(colon + 1, "/");
    if (n == 0 || n >= portlen || strspn(colon + 1, "0123456789") != n ||
        (colon[1 + n] && strcmp(colon + 1 + n, "/") != 0))
        return FOX_EINVAL;
    memcpy(port, colon + 1, n);
    port[n] = 0;
    return FOX_OK;
}

static void
on_listener_closed(uv_handle_t *h)
{
    fox_metrics_http *m = h->data;
    m->listener_open = 0;
    free_if_done(m);
}

int
fox_metrics_http_start(fox_metrics_http **out, uv_loop_t *loop, const fox_dconf *d, char *err,
                       size_t errlen)
{
    char host[FOX_URL_MAX], port[16];
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    const char *url = d->metrics_listen;
    int rv;
    *out = NULL;
    if (split_url(url, host, sizeof host, port, sizeof port) != FOX_OK)
        return fox_errf(err, errlen, FOX_EINVAL, "daemon.metrics_listen %s: want http://HOST:PORT",
                        url);
    if ((rv = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai)) != 0)
        return fox_errf(err, errlen, FOX_EINVAL, "daemon.metrics_listen %s: %s", url,
                        gai_strerror(rv));
    fox_metrics_http *m = calloc(1, sizeof *m);
    if (!m) {
        freeaddrinfo(ai);
        return fox_errf(err, errlen, FOX_ENOMEM, "out of memory");
    }
    m->cap = d->max_connections;
    m->timeout_ms = d->metrics_timeout_ms;
    snprintf(m->url, sizeof m->url, "%s", url);
    uv_tcp_init(loop, &m->listener);
    m->listener.data = m;
    m->listener_open = 1;
    /* A bind's error may surface only at listen. */
    if ((rv = uv_tcp_bind(&m->listener, ai->ai_addr, 0)) == 0)
        rv = uv_listen((uv_stream_t *)&m->listener, SOMAXCONN, on_connection);
    freeaddrinfo(ai);
    if (rv != 0) {
        m->stopping = 1;
        uv_close((uv_handle_t *)&m->listener, on_listener_closed);
        return fox_errf(err, errlen, FOX_EIO, "daemon.metrics_listen %s: %s", url, uv_strerror(rv));
    }
    fox_log(FOX_LOG_INFO, "serving Prometheus metrics at %s/metrics", url);
    *out = m;
    return FOX_OK;
}

void
fox_metrics_http_set_cap(fox_metrics_http *m, int cap)
{
    m->cap = cap < 1 ? 1 : cap;
    if (m->waiting && m->open < m->cap)
        accept_one(m);
}

void
fox_metrics_http_publish(fox_metrics_http *m, const char *text)
{
    char *copy = strdup(text);
    if (!copy)
        return; /* out of memory: scrapes keep the previous text */
    free(m->text);
    m->text = copy;
}

void
fox_metrics_http_stop(fox_metrics_http *m)
{
    if (!m)
        return;
    m->stopping = 1;
    while (m->conns)
        close_conn(m->conns);
    uv_close((uv_handle_t *)&m->listener, on_listener_closed);
}
