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
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "common/error.h"
#include "gpu/isv.h"
#include "common/log.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/cuda_impl.h"

#ifndef FOX_CUDA_ARCH
#define FOX_CUDA_ARCH 90
#endif

/* Rows of the collection / q_values forward when the envs are fewer. */
#define QV_ROWS 256

enum { G_COLLECT = 0, G_FULL = 1, G_TRAIN = 2, G_KINDS = 3 };

/*
 * Steps in a row in one graph launch (steps()) below FOX_CUDA_UNROLL_ROWS rows. H200,
 * 2026-11-29, against one step a launch: the batch-256 train step 274–275 against 279–281 µs
 * (full step 311–313 against 312–313); at batch 4096 four steps a launch lost 10 µs (1,344 /
 * 1,318 against 1,334 / 1,306), so there a launch stays one step.
 */
#define FOX_CUDA_UNROLL      4
#define FOX_CUDA_UNROLL_ROWS 4096

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
    /* stability */
    fox_cuda_check checks[FOX_CUDA_MAX_CHECKS]; /* the fused-check table, host copy */
    int n_checks;
    fox_cuda_chunk *d_chunks;   /* the check kernel's blocks over it, set once at construction */
    int n_chunks;
    fox_cuda_rule *d_rules;     /* [FOX_SENTINEL_SLOTS] */
    double *site_part;
    fox_cuda_sp4 *sp4;          /* SP4 state and scratch (adaptive mode) */
    int *flags_map;             /* device address of the mapped flags */
    float *dbg_w;               /* [B] the debug hook's importance weights */
    /* host */
    float *isv_mem;             /* mapped pinned, FOX_ISV_TOTAL_DIM */
    int *flags_mem;             /* mapped pinned, FOX_SENTINEL_SLOTS */
    cudaGraphExec_t graph[G_KINDS][2]; /* one step of the kind, unroll steps in a row */
    int unroll;
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

#define ALIVE(be)                                                                                  \
    do {                                                                                           \
        if ((be)->dead)                                                                            \
            return FOX_ECUDA;                                                                      \
    } while (0)

static int sync_ctl(cuda_backend *be);
static int put_ctl(cuda_backend *be);

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
    for (int k = 0; k < 2 * G_KINDS; k++)
        if (be->graph[k / 2][k % 2]) {
            cudaGraphExecDestroy(be->graph[k / 2][k % 2]);
            be->graph[k / 2][k % 2] = NULL;
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
                    be->dbg_scale, be->dbg_w, be->d_rules, be->site_part,
                    be->d_chunks,  be->sp4};
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

    /* Benchmark knob FOX_CUDA_PRIO=0: every stream at the default priority (net.c). */
    const char *prio = getenv("FOX_CUDA_PRIO");
    fox__cuda_prio = !(prio && strcmp(prio, "0") == 0);
    int rows = be->N > QV_ROWS ? be->N : QV_ROWS;
    FOX_TRY(fox__cuda_net_init(&be->net, lay, be->B, rows));
    FOX_TRY(fox__cuda_fwd_alloc(&be->col, &be->net, rows));
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
    FOX_CUDA_TRY(cudaHostGetDevicePointer((void **)&be->flags_map, be->flags_mem, 0));
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

/* ------------------------------------------------------------------------------------------ */
/* The stability system's tables (stab.c's watch_buffers, on device buffers)                  */

static int
watch(cuda_backend *be, int slot, const float *ptr, int rows, int cols, int ld)
{
    if (!ptr || rows < 1 || cols < 1)
        return FOX_OK;
    if (be->n_checks == FOX_CUDA_MAX_CHECKS)
        return FOX_EINTERNAL;
    be->checks[be->n_checks++] = (fox_cuda_check){ptr, slot, rows, cols, ld};
    return FOX_OK;
}

static int
watch_run(cuda_backend *be, int slot, const float *ptr, size_t len)
{
    return watch(be, slot, ptr, 1, (int)len, (int)len);
}

/* The runs of a params-layout buffer over slot's param groups (fox_cpu_stab_watch_groups). */
static int
watch_groups(cuda_backend *be, int slot, const float *base)
{
    fox_param_run runs[FOX_P_COUNT];
    int n = fox_sentinel_param_runs(slot, be->lay, runs);
    for (int k = 0; k < n; k++)
        FOX_TRY(watch_run(be, slot, base + runs[k].offset, runs[k].len));
    return FOX_OK;
}

/* The first watched element of slot (its table entry's start), or NULL. */
static float *
first_of(const cuda_backend *be, int slot)
{
    for (int k = 0; k < be->n_checks; k++)
        if (be->checks[k].slot == slot)
            return (float *)be->checks[k].ptr;
    return NULL;
}

/*
 * Every sentinel buffer the GPU step has, with the CPU's slot meaning; the
 * inline slots (12, 33–35) and reserved ones are no entries. Where the GPU
 * keeps a buffer in another shape the entry says so: v/adv logits and their
 * gradients are column ranges of the packed head outputs (before the output
 * biases, whose own NaN the params slot sees); aux_loss and total_loss are
 * the step's scalars in ctl.
 */
