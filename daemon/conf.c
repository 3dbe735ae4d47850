/*
 * conf.c — foxd's configuration: the daemon key table, the JSON config file
 * walk and the JSON-typed setter shared with the config_set command.
 *
 * Engine keys are never listed here: gpu/config.c's table is their one home,
 * reached through fox_config_set/get and fox_config_key_*.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/conf.h"
#include "common/error.h"
#include "common/fsutil.h"
#include "proto/proto.h"

/* The engine key whose text is a list of folds (see set_folds_json). */
#define FOLDS_KEY "train.folds"

typedef enum { D_STR, D_INT, D_BOOL, D_URLS } dtype;

typedef struct dkey {
    const char *name;
    dtype type;
    size_t off;
    size_t size; /* D_STR: buffer size */
    long lo, hi; /* D_INT range */
} dkey;

#define S(n, f)                                                                                    \
    {                                                                                              \
        n, D_STR, offsetof(fox_dconf, f), sizeof(((fox_dconf *)0)->f), 0, 0                        \
    }
#define I(n, f, lo, hi)                                                                            \
    {                                                                                              \
        n, D_INT, offsetof(fox_dconf, f), 0, lo, hi                                                \
    }
#define B(n, f)                                                                                    \
    {                                                                                              \
        n, D_BOOL, offsetof(fox_dconf, f), 0, 0, 1                                                 \
    }

static const dkey dkeys[] = {
    {"daemon.listen", D_URLS, offsetof(fox_dconf, listen), 0, 0, 0},
    S("daemon.pub", pub),
    S("daemon.token", token),
    S("daemon.token_file", token_file),
    B("daemon.allow_insecure_remote", allow_insecure_remote),
    S("daemon.tls.cert", tls_cert),
    S("daemon.tls.key", tls_key),
    S("daemon.tls.ca", tls_ca),
    S("daemon.state_dir", state_dir),
    S("daemon.runtime_dir", runtime_dir),
    S("daemon.metrics_textfile", metrics_textfile),
    S("daemon.log_file", log_file),
    I("daemon.chunk_steps", chunk_steps, 1, 1 << 20),
    I("daemon.chunk_ms", chunk_ms, 1, 60000),
    I("daemon.queue_depth", queue_depth, 1, 4096),
    I("daemon.workers", workers, 1, 1024),
    I("daemon.recv_max", recv_max, FOX_PROTO_MAX_MSG, 1 << 30),
    I("daemon.ipc_mode", ipc_mode, 0, 0777),
    I("daemon.step_event_ms", step_event_ms, 0, 3600000),
    I("daemon.metrics_interval_ms", metrics_interval_ms, 0, 86400000),
    I("daemon.probe_ms", probe_ms, 0, 86400000),
    B("daemon.checkpoint_on_stop", checkpoint_on_stop),
    B("daemon.resume", resume),
    B("daemon.allow_tcp_without_token", allow_tcp_without_token),
    S("daemon.data_dir", data_dir),
    I("daemon.data_max_mb", data_max_mb, 1, 1 << 20),
    I("daemon.max_connections", max_connections, 1, 1 << 20),
    I("daemon.idle_timeout_s", idle_timeout_s, 0, 7 * 86400),
    I("daemon.max_connection_age_s", max_connection_age_s, 0, 7 * 86400),
    S("daemon.metrics_listen", metrics_listen),
    I("daemon.metrics_timeout_ms", metrics_timeout_ms, 100, 600000),
    S("run.dir", run_dir),
    S("run.root", run_root),
    S("run.name", run_name),
    I("run.isv_steps", run_isv_steps, 1, 1 << 20),
};
#define N_DKEYS ((int)(sizeof dkeys / sizeof dkeys[0]))

static const dkey *
dkey_find(const char *name)
{
    for (int i = 0; i < N_DKEYS; i++)
        if (strcmp(dkeys[i].name, name) == 0)
            return &dkeys[i];
    return NULL;
}

