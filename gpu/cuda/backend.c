/*
 * backend.c (CUDA) — the CUDA backend behind gpu/backend.h: device state,
 * the full step (collect from N environments, one train step, target
 * update) enqueued on the device and captured into CUDA graphs, the ISV and
 * sentinel buffers in mapped-pinned host memory, and the debug entry points
 * of cuda_backend.h.
 *
 * A step never returns to the host: ε, the step counters, the ring's head
 * and size and every EMA live in device memory (fox_cuda_ctl, the device
 * ISV copy) and are read there, so one graph per kind of step (collect
 * only, full, train only) is captured once per fold and replayed. The host
 * synchronizes once per run_steps/train_only chunk, to return the stats.
 *
 * ISV: the device works on its own copy, loaded from the mapped buffer at
 * the start of every chunk (so the host's writes between chunks —
 * reset_for_fold, the fingerprint — are kept) and published to it at the
 * end of every step; host readers see values at most one step old. Flags:
 * kernels may only ever write 1 into the mapped buffer; the host clears it.
 *
 * Not here: the math (net.c, *.cu), the engine's folds and evaluation.
 * Prioritized replay is not implemented on this backend yet: create refuses
 * it. Single thread: the trainer's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../error.h"
#include "../isv.h"
#include "../log.h"
#include "../sentinel.h"
#include "cuda_backend.h"
#include "cuda_impl.h"

#ifndef FOX_CUDA_ARCH
#define FOX_CUDA_ARCH 90
#endif

/* Rows of the collection / q_values forward when the envs are fewer. */
#define QV_ROWS 256

enum { G_COLLECT = 0, G_FULL = 1, G_TRAIN = 2, G_KINDS = 3 };

typedef struct cuda_backend {
    fox_backend_base base;
    fox_backend_env env;
    const fox_config *cfg;
    const fox_model_layout *lay;
    int N, B, S;
    size_t np;
    fox_cuda_net net;
    fox_cuda_fwd col;           /* forward of the collection and of q_values */
    float *xcol;                /* [col.cap × S] */
    fox_cuda_collect_cfg cc;
    fox_cuda_loss_hp hp;
    fox_cuda_optim_cfg oc;
    /* device state */
    fox_cuda_ctl *ctl;          /* device */
    fox_cuda_ctl *hctl;         /* pinned host mirror, valid after sync_ctl */
    fox_cuda_fold *fold;
    fox_cuda_env *envs;
    int32_t *wbar;
    float *wport, *wr;
    uint32_t *wa;
    fox_cuda_trans *staged, *ring;
    int *counts;
    float *d_open, *d_high, *d_low, *d_close, *d_norm;
    int8_t *d_regime;
    float *isv_dev;             /* the device's working copy */
    float *isv_map;             /* device address of the mapped ISV */
    float *dbg_scale;           /* device scalar: the debug hook's aux label scale */
    float *dbg_w;               /* [B] the debug hook's importance weights */
    /* host */
    float *isv_mem;             /* mapped pinned, FOX_ISV_TOTAL_DIM */
    int *flags_mem;             /* mapped pinned, FOX_SENTINEL_SLOTS */
    cudaGraphExec_t graph[G_KINDS];
    int warm[G_KINDS];          /* the kind ran once eagerly (modules loaded) */
    int ready;                  /* the ring holds learning_starts and a batch */
    uint64_t reset_gen;
    int dead;                   /* a CUDA error poisoned the context */
    size_t bytes_total, bytes_replay;
} cuda_backend;

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
static int
fail(cuda_backend *be, int rv, const char *op)
{
    if (rv == FOX_OK)
        return rv;
    if (rv == FOX_ECUDA) {
        be->dead = 1;
        snprintf(be->base.err, sizeof be->base.err, "cuda %s: %s", op, last_err);
    } else {
        snprintf(be->base.err, sizeof be->base.err, "cuda %s: %s", op, fox_strerror(rv));
    }
    return rv;
}

#define ALIVE(be)                                                                                  \
    do {                                                                                           \
        if ((be)->dead)                                                                            \
            return FOX_ECUDA;                                                                      \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* available / create / destroy                                                               */

static int
cuda_available(char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, len, "no CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
        cudaGetLastError();
        return 0;
    }
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        snprintf(why, len, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
        return 0;
    }
    if (p.major * 10 + p.minor < FOX_CUDA_ARCH) {
        snprintf(why, len, "device 0 (%s) is sm_%d%d; this build's kernels need sm_%d (meson "
                 "-Dgpu_arch)", p.name, p.major, p.minor, FOX_CUDA_ARCH);
        return 0;
    }
    snprintf(why, len, "%s, sm_%d%d, %.0f GiB", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1u << 30));
    return 1;
}

