/*
 * proto.c — request parsing and validation, replies, events, the fold table.
 *
 * Every command's arguments are described once, in the argument tables
 * below; one interpreter walks a table, so no command has its own parsing
 * code. It does not decide whether a name, key or state is acceptable to the
 * daemon: only that the message is well formed.
 */
#include <ctype.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/utf8.h"
#include "proto/proto.h"

/* ---------------------------------------------------------------- commands */

static const char *const cmd_names[FOX_CMD_COUNT] = {
#define X(e, s, k) [FOX_CMD_##e] = s,
    FOX_CMD_MAP(X)
#undef X
};

static const fox_cmd_kind cmd_kinds[FOX_CMD_COUNT] = {
#define X(e, s, k) [FOX_CMD_##e] = FOX_KIND_##k,
    FOX_CMD_MAP(X)
#undef X
};

const char *
fox_cmd_name(int cmd)
{
    if (cmd < 0 || cmd >= FOX_CMD_COUNT)
        return "?";
    return cmd_names[cmd];
}

int
fox_cmd_lookup(const char *name)
{
    for (int i = 0; i < FOX_CMD_COUNT; i++)
        if (strcmp(cmd_names[i], name) == 0)
            return i;
    return -1;
}

fox_cmd_kind
fox_cmd_kind_of(int cmd)
{
    if (cmd < 0 || cmd >= FOX_CMD_COUNT)
        return FOX_KIND_READ;
    return cmd_kinds[cmd];
}

int
fox_request_is_mutating(const fox_request *req)
{
    if (req->cmd == FOX_CMD_NAN_FLAGS)
        return req->clear;
    return fox_cmd_kind_of(req->cmd) != FOX_KIND_READ;
}

/* ------------------------------------------------------------------ codes */

int
fox_proto_code(int status)
{
    switch (status) {
    case FOX_EPROTO:
    case FOX_EUNKNOWN:
    case FOX_EINVAL:
    case FOX_EPERM:
    case FOX_ESTATE:
    case FOX_EBUSY:
    case FOX_ENOENT:
    case FOX_EIO:
    case FOX_EINTERNAL:
        return status;
    case FOX_EFORMAT:
    case FOX_EMISMATCH:
        return FOX_EIO; /* the file was read but cannot be used: the message says why */
    case FOX_EHALT:
        return FOX_ESTATE;
    default:
        return FOX_EINTERNAL;
    }
}

const char *
fox_proto_code_name(int status)
{
    return fox_err_name(fox_proto_code(status));
}

int
fox_proto_code_lookup(const char *name)
{
    static const int codes[] = {FOX_EPROTO, FOX_EUNKNOWN, FOX_EINVAL, FOX_EPERM,    FOX_ESTATE,
                                FOX_EBUSY,  FOX_ENOENT,   FOX_EIO,    FOX_EINTERNAL};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(fox_err_name(codes[i]), name) == 0)
            return codes[i];
    return -1;
}

/* ---------------------------------------------------------------- helpers */

/*
 * Copy a client-supplied name into an error message with anything but
 * printable ASCII replaced, so that a reply never echoes control bytes or
 * broken UTF-8 back, and long names are cut.
 */
static const char *
clean(char *buf, size_t len, const char *s)
{
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++)
        buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    buf[i] = 0;
    if (s[i] && len > 4)
        memcpy(buf + len - 4, "...", 4);
    return buf;
}

/* An integral JSON number within [lo, hi]. */
static int
get_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
        return 0;
    *out = (int64_t)d;
    return 1;
}

/*
 * Refuses an object that names a key twice (cJSON keeps both silently). A
 * hash set keeps it linear: this runs before authentication, on objects of
 * thousands of keys a client may send.
 */
