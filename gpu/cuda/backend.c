/*
 * backend.c (CUDA) — the CUDA backend's lifecycle and its ops table behind
 * gpu/backend.h: device state, the ISV and sentinel buffers in mapped-pinned
 * host memory, folds, the evaluation's forward passes and the training state's
 * copies in and out. A population's member (pop.c) is built inside its
 * span, and its members' evaluation passes of a round run as one pass
 * (pass.cu).
 * The step itself is step.c's, the fused check's table table.c's.
 *
 * A step never returns to the host: ε, the step counters, the ring's head
 * and size and every EMA live in device memory (fox_cuda_ctl, the device
 * ISV copy) and are read there, so one graph per kind of step (collect
 * only, full, train only) is captured once per fold and replayed. The host
 * synchronizes once per chunk, in finish_steps, to return the stats.
 *
 * ISV: the device works on its own copy, loaded from the mapped buffer at
 * the start of every chunk (so the host's writes between chunks —
 * reset_for_fold, the fingerprint — are kept) and published to it at the
 * end of every step; host readers see values at most one step old. Flags:
 * kernels may only ever write 1 into the mapped buffer; the host clears it.
 *
 * Not here: the math (net.c, *.cu), the engine's folds and evaluation, the
 * debug entry points (debug.c, a library only tests link), prioritized
 * replay's sum tree (per.cu), the errors, the context's section and the
 * counters' host mirror (ctx.c). A backend is used by one thread, the one that
 * owns its engine; the engines of several threads share the context through
 * fox__cuda_section_enter (ctx.h).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "gpu/backend.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/backend_impl.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/ctx.h"
#include "gpu/cuda/atoms.h"
#include "gpu/cuda/collect.h"
#include "gpu/cuda/net.h"
#include "gpu/cuda/pass.h"
#include "gpu/cuda/sp4.h"
#include "gpu/lookahead.h"

/* Rows of the collection / evaluation forward when the envs are fewer. */
#define QV_ROWS 256

/*
 * Steps in a row in one graph launch (step.c's steps) below FOX_CUDA_UNROLL_ROWS rows: a step
 * inside a graph starts without the delay that a graph's launch puts before its second node,
 * which shows at small batches. From FOX_CUDA_UNROLL_ROWS rows the device is full and several
 * steps a launch measured slower, so there a launch stays one step (docs/performance.md).
 */
#define FOX_CUDA_UNROLL      4
#define FOX_CUDA_UNROLL_ROWS 4096

/* ------------------------------------------------------------------------------------------ */
/* available / create / destroy                                                               */

static int
cuda_available(char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        /* A machine without a GPU (or its driver) is an ordinary one: say so plainly. */
        if (e == cudaSuccess || e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
            snprintf(why, len, "no GPU");
        else
            snprintf(why, len, "no usable GPU: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        snprintf(why, len, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
        return 0;
    }
    if (p.major * 10 + p.minor < FOX_CUDA_ARCH) {
        snprintf(why, len,
                 "device 0 (%s) is sm_%d%d; this build's kernels need sm_%d (meson "
                 "-Dgpu_arch)",
                 p.name, p.major, p.minor, FOX_CUDA_ARCH);
        return 0;
    }
    /* cuBLAS only where there is a device to use it on: its start-up is not free. */
    if (!fox__cuda_blas_open(why, len))
        return 0;
    snprintf(why, len, "%s, sm_%d%d, %.0f GiB", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1u << 30));
    return 1;
}

static void
cuda_destroy(fox_backend *be_)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    if (!be)
        return;
    fox__cuda_section_enter();
    /* A new engine may have been made current on this thread before the old one goes. */
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(be->cfg->device);
    cudaDeviceSynchronize();
    fox__cuda_drop_graphs(be);
    fox__cuda_fwd_free(&be->col);
    void *bufs[] = {be->xcol,    be->ctl,       be->fold,     be->envs,   be->wbar,     be->wport,
                    be->wr,      be->wa,        be->staged,   be->ring,   be->counts,   be->d_open,
                    be->d_high,  be->d_low,     be->d_close,  be->d_norm, be->d_regime, be->isv_dev,
                    be->d_rules, be->site_part, be->d_chunks, be->sp4};
    /* A member's buffers are pieces of its span: they go with the population, below. */
    if (be->pop)
        fox__cuda_pop_build(be->pop, be->member);
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        fox__cuda_free(bufs[k]);
    fox__cuda_net_fini(&be->net);
    fox__cuda_per_fini(&be->per);
    cudaFreeHost(be->hctl);
    if (be->pop) {
        fox__cuda_pop_build(NULL, 0);
        if (be->pop->be[be->member] == be)
            be->pop->be[be->member] = NULL;
        fox__cuda_pop_leave(be->pop);
    } else {
        cudaFreeHost(be->isv_mem);
        cudaFreeHost(be->flags_mem);
    }
    cudaFreeHost(be->pass_s);
    cudaFreeHost(be->pass_q);
    free(be);
    cudaSetDevice(prev);
    fox__cuda_section_leave();
}

