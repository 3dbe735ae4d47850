/*
 * cuda_impl.h — internals of the CUDA backend, shared by its host code (C,
 * gcc) and its kernels (.cu, nvcc): the error macros, the structs that
 * cross the host/device boundary, the network's device buffers and every
 * kernel launcher.
 *
 * Nothing outside gpu/cuda/ includes it; the parity test uses
 * cuda_backend.h. Every launcher computes its grid, launches on the stream
 * it is given and checks cudaGetLastError; none synchronizes, so that all of
 * them can be captured into a CUDA graph.
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
    /* stability (stab_kernels.cu) */
    int halt;         /* FOX_HALT_* of the first halting step; sticky until the fold resets */
    int collapse_run; /* train steps in a row with grad norm ≤ FOX_HALT_COLLAPSE_NORM */
    float clip_scale; /* Mech 6: this step's factor on the gradient */
    float support[2]; /* Mech 2: the C51 support [lo, hi] this step */
    int fault_slot;   /* debug.inject_fault: slot, -1 none */
    float fault_value;
    int fault_done;
    int64_t fault_step; /* train step of the fold it fires at */
    int64_t halt_step;  /* step at the halt: the rest of its chunk runs on, moving no weight */
    unsigned int done_blocks[3]; /* finished-block counters of the last-block reductions */
    float halt_loss; /* the halting step's loss, for its message (loss is the chunk's last) */
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
    uint64_t seed;
} fox_cuda_collect_cfg;

/* The train step's batch on the device. */
typedef struct fox_cuda_batch {
    float *s2;        /* [2B × S]: s then s′ (the online net runs on both at once) */
    int32_t *a;       /* [B × D] */
    float *r, *done, *w, *aux;   /* [B]; w NULL in training (uniform replay) */
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
     * W2 and out for each of the 1 + NAct slots of NA outputs (the value, then every action):
     * the output layer as one pointer-batched product (fox__cuda_gemm_slots).
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
} fox_cuda_optim_cfg;

/* ---- the stability system's types (kernels in stab_kernels.cu) ---- */

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
    int kind, measure, base, power, site, halt;
    float mult;
} fox_cuda_rule;

#define FOX_CUDA_MAX_CHECKS 96

/* The sentinel slot of each param group's weight / Adam m / Adam v clamp (-1: none). */
typedef struct fox_cuda_adam_slots {
    int w[FOX_GROUP_COUNT], m[FOX_GROUP_COUNT], v[FOX_GROUP_COUNT];
} fox_cuda_adam_slots;
enum { FOX_CUDA_DONE_CHECK = 0, FOX_CUDA_DONE_NORM = 1, FOX_CUDA_DONE_H_S2 = 2 };

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
 * backward's d hid head by head at each head's own output count (net.c). H200,
 * 2026-11-29: the batch-4096 train step 1,369 → 1,335 µs by slots, the batch-256 one 303 →
 * 307 (51-output products use the machine worse than 204-output ones); rows between were not
 * measured.
 */
#define FOX_CUDA_SLOT_ROWS 4096

/*
 * The batch below which each net's IQN head runs on its own stream beside the C51 heads
 * (net.c's loss_grad); from it both nets' in one product after the forwards. H200,
 * 2026-11-29, train step beside against after: batch 256 284 against 292 µs (adaptive bounds
 * 310 against 325), 1024 517–518 against 521–523, 2048 791–792 either way, 4096 1,344
 * against 1,324 (the machine is full there; two half-size products lose).
 */
#define FOX_CUDA_IQN_BESIDE_ROWS 4096

#define FOX_CUDA_EVENTS 64
#define FOX_CUDA_NORM_BLOCKS 256