static int
has_duplicate(const cJSON *obj, const char **dup)
{
    size_t n = 0, cap = 16;
    for (const cJSON *a = obj->child; a; a = a->next)
        n++;
    if (n < 2)
        return 0;
    while (cap < 2 * n)
        cap *= 2;
    const char *stack[16], **set = cap <= 16 ? stack : calloc(cap, sizeof *set);
    int found = 0;
    if (!set) {
        *dup = "(out of memory)";
        return 1;
    }
    if (set == stack)
        memset(stack, 0, sizeof stack);
    for (const cJSON *a = obj->child; a && !found; a = a->next) {
        uint64_t h = fox_fnv1a(FOX_FNV_OFFSET, a->string, strlen(a->string));
        size_t i = (size_t)h & (cap - 1);
        while (set[i] && strcmp(set[i], a->string) != 0)
            i = (i + 1) & (cap - 1);
        if (set[i]) {
            *dup = a->string;
            found = 1;
        }
        set[i] = a->string;
    }
    if (set != stack)
        free(set);
    return found;
}

/* ------------------------------------------------------- argument schemas */

typedef enum {
    A_INT,    /* integral number in [lo, hi], stored as int */
    A_BOOL,   /* true | false, stored as int */
    A_STR,    /* non-empty string of at most hi bytes, stored as const char * */
    A_FOLDS,  /* non-empty array of distinct fold numbers, stored as a mask */
    A_SLOTS,  /* array of slot indices or names */
    A_KEYS,   /* array of config keys */
    A_VALUES, /* non-empty object of config key -> scalar */
    A_KIND    /* "nan" | "inf" | "huge" */
} arg_type;

typedef struct arg_spec {
    const char *name;
    arg_type type;
    int required;
    int64_t lo, hi;
    size_t off; /* into fox_request */
} arg_spec;

#define OFF(f) offsetof(fox_request, f)
#define END                                                                                        \
    {                                                                                              \
        NULL, 0, 0, 0, 0, 0                                                                        \
    }

static const arg_spec args_none[] = {END};
static const arg_spec args_run[] = {
    {"folds", A_FOLDS, 0, 0, FOX_PROTO_MAX_FOLDS - 1, OFF(folds_mask)},
    {"epochs", A_INT, 0, 1, 1000000, OFF(epochs)},
    {"steps_per_epoch", A_INT, 0, 1, 1000000000, OFF(steps_per_epoch)},
    {"fresh", A_BOOL, 0, 0, 0, OFF(fresh)},
    END};
static const arg_spec args_start_fold[] = {
    {"fold", A_INT, 1, 0, FOX_PROTO_MAX_FOLDS - 1, OFF(fold)},
    {"epochs", A_INT, 0, 1, 1000000, OFF(epochs)},
    {"steps_per_epoch", A_INT, 0, 1, 1000000000, OFF(steps_per_epoch)},
    END};
static const arg_spec args_config_get[] = {{"keys", A_KEYS, 0, 0, 0, OFF(n_keys)}, END};
static const arg_spec args_config_set[] = {
    {"values", A_VALUES, 1, 0, 0, OFF(values)}, {"force", A_BOOL, 0, 0, 0, OFF(force)}, END};
#define ARG_MEMBER                                                                                 \
    {                                                                                              \
        "member", A_INT, 0, 0, FOX_PROTO_MAX_MEMBER, OFF(member)                                   \
    }
static const arg_spec args_isv_read[] = {
    {"slots", A_SLOTS, 0, 0, 65535, OFF(n_slots)}, ARG_MEMBER, END};
static const arg_spec args_nan_flags[] = {{"clear", A_BOOL, 0, 0, 0, OFF(clear)}, ARG_MEMBER, END};
static const arg_spec args_path[] = {{"path", A_STR, 0, 0, FOX_PROTO_PATH_MAX, OFF(path)}, END};
static const arg_spec args_inject[] = {
    {"buffer", A_STR, 1, 0, FOX_PROTO_NAME_MAX, OFF(fault_buffer)},
    {"kind", A_KIND, 1, 0, 0, OFF(fault_kind)},
    {"step", A_INT, 0, 0, 1000000000, OFF(fault_step)},
    ARG_MEMBER,
    END};
