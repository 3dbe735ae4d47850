/*
 * ctx.h — what the CUDA backend's host files share beneath them all
 * (ctx.c): a failed call as the backend's status, the context's
 * process-wide section, device allocation, the dropping of captured graphs
 * and the host mirror of the device counters. The errors' text itself
 * (fox__cuda_fail, fox__cuda_last_error) is declared in cuda_impl.h, beside
 * the macros that the kernels share.
 *
 * Nothing outside gpu/cuda/ includes it. Every function here runs on the
 * thread that owns the backend (the trainer's) and returns a FOX_* status;
 * the section is the one thing the engines of several threads share.
 */
#ifndef FOX_CUDA_CTX_H
#define FOX_CUDA_CTX_H

#include <stddef.h>

#include "gpu/cuda/backend_impl.h"

/*
 * rv as the backend's status of op: FOX_OK and FOX_EHALT pass through (a
 * halt's message is already in err); any other code's text goes into err,
 * and FOX_ECUDA marks the backend dead (a sticky error poisons the context).
 */
int fox__cuda_be_fail(fox_cuda_backend *be, int rv, const char *op);

/* Every entry point of a dead backend refuses at once. */
#define FOX_CUDA_ALIVE(be)                                                                         \
    do {                                                                                           \
        if ((be)->dead)                                                                            \
            return FOX_ECUDA;                                                                      \
        cudaSetDevice((be)->cfg->device);                                                          \
    } while (0)

/*
 * Several engines of one process share the device's context. Its allocations
 * and frees, cudaDeviceSynchronize and the first launch of a kernel (which
 * loads its module, cuBLAS's too) synchronize the context, and would
 * invalidate a graph capture running meanwhile in another engine's thread.
 * So an engine's creation and destruction, and each step's eager first run
 * and captures, hold this process-wide section alone (enter); the other
 * entry points that launch outside a graph (begin_fold, reset_for_fold,
 * q_start, state_io: a new shape may load a kernel) hold it shared with
 * each other (share). Otherwise an engine works on its own streams only: no
 * legacy-stream copy, no device-wide synchronization. Writers are preferred,
 * so that engines that evaluate all the time do not hold a capture off.
 */
void fox__cuda_section_enter(void);
void fox__cuda_section_share(void);
void fox__cuda_section_leave(void);

/*
 * What enqueue(be, arg) puts on stream MAIN (and the streams it forks and
 * joins back), captured and instantiated into *out with flags (cudaGraph-
 * InstantiateFlag*), holding the section alone: the step's graphs and the
 * evaluation passes' both come from here.
 */
int fox__cuda_capture(fox_cuda_backend *be, int (*enqueue)(fox_cuda_backend *be, const void *arg),
                      const void *arg, unsigned long long flags, cudaGraphExec_t *out);
/* The captured graphs destroyed, the evaluation passes' too: the next of each captures again. */
void fox__cuda_drop_graphs(fox_cuda_backend *be);
/* A table of step graphs (a backend's or its population's), and one of passes, destroyed. */
void fox__cuda_drop_step_graphs(cudaGraphExec_t graph[G_KINDS][2]);
void fox__cuda_drop_pass_graphs(fox_cuda_pass_graphs *t);
/* The host mirror of the device counters: read (sync) or written back (put), on MAIN. */
int fox__cuda_sync_ctl(fox_cuda_backend *be);
int fox__cuda_put_ctl(fox_cuda_backend *be);

#endif
