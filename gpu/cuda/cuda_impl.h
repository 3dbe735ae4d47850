/*
 * cuda_impl.h — the structures the CUDA backend shares between its host
 * code (C, gcc) and its kernels (.cu, nvcc): the error macros, the shapes,
 * the state that crosses the host/device boundary, the stability system's
 * tables and the network's device buffers (fox_cuda_net).
 *
 * Each kernel family declares its launchers in a header of its own beside
 * its .cu file (grn.h, dueling.h, iqn.h, loss.h, heads.h, adam.h,
 * collect.h, check.h, sp4.h, gemm.h), the cuBLAS products in matmul.h and
 * the network's orchestration in net.h. Every launcher computes its grid,
 * launches on the stream it is given and checks cudaGetLastError; none
 * synchronizes, so that all of them can be captured into a CUDA graph.
 * Nothing outside gpu/cuda/ includes these headers; the tests use debug.h.
 */
#ifndef FOX_CUDA_IMPL_H
#define FOX_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "gpu/env.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "gpu/bounds.h"
#include "gpu/config.h"
#include "common/error.h"
#include "gpu/model.h"

/* ------------------------------------------------------------------------------------------ */
/* Errors: log the call, the code and its string, remember the text, return FOX_ECUDA.        */

int fox__cuda_fail(const char *file, int line, const char *call, const char *what, int code);
/* Text of the last failure on this thread ("" if none). */
const char *fox__cuda_last_error(void);

#define FOX_CUDA_TRY(call)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return fox__cuda_fail(__FILE__, __LINE__, #call, cudaGetErrorString(e_), (int)e_);     \
    } while (0)

/*
 * Open cuBLAS (blas.c) if it is not yet: 1, or 0 with why. Every cuBLAS call
 * opens it too; the backend's available() asks once it has found a device,
 * so that a machine without the library takes the CPU backend with the
 * reason.
 */
int fox__cuda_blas_open(char *why, size_t len);

/* The architecture the kernels are built for (meson -Dgpu_arch), as 90 for sm_90. */
#ifndef FOX_CUDA_ARCH
#define FOX_CUDA_ARCH 90
#endif

/*
 * Every kernel is launched with programmatic dependent launch (device.cuh's
 * launch()) where the kernels can wait for their predecessor: from sm_90.
 */
#define FOX_CUDA_PDL (FOX_CUDA_ARCH >= 90)

#define FOX_CUBLAS_TRY(call)                                                                       \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return fox__cuda_fail(__FILE__, __LINE__, #call, cublasGetStatusString(s_), (int)s_);  \
    } while (0)