/* The daemon's own keys, and those of the run directory (record.h), live in fox_dconf. */
static int
is_daemon_key(const char *key)
{
    return strncmp(key, "daemon.", 7) == 0 || strncmp(key, "run.", 4) == 0;
}

void
fox_dconf_default(fox_dconf *d)
{
    const char *sd = getenv("STATE_DIRECTORY");
    const char *xdg = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");

    memset(d, 0, sizeof *d);
    if (fox_proto_default_runtime_dir(d->runtime_dir, sizeof d->runtime_dir) != FOX_OK)
        snprintf(d->runtime_dir, sizeof d->runtime_dir, "/tmp/foxd-%u", (unsigned)geteuid());
    if (sd && sd[0])
        snprintf(d->state_dir, sizeof d->state_dir, "%.*s", (int)strcspn(sd, ":"), sd);
    else if (geteuid() == 0)
        snprintf(d->state_dir, sizeof d->state_dir, "/var/lib/foxd");
    else if (xdg && xdg[0] == '/')
        snprintf(d->state_dir, sizeof d->state_dir, "%s/foxd", xdg);
    else if (home && home[0] == '/')
        snprintf(d->state_dir, sizeof d->state_dir, "%s/.local/state/foxd", home);
    else
        snprintf(d->state_dir, sizeof d->state_dir, "%.1000s/state", d->runtime_dir);
    d->chunk_steps = 64;
    d->chunk_ms = 50;
    d->queue_depth = 16;
    d->workers = 32;
    /* A request is at most 64 KiB; up to 1 MiB one still reaches the parser
     * and gets an EPROTO reply, beyond it nng closes the connection without
     * a word. It bounds memory: workers x recv_max at most in requests. */
    d->recv_max = 1 << 20;
    d->ipc_mode = 0660;
    d->step_event_ms = 500;
    d->metrics_interval_ms = 15000;
    d->probe_ms = 10000;
    d->checkpoint_on_stop = 1;
    d->resume = 1;
    d->data_max_mb = 1024;
    d->max_connections = 128;
    d->idle_timeout_s = 300;
    d->max_connection_age_s = 3600;
    d->metrics_timeout_ms = 5000;
    d->run_isv_steps = 16;
}

int
fox_dconf_finish(fox_dconf *d, char *err, size_t errlen)
{
    int n = 0;
    if (d->n_listen == 0) {
        n = snprintf(d->listen[0], FOX_URL_MAX, "ipc://%s/foxd.sock", d->runtime_dir);
        d->n_listen = 1;
    }
    if (n >= FOX_URL_MAX)
        return fox_errf(err, errlen, FOX_EINVAL,
                         "daemon.runtime_dir is too long for a socket path");
    if (d->pub[0] == 0 && snprintf(d->pub, sizeof d->pub, "ipc://%s/foxd-events.sock",
                                   d->runtime_dir) >= (int)sizeof d->pub)
        return fox_errf(err, errlen, FOX_EINVAL,
                         "daemon.runtime_dir is too long for a socket path");
    if (d->metrics_textfile[0] == 0 &&
        snprintf(d->metrics_textfile, sizeof d->metrics_textfile, "%s/foxd.prom", d->state_dir) >=
            (int)sizeof d->metrics_textfile)
        return fox_errf(err, errlen, FOX_EINVAL, "daemon.state_dir is too long");
    if (d->data_dir[0] == 0 &&
        snprintf(d->data_dir, sizeof d->data_dir, "%s/data", d->state_dir) >=
            (int)sizeof d->data_dir)
        return fox_errf(err, errlen, FOX_EINVAL, "daemon.state_dir is too long");
    if (d->token_file[0]) {
        FILE *f = fopen(d->token_file, "r");
        if (!f)
            return fox_errf(err, errlen, FOX_EIO, "daemon.token_file %s: %s", d->token_file,
                             strerror(errno));
        /* Group read is how the unit's user gets the file (root:foxd 0640); others never. */
        struct stat st;
        if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 027)) {
            fclose(f);
            return fox_errf(err, errlen, FOX_EINVAL,
                            "daemon.token_file %s: must be a regular file that others may not "
                            "read and its group may not write (chmod 0640 or 0600)",
                            d->token_file);
        }
        char buf[sizeof d->token + 2];
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        /* One line: the token, then at most a line end. */
        size_t len = strcspn(buf, "\r\n");
        int more = buf[len + strspn(buf + len, "\r\n")] != 0 || len >= sizeof d->token;
        if (!more)
            memcpy(d->token, buf, len + 1);
        d->token[len < sizeof d->token ? len : 0] = 0;
        if (more || d->token[0] == 0)
            return fox_errf(err, errlen, FOX_EINVAL,
                             "daemon.token_file %s: want one line of 1 to %zu bytes", d->token_file,
                             sizeof d->token - 1);
    }
    return FOX_OK;
}

