/*
 * ctx.c (CUDA) — what the CUDA backend's host files share beneath them all:
 * the errors (the last failure's text, a dead backend), the context's
 * process-wide section, device allocation, the dropping of captured graphs
 * and the host mirror of the device counters (ctx.h).
 *
 * backend.c (lifecycle), step.c (the step), table.c (the fused check's
 * table) and debug.c call these, and the error macros of every host file
 * and kernel land in fox__cuda_fail; this file calls none of them back, so
 * the host files stand on it without a circle among themselves.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "common/error.h"
#include "common/log.h"
#include "gpu/cuda/backend_impl.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/ctx.h"

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */

/* Shorter than base.err, so that "cuda <op>: " + it always fits. */
static _Thread_local char last_err[448];

int
fox__cuda_fail(const char *file, int line, const char *call, const char *what, int code)
{
    snprintf(last_err, sizeof last_err, "%s:%d %s: %s (%d)", file, line, call, what, code);
    fox_log(FOX_LOG_ERR, "cuda: %s", last_err);
    return FOX_ECUDA;
}

const char *
fox__cuda_last_error(void)
{
    return last_err;
}

/*
 * A failed step leaves the device state unknown and a sticky error poisons
 * the context: the backend refuses everything after it (the daemon's
 * supervisor restarts the process).
 */
int
fox__cuda_be_fail(fox_cuda_backend *be, int rv, const char *op)
{
    if (rv == FOX_OK || rv == FOX_EHALT) /* a halt's message is already in err */
        return rv;
    if (rv == FOX_ECUDA) {
        be->dead = 1;
        snprintf(be->base.err, sizeof be->base.err, "cuda %s: %s", op, last_err);
    } else {
        snprintf(be->base.err, sizeof be->base.err, "cuda %s: %s", op, fox_strerror(rv));
    }
    return rv;
}

/* ------------------------------------------------------------------------------------------ */
/* The members a launch covers (cuda_impl.h)                                                  */

static _Thread_local int launch_members = 1;
static _Thread_local fox_cuda_ptr_pool *launch_pool;

int
fox__cuda_launch_members(void)
{
    return launch_members;
}

void
fox__cuda_set_launch_members(int members, fox_cuda_ptr_pool *pool)
{
    launch_members = members;
    launch_pool = pool;
}

fox_cuda_ptr_pool *
fox__cuda_launch_pool(void)
{
    return launch_pool;
}

/* ------------------------------------------------------------------------------------------ */
/* The context's section (ctx.h)                                                              */

static pthread_rwlock_t section = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

void
fox__cuda_section_enter(void)
{
    pthread_rwlock_wrlock(&section);
}

void
fox__cuda_section_share(void)
{
    pthread_rwlock_rdlock(&section);
}

void
fox__cuda_section_leave(void)
{
    pthread_rwlock_unlock(&section);
}

/* ------------------------------------------------------------------------------------------ */
/* Device memory and captured graphs                                                          */

int
fox__cuda_alloc(void *pp, size_t bytes)
{
    if (fox__cuda_pop_building())
        return fox__cuda_pop_alloc(pp, bytes ? bytes : 4);
    FOX_CUDA_TRY(cudaMalloc((void **)pp, bytes ? bytes : 4));
    return 0;
}

void
fox__cuda_free(void *p)
{
    if (!fox__cuda_pop_building_owns(p))
        cudaFree(p);
}

int
fox__cuda_capture(fox_cuda_backend *be, int (*enqueue)(fox_cuda_backend *be, const void *arg),
                  const void *arg, unsigned long long flags, cudaGraphExec_t *out)
{
    cudaStream_t s0 = be->net.st[0];
    cudaGraph_t g = NULL;
    fox__cuda_section_enter();
    cudaError_t e = cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal);
    int rv = e == cudaSuccess ? enqueue(be, arg) : FOX_OK;
    if (e == cudaSuccess) {
        cudaError_t end = cudaStreamEndCapture(s0, &g);
        e = rv == FOX_OK ? end : cudaSuccess;
    }
    if (e == cudaSuccess && rv == FOX_OK)
        e = cudaGraphInstantiate(out, g, flags);
    if (g)
        cudaGraphDestroy(g);
    fox__cuda_section_leave();
    FOX_TRY(rv);
    FOX_CUDA_TRY(e);
    return FOX_OK;
}

void
fox__cuda_drop_graphs(fox_cuda_backend *be)
{
    fox__cuda_drop_step_graphs(be->graph);
    /* The population's graphs are member 0's step: they hold this member's too. */
    if (be->pop)
        fox__cuda_pop_drop_graphs(be->pop);
    fox__cuda_drop_pass_graphs(&be->passes);
}

void
fox__cuda_drop_step_graphs(cudaGraphExec_t graph[G_KINDS][2])
{
    for (int k = 0; k < 2 * G_KINDS; k++)
        if (graph[k / 2][k % 2]) {
            cudaGraphExecDestroy(graph[k / 2][k % 2]);
            graph[k / 2][k % 2] = NULL;
        }
}

void
fox__cuda_drop_pass_graphs(fox_cuda_pass_graphs *t)
{
    for (int k = 0; k < t->n; k++)
        if (t->g[k].exec)
            cudaGraphExecDestroy(t->g[k].exec);
    t->n = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Host mirror of the device counters                                                         */

int
fox__cuda_sync_ctl(fox_cuda_backend *be)
{
    cudaStream_t s0 = be->net.st[0];
    FOX_CUDA_TRY(cudaMemcpyAsync(be->hctl, be->ctl, sizeof *be->ctl, cudaMemcpyDeviceToHost, s0));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}

int
fox__cuda_put_ctl(fox_cuda_backend *be)
{
    cudaStream_t s0 = be->net.st[0];
    FOX_CUDA_TRY(cudaMemcpyAsync(be->ctl, be->hctl, sizeof *be->ctl, cudaMemcpyHostToDevice, s0));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}
