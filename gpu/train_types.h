/*
 * train_types.h — what one training step's losses and gradients are computed
 * from and what they return: the batch, the loss's hyperparameters and the
 * loss parts; and what a chunk of steps reports to the engine: its stats and
 * the halt that stopped it. Both backends (gpu/cpu/, gpu/cuda/) and the CUDA
 * backend's debug library speak them, so they live here, beneath the engine
 * (gpu/engine.h hands the stats and the halt codes on to its callers) and
 * beside the backends: neither backend includes the other or the engine.
 *
 * The batch and the hyperparameters exist twice: in float for training and
 * in double (suffix _d) for the CPU net's finite-difference twin. Their
 * fields are written once, in a macro over the real type, so the two cannot
 * drift apart. Plain data: no functions, no ownership.
 */
#ifndef FOX_TRAIN_TYPES_H
#define FOX_TRAIN_TYPES_H

#include <stdint.h>

/* One training batch; every array in host memory, rows batch-major. */
#define FOX_TRAIN_BATCH_FIELDS(R)                                                                  \
    int B;                                                                                         \
    const R *s;                /* [B × S] states */                                               \
    const R *s_next;           /* [B × S] states n steps later */                                 \
    const int32_t *a;          /* [B × D] sub-action taken per branch */                          \
    const R *r;                /* [B] n-step discounted reward */                                  \
    const R *done;             /* [B] 1 when the window ended the episode (no bootstrap) */        \
    const R *w;                /* [B] importance weights (NULL = all 1) */                         \
    const R *aux_ret;          /* [B] next-bar log return label (unscaled) */                      \
    const int32_t *aux_regime; /* [B] regime class label */                                        \
    const R *tau;              /* [B × NT] IQN fractions for the online quantiles */              \
    const R *tau_next;         /* [B × NT] IQN fractions for the target quantiles */

/* The loss's hyperparameters. */
#define FOX_TRAIN_HPARAMS_FIELDS(R)                                                                \
    R gamma_n; /* γ^n */                                                                          \
    R iqn_lambda, aux_lambda;                                                                      \
    R aux_label_scale;   /* label divided by this (AUX_LABEL_SCALE_EMA) */                         \
    int target_mode;     /* FOX_TARGET_MEAN | FOX_TARGET_INDEP */                                  \
    int bdq_trunk_scale; /* 1: d h_s2 from value+branch heads × 1/(D+1) */

typedef struct fox_train_batch {
    FOX_TRAIN_BATCH_FIELDS(float)
} fox_train_batch;

typedef struct fox_train_batch_d {
    FOX_TRAIN_BATCH_FIELDS(double)
} fox_train_batch_d;

typedef struct fox_train_hparams {
    FOX_TRAIN_HPARAMS_FIELDS(float)
} fox_train_hparams;

typedef struct fox_train_hparams_d {
    FOX_TRAIN_HPARAMS_FIELDS(double)
} fox_train_hparams_d;

/* The loss parts of one batch; double in both real types. */
typedef struct fox_train_loss {
    double total, c51, iqn, aux_ret, aux_regime;
    double q_dir_abs; /* mean |E[Z]| of the direction branch's (d = 0) taken actions */
} fox_train_loss;

/* What a chunk of steps (run_steps, train_only) reports. */
typedef struct fox_step_stats {
    int64_t step;      /* train steps done in this fold */
    int64_t env_steps; /* environment transitions collected in this fold */
    float loss;        /* total loss of the last train step */
    float loss_c51, loss_iqn, loss_aux;
    float grad_norm; /* global norm before clipping */
    float epsilon;   /* exploration rate in use */
    double loss_sum; /* total loss summed over the chunk's train steps, in step order */
    int trained;     /* train steps in the chunk (0 while the replay ring fills) */
} fox_step_stats;

/* Why a fold stopped (fox_backend_base.halt_reason, fox_halt_info.reason). */
typedef enum {
    FOX_HALT_NONE = 0,         /* the fold runs */
    FOX_HALT_NAN = 1,          /* halt_nan: non-finite loss or gradient norm; strict: a slot 0–35 */
    FOX_HALT_GRAD_COLLAPSE = 2 /* halt_grad_collapse: the gradient norm vanished */
} fox_halt_reason;

#endif
