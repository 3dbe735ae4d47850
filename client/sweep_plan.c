/*
 * sweep_plan.c — a sweep directory's JSON files: read whole, written
 * atomically, a job's result file among them. See sweep_plan.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/conn.h"
#include "client/sweep_plan.h"
#include "common/fsutil.h"
#include "common/member_keys.h"

static char *
read_text(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    fclose(f);
    if (!buf)
        snprintf(err, errlen, "%s: out of memory", path);
    else
        buf[n] = 0;
    return buf;
}

cJSON *
foxctl_sweep_read_json(const char *path, char *err, size_t errlen)
{
    char *text = read_text(path, err, errlen);
    if (!text)
        return NULL;
    cJSON *doc = cJSON_Parse(text);
    free(text);
    if (!doc)
        snprintf(err, errlen, "%s: not valid JSON", path);
    return doc;
}

int
foxctl_sweep_write_json(const char *path, const cJSON *doc)
{
    char err[512];
    char *text = cJSON_Print(doc);
    if (!text)
        return FOXCTL_EREPLY;
    size_t n = strlen(text);
    text[n] = '\n'; /* cJSON's terminator becomes the file's last newline */
    int rv = fox_write_atomic(path, text, n + 1, 0644, 1, err, sizeof err);
    cJSON_free(text);
    if (rv != FOX_OK) {
        fprintf(stderr, "foxctl: sweep: %s\n", err);
        return FOXCTL_EREPLY;
    }
    return FOXCTL_OK;
}

int
foxctl_sweep_write_job(const sweep_plan *p, const sweep_job *j, cJSON *record, int failed)
{
    char path[1200];
    cJSON_AddStringToObject(record, "id", j->id);
    cJSON_AddNumberToObject(record, "config", j->config);
    cJSON_AddNumberToObject(record, "seed", (double)j->seed);
    cJSON_AddNumberToObject(record, "fold", j->fold);
    cJSON_AddItemToObject(record, "values", cJSON_Duplicate(j->values, 1));
    snprintf(path, sizeof path, "%s/jobs/%s%s.json", p->dir, j->id, failed ? ".failed" : "");
    return foxctl_sweep_write_json(path, record);
}

void
foxctl_sweep_value_text(const cJSON *v, char *buf, size_t len)
{
    if (cJSON_IsString(v)) {
        snprintf(buf, len, "%s", v->valuestring);
    } else if (cJSON_IsBool(v)) {
        snprintf(buf, len, "%d", cJSON_IsTrue(v));
    } else {
        char *t = cJSON_PrintUnformatted(v);
        snprintf(buf, len, "%s", t ? t : "");
        cJSON_free(t);
    }
}

cJSON *
foxctl_sweep_list_text(const cJSON *a)
{
    /* engine.members' limit of values, each as long as a 64-bit seed and its comma. */
    char text[64 * 22] = "";
    size_t used = 0;
    for (const cJSON *v = a->child; v && used < sizeof text; v = v->next) {
        char one[64];
        foxctl_sweep_value_text(v, one, sizeof one);
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", used ? "," : "", one);
    }
    return cJSON_CreateString(text);
}

/* The seeds of the pack led by j run on from its seed by one: train.seed + k gives them. */
static int
seeds_consecutive(const sweep_plan *p, const sweep_job *j)
{
    uint64_t want = j->seed;
    for (int k = (int)(j - p->jobs); k >= 0; k = p->jobs[k].next)
        if (p->jobs[k].seed != want++)
            return 0;
    return 1;
}

int
foxctl_sweep_pack_apart(const sweep_plan *p, const sweep_job *j, const char *key)
{
    const cJSON *mine = cJSON_GetObjectItemCaseSensitive(j->values, key);
    for (int k = j->next; k >= 0; k = p->jobs[k].next) {
        const cJSON *theirs = cJSON_GetObjectItemCaseSensitive(p->jobs[k].values, key);
        if ((mine || theirs) && !cJSON_Compare(mine, theirs, 1))
            return 1;
    }
    return 0;
}

cJSON *
foxctl_sweep_run_values(const sweep_plan *p, const sweep_job *j)
{
    cJSON *values = cJSON_Duplicate(j->values, 1);
    if (!values)
        return NULL;
    if (p->packs && !cJSON_GetObjectItemCaseSensitive(values, "engine.members"))
        cJSON_AddNumberToObject(values, "engine.members", j->members);
    if (j->members < 2)
        return values;
    for (int i = 0; i < FOX_MEMBER_KEYS; i++) {
        const char *key = fox_member_key(i);
        /* One seed for all would give member k train.seed + k: seeds are a list unless so. */
        if (i == FOX_MEMBER_KEY_SEED ? seeds_consecutive(p, j) : !foxctl_sweep_pack_apart(p, j, key))
            continue;
        cJSON *list = cJSON_CreateArray();
        for (int k = (int)(j - p->jobs); list && k >= 0; k = p->jobs[k].next)
            cJSON_AddItemToArray(
                list, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(p->jobs[k].values, key), 1));
        cJSON_ReplaceItemInObjectCaseSensitive(values, key, foxctl_sweep_list_text(list));
        cJSON_Delete(list);
    }
    return values;
}
