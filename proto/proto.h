/*
 * proto.h — the foxd wire protocol (docs/protocol.md), shared by foxd and
 * foxctl: strict parsing and validation of requests, the reply and event
 * envelopes, parsing of replies and events on the client side, and the
 * error codes of the protocol. The per-fold table is table.h.
 *
 * One JSON object per nng message, at most FOX_PROTO_MAX_MSG bytes (a larger
 * request is refused before parsing). Request:
 *   {"v":1,"id":7,"cmd":"isv_read","args":{...},"token":"..."}
 * Reply:
 *   {"v":1,"id":7,"ok":true,"result":{...}}
 *   {"v":1,"id":7,"ok":false,"error":{"code":"ESTATE","message":"..."}}
 * Event (PUB socket; "event" comes first so that a SUB prefix such as
 * {"event":"halt" selects one type):
 *   {"event":"epoch_end","v":1,"seq":12,"time_ms":...,"data":{...}}
 *
 * What it does not do: sockets, threads, state. It knows nothing of the
 * engine beyond the status codes of error.h; whether a slot name, config key
 * or state is acceptable is the daemon's business, decided after parsing.
 *
 * Threading: every function is reentrant; a fox_request or fox_reply belongs
 * to the thread that parsed it.
 */
#ifndef FOX_PROTO_H
#define FOX_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "common/error.h"

#define FOX_PROTO_VERSION   1
#define FOX_PROTO_MAX_MSG   (64 * 1024)        /* larger requests are refused unparsed */
#define FOX_PROTO_TOKEN_MAX 256                /* bytes of a token */
#define FOX_PROTO_PATH_MAX  1023               /* bytes of a checkpoint path */
#define FOX_PROTO_NAME_MAX  127                /* bytes of a slot name, config key or buffer name */
#define FOX_PROTO_MAX_SLOTS 512                /* entries of isv_read's slot list */
#define FOX_PROTO_MAX_KEYS  128                /* entries of config_get's and config_set's lists */
#define FOX_PROTO_MAX_FOLDS 31                 /* folds are bits 0..30 of a mask */
#define FOX_PROTO_MAX_MEMBER 63 /* the highest member index (engine.members is at most 64) */
#define FOX_PROTO_MAX_ID    9007199254740991LL /* 2^53 - 1: exact in a JSON double */
#define FOX_PROTO_MAX_VALUES 1024 /* values (members, elements) of a request; refused unparsed */
#define FOX_PROTO_MAX_DEPTH  8    /* nesting of objects and arrays; refused unparsed */

/*
 * The commands: enum name, wire name, kind. READ commands are answered from
 * published state without the trainer; QUICK ones are applied by the trainer
 * and answered when applied; LONG ones are answered at once with an op_id and
 * complete by an event. nan_flags is READ unless args.clear is true.
 */
#define FOX_CMD_MAP(X)                                                                             \
    X(VERSION, "version", READ)                                                                    \
    X(STATUS, "status", READ)                                                                      \
    X(CONFIG_GET, "config_get", READ)                                                              \
    X(CONFIG_SET, "config_set", QUICK)                                                             \
    X(RUN, "run", LONG)                                                                            \
    X(START_FOLD, "start_fold", LONG)                                                              \
    X(PAUSE, "pause", QUICK)                                                                       \
    X(RESUME, "resume", QUICK)                                                                     \
    X(STOP, "stop", QUICK)                                                                         \
    X(RESET_FOLD, "reset_fold", QUICK)                                                             \
    X(ISV_READ, "isv_read", READ)                                                                  \
    X(ISV_LIST, "isv_list", READ)                                                                  \
    X(NAN_FLAGS, "nan_flags", READ)                                                                \
    X(SENTINEL_LIST, "sentinel_list", READ)                                                        \
    X(CHECKPOINT_SAVE, "checkpoint_save", LONG)                                                    \
    X(CHECKPOINT_LOAD, "checkpoint_load", QUICK)                                                   \
    X(METRICS, "metrics", READ)                                                                    \
    X(INJECT_FAULT, "inject_fault", QUICK)                                                         \
    X(SHUTDOWN, "shutdown", QUICK)                                                                 \
    X(BACKTEST, "backtest", QUICK)