/* Copy a host series array to the device (NULL stays NULL: close-only data). */
static int
upload(void *dst_pp, const void *src, size_t bytes)
{
    void **dst = dst_pp;
    *dst = NULL;
    if (!src)
        return 0;
    FOX_TRY(fox__cuda_alloc(dst, bytes));
    FOX_CUDA_TRY(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return 0;
}

static int
create_device(fox_cuda_backend *be)
{
    const fox_config *c = be->cfg;
    const fox_model_layout *lay = be->lay;
    const fox_series *s = be->env.series;
    const fox_features *ft = be->env.feat;
    size_t free0 = 0, free1 = 0, total = 0;
    FOX_CUDA_TRY(cudaSetDevice(c->device));
    /* Mapped pinned memory (ISV, flags); an already active context has it on (UVA). */
    cudaError_t e = cudaSetDeviceFlags(cudaDeviceMapHost);
    if (e != cudaSuccess && e != cudaErrorSetOnActiveProcess)
        FOX_CUDA_TRY(e);
    cudaGetLastError();
    FOX_CUDA_TRY(cudaFree(NULL)); /* create the context before measuring */
    FOX_CUDA_TRY(cudaMemGetInfo(&free0, &total));

    int rows = be->N > QV_ROWS ? be->N : QV_ROWS;
    FOX_TRY(fox__cuda_net_init(&be->net, lay, be->B, rows, be->pop ? be->pop->K : 1));
    FOX_TRY(fox__cuda_fwd_alloc(&be->col, &be->net, rows));
    FOX_TRY(fox__cuda_alloc(&be->xcol, (size_t)rows * be->S * sizeof(float)));

    size_t N = (size_t)be->N, n = (size_t)c->n_step, cap = (size_t)c->replay_capacity;
    FOX_TRY(fox__cuda_alloc(&be->ctl, sizeof *be->ctl));
    FOX_TRY(fox__cuda_alloc(&be->fold, sizeof *be->fold));
    FOX_TRY(fox__cuda_alloc(&be->envs, N * sizeof *be->envs));
    FOX_TRY(fox__cuda_alloc(&be->wbar, N * n * sizeof *be->wbar));
    FOX_TRY(fox__cuda_alloc(&be->wport, N * n * 3 * sizeof *be->wport));
    FOX_TRY(fox__cuda_alloc(&be->wa, N * n * sizeof *be->wa));
    FOX_TRY(fox__cuda_alloc(&be->wr, N * n * sizeof *be->wr));
    FOX_TRY(fox__cuda_alloc(&be->staged, N * n * sizeof *be->staged));
    FOX_TRY(fox__cuda_alloc(&be->counts, N * sizeof *be->counts));
    FOX_TRY(fox__cuda_alloc(&be->ring, cap * sizeof *be->ring));
    if (be->prioritized) {
        be->per.alpha = c->per_alpha;
        be->per.beta = c->per_beta;
        FOX_TRY(fox__cuda_per_init(&be->per, c->replay_capacity, be->B));
        /* The loss weighs every sample by its importance weight. */
        be->net.bt.w = be->per.w;
        FOX_TRY(fox__cuda_per_clear(be->net.st[0], &be->per));
    }
    be->bytes_replay = cap * sizeof *be->ring +
                       (be->prioritized ? 2 * (size_t)be->per.leaves * sizeof(double) +
                                              cap * sizeof(int)
                                        : 0);
    FOX_TRY(fox__cuda_alloc(&be->isv_dev, FOX_ISV_TOTAL_DIM * sizeof(float)));

    size_t nb = (size_t)s->n;
    FOX_TRY(upload(&be->d_open, s->open, nb * sizeof(float)));
    FOX_TRY(upload(&be->d_high, s->high, nb * sizeof(float)));
    FOX_TRY(upload(&be->d_low, s->low, nb * sizeof(float)));
    FOX_TRY(upload(&be->d_close, s->close, nb * sizeof(float)));
    FOX_TRY(upload(&be->d_regime, s->regime, nb * sizeof(int8_t)));
    FOX_TRY(fox__cuda_alloc(&be->d_norm, nb * (size_t)ft->n_feat * sizeof(float)));

    FOX_CUDA_TRY(cudaHostAlloc((void **)&be->hctl, sizeof *be->hctl, cudaHostAllocDefault));
    memset(be->hctl, 0, sizeof *be->hctl);
    be->hctl->td_unit = 1.0f; /* a pass outside training: the IQN's values as they are */
    be->hctl->seed_collect = c->seed ^ 0xc011ec7ULL;
    be->hctl->seed_per = c->seed ^ 0x9e125a3bULL;
    FOX_CUDA_TRY(cudaMemcpy(be->ctl, be->hctl, sizeof *be->ctl, cudaMemcpyHostToDevice));
    if (be->pop) {
        /* The member's share of the population's mapped room, one host span from the next. */
        be->isv_mem = fox__cuda_pop_host(be->pop, be->member, 0);
        be->flags_mem = (int *)(be->isv_mem + FOX_ISV_TOTAL_DIM);
        be->isv_map = fox__cuda_pop_host(be->pop, be->member, 1);
        be->flags_map = (int *)(be->isv_map + FOX_ISV_TOTAL_DIM);
    } else {
        FOX_CUDA_TRY(cudaHostAlloc((void **)&be->isv_mem, FOX_ISV_TOTAL_DIM * sizeof(float),
                                   cudaHostAllocMapped));
        FOX_CUDA_TRY(cudaHostAlloc((void **)&be->flags_mem, FOX_SENTINEL_SLOTS * sizeof(int),
                                   cudaHostAllocMapped));
        FOX_CUDA_TRY(cudaHostGetDevicePointer((void **)&be->isv_map, be->isv_mem, 0));
        FOX_CUDA_TRY(cudaHostGetDevicePointer((void **)&be->flags_map, be->flags_mem, 0));
    }
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

/* The device state of be (fields from cuda_create), its stability table and its math. */
static int
create_backend(fox_cuda_backend *be, char *err, size_t errlen)
{
    const fox_config *c = be->cfg;
    const fox_model_layout *lay = be->lay;
    int rv = create_device(be);
    if (rv != FOX_OK) {
        snprintf(err, errlen, "cuda backend: %s", rv == FOX_ECUDA ? fox__cuda_last_error() : fox_strerror(rv));
        return rv;
    }
    err[0] = '\0';
    if ((rv = fox__cuda_stab_init(be, err, errlen)) != FOX_OK) {
        if (!err[0])
            snprintf(err, errlen, "cuda backend: %s",
                     rv == FOX_ECUDA ? fox__cuda_last_error() : fox_strerror(rv));
        return rv;
    }
    fox_cuda_collect_cfg *cc = &be->cc;
    cc->envp = (fox_env_params){c->fee,          c->half_spread, c->limit_fee,
                                c->reward_scale, c->size_levels, c->urgency_levels};
    cc->bars = (fox_env_bars){be->d_open, be->d_high, be->d_low, be->d_close};
    cc->norm = be->d_norm;
    cc->N = be->N;
    cc->S = be->S;
    cc->n_feat = be->env.feat->n_feat;
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
    cc->prioritized = be->prioritized;
    cc->train_cost_mult = c->train_cost_mult;
    be->hp = (fox_cuda_loss_hp){powf(c->gamma, (float)c->n_step),
                                c->iqn_lambda,
                                c->aux_lambda,
                                c->target_mode,
                                c->bdq_trunk_scale,
                                be->isv_dev + FOX_ISV_AUX_LABEL_SCALE_EMA};
    be->oc =
        (fox_cuda_optim_cfg){c->lr,     c->adam_b1,     c->adam_b2,    c->adam_eps,  c->grad_clip,
                             c->polyak, c->target_sync, c->iqn_lambda, c->aux_lambda,
                             c->pearl_wd, c->pearl_l1};
    /* The step constants a population's launch reads from the member's counters. */
    be->hctl->key.lr = be->oc.lr;
    be->hctl->key.gamma = cc->gamma;
    be->hctl->key.gamma_n = be->hp.gamma_n;
    be->hctl->key.eps_start = cc->eps_start;
    be->hctl->key.eps_end = cc->eps_end;
    be->hctl->key.eps_decay_steps = cc->eps_decay_steps;
    be->hctl->key.train_cost_mult = cc->train_cost_mult;
    if (cudaMemcpy(be->ctl, be->hctl, sizeof *be->ctl, cudaMemcpyHostToDevice) != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: the counters' upload: %s",
                 cudaGetErrorString(cudaGetLastError()));
        return FOX_ECUDA;
    }
    /*
     * engine.cuda_math: the products' math (fox__cuda_set_math), greedy_tf32 being FP32 with
     * the greedy-action forwards in TF32; debug.cuda_one_stream: every stage on MAIN, to
     * measure what the other streams buy (the greedy-action forwards then run there, in the
     * main math).
     */
    be->net.use_side = !c->cuda_one_stream;
    be->net.greedy_tf32 = c->cuda_math == FOX_CUDA_MATH_GREEDY_TF32;
    be->unroll = be->B < FOX_CUDA_UNROLL_ROWS ? FOX_CUDA_UNROLL : 1;
    int math = c->cuda_math == FOX_CUDA_MATH_GREEDY_TF32 ? FOX_CUDA_MATH_FP32 : c->cuda_math;
    if (fox__cuda_set_math(&be->net, math) != FOX_OK) {
        snprintf(err, errlen, "cuda backend: %s", fox__cuda_last_error());
        return FOX_ECUDA;
    }
    return FOX_OK;
}

/* A handle's math as the log line names it. */
static const char *
math_name(int math)
{
    return math == FOX_CUDA_MATH_BF16 ? "BF16" : math == FOX_CUDA_MATH_TF32 ? "TF32" : "FP32";
}

/* The engine's shared slot when member 0 could not make a population: the rest train alone. */
static char population_declined;

static int
cuda_create(fox_backend **out, const fox_backend_env *env, char *err, size_t errlen)
{
    const fox_config *c = env->cfg;
    const fox_model_layout *lay = env->lay;
    *out = NULL;
    if (lay->n_branches != 4 || lay->NR > 4) {
        snprintf(err, errlen, "cuda backend: needs 4 branches and at most 4 regimes");
        return FOX_EINVAL;
    }
    if ((long long)c->replay_capacity < (long long)c->n_envs * c->n_step) {
        snprintf(err, errlen,
                 "cuda backend: train.replay_capacity %d is below one step's "
                 "transitions (n_envs × n_step = %d)",
                 c->replay_capacity, c->n_envs * c->n_step);
        return FOX_EINVAL;
    }
    /* engine.device names one GPU of this host: it must exist and run this build's kernels. */
    int n_dev = 0;
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || c->device >= n_dev) {
        cudaGetLastError();
        snprintf(err, errlen, "cuda backend: engine.device %d: this host has %d CUDA device(s)",
                 c->device, n_dev);
        return FOX_EINVAL;
    }
    if (cudaGetDeviceProperties(&prop, c->device) != cudaSuccess ||
        prop.major * 10 + prop.minor < FOX_CUDA_ARCH) {
        cudaGetLastError();
        snprintf(err, errlen, "cuda backend: engine.device %d (%s) is sm_%d%d; this build's "
                 "kernels need sm_%d (meson -Dgpu_arch)", c->device, prop.name, prop.major,
                 prop.minor, FOX_CUDA_ARCH);
        return FOX_EINVAL;
    }
    fox_cuda_backend *be = calloc(1, sizeof *be);
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
    be->prioritized = c->prioritized;
    fox__cuda_section_enter();
    int rv = FOX_OK;
    /*
     * The engine's members are a population: each member's buffers k spans from member 0's, so
     * that one step trains them all (pop.c, step.c). Where
     * member 0 cannot make one (no room for the members' address range, a driver without
     * virtual memory management), the members train side by side instead, each on its own
     * graphs (as they do in a round where one must step alone), and the log says why.
     */
    if (env->members > 1 && env->shared && *env->shared != &population_declined) {
        be->member = env->member;
        rv = fox__cuda_pop_join(env->shared, env->members, env->member, c->device, &be->pop);
        if (rv != FOX_OK && env->member == 0 && !*env->shared) {
            fox_log(FOX_LOG_WARNING,
                    "cuda backend: the %d members cannot train as one population (%s); they "
                    "train side by side",
                    env->members, rv == FOX_ECUDA ? fox__cuda_last_error() : fox_strerror(rv));
            *env->shared = &population_declined;
            be->member = 0;
            rv = FOX_OK;
        } else if (rv != FOX_OK)
            snprintf(err, errlen, "cuda backend: population member %d of %d: %s", env->member,
                     env->members, rv == FOX_ECUDA ? fox__cuda_last_error() : fox_strerror(rv));
    }
    if (rv == FOX_OK) {
        if (be->pop)
            fox__cuda_pop_build(be->pop, be->member);
        rv = create_backend(be, err, errlen);
        int built = be->pop ? fox__cuda_pop_built(be->pop, be->member) : FOX_OK;
        if (rv == FOX_OK && built != FOX_OK) {
            rv = built;
            snprintf(err, errlen, "cuda backend: population member %d: %s", be->member,
                     fox__cuda_last_error());
        }
        if (rv == FOX_OK && be->pop)
            be->pop->be[be->member] = be;
    }
    fox__cuda_section_leave();
    if (rv != FOX_OK) {
        cuda_destroy((fox_backend *)be);
        return rv;
    }
    fox_log(FOX_LOG_INFO,
            "cuda backend: %zu MiB of device memory (replay ring %zu MiB), %s math, "
            "%d stream(s), dependent launch %s, greedy-action forwards %s",
            be->bytes_total >> 20, be->bytes_replay >> 20, math_name(be->net.math),
            be->net.use_side ? FOX_CUDA_STREAMS : 1, FOX_CUDA_PDL ? "on" : "off",
            math_name(be->net.use_side ? be->net.cb[FOX_CUDA_COLLECT].math : be->net.math));
    if (be->pop && be->member == be->pop->K - 1)
        fox_log(FOX_LOG_INFO,
                "cuda backend: the %d members train as one population: one step and one "
                "evaluation pass for all",
                be->pop->K);
    *out = (fox_backend *)be;
    return FOX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Folds                                                                                      */

static int
begin_fold(fox_cuda_backend *be)
{
    const fox_features *ft = be->env.feat;
    const fox_fold *f = be->env.fold;
    cudaStream_t s0 = be->net.st[0];
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    fox__cuda_drop_graphs(be);
    /* On MAIN, not the legacy stream: no wait for, or on, another engine's work. */
    FOX_CUDA_TRY(cudaMemcpyAsync(be->d_norm, ft->norm,
                                 (size_t)ft->n_bars * ft->n_feat * sizeof(float),
                                 cudaMemcpyHostToDevice, s0));
    fox_cuda_fold fd = {f->train_begin, f->train_end};
    FOX_CUDA_TRY(cudaMemcpyAsync(be->fold, &fd, sizeof fd, cudaMemcpyHostToDevice, s0));
    FOX_TRY(fox__cuda_sync_ctl(be));
    be->hctl->ring_head = 0;
    be->hctl->ring_size = 0;
    FOX_TRY(fox__cuda_put_ctl(be));
    if (be->prioritized)
        FOX_TRY(fox__cuda_per_clear(s0, &be->per));
    be->ready = 0;
    FOX_TRY(fox__cuda_env_reset(s0, &be->cc, be->ctl, be->fold, be->envs, ++be->reset_gen));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}

static int
cuda_begin_fold(fox_backend *be_)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    fox__cuda_section_share();
    int rv = begin_fold(be);
    fox__cuda_section_leave();
    return fox__cuda_be_fail(be, rv, "begin_fold");
}

