/*
 * conf.h — foxd's configuration (internal to daemon/): the engine's
 * fox_config plus the daemon's own "daemon.*" keys, filled in this order:
 * defaults, the JSON config file, then --set pairs (and the --listen, --pub,
 * --backend shorthands).
 *
 * In the JSON file nested objects map to dotted keys ({"train":{"epochs":3}}
 * is train.epochs). Unknown keys and values of the wrong JSON type are
 * refused with the key path; the engine's own table (gpu/config.c) decides
 * ranges. What it does not do: cross-key checks of the engine (that is
 * fox_config_validate) or anything with sockets.
 *
 * Not thread-safe: configs are values owned by one thread at a time.
 */
#ifndef FOX_DAEMON_CONF_H
#define FOX_DAEMON_CONF_H

#include <cjson/cJSON.h>

#include "gpu/config.h"

#define FOX_DCONF_MAX_LISTEN 8
#define FOX_URL_MAX          512

typedef struct fox_dconf {
    char listen[FOX_DCONF_MAX_LISTEN][FOX_URL_MAX]; /* REP endpoints; default ipc in runtime_dir */
    int n_listen;
    char pub[FOX_URL_MAX];         /* PUB endpoint for events; default ipc in runtime_dir */
    char token[257];               /* required by mutating commands when non-empty */
    char token_file[FOX_PATH_MAX]; /* read into token at start (keeps it out of the config) */
    int allow_insecure_remote;     /* tcp:// beyond loopback without TLS */
    char tls_cert[FOX_PATH_MAX];   /* server certificate + key (PEM) for tls+tcp:// */
    char tls_key[FOX_PATH_MAX];
    char tls_ca[FOX_PATH_MAX];           /* CA that signs client certificates (mutual TLS) */
    char state_dir[FOX_PATH_MAX];        /* checkpoints, metrics.jsonl */
    char runtime_dir[FOX_PATH_MAX];      /* sockets, lock file */
    char metrics_textfile[FOX_PATH_MAX]; /* Prometheus textfile; "" = state_dir/foxd.prom */
    char log_file[FOX_PATH_MAX]; /* "" = stderr (journald); else appended, reopened on SIGHUP */
    int chunk_steps;             /* most steps between command checks */
    int chunk_ms;                /* aim of a chunk's duration (commands wait at most ~this) */
    int queue_depth;             /* mutating commands waiting for the trainer */
    int workers;                 /* concurrent requests (nng contexts) */
    int recv_max;                /* bytes; nng drops larger messages and the connection */
    int ipc_mode;                /* permissions of the ipc socket */
    int step_event_ms;           /* throttle of step events */
    int metrics_interval_ms;     /* Prometheus textfile period */
    int probe_ms;                /* ipc self-probe period (endpoints.h); 0 = off */
    int checkpoint_on_stop;      /* SIGTERM/shutdown save a checkpoint */
    int resume;                  /* load state_dir/foxd.ckpt at start when it exists */
    int allow_tcp_without_token; /* plain tcp:// listeners without daemon.token (insecure) */
    char data_dir[FOX_PATH_MAX]; /* data.source files a client may name; "" = state_dir/data */
    int data_max_mb;             /* largest data.source file a client may name */
    int max_connections;         /* connections per listener; more are closed at once */
    int idle_timeout_s;          /* control connections idle this long are closed; 0 = never */
    int max_connection_age_s;    /* control connections this old are closed between requests; 0 = never */
    char metrics_listen[FOX_URL_MAX]; /* http:// URL serving /metrics; "" = off */
    int metrics_timeout_ms;           /* a /metrics connection is closed this long after its accept */
    char run_dir[FOX_PATH_MAX];  /* run.dir: the run directory itself; "" = a fresh one per run */
    char run_root[FOX_PATH_MAX]; /* run.root: where fresh ones go; "" = ./runs or <state>/runs */
    char run_name[128];          /* run.name: appended to a fresh one's UTC time */
    int run_isv_steps;           /* run.isv_steps: isv.csv keeps a row about this often */
} fox_dconf;

/* Defaults; runtime_dir and state_dir from the environment (systemd, XDG). */
void fox_dconf_default(fox_dconf *d);

/*
 * Derive what defaults to other keys (listen, pub and the textfile from the
 * directories) and read token_file. FOX_EINVAL / FOX_EIO with a message.
 */
int fox_dconf_finish(fox_dconf *d, char *err, size_t errlen);

/*
 * Set one key from text: "daemon.*" keys into d (d NULL: refused, they are
 * fixed at start), every other key into cfg via fox_config_set.
 */
int fox_conf_set_text(fox_config *cfg, fox_dconf *d, const char *key, const char *value, char *err,
                      size_t errlen);
/* "key=value" form, as given to --set. */
int fox_conf_set_pair(fox_config *cfg, fox_dconf *d, const char *pair, char *err, size_t errlen);

/*
 * Set one key from a JSON value, refusing a value of the wrong JSON type for
 * the key (integer keys take integral numbers, string keys strings, ...).
 */
int fox_conf_set_json(fox_config *cfg, fox_dconf *d, const char *key, const cJSON *value, char *err,
                      size_t errlen);

/*
 * Apply a JSON config file. FOX_EIO (unreadable) or FOX_EINVAL with "file:
 * key: reason". keys (may be NULL) receives the dotted keys it set, in the
 * file's order, ", " between them, cut with "..." where keyslen ends.
 */
int fox_conf_load_file(fox_config *cfg, fox_dconf *d, const char *path, char *keys, size_t keyslen,
                       char *err, size_t errlen);

/*
 * Runtime changes (config_set) kept across restarts: merge values into the
 * JSON object in d->state_dir/foxd.overrides.json (written atomically).
 * foxd applies that file after its config file and before the command line.
 */
#define FOX_CONF_OVERRIDES "foxd.overrides.json"
int fox_conf_overrides_path(const fox_dconf *d, char *buf, size_t len);
int fox_conf_save_overrides(const fox_dconf *d, const cJSON *values, char *err, size_t errlen);

/*
 * The value of engine key i of the key table as JSON (a number for numeric
 * keys, a string otherwise); NULL when out of memory.
 */
cJSON *fox_conf_key_json(const fox_config *cfg, int i);
/* Index of an engine key in the key table, or -1. */
int fox_conf_key_index(const char *key);

#endif