static const arg_spec args_shutdown[] = {{"checkpoint", A_BOOL, 0, 0, 0, OFF(checkpoint)}, END};
static const arg_spec args_backtest[] = {
    {"checkpoint", A_STR, 1, 0, FOX_PROTO_PATH_MAX, OFF(path)},
    {"data", A_STR, 0, 0, FOX_PROTO_PATH_MAX, OFF(data)},
    {"bars_from", A_INT, 0, 0, 1 << 30, OFF(bars_from)},
    {"bars_to", A_INT, 0, 0, 1 << 30, OFF(bars_to)},
    {"val_from", A_INT, 0, 0, 1 << 30, OFF(val_from)},
    END};

static const arg_spec *const cmd_args[FOX_CMD_COUNT] = {
    [FOX_CMD_VERSION] = args_none,
    [FOX_CMD_STATUS] = args_none,
    [FOX_CMD_CONFIG_GET] = args_config_get,
    [FOX_CMD_CONFIG_SET] = args_config_set,
    [FOX_CMD_RUN] = args_run,
    [FOX_CMD_START_FOLD] = args_start_fold,
    [FOX_CMD_PAUSE] = args_none,
    [FOX_CMD_RESUME] = args_none,
    [FOX_CMD_STOP] = args_none,
    [FOX_CMD_RESET_FOLD] = args_none,
    [FOX_CMD_ISV_READ] = args_isv_read,
    [FOX_CMD_ISV_LIST] = args_none,
    [FOX_CMD_NAN_FLAGS] = args_nan_flags,
    [FOX_CMD_SENTINEL_LIST] = args_none,
    [FOX_CMD_CHECKPOINT_SAVE] = args_path,
    [FOX_CMD_CHECKPOINT_LOAD] = args_path,
    [FOX_CMD_METRICS] = args_none,
    [FOX_CMD_INJECT_FAULT] = args_inject,
    [FOX_CMD_SHUTDOWN] = args_shutdown,
    [FOX_CMD_BACKTEST] = args_backtest,
};

/* A string holding a name: non-empty, at most FOX_PROTO_NAME_MAX bytes. */
static int
is_name(const cJSON *v)
{
    if (!cJSON_IsString(v))
        return 0;
    size_t n = strlen(v->valuestring);
    return n > 0 && n <= FOX_PROTO_NAME_MAX;
}