/*
 * The streams of a step, each with a cuBLAS handle of its own. MAIN carries
 * the critical path; the others take work MAIN waits for only at a join:
 * SIDE, SIDE2 and SIDE3 in turn the target net's forward, below
 * iqn_beside_rows rows each net's IQN head (with adaptive mode's
 * TARGET_Q_BOUND after the target net's), and the weight gradients (on one
 * stream, their chain outlasted the backward on MAIN by ~60 µs at batch
 * 256: docs/performance.md, session 6), SIDE after Adam adaptive mode's
 * Pearl B first pass (until the step's end), COLLECT a full step's collection
 * (from the batch gather until the optimizer, whose update its forward must
 * not see half done; its products in TF32) and adaptive mode's deferred
 * Pearl B's second pass (from the loss kernel until the optimizer, whose
 * Adam reads its bounds), LATE what only the step's end or a later stage
 * reads: d h_s2's IQN and aux parts (beside its C51 part, until their
 * join), the L1 rate's deficit (beside the norm and Adam), the target
 * update and the re-pack of the heads and
 * weight pairs (beside the fused check on MAIN), NEXT the online net's
 * forward on s′ for the double-DQN argmax (from the batch gather until the
 * loss) and the sentinel-only d_states product (until the optimizer: it
 * reads GRN1's weights), its products in TF32. Every stream forked during
 * a step is joined back by its end (fox__cuda_join_all).
 */
enum { FOX_CUDA_MAIN = 0, FOX_CUDA_SIDE = 1, FOX_CUDA_COLLECT = 2, FOX_CUDA_LATE = 3,
       FOX_CUDA_NEXT = 4, FOX_CUDA_SIDE2 = 5, FOX_CUDA_SIDE3 = 6, FOX_CUDA_STREAMS = 7 };

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
    int use_side;       /* 0: everything on MAIN (debugging) */
    int tf32;           /* cuBLAS math mode: 0 FP32, 1 TF32 tensor ops */
    int greedy_tf32;    /* COLLECT's and NEXT's products in TF32 whatever tf32 says */
    cudaStream_t st[FOX_CUDA_STREAMS];
    cublasHandle_t cb[FOX_CUDA_STREAMS];
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
    float *z;           /* [NA] atom support */
    float atoms_p99;    /* p99 |z| of the configured atoms (SP4 Mech 2), fixed for the net's life */
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
    /* stability: buffers the CPU names as sentinel buffers, materialized for the fused check */
    float *proj;        /* [B × D × NA] projected C51 targets */
    float *tq;          /* [B × D × NT] IQN targets after Mech 1 */
    float *glu, *ln_in; /* [B × H2] GRN2's g = σ ⊙ lin and LayerNorm input r + g */
    float *d_states;    /* [B × S] (sentinel on only) */
    uint8_t *pgroup;    /* [np] param group of each element (255: padding) */
    fox_cuda_adam_slots aslots;
    fox_cuda_stab stab; /* set by the backend; stab.sites 0 in a parity pass */
    int fault_slot;     /* the configured fault's slot (-1: none): where inject launches go */
    float *fault_at;    /* its element when its point follows Adam (params, adam_m/v slices) */
    int want_d_states;  /* compute d_states (its slot is watched) */
} fox_cuda_net;

/* ------------------------------------------------------------------------------------------ */
/* cuBLAS products, row-major (matmul.c)                                                      */

/*
 * From this many rows a batched weight gradient is one cublasSgemm per entry (the net's
 * dw_loop_rows). At large batches cuBLAS's strided-batched heuristic runs the heads' seven
 * products and the GRNs' gate/value pairs on a small-tile kernel that walks every row in each
 * block, where the non-batched heuristic picks larger tiles and splits the rows; at small
 * batches the extra launches of one call an entry cost more than they save, so there the
 * batched call stays (docs/performance.md).
 */
#define FOX_CUDA_DW_LOOP_ROWS 1024

int fox__cuda_lin_dw(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                     const float *X, int ldx, float *dW, float beta);
/*
 * batch weight gradients dW_b [out × in] = dY_bᵀ·X_b, one call an entry from loop_rows rows;
 * outs (not NULL): entry b's own output count, its first outs[b] rows only, where the products
 * go one call an entry.
 */
int fox__cuda_lin_dw_batched(cublasHandle_t h, int loop_rows, int rows, int in, int out,
                             const int *outs, const float *dY, int ldy, long long sdy,
                             const float *X, int ldx, long long sx, float *dW, long long sdw,
                             int batch);
/*
 * count products C_i [rows × n] = A_i [rows × k]·B_iᵀ (B_i [n × k]), row-major, one pointer-batched
 * call; ptrs: the device array of the A, then B, then C pointers (count each).
 */