static int
build_table(cuda_backend *be)
{
    fox_cuda_net *n = &be->net;
    const fox_cuda_dims *dm = &n->dm;
    int B = be->B, S = be->S, H2 = dm->H2, NT = dm->NT, NAct = dm->NAct;
    int rq = B * NT, lpw = NAct * dm->NA;
    fox_cuda_fwd *on = &n->on;
    float *ctl = (float *)be->ctl;
    FOX_TRY(watch(be, FOX_SENT_STATES, n->bt.s2, B, S, S));
    FOX_TRY(watch(be, FOX_SENT_V_LOGITS, on->out, B, dm->NA, dm->OW));
    FOX_TRY(watch(be, FOX_SENT_ADV_LOGITS, on->out + dm->OS, B, dm->D * dm->OS, dm->OW));
    FOX_TRY(watch_run(be, FOX_SENT_AUX_LOSS, ctl + offsetof(fox_cuda_ctl, loss_aux) / 4, 1));
    FOX_TRY(watch(be, FOX_SENT_NEXT_STATES, n->bt.s2 + (size_t)B * S, B, S, S));
    FOX_TRY(watch(be, FOX_SENT_TARGET_LOGITS, n->tg.logp, B, lpw, lpw));
    FOX_TRY(watch_run(be, FOX_SENT_GRADS, n->grads, be->np));
    FOX_TRY(watch_run(be, FOX_SENT_CURRENT_LP, on->logp, (size_t)B * dm->D * dm->NA));
    FOX_TRY(watch_run(be, FOX_SENT_PROJECTED, n->proj, (size_t)B * dm->D * dm->NA));
    FOX_TRY(watch(be, FOX_SENT_IQN_Q_ONLINE, n->iq.q, rq, NAct, NAct));
    FOX_TRY(watch(be, FOX_SENT_IQN_Q_TARGET, n->iq.q + (size_t)rq * NAct, rq, NAct, NAct));
    FOX_TRY(watch_run(be, FOX_SENT_TD_ERRORS, n->bt.prio, B));
    FOX_TRY(watch(be, FOX_SENT_H_S1, on->g1.y, B, dm->H1, dm->H1));
    FOX_TRY(watch_run(be, FOX_SENT_PARAMS, n->params, be->np));
    FOX_TRY(watch_run(be, FOX_SENT_REWARDS, n->bt.r, B));
    FOX_TRY(watch(be, FOX_SENT_H_S2_ETA2, on->g2.eta2, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_H_S2_ETA1, on->g2.eta1, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_H_S2_GATE, on->g2.zgv, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_H_S2_GLU, n->glu, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_H_S2_LN_IN, n->ln_in, B, H2, H2));
    FOX_TRY(watch_run(be, FOX_SENT_TOTAL_LOSS, ctl + offsetof(fox_cuda_ctl, loss) / 4, 1));
    FOX_TRY(watch(be, FOX_SENT_ENV_OBS, be->xcol, be->N, S, S));
    FOX_TRY(watch_run(be, FOX_SENT_REPLAY_PRIORITIES, n->bt.prio, B));
    FOX_TRY(watch(be, FOX_SENT_D_V_LOGITS, n->bw.dout, B, dm->NA, dm->OW));
    FOX_TRY(watch(be, FOX_SENT_D_ADV_LOGITS, n->bw.dout + dm->OS, B, dm->D * dm->OS, dm->OW));
    FOX_TRY(watch(be, FOX_SENT_IQN_TRUNK_GRAD, n->bw.d_x, rq, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_IQN_D_H_S2, n->bw.dh_iqn, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_D_IQN_Q, n->bw.d_q, rq, NAct, NAct));
    FOX_TRY(watch(be, FOX_SENT_AUX_D_H_S2, n->bw.dh_aux, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_D_STATES, n->d_states, B, S, S));
    for (int i = FOX_SENT_HALT_END; i < FOX_SENTINEL_SLOTS; i++) {
        const char *buf = fox_sentinel_buffer(i);
        const float *base = strcmp(buf, "params") == 0   ? n->params
                            : strcmp(buf, "adam_m") == 0 ? n->adam_m
                            : strcmp(buf, "adam_v") == 0 ? n->adam_v
                                                         : NULL;
        if (base)
            FOX_TRY(watch_groups(be, i, base));
    }
    FOX_TRY(watch(be, FOX_SENT_TARGET_Q_POST_CLIP, n->tq, B, dm->D * NT, dm->D * NT));
    FOX_TRY(watch_run(be, FOX_SENT_ATOM_SPAN_MAX, n->z, dm->NA));
    FOX_TRY(watch(be, FOX_SENT_H_S2_MAX_ABS, on->g2.y, B, H2, H2));
    return FOX_OK;
}

/*
 * Arm a fault (fox_cpu_stab_arm_fault): its slot, value and train step in
 * ctl for the device, its point on the host. Which launch injects depends on
 * the slot, so the graphs are captured again at the next step.
 */
static int
arm(cuda_backend *be, int slot, int kind, int64_t step)
{
    fox_cuda_net *n = &be->net;
    FOX_TRY(sync_ctl(be));
    be->hctl->fault_slot = slot;
    be->hctl->fault_value = kind == FOX_FAULT_NAN ? NAN : kind == FOX_FAULT_INF ? INFINITY : 1e30f;
    be->hctl->fault_step = step;
    be->hctl->fault_done = 0;
    n->fault_slot = slot;
    n->stab.ctl_fault_inline = slot == FOX_SENT_D_H_S2_POST_AUX || slot == FOX_SENT_IQN_D_H_S2 ||
                               slot == FOX_SENT_D_H_S2_POST_IQN;
    /* Points after Adam take the fault at the slot's first watched element (stab.c). */
    int post_adam = slot == FOX_SENT_PARAMS ||
                    (slot >= FOX_SENT_TRUNK_ADAM_M_MAX && slot <= FOX_SENT_IQN_WEIGHT_MAX &&
                     slot != FOX_SENT_TARGET_Q_POST_CLIP && slot != FOX_SENT_ATOM_SPAN_MAX);
    n->fault_at = post_adam ? first_of(be, slot) : NULL;
    drop_graphs(be);
    return put_ctl(be);
}

static int
contiguous(const fox_cuda_check *e)
{
    return e->rows == 1 || e->ld == e->cols;
}

/*
 * The fused check's blocks over table tab [n] into chunks (NULL: count
 * only); returns their number. Each entry is cut into runs of at most
 * FOX_CUDA_CHUNK floats (a span entry is one chunk; a strided one whole
 * rows, one at least), except that a
 * contiguous max-|x| threshold entry lying inside a contiguous non-finite
 * one (a weight bound's group run inside params) is not read twice: the
 * outer entry's chunks are cut at its ends and carry its slot as well.
 */