static int
parse_arg(fox_request *req, const arg_spec *sp, const cJSON *v, char *err, size_t errlen)
{
    char *field = (char *)req + sp->off;
    const char *cmd = fox_cmd_name(req->cmd);
    char nb[48];
    int64_t x;

    switch (sp->type) {
    case A_INT:
        if (!get_int(v, sp->lo, sp->hi, &x))
            return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s must be an integer in [%lld, %lld]",
                        cmd, sp->name, (long long)sp->lo, (long long)sp->hi);
        *(int *)field = (int)x;
        return FOX_OK;
    case A_BOOL:
        if (!cJSON_IsBool(v))
            return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s must be true or false", cmd,
                        sp->name);
        *(int *)field = cJSON_IsTrue(v);
        return FOX_OK;
    case A_STR:
        if (!cJSON_IsString(v) || v->valuestring[0] == 0 || strlen(v->valuestring) > (size_t)sp->hi)
            return fox_errf(err, errlen, FOX_EINVAL,
                        "%s: args.%s must be a non-empty string of at most %lld bytes", cmd,
                        sp->name, (long long)sp->hi);
        *(const char **)field = v->valuestring;
        return FOX_OK;
    case A_KIND:
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, "nan") != 0 && strcmp(v->valuestring, "inf") != 0 &&
             strcmp(v->valuestring, "huge") != 0))
            return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s must be \"nan\", \"inf\" or \"huge\"",
                        cmd, sp->name);
        *(const char **)field = v->valuestring;
        return FOX_OK;
    case A_FOLDS: {
        int mask = 0, n = 0;
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s must be a non-empty array of folds",
                        cmd, sp->name);
        for (const cJSON *it = v->child; it; it = it->next, n++) {
            if (!get_int(it, sp->lo, sp->hi, &x))
                return fox_errf(err, errlen, FOX_EINVAL,
                            "%s: args.%s[%d] must be a fold number in [%lld, %lld]", cmd, sp->name,
                            n, (long long)sp->lo, (long long)sp->hi);
            if (mask & (1 << x))
                return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s names fold %lld twice", cmd,
                            sp->name, (long long)x);
            mask |= 1 << x;
        }
        *(int *)field = mask;
        return FOX_OK;
    }
    case A_SLOTS: {
        int n = 0;
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > FOX_PROTO_MAX_SLOTS)
            return fox_errf(err, errlen, FOX_EINVAL,
                        "%s: args.%s must be an array of at most %d slot indices or names", cmd,
                        sp->name, FOX_PROTO_MAX_SLOTS);
        for (const cJSON *it = v->child; it; it = it->next, n++) {
            if (get_int(it, sp->lo, sp->hi, &x)) {
                req->slots[n].index = (int)x;
                req->slots[n].name = NULL;
            } else if (is_name(it)) {
                req->slots[n].index = -1;
                req->slots[n].name = it->valuestring;
            } else {
                return fox_errf(err, errlen, FOX_EINVAL,
                            "%s: args.%s[%d] must be a slot index in [%lld, %lld] or a name", cmd,
                            sp->name, n, (long long)sp->lo, (long long)sp->hi);
            }
        }
        *(int *)field = n;
        return FOX_OK;
    }
    case A_KEYS: {
        int n = 0;
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > FOX_PROTO_MAX_KEYS)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s must be an array of at most %d keys",
                        cmd, sp->name, FOX_PROTO_MAX_KEYS);
        for (const cJSON *it = v->child; it; it = it->next, n++) {
            if (!is_name(it))
                return fox_errf(err, errlen, FOX_EINVAL,
                            "%s: args.%s[%d] must be a key of 1 to %d bytes", cmd, sp->name, n,
                            FOX_PROTO_NAME_MAX);
            req->keys[n] = it->valuestring;
        }
        *(int *)field = n;
        return FOX_OK;
    }
    case A_VALUES: {
        const char *dup;
        int n = cJSON_GetArraySize(v);
        if (!cJSON_IsObject(v) || n == 0 || n > FOX_PROTO_MAX_KEYS)
            return fox_errf(err, errlen, FOX_EINVAL,
                        "%s: args.%s must be an object of 1 to %d key: value pairs", cmd, sp->name,
                        FOX_PROTO_MAX_KEYS);
        if (has_duplicate(v, &dup))
            return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s names key '%s' twice", cmd, sp->name,
                        clean(nb, sizeof nb, dup));
        for (const cJSON *it = v->child; it; it = it->next) {
            size_t kl = strlen(it->string);
            if (kl == 0 || kl > FOX_PROTO_NAME_MAX)
                return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s has a key of %zu bytes", cmd,
                            sp->name, kl);
            if (!cJSON_IsNumber(it) && !cJSON_IsString(it) && !cJSON_IsBool(it))
                return fox_errf(err, errlen, FOX_EINVAL,
                            "%s: args.%s.%s must be a number, string or boolean", cmd, sp->name,
                            clean(nb, sizeof nb, it->string));
        }
        *(const cJSON **)field = v;
        return FOX_OK;
    }
    }
    return fox_errf(err, errlen, FOX_EINTERNAL, "unhandled argument type");
}

static int
parse_args(fox_request *req, const cJSON *args, char *err, size_t errlen)
{
    const arg_spec *specs = cmd_args[req->cmd];
    const char *cmd = fox_cmd_name(req->cmd);
    const char *dup;
    char nb[48];

    if (args && !cJSON_IsObject(args))
        return fox_errf(err, errlen, FOX_EINVAL, "%s: args must be an object", cmd);
    if (args && has_duplicate(args, &dup))
        return fox_errf(err, errlen, FOX_EINVAL, "%s: args.%s given twice", cmd,
                    clean(nb, sizeof nb, dup));
    /* Unknown fields first: a typo must not pass as "optional, absent". */
    for (const cJSON *it = args ? args->child : NULL; it; it = it->next) {
        const arg_spec *sp = specs;
        while (sp->name && strcmp(sp->name, it->string) != 0)
            sp++;
        if (!sp->name)
            return fox_errf(err, errlen, FOX_EINVAL, "%s: unknown field args.%s", cmd,
                        clean(nb, sizeof nb, it->string));
    }
    for (const arg_spec *sp = specs; sp->name; sp++) {
        const cJSON *v = args ? cJSON_GetObjectItemCaseSensitive(args, sp->name) : NULL;
        if (!v) {
            if (sp->required)
                return fox_errf(err, errlen, FOX_EINVAL, "%s: missing args.%s", cmd, sp->name);
            continue;
        }
        int rv = parse_arg(req, sp, v, err, errlen);
        if (rv != FOX_OK)
            return rv;
    }
    /* Clearing clears every member's flags: one member's clear would be a promise not kept. */
    if (req->cmd == FOX_CMD_NAN_FLAGS && req->clear && req->member >= 0)
        return fox_errf(err, errlen, FOX_EINVAL,
                        "%s: args.clear clears every member's flags; leave out args.member", cmd);
    return FOX_OK;
}