static void
drop_graphs(cuda_backend *be)
{
    for (int k = 0; k < G_KINDS; k++)
        if (be->graph[k]) {
            cudaGraphExecDestroy(be->graph[k]);
            be->graph[k] = NULL;
        }
}

static void
cuda_destroy(fox_backend *be_)
{
    cuda_backend *be = (cuda_backend *)be_;
    if (!be)
        return;
    cudaDeviceSynchronize();
    drop_graphs(be);
    fox__cuda_fwd_free(&be->col);
    void *bufs[] = {be->xcol,    be->ctl,   be->fold,    be->envs,    be->wbar,    be->wport,
                    be->wr,      be->wa,    be->staged,  be->ring,    be->counts,  be->d_open,
                    be->d_high,  be->d_low, be->d_close, be->d_norm,  be->d_regime, be->isv_dev,
                    be->dbg_scale, be->dbg_w};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        cudaFree(bufs[k]);
    fox__cuda_net_fini(&be->net);
    cudaFreeHost(be->hctl);
    cudaFreeHost(be->isv_mem);
    cudaFreeHost(be->flags_mem);
    free(be);
}

static int
dev_alloc(void *pp, size_t bytes)
{
    FOX_CUDA_TRY(cudaMalloc((void **)pp, bytes ? bytes : 4));
    return 0;
}

