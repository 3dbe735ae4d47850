/*
 * ask.h — what every foxctl command stands on (internal to client/): the
 * options it sees, one request and its reply over the options' connection
 * (made on first use), the event socket's URL and the parsing of a bounded
 * integer argument. commands.c, run.c, records.c and the sweeps all use
 * these, and this file uses none of them.
 *
 * Single thread: foxctl's. Each function returns foxctl's exit status
 * (conn.h) unless it says otherwise.
 */
#ifndef FOX_CLIENT_ASK_H
#define FOX_CLIENT_ASK_H

#include <signal.h>

#include "client/conn.h"

typedef struct foxctl_opts {
    char url[1024];
    char pub[1024];
    const char *token;
    int json;
    int timeout_ms;
    int timeout_given; /* --timeout was given: it wins over a command's own longer default */
    foxctl_tls tls;
    foxctl_conn conn;
    int connected;
} foxctl_opts;

/* Set by SIGINT/SIGTERM: waits and watches stop and exit 130. */
extern volatile sig_atomic_t foxctl_interrupted;

/* Shows a command's result to people. */
typedef void (*foxctl_printer)(const cJSON *result);

/*
 * Send cmd (args owned, may be NULL) and hand back the reply. A reply with
 * ok:false is printed (or, with --json, the whole reply) and turned into
 * FOXCTL_EREPLY; connects on first use.
 */
int foxctl_ask(foxctl_opts *o, const char *cmd, cJSON *args, fox_reply *rep);

/* The common case: one request, its result printed by human (or as JSON with --json or no human).
 */
int foxctl_simple(foxctl_opts *o, const char *cmd, cJSON *args, foxctl_printer human);

/* The events URL: --pub, else what foxd says in `version`. */
int foxctl_events_url(foxctl_opts *o);

/* A decimal integer in [lo, hi] into *out: 1, else 0 (nothing written). */
int foxctl_parse_int(const char *s, int lo, int hi, int *out);

#endif