static int
reset_for_fold(fox_cuda_backend *be)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    size_t bytes = be->np * sizeof(float);
    FOX_TRY(fox__cuda_sync_ctl(be));
    /* Mech 4: every Adam state; Mech 3: hard target sync. */
    FOX_CUDA_TRY(cudaMemsetAsync(n->adam_m, 0, bytes, s0));
    FOX_CUDA_TRY(cudaMemsetAsync(n->adam_v, 0, bytes, s0));
    FOX_CUDA_TRY(
        cudaMemcpyAsync(n->params + be->np, n->params, bytes, cudaMemcpyDeviceToDevice, s0));
    FOX_TRY(fox__cuda_pack(n, 0));
    be->hctl->adam_t = 0;
    be->hctl->step = 0;
    be->hctl->env_steps = 0;
    be->hctl->train_steps = 0;
    /* The stability system's fold state (fox_cpu_stab_reset_fold). */
    be->hctl->halt = FOX_HALT_NONE;
    be->hctl->collapse_run = 0;
    /* fault_done is kept: a fault fires once per arming (fox_cpu_stab_reset_fold). */
    be->base.halt_reason = FOX_HALT_NONE;
    FOX_TRY(fox__cuda_put_ctl(be));
    memset(be->flags_mem, 0, FOX_SENTINEL_SLOTS * sizeof(int));
    fox_isv_reset(be->isv_mem);
    /* SP4: the Wiener states (fox_bounds_wiener_reset: only SP4 slots have any) and Pearl C. */
    return fox__cuda_sp4_reset(n->st[0], be->sp4);
}