/* Copy a host series array to the device (NULL stays NULL: close-only data). */
static int
upload(void *dst_pp, const void *src, size_t bytes)
{
    void **dst = dst_pp;
    *dst = NULL;
    if (!src)
        return 0;
    FOX_TRY(dev_alloc(dst, bytes));
    FOX_CUDA_TRY(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return 0;
}

static int
create_device(cuda_backend *be)
{
    const fox_config *c = be->cfg;
    const fox_model_layout *lay = be->lay;
    const fox_series *s = be->env.series;
    const fox_features *ft = be->env.feat;
    size_t free0 = 0, free1 = 0, total = 0;
    FOX_CUDA_TRY(cudaSetDevice(0));
    /* Mapped pinned memory (ISV, flags); an already active context has it on (UVA). */
    cudaError_t e = cudaSetDeviceFlags(cudaDeviceMapHost);
    if (e != cudaSuccess && e != cudaErrorSetOnActiveProcess)
        FOX_CUDA_TRY(e);
    cudaGetLastError();
    FOX_CUDA_TRY(cudaFree(NULL)); /* create the context before measuring */
    FOX_CUDA_TRY(cudaMemGetInfo(&free0, &total));

    int rows = be->N > QV_ROWS ? be->N : QV_ROWS;
    FOX_TRY(fox__cuda_net_init(&be->net, lay, be->B, rows));
    FOX_TRY(fox__cuda_fwd_alloc(&be->col, lay, &be->net.dm, rows));
    FOX_TRY(dev_alloc(&be->xcol, (size_t)rows * be->S * sizeof(float)));

    size_t N = (size_t)be->N, n = (size_t)c->n_step, cap = (size_t)c->replay_capacity;
    FOX_TRY(dev_alloc(&be->ctl, sizeof *be->ctl));
    FOX_TRY(dev_alloc(&be->fold, sizeof *be->fold));
    FOX_TRY(dev_alloc(&be->envs, N * sizeof *be->envs));
    FOX_TRY(dev_alloc(&be->wbar, N * n * sizeof *be->wbar));
    FOX_TRY(dev_alloc(&be->wport, N * n * 3 * sizeof *be->wport));
    FOX_TRY(dev_alloc(&be->wa, N * n * sizeof *be->wa));
    FOX_TRY(dev_alloc(&be->wr, N * n * sizeof *be->wr));
    FOX_TRY(dev_alloc(&be->staged, N * n * sizeof *be->staged));
    FOX_TRY(dev_alloc(&be->counts, N * sizeof *be->counts));
    FOX_TRY(dev_alloc(&be->ring, cap * sizeof *be->ring));
    be->bytes_replay = cap * sizeof *be->ring;
    FOX_TRY(dev_alloc(&be->isv_dev, FOX_ISV_TOTAL_DIM * sizeof(float)));
    FOX_TRY(dev_alloc(&be->dbg_scale, sizeof(float)));
    FOX_TRY(dev_alloc(&be->dbg_w, (size_t)be->B * sizeof(float)));

    size_t nb = (size_t)s->n;
    FOX_TRY(upload(&be->d_open, s->open, nb * sizeof(float)));
    FOX_TRY(upload(&be->d_high, s->high, nb * sizeof(float)));
    FOX_TRY(upload(&be->d_low, s->low, nb * sizeof(float)));
    FOX_TRY(upload(&be->d_close, s->close, nb * sizeof(float)));
    FOX_TRY(upload(&be->d_regime, s->regime, nb * sizeof(int8_t)));
    FOX_TRY(dev_alloc(&be->d_norm, nb * (size_t)ft->n_feat * sizeof(float)));

    FOX_CUDA_TRY(cudaHostAlloc((void **)&be->hctl, sizeof *be->hctl, cudaHostAllocDefault));
    memset(be->hctl, 0, sizeof *be->hctl);
    FOX_CUDA_TRY(cudaMemcpy(be->ctl, be->hctl, sizeof *be->ctl, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaHostAlloc((void **)&be->isv_mem, FOX_ISV_TOTAL_DIM * sizeof(float),
                               cudaHostAllocMapped));
    FOX_CUDA_TRY(cudaHostAlloc((void **)&be->flags_mem, FOX_SENTINEL_SLOTS * sizeof(int),
                               cudaHostAllocMapped));
    FOX_CUDA_TRY(cudaHostGetDevicePointer((void **)&be->isv_map, be->isv_mem, 0));
    memset(be->flags_mem, 0, FOX_SENTINEL_SLOTS * sizeof(int));
    fox_isv_init(be->isv_mem);
    be->base.isv = be->isv_mem;
    be->base.flags = be->flags_mem;

    /* Initial parameters: model.c's initializer on the host, then online = target. */
    float *p = malloc(be->np * sizeof *p);
    if (!p)
        return FOX_ENOMEM;
    fox_model_init_params(lay, p, c->seed);
    e = cudaMemcpy(be->net.params, p, be->np * sizeof *p, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(be->net.params + be->np, p, be->np * sizeof *p, cudaMemcpyHostToDevice);
    free(p);
    FOX_CUDA_TRY(e);
    /*
     * cudaMemcpy from pageable memory runs on the legacy stream and may
     * return before its DMA lands; our streams do not wait for it.
     */
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_TRY(fox__cuda_pack(&be->net, 0));
    FOX_CUDA_TRY(cudaStreamSynchronize(be->net.st[0]));
    FOX_CUDA_TRY(cudaMemGetInfo(&free1, &total));
    be->bytes_total = free0 > free1 ? free0 - free1 : 0;
    return FOX_OK;
}

static int
cuda_create(fox_backend **out, const fox_backend_env *env, char *err, size_t errlen)
{
    const fox_config *c = env->cfg;
    const fox_model_layout *lay = env->lay;
    *out = NULL;
    if (c->prioritized) {
        snprintf(err, errlen, "cuda backend: prioritized replay is not implemented on the GPU yet "
                              "(train.prioritized=0, or engine.backend=cpu)");
        return FOX_EINVAL;
    }
    if (lay->n_branches != 4 || lay->NR > 4) {
        snprintf(err, errlen, "cuda backend: needs 4 branches and at most 4 regimes");
        return FOX_EINVAL;
    }
    if ((long long)c->replay_capacity < (long long)c->n_envs * c->n_step) {
        snprintf(err, errlen, "cuda backend: train.replay_capacity %d is below one step's "
                 "transitions (n_envs × n_step = %d)", c->replay_capacity, c->n_envs * c->n_step);
        return FOX_EINVAL;
    }
    cuda_backend *be = calloc(1, sizeof *be);
    if (!be)
        return FOX_ENOMEM;
    be->base.ops = &fox_cuda_backend_ops;
    be->env = *env;
    be->cfg = c;
    be->lay = lay;
    be->N = c->n_envs;
    be->B = c->batch;
    be->S = lay->S;
    be->np = lay->n_params;
    int rv = create_device(be);
    if (rv != FOX_OK) {
        snprintf(err, errlen, "cuda backend: %s", rv == FOX_ECUDA ? last_err : fox_strerror(rv));
        cuda_destroy((fox_backend *)be);
        return rv;
    }
    fox_cuda_collect_cfg *cc = &be->cc;
    cc->envp = (fox_env_params){c->fee, c->half_spread, c->limit_fee, c->reward_scale,
                                c->size_levels, c->urgency_levels};
    cc->bars = (fox_env_bars){be->d_open, be->d_high, be->d_low, be->d_close};
    cc->norm = be->d_norm;
    cc->N = be->N;
    cc->S = be->S;
    cc->n_feat = env->feat->n_feat;
    cc->n_step = c->n_step;
    cc->episode_len = c->episode_len;
    cc->batch = be->B;
    cc->learning_starts = c->learning_starts;
    cc->D = lay->n_branches;
    cc->NAct = lay->n_actions;
    for (int d = 0; d < FOX_MAX_BRANCHES; d++) {
        cc->bsize[d] = lay->branch_size[d];
        cc->boff[d] = lay->branch_off[d];
    }
    cc->capacity = c->replay_capacity;
    cc->gamma = c->gamma;
    cc->eps_start = c->eps_start;
    cc->eps_end = c->eps_end;
    cc->eps_decay_steps = c->eps_decay_steps;
    cc->seed = c->seed ^ 0xc011ec7ULL;
    be->hp = (fox_cuda_loss_hp){powf(c->gamma, (float)c->n_step), c->iqn_lambda, c->aux_lambda,
                                c->target_mode, c->bdq_trunk_scale,
                                be->isv_dev + FOX_ISV_AUX_LABEL_SCALE_EMA};
    be->oc = (fox_cuda_optim_cfg){c->lr,         c->adam_b1,     c->adam_b2,
                                  c->adam_eps,   c->grad_clip,   c->polyak,
                                  c->target_sync, c->iqn_lambda, c->aux_lambda};
    /*
     * Benchmark knobs, never defaults: FOX_CUDA_MATH=tf32 (see
     * fox__cuda_set_math), FOX_CUDA_SIDE=0 (one stream, to measure what the
     * second one buys).
     */
    const char *side = getenv("FOX_CUDA_SIDE");
    if (side && strcmp(side, "0") == 0)
        be->net.use_side = 0;
    const char *math = getenv("FOX_CUDA_MATH");
    if (math && strcmp(math, "tf32") == 0 && fox__cuda_set_math(&be->net, 1) != FOX_OK) {
        snprintf(err, errlen, "cuda backend: %s", last_err);
        cuda_destroy((fox_backend *)be);
        return FOX_ECUDA;
    }
    fox_log(FOX_LOG_INFO, "cuda backend: %zu MiB of device memory (replay ring %zu MiB), %s math, "
            "%d stream(s)", be->bytes_total >> 20, be->bytes_replay >> 20,
            be->net.tf32 ? "TF32" : "FP32", be->net.use_side ? 2 : 1);
    *out = (fox_backend *)be;
    return FOX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Host mirror of the device counters                                                         */

static int
sync_ctl(cuda_backend *be)
{
    cudaStream_t s0 = be->net.st[0];
    FOX_CUDA_TRY(cudaMemcpyAsync(be->hctl, be->ctl, sizeof *be->ctl, cudaMemcpyDeviceToHost, s0));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}

static int
put_ctl(cuda_backend *be)
{
    cudaStream_t s0 = be->net.st[0];
    FOX_CUDA_TRY(cudaMemcpyAsync(be->ctl, be->hctl, sizeof *be->ctl, cudaMemcpyHostToDevice, s0));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Folds                                                                                      */

static int
begin_fold(cuda_backend *be)
{
    const fox_features *ft = be->env.feat;
    const fox_fold *f = be->env.fold;
    cudaStream_t s0 = be->net.st[0];
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    drop_graphs(be);
    FOX_CUDA_TRY(cudaMemcpy(be->d_norm, ft->norm,
                            (size_t)ft->n_bars * ft->n_feat * sizeof(float),
                            cudaMemcpyHostToDevice));
    fox_cuda_fold fd = {f->train_begin, f->train_end};
    FOX_CUDA_TRY(cudaMemcpy(be->fold, &fd, sizeof fd, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_TRY(sync_ctl(be));
    be->hctl->ring_head = 0;
    be->hctl->ring_size = 0;
    FOX_TRY(put_ctl(be));
    be->ready = 0;
    FOX_TRY(fox__cuda_env_reset(s0, &be->cc, be->fold, be->envs, ++be->reset_gen));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}

static int
cuda_begin_fold(fox_backend *be_)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    return fail(be, begin_fold(be), "begin_fold");
}

static int
reset_for_fold(cuda_backend *be)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    size_t bytes = be->np * sizeof(float);
    FOX_TRY(sync_ctl(be));
    /* Mech 4: every Adam state; Mech 3: hard target sync. */
    FOX_CUDA_TRY(cudaMemsetAsync(n->adam_m, 0, bytes, s0));
    FOX_CUDA_TRY(cudaMemsetAsync(n->adam_v, 0, bytes, s0));
    FOX_CUDA_TRY(cudaMemcpyAsync(n->params + be->np, n->params, bytes, cudaMemcpyDeviceToDevice,
                                 s0));
    FOX_TRY(fox__cuda_pack(n, 0));
    be->hctl->adam_t = 0;
    be->hctl->step = 0;
    be->hctl->env_steps = 0;
    be->hctl->train_steps = 0;
    FOX_TRY(put_ctl(be));
    memset(be->flags_mem, 0, FOX_SENTINEL_SLOTS * sizeof(int));
    fox_isv_reset(be->isv_mem);
    return FOX_OK;
}

static int
cuda_reset_for_fold(fox_backend *be_)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    return fail(be, reset_for_fold(be), "reset_for_fold");
}

/* ------------------------------------------------------------------------------------------ */
/* The step                                                                                   */

static int
enqueue_collect(cuda_backend *be)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    FOX_TRY(fox__cuda_collect_state(s0, &be->cc, be->envs, be->xcol));
    FOX_TRY(fox__cuda_forward(n, 0, &be->col, 0, be->xcol, be->N, 0));
    FOX_TRY(fox__cuda_collect_act(s0, &be->cc, be->fold, be->envs, be->wbar, be->wport, be->wa,
                                  be->wr, be->col.q, be->ctl, be->staged, be->counts));
    return fox__cuda_collect_push(s0, &be->cc, be->staged, be->counts, be->ring, be->ctl);
}

static int
enqueue_train(cuda_backend *be)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    FOX_TRY(fox__cuda_gather(s0, &be->cc, be->ring, be->d_regime, be->lay->NT, be->ctl, &n->bt));
    FOX_TRY(fox__cuda_aux_scale(s0, be->B, n->bt.aux, be->isv_dev));
    FOX_TRY(fox__cuda_loss_grad(n, &be->hp));
    return fox__cuda_optim(n, &be->oc, be->ctl, be->isv_dev, be->isv_map);
}

/* A step ends by publishing the ISV: in the optimizer's finish kernel, or on its own. */
static int
enqueue(cuda_backend *be, int kind)
{
    if (kind != G_TRAIN)
        FOX_TRY(enqueue_collect(be));
    if (kind != G_COLLECT)
        return enqueue_train(be);
    return fox__cuda_publish(be->net.st[0], be->isv_dev, be->isv_map, FOX_ISV_TOTAL_DIM);
}

static int
capture(cuda_backend *be, int kind)
{
    cudaStream_t s0 = be->net.st[0];
    cudaGraph_t g = NULL;
    FOX_CUDA_TRY(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    int rv = enqueue(be, kind);
    cudaError_t e = cudaStreamEndCapture(s0, &g);
    if (rv != FOX_OK) {
        if (g)
            cudaGraphDestroy(g);
        return rv;
    }
    FOX_CUDA_TRY(e);
    e = cudaGraphInstantiate(&be->graph[kind], g, 0);
    cudaGraphDestroy(g);
    FOX_CUDA_TRY(e);
    return FOX_OK;
}

/*
 * One step of a kind. The first of each kind runs eagerly (it loads every
 * kernel's module outside any capture); the next captures the graph that
 * every later one replays.
 */
static int
step(cuda_backend *be, int kind)
{
    if (!be->warm[kind]) {
        be->warm[kind] = 1;
        return enqueue(be, kind);
    }
    if (!be->graph[kind])
        FOX_TRY(capture(be, kind));
    FOX_CUDA_TRY(cudaGraphLaunch(be->graph[kind], be->net.st[0]));
    return FOX_OK;
}

/* Take the host's ISV writes, clear the chunk's train count. */
static int
chunk_begin(cuda_backend *be)
{
    cudaStream_t s0 = be->net.st[0];
    FOX_CUDA_TRY(cudaMemcpyAsync(be->isv_dev, be->isv_mem, FOX_ISV_TOTAL_DIM * sizeof(float),
                                 cudaMemcpyHostToDevice, s0));
    FOX_CUDA_TRY(cudaMemsetAsync(&be->ctl->trained, 0, sizeof be->ctl->trained, s0));
    return FOX_OK;
}

static void
stats_of(const fox_cuda_ctl *h, fox_step_stats *st)
{
    if (h->trained > 0) {
        st->loss = h->loss;
        st->loss_c51 = h->loss_c51;
        st->loss_iqn = h->loss_iqn;
        st->loss_aux = h->loss_aux;
        st->grad_norm = h->grad_norm;
    }
}

static int
run_steps(cuda_backend *be, int n, fox_step_stats *st)
{
    const fox_config *c = be->cfg;
    FOX_TRY(chunk_begin(be));
    for (int i = 0; i < n; i++) {
        if (be->ready) {
            FOX_TRY(step(be, G_FULL));
            continue;
        }
        /* Until the ring is ready the step only collects; readiness is known after it. */
        FOX_TRY(step(be, G_COLLECT));
        FOX_TRY(sync_ctl(be));
        be->ready = be->hctl->ring_size >= c->learning_starts && be->hctl->ring_size >= be->B;
    }
    /* Q_ABS_REF from the last collection, once per chunk like the CPU backend. */
    cudaStream_t s0 = be->net.st[0];
    FOX_TRY(fox__cuda_qabs(s0, be->N * be->lay->n_actions, be->col.q, be->isv_dev));
    FOX_TRY(fox__cuda_publish(s0, be->isv_dev, be->isv_map, FOX_ISV_TOTAL_DIM));
    FOX_TRY(sync_ctl(be));
    stats_of(be->hctl, st);
    st->epsilon = be->hctl->eps;
    st->step = be->hctl->step;
    st->env_steps = be->hctl->env_steps;
    return FOX_OK;
}

static int
cuda_run_steps(fox_backend *be_, int n, fox_step_stats *st)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    memset(st, 0, sizeof *st);
    return fail(be, run_steps(be, n, st), "run_steps");
}

static int
train_only(cuda_backend *be, int n, fox_step_stats *st)
{
    FOX_TRY(chunk_begin(be));
    for (int i = 0; i < n; i++)
        FOX_TRY(step(be, G_TRAIN));
    FOX_TRY(sync_ctl(be));
    stats_of(be->hctl, st);
    return FOX_OK;
}

static int
cuda_train_only(fox_backend *be_, int n, fox_step_stats *st)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    if (be->hctl->ring_size < be->B || be->hctl->ring_size < be->cfg->learning_starts)
        return FOX_ESTATE;
    memset(st, 0, sizeof *st);
    return fail(be, train_only(be, n, st), "train_only");
}

/* ------------------------------------------------------------------------------------------ */
/* q_values, state_io                                                                         */

static int
q_values(cuda_backend *be, const float *s, int B, float *q)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    int S = be->S, NAct = be->lay->n_actions;
    for (int off = 0; off < B; off += be->col.cap) {
        int R = B - off < be->col.cap ? B - off : be->col.cap;
        FOX_CUDA_TRY(cudaMemcpyAsync(be->xcol, s + (size_t)off * S, (size_t)R * S * sizeof(float),
                                     cudaMemcpyHostToDevice, s0));
        FOX_TRY(fox__cuda_forward(n, 0, &be->col, 0, be->xcol, R, 0));
        FOX_CUDA_TRY(cudaMemcpyAsync(q + (size_t)off * NAct, be->col.q,
                                     (size_t)R * NAct * sizeof(float), cudaMemcpyDeviceToHost,
                                     s0));
    }
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}