int fox__cuda_gemm_slots(cublasHandle_t h, int rows, int n, int k, float *const *ptrs, int count,
                         int lda, int ldb, int ldc);
int fox__cuda_colsum(cublasHandle_t h, int rows, int cols, const float *dY, int ldy,
                     const float *ones, float *db, float beta);
int fox__cuda_colsum_batched(cublasHandle_t h, int rows, int cols, const float *dY, int ldy,
                             long long sdy, const float *ones, float *db, long long sdb, int batch);

/* ------------------------------------------------------------------------------------------ */
/* The fused product (gemm.cu)                                                                */

enum { FOX_ACT_NONE = 0, FOX_ACT_ELU = 1, FOX_ACT_RELU = 2 };

/*
 * One product stage (gemm.cu): for z < nz, Y_z [M × N] = epi(α·A_z·op(B_z)
 * + β·Y_z), every matrix row-major with its row stride (ld*) and z stride
 * (s*). bt 1: B is [N × K] and op(B) = Bᵀ (a forward, y = x·Wᵀ); bt 0: B is
 * [K × N] (an input gradient, dx = dy·W). The epilogue, in order:
 * + bias[z ? 1 : 0][c], act[z ? 1 : 0], the backward mask of dact at dy
 * (ELU' = y + 1, ReLU' = 0 where y ≤ 0), + add[r, c]; and with mout,
 * mout = Y ⊙ mul[z ? 1 : 0][(r / mul_div)·ldmul + c] (IQN's h ⊙ φ); and
 * with fill, fill[r·ldc + c] = fill_bias[c] for the z = 0 entry: the next
 * stage's bias laid in its output, which that product then takes with
 * β = 1 instead of an epilogue launch of its own. NULL pointers and zero β
 * are off.
 */
typedef struct fox_cuda_gemm {
    int M, N, K, nz, bt;
    const float *A, *B;
    int lda, ldb;
    long long sa, sb;
    float alpha, beta;
    float *C;
    int ldc;
    long long sc;
    const float *bias[2];
    int act[2];
    const float *dy;
    int lddy, dact;
    long long sdy;
    const float *add;
    int ldadd;
    const float *mul[2];
    int ldmul, mul_div;
    float *mout;
    float *fill;
    const float *fill_bias;
    int by_ones; /* 1: the epilogue one output a thread even where four would do */
} fox_cuda_gemm;

int fox__cuda_gemm(cublasHandle_t h, cudaStream_t s, const fox_cuda_gemm *g);
/* The epilogue stage of g alone, over Y as it is (products made some other way). */
int fox__cuda_epilogue(cudaStream_t s, const fox_cuda_gemm *g);

/* ------------------------------------------------------------------------------------------ */
/* Network orchestration (net.c)                                                              */

int fox__cuda_net_init(fox_cuda_net *n, const fox_model_layout *lay, int B, int fwd_rows);
void fox__cuda_net_fini(fox_cuda_net *n);
/*
 * Activation buffers of a forward pass over up to R rows, once the net's own buffers (its packed
 * heads) exist; free is safe on a zeroed struct.
 */
int fox__cuda_fwd_alloc(fox_cuda_fwd *f, const fox_cuda_net *n, int R);
void fox__cuda_fwd_free(fox_cuda_fwd *f);
int fox__cuda_set_math(fox_cuda_net *n, int tf32);
/* Re-pack the heads of both nets after their parameters changed. */
int fox__cuda_pack(fox_cuda_net *n, int s);
/*
 * Forward on X [R × S] on stream s of the online net (target 0) or the
 * target net (target 1); the aux heads too if aux. site: the training pass,
 * with the stability points of the online net's rows [0, B) and the Mech 10
 * site.
 */
int fox__cuda_forward(fox_cuda_net *n, int s, fox_cuda_fwd *f, const float *X, int R, int target,
                      int aux, int site);
/*
 * Losses and every gradient of the batch in n->bt (grads, loss_parts, prio), every stream it
 * forks joined but COLLECT in adaptive mode: beside the backward, the last Adam step's Pearl B
 * (its second pass, gated), which fox__cuda_optim joins before Adam.
 */