static int
cuda_reset_for_fold(fox_backend *be_)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    fox__cuda_section_share();
    int rv = reset_for_fold(be);
    fox__cuda_section_leave();
    return fox__cuda_be_fail(be, rv, "reset_for_fold");
}

/* ------------------------------------------------------------------------------------------ */
/* Steps (step.c)                                                                             */

static int
cuda_start_steps(fox_backend *be_, int n, int collect)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!collect && (be->hctl->ring_size < be->B || be->hctl->ring_size < be->cfg->learning_starts))
        return FOX_ESTATE;
    return fox__cuda_be_fail(be, fox__cuda_start_steps(be, n, collect),
                             collect ? "run_steps" : "train_only");
}

static int
cuda_finish_steps(fox_backend *be_, fox_step_stats *st)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    memset(st, 0, sizeof *st);
    return fox__cuda_be_fail(be, fox__cuda_finish_steps(be, st), "finish_steps");
}

/* ------------------------------------------------------------------------------------------ */
/* The evaluation's forward pass, state_io                                                    */

/* Pinned room for a pass of B rows: grown (allocation holds the section alone) when smaller. */
static int
pass_reserve(fox_cuda_backend *be, int B)
{
    if (B <= be->pass_cap)
        return FOX_OK;
    fox__cuda_section_enter();
    /* The captured passes copy from and to the old room. */
    fox__cuda_drop_graphs(be);
    cudaFreeHost(be->pass_s);
    cudaFreeHost(be->pass_q);
    be->pass_s = be->pass_q = NULL;
    be->pass_cap = 0;
    cudaError_t e = cudaHostAlloc((void **)&be->pass_s, (size_t)B * be->S * sizeof(float),
                                  cudaHostAllocDefault);
    if (e == cudaSuccess)
        e = cudaHostAlloc((void **)&be->pass_q, (size_t)B * be->lay->n_actions * sizeof(float),
                          cudaHostAllocDefault);
    fox__cuda_section_leave();
    FOX_CUDA_TRY(e);
    be->pass_cap = B;
    return FOX_OK;
}