/* ---------------------------------------------------------------- requests */

/*
 * Parse buf as one JSON value with nothing after it but whitespace and at
 * most one NUL: a message is one object, and bytes smuggled after it are a
 * sign of a broken client.
 */
static cJSON *
parse_json(const char *buf, size_t len, char *err, size_t errlen)
{
    if (len > 0 && buf[len - 1] == 0)
        len--;
    if (memchr(buf, 0, len)) {
        fox_errf(err, errlen, 0, "message contains a NUL byte");
        return NULL;
    }
    /*
     * One pass over the bytes before cJSON builds anything, for what it
     * cannot be asked to refuse:
     *  - \u0000 in a string: cJSON decodes it into a NUL that ends the C
     *    string early, so "version\u0000garbage" would read as "version";
     *  - more values or deeper nesting than any request has: a request of
     *    thousands of keys then costs this scan, not thousands of nodes
     *    built, checked and freed, before anyone knows who sent it.
     * Outside strings the scan counts commas and brackets; inside it skips
     * each escape's second character, so an escaped quote or backslash
     * never ends a string early. Bytes that are not JSON are cJSON's to refuse.
     * It comes before the UTF-8 check, which reads every byte, because it
     * stops at the first value too many.
     */
    int in_string = 0, depth = 0;
    size_t values = 1;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (in_string) {
            if (c == '"') {
                in_string = 0;
            } else if (c == '\\') {
                if (i + 5 < len && buf[i + 1] == 'u' && !memcmp(buf + i + 2, "0000", 4)) {
                    fox_errf(err, errlen, 0, "message contains \\u0000 (byte %zu)", i);
                    return NULL;
                }
                i++;
            }
        } else if (c == '"') {
            in_string = 1;
        } else if ((c == '{' || c == '[') && ++depth > FOX_PROTO_MAX_DEPTH) {
            fox_errf(err, errlen, 0, "message nests deeper than %d levels (byte %zu)",
                     FOX_PROTO_MAX_DEPTH, i);
            return NULL;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && ++values > FOX_PROTO_MAX_VALUES) {
            fox_errf(err, errlen, 0, "message holds more than %d values (byte %zu)",
                     FOX_PROTO_MAX_VALUES, i);
            return NULL;
        }
    }
    size_t bad;
    if (!fox_utf8_valid(buf, len, &bad)) {
        fox_errf(err, errlen, 0, "message is not valid UTF-8 (byte %zu)", bad);
        return NULL;
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!doc) {
        size_t at = end ? (size_t)(end - buf) : 0;
        fox_errf(err, errlen, 0, "not valid JSON (at byte %zu of %zu)", at, len);
        return NULL;
    }
    for (const char *p = end; p < buf + len; p++)
        if (!isspace((unsigned char)*p)) {
            fox_errf(err, errlen, 0, "trailing bytes after the JSON value (byte %zu)",
                 (size_t)(p - buf));
            cJSON_Delete(doc);
            return NULL;
        }
    return doc;
}