int fox__cuda_loss_grad(fox_cuda_net *n, const fox_cuda_loss_hp *hp);
/*
 * Guard, norm, clip, Adam, the L1 rate's deficit, Pearl B's first pass (adaptive), the step's
 * statistics and the ISV publication.
 */
int fox__cuda_optim(fox_cuda_net *n, const fox_cuda_optim_cfg *oc, fox_cuda_ctl *ctl,
                    float *isv_dev, float *isv_map);
/* After fox__cuda_optim, on stream s: the target update that is due, the heads re-packed. */
int fox__cuda_repack(fox_cuda_net *n, int s, const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl);
/* Record on stream `from`, wait on stream `to`. */
int fox__cuda_dep(fox_cuda_net *n, int from, int to);
/* *s = stream `to` (FOX_CUDA_*), forked from MAIN at this point; MAIN itself without use_side. */
int fox__cuda_fork(fox_cuda_net *n, int to, int *s);
/* Join every stream forked and not joined back since into MAIN (a graph's capture must). */
int fox__cuda_join_all(fox_cuda_net *n);

/* ------------------------------------------------------------------------------------------ */
/* Network kernels (net_kernels.cu)                                                           */

/*
 * GRN tail: σ gate, GLU, skip, LayerNorm (see grn_tail_kernel); zgv holds
 * the biased pre-activations; with glu (and ln_in) not NULL, g and r + g
 * are kept there too; with site not NULL, the fault armed at slot 12 on
 * y[0], then with fixed bounds Mech 10 on y (h_s2) in the same launch, as
 * fox__cuda_h_s2_site, with adaptive bounds pass 1 of y's p99 (the site
 * follows: fox__cuda_h_s2_site, ranged).
 */
int fox__cuda_grn_tail(cudaStream_t s, int rows, int out, float *zgv, const float *r,
                       const float *bg, const float *bv, const float *g, const float *beta,
                       float *xhat, float *rstd, float *y, float *glu, float *ln_in,
                       const fox_cuda_stab *site);
/*
 * LayerNorm and GLU backward; sg, lin at zgv [2 × R_fwd × out] (first rows used); du and dzgv
 * rows 2·out apart (fox_cuda_grn_grad's dud and dzgv).
 */
int fox__cuda_ln_glu_bwd(cudaStream_t s, int rows, int out, const float *dy, const float *xhat,
                         const float *rstd, const float *g, const float *zgv,
                         long long fwd_stride, float *du, float *dyx, float *dzgv);
/*
 * b2 is the net's packed output biases [7 × OS]. chosen NULL: logp [rows × NAct × NA] and q
 * [rows × NAct] of every action; else logp [rows × D × NA] of the chosen [rows × D] only.
 */
int fox__cuda_dueling(cudaStream_t s, int rows, const fox_cuda_dims *dm, const float *out,
                      const float *b2, const float *z, const int32_t *chosen, float *logp,
                      float *q);
int fox__cuda_iqn_cos(cudaStream_t s, int rows, int NC, const float *tau, float *cosf);
/*
 * Pack both nets' heads from params [2 × np] into pk [2 × PK], and the
 * online net's segments sg into sg->dst. With oc and ctl (not NULL), first
 * apply the step's hard target sync when it is due, in the same launch
 * (oc->polyak must be 0: a soft update goes through fox__cuda_target first).
 */
int fox__cuda_head_pack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                        const fox_cuda_segments *sg, float *params, size_t np, float *pk,
                        const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl);
/* The packed heads' gradient dpk [PK] into grads. */
int fox__cuda_head_unpack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                          const float *dpk, float *grads);

/* Everything the loss kernel reads and writes. */
typedef struct fox_cuda_loss_args {
    int B;
    const float *z;
    const float *on_logp, *on_out;        /* online net on s: [B × D × NA] at a, [B × OW] */
    const float *nx_q;                    /* online net on s′ [B × NAct] (expected Q) */
    const float *tg_logp;                 /* [B × NAct × NA] */
    const float *iq_q;                    /* [2 × B·NT × NAct] */
    const float *bq_on, *bq_tg;
    const float *b2_on;                   /* the online net's packed output biases [7 × OS] */
    const float *tau;                     /* [B × NT] online fractions */
    const int32_t *a, *regime;
    const float *r, *done, *w, *aux_ret;
    float *dout, *d_q, *prio;
    double *parts;                        /* [B × FOX_CUDA_PARTS] */
    int32_t *a_star;
    float *proj;                          /* [B × D × NA] projected targets (slot 8) */
    float *tq;                            /* [B × D × NT] IQN targets after Mech 1 (slot 46) */
    fox_cuda_stab st;
    int tq_only;                          /* SP4: write the raw IQN targets to tq and stop */
} fox_cuda_loss_args;

