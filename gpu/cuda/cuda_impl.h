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

#include "../env.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "../config.h"
#include "../error.h"
#include "../model.h"

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

/* ------------------------------------------------------------------------------------------ */
/* Device-side state that kernels read and write (never baked into a graph)                   */

/* Counters and the last step's statistics; one copy in device memory, mirrored to the host. */
typedef struct fox_cuda_ctl {
    int64_t step, train_steps, env_steps, adam_t;
    int ring_head, ring_size;
    float eps, loss, loss_c51, loss_iqn, loss_aux, grad_norm;
    int trained;      /* train steps since the host last cleared it */
    int pad;
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
    float *out;   /* [R × OW] packed head outputs (without their biases) */
    float *logp;  /* [R × NAct × NA] */
    float *q;     /* [R × NAct] expected Q */
} fox_cuda_fwd;

typedef struct fox_cuda_iqn {
    float *cosf;  /* [2 × B·NT × NC] online then target */
    float *phi;   /* [2 × B·NT × H2] */
    float *x;     /* [2 × B·NT × H2] h_s2 ⊙ φ */
    float *q;     /* [2 × B·NT × NAct] without bq */
} fox_cuda_iqn;

typedef struct fox_cuda_grn_grad {
    float *du, *dyx;    /* [B × out] GLU/skip input gradient; dy ⊙ x̂ for dγ */
    float *dzgv;        /* [2 × B × out] pre-gate and pre-lin gradients */
    float *deta1, *deta2;
} fox_cuda_grn_grad;

typedef struct fox_cuda_bwd {
    float *dout;        /* [B × OW] */
    float *dhid;        /* [B × HW] */
    float *dpk;         /* [PK] the packed heads' gradient, unpacked into grads */
    float *dh_s2;       /* [B × H2] */
    float *dh_s1;       /* [B × H1] */
    float *d_q;         /* [B·NT × NAct] */
    float *d_x;         /* [B·NT × H2], then d φ */
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

#define FOX_CUDA_EVENTS 64
#define FOX_CUDA_NORM_BLOCKS 256

/*
 * The network on the device: parameters and optimizer state in the layout
 * of model.h, streams and cuBLAS handles, and every activation buffer of a
 * train step. Stream 0 carries the critical path; stream 1 ("side") takes
 * work nothing on stream 0 waits for soon: the target net's forward and
 * every weight gradient.
 */
typedef struct fox_cuda_net {
    const fox_model_layout *lay;
    fox_cuda_dims dm;
    fox_cuda_heads heads;
    size_t np;
    int B;              /* train batch */
    int use_side;       /* 0: everything on stream 0 (debugging) */
    int tf32;           /* cuBLAS math mode: 0 FP32, 1 TF32 tensor ops */
    cudaStream_t st[2];
    cublasHandle_t cb[2];
    void *cb_work[2];
    cudaEvent_t ev[FOX_CUDA_EVENTS];
    int ev_next;
    float *params;      /* [2 × np]: online, then target (one offset np apart) */
    float *grads, *adam_m, *adam_v;   /* [np] */
    float *pk;          /* [2 × PK] packed heads, online then target */
    float *z;           /* [NA] atom support */
    float *ones;        /* [n_ones] for column sums */
    int n_ones;
    fox_cuda_fwd on;    /* online net on s and s′ (2B rows) */
    fox_cuda_fwd tg;    /* target net on s′ (B rows) */
    fox_cuda_iqn iq;
    fox_cuda_bwd bw;
    fox_cuda_batch bt;
    double *loss_parts; /* [B × 4] c51, iqn, aux_ret, aux_regime per sample */
    double *norm_part;  /* [FOX_CUDA_NORM_BLOCKS] */
} fox_cuda_net;

/* ------------------------------------------------------------------------------------------ */
/* cuBLAS products, row-major (matmul.c)                                                      */

int fox__cuda_lin_fwd(cublasHandle_t h, int rows, int in, int out, const float *X, int ldx,
                      const float *W, float *Y, int ldy, float beta);
int fox__cuda_lin_fwd_batched(cublasHandle_t h, int rows, int in, int out, const float *X, int ldx,
                              long long sx, const float *W, long long sw, float *Y, int ldy,
                              long long sy, int batch);
int fox__cuda_lin_dw(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                     const float *X, int ldx, float *dW, float beta);
int fox__cuda_lin_dw_batched(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                             long long sdy, const float *X, int ldx, long long sx, float *dW,
                             long long sdw, int batch);
int fox__cuda_lin_dx(cublasHandle_t h, int rows, int in, int out, const float *dY, int ldy,
                     const float *W, int ldw, float *dX, int ldx, float alpha, float beta);
int fox__cuda_lin_dx_batched(cublasHandle_t h, int rows, int in, int out, const float *dY,
                             int ldy, long long sdy, const float *W, long long sw, float *dX,
                             int ldx, long long sx, int batch);
int fox__cuda_colsum(cublasHandle_t h, int rows, int cols, const float *dY, int ldy,
                     const float *ones, float *db, float beta);
int fox__cuda_colsum_batched(cublasHandle_t h, int rows, int cols, const float *dY, int ldy,
                             long long sdy, const float *ones, float *db, long long sdb, int batch);

/* ------------------------------------------------------------------------------------------ */
/* Network orchestration (net.c)                                                              */

int fox__cuda_net_init(fox_cuda_net *n, const fox_model_layout *lay, int B, int fwd_rows);
void fox__cuda_net_fini(fox_cuda_net *n);
/* Activation buffers of a forward pass over up to R rows; free is safe on a zeroed struct. */
int fox__cuda_fwd_alloc(fox_cuda_fwd *f, const fox_model_layout *lay, const fox_cuda_dims *dm,
                        int R);
void fox__cuda_fwd_free(fox_cuda_fwd *f);
int fox__cuda_set_math(fox_cuda_net *n, int tf32);
/* Re-pack the heads of both nets after their parameters changed. */
int fox__cuda_pack(fox_cuda_net *n, int s);
/* Forward of net `which` (0 online, 1 target) on X [R × S] on stream s; aux heads if aux. */
int fox__cuda_forward(fox_cuda_net *n, int s, fox_cuda_fwd *f, int which, const float *X, int R,
                      int aux);
/* Losses and every gradient of the batch in n->bt (grads, loss_parts, prio), both streams joined. */
int fox__cuda_loss_grad(fox_cuda_net *n, const fox_cuda_loss_hp *hp);
/* Guard, norm, clip, Adam, statistics (and the ISV publication), target update, re-pack. */
int fox__cuda_optim(fox_cuda_net *n, const fox_cuda_optim_cfg *oc, fox_cuda_ctl *ctl,
                    float *isv_dev, float *isv_map);
/* Record on stream `from`, wait on stream `to`. */
int fox__cuda_dep(fox_cuda_net *n, int from, int to);

/* ------------------------------------------------------------------------------------------ */
/* Network kernels (net_kernels.cu)                                                           */

enum { FOX_ACT_NONE = 0, FOX_ACT_ELU = 1, FOX_ACT_RELU = 2 };

/* x[r, c] = act(x[r, c] + b[c]) for x [rows × cols] with row stride ld. */
int fox__cuda_bias_act(cudaStream_t s, float *x, const float *b, int rows, int cols, int ld,
                       int act);
/* d[r, c] *= act'(y[r, c]) given the activation's output y; both with row stride ld. */
int fox__cuda_act_bwd(cudaStream_t s, const float *y, float *d, int rows, int cols, int ld,
                      int act);
/* GRN tail: σ gate, GLU, skip, LayerNorm (see grn_tail_kernel). */
int fox__cuda_grn_tail(cudaStream_t s, int rows, int out, float *zgv, const float *r,
                       const float *bg, const float *bv, const float *g, const float *beta,
                       float *xhat, float *rstd, float *y);
/* LayerNorm and GLU backward; sg, lin at zgv [2 × R_fwd × out] (first rows used). */
int fox__cuda_ln_glu_bwd(cudaStream_t s, int rows, int out, const float *dy, const float *xhat,
                         const float *rstd, const float *g, const float *zgv,
                         long long fwd_stride, float *du, float *dyx, float *dzgv);
/* b2 is the net's packed output biases [7 × OS]. */
int fox__cuda_dueling(cudaStream_t s, int rows, const fox_cuda_dims *dm, const float *out,
                      const float *b2, const float *z, float *logp, float *q);
int fox__cuda_iqn_cos(cudaStream_t s, int rows, int NC, const float *tau, float *cosf);
int fox__cuda_iqn_phi(cudaStream_t s, int rows, int H2, int NT, float *phi, float *x,
                      const float *bphi_on, const float *bphi_tg, const float *h_on,
                      const float *h_tg);
int fox__cuda_iqn_bwd(cudaStream_t s, int B, int NT, int H2, float *d_x, const float *phi,
                      const float *h, float *dh_s2);
/*
 * Pack both nets' heads from params [2 × np] into pk [2 × PK]. With oc and
 * ctl (not NULL), first apply the step's hard target sync when it is due,
 * in the same launch (oc->polyak must be 0: a soft update goes through
 * fox__cuda_target first).
 */
int fox__cuda_head_pack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                        float *params, size_t np, float *pk, const fox_cuda_optim_cfg *oc,
                        const fox_cuda_ctl *ctl);
