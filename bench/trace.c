/*
 * trace.c — CUPTI activity records of kernels, memsets and memcpys into a
 * growing array (trace.h). CUPTI hands over full buffers from its own
 * thread, so the array is appended under a mutex; names are copied, since
 * CUPTI owns their storage only while the buffer lives.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <cupti.h>

#include "common/error.h"
#include "bench/trace.h"

typedef struct trace_rec {
    unsigned long long start, end;
    unsigned stream;
    const char *kind;
    char *name;
} trace_rec;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static trace_rec *recs;
static size_t n_recs, cap_recs;
static int out_of_memory;

enum { TRACE_BUFFER = 8 << 20 };

static void CUPTIAPI
buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, TRACE_BUFFER);
    *size = *buffer ? TRACE_BUFFER : 0;
    *max_records = 0;
}

static void
add(unsigned long long start, unsigned long long end, unsigned stream, const char *kind,
    const char *name)
{
    pthread_mutex_lock(&lock);
    if (n_recs == cap_recs) {
        size_t cap = cap_recs ? 2 * cap_recs : 4096;
        trace_rec *r = realloc(recs, cap * sizeof *r);
        if (!r) {
            out_of_memory = 1;
            pthread_mutex_unlock(&lock);
            return;
        }
        recs = r;
        cap_recs = cap;
    }
    char *copy = strdup(name ? name : "");
    if (!copy)
        out_of_memory = 1;
    else
        recs[n_recs++] = (trace_rec){start, end, stream, kind, copy};
    pthread_mutex_unlock(&lock);
}

static void CUPTIAPI
buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx;
    (void)stream_id;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            add(k->start, k->end, k->streamId, "kernel", k->name);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            add(m->start, m->end, m->streamId, "memset", "memset");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            add(m->start, m->end, m->streamId, "memcpy", "memcpy");
        }
    }
    free(buffer);
}

static int
cupti_fail(CUptiResult r, const char *call, char *err, size_t errlen)
{
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    return fox_errf(err, errlen, FOX_ECUDA, "%s: %s", call, s ? s : "unknown CUPTI error");
}

#define CUPTI_TRY(call)                                                                            \
    do {                                                                                           \
        CUptiResult r_ = (call);                                                                   \
        if (r_ != CUPTI_SUCCESS)                                                                   \
            return cupti_fail(r_, #call, err, errlen);                                             \
    } while (0)

int
fox_trace_begin(char *err, size_t errlen)
{
    CUPTI_TRY(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    CUPTI_TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
    CUPTI_TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    return FOX_OK;
}

static int
by_start(const void *a, const void *b)
{
    const trace_rec *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

int
fox_trace_end(const char *path, char *err, size_t errlen)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return fox_errf(err, errlen, FOX_ECUDA, "cudaDeviceSynchronize: %s", cudaGetErrorString(e));
    CUPTI_TRY(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    CUPTI_TRY(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_TRY(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET));
    CUPTI_TRY(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY));
    int rv = FOX_OK;
    pthread_mutex_lock(&lock);
    FILE *f = out_of_memory ? NULL : fopen(path, "w");
    if (out_of_memory) {
        rv = fox_errf(err, errlen, FOX_ENOMEM, "trace: out of memory for the records");
    } else if (!f) {
        rv = fox_errf(err, errlen, FOX_EIO, "trace: cannot write %s", path);
    } else {
        qsort(recs, n_recs, sizeof *recs, by_start);
        fprintf(f, "start_ns,end_ns,stream,kind,name\n");
        for (size_t k = 0; k < n_recs; k++)
            fprintf(f, "%llu,%llu,%u,%s,%s\n", recs[k].start, recs[k].end, recs[k].stream,
                    recs[k].kind, recs[k].name);
        if (fclose(f) != 0)
            rv = fox_errf(err, errlen, FOX_EIO, "trace: writing %s failed", path);
    }
    for (size_t k = 0; k < n_recs; k++)
        free(recs[k].name);
    free(recs);
    recs = NULL;
    n_recs = cap_recs = 0;
    pthread_mutex_unlock(&lock);
    return rv;
}