/* ---------------------------------------------------------------- setting */

static int
parse_bool(const char *v, int *out)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
        *out = 0;
    else
        return 0;
    return 1;
}

static int
add_url(fox_dconf *d, const char *key, const char *url, char *err, size_t errlen)
{
    if (d->n_listen >= FOX_DCONF_MAX_LISTEN)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: at most %d endpoints", key,
                         FOX_DCONF_MAX_LISTEN);
    if (strlen(url) == 0 || strlen(url) >= FOX_URL_MAX)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: an endpoint of 1 to %d bytes", key,
                         FOX_URL_MAX - 1);
    strcpy(d->listen[d->n_listen++], url);
    return FOX_OK;
}

static int
dset(fox_dconf *d, const dkey *k, const char *v, char *err, size_t errlen)
{
    char *field = (char *)d + k->off;
    switch (k->type) {
    case D_STR:
        /* An empty token would silently turn authentication off. */
        if (k->off == offsetof(fox_dconf, token) && v[0] == 0)
            return fox_errf(err, errlen, FOX_EINVAL,
                            "%s is empty: give a token, or leave the key out to run without one",
                            k->name);
        if (strlen(v) >= k->size)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: longer than %zu bytes", k->name,
                             k->size - 1);
        /* Paths and names end up in log lines and file names: a newline or an escape there
         * would forge a line or steer a terminal. */
        for (const unsigned char *c = (const unsigned char *)v; *c; c++)
            if (*c < 0x20 || *c == 0x7f)
                return fox_errf(err, errlen, FOX_EINVAL,
                                "%s: control character 0x%02x at byte %td", k->name, *c,
                                (const char *)c - v);
        /* run.name becomes one component of the run directory's name. */
        if (k->off == offsetof(fox_dconf, run_name) &&
            (strchr(v, '/') || !strcmp(v, ".") || !strcmp(v, "..")))
            return fox_errf(err, errlen, FOX_EINVAL,
                            "run.name: '%s' is not a file name (no '/', not '.' or '..')", v);
        strcpy(field, v);
        return FOX_OK;
    case D_BOOL:
        if (!parse_bool(v, (int *)field))
            return fox_errf(err, errlen, FOX_EINVAL, "%s: '%s' is not a boolean", k->name, v);
        return FOX_OK;
    case D_INT: {
        char *end;
        errno = 0;
        long x = strtol(v, &end, 0); /* base 0: ipc_mode reads naturally as 0660 */
        if (v[0] == 0 || *end || errno)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: '%s' is not an integer", k->name, v);
        if (x < k->lo || x > k->hi)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: %ld is outside [%ld, %ld]", k->name, x,
                             k->lo, k->hi);
        *(int *)field = (int)x;
        return FOX_OK;
    }
    case D_URLS: {
        /* Text form (--set): a comma-separated list replacing the current one. */
        char buf[FOX_URL_MAX * FOX_DCONF_MAX_LISTEN];
        if (strlen(v) >= sizeof buf)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: too long", k->name);
        strcpy(buf, v);
        d->n_listen = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            int rv = add_url(d, k->name, tok, err, errlen);
            if (rv != FOX_OK)
                return rv;
        }
        return FOX_OK;
    }
    }
    return FOX_EINTERNAL;
}