static int
cut_chunks(const fox_cuda_check *tab, int n, fox_cuda_chunk *chunks)
{
    int inside[FOX_CUDA_MAX_CHECKS], count = 0;
    for (int i = 0; i < n; i++) {
        const fox_cuda_check *e = &tab[i];
        const fox_sentinel_slot_info *si = fox_sentinel_info(e->slot);
        inside[i] = -1;
        if (si->kind != FOX_SENT_KIND_THRESHOLD || si->measure != FOX_SENT_MEASURE_MAX_ABS ||
            !contiguous(e))
            continue;
        const float *lo = e->ptr, *hi = e->ptr + (size_t)e->rows * e->cols;
        for (int j = 0; j < n && inside[i] < 0; j++) {
            const fox_cuda_check *o = &tab[j];
            if (fox_sentinel_info(o->slot)->kind == FOX_SENT_KIND_NONFINITE && contiguous(o) &&
                lo >= o->ptr && hi <= o->ptr + (size_t)o->rows * o->cols)
                inside[i] = j;
        }
        for (int k = 0; k < i && inside[i] >= 0; k++) /* runs of one outer entry are disjoint */
            if (inside[k] == inside[i] && lo < tab[k].ptr + (size_t)tab[k].rows * tab[k].cols &&
                tab[k].ptr < hi)
                inside[i] = -1;
    }
    for (int j = 0; j < n; j++) {
        if (inside[j] >= 0)
            continue;
        const fox_cuda_check *e = &tab[j];
        const fox_sentinel_slot_info *si = fox_sentinel_info(e->slot);
        int threshold = si->kind == FOX_SENT_KIND_THRESHOLD;
        int span = si->measure == FOX_SENT_MEASURE_SPAN;
        /* A strided entry in whole rows, which the kernel can then read 16 bytes at a time. */
        int len = e->rows * e->cols, rows_in = FOX_CUDA_CHUNK / e->cols;
        int step = span            ? len
                   : contiguous(e) ? FOX_CUDA_CHUNK
                                   : (rows_in > 1 ? rows_in : 1) * e->cols;
        for (int at = 0; at < len;) {
            int end = at + step < len ? at + step : len;
            int inner = -1;
            for (int i = 0; i < n; i++) {
                if (inside[i] != j)
                    continue;
                int lo = (int)(tab[i].ptr - e->ptr), hi = lo + tab[i].rows * tab[i].cols;
                if (lo <= at && at < hi)
                    inner = i;
                if (lo <= at && hi < end && at < hi)
                    end = hi;
                else if (at < lo && lo < end)
                    end = lo;
            }
            if (chunks)
                chunks[count] = (fox_cuda_chunk){e->ptr,
                                                 at,
                                                 end - at,
                                                 e->cols,
                                                 e->ld,
                                                 (short)(threshold ? -1 : e->slot),
                                                 (short)(threshold ? e->slot
                                                         : inner >= 0 ? tab[inner].slot
                                                                      : -1),
                                                 span};
            count++;
            at = end;
        }
    }
    return count;
}

/* The chunks of table tab [n] into device memory *out (allocated), their number into *n_out. */
static int
upload_chunks(const fox_cuda_check *tab, int n, fox_cuda_chunk **out, int *n_out)
{
    int nc = cut_chunks(tab, n, NULL);
    fox_cuda_chunk *chunks = malloc((size_t)(nc > 0 ? nc : 1) * sizeof *chunks);
    if (!chunks)
        return FOX_ENOMEM;
    cut_chunks(tab, n, chunks);
    int rv = dev_alloc(out, (size_t)(nc > 0 ? nc : 1) * sizeof *chunks);
    cudaError_t ce = rv == FOX_OK ? cudaMemcpy(*out, chunks, (size_t)nc * sizeof *chunks,
                                               cudaMemcpyHostToDevice)
                                  : cudaSuccess;
    free(chunks);
    *n_out = nc;
    FOX_TRY(rv);
    FOX_CUDA_TRY(ce);
    return FOX_OK;
}

