/*
 * ask.c — one request and its reply over the options' connection, the
 * event socket's URL and a bounded integer argument. See ask.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "client/ask.h"
#include "client/print.h"

static int
connect_once(foxctl_opts *o)
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
int
foxctl_ask(foxctl_opts *o, const char *cmd, cJSON *args, fox_reply *rep)
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
            foxctl_print_reply(rep);
        else
            fprintf(stderr, "foxctl: %s: %s: %s\n", cmd, rep->code_name, rep->message);
        fox_reply_fini(rep);
        return FOXCTL_EREPLY;
    }
    return FOXCTL_OK;
}

/* The common case: one foxctl_ask, one printer. */
int
foxctl_simple(foxctl_opts *o, const char *cmd, cJSON *args, foxctl_printer human)
{
    fox_reply rep;
    int rv = foxctl_ask(o, cmd, args, &rep);
    if (rv != FOXCTL_OK)
        return rv;
    if (o->json || !human)
        o->json ? foxctl_print_reply(&rep) : foxctl_print_json(rep.result);
    else
        human(rep.result);
    fox_reply_fini(&rep);
    return FOXCTL_OK;
}

/* The events URL: --pub, else what foxd says in `version`. */
int
foxctl_events_url(foxctl_opts *o)
{
    fox_reply rep;
    if (o->pub[0])
        return FOXCTL_OK;
    int rv = foxctl_ask(o, "version", NULL, &rep);
    if (rv != FOXCTL_OK)
        return rv;
    snprintf(o->pub, sizeof o->pub, "%s", foxctl_jstr(rep.result, "events", ""));
    fox_reply_fini(&rep);
    if (!o->pub[0]) {
        fprintf(stderr, "foxctl: foxd did not name its event socket; give --pub\n");
        return FOXCTL_EBADREPLY;
    }
    return FOXCTL_OK;
}

int
foxctl_parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || errno || v < lo || v > hi)
        return 0;
    *out = (int)v;
    return 1;
}