typedef enum {
#define X(e, s, k) FOX_CMD_##e,
    FOX_CMD_MAP(X)
#undef X
        FOX_CMD_COUNT
} fox_cmd;

typedef enum { FOX_KIND_READ = 0, FOX_KIND_QUICK = 1, FOX_KIND_LONG = 2 } fox_cmd_kind;

/* Wire name of a command; "?" for an out-of-range value. */
const char *fox_cmd_name(int cmd);
/* The command of a wire name, or -1. */
int fox_cmd_lookup(const char *name);
fox_cmd_kind fox_cmd_kind_of(int cmd);

/* One entry of isv_read's slot list: an index, or a name (index -1). */
typedef struct fox_slot_ref {
    int index;
    const char *name;
} fox_slot_ref;

/*
 * A parsed request. Strings point into the parsed document and live until
 * fox_request_fini. Optional arguments that were absent read as 0 / NULL
 * unless noted.
 */
typedef struct fox_request {
    int has_id; /* 1 when id could be read (also on most errors) */
    int64_t id;
    int cmd;           /* fox_cmd, or -1 when it could not be read */
    const char *token; /* NULL when absent */

    /* run: folds as a mask (0 = the config's); run, start_fold: 0 = the config's */
    int folds_mask;
    int fold; /* start_fold (required) */
    int epochs, steps_per_epoch;
    int fresh; /* run: a new engine from the current config first (weights from the seed) */

    int n_slots; /* isv_read: 0 = every slot */
    fox_slot_ref slots[FOX_PROTO_MAX_SLOTS];

    int n_keys; /* config_get: 0 = every key */
    const char *keys[FOX_PROTO_MAX_KEYS];
    const cJSON *values; /* config_set: object of dotted key -> number | string | bool */
    int force;           /* config_set: recreate the engine even when it holds training */

    int clear;        /* nan_flags: also clear the flags */
    const char *path; /* checkpoint_save, checkpoint_load: NULL = the default file */

    const char *fault_buffer; /* inject_fault: a sentinel buffer name */
    const char *fault_kind;   /* inject_fault: "nan" | "inf" | "huge" */
    int fault_step;           /* inject_fault: steps from now, 0 = the next step */
    int member; /* isv_read, nan_flags, inject_fault: one member of the population; -1 absent */

    int checkpoint; /* shutdown: save a checkpoint first (default 1) */

    const char *data;      /* backtest: the bars (a CSV path); NULL = the config's data */
    int bars_from, bars_to; /* backtest: the bar range; 0 = the first / last bar with features */
    int val_from; /* backtest: its validation bars are [val_from, bars_from); 0 = the default */

    cJSON *doc; /* the parsed document (owned) */
} fox_request;

/*
 * Parse and validate one request message of len bytes (not necessarily
 * NUL-terminated; one trailing NUL and whitespace are tolerated). On success
 * returns FOX_OK and *req holds the request; otherwise returns
 *   FOX_EPROTO   too large, too many values or too deep (below), not JSON, not
 *                an object, wrong or missing v/id/cmd, an unknown or duplicate
 *                top-level field, a bad token;
 *   FOX_EUNKNOWN cmd names no command;
 *   FOX_EINVAL   args fail the command's schema (unknown field, wrong type,
 *                out of range, missing required field);
 * with a one-line reason in err (may be NULL) naming the field. Even on
 * failure *req must be released with fox_request_fini; req->has_id/id say
 * whether the reply can carry the request's id.
 */
int fox_proto_parse_request(fox_request *req, const char *buf, size_t len, char *err,
                            size_t errlen);