int
fox_proto_parse_envelope(fox_request *req, const char *buf, size_t len, char *err, size_t errlen)
{
    const cJSON *v, *id, *cmd, *token;
    const char *dup;
    char nb[48];
    int64_t x;

    memset(req, 0, sizeof *req);
    req->cmd = -1;
    req->checkpoint = 1;
    req->member = -1;
    if (err && errlen)
        err[0] = 0;

    if (len > FOX_PROTO_MAX_MSG)
        return fox_errf(err, errlen, FOX_EPROTO, "message of %zu bytes exceeds the limit of %d", len,
                    FOX_PROTO_MAX_MSG);
    req->doc = parse_json(buf, len, err, errlen);
    if (!req->doc)
        return FOX_EPROTO;
    if (!cJSON_IsObject(req->doc))
        return fox_errf(err, errlen, FOX_EPROTO, "a request must be a JSON object");

    /* Read the id before anything can fail, so that even errors carry it. */
    id = cJSON_GetObjectItemCaseSensitive(req->doc, "id");
    if (id && get_int(id, 0, FOX_PROTO_MAX_ID, &x)) {
        req->has_id = 1;
        req->id = x;
    }
    if (has_duplicate(req->doc, &dup))
        return fox_errf(err, errlen, FOX_EPROTO, "field '%s' given twice", clean(nb, sizeof nb, dup));
    for (const cJSON *it = req->doc->child; it; it = it->next)
        if (strcmp(it->string, "v") && strcmp(it->string, "id") && strcmp(it->string, "cmd") &&
            strcmp(it->string, "args") && strcmp(it->string, "token"))
            return fox_errf(err, errlen, FOX_EPROTO, "unknown field '%s'",
                        clean(nb, sizeof nb, it->string));

    v = cJSON_GetObjectItemCaseSensitive(req->doc, "v");
    if (!v)
        return fox_errf(err, errlen, FOX_EPROTO, "missing v (protocol version)");
    if (!get_int(v, FOX_PROTO_VERSION, FOX_PROTO_VERSION, &x))
        return fox_errf(err, errlen, FOX_EPROTO, "unsupported protocol version (this is v%d)",
                    FOX_PROTO_VERSION);
    if (!id)
        return fox_errf(err, errlen, FOX_EPROTO, "missing id");
    if (!req->has_id)
        return fox_errf(err, errlen, FOX_EPROTO, "id must be an integer in [0, 2^53-1]");

    token = cJSON_GetObjectItemCaseSensitive(req->doc, "token");
    if (token) {
        if (!cJSON_IsString(token) || strlen(token->valuestring) > FOX_PROTO_TOKEN_MAX)
            return fox_errf(err, errlen, FOX_EPROTO, "token must be a string of at most %d bytes",
                        FOX_PROTO_TOKEN_MAX);
        req->token = token->valuestring;
    }

    cmd = cJSON_GetObjectItemCaseSensitive(req->doc, "cmd");
    if (!cmd)
        return fox_errf(err, errlen, FOX_EPROTO, "missing cmd");
    if (!cJSON_IsString(cmd))
        return fox_errf(err, errlen, FOX_EPROTO, "cmd must be a string");
    req->cmd = fox_cmd_lookup(cmd->valuestring);
    if (req->cmd < 0)
        return fox_errf(err, errlen, FOX_EUNKNOWN, "unknown command '%s'",
                    clean(nb, sizeof nb, cmd->valuestring));

    return FOX_OK;
}

int
fox_proto_parse_args(fox_request *req, char *err, size_t errlen)
{
    return parse_args(req, cJSON_GetObjectItemCaseSensitive(req->doc, "args"), err, errlen);
}

int
fox_proto_parse_request(fox_request *req, const char *buf, size_t len, char *err, size_t errlen)
{
    int rv = fox_proto_parse_envelope(req, buf, len, err, errlen);
    return rv == FOX_OK ? fox_proto_parse_args(req, err, errlen) : rv;
}

void
fox_request_fini(fox_request *req)
{
    if (!req)
        return;
    cJSON_Delete(req->doc);
    req->doc = NULL;
}

/* ------------------------------------------------------ replies and events */

static char *
print_doc(cJSON *doc)
{
    char *s = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    return s;
}

