/*
 * train_types.h — what one training step's losses and gradients are computed
 * from and what they return: the batch, the loss's hyperparameters and the
 * loss parts. Both backends (gpu/cpu/, gpu/cuda/) and the CUDA backend's
 * debug library speak them, so they live here, beside the backends, and
 * neither backend includes the other.
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
    double q_abs;     /* mean |E[Z]| of the taken actions over batch and branches */
    double q_dir_abs; /* the same over the direction branch (d = 0) alone */
} fox_train_loss;

#endif