/* The daemon.* key named key, settable only while foxd starts (d not NULL). */
static int
settable_dkey(const fox_dconf *d, const char *key, const dkey **out, char *err, size_t errlen)
{
    *out = dkey_find(key);
    if (!*out)
        return fox_errf(err, errlen, FOX_EINVAL, "unknown key '%s'", key);
    if (!d)
        return fox_errf(err, errlen, FOX_EINVAL, "%s is fixed when foxd starts", key);
    return FOX_OK;
}

int
fox_conf_set_text(fox_config *cfg, fox_dconf *d, const char *key, const char *value, char *err,
                  size_t errlen)
{
    if (is_daemon_key(key)) {
        const dkey *k;
        int rv = settable_dkey(d, key, &k, err, errlen);
        return rv != FOX_OK ? rv : dset(d, k, value, err, errlen);
    }
    return fox_config_set(cfg, key, value, err, errlen);
}

int
fox_conf_set_pair(fox_config *cfg, fox_dconf *d, const char *pair, char *err, size_t errlen)
{
    const char *eq = strchr(pair, '=');
    char key[256];
    if (!eq || eq == pair || (size_t)(eq - pair) >= sizeof key)
        return fox_errf(err, errlen, FOX_EINVAL, "expected key=value, got '%s'", pair);
    memcpy(key, pair, (size_t)(eq - pair));
    key[eq - pair] = 0;
    return fox_conf_set_text(cfg, d, key, eq + 1, err, errlen);
}

int
fox_conf_key_index(const char *key)
{
    int n = fox_config_key_count();
    for (int i = 0; i < n; i++)
        if (strcmp(fox_config_key_name(i), key) == 0)
            return i;
    return -1;
}

/* An integral JSON number that fits the range, printed as text. */
static int
json_int_text(const cJSON *v, double lo, double hi, char *buf, size_t len)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return 0;
    snprintf(buf, len, "%.0f", v->valuedouble);
    return 1;
}

/*
 * train.folds is an integer key holding a mask, but its text form is a list
 * ("0,2"): in JSON it is an array of fold numbers (or that text).
 */
static int
set_folds_json(fox_config *cfg, const cJSON *v, char *err, size_t errlen)
{
    char text[128];
    size_t n = 0;
    if (cJSON_IsString(v))
        return fox_config_set(cfg, FOLDS_KEY, v->valuestring, err, errlen);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0 || cJSON_GetArraySize(v) > 31)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: expected an array of fold numbers",
                         FOLDS_KEY);
    for (const cJSON *it = v->child; it; it = it->next) {
        char one[16];
        if (!json_int_text(it, 0, 30, one, sizeof one))
            return fox_errf(err, errlen, FOX_EINVAL, "%s: expected an array of fold numbers",
                             FOLDS_KEY);
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%s", n ? "," : "", one);
    }
    return fox_config_set(cfg, FOLDS_KEY, text, err, errlen);
}

static const char *
json_type_name(const cJSON *v)
{
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "invalid";
}

/*
 * A member key (common/member_keys.h) takes one value a member: in JSON an
 * array of the key's values ([0.001, 0.0003], each a number or its text) or
 * the text of fox_config_set ("0.001,0.0003"), beside the key's one value.
 */
