/*
 * debug.h — debug entry points of the CUDA backend, for the parity test, the
 * drills and the GPU benchmarks only: they live in libfoxgpu_debug, which
 * foxd does not link (the engine reaches the backend through
 * fox_cuda_backend_ops alone).
 *
 * Each function takes a backend created by fox_cuda_backend_ops.create and
 * runs on the caller's thread, synchronously. They overwrite the backend's
 * training state (parameters, Adam moments, counters): call them on a
 * backend made for the purpose, not on one in the middle of a fold.
 * Errors: FOX_ECUDA (the CUDA call, code and string are logged and kept in
 * the backend's err), FOX_EINVAL for a batch larger than the backend's.
 */
#ifndef FOX_CUDA_DEBUG_H
#define FOX_CUDA_DEBUG_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/train_types.h"

/*
 * The device twin of fox_cpu_net_loss_grad (gpu/cpu/net.h): load params and target
 * (n_params floats each), run the forward, losses and backward of the host
 * batch b (b->B ≤ the backend's batch; every array host memory, weights
 * honoured) and copy back the losses, grads (n_params) and, if not NULL,
 * the per-sample priorities [B] and greedy next sub-actions a_star [B × D].
 */
int fox_cuda_debug_loss_grad(fox_backend *be, const float *params, const float *target,
                             const fox_train_batch *b, const fox_train_hparams *hp,
                             fox_train_loss *loss, float *grads, float *priority, int32_t *a_star);

/*
 * One training loss_grad as fox_cuda_debug_loss_grad's, with adaptive bounds
 * and every stability site (the Wiener state reset first): isv in, the
 * device's ISV after it out (Q_ABS_REF and SP4's TARGET_Q_BOUND from the raw
 * IQN targets).
 */
int fox_cuda_debug_target_q_bound(fox_backend *be, const float *params, const float *target,
                                  const fox_train_batch *b, const fox_train_hparams *hp,
                                  float *isv);

/*
 * One optimizer step on the device from host arrays: isfinite guard, global
 * norm, clip (the backend's grad_clip), Adam at step t with the backend's
 * lr/β/ε, bounds mode and Pearl B consumers. params, m and v (n_params) are
 * updated in place; grads is not modified; *norm (may be NULL) gets the
 * norm before clipping. isv (host, FOX_ISV_TOTAL_DIM; NULL: the device's as
 * it is) is staged to the device first: the bounds and rates Adam reads.
 */
int fox_cuda_debug_adam(fox_backend *be, float *params, const float *grads, float *m, float *v,
                        int64_t t, const float *isv, double *norm);

/*
 * The fused check kernel on one buffer: the first cols of each of rows rows of x [rows × ld]
 * (host) against slot's rule with the thresholds of isv [FOX_ISV_TOTAL_DIM] (host); *fired 0
 * or 1. Overwrites the backend's device ISV and clears its flags.
 */
int fox_cuda_debug_check(fox_backend *be, int slot, const float *x, int rows, int cols, int ld,
                         const float *isv, int *fired);

/*
 * The Mech 10 site kernel on h [n] (host, clamped in place) with isv
 * [FOX_ISV_TOTAL_DIM] (host, H2_RMS_EMA updated in place); flags
 * [FOX_SENTINEL_SLOTS] gets what it set (12, 49). Overwrites the backend's
 * device ISV and clears its flags. tail_out > 0: the site inside the GRN
 * tail instead (fixed bounds' path), on rows of tail_out (at most the
 * backend's batch): h the LayerNorm inputs (the gate's product and biases
 * 0, so the GLU adds nothing), γ = gamma, β = 0; h gets y. adaptive:
 * adaptive bounds' site, H_S2_BOUND first observed from the pre-clamp
 * values' p99 by a fresh SP4 state (Pearl A: the observation itself).
 */
int fox_cuda_debug_h_s2_site(fox_backend *be, float *h, size_t n, int tail_out, float gamma,
                             int adaptive, float *isv, int *flags);

/*
 * The atom grid's kernel (atoms.cu) on rewards r [B] and done [B] (B ≤ the
 * backend's batch; B = 0: the atoms of the grid in isv only) with discount
 * gamma_n: isv [FOX_ISV_TOTAL_DIM] (host) in, its moved grid and (adaptive)
 * ATOM_POS_BOUND out; z [D × NA] gets every branch's atoms, flags
 * [FOX_SENTINEL_SLOTS] what it set (47). adaptive: a fresh SP4 state first.
 * Overwrites the backend's device ISV and atoms and clears its flags.
 */
int fox_cuda_debug_atoms(fox_backend *be, const float *r, const float *done, int B, float gamma_n,
                         int adaptive, float *isv, float *z, int *flags);

/*
 * The SP4 producers on the device from host buffers, one round: the p99 of
 * |h [nh]| into H_S2_BOUND and of |tq [ntq]| into TARGET_Q_BOUND (Pearls
 * A+D, skipped when 0), then Pearl B on params / grads / m / v (n_params
 * each) with Pearl C (no engagements) and the L1 rate, isv (host,
 * FOX_ISV_TOTAL_DIM) updated in place. reset: the Wiener and Pearl C
 * states start from zero (fold boundary) first. Overwrites the backend's
 * parameters, optimizer state and device ISV.
 */