/*
 * The evaluation's Q of B rows, enqueued on MAIN: of the online net, or of
 * the target net, the Polyak average (policy.weights); the states' copy up
 * from pinned memory, the forward in col.cap rows at a time, the Q's copy
 * down into pinned memory.
 */
static int
enqueue_pass(fox_cuda_backend *be, int B)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    int S = be->S, NAct = be->lay->n_actions;
    int target = be->cfg->eval_weights == FOX_EVAL_WEIGHTS_AVERAGE;
    /*
     * Each branch's atoms from the host's ISV, which a checkpoint or a fold reset may have
     * rewritten since the last chunk (as chunk_begin takes it): the expected Q on the live grid.
     */
    FOX_CUDA_TRY(cudaMemcpyAsync(be->isv_dev, be->isv_mem, FOX_ISV_TOTAL_DIM * sizeof(float),
                                 cudaMemcpyHostToDevice, s0));
    FOX_TRY(fox__cuda_atoms_update(s0, &n->stab, 0, NULL, NULL, 0.0f, be->lay->n_branches,
                                   be->lay->NA, be->lay->v_min, be->lay->v_max, n->z));
    for (int off = 0; off < B; off += be->col.cap) {
        int R = B - off < be->col.cap ? B - off : be->col.cap;
        FOX_CUDA_TRY(cudaMemcpyAsync(be->xcol, be->pass_s + (size_t)off * S,
                                     (size_t)R * S * sizeof(float), cudaMemcpyHostToDevice, s0));
        FOX_TRY(fox__cuda_forward(n, 0, &be->col, be->xcol, R, target, 0, 0));
        FOX_CUDA_TRY(cudaMemcpyAsync(be->pass_q + (size_t)off * NAct, be->col.q,
                                     (size_t)R * NAct * sizeof(float), cudaMemcpyDeviceToHost,
                                     s0));
    }
    return FOX_OK;
}