static int
set_member_list_json(fox_config *cfg, const char *key, fox_cfg_type type, const cJSON *v,
                     char *err, size_t errlen)
{
    char text[2 * FOX_MEMBER_LIST_MAX];
    size_t n = 0;
    if (cJSON_IsString(v))
        return fox_config_set(cfg, key, v->valuestring, err, errlen);
    if (cJSON_GetArraySize(v) == 0 || cJSON_GetArraySize(v) > FOX_MEMBERS_MAX)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: expected 1 to %d values, one a member",
                         key, FOX_MEMBERS_MAX);
    for (const cJSON *it = v->child; it; it = it->next) {
        char one[64];
        int ok;
        if (cJSON_IsString(it)) {
            /* As a value's text (seeds beyond 2^53 need it); fox_config_set checks it. */
            ok = strlen(it->valuestring) < sizeof one && !strchr(it->valuestring, ',');
            if (ok)
                strcpy(one, it->valuestring);
        } else if (type == FOX_CFG_U64) {
            ok = json_int_text(it, 0, 9007199254740991.0, one, sizeof one);
        } else if (type == FOX_CFG_INT) {
            ok = json_int_text(it, INT_MIN, INT_MAX, one, sizeof one);
        } else {
            ok = cJSON_IsNumber(it);
            if (ok)
                snprintf(one, sizeof one, "%.17g", it->valuedouble);
        }
        if (!ok)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: expected an array of numbers, got %s",
                             key, json_type_name(it));
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%s", n ? "," : "", one);
    }
    return fox_config_set(cfg, key, text, err, errlen);
}

int
fox_conf_set_json(fox_config *cfg, fox_dconf *d, const char *key, const cJSON *v, char *err,
                  size_t errlen)
{
    char text[FOX_PATH_MAX + 64];
    const char *want = NULL;

    if (is_daemon_key(key)) {
        const dkey *k;
        int rv = settable_dkey(d, key, &k, err, errlen);
        if (rv != FOX_OK)
            return rv;
        switch (k->type) {
        case D_STR:
            if (!cJSON_IsString(v))
                want = "a string";
            else
                return dset(d, k, v->valuestring, err, errlen);
            break;
        case D_BOOL:
            if (!cJSON_IsBool(v))
                want = "true or false";
            else
                return dset(d, k, cJSON_IsTrue(v) ? "1" : "0", err, errlen);
            break;
        case D_INT:
            if (!json_int_text(v, INT_MIN, INT_MAX, text, sizeof text))
                want = "an integer";
            else
                return dset(d, k, text, err, errlen);
            break;
        case D_URLS:
            if (cJSON_IsString(v)) {
                d->n_listen = 0;
                return add_url(d, key, v->valuestring, err, errlen);
            }
            if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) {
                d->n_listen = 0;
                for (const cJSON *it = v->child; it; it = it->next) {
                    if (!cJSON_IsString(it))
                        return fox_errf(err, errlen, FOX_EINVAL,
                                         "%s: every entry must be a string", key);
                    if ((rv = add_url(d, key, it->valuestring, err, errlen)) != FOX_OK)
                        return rv;
                }
                return FOX_OK;
            }
            want = "an endpoint URL or a non-empty array of them";
            break;
        }
        return fox_errf(err, errlen, FOX_EINVAL, "%s: expected %s, got %s", key, want,
                         json_type_name(v));
    }

    int i = fox_conf_key_index(key);
    if (i < 0)
        return fox_errf(err, errlen, FOX_EINVAL, "unknown key '%s'", key);
    if (strcmp(key, FOLDS_KEY) == 0)
        return set_folds_json(cfg, v, err, errlen);
    if (fox_member_key_index(key) >= 0 && (cJSON_IsArray(v) || cJSON_IsString(v)))
        return set_member_list_json(cfg, key, fox_config_key_type(i), v, err, errlen);
    switch (fox_config_key_type(i)) {
    case FOX_CFG_INT:
        if (!json_int_text(v, INT_MIN, INT_MAX, text, sizeof text))
            want = "an integer";
        break;
    case FOX_CFG_U64:
        /* Seeds beyond 2^53 cannot travel as JSON numbers: accept decimal strings too. */
        if (cJSON_IsString(v) && strlen(v->valuestring) < sizeof text)
            strcpy(text, v->valuestring);
        else if (!json_int_text(v, 0, 9007199254740991.0, text, sizeof text))
            want = "a non-negative integer (or a decimal string)";
        break;
    case FOX_CFG_FLOAT:
    case FOX_CFG_DOUBLE:
        if (!cJSON_IsNumber(v))
            want = "a number";
        else
            snprintf(text, sizeof text, "%.17g", v->valuedouble);
        break;
    case FOX_CFG_STR:
    case FOX_CFG_ENUM:
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= sizeof text)
            want = "a string";
        else
            strcpy(text, v->valuestring);
        break;
    }
    if (want)
        return fox_errf(err, errlen, FOX_EINVAL, "%s: expected %s, got %s", key, want,
                         json_type_name(v));
    return fox_config_set(cfg, key, text, err, errlen);
}