/* Propagate a FOX_* status. */
#define FOX_TRY(expr)                                                                              \
    do {                                                                                           \
        int rv_ = (expr);                                                                          \
        if (rv_ != 0)                                                                              \
            return rv_;                                                                            \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Populations: the members of one step at fixed distances                                    */

/*
 * A population's members (engine.members trained in one step, pop.c) hold
 * their buffers at fixed distances from each other: member k's copy of any
 * device buffer is member 0's plus k × FOX_CUDA_MEMBER_SPAN bytes (one
 * reserved virtual range, each member's physical memory mapped into its own
 * span), and its mapped host room (the ISV and the flags the host reads
 * while a step runs) member 0's plus k × FOX_CUDA_MEMBER_HOST_SPAN. So one
 * launch serves every member: block (x, y, z) works for member z on its
 * arguments shifted by z spans (device.cuh's fox_member), and one
 * strided-batched product serves all of them, striding by a span
 * (matmul.c). Pointers kept in device memory (the fused check's table, the
 * output slots' operands) are each member's own and are not shifted; the
 * output slots' lists hold the pointers of every member (net.c's
 * slots_init), so that one pointer-batched product covers them too.
 */
#define FOX_CUDA_MEMBER_SPAN      ((size_t)1 << 35)
/* The row blocks of a population's long weight-gradient sums (matmul.h's lin_dw_rows). */
#define FOX_CUDA_SPLIT_BLOCKS     8
#define FOX_CUDA_MEMBER_HOST_SPAN ((size_t)4096)

/*
 * Device arrays of operand pointers for a population's products of two
 * levels (a batch of entries in each member, matmul.c): a population's
 * pool of them, one table a call site's operands (its pointers, strides
 * and counts), written once, when the site first runs (the eager step
 * before any capture), and read by every later run of the site: a
 * member's buffers never move, so neither do its tables.
 */
#define FOX_CUDA_PTR_TABLES 512
typedef struct fox_cuda_ptr_table {
    const float *A, *B, *C;
    long long sa, sb, sc;
    int count, members, at; /* at: the table's first entry in the pool */
} fox_cuda_ptr_table;
typedef struct fox_cuda_ptr_pool {
    const float **base;
    int cap, used;
    fox_cuda_ptr_table table[FOX_CUDA_PTR_TABLES];
    int n_tables;
} fox_cuda_ptr_pool;

/*
 * The members that the launches and products of the calling thread cover:
 * 1, except while a population's step is enqueued (step.c), when every
 * kernel launches with K times its grid's z (always 1 otherwise) and every
 * product runs batched over the K members, its pointer arrays from pool
 * (ctx.c keeps both per thread; fox__cuda_launch_pool: that pool, or NULL).
 */
int fox__cuda_launch_members(void);
void fox__cuda_set_launch_members(int members, fox_cuda_ptr_pool *pool);
fox_cuda_ptr_pool *fox__cuda_launch_pool(void);

/*
 * Device memory of bytes (at least 4) into *(void **)pp: cudaMalloc's, or
 * while the thread builds a population's member (pop.c) the next piece of
 * that member's span (ctx.c). fox__cuda_free frees what fox__cuda_alloc
 * gave (NULL: nothing); a member's pieces go with its population.
 */
int fox__cuda_alloc(void *pp, size_t bytes);
void fox__cuda_free(void *p);

/* ------------------------------------------------------------------------------------------ */
/* Shapes                                                                                     */

/*
 * The seven two-layer heads — value, branches 0..3, aux next-bar, aux
 * regime, in this order — run as one packed network: head h owns hidden
 * slot h (HS units, its real ones first) and output slot h (OS outputs).
 * The packed copies are zero-padded, so the padding computes exact zeros.
 */
#define FOX_CUDA_HEADS 7
#define FOX_CUDA_C51_HEADS 5
#define FOX_CUDA_HEAD_RET 5
#define FOX_CUDA_HEAD_REG 6

typedef struct fox_cuda_dims {
    int S, H1, H2, HH, NA, NT, NC, HA, NR, D, NAct;
    int bsize[FOX_MAX_BRANCHES], boff[FOX_MAX_BRANCHES];
    int HS, OS;          /* head slot widths: the widest hidden layer, the widest output */
    int AUXW;            /* the aux heads' widest output */
    int HW, OW;          /* 7·HS, 7·OS */
    /* One net's packed heads, PK floats: W1 [HW × H2], b1 [HW], W2 [7 × OS × HS], b2 [7 × OS]. */
    size_t pk_w1, pk_b1, pk_w2, pk_b2, PK;
    float v_min, v_max;
} fox_cuda_dims;

/* Real widths and parameter offsets of the seven heads' tensors. */
typedef struct fox_cuda_heads {
    int hid[FOX_CUDA_HEADS], out[FOX_CUDA_HEADS];
    size_t w1[FOX_CUDA_HEADS], b1[FOX_CUDA_HEADS], w2[FOX_CUDA_HEADS], b2[FOX_CUDA_HEADS];
} fox_cuda_heads;

/*
 * Parameter tensors of the online net copied end to end into dst by the head-pack launch:
 * segment k is len[k] floats from params + src[k] (fox_cuda_net's weight pairs).
 */
#define FOX_CUDA_SEGMENTS 8
typedef struct fox_cuda_segments {
    float *dst;
    size_t src[FOX_CUDA_SEGMENTS], len[FOX_CUDA_SEGMENTS], total;
    int count;
} fox_cuda_segments;

/* ------------------------------------------------------------------------------------------ */
/* Device-side state that kernels read and write (never baked into a graph)                   */

/*
 * Counters, the last step's statistics and the stability system's step
 * state; one copy in device memory, mirrored to the host. The host writes
 * it only between chunks (put_ctl after sync_ctl).
 */
typedef struct fox_cuda_ctl {
    int64_t step, train_steps, env_steps, adam_t;
    int ring_head, ring_size;
    float eps, loss, loss_c51, loss_iqn, loss_aux, grad_norm;
    int trained;      /* train steps since the host last cleared it */
    /* stability (check.cu, sp4.cu) */
    int halt;         /* FOX_HALT_* of the first halting step; sticky until the fold resets */
    int collapse_run; /* train steps in a row with grad norm ≤ FOX_HALT_COLLAPSE_NORM */
    float clip_scale; /* Mech 6: this step's factor on the gradient */
    float td_unit;    /* the IQN's unit this step (fox_td_scale, set by pre_step; 1 at creation) */
    float support[FOX_MAX_BRANCHES][2]; /* Mech 2: each branch's C51 support [lo, hi] */
    int fault_slot;   /* debug.inject_fault: slot, -1 none */
    float fault_value;
    int fault_done;
    int64_t fault_step; /* train step of the fold it fires at */
    int64_t halt_step;  /* step at the halt: the rest of its chunk runs on, moving no weight */
    unsigned int done_blocks[4]; /* finished-block counters of the last-block reductions */
    /*
     * The member's random streams (train.seed's): the collection's and the prioritized draw's
     * keys, read here rather than from launch arguments, so that one launch serves members of
     * different seeds (a population's step).
     */
    uint64_t seed_collect, seed_per;
    /*
     * The member's step constants of the member keys (common/member_keys.h), which a
     * population's launch reads here (device.cuh's fox_member_steps): one member's launches
     * take them from their arguments, as they always have.
     */
    struct {
        float lr, gamma, gamma_n, eps_start, eps_end, train_cost_mult;
        int eps_decay_steps;
    } key;
    float halt_loss; /* the halting step's loss, for its message (loss is the chunk's last) */
    float halt_norm; /* and its gradient norm; both 0 when that step did not train */
    double loss_sum; /* the chunk's train steps' losses, summed in step order */
} fox_cuda_ctl;

typedef struct fox_cuda_fold {
    int train_begin, train_end;
} fox_cuda_fold;

/* One environment; its n-step window lives in separate arrays [N × n_step]. */
typedef struct fox_cuda_env {
    int bar, steps;
    fox_env_pos st;
    int wstart, wlen; /* circular window */
} fox_cuda_env;

/* A compact replay transition: 44 bytes (states are rebuilt from the feature matrix). */
typedef struct fox_cuda_trans {
    int32_t bar, bar_next;
    float port[3], port_next[3];
    float r, done;
    uint8_t a[4];
} fox_cuda_trans;

/* What the collection kernels need that stays fixed for a backend's life. */
typedef struct fox_cuda_collect_cfg {
    fox_env_params envp;
    fox_env_bars bars;      /* device pointers */
    const float *norm;      /* [n_bars × n_feat] device */
    int N, S, n_feat, n_step, episode_len, batch, learning_starts, D, NAct;
    int bsize[FOX_MAX_BRANCHES], boff[FOX_MAX_BRANCHES];
    int capacity;
    float gamma, eps_start, eps_end;
    int eps_decay_steps;
    int prioritized; /* the gather takes the batch's slots drawn by per.cu */
    float train_cost_mult; /* env.train_cost_mult: the costs the training reward charges */
} fox_cuda_collect_cfg;

/* The train step's batch on the device. */
typedef struct fox_cuda_batch {
    float *s2;        /* [2B × S]: s then s′ (the online net runs on both at once) */
    int32_t *a;       /* [B × D] */
    float *r, *done, *w, *aux;   /* [B]; w NULL in training with uniform replay */
    int32_t *regime;  /* [B] */
    float *tau;       /* [2 × B × NT]: online fractions then target fractions */
    int32_t *idx;     /* [B] ring slots */
    float *prio;      /* [B] Σ_d |δ_d| */
    int32_t *a_star;  /* [B × D] greedy next sub-actions */
} fox_cuda_batch;

/* Activations of one GRN over R rows (R the rows of the last forward). */
typedef struct fox_cuda_grn_act {
    float *eta2;        /* [R × out], then Wr·a [R × out] when the skip is not the identity */
    float *eta1;        /* [R × out] */
    float *zgv;         /* [2 × R × out]: pre-gate then pre-lin; σ gate and lin after the tail */
    float *xhat;        /* [R × out] */
    float *rstd;        /* [R] */
    float *y;           /* [R × out] */
} fox_cuda_grn_act;

/* One forward pass's activations, for up to cap rows. */
typedef struct fox_cuda_fwd {
    int cap, rows;
    fox_cuda_grn_act g1, g2;
    float *hid;   /* [R × HW] packed head hidden (post-ReLU) */
    float *out;   /* [R × OW] packed head outputs (without their biases; padding stays 0) */
    /*
     * Per net (online, target), device arrays of the C51 output slots' operand pointers, hid,
     * W2 and out for each of the S = 1 + NAct slots of NA outputs (the value, then every
     * action), each list for the net's members (fox_cuda_net.members) member after member:
     * [hid: members × S][W2: members × S][out: members × S], member j's entry this backend's
     * pointer plus j spans. The output layer is one pointer-batched product
     * (fox__cuda_gemm_slots) over the first S, or under a population's step over every
     * member's S from member 0's lists.
     */
    float **slots[2];
    float *logp; /* [R × NAct × NA]; the training forward on s: [R × D × NA], chosen actions */
    float *q;    /* [R × NAct] expected Q (not by the training forward on s) */
} fox_cuda_fwd;

typedef struct fox_cuda_iqn {
    float *cosf;  /* [2 × B·NT × NC] online then target */
    float *phi;   /* [2 × B·NT × H2] */
    float *x;     /* [2 × B·NT × H2] h_s2 ⊙ φ */
    float *q;     /* [2 × B·NT × NAct] without bq */
} fox_cuda_iqn;

typedef struct fox_cuda_grn_grad {
    float *dud;         /* [B × 2·out]: a row's du (GLU/skip input gradient), then its dη2 */
    float *dyx;         /* [B × out] dy ⊙ x̂ for dγ */
    float *dzgv;        /* [B × 2·out] pre-gate then pre-lin gradients of each row */
    float *deta1;       /* [B × out] */
} fox_cuda_grn_grad;

typedef struct fox_cuda_bwd {
    float *dout;        /* [B × OW] */
    float *dhid;        /* [B × HW] */
    float *dpk;         /* [PK] the packed heads' gradient, unpacked into grads */
    float *dh_s2;       /* [B × H2] */
    float *dh_s1;       /* [B × H1] */
    float *d_q;         /* [B·NT × NAct] */
    float *d_x;         /* [B·NT × H2] */
    float *d_phi;       /* [B·NT × H2] */
    float *dh_aux, *dh_iqn; /* [B × H2] the aux and IQN heads' parts of d h_s2 */
    fox_cuda_grn_grad g1, g2;
} fox_cuda_bwd;

/* Loss hyperparameters; aux_scale points at device memory (it changes every step). */
typedef struct fox_cuda_loss_hp {
    float gamma_n, iqn_lambda, aux_lambda;
    int target_mode, bdq_trunk_scale;
    const float *aux_scale;
} fox_cuda_loss_hp;

/* Optimizer constants (from the config; the step number is read on the device). */
typedef struct fox_cuda_optim_cfg {
    float lr, b1, b2, eps, clip, polyak;
    int target_sync;
    float iqn_lambda, aux_lambda;
    int pearl_wd, pearl_l1; /* train.pearl_wd / pearl_l1: Pearl B's consumers in Adam */
} fox_cuda_optim_cfg;

/* ---- the stability system's types (kernels in check.cu and sp4.cu) ---- */

/* One run of floats the fused check watches: rows × cols at row stride ld. */
typedef struct fox_cuda_check {
    const float *ptr;
    int slot, rows, cols, ld;
} fox_cuda_check;

/*
 * A block's share of the fused check, self-contained so that its first
 * load is its data's address: floats [start, start + len) of a table
 * buffer of rows × cols at stride ld from ptr. Two slots may watch the
 * same floats, so that a buffer is read once: `nonfinite` (-1: none) and
 * `thresh`, a threshold slot (-1: none; `span`: its measure is the span of
 * the whole buffer, which is then one chunk). params carries slot 14 and,
 * in each group run, its weight bound (44, 45, 48).
 */
typedef struct fox_cuda_chunk {
    const float *ptr;
    int start, len, cols, ld;
    short nonfinite, thresh;
    int span;
} fox_cuda_chunk;

#define FOX_CUDA_CHUNK 4096

/* The rule of every slot (sentinel.h), copied once to the device. */
typedef struct fox_cuda_rule {
    int kind, measure, base, power, site;
    int halt; /* a halting slot under engine.halt_rule = strict; 0 for every slot under seeds */
    float mult;
} fox_cuda_rule;

#define FOX_CUDA_MAX_CHECKS 96

/* The sentinel slot of each param group's weight / Adam m / Adam v clamp (-1: none). */
typedef struct fox_cuda_adam_slots {
    int w[FOX_GROUP_COUNT], m[FOX_GROUP_COUNT], v[FOX_GROUP_COUNT];
} fox_cuda_adam_slots;
enum { FOX_CUDA_DONE_CHECK = 0, FOX_CUDA_DONE_NORM = 1, FOX_CUDA_DONE_H_S2 = 2,
       FOX_CUDA_DONE_Q_REF = 3 };

/*
 * SP4 (adaptive bounds) on the device. The p99 producer's scratch: one per
 * use (h_s2, target Q, Pearl B), so that no two sites share one. Up to 24
 * targets (3 buffers × 8 classes): pass 1 min / max of the finite |x| (bit
 * patterns of non-negative floats order as unsigned ints) and counts, pass
 * 2 the 256-bin histograms, pass 3 (pass 2's last block) reads them and
 * leaves the scratch clean.
 */
#define FOX_CUDA_P99_TARGETS 24
#define FOX_CUDA_P99_BLOCKS 256
typedef struct fox_cuda_p99_scratch {
    unsigned int lo[FOX_CUDA_P99_TARGETS], hi[FOX_CUDA_P99_TARGETS];
    unsigned long long count[FOX_CUDA_P99_TARGETS];
    unsigned int hist[FOX_CUDA_P99_TARGETS * 256];
    double dot[FOX_CUDA_P99_BLOCKS][FOX_GROUP_COUNT], sq[FOX_CUDA_P99_BLOCKS][FOX_GROUP_COUNT];
    double l1[FOX_CUDA_P99_BLOCKS][3]; /* the L1 rate's Σ|w|, Σ|g| and finite pairs */
    unsigned int done; /* pass 2's finished blocks: the last does pass 3 */
} fox_cuda_p99_scratch;
enum { FOX_CUDA_P99_H_S2 = 0, FOX_CUDA_P99_TQ = 1, FOX_CUDA_P99_GROUPS = 2, FOX_CUDA_P99_USES = 3 };

/* The SP4 state in device memory: Pearl D (Wiener) per ISV slot, Pearl C, Adam's engagements. */
typedef struct fox_cuda_sp4 {
    fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_pearl_c_state pc[3][FOX_GROUP_COUNT];          /* families w, m, v */
    unsigned long long eng[3][FOX_GROUP_COUNT];         /* this step's engaged values */
    unsigned int emax[3][FOX_GROUP_COUNT];              /* their largest finite |x| (bits) */
    float l1_deficit; /* this step's entropy deficit of the trunk input gradient */
    unsigned int pending; /* an Adam step ran that Pearl B has not yet observed */
    fox_cuda_p99_scratch p99[FOX_CUDA_P99_USES];
} fox_cuda_sp4;

/* What every stability kernel needs, fixed for a backend's life (passed by value). */
typedef struct fox_cuda_stab {
    int sentinel;               /* engine.sentinel: checks on */
    int *flags;                 /* device address of the mapped sentinel flags */
    const fox_cuda_rule *rules; /* [FOX_SENTINEL_SLOTS] device */
    float *isv;                 /* the device ISV copy */
    fox_cuda_ctl *ctl;
    float grad_clip;            /* train.grad_clip: the absolute ceiling of Mech 6 (0: none) */
    double *site_part;          /* scratch of the h_s2 site: a double a block */
    int ctl_fault_inline;       /* a fault is configured at an in-kernel point (27, 34, 35) */
    int sites;                  /* 1: the clamp sites and inline checks run (0: a parity pass) */
    int adaptive;               /* engine.bounds_mode = adaptive (SP4) */
    int moving_grid;            /* model.atom_grid = moving */
    fox_cuda_sp4 *sp4;          /* device SP4 state (adaptive only) */
    const uint8_t *pgroup;      /* [np] param group of each element (Pearl B) */
    unsigned int gsize[FOX_GROUP_COUNT]; /* elements of each group (Pearl C's total) */
    size_t l1_off;              /* GRN1 W2 (the trunk's input layer) for the L1 rate */
    int l1_rows, l1_cols;       /* l1_cols ≤ FOX_CUDA_L1_COLS */
} fox_cuda_stab;

#define FOX_CUDA_SITE_BLOCKS 1024
#define FOX_CUDA_TAIL_ROWS   8 /* rows a block of the GRN tail (a warp each) */
/* The widest GRN1 input (model.state_dim's bound): the L1 rate's column norms in shared memory. */
#define FOX_CUDA_L1_COLS 1024

/*
 * The rows from which a forward's output layer goes by slots (fox_cuda_fwd.slots), and the
 * backward's d hid head by head at each head's own output count (net.c). By slots the large
 * batches skip the padding of every head to the widest head's outputs; at small batches the
 * narrower products use the device worse than the padded one saves, so there the padded
 * product stays (docs/performance.md).
 */
#define FOX_CUDA_SLOT_ROWS 4096

/*
 * The batch below which each net's IQN head runs on its own stream beside the C51 heads
 * (net.c's loss_grad); from it both nets' in one product after the forwards. Beside them the
 * heads shorten the critical path while the device has room; from this batch the device is
 * full and two half-size products lose to one (docs/performance.md).
 */
#define FOX_CUDA_IQN_BESIDE_ROWS 4096

#define FOX_CUDA_EVENTS 64
#define FOX_CUDA_NORM_BLOCKS 256

/* Per-sample loss parts: c51, iqn, aux_ret, aux_regime, |E_p[z]| of branch 0. */
#define FOX_CUDA_PARTS 5


/*
 * The streams of a step, each with a cuBLAS handle of its own. MAIN carries
 * the critical path; the others take work MAIN waits for only at a join:
 * SIDE, SIDE2 and SIDE3 in turn the target net's forward, below
 * iqn_beside_rows rows each net's IQN head (with adaptive mode's
 * TARGET_Q_BOUND after the target net's), and the weight gradients (on one
 * stream their chain outlasted the backward on MAIN, so three take them in
 * turn), SIDE after Adam adaptive mode's
 * Pearl B first pass (until the step's end), COLLECT a full step's collection
 * (from the batch gather until the optimizer, whose update its forward must
 * not see half done; its products in TF32 under greedy_tf32) and adaptive mode's deferred
 * Pearl B's second pass (from the loss kernel until the optimizer, whose
 * Adam reads its bounds), LATE what only the step's end or a later stage
 * reads: d h_s2's IQN and aux parts (beside its C51 part, until their
 * join), the L1 rate's deficit (beside the norm and Adam), the target
 * update and the re-pack of the heads and
 * weight pairs (beside the fused check on MAIN), NEXT the online net's
 * forward on s′ for the double-DQN argmax (from the batch gather until the
 * loss) and the sentinel-only d_states product (until the optimizer: it
 * reads GRN1's weights), its products in TF32 under greedy_tf32. Every stream forked during
 * a step is joined back by its end (fox__cuda_join_all).
 */
enum { FOX_CUDA_MAIN = 0, FOX_CUDA_SIDE = 1, FOX_CUDA_COLLECT = 2, FOX_CUDA_LATE = 3,
       FOX_CUDA_NEXT = 4, FOX_CUDA_SIDE2 = 5, FOX_CUDA_SIDE3 = 6, FOX_CUDA_STREAMS = 7 };

/*
 * A stream's cuBLAS handle and the math of its products (matmul.c): FOX_CUDA_MATH_FP32 or
 * _TF32, the FP32 calls in the handle's math mode (net.c sets it); _BF16, the calls with FP32
 * matrices and the CUBLAS_COMPUTE_32F_FAST_16BF compute type, which no math mode selects.
 */
typedef struct fox_cuda_blas {
    cublasHandle_t h;
    int math;
    cudaStream_t s; /* the handle's stream */
} fox_cuda_blas;

/*
 * The network on the device: parameters and optimizer state in the layout
 * of model.h, streams and cuBLAS handles, and every activation buffer of a
 * train step.
 */
typedef struct fox_cuda_net {
    const fox_model_layout *lay;
    fox_cuda_dims dm;
    fox_cuda_heads heads;
    size_t np;
    int B;              /* train batch */
    int members;        /* the population's member count (1: none): the output slots' lanes */
    int use_side;       /* 0: everything on MAIN (debugging) */
    int math;           /* the products' math: FOX_CUDA_MATH_FP32, _TF32 or _BF16 */
    int greedy_tf32;    /* COLLECT's and NEXT's products in TF32 where math is FP32 */
    cudaStream_t st[FOX_CUDA_STREAMS];
    fox_cuda_blas cb[FOX_CUDA_STREAMS];
    void *cb_work[FOX_CUDA_STREAMS];
    cudaEvent_t ev[FOX_CUDA_EVENTS];
    int ev_next;
    int forked[FOX_CUDA_STREAMS]; /* forked from MAIN and not joined back since */
    /*
     * Where more than one path computes the same thing, which one: the defaults below, changed
     * only by the debug library so that the parity test covers every path at its batch.
     */
    int slot_rows;      /* from this many rows the heads' output layer and d hid go by slots */
    int iqn_beside_rows; /* below this batch each net's IQN head runs beside its C51 heads */
    int dw_loop_rows;   /* from this many rows a batched weight gradient is a call an entry */
    int epilogue_fours; /* 0: every epilogue one output a thread, even where four would do */
    int side_next;      /* the one side() forks next */
    float *params;      /* [2 × np]: online, then target (one offset np apart) */
    float *grads, *adam_m, *adam_v;   /* [np] */
    float *pk;          /* [2 × PK] packed heads, online then target */
    /*
     * Per GRN (0, 1) of the online net, weight pairs side by side so that a two-term input
     * gradient is one product over K = 2·out: [Wg; Wv] [2·out × out] and, with a skip,
     * [Wr; W2] [2·out × in] (else NULL); all in pairs.dst, refreshed with the packed heads.
     */
    fox_cuda_segments pairs;
    float *wgv[2], *wr2[2];
    float *z;           /* [D × NA] branch d's atoms at d·NA (atoms.cu) */
    float *ones;        /* [n_ones] for column sums */
    int n_ones;
    fox_cuda_fwd on;    /* online net on s (B rows) */
    fox_cuda_fwd nx;    /* online net on s′ (B rows, C51 heads): the double-DQN argmax only */
    fox_cuda_fwd tg;    /* target net on s′ (B rows) */
    fox_cuda_iqn iq;
    fox_cuda_bwd bw;
    fox_cuda_batch bt;
    double *loss_parts; /* [B × FOX_CUDA_PARTS] */
    double *norm_part;  /* [(1 + FOX_CUDA_PARTS) × FOX_CUDA_NORM_BLOCKS] */
    double *q_ref_part; /* [B] each sample's share of Q_ABS_REF's observation (loss.cu) */
    /* stability: buffers the CPU names as sentinel buffers, materialized for the fused check */
    float *proj;        /* [B × D × NA] projected C51 targets */
    float *tq;          /* [B × D × NT] IQN targets after Mech 1 */
    float *glu, *ln_in; /* [B × H2] GRN2's g = σ ⊙ lin and LayerNorm input r + g */
    float *d_states;    /* [B × S] (sentinel on only) */
    /*
     * A population's member only: each of the IQN head's two weight gradients over B·NT rows
     * summed in FOX_CUDA_SPLIT_BLOCKS row blocks (matmul.c's fox__cuda_lin_dw_rows), its own
     * partial sums' room (they may run on two streams at once).
     */
    float *split_part[2];
    uint8_t *pgroup;    /* [np] param group of each element (255: padding) */
    fox_cuda_adam_slots aslots;
    fox_cuda_stab stab; /* set by the backend; stab.sites 0 in a parity pass */
    int fault_slot;     /* the configured fault's slot (-1: none): where inject launches go */
    float *fault_at;    /* its element when its point follows Adam (params, adam_m/v slices) */
    int want_d_states;  /* compute d_states (its slot is watched) */
} fox_cuda_net;

#ifdef __cplusplus
}
#endif

#endif