static int
cuda_q_values(fox_backend *be_, const float *s, int B, float *q)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    if (!s || !q || B < 1)
        return FOX_EINVAL;
    return fail(be, q_values(be, s, B, q), "q_values");
}

static int
state_io(cuda_backend *be, int load, float *params, float *target, float *adam_m, float *adam_v,
         fox_train_counters *c)
{
    fox_cuda_net *n = &be->net;
    size_t bytes = be->np * sizeof(float);
    float *dev[4] = {n->params, n->params + be->np, n->adam_m, n->adam_v};
    float *host[4] = {params, target, adam_m, adam_v};
    FOX_TRY(sync_ctl(be));
    for (int k = 0; k < 4; k++)
        if (host[k])
            FOX_CUDA_TRY(load ? cudaMemcpy(dev[k], host[k], bytes, cudaMemcpyHostToDevice)
                              : cudaMemcpy(host[k], dev[k], bytes, cudaMemcpyDeviceToHost));
    fox_cuda_ctl *h = be->hctl;
    if (load) {
        if (c) {
            h->adam_t = c->adam_t;
            h->step = c->step;
            h->train_steps = c->train_steps;
            h->env_steps = c->env_steps;
            be->reset_gen = c->rng_state[0];
            FOX_TRY(put_ctl(be));
        }
        FOX_CUDA_TRY(cudaDeviceSynchronize());
        FOX_TRY(fox__cuda_pack(n, 0));
        FOX_CUDA_TRY(cudaStreamSynchronize(n->st[0]));
    } else if (c) {
        memset(c, 0, sizeof *c);
        c->adam_t = h->adam_t;
        c->step = h->step;
        c->train_steps = h->train_steps;
        c->env_steps = h->env_steps;
        /* The device draws are keyed by these counters; only the reset generation is extra. */
        c->rng_state[0] = be->reset_gen;
    }
    return FOX_OK;
}