/*
 * fox_proto_parse_request in two steps, so that a server can authenticate
 * a command that changes state before it does any work on its arguments:
 * the envelope (v, id, cmd, token: every FOX_EPROTO and FOX_EUNKNOWN above),
 * then, on the same req, args (the FOX_EINVAL cases). Before cJSON builds
 * anything, a message of more than FOX_PROTO_MAX_VALUES values or nested
 * deeper than FOX_PROTO_MAX_DEPTH is refused (FOX_EPROTO) by a scan of its
 * bytes, so that a hostile request costs that scan and no more.
 */
int fox_proto_parse_envelope(fox_request *req, const char *buf, size_t len, char *err,
                             size_t errlen);
int fox_proto_parse_args(fox_request *req, char *err, size_t errlen);
void fox_request_fini(fox_request *req);

/* Whether the request changes state (and so needs the token and the peer check). */
int fox_request_is_mutating(const fox_request *req);

/*
 * The protocol's code for a status code: EPROTO, EUNKNOWN, EINVAL, EPERM,
 * ESTATE, EBUSY, ENOENT, EIO or EINTERNAL. Engine codes fold into these
 * (EFORMAT/EMISMATCH → EIO, EHALT → ESTATE, the rest → EINTERNAL).
 */
int fox_proto_code(int status);
/* A code's wire name ("ESTATE"), after fox_proto_code. */
const char *fox_proto_code_name(int status);
/* The status code of a wire name, or -1 for a name that is not a protocol code. */
int fox_proto_code_lookup(const char *name);

/*
 * Replies and events, as malloc'd NUL-terminated strings (the caller frees),
 * or NULL when out of memory. They take ownership of result / data (may be
 * NULL: an empty object). has_id = 0 writes "id":null (the request's id could
 * not be read). A result that would print larger than FOX_PROTO_MAX_REPLY is
 * replaced by an EINTERNAL error.
 */
#define FOX_PROTO_MAX_REPLY (8 * 1024 * 1024)
char *fox_proto_reply_ok(int has_id, int64_t id, cJSON *result);
char *fox_proto_reply_error(int has_id, int64_t id, int status, const char *message);
char *fox_proto_event(uint64_t seq, int64_t time_ms, const char *type, cJSON *data);

/* Client side: build a request (takes ownership of args, may be NULL; token may be NULL). */
char *fox_proto_request(int64_t id, const char *cmd, cJSON *args, const char *token);

/* A parsed reply. Pointers live until fox_reply_fini. */
typedef struct fox_reply {
    int has_id;
    int64_t id;
    int ok;
    const cJSON *result;   /* ok: the result object */
    int code;              /* !ok: status code (FOX_E*) of error.code */
    const char *code_name; /* !ok: error.code as sent */
    const char *message;   /* !ok: error.message */
    cJSON *doc;
} fox_reply;

/* Parse a reply; FOX_EPROTO with a reason in err when it breaks the envelope. */
int fox_proto_parse_reply(fox_reply *rep, const char *buf, size_t len, char *err, size_t errlen);
void fox_reply_fini(fox_reply *rep);

/* A parsed event. Pointers live until fox_event_fini. */
typedef struct fox_event {
    uint64_t seq;
    int64_t time_ms;
    const char *type;
    const cJSON *data;
    cJSON *doc;
} fox_event;

int fox_proto_parse_event(fox_event *ev, const char *buf, size_t len, char *err, size_t errlen);
void fox_event_fini(fox_event *ev);

/*
 * Default runtime directory of foxd (socket, events socket, lock):
 * $RUNTIME_DIRECTORY (systemd), else /run/foxd for root, else
 * $XDG_RUNTIME_DIR/foxd, else /tmp/foxd-<uid>. FOX_EINVAL when it does not fit.
 */
int fox_proto_default_runtime_dir(char *buf, size_t len);

/*
 * A backtest's bar range as `--bars` gives it, FROM:TO or VAL:FROM:TO: the
 * bars [FROM, TO) and, with VAL, the validation bars [VAL, FROM) before them
 * (*val_from −1 without). 0 when it parses with 0 ≤ VAL ≤ FROM < TO, else −1.
 */
int fox_proto_parse_bars(const char *s, int *val_from, int *from, int *to);

#endif