/*
 * An integer field printed exactly: cJSON prints numbers beyond 2^31 with
 * "%1.15g" and accepts the result when it is merely close, which would
 * change an id of 16 digits on its way back to the client.
 */
static void
add_int(cJSON *obj, const char *key, int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    cJSON_AddRawToObject(obj, key, buf);
}

static cJSON *
envelope(int has_id, int64_t id)
{
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return NULL;
    cJSON_AddNumberToObject(doc, "v", FOX_PROTO_VERSION);
    if (has_id)
        add_int(doc, "id", id);
    else
        cJSON_AddNullToObject(doc, "id");
    return doc;
}

char *
fox_proto_reply_error(int has_id, int64_t id, int status, const char *message)
{
    cJSON *doc = envelope(has_id, id);
    cJSON *e = cJSON_CreateObject();
    if (!doc || !e) {
        cJSON_Delete(doc);
        cJSON_Delete(e);
        return NULL;
    }
    cJSON_AddFalseToObject(doc, "ok");
    cJSON_AddStringToObject(e, "code", fox_proto_code_name(status));
    /* A message cut to fit its buffer may end in half a character: JSON text must not. */
    char *text = strdup(message && message[0] ? message : fox_strerror(status));
    if (text)
        fox_utf8_sanitize(text);
    cJSON_AddStringToObject(e, "message", text ? text : "out of memory");
    free(text);
    cJSON_AddItemToObject(doc, "error", e);
    return print_doc(doc);
}

char *
fox_proto_reply_ok(int has_id, int64_t id, cJSON *result)
{
    cJSON *doc = envelope(has_id, id);
    if (!result)
        result = cJSON_CreateObject();
    if (!doc || !result) {
        cJSON_Delete(doc);
        cJSON_Delete(result);
        return NULL;
    }
    cJSON_AddTrueToObject(doc, "ok");
    cJSON_AddItemToObject(doc, "result", result);
    char *s = print_doc(doc);
    if (s && strlen(s) > FOX_PROTO_MAX_REPLY) {
        free(s);
        return fox_proto_reply_error(has_id, id, FOX_EINTERNAL, "reply too large");
    }
    return s;
}

char *
fox_proto_event(uint64_t seq, int64_t time_ms, const char *type, cJSON *data)
{
    cJSON *doc = cJSON_CreateObject();
    if (!data)
        data = cJSON_CreateObject();
    if (!doc || !data) {
        cJSON_Delete(doc);
        cJSON_Delete(data);
        return NULL;
    }
    cJSON_AddStringToObject(doc, "event", type); /* first: SUB filters on the prefix */
    cJSON_AddNumberToObject(doc, "v", FOX_PROTO_VERSION);
    add_int(doc, "seq", (int64_t)seq);
    add_int(doc, "time_ms", time_ms);
    cJSON_AddItemToObject(doc, "data", data);
    return print_doc(doc);
}

char *
fox_proto_request(int64_t id, const char *cmd, cJSON *args, const char *token)
{
    cJSON *doc = envelope(1, id);
    if (!doc) {
        cJSON_Delete(args);
        return NULL;
    }
    cJSON_AddStringToObject(doc, "cmd", cmd);
    if (args)
        cJSON_AddItemToObject(doc, "args", args);
    if (token)
        cJSON_AddStringToObject(doc, "token", token);
    return print_doc(doc);
}

/* ------------------------------------------------------ client-side parsing */