/* One value of a key of this type, as fox_config_get wrote it, as JSON. */
static cJSON *
value_json(fox_cfg_type type, const char *text)
{
    switch (type) {
    case FOX_CFG_INT:
    case FOX_CFG_FLOAT:
    case FOX_CFG_DOUBLE:
        return cJSON_CreateNumber(strtod(text, NULL));
    case FOX_CFG_U64: {
        /* Exact as a number up to 2^53; beyond that, a string keeps every digit. */
        unsigned long long x = strtoull(text, NULL, 10);
        if (x <= 9007199254740991ULL)
            return cJSON_CreateNumber((double)x);
        return cJSON_CreateString(text);
    }
    default:
        return cJSON_CreateString(text);
    }
}

cJSON *
fox_conf_key_json(const fox_config *cfg, int i)
{
    char buf[FOX_PATH_MAX + FOX_MEMBER_LIST_MAX];
    if (fox_config_get(cfg, fox_config_key_name(i), buf, sizeof buf) != FOX_OK)
        return cJSON_CreateNull();
    if (strcmp(fox_config_key_name(i), FOLDS_KEY) == 0) {
        cJSON *a = cJSON_CreateArray();
        int mask = cfg->folds_mask;
        for (int k = 0; a && k < 31; k++)
            if (mask & (1 << k))
                cJSON_AddItemToArray(a, cJSON_CreateNumber(k));
        return a;
    }
    /* A member key's list as the array the file and config_set take. */
    if (strchr(buf, ',') && fox_member_key_index(fox_config_key_name(i)) >= 0) {
        cJSON *a = cJSON_CreateArray();
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); a && t;
             t = strtok_r(NULL, ",", &save))
            cJSON_AddItemToArray(a, value_json(fox_config_key_type(i), t));
        return a;
    }
    return value_json(fox_config_key_type(i), buf);
}

/* ------------------------------------------------------------ the JSON file */

/*
 * Add key to the list in keys (keyslen bytes; nothing when keys is NULL),
 * ", " between keys. Room for ", ..." is always kept: a key that does not
 * fit ends the list with it, and the list stays cut, so that what it shows
 * is the file's first keys in their order.
 */
static void
note_key(char *keys, size_t keyslen, const char *key)
{
    size_t used = keys ? strlen(keys) : 0;
    if (!keys || (used >= 3 && !strcmp(keys + used - 3, "...")))
        return;
    const char *sep = used ? ", " : "";
    if (used + strlen(sep) + strlen(key) + sizeof ", ..." <= keyslen)
        snprintf(keys + used, keyslen - used, "%s%s", sep, key);
    else
        snprintf(keys + used, keyslen - used, "%s...", sep);
}

/* Walk one object: leaves are keys, objects nest one dotted level deeper. */
static int
walk(fox_config *cfg, fox_dconf *d, const cJSON *obj, const char *prefix, char *keys,
     size_t keyslen, char *err, size_t errlen)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        char key[256];
        int n = snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", it->string);
        if (n < 0 || (size_t)n >= sizeof key)
            return fox_errf(err, errlen, FOX_EINVAL, "key path too long under '%s'", prefix);
        for (const cJSON *b = it->next; b; b = b->next)
            if (strcmp(b->string, it->string) == 0)
                return fox_errf(err, errlen, FOX_EINVAL, "%s: given twice", key);
        /* An object is a section unless it names a key itself. */
        if (cJSON_IsObject(it) && fox_conf_key_index(key) < 0 && !dkey_find(key)) {
            int rv = walk(cfg, d, it, key, keys, keyslen, err, errlen);
            if (rv != FOX_OK)
                return rv;
            continue;
        }
        int rv = fox_conf_set_json(cfg, d, key, it, err, errlen);
        if (rv != FOX_OK)
            return rv;
        note_key(keys, keyslen, key);
    }
    return FOX_OK;
}