/* The rules, the table, the flags and the configured fault: set once at construction. */
static int
stab_init(cuda_backend *be, char *err, size_t errlen)
{
    const fox_config *c = be->cfg;
    fox_cuda_net *n = &be->net;
    fox_cuda_rule rules[FOX_SENTINEL_SLOTS];
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        const fox_sentinel_slot_info *si = fox_sentinel_info(i);
        rules[i] = (fox_cuda_rule){si->kind, si->measure, si->base, si->power, si->site,
                                   fox_sentinel_is_halt(i), si->mult};
    }
    FOX_TRY(dev_alloc(&be->d_rules, sizeof rules));
    FOX_CUDA_TRY(cudaMemcpy(be->d_rules, rules, sizeof rules, cudaMemcpyHostToDevice));
    /* A double a block of the site's grid, or of GRN2's tail where it runs there. */
    size_t site_blocks = ((size_t)be->B + FOX_CUDA_TAIL_ROWS - 1) / FOX_CUDA_TAIL_ROWS;
    if (site_blocks < FOX_CUDA_SITE_BLOCKS)
        site_blocks = FOX_CUDA_SITE_BLOCKS;
    FOX_TRY(dev_alloc(&be->site_part, site_blocks * sizeof(double)));
    FOX_TRY(dev_alloc(&be->sp4, sizeof *be->sp4));
    FOX_TRY(fox__cuda_sp4_reset(n->st[0], be->sp4));
    int rv = build_table(be);
    if (rv != FOX_OK) {
        snprintf(err, errlen, "cuda backend: stability table: %s", fox_strerror(rv));
        return rv;
    }
    /*
     * An activation buffer is read by the check before its producer first
     * runs: start it at 0 (not the training state, the support or ctl).
     */
    const float *keep[][2] = {{n->params, n->params + 2 * be->np},
                              {n->adam_m, n->adam_m + be->np},
                              {n->adam_v, n->adam_v + be->np},
                              {n->z, n->z + n->dm.NA},
                              {(const float *)be->ctl, (const float *)(be->ctl + 1)}};
    for (int k = 0; k < be->n_checks; k++) {
        const fox_cuda_check *e = &be->checks[k];
        size_t extent = (size_t)(e->rows - 1) * e->ld + e->cols;
        int state = 0;
        for (size_t j = 0; j < sizeof keep / sizeof keep[0]; j++)
            state |= e->ptr >= keep[j][0] && e->ptr < keep[j][1];
        if (!state)
            FOX_CUDA_TRY(cudaMemset((void *)e->ptr, 0, extent * sizeof(float)));
    }
    FOX_TRY(upload_chunks(be->checks, be->n_checks, &be->d_chunks, &be->n_chunks));
    n->want_d_states = c->sentinel != 0;
    n->stab = (fox_cuda_stab){.sentinel = c->sentinel != 0,
                              .flags = be->flags_map,
                              .rules = be->d_rules,
                              .isv = be->isv_dev,
                              .ctl = be->ctl,
                              .grad_clip = c->grad_clip,
                              .site_part = be->site_part,
                              .sites = 1,
                              .adaptive = c->bounds_mode == FOX_BOUNDS_ADAPTIVE,
                              .sp4 = be->sp4,
                              .pgroup = n->pgroup};
    /* SP4: Pearl C's totals (each group's elements) and the trunk input layer for the L1 rate. */
    const fox_model_layout *lay = n->lay;
    for (int i = 0; i < FOX_P_COUNT; i++)
        n->stab.gsize[lay->t[i].group] += (unsigned int)fox_tensor_size(lay, i);
    n->stab.l1_off = lay->t[FOX_P_GRN1_W2].offset;
    n->stab.l1_rows = lay->t[FOX_P_GRN1_W2].rows;
    n->stab.l1_cols = lay->t[FOX_P_GRN1_W2].cols;
    if (n->stab.l1_cols > FOX_CUDA_L1_COLS) /* model.state_dim's bound keeps it there */
        return FOX_EINVAL;
    /* debug.inject_fault: a non-"none" kind is the explicit request (stab.c). */
    FOX_TRY(sync_ctl(be));
    be->hctl->fault_slot = -1;
    n->fault_slot = -1;
    if (c->fault_kind != FOX_FAULT_NONE) {
        int slot = fox_sentinel_fault_slot(c->fault_buffer);
        if (slot < 0) {
            snprintf(err, errlen, "debug.inject_fault.buffer: '%s' names no sentinel buffer",
                     c->fault_buffer);
            return FOX_EINVAL;
        }
        return arm(be, slot, c->fault_kind, c->fault_step);
    }
    return put_ctl(be);
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
    err[0] = '\0';
    if ((rv = stab_init(be, err, errlen)) != FOX_OK) {
        if (!err[0])
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
     * Benchmark knobs, never defaults: FOX_CUDA_MATH=tf32 and
     * FOX_CUDA_GREEDY_MATH=fp32 (see fox__cuda_set_math), FOX_CUDA_PDL=0
     * (no programmatic dependent launch), FOX_CUDA_SIDE=0 (one stream, to
     * measure what the others buy; the greedy-action forwards then run on
     * MAIN, in FP32), FOX_CUDA_SIDES=1 or 2 (the target forward and weight
     * gradients on fewer side streams than 3), FOX_CUDA_NODW=1 (no weight
     * gradients: what they cost), FOX_CUDA_IQN_BESIDE=rows (the batch from
     * which the IQN heads run after the forwards instead of beside them),
     * FOX_CUDA_UNROLL=k (steps a graph launch, see steps);
     * FOX_CUDA_PRIO=0 (every stream at one priority) is read in
     * create_device, before the streams are made.
     */
    const char *side = getenv("FOX_CUDA_SIDE");
    if (side && strcmp(side, "0") == 0)
        be->net.use_side = 0;
    /* Only kernels built for sm_90 wait for their predecessor (device.cuh's pdl_enter). */
    const char *pdl = getenv("FOX_CUDA_PDL");
    fox__cuda_pdl = FOX_CUDA_ARCH >= 90 && !(pdl && strcmp(pdl, "0") == 0);
    const char *unroll = getenv("FOX_CUDA_UNROLL");
    be->unroll = unroll ? atoi(unroll) : be->B < FOX_CUDA_UNROLL_ROWS ? FOX_CUDA_UNROLL : 1;
    const char *sides = getenv("FOX_CUDA_SIDES");
    if (sides && (strcmp(sides, "1") == 0 || strcmp(sides, "2") == 0))
        be->net.n_sides = atoi(sides);
    const char *beside = getenv("FOX_CUDA_IQN_BESIDE");
    if (beside)
        be->net.iqn_beside_rows = atoi(beside);
    const char *nodw = getenv("FOX_CUDA_NODW");
    fox__cuda_skip_dw = nodw && strcmp(nodw, "1") == 0;
    const char *gmath = getenv("FOX_CUDA_GREEDY_MATH");
    be->net.greedy_tf32 = !(gmath && strcmp(gmath, "fp32") == 0);
    const char *math = getenv("FOX_CUDA_MATH");
    if (fox__cuda_set_math(&be->net, math && strcmp(math, "tf32") == 0) != FOX_OK) {
        snprintf(err, errlen, "cuda backend: %s", last_err);
        cuda_destroy((fox_backend *)be);
        return FOX_ECUDA;
    }
    fox_log(FOX_LOG_INFO,
            "cuda backend: %zu MiB of device memory (replay ring %zu MiB), %s math, "
            "%d stream(s), dependent launch %s, greedy-action forwards %s",
            be->bytes_total >> 20, be->bytes_replay >> 20, be->net.tf32 ? "TF32" : "FP32",
            be->net.use_side ? FOX_CUDA_STREAMS : 1, fox__cuda_pdl ? "on" : "off",
            (be->net.greedy_tf32 && be->net.use_side) || be->net.tf32 ? "TF32" : "FP32");
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
    /* The stability system's fold state (fox_cpu_stab_reset_fold). */
    be->hctl->halt = FOX_HALT_NONE;
    be->hctl->collapse_run = 0;
    be->hctl->fault_done = 0;
    be->base.halt_reason = FOX_HALT_NONE;
    FOX_TRY(put_ctl(be));
    memset(be->flags_mem, 0, FOX_SENTINEL_SLOTS * sizeof(int));
    fox_isv_reset(be->isv_mem);
    /* SP4: the Wiener states (fox_bounds_wiener_reset: only SP4 slots have any) and Pearl C. */
    return fox__cuda_sp4_reset(n->st[0], be->sp4);
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

/* The configured fault's injection at slot's point (stab.c's point), only at that slot. */
static int
point(cuda_backend *be, int s, int slot, float *p, float *p2, int after_count)
{
    if (be->net.fault_slot != slot)
        return FOX_OK;
    return fox__cuda_inject(be->net.st[s], &be->net.stab, p, p2, after_count);
}

/* One collection from every environment on stream s; trains: the step trains too. */
static int
enqueue_collect(cuda_backend *be, int s, int trains)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t st = n->st[s];
    FOX_TRY(fox__cuda_collect_state(st, &be->cc, be->envs, be->xcol));
    /* A fault is armed only in a step that trains (fox_cpu_stab_begin_step). */
    if (trains)
        FOX_TRY(point(be, s, FOX_SENT_ENV_OBS, be->xcol, NULL, 0));
    FOX_TRY(fox__cuda_forward(n, s, &be->col, be->xcol, be->N, 0, 0, 0));
    FOX_TRY(fox__cuda_collect_act(st, &be->cc, be->fold, be->envs, be->wbar, be->wport, be->wa,
                                  be->wr, be->col.q, be->ctl, be->staged, be->counts));
    return fox__cuda_collect_push(st, &be->cc, be->staged, be->counts, be->ring, be->ctl);
}