/* Per-sample loss parts: c51, iqn, aux_ret, aux_regime, Σ_d |E_p[z]|, |E_p[z]| of branch 0. */
#define FOX_CUDA_PARTS 6

int fox__cuda_loss(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_loss_hp *hp,
                   const fox_cuda_loss_args *a);
/*
 * SP4 Mech 1 (site_target_q) before fox__cuda_loss in adaptive mode with sites: the raw IQN
 * targets into a->tq (the loss kernel's tq_only launch: needs a* from nx_q and the target
 * net's IQN), then TARGET_Q_BOUND from their p99.
 */
int fox__cuda_loss_targets(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_loss_hp *hp,
                           const fox_cuda_loss_args *a);

/* ------------------------------------------------------------------------------------------ */
/* Stability system (stab_kernels.cu): twins of gpu/cpu/stab.c                                */


/*
 * The fused check (SP2): one block per chunk of the table, each against its slots' rules
 * with the threshold computed from the device ISV; then the last block
 * decides the halts (halt_nan on any slot 0–35; with `trained`, halt_grad_
 * collapse on a non-finite loss or a vanished norm) into ctl->halt. With the
 * sentinel off only the halts run.
 */
int fox__cuda_check(cudaStream_t s, const fox_cuda_stab *st, const fox_cuda_chunk *chunks,
                    int n_chunks, int trained);
/*
 * The armed fault into p[0] (and p2[0] when not NULL) when ctl's train
 * step is the fault's (after_count: the step was already counted).
 */
int fox__cuda_inject(cudaStream_t s, const fox_cuda_stab *st, float *p, float *p2,
                     int after_count);
/*
 * Mech 10 on h [n] in place (the online net's h_s2 over the batch): slot 12
 * and slot 49 on the pre-clamp values, clamp_finite at 100 × max(H_S2_RMS_EMA,
 * 1) (fixed bounds) or at max(H_S2_BOUND, 1) (adaptive: the p99 of the
 * pre-clamp values first, whose pass 1 GRN2's tail already ran if ranged),
 * then H_S2_RMS_EMA from the clamped values (last block).
 */
int fox__cuda_h_s2_site(cudaStream_t s, const fox_cuda_stab *st, float *h, size_t n, int ranged);
/*
 * d h_s2 [B × H2] from its three parts, with the inline checks between them:
 * dh holds the C51 heads' part (slot 33); + dh_aux (34); + the IQN part,
 * Σ_i d_x·φ, written to dh_iqn (27) (35); the Phase C guard; and
 * dφ = d_x·h·[φ > 0] into d_phi [B·NT × H2].
 */
int fox__cuda_dh_s2_join(cudaStream_t s, const fox_cuda_stab *st, int B, int NT, int H2,
                         float *dh, const float *dh_aux, float *dh_iqn, const float *d_x,
                         const float *phi, const float *h, float *d_phi);
/*
 * Before the forward: AUX_LABEL_SCALE_EMA from the labels aux [B], and
 * Mech 2 on the configured support [v_min, v_max] (slot 47 on its span;
 * adaptive: ATOM_POS_BOUND observes atoms_p99, fox_cuda_net's), the bounded
 * support into ctl->support and z [NA].
 */
int fox__cuda_pre_step(cudaStream_t s, const fox_cuda_stab *st, int B, const float *aux, int NA,
                       float v_min, float v_max, float atoms_p99, float *z);
/*
 * SP4: p99 of |x [n]| by the three passes (max, shared-memory histogram,
 * percentile locate), observed into ISV slot `slot` through Pearls A+D when
 * positive (stab.c's observe); `use` picks the scratch.
 */