int
fox_proto_parse_reply(fox_reply *rep, const char *buf, size_t len, char *err, size_t errlen)
{
    const cJSON *v, *id, *ok;
    int64_t x;

    memset(rep, 0, sizeof *rep);
    rep->doc = parse_json(buf, len, err, errlen);
    if (!rep->doc)
        return FOX_EPROTO;
    v = cJSON_GetObjectItemCaseSensitive(rep->doc, "v");
    id = cJSON_GetObjectItemCaseSensitive(rep->doc, "id");
    ok = cJSON_GetObjectItemCaseSensitive(rep->doc, "ok");
    if (!cJSON_IsObject(rep->doc) || !get_int(v, FOX_PROTO_VERSION, FOX_PROTO_VERSION, &x) ||
        !cJSON_IsBool(ok))
        return fox_errf(err, errlen, FOX_EPROTO, "reply lacks v:%d or ok", FOX_PROTO_VERSION);
    if (get_int(id, 0, FOX_PROTO_MAX_ID, &x)) {
        rep->has_id = 1;
        rep->id = x;
    }
    rep->ok = cJSON_IsTrue(ok);
    if (rep->ok) {
        rep->result = cJSON_GetObjectItemCaseSensitive(rep->doc, "result");
        if (!cJSON_IsObject(rep->result))
            return fox_errf(err, errlen, FOX_EPROTO, "reply lacks a result object");
        return FOX_OK;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(rep->doc, "error");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
    if (!cJSON_IsString(code) || !cJSON_IsString(msg))
        return fox_errf(err, errlen, FOX_EPROTO, "error reply lacks code or message");
    rep->code_name = code->valuestring;
    rep->message = msg->valuestring;
    rep->code = fox_proto_code_lookup(code->valuestring);
    if (rep->code < 0)
        rep->code = FOX_EINTERNAL;
    return FOX_OK;
}

void
fox_reply_fini(fox_reply *rep)
{
    if (!rep)
        return;
    cJSON_Delete(rep->doc);
    rep->doc = NULL;
}

int
fox_proto_parse_event(fox_event *ev, const char *buf, size_t len, char *err, size_t errlen)
{
    const cJSON *type, *seq, *t, *data;
    int64_t x;

    memset(ev, 0, sizeof *ev);
    ev->doc = parse_json(buf, len, err, errlen);
    if (!ev->doc)
        return FOX_EPROTO;
    type = cJSON_GetObjectItemCaseSensitive(ev->doc, "event");
    seq = cJSON_GetObjectItemCaseSensitive(ev->doc, "seq");
    t = cJSON_GetObjectItemCaseSensitive(ev->doc, "time_ms");
    data = cJSON_GetObjectItemCaseSensitive(ev->doc, "data");
    if (!cJSON_IsString(type) || !get_int(seq, 0, FOX_PROTO_MAX_ID, &x) || !cJSON_IsObject(data))
        return fox_errf(err, errlen, FOX_EPROTO, "event lacks event, seq or data");
    ev->type = type->valuestring;
    ev->seq = (uint64_t)x;
    ev->time_ms = get_int(t, 0, FOX_PROTO_MAX_ID, &x) ? x : 0;
    ev->data = data;
    return FOX_OK;
}

void
fox_event_fini(fox_event *ev)
{
    if (!ev)
        return;
    cJSON_Delete(ev->doc);
    ev->doc = NULL;
}

/* ---------------------------------------------------------------- endpoints */

int
fox_proto_default_runtime_dir(char *buf, size_t len)
{
    const char *rd = getenv("RUNTIME_DIRECTORY");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;

    if (rd && rd[0]) {
        /* systemd lists several directories separated by ':'; ours is the first. */
        size_t k = strcspn(rd, ":");
        n = snprintf(buf, len, "%.*s", (int)k, rd);
    } else if (geteuid() == 0) {
        n = snprintf(buf, len, "/run/foxd");
    } else if (xdg && xdg[0] == '/') {
        n = snprintf(buf, len, "%s/foxd", xdg);
    } else {
        n = snprintf(buf, len, "/tmp/foxd-%u", (unsigned)geteuid());
    }
    return (n < 0 || (size_t)n >= len) ? FOX_EINVAL : FOX_OK;
}

int
fox_proto_parse_bars(const char *s, int *val_from, int *from, int *to)
{
    char tail;
    int v, f, t;
    if (sscanf(s, "%d:%d:%d%c", &v, &f, &t, &tail) == 3) {
        if (v < 0 || v > f || f >= t)
            return -1;
        *val_from = v;
    } else if (sscanf(s, "%d:%d%c", &f, &t, &tail) == 2) {
        if (f < 0 || f >= t)
            return -1;
        *val_from = -1;
    } else {
        return -1;
    }
    *from = f;
    *to = t;
    return 0;
}