/*
 * A train step, and in a full step (collect) the collection beside it: the
 * batch is gathered from the ring as it stood before this step's push (the
 * CPU backend's order), so the collection can run on its own stream from
 * the gather (and the pre-step's atoms it acts on) until the optimizer.
 * Ends with the target update and re-pack forked onto LATE and, on MAIN,
 * the points after the step's statistics, where the fused check follows
 * (with dependent launch: no cross-stream wait before it).
 */
static int
enqueue_train(cuda_backend *be, int collect)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    fox_cuda_batch *bt = &n->bt;
    size_t BS = (size_t)be->B * be->S;
    FOX_TRY(fox__cuda_gather(s0, &be->cc, be->ring, be->d_regime, be->lay->NT, be->ctl, bt));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_STATES, bt->s2, NULL, 0));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_NEXT_STATES, bt->s2 + BS, NULL, 0));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_REWARDS, bt->r, NULL, 0));
    FOX_TRY(fox__cuda_pre_step(s0, &n->stab, be->B, bt->aux, be->lay->NA, be->lay->v_min,
                               be->lay->v_max, n->atoms_p99, n->z));
    int cs = FOX_CUDA_MAIN;
    if (collect) {
        FOX_TRY(fox__cuda_fork(n, FOX_CUDA_COLLECT, &cs));
        FOX_TRY(enqueue_collect(be, cs, 1));
    }
    FOX_TRY(fox__cuda_loss_grad(n, &be->hp));
    FOX_TRY(fox__cuda_dep(n, cs, FOX_CUDA_MAIN));
    FOX_TRY(fox__cuda_optim(n, &be->oc, be->ctl, be->isv_dev, be->isv_map));
    /* The re-pack beside the fused check, which reads nothing it writes. */
    int ps;
    FOX_TRY(fox__cuda_fork(n, FOX_CUDA_LATE, &ps));
    FOX_TRY(fox__cuda_repack(n, ps, &be->oc, be->ctl));
    /* After the step was counted: the losses and the priorities. */
    float *ctl = (float *)be->ctl;
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_AUX_LOSS,
                  ctl + offsetof(fox_cuda_ctl, loss_aux) / 4, NULL, 1));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_TOTAL_LOSS, ctl + offsetof(fox_cuda_ctl, loss) / 4,
                  NULL, 1));
    return point(be, FOX_CUDA_MAIN, FOX_SENT_REPLAY_PRIORITIES, bt->prio, NULL, 1);
}

/*
 * A step ends with the fused check and the halts on MAIN, then the ISV
 * published (the optimizer's finish kernel already did in a training
 * step), and every stream forked during it joined back into MAIN. In a
 * training step the check runs beside the heads' re-pack, which writes
 * nothing it reads (the packed copies and the target net).
 */
static int
enqueue(cuda_backend *be, int kind)
{
    fox_cuda_net *n = &be->net;
    if (kind == G_COLLECT) {
        /* On the collection's stream (its cuBLAS handle's math) as in a full step. */
        int cs;
        FOX_TRY(fox__cuda_fork(n, FOX_CUDA_COLLECT, &cs));
        FOX_TRY(enqueue_collect(be, cs, 0));
        FOX_TRY(fox__cuda_dep(n, cs, FOX_CUDA_MAIN));
    } else
        FOX_TRY(enqueue_train(be, kind == G_FULL));
    FOX_TRY(fox__cuda_check(n->st[FOX_CUDA_MAIN], &n->stab, be->d_chunks, be->n_chunks,
                            kind != G_COLLECT));
    if (kind == G_COLLECT)
        FOX_TRY(fox__cuda_publish(n->st[FOX_CUDA_MAIN], be->isv_dev, be->isv_map,
                                  FOX_ISV_TOTAL_DIM));
    return fox__cuda_join_all(n);
}

