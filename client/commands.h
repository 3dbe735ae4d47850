/*
 * commands.h — foxctl's commands (internal to client/): the options every
 * command sees, one request and its reply, and the subcommands that take
 * arguments. run and start-fold, which wait for their op, are run.h.
 *
 * Each foxctl_cmd_* takes the subcommand's argv (argv[0] is its name) and
 * returns foxctl's exit status (conn.h).
 */
#ifndef FOX_CLIENT_COMMANDS_H
#define FOX_CLIENT_COMMANDS_H

#include <signal.h>

#include "client/conn.h"

typedef struct foxctl_opts {
    char url[1024];
    char pub[1024];
    const char *token;
    int json;
    int timeout_ms;
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

int foxctl_cmd_isv(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_flags(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_checkpoint(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_config(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_watch(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_inject(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_shutdown(foxctl_opts *o, int argc, char **argv);
int foxctl_cmd_raw(foxctl_opts *o, int argc, char **argv);

#endif
