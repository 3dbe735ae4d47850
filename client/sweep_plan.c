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