/* A pass's enqueue as the capture calls it (ctx.h): arg points at its row count. */
static int
capture_of_pass(fox_cuda_backend *be, const void *arg)
{
    return enqueue_pass(be, *(const int *)arg);
}

/*
 * A pass of B rows (enqueue's, arg its row count) launched from table t: a
 * pass is some 40 launches, and a walk's rounds wait on them, so a row count
 * met before replays its graph (one launch), met once runs eagerly and is
 * captured the next time. Nothing waits here; q_finish does.
 */
static int
pass_launch(fox_cuda_backend *be, fox_cuda_pass_graphs *t,
            int (*enqueue)(fox_cuda_backend *be, const void *arg), int B)
{
    int k = 0;
    while (k < t->n && t->g[k].rows != B)
        k++;
    if (k < t->n && !t->g[k].exec)
        FOX_TRY(fox__cuda_capture(be, enqueue, &B, 0, &t->g[k].exec));
    if (k < t->n) {
        FOX_CUDA_TRY(cudaGraphLaunch(t->g[k].exec, be->net.st[0]));
        return FOX_OK;
    }
    if (k < FOX_CUDA_PASS_GRAPHS) {
        t->g[k].rows = B;
        t->g[k].exec = NULL;
        t->n++;
    }
    fox__cuda_section_share();
    int rv = enqueue(be, &B);
    fox__cuda_section_leave();
    return rv;
}

static int
q_start(fox_cuda_backend *be, const float *s, int B)
{
    memcpy(be->pass_s, s, (size_t)B * be->S * sizeof(float));
    return pass_launch(be, &be->passes, capture_of_pass, B);
}

/* ---- A population's passes: every member's in one launch ---- */