/* The packed heads' gradient dpk [PK] into grads. */
int fox__cuda_head_unpack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                          const float *dpk, float *grads);

/* Everything the loss kernel reads and writes. */
typedef struct fox_cuda_loss_args {
    int B;
    const float *z;
    const float *on_logp, *on_q, *on_out; /* online net, rows [0, B) s and [B, 2B) s′ */
    const float *tg_logp;                 /* [B × NAct × NA] */
    const float *iq_q;                    /* [2 × B·NT × NAct] */
    const float *bq_on, *bq_tg;
    const float *b2_on;                   /* the online net's packed output biases [7 × OS] */
    const float *tau;                     /* [B × NT] online fractions */
    const int32_t *a, *regime;
    const float *r, *done, *w, *aux_ret;
    float *dout, *d_q, *prio;
    double *parts;
    int32_t *a_star;
} fox_cuda_loss_args;

int fox__cuda_loss(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_loss_hp *hp,
                   const fox_cuda_loss_args *a);

/* ------------------------------------------------------------------------------------------ */
/* Training and collection kernels (train_kernels.cu)                                         */

int fox__cuda_grad_norm(cudaStream_t s, size_t n, float *g, double *partial);
int fox__cuda_adam(cudaStream_t s, size_t n, float *params, const float *g, float *m, float *v,
                   const double *partial, const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl);
/* Also publishes the device ISV to the mapped copy (isv_map), as the step's last ISV write. */
int fox__cuda_finish(cudaStream_t s, int B, const double *parts, const double *partial,
                     const fox_cuda_optim_cfg *oc, fox_cuda_ctl *ctl, float *isv_dev,
                     float *isv_map);
int fox__cuda_target(cudaStream_t s, size_t n, const float *params, float *target,
                     const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl);
int fox__cuda_aux_scale(cudaStream_t s, int B, const float *aux, float *isv_dev);
int fox__cuda_qabs(cudaStream_t s, int n, const float *q, float *isv_dev);
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