int
fox_conf_load_file(fox_config *cfg, fox_dconf *d, const char *path, char *keys, size_t keyslen,
                   char *err, size_t errlen)
{
    if (keys && keyslen)
        keys[0] = 0;
    char msg[512];
    FILE *f = fopen(path, "rb");
    if (!f)
        return fox_errf(err, errlen, FOX_EIO, "%s: %s", path, strerror(errno));
    /* A config is small; a huge file is a mistake, not a config. */
    enum { MAX = 1 << 20 };
    char *buf = malloc(MAX + 1);
    if (!buf) {
        fclose(f);
        return fox_errf(err, errlen, FOX_ENOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, MAX + 1, f);
    int rerr = ferror(f);
    fclose(f);
    if (rerr || n > MAX) {
        free(buf);
        return fox_errf(err, errlen, rerr ? FOX_EIO : FOX_EINVAL, "%s: %s", path,
                         rerr ? "read error" : "larger than 1 MiB");
    }
    buf[n] = 0;
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithOpts(buf, &end, 1);
    if (!doc) {
        int line = 1;
        for (const char *p = buf; end && p < end; p++)
            line += *p == '\n';
        free(buf);
        return fox_errf(err, errlen, FOX_EINVAL, "%s:%d: not valid JSON", path, line);
    }
    free(buf);
    int rv;
    if (!cJSON_IsObject(doc))
        rv = fox_errf(msg, sizeof msg, FOX_EINVAL, "the top level must be an object");
    else
        rv = walk(cfg, d, doc, "", keys && keyslen ? keys : NULL, keyslen, msg, sizeof msg);
    cJSON_Delete(doc);
    if (rv != FOX_OK)
        return fox_errf(err, errlen, rv, "%s: %s", path, msg);
    return FOX_OK;
}

/* ------------------------------------------------------ runtime overrides */

int
fox_conf_overrides_path(const fox_dconf *d, char *buf, size_t len)
{
    if (snprintf(buf, len, "%s/%s", d->state_dir, FOX_CONF_OVERRIDES) >= (int)len)
        return FOX_EINVAL;
    return FOX_OK;
}

int
fox_conf_save_overrides(const fox_dconf *d, const cJSON *values, char *err, size_t errlen)
{
    char path[FOX_PATH_MAX + 32];
    if (fox_conf_overrides_path(d, path, sizeof path) != FOX_OK)
        return fox_errf(err, errlen, FOX_EINVAL, "daemon.state_dir is too long");
    cJSON *all = NULL;
    FILE *f = fopen(path, "rb");
    if (f) {
        char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        all = cJSON_Parse(buf);
    }
    if (!cJSON_IsObject(all)) {
        cJSON_Delete(all);
        all = cJSON_CreateObject();
    }
    for (const cJSON *it = values ? values->child : NULL; all && it; it = it->next) {
        cJSON *v = cJSON_Duplicate(it, 0);
        cJSON_DeleteItemFromObjectCaseSensitive(all, it->string);
        if (!v || !cJSON_AddItemToObject(all, it->string, v)) {
            cJSON_Delete(v);
            cJSON_Delete(all);
            all = NULL;
        }
    }
    char *text = all ? cJSON_Print(all) : NULL;
    cJSON_Delete(all);
    if (!text)
        return fox_errf(err, errlen, FOX_ENOMEM, "out of memory");
    int rv = fox_write_atomic(path, text, strlen(text), 0640, 1, err, errlen);
    free(text);
    return rv;
}