int fox_cuda_debug_sp4(fox_backend *be, int reset, const float *params, const float *grads,
                       const float *m, const float *v, const float *h, size_t nh, const float *tq,
                       size_t ntq, float *isv);

/*
 * Math of the cuBLAS products: math FOX_CUDA_MATH_FP32 (the default), _TF32
 * or _BF16 (else FOX_EINVAL) for every product; greedy_tf32 1 (the default)
 * puts the forwards whose Q values only pick greedy actions (collection,
 * double DQN's a*) in TF32 where math is FP32, 0 leaves them in it.
 */
int fox_cuda_debug_set_math(fox_backend *be, int math, int greedy_tf32);

/*
 * The unit of the IQN's values in the loss passes that follow (the CPU net's
 * set_td_scale): what a train step's pre_step sets from Q_ABS_REF with the
 * moving atom grid, 1 until then. FOX_EINVAL unless finite and > 0.
 */
int fox_cuda_debug_set_td_unit(fox_backend *be, float unit);

/*
 * The paths a stage takes where more than one computes the same thing: from slot_rows rows
 * the heads' output layer goes by slots and their d hid head by head (net.c); from
 * dw_loop_rows rows a batched weight gradient is one product an entry (matmul.c); with
 * epilogue_fours 0 the epilogue takes one output a thread even where four would do (gemm.cu);
 * below iqn_beside_rows rows each net's IQN head runs beside its C51 heads, from it both
 * nets' in one product after the forwards (net.c). The settings before go to *was.
 */
typedef struct fox_cuda_paths {
    int slot_rows, dw_loop_rows, epilogue_fours, iqn_beside_rows;
} fox_cuda_paths;
int fox_cuda_debug_set_paths(fox_backend *be, const fox_cuda_paths *want, fox_cuda_paths *was);

/*
 * Steps of a kind in a row in one graph launch from now on (1: one a launch; the default is
 * 4 below 4,096 rows, else 1); the graphs are captured again. FOX_EINVAL below 1.
 */
int fox_cuda_debug_set_unroll(fox_backend *be, int steps);

/*
 * The step's norm kernel with its ISV producers on, in adaptive (SP4) or
 * fixed mode as `adaptive` says, on grads (n_params, host) and a zero loss
 * whose direction branch's mean |E[Z]| is q_dir_abs: Q_DIR_ABS_REF
 * (fox_cpu_stab_q_dir_signal), then Mech 6 (fox_cpu_stab_grad_clip):
 * GRAD_NORM_EMA, GRAD_NORM_SLOW_EMA, GRAD_CLIP_BOUND and GRAD_CLIP, updated
 * in isv (host, FOX_ISV_TOTAL_DIM, staged to the device first);
 * *clip_scale gets the step's factor. reset: the Wiener states start from
 * zero first (fold boundary). Overwrites the backend's gradients, loss
 * parts and device ISV.
 */
int fox_cuda_debug_grad_clip(fox_backend *be, int reset, int adaptive, const float *grads,
                             float q_dir_abs, float *isv, float *clip_scale);

/*
 * The device's halt_grad_collapse decision on host gradients: the counters' halt and run
 * cleared, then `steps` times the step's norm kernel on grads (n_params, host) with a zero
 * loss and the check kernel's halts, as a train step runs them (no stability site, no check
 * chunk; the flags cleared first). *halt gets the device's FOX_HALT_* after them. Overwrites
 * the backend's gradients, loss parts and halt state.
 */
int fox_cuda_debug_collapse(fox_backend *be, const float *grads, int steps, int *halt);

/*
 * Prioritized replay's device state, of a backend created with train.prioritized = 1 (else
 * FOX_EINVAL): load 1 writes the sum tree [2 × leaves] (leaves the power of two ≥ the ring's
 * capacity), the max priority, the ring's size and pushes since it was emptied (its head
 * follows) and the pushes when the batch was drawn; load 0 reads them (any may be NULL).
 */
int fox_cuda_debug_per_io(fox_backend *be, int load, double *tree, float *max_priority,
                          int *size, uint64_t *pushes, uint64_t *sampled_at);
/*
 * The device's prioritized draw of train step t from the loaded tree: the batch's slots idx
 * [B] and importance weights w [B] (B the backend's batch), and the uniforms u [B] it drew.
 */
int fox_cuda_debug_per_sample(fox_backend *be, int64_t t, int32_t *idx, float *w, float *u);
/* count (1 to the capacity) pushes at the ring's head into the tree (fox_replay_push's leaves). */
int fox_cuda_debug_per_push(fox_backend *be, int count);
/* The update of the tree with priorities prio [B] of slots idx [B] (fox_replay_update). */
int fox_cuda_debug_per_update(fox_backend *be, const int32_t *idx, const float *prio);

/* Device memory the backend holds: in all, and in its replay ring. */
void fox_cuda_debug_memory(const fox_backend *be, size_t *total, size_t *replay);

/*
 * The rounds of be's population (be one of its members): its chunks that ran as one step of
 * all the members, and those whose members stepped one after another; its evaluation passes
 * likewise. All 0 where be is no population's member.
 */
typedef struct fox_cuda_pop_rounds {
    int64_t steps_together, steps_alone, passes_together, passes_alone;
} fox_cuda_pop_rounds;
void fox_cuda_debug_pop_rounds(const fox_backend *be, fox_cuda_pop_rounds *out);

#endif