/*
 * The passes of a population's round, R rows each (the most any member
 * asked; a member that asked fewer, or none, computes rows nobody reads),
 * on member 0's MAIN, every launch covering all members: every member's
 * states and ISV taken from the population's mapped room, the atoms, one
 * forward, every member's Q given back to the room.
 */
static int
enqueue_pop_pass(fox_cuda_backend *b0, const void *arg)
{
    fox_cuda_pop *pop = b0->pop;
    int R = *(const int *)arg, S = b0->S, NAct = b0->lay->n_actions;
    cudaStream_t s0 = b0->net.st[0];
    FOX_TRY(fox__cuda_pass_take(s0, pop->pass_room_dev, pop->pass_stride, R * S, b0->xcol,
                                b0->isv_map, b0->isv_dev, FOX_ISV_TOTAL_DIM));
    FOX_TRY(fox__cuda_atoms_update(s0, &b0->net.stab, 0, NULL, NULL, 0.0f, b0->lay->n_branches,
                                   b0->lay->NA, b0->lay->v_min, b0->lay->v_max, b0->net.z));
    FOX_TRY(fox__cuda_forward(&b0->net, 0, &b0->col, b0->xcol, R,
                              b0->cfg->eval_weights == FOX_EVAL_WEIGHTS_AVERAGE, 0, 0));
    return fox__cuda_pass_give(s0, b0->col.q, R * NAct, pop->pass_room_dev, pop->pass_stride,
                               (size_t)pop->pass_rows * S);
}

/* enqueue_pop_pass with every launch over the members (as the capture calls it too). */
static int
enqueue_pop_pass_all(fox_cuda_backend *b0, const void *arg)
{
    fox__cuda_set_launch_members(b0->pop->K, &b0->pop->ptrs);
    int rv = enqueue_pop_pass(b0, arg);
    fox__cuda_set_launch_members(1, NULL);
    return rv;
}

/* The population's room for its passes, a forward's rows a member, made once. */
static int
pop_pass_room(fox_cuda_pop *pop)
{
    if (pop->pass_room)
        return FOX_OK;
    const fox_cuda_backend *b0 = pop->be[0];
    int rows = b0->col.cap;
    size_t stride = (size_t)rows * (b0->S + b0->lay->n_actions);
    stride = (stride + 63) / 64 * 64; /* each member's room on a 256-byte line */
    fox__cuda_section_enter();
    cudaError_t e = cudaHostAlloc((void **)&pop->pass_room, pop->K * stride * sizeof(float),
                                  cudaHostAllocMapped);
    if (e == cudaSuccess)
        e = cudaHostGetDevicePointer((void **)&pop->pass_room_dev, pop->pass_room, 0);
    fox__cuda_section_leave();
    FOX_CUDA_TRY(e);
    pop->pass_rows = rows;
    pop->pass_stride = stride;
    return FOX_OK;
}

/*
 * The round of passes its members started: one pass of every member when
 * the rows fit one forward (col.cap), else each started member's own pass.
 */
static int
pop_pass_round(fox_cuda_pop *pop)
{
    fox_cuda_backend *b0 = pop->be[0];
    int R = 0, together = 1;
    pop->pass_in_room = 0;
    for (int k = 0; k < pop->K; k++) {
        if (!pop->be[k])
            together = 0;
        else if (pop->pass_started[k] && pop->be[k]->pass_B > R)
            R = pop->be[k]->pass_B;
    }
    if (!(together && R <= b0->col.cap)) {
        pop->passes_alone++;
        for (int k = 0; k < pop->K; k++)
            if (pop->pass_started[k])
                FOX_TRY(q_start(pop->be[k], pop->be[k]->pass_src, pop->be[k]->pass_B));
        return FOX_OK;
    }
    FOX_TRY(pop_pass_room(pop));
    pop->passes_together++;
    cudaStream_t s0 = b0->net.st[0];
    for (int k = 0; k < pop->K; k++) {
        fox_cuda_backend *m = pop->be[k];
        if (pop->pass_started[k])
            memcpy(pop->pass_room + k * pop->pass_stride, m->pass_src,
                   (size_t)m->pass_B * m->S * sizeof(float));
        if (k > 0) {
            FOX_CUDA_TRY(cudaEventRecord(pop->ev_member[k], m->net.st[0]));
            FOX_CUDA_TRY(cudaStreamWaitEvent(s0, pop->ev_member[k], 0));
        }
    }
    FOX_TRY(pass_launch(b0, &pop->passes, enqueue_pop_pass_all, R));
    /*
     * The first q_finish waits for this event, and every member's work after it comes from the
     * host after that wait: no member's stream needs to wait on the pass.
     */
    FOX_CUDA_TRY(cudaEventRecord(pop->ev_done, s0));
    pop->pass_in_room = 1;
    pop->pass_waited = 0;
    return FOX_OK;
}