static int
cuda_state_io(fox_backend *be_, int load, float *params, float *target, float *adam_m,
              float *adam_v, fox_train_counters *c)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    return fail(be, state_io(be, load, params, target, adam_m, adam_v, c), "state_io");
}

const fox_backend_ops fox_cuda_backend_ops = {
    .name = "cuda",
    .available = cuda_available,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .begin_fold = cuda_begin_fold,
    .reset_for_fold = cuda_reset_for_fold,
    .run_steps = cuda_run_steps,
    .train_only = cuda_train_only,
    .q_values = cuda_q_values,
    .state_io = cuda_state_io,
};

/* ------------------------------------------------------------------------------------------ */
/* Debug entry points (cuda_backend.h)                                                        */

static int
debug_loss_grad(cuda_backend *be, const float *params, const float *target,
                const fox_cpu_net_batch *b, const fox_cpu_net_hparams *hp, fox_cpu_net_loss *loss,
                float *grads, float *priority, int32_t *a_star)
{
    fox_cuda_net *n = &be->net;
    const fox_cuda_dims *dm = &n->dm;
    int B = b->B, S = be->S, D = dm->D, NT = dm->NT;
    size_t bytes = be->np * sizeof(float);
    if (B != n->B)
        return FOX_EINVAL;
    memset(loss, 0, sizeof *loss);
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_CUDA_TRY(cudaMemcpy(n->params, params, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(n->params + be->np, target, bytes, cudaMemcpyHostToDevice));
    fox_cuda_batch *bt = &n->bt;
    size_t fb = sizeof(float), ib = sizeof(int32_t), sb = (size_t)B * S * fb;
    FOX_CUDA_TRY(cudaMemcpy(bt->s2, b->s, sb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->s2 + (size_t)B * S, b->s_next, sb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->a, b->a, (size_t)B * D * ib, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->r, b->r, B * fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->done, b->done, B * fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->aux, b->aux_ret, B * fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->regime, b->aux_regime, B * ib, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->tau, b->tau, (size_t)B * NT * fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->tau + (size_t)B * NT, b->tau_next, (size_t)B * NT * fb,
                            cudaMemcpyHostToDevice));
    if (b->w)
        FOX_CUDA_TRY(cudaMemcpy(be->dbg_w, b->w, B * fb, cudaMemcpyHostToDevice));
    bt->w = b->w ? be->dbg_w : NULL;
    FOX_CUDA_TRY(cudaMemcpy(be->dbg_scale, &hp->aux_label_scale, fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    fox_cuda_loss_hp h = {hp->gamma_n, hp->iqn_lambda, hp->aux_lambda, hp->target_mode,
                          hp->bdq_trunk_scale, be->dbg_scale};
    FOX_TRY(fox__cuda_pack(n, 0));
    int rv = fox__cuda_loss_grad(n, &h);
    bt->w = NULL;
    FOX_TRY(rv);
    FOX_CUDA_TRY(cudaStreamSynchronize(n->st[0]));
    FOX_CUDA_TRY(cudaMemcpy(grads, n->grads, bytes, cudaMemcpyDeviceToHost));
    if (priority)
        FOX_CUDA_TRY(cudaMemcpy(priority, bt->prio, B * fb, cudaMemcpyDeviceToHost));
    if (a_star)
        FOX_CUDA_TRY(cudaMemcpy(a_star, bt->a_star, (size_t)B * D * ib, cudaMemcpyDeviceToHost));
    double *parts = malloc((size_t)B * 4 * sizeof *parts);
    if (!parts)
        return FOX_ENOMEM;
    cudaError_t e = cudaMemcpy(parts, n->loss_parts, (size_t)B * 4 * sizeof *parts,
                               cudaMemcpyDeviceToHost);
    double sum[4] = {0, 0, 0, 0};
    for (int i = 0; i < B; i++)
        for (int k = 0; k < 4; k++)
            sum[k] += parts[(size_t)i * 4 + k];
    free(parts);
    FOX_CUDA_TRY(e);
    loss->c51 = sum[0];
    loss->iqn = sum[1];
    loss->aux_ret = sum[2];
    loss->aux_regime = sum[3];
    loss->total = sum[0] + (double)hp->iqn_lambda * sum[1] +
                  (double)hp->aux_lambda * (sum[2] + sum[3]);
    return FOX_OK;
}

int
fox_cuda_debug_loss_grad(fox_backend *be_, const float *params, const float *target,
                         const fox_cpu_net_batch *b, const fox_cpu_net_hparams *hp,
                         fox_cpu_net_loss *loss, float *grads, float *priority, int32_t *a_star)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    return fail(be, debug_loss_grad(be, params, target, b, hp, loss, grads, priority, a_star),
                "debug_loss_grad");
}

static int
debug_adam(cuda_backend *be, float *params, const float *grads, float *m, float *v, int64_t t,
           double *norm)
{
    fox_cuda_net *n = &be->net;
    size_t bytes = be->np * sizeof(float);
    cudaStream_t s0 = n->st[0];
    FOX_TRY(sync_ctl(be));
    be->hctl->adam_t = t - 1;
    FOX_TRY(put_ctl(be));
    FOX_CUDA_TRY(cudaMemcpy(n->params, params, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(n->grads, grads, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(n->adam_m, m, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(n->adam_v, v, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_TRY(fox__cuda_grad_norm(s0, be->np, n->grads, n->norm_part));
    FOX_TRY(fox__cuda_adam(s0, be->np, n->params, n->grads, n->adam_m, n->adam_v, n->norm_part,
                           &be->oc, be->ctl));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    FOX_CUDA_TRY(cudaMemcpy(params, n->params, bytes, cudaMemcpyDeviceToHost));
    FOX_CUDA_TRY(cudaMemcpy(m, n->adam_m, bytes, cudaMemcpyDeviceToHost));
    FOX_CUDA_TRY(cudaMemcpy(v, n->adam_v, bytes, cudaMemcpyDeviceToHost));
    if (norm) {
        double part[FOX_CUDA_NORM_BLOCKS], sum = 0.0;
        FOX_CUDA_TRY(cudaMemcpy(part, n->norm_part, sizeof part, cudaMemcpyDeviceToHost));
        for (int k = 0; k < FOX_CUDA_NORM_BLOCKS; k++)
            sum += part[k];
        *norm = sqrt(sum);
    }
    return FOX_OK;
}

int
fox_cuda_debug_adam(fox_backend *be_, float *params, const float *grads, float *m, float *v,
                    int64_t t, double *norm)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    return fail(be, debug_adam(be, params, grads, m, v, t, norm), "debug_adam");
}

int
fox_cuda_debug_set_tf32(fox_backend *be_, int on)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    drop_graphs(be);
    return fail(be, fox__cuda_set_math(&be->net, on), "set_tf32");
}

void
fox_cuda_debug_memory(const fox_backend *be_, size_t *total, size_t *replay)
{
    const cuda_backend *be = (const cuda_backend *)be_;
    if (total)
        *total = be->bytes_total;
    if (replay)
        *replay = be->bytes_replay;
}
