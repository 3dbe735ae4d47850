/*
 * loss.h — the fused loss kernel's launchers (loss.cu): double-DQN argmax,
 * C51 projection and cross-entropy, dueling backward, IQN quantile Huber
 * and the aux losses, with SP4's Mech 1 targets.
 */
#ifndef FOX_CUDA_LOSS_H
#define FOX_CUDA_LOSS_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    double *q_ref_part;                   /* [B] Q_ABS_REF's per-sample shares (first launch) */
    int32_t *a_star;
    float *proj;                          /* [B × D × NA] projected targets (slot 8) */
    float *tq;                            /* [B × D × NT] IQN targets after Mech 1 (slot 46) */
    fox_cuda_stab st;
    int tq_only;                          /* first launch: raw IQN targets, Q_ABS_REF, stop */
} fox_cuda_loss_args;

int fox__cuda_loss(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_loss_hp *hp,
                   const fox_cuda_loss_args *a);
/*
 * Mech 1's producers (site_target_q) before fox__cuda_loss with sites: the raw IQN targets
 * into a->tq (the loss kernel's tq_only launch: needs a* from nx_q and the target net's IQN),
 * Q_ABS_REF from them in that launch's last block, then in adaptive mode TARGET_Q_BOUND from
 * their p99.
 */
int fox__cuda_loss_targets(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_loss_hp *hp,
                           const fox_cuda_loss_args *a);

#ifdef __cplusplus
}
#endif

#endif