int fox__cuda_p99_observe(cudaStream_t s, const fox_cuda_stab *st, const float *x, size_t n,
                          int slot, int use);
/*
 * SP4, the L1 rate's gradient-only half (fox_entropy_deficit of GRN1 W2's
 * gradient g) into sp4->l1_deficit: one block, launched beside the norm and
 * Adam (which leave g as it is), before fox__cuda_post_adam reads it (in
 * the next step, or at the end of the run of steps).
 */
int fox__cuda_l1_deficit(cudaStream_t s, const fox_cuda_stab *st, const float *g);
/*
 * SP4 after Adam (fox_cpu_stab_post_adam): Pearl B per group (p99 |w|, |m|,
 * v, weight-decay rate) into slots 136–167 through Pearls A+D, Pearl C on
 * the step's Adam engagements, the trunk L1 rate into slot 168. `gated`:
 * only when sp4->pending says an Adam step ran since the last (which it
 * clears); else always.
 */
int fox__cuda_post_adam(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n,
                        const float *w, const float *g, const float *m, const float *v);
/*
 * Its two halves, for a step that runs them apart: pass 1 (the ranges of |w|, |m|, v and
 * the sums of w·g, ‖w‖², the L1 rate's: every read of g) right after Adam; pass 2 (the
 * histograms and the tail: w, m, v only) any time before the next Adam.
 */
int fox__cuda_post_adam_pass1(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n,
                              const float *w, const float *g, const float *m, const float *v);
int fox__cuda_post_adam_pass2(cudaStream_t s, const fox_cuda_stab *st, int gated, size_t n,
                              const float *w, const float *m, const float *v);
/* Host image of a fresh fox_cuda_sp4 (zero state, clean scratch) into *dst (device), on s. */
int fox__cuda_sp4_reset(cudaStream_t s, fox_cuda_sp4 *dst);

/* ------------------------------------------------------------------------------------------ */
/* Training and collection kernels (train_kernels.cu)                                         */

/*
 * Σ g² of the finite gradients and the sums of the loss parts, then (last
 * block) the step's losses into ctl, the Q signals and Mech 6 into
 * ctl->clip_scale. partial [(1 + FOX_CUDA_PARTS) × FOX_CUDA_NORM_BLOCKS],
 * the gradients' block partials first.
 */
int fox__cuda_grad_norm(cudaStream_t s, size_t n, const float *g, double *partial,
                        const fox_cuda_stab *st, int B, int D, const double *parts,
                        const fox_cuda_optim_cfg *oc);
int fox__cuda_adam(cudaStream_t s, size_t n, float *params, const float *g, float *m, float *v,
                   const uint8_t *pgroup, const fox_cuda_adam_slots *sl,
                   const fox_cuda_optim_cfg *oc, const fox_cuda_stab *st);
/* Also publishes the device ISV to the mapped copy (isv_map), as the step's last ISV write. */
int fox__cuda_finish(cudaStream_t s, fox_cuda_ctl *ctl, float *isv_dev, float *isv_map, int hold);
int fox__cuda_target(cudaStream_t s, size_t n, const float *params, float *target,
                     const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl);
int fox__cuda_publish(cudaStream_t s, const float *isv_dev, float *isv_host, int n);

int fox__cuda_env_reset(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_fold *fold,
                        fox_cuda_env *envs, uint64_t gen);
int fox__cuda_collect_state(cudaStream_t s, const fox_cuda_collect_cfg *c,
                            const fox_cuda_env *envs, float *X);
int fox__cuda_collect_act(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_fold *fold,
                          fox_cuda_env *envs, int32_t *wbar, float *wport, uint32_t *wa,
                          float *wr, const float *q, fox_cuda_ctl *ctl, fox_cuda_trans *staged,
                          int *counts);
int fox__cuda_collect_push(cudaStream_t s, const fox_cuda_collect_cfg *c,
                           const fox_cuda_trans *staged, const int *counts, fox_cuda_trans *ring,
                           fox_cuda_ctl *ctl);
int fox__cuda_gather(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_trans *ring,
                     const int8_t *regime, int NT, const fox_cuda_ctl *ctl,
                     const fox_cuda_batch *bt);

#ifdef __cplusplus
}
#endif

#endif