static int
cuda_q_start(fox_backend *be_, const float *s, int B)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    be->pass_B = B;
    be->pass_rv = FOX_EINVAL;
    FOX_CUDA_ALIVE(be);
    if (!s || B < 1)
        return FOX_EINVAL;
    fox_cuda_pop *pop = be->pop;
    /*
     * Outside any hold of the section: growing and capturing hold it alone. A population's
     * member's round runs at its first q_finish (pop_pass_round), from the population's room or,
     * past a forward's rows, each member's own.
     */
    int rv = pass_reserve(be, B);
    if (rv == FOX_OK && pop) {
        if (pop->pass_ran) {
            memset(pop->pass_started, 0, sizeof pop->pass_started);
            pop->pass_ran = 0;
        }
        be->pass_src = s;
        pop->pass_started[be->member] = 1;
    } else if (rv == FOX_OK)
        rv = q_start(be, s, B);
    return be->pass_rv = fox__cuda_be_fail(be, rv, "q_start");
}

/* Wait for the pass q_start enqueued, then its Q out of pinned memory. */
static int
q_finish(fox_cuda_backend *be, float *q)
{
    fox_cuda_pop *pop = be->pop;
    if (pop && !pop->pass_ran) {
        pop->pass_rv = pop_pass_round(pop);
        pop->pass_ran = 1;
    }
    if (pop)
        FOX_TRY(pop->pass_rv);
    const float *from = be->pass_q;
    if (pop && pop->pass_in_room) {
        if (!pop->pass_waited)
            FOX_CUDA_TRY(cudaEventSynchronize(pop->ev_done));
        pop->pass_waited = 1;
        from = pop->pass_room + be->member * pop->pass_stride + (size_t)pop->pass_rows * be->S;
    } else
        FOX_CUDA_TRY(cudaStreamSynchronize(be->net.st[0]));
    memcpy(q, from, (size_t)be->pass_B * be->lay->n_actions * sizeof(float));
    return FOX_OK;
}

static int
cuda_q_finish(fox_backend *be_, float *q)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    int started = be->pass_rv;
    be->pass_rv = FOX_EINVAL; /* finished: a second q_finish has no pass to wait for */
    FOX_CUDA_ALIVE(be);
    if (started != FOX_OK)
        return started;
    if (!q)
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, q_finish(be, q), "q_finish");
}

static int
state_io(fox_cuda_backend *be, int load, float *params, float *target, float *adam_m, float *adam_v,
         fox_train_counters *c)
{
    fox_cuda_net *n = &be->net;
    size_t bytes = be->np * sizeof(float);
    float *dev[4] = {n->params, n->params + be->np, n->adam_m, n->adam_v};
    float *host[4] = {params, target, adam_m, adam_v};
    cudaStream_t s0 = n->st[0];
    FOX_TRY(fox__cuda_sync_ctl(be));
    /* On MAIN, not the legacy stream: no wait for, or on, another engine's work. */
    for (int k = 0; k < 4; k++)
        if (host[k])
            FOX_CUDA_TRY(load ? cudaMemcpyAsync(dev[k], host[k], bytes, cudaMemcpyHostToDevice, s0)
                              : cudaMemcpyAsync(host[k], dev[k], bytes, cudaMemcpyDeviceToHost,
                                                s0));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    fox_cuda_ctl *h = be->hctl;
    if (load) {
        if (c) {
            h->adam_t = c->adam_t;
            h->step = c->step;
            h->train_steps = c->train_steps;
            h->env_steps = c->env_steps;
            be->reset_gen = c->rng_state[0];
            FOX_TRY(fox__cuda_put_ctl(be));
        }
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
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    fox__cuda_section_share();
    int rv = state_io(be, load, params, target, adam_m, adam_v, c);
    fox__cuda_section_leave();
    return fox__cuda_be_fail(be, rv, "state_io");
}

static int
cuda_arm_fault(fox_backend *be_, int slot, int kind, int64_t step)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (slot < 0 || slot >= FOX_SENTINEL_SLOTS || !fox_sentinel_buffer(slot)[0])
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, fox__cuda_arm(be, slot, kind, step), "arm_fault");
}

const fox_backend_ops fox_cuda_backend_ops = {
    .name = "cuda",
    .available = cuda_available,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .begin_fold = cuda_begin_fold,
    .reset_for_fold = cuda_reset_for_fold,
    .start_steps = cuda_start_steps,
    .finish_steps = cuda_finish_steps,
    .q_start = cuda_q_start,
    .q_finish = cuda_q_finish,
    .state_io = cuda_state_io,
    .arm_fault = cuda_arm_fault,
    .eval_lookahead = FOX_LOOKAHEAD_MAX,
};