/* The graph of `count` steps of a kind in a row (1, or be->unroll), into *out. */
static int
capture(cuda_backend *be, int kind, int count, cudaGraphExec_t *out)
{
    cudaStream_t s0 = be->net.st[0];
    cudaGraph_t g = NULL;
    FOX_CUDA_TRY(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    int rv = FOX_OK;
    for (int i = 0; i < count && rv == FOX_OK; i++)
        rv = enqueue(be, kind);
    cudaError_t e = cudaStreamEndCapture(s0, &g);
    if (rv != FOX_OK) {
        if (g)
            cudaGraphDestroy(g);
        return rv;
    }
    FOX_CUDA_TRY(e);
    e = cudaGraphInstantiate(out, g, fox__cuda_prio ? cudaGraphInstantiateFlagUseNodePriority : 0);
    cudaGraphDestroy(g);
    FOX_CUDA_TRY(e);
    return FOX_OK;
}

/*
 * count steps of a kind. The first of each kind runs eagerly (it loads
 * every kernel's module outside any capture); the next capture the graphs
 * every later one replays: unroll steps to a launch while that many are
 * left (a step inside a graph starts without the delay a graph's launch
 * puts before its second node), then one step to a launch.
 */
static int
steps(cuda_backend *be, int kind, int count)
{
    if (count > 0 && !be->warm[kind]) {
        be->warm[kind] = 1;
        FOX_TRY(enqueue(be, kind));
        count--;
    }
    cudaStream_t s0 = be->net.st[0];
    for (; count >= be->unroll && be->unroll > 1; count -= be->unroll) {
        if (!be->graph[kind][1])
            FOX_TRY(capture(be, kind, be->unroll, &be->graph[kind][1]));
        FOX_CUDA_TRY(cudaGraphLaunch(be->graph[kind][1], s0));
    }
    for (; count > 0; count--) {
        if (!be->graph[kind][0])
            FOX_TRY(capture(be, kind, 1, &be->graph[kind][0]));
        FOX_CUDA_TRY(cudaGraphLaunch(be->graph[kind][0], s0));
    }
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

/*
 * The end of a run of steps: in adaptive mode the last Adam step's Pearl B
 * (its second pass, which a step defers to the next one, fox__cuda_loss_grad) and
 * the ISV published, so that the host reads, and the next chunk_begin takes
 * back, the ISV of the CPU's step order; then the device's ctl.
 */
static int
chunk_end(cuda_backend *be)
{
    fox_cuda_net *n = &be->net;
    if (n->stab.adaptive) {
        cudaStream_t s0 = n->st[0];
        /* Its pass 1 ran after that Adam, in the step (fox__cuda_optim). */
        FOX_TRY(
            fox__cuda_post_adam_pass2(s0, &n->stab, 1, be->np, n->params, n->adam_m, n->adam_v));
        FOX_TRY(fox__cuda_publish(s0, be->isv_dev, be->isv_map, FOX_ISV_TOTAL_DIM));
    }
    return sync_ctl(be);
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

/*
 * The halts the device decided (check_kernel's last block), after a chunk's
 * sync: FOX_EHALT with halt_reason and the message the CPU gives. The
 * device notices a halt at the step it happens and from then on moves no
 * parameter (Adam skips); the host learns of it at the end of the chunk.
 */
static int
halted(cuda_backend *be)
{
    const fox_cuda_ctl *h = be->hctl;
    if (h->halt == FOX_HALT_NONE)
        return FOX_OK;
    be->base.halt_reason = h->halt;
    be->base.halt_step = h->halt_step;
    if (h->halt == FOX_HALT_NAN) {
        char slots[400];
        fox_sentinel_halt_text(be->flags_mem, slots, sizeof slots);
        snprintf(be->base.err, sizeof be->base.err, "halt_nan: slots %s", slots);
    } else if (!isfinite(h->halt_loss)) {
        snprintf(be->base.err, sizeof be->base.err, "halt_grad_collapse: non-finite loss (%g)",
                 (double)h->halt_loss);
    } else {
        snprintf(be->base.err, sizeof be->base.err,
                 "halt_grad_collapse: grad norm <= %g for %d train steps", FOX_HALT_COLLAPSE_NORM,
                 FOX_HALT_COLLAPSE_STEPS);
    }
    return FOX_EHALT;
}

static int
run_steps(cuda_backend *be, int n, fox_step_stats *st)
{
    const fox_config *c = be->cfg;
    FOX_TRY(chunk_begin(be));
    int i = 0, halt = 0;
    /* Until the ring is ready a step only collects; readiness is known after it. */
    for (; i < n && !be->ready && !halt; i++) {
        FOX_TRY(steps(be, G_COLLECT, 1));
        FOX_TRY(sync_ctl(be));
        halt = be->hctl->halt != FOX_HALT_NONE;
        be->ready = be->hctl->ring_size >= c->learning_starts && be->hctl->ring_size >= be->B;
    }
    if (!halt)
        FOX_TRY(steps(be, G_FULL, n - i));
    FOX_TRY(chunk_end(be));
    stats_of(be->hctl, st);
    st->epsilon = be->hctl->eps;
    st->step = be->hctl->step;
    st->env_steps = be->hctl->env_steps;
    return halted(be);
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
    FOX_TRY(steps(be, G_TRAIN, n));
    FOX_TRY(chunk_end(be));
    stats_of(be->hctl, st);
    return halted(be);
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
        FOX_TRY(fox__cuda_forward(n, 0, &be->col, be->xcol, R, 0, 0, 0));
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

/* The fused check over chunks [n] now, outside any step; the halts are left alone. */
static int
check_now_with(cuda_backend *be, const fox_cuda_chunk *chunks, int n)
{
    cudaStream_t s0 = be->net.st[0];
    FOX_TRY(sync_ctl(be));
    int halt = be->hctl->halt, run = be->hctl->collapse_run;
    FOX_TRY(fox__cuda_check(s0, &be->net.stab, chunks, n, 0));
    FOX_TRY(sync_ctl(be));
    be->hctl->halt = halt;
    be->hctl->collapse_run = run;
    return put_ctl(be);
}

static int
cuda_arm_fault(fox_backend *be_, int slot, int kind, int64_t step)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    if (slot < 0 || slot >= FOX_SENTINEL_SLOTS || !fox_sentinel_buffer(slot)[0])
        return FOX_EINVAL;
    return fail(be, arm(be, slot, kind, step), "arm_fault");
}

/* The fused check now (a test and drill hook). */
static int
check_now(cuda_backend *be)
{
    return check_now_with(be, be->d_chunks, be->n_chunks);
}

static int
cuda_check_now(fox_backend *be_)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    return fail(be, check_now(be), "check_now");
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
    .sentinel_where = NULL, /* the watched buffers are device memory */
    .check_now = cuda_check_now,
    .arm_fault = cuda_arm_fault,
};

/* ------------------------------------------------------------------------------------------ */
/* Debug entry points (cuda_backend.h)                                                        */

/* A host batch, both nets' parameters and the loss's hyperparameters (into *h) onto the device. */
static int
debug_batch(cuda_backend *be, const float *params, const float *target, const fox_cpu_net_batch *b,
            const fox_cpu_net_hparams *hp, fox_cuda_loss_hp *h)
{
    fox_cuda_net *n = &be->net;
    const fox_cuda_dims *dm = &n->dm;
    int B = b->B, S = be->S, D = dm->D, NT = dm->NT;
    size_t bytes = be->np * sizeof(float);
    if (B != n->B)
        return FOX_EINVAL;
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
    *h = (fox_cuda_loss_hp){hp->gamma_n,     hp->iqn_lambda,      hp->aux_lambda,
                            hp->target_mode, hp->bdq_trunk_scale, be->dbg_scale};
    return fox__cuda_pack(n, 0);
}

static int
debug_loss_grad(cuda_backend *be, const float *params, const float *target,
                const fox_cpu_net_batch *b, const fox_cpu_net_hparams *hp, fox_cpu_net_loss *loss,
                float *grads, float *priority, int32_t *a_star)
{
    fox_cuda_net *n = &be->net;
    fox_cuda_batch *bt = &n->bt;
    int B = b->B, D = n->dm.D;
    size_t fb = sizeof(float), ib = sizeof(int32_t), bytes = be->np * fb;
    memset(loss, 0, sizeof *loss);
    fox_cuda_loss_hp h;
    FOX_TRY(debug_batch(be, params, target, b, hp, &h));
    /* The CPU twin runs without its stability hook: no clamp sites, points or inline checks. */
    n->stab.sites = 0;
    int rv = fox__cuda_loss_grad(n, &h);
    n->stab.sites = 1;
    bt->w = NULL;
    FOX_TRY(rv);
    FOX_CUDA_TRY(cudaStreamSynchronize(n->st[0]));
    FOX_CUDA_TRY(cudaMemcpy(grads, n->grads, bytes, cudaMemcpyDeviceToHost));
    if (priority)
        FOX_CUDA_TRY(cudaMemcpy(priority, bt->prio, B * fb, cudaMemcpyDeviceToHost));
    if (a_star)
        FOX_CUDA_TRY(cudaMemcpy(a_star, bt->a_star, (size_t)B * D * ib, cudaMemcpyDeviceToHost));
    double *parts = malloc((size_t)B * FOX_CUDA_PARTS * sizeof *parts);
    if (!parts)
        return FOX_ENOMEM;
    cudaError_t e = cudaMemcpy(parts, n->loss_parts, (size_t)B * FOX_CUDA_PARTS * sizeof *parts,
                               cudaMemcpyDeviceToHost);
    double sum[4] = {0, 0, 0, 0};
    for (int i = 0; i < B; i++)
        for (int k = 0; k < 4; k++)
            sum[k] += parts[(size_t)i * FOX_CUDA_PARTS + k];
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

/* One training loss_grad with adaptive bounds on a host batch, Wiener state reset first. */
static int
debug_target_q_bound(cuda_backend *be, const float *params, const float *target,
                     const fox_cpu_net_batch *b, const fox_cpu_net_hparams *hp, float *isv)
{
    fox_cuda_net *n = &be->net;
    size_t isv_bytes = FOX_ISV_TOTAL_DIM * sizeof(float);
    fox_cuda_loss_hp h;
    FOX_TRY(debug_batch(be, params, target, b, hp, &h));
    FOX_TRY(fox__cuda_sp4_reset(n->st[0], be->sp4));
    FOX_CUDA_TRY(cudaMemcpy(be->isv_dev, isv, isv_bytes, cudaMemcpyHostToDevice));
    int adaptive = n->stab.adaptive;
    n->stab.adaptive = 1;
    int rv = fox__cuda_loss_grad(n, &h);
    n->stab.adaptive = adaptive;
    n->bt.w = NULL;
    FOX_TRY(rv);
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_CUDA_TRY(cudaMemcpy(isv, be->isv_dev, isv_bytes, cudaMemcpyDeviceToHost));
    return FOX_OK;
}

int
fox_cuda_debug_target_q_bound(fox_backend *be_, const float *params, const float *target,
                              const fox_cpu_net_batch *b, const fox_cpu_net_hparams *hp, float *isv)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    if (!params || !target || !b || !hp || !isv)
        return FOX_EINVAL;
    return fail(be, debug_target_q_bound(be, params, target, b, hp, isv), "debug_target_q_bound");
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
    /* A parity pass: the plain clip at train.grad_clip, no ISV producer (st.sites 0). */
    fox_cuda_stab st = n->stab;
    st.sites = 0;
    FOX_TRY(fox__cuda_grad_norm(s0, be->np, n->grads, n->norm_part, &st, be->B, n->dm.D,
                                n->loss_parts, &be->oc));
    FOX_TRY(fox__cuda_adam(s0, be->np, n->params, n->grads, n->adam_m, n->adam_v, n->pgroup,
                           &n->aslots, &be->oc, &st));
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
fox_cuda_debug_set_math(fox_backend *be_, int tf32, int greedy_tf32)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    drop_graphs(be);
    be->net.greedy_tf32 = greedy_tf32;
    return fail(be, fox__cuda_set_math(&be->net, tf32), "set_math");
}

int
fox_cuda_debug_set_paths(fox_backend *be_, const fox_cuda_paths *want, fox_cuda_paths *was)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    drop_graphs(be);
    *was = (fox_cuda_paths){be->net.slot_rows, fox__cuda_dw_loop_rows, fox__cuda_epilogue_fours};
    be->net.slot_rows = want->slot_rows;
    fox__cuda_dw_loop_rows = want->dw_loop_rows;
    fox__cuda_epilogue_fours = want->epilogue_fours;
    return FOX_OK;
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

/* ---- the stability kernels against their CPU twins ---------------------------------------- */

/*
 * x [n] and isv into the device, flags cleared; the halts left as they were by the caller.
 * The copies go on the default stream, which MAIN (non-blocking) does not wait for, and a
 * pageable copy may return before its transfer lands: the device is synchronized after them.
 */
static int
debug_stage(cuda_backend *be, float **dx, const float *x, size_t n, const float *isv)
{
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_TRY(dev_alloc(dx, n * sizeof(float)));
    FOX_CUDA_TRY(cudaMemcpy(*dx, x, n * sizeof(float), cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(be->isv_dev, isv, FOX_ISV_TOTAL_DIM * sizeof(float),
                            cudaMemcpyHostToDevice));
    memset(be->flags_mem, 0, FOX_SENTINEL_SLOTS * sizeof(int));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    return FOX_OK;
}

/*
 * The buffer is staged n mod 4 floats past a 16-byte boundary (n = rows · ld), so that an
 * odd length also runs the kernel's scalar head and tail around its float4 body; the chunks
 * are cut as the backend cuts them, so that a threshold fires from any block.
 */
static int
debug_check(cuda_backend *be, int slot, const float *x, int rows, int cols, int ld,
            const float *isv, int *fired)
{
    float *dbuf = NULL;
    fox_cuda_chunk *dc = NULL;
    int nc = 0;
    size_t n = (size_t)rows * ld, off = n % 4;
    float *xs = malloc((n + off) * sizeof *xs);
    int rv = xs ? FOX_OK : FOX_ENOMEM;
    if (rv == FOX_OK) {
        memset(xs, 0, off * sizeof *xs);
        memcpy(xs + off, x, n * sizeof *xs);
        rv = debug_stage(be, &dbuf, xs, n + off, isv);
    }
    fox_cuda_check e = {dbuf ? dbuf + off : NULL, slot, rows, cols, ld};
    if (rv == FOX_OK)
        rv = upload_chunks(&e, 1, &dc, &nc);
    if (rv == FOX_OK)
        rv = check_now_with(be, dc, nc);
    *fired = be->flags_mem[slot];
    free(xs);
    cudaFree(dbuf);
    cudaFree(dc);
    return rv;
}

int
fox_cuda_debug_check(fox_backend *be_, int slot, const float *x, int rows, int cols, int ld,
                     const float *isv, int *fired)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    if (slot < 0 || slot >= FOX_SENTINEL_SLOTS || rows < 1 || cols < 1 || ld < cols ||
        (long long)rows * ld > INT_MAX || !x || !isv || !fired)
        return FOX_EINVAL;
    return fail(be, debug_check(be, slot, x, rows, cols, ld, isv, fired), "debug_check");
}

/*
 * GRN2's tail with the site on LayerNorm inputs x (fox_cuda_debug_h_s2_site), y into x; with
 * adaptive bounds the site's launches after the tail's pass 1, as in the forward.
 */
static int
debug_tail_site(cuda_backend *be, const fox_cuda_stab *st, float *x, int rows, int out, float gamma)
{
    size_t n = (size_t)rows * out;
    /* zgv [2n], xhat [n], y [n], rstd [rows], then bg, bv, γ, β [out each]. */
    size_t len = 4 * n + (size_t)rows + 4 * (size_t)out;
    float *w = NULL, *g = malloc((size_t)out * sizeof *g);
    int rv = g ? dev_alloc(&w, len * sizeof(float)) : FOX_ENOMEM;
    float *zgv = w, *xhat = w + 2 * n, *y = xhat + n, *rstd = y + n, *par = rstd + rows;
    for (int c = 0; rv == FOX_OK && c < out; c++)
        g[c] = gamma;
    if (rv == FOX_OK && (cudaMemset(w, 0, len * sizeof(float)) != cudaSuccess ||
                         cudaMemcpy(par + 2 * out, g, (size_t)out * sizeof *g,
                                    cudaMemcpyHostToDevice) != cudaSuccess ||
                         cudaDeviceSynchronize() != cudaSuccess)) /* as debug_stage */
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "tail site", 0);
    if (rv == FOX_OK)
        rv = fox__cuda_grn_tail(be->net.st[0], rows, out, zgv, x, par, par + out, par + 2 * out,
                                par + 3 * out, xhat, rstd, y, NULL, NULL, st);
    if (rv == FOX_OK && st->adaptive)
        rv = fox__cuda_h_s2_site(be->net.st[0], st, y, n, 1);
    if (rv == FOX_OK && cudaMemcpyAsync(x, y, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                        be->net.st[0]) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpyAsync", "tail site", 0);
    if (cudaStreamSynchronize(be->net.st[0]) != cudaSuccess && rv == FOX_OK)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaStreamSynchronize", "tail site", 0);
    cudaFree(w);
    free(g);
    return rv;
}

static int
debug_h_s2_site(cuda_backend *be, float *h, size_t n, int tail_out, float gamma, int adaptive,
                float *isv, int *flags)
{
    float *dh = NULL;
    fox_cuda_stab st = be->net.stab;
    st.adaptive = adaptive;
    int rv = debug_stage(be, &dh, h, n, isv);
    if (rv == FOX_OK && adaptive)
        rv = fox__cuda_sp4_reset(be->net.st[0], be->sp4);
    if (rv == FOX_OK && tail_out > 0)
        rv = debug_tail_site(be, &st, dh, (int)(n / (size_t)tail_out), tail_out, gamma);
    else if (rv == FOX_OK)
        rv = fox__cuda_h_s2_site(be->net.st[0], &st, dh, n, 0);
    if (rv == FOX_OK && cudaStreamSynchronize(be->net.st[0]) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaStreamSynchronize", "site", 0);
    if (rv == FOX_OK && (cudaMemcpy(h, dh, n * sizeof(float), cudaMemcpyDeviceToHost) !=
                             cudaSuccess ||
                         cudaMemcpy(isv, be->isv_dev, FOX_ISV_TOTAL_DIM * sizeof(float),
                                    cudaMemcpyDeviceToHost) != cudaSuccess))
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "site", 0);
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        flags[i] = be->flags_mem[i];
    cudaFree(dh);
    return rv;
}

int
fox_cuda_debug_h_s2_site(fox_backend *be_, float *h, size_t n, int tail_out, float gamma,
                         int adaptive, float *isv, int *flags)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    if (!h || n < 1 || !isv || !flags || tail_out < 0 ||
        (tail_out > 0 && (n % (size_t)tail_out || n / (size_t)tail_out > (size_t)be->B)))
        return FOX_EINVAL;
    return fail(be, debug_h_s2_site(be, h, n, tail_out, gamma, adaptive, isv, flags),
                "debug_h_s2_site");
}

static int
debug_sp4(cuda_backend *be, int reset, const float *params, const float *grads, const float *m,
          const float *v, const float *h, size_t nh, const float *tq, size_t ntq, float *isv)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    size_t bytes = be->np * sizeof(float);
    float *dh = NULL, *dtq = NULL;
    if (reset)
        FOX_TRY(fox__cuda_sp4_reset(s0, be->sp4));
    int rv = debug_stage(be, &dh, h, nh, isv);
    if (rv == FOX_OK)
        rv = dev_alloc(&dtq, ntq * sizeof(float));
    if (rv == FOX_OK &&
        (cudaMemcpy(dtq, tq, ntq * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(n->params, params, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(n->grads, grads, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(n->adam_m, m, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(n->adam_v, v, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaDeviceSynchronize() != cudaSuccess)) /* as debug_stage */
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "sp4", 0);
    if (rv == FOX_OK)
        rv = fox__cuda_p99_observe(s0, &n->stab, dh, nh, FOX_ISV_H_S2_BOUND, FOX_CUDA_P99_H_S2);
    if (rv == FOX_OK)
        rv = fox__cuda_p99_observe(s0, &n->stab, dtq, ntq, FOX_ISV_TARGET_Q_BOUND,
                                   FOX_CUDA_P99_TQ);
    if (rv == FOX_OK)
        rv = fox__cuda_l1_deficit(s0, &n->stab, n->grads);
    if (rv == FOX_OK)
        rv = fox__cuda_post_adam(s0, &n->stab, 0, be->np, n->params, n->grads, n->adam_m,
                                 n->adam_v);
    if (rv == FOX_OK && cudaStreamSynchronize(s0) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaStreamSynchronize", "sp4", 0);
    if (rv == FOX_OK && cudaMemcpy(isv, be->isv_dev, FOX_ISV_TOTAL_DIM * sizeof(float),
                                   cudaMemcpyDeviceToHost) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "sp4", 0);
    cudaFree(dh);
    cudaFree(dtq);
    return rv;
}

int
fox_cuda_debug_sp4(fox_backend *be_, int reset, const float *params, const float *grads,
                   const float *m, const float *v, const float *h, size_t nh, const float *tq,
                   size_t ntq, float *isv)
{
    cuda_backend *be = (cuda_backend *)be_;
    ALIVE(be);
    if (!params || !grads || !m || !v || !h || nh < 1 || !tq || ntq < 1 || !isv)
        return FOX_EINVAL;
    return fail(be, debug_sp4(be, reset, params, grads, m, v, h, nh, tq, ntq, isv), "debug_sp4");
}
