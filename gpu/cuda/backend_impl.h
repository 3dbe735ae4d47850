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

typedef struct fox_cuda_pop fox_cuda_pop;

/*
 * The evaluation passes captured: one graph a row count, taken on its
 * second pass (the first runs eagerly, as a step's does), replayed after;
 * dropped with the step's graphs and when a pinned room moves.
 */
typedef struct fox_cuda_pass_graphs {
    struct {
        int rows;
        cudaGraphExec_t exec; /* NULL: seen once */
    } g[FOX_CUDA_PASS_GRAPHS];
    int n;
} fox_cuda_pass_graphs;

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
    const float *pass_src; /* q_start's states, the caller's until q_finish */
    fox_cuda_pass_graphs passes;
    cudaGraphExec_t graph[G_KINDS][2]; /* one step of the kind, unroll steps in a row */
    int unroll;
    int warm[G_KINDS]; /* the kind ran once eagerly (modules loaded) */
    int ready;         /* the ring holds learning_starts and a batch */
    uint64_t reset_gen;
    int dead; /* a CUDA error poisoned the context */
    size_t bytes_total, bytes_replay;
    int prioritized;  /* train.prioritized: the batch is drawn by per and weighted */
    fox_cuda_per per; /* its sum tree and counters (per.cu) */
    fox_cuda_pop *pop; /* the population this backend is member `member` of, or NULL */
    int member;
} fox_cuda_backend;

/*
 * A population (pop.c): K members' backends at fixed distances, and what
 * step.c needs to run their chunks as one step. A span is a member's share
 * of the reserved range: the bytes its allocations used, the bytes of
 * physical memory mapped in pieces from its start.
 */
#define FOX_CUDA_SPAN_PIECES 256
typedef struct fox_cuda_span {
    size_t used, mapped;
    int n_pieces;
    struct {
        unsigned long long handle; /* CUmemGenericAllocationHandle */
        size_t size;
    } piece[FOX_CUDA_SPAN_PIECES];
} fox_cuda_span;

/* One of member 0's allocations: every other member's must match it. */
typedef struct fox_cuda_piece_log {
    size_t offset, bytes;
} fox_cuda_piece_log;

struct fox_cuda_pop {
    int K, device, refs;
    void **shared;              /* the engine's slot that holds it (cleared when it goes) */
    unsigned long long base;    /* CUdeviceptr: K × FOX_CUDA_MEMBER_SPAN reserved */
    size_t gran;                /* the physical pieces' granularity */
    fox_cuda_span span[FOX_MEMBERS_MAX];
    fox_cuda_piece_log *log;
    int n_log, cap_log;
    char *host, *host_dev;      /* K × FOX_CUDA_MEMBER_HOST_SPAN mapped pinned: ISV, then flags */
    fox_cuda_backend *be[FOX_MEMBERS_MAX];
    /*
     * A round of the members' chunks (step.c): which members started theirs, with what, and
     * whether the round ran (the first finish runs it) and how.
     */
    int started[FOX_MEMBERS_MAX];
    int n, collect, ran, rv;
    int64_t rounds_together, rounds_alone; /* how the rounds ran, for the tests */
    cudaGraphExec_t graph[G_KINDS][2]; /* as a backend's, every member in each launch */
    int warm[G_KINDS];
    /*
     * A round of the members' evaluation passes (backend.c): which members started theirs, and
     * whether the round ran; the passes of all members in one graph a row count.
     */
    int pass_started[FOX_MEMBERS_MAX];
    int pass_ran, pass_rv;
    fox_cuda_pass_graphs passes;
    int64_t passes_together, passes_alone;
    fox_cuda_ptr_pool ptrs; /* the two-level products' pointer arrays (cuda_impl.h) */
    /*
     * The passes' room (backend.c): mapped pinned, member k's pass_stride floats from
     * pass_room's start: pass_rows rows of states, then as many of Q; pass_room_dev the device's
     * address of it; pass_in_room: this round's Q lie there; pass_waited: its pass is done.
     */
    float *pass_room, *pass_room_dev;
    size_t pass_stride;
    int pass_rows, pass_in_room, pass_waited;
    cudaEvent_t ev_member[FOX_MEMBERS_MAX], ev_done;
};

/*
 * pop.c. Join the population in *shared as member `member` of `members` on device (member 0
 * makes it); leave (the last member out frees it). While a thread builds a member (between
 * build and built), fox__cuda_alloc gives the next piece of that member's span (pop_alloc);
 * built fails when the member's pieces differ from member 0's. Between build and
 * build(NULL, 0) at a member's destruction, fox__cuda_free leaves the span's pieces alone.
 */
int fox__cuda_pop_join(void **shared, int members, int member, int device, fox_cuda_pop **out);
void fox__cuda_pop_leave(fox_cuda_pop *pop);
void fox__cuda_pop_build(fox_cuda_pop *pop, int member);
int fox__cuda_pop_built(fox_cuda_pop *pop, int member);
int fox__cuda_pop_building(void);
int fox__cuda_pop_building_owns(const void *p);
int fox__cuda_pop_alloc(void *pp, size_t bytes);
/* Member's share of the mapped host room: as the host sees it, or (device_side) the device. */
float *fox__cuda_pop_host(fox_cuda_pop *pop, int member, int device_side);
void fox__cuda_pop_drop_graphs(fox_cuda_pop *pop);

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
