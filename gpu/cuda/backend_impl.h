/*
 * backend_impl.h — the CUDA backend's own state, shared by its host files:
 * backend.c (lifecycle and the ops table), step.c (the step, its capture
 * into graphs and its replay), table.c (the fused check's table and the
 * fault arming), ctx.c (the helpers all of them share, ctx.h) and the
 * test-support library's debug.c.
 *
 * Nothing outside gpu/cuda/ includes it. Every function here runs on the
 * thread that owns the backend (the trainer's) and returns a FOX_* status.
 */
#ifndef FOX_CUDA_BACKEND_IMPL_H
#define FOX_CUDA_BACKEND_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/per.h"

/*
 * The evaluation passes' row counts a backend keeps a graph for: a walk's
 * passes come in a few dozen sizes (segments times predicted bars); a size
 * past the table runs eagerly.
 */
#define FOX_CUDA_PASS_GRAPHS 256

/* The kinds of step, each captured into graphs of its own. */
enum { G_COLLECT = 0, G_FULL = 1, G_TRAIN = 2, G_KINDS = 3 };

typedef struct fox_cuda_backend {
    fox_backend_base base;
    fox_backend_env env;
    const fox_config *cfg;
    const fox_model_layout *lay;
    int N, B, S;
    size_t np;
    fox_cuda_net net;
    fox_cuda_fwd col; /* forward of the collection and of the evaluation's passes */
    float *xcol;      /* [col.cap × S] */
    fox_cuda_collect_cfg cc;
    fox_cuda_loss_hp hp;
    fox_cuda_optim_cfg oc;
    /* device state */
    fox_cuda_ctl *ctl;  /* device */
    fox_cuda_ctl *hctl; /* pinned host mirror, valid after sync_ctl */
    fox_cuda_fold *fold;
    fox_cuda_env *envs;
    int32_t *wbar;
    float *wport, *wr;
    uint32_t *wa;
    fox_cuda_trans *staged, *ring;
    int *counts;
    float *d_open, *d_high, *d_low, *d_close, *d_norm;
    int8_t *d_regime;
    float *isv_dev; /* the device's working copy */
    float *isv_map; /* device address of the mapped ISV */
    /* stability */
    fox_cuda_check checks[FOX_CUDA_MAX_CHECKS]; /* the fused-check table, host copy */
    int n_checks;
    fox_cuda_chunk *d_chunks; /* the check kernel's blocks over it, set once at construction */
    int n_chunks;
    fox_cuda_rule *d_rules; /* [FOX_SENTINEL_SLOTS] */
    double *site_part;
    fox_cuda_sp4 *sp4; /* SP4 state and scratch (adaptive mode) */
    int *flags_map;    /* device address of the mapped flags */
    /* host */
    float *isv_mem;                    /* mapped pinned, FOX_ISV_TOTAL_DIM */
    int *flags_mem;                    /* mapped pinned, FOX_SENTINEL_SLOTS */
    /*
     * The evaluation's forward pass between q_start and q_finish: its states
     * and Q in pinned memory, so that both copies run on the stream without
     * the host, pass_cap rows of each (grown to the largest pass); its rows
     * and q_start's status.
     */
    float *pass_s, *pass_q;
    int pass_cap, pass_B, pass_rv;
    /*
     * The passes captured: one graph a row count, taken on its second pass
     * (the first runs eagerly, as a step's does), replayed after; dropped
     * with the step's graphs and when the pinned room moves.
     */
    struct {
        int rows;
        cudaGraphExec_t exec; /* NULL: seen once */
    } pass_graph[FOX_CUDA_PASS_GRAPHS];
    int n_pass_graphs;
    cudaGraphExec_t graph[G_KINDS][2]; /* one step of the kind, unroll steps in a row */
    int unroll;
    int warm[G_KINDS]; /* the kind ran once eagerly (modules loaded) */
    int ready;         /* the ring holds learning_starts and a batch */
    uint64_t reset_gen;
    int dead; /* a CUDA error poisoned the context */
    size_t bytes_total, bytes_replay;
    int prioritized;  /* train.prioritized: the batch is drawn by per and weighted */
    fox_cuda_per per; /* its sum tree and counters (per.cu) */
} fox_cuda_backend;

/* table.c: the rules, the fused check's table, the flags and the configured fault. */
int fox__cuda_stab_init(fox_cuda_backend *be, char *err, size_t errlen);
/* Arm a fault of kind into slot's buffer at the fold's train step `step`. */
int fox__cuda_arm(fox_cuda_backend *be, int slot, int kind, int64_t step);
/* The chunks of table tab [n] into device memory *out (allocated), their number into *n_out. */
int fox__cuda_upload_chunks(const fox_cuda_check *tab, int n, fox_cuda_chunk **out, int *n_out);

/* step.c: n steps (collecting until the ring is ready, then full) and n train-only steps. */
/* A chunk's halves (backend.h's start_steps and finish_steps): enqueue n steps, then wait. */
int fox__cuda_start_steps(fox_cuda_backend *be, int n, int collect);
int fox__cuda_finish_steps(fox_cuda_backend *be, fox_step_stats *st);

#endif
