/*
 * stab.h — the numerical-stability system of the CPU backend, one named
 * function per piece, which backend.c calls in step order and the CUDA
 * backend mirrors kernel for kernel:
 *
 *   the fused check (SP2): a table of (slot, pointer, length) entries set
 *     once at construction, one pass per step writing sticky flags;
 *   the stability points: every sentinel buffer passes one point right after
 *     it is written (net.c's hook, and the backend's own buffers), where a
 *     fault may be injected and where the inline checks and clamp sites run;
 *   the clamp sites: Mech 10 on h_s2 (slot 12 checked before it), Mech 1 on
 *     the IQN targets, Mech 2 on the atom grid, Mech 6's global clip, the
 *     clamped Adam step (Mech 9 and the SP4 m/v clamps) and the SP1 Phase C
 *     guard on d_h_s2 — every bound read from the ISV at its use;
 *   the producers: the fixed-rate ISV signals and, in adaptive mode, the 40
 *     SP4 bound slots through the p99 histogram and Pearls A–D (bounds.h);
 *   the fold reset of everything above, and the halts.
 *
 * It owns no training buffer (the backend does) and decides nothing about
 * folds or epochs. One thread: the backend's.
 */
#ifndef FOX_CPU_STAB_H
#define FOX_CPU_STAB_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/bounds.h"
#include "gpu/config.h"
#include "gpu/isv.h"
#include "gpu/model.h"
#include "gpu/sentinel.h"
#include "gpu/cpu/net.h"
#include "gpu/cpu/optim.h"

/* One entry of the fused-check table: a run of floats a slot watches. */
typedef struct fox_cpu_check {
    int slot;
    const float *ptr;
    size_t len;
} fox_cpu_check;

/* Entries: one per watched run; a slot over several param groups may take two. */
#define FOX_CPU_MAX_CHECKS 96

/* The Pearl C families of the clamped Adam step. */
enum { FOX_CPU_FAM_W = 0, FOX_CPU_FAM_M = 1, FOX_CPU_FAM_V = 2, FOX_CPU_FAM_COUNT = 3 };

typedef struct fox_cpu_stab {
    const fox_config *cfg;
    const fox_model_layout *lay;
    volatile float *isv; /* [FOX_ISV_TOTAL_DIM] */
    volatile int *flags; /* [FOX_SENTINEL_SLOTS] */
    fox_cpu_net *net;
    float *params, *grads, *adam_m, *adam_v; /* [n_params], the backend's */
    int adaptive;                            /* engine.bounds_mode = adaptive */
    int moving_grid;                         /* model.atom_grid = moving */
    int sentinel;                            /* engine.sentinel: checks on */
    int strict;                              /* engine.halt_rule = strict: slots 0–35 halt */

    fox_cpu_check checks[FOX_CPU_MAX_CHECKS];
    int n_checks;

    /* SP4 */
    fox_wiener_state ws[FOX_ISV_TOTAL_DIM]; /* Pearl D state per ISV slot */
    fox_pearl_c_state pc[FOX_CPU_FAM_COUNT][FOX_GROUP_COUNT];
    fox_span gspan[FOX_GROUP_COUNT][FOX_P_COUNT]; /* each group's tensors */
    int gspans[FOX_GROUP_COUNT];
    fox_cpu_adam_clamp adam[FOX_GROUP_COUNT]; /* the last Adam step's report */

    /* fault injection (debug.inject_fault.*) */
    int fault_slot; /* -1: none */
    float fault_value;
    int64_t fault_step; /* train step of the fold */
    int fault_now;      /* 1 during the full step whose train step is fault_step */
    int fault_done;

    /* halt_grad_collapse */
    int collapse_run;
} fox_cpu_stab;

/*
 * Set up for cfg and lay over the backend's ISV, flags, net and optimizer
 * buffers; the table starts empty. FOX_EINVAL (message in err) when the
 * fault buffer names no sentinel buffer.
 */
int fox_cpu_stab_init(fox_cpu_stab *st, const fox_config *cfg, const fox_model_layout *lay,
                      volatile float *isv, volatile int *flags, fox_cpu_net *net, float *params,
                      float *grads, float *adam_m, float *adam_v, char *err, size_t errlen);

/*
 * Fused-check table, built once at construction: watch adds one run of slot
 * (len 0 is skipped); watch_groups adds the runs of base (a params-layout
 * buffer) over the slot's param groups; watch_net adds every slot the net
 * owns, for batches of B rows. Inline (12, 33–35) and reserved slots are not
 * table entries.
 */
int fox_cpu_stab_watch(fox_cpu_stab *st, int slot, const float *ptr, size_t len);
int fox_cpu_stab_watch_groups(fox_cpu_stab *st, int slot, const float *base);
int fox_cpu_stab_watch_net(fox_cpu_stab *st, int B);

/* The SP2 pass: every table entry against its slot's rule; sticky flags. No-op unless sentinel. */
void fox_cpu_stab_check(fox_cpu_stab *st);

/*
 * A stability point: buf [n], the buffer of slot, was just written. The
 * net's hook (ctx = st) and the backend's own points. Injects the armed
 * fault, then runs the slot's site: slot 12 Mech 10, 46 Mech 1, 33/34 the
 * inline checks, 35 the inline check and the Phase C guard.
 */
void fox_cpu_stab_point(void *ctx, int slot, float *buf, size_t n);

/* Start of a full step whose train step (if any) has fold index train_step; arms the fault. */
/* Arm a fault (FOX_FAULT_*) into slot's buffer at train step `step` of the fold. */
void fox_cpu_stab_arm_fault(fox_cpu_stab *st, int slot, int kind, int64_t step);

void fox_cpu_stab_begin_step(fox_cpu_stab *st, int64_t train_step, int will_train);

/*
 * Before a train step's forward (the twin of the CUDA pre_step): AUX_LABEL_
 * SCALE_EMA from the batch's next-bar return labels [B], and the net's IQN
 * unit (fox_td_scale) from Q_ABS_REF as the step begins. Returns the label
 * scale the aux loss divides by.
 */
float fox_cpu_stab_pre_step(fox_cpu_stab *st, const float *labels, int B);

/*
 * Mech 2, the atom write path, before the forward: every branch's grid moved
 * toward the batch's Bellman targets (rewards r [B], done flags [B], the
 * bootstrap discount γⁿ) and clamped, ATOM_POS_BOUND's observation, slot 47,
 * the net's supports set.
 */
void fox_cpu_stab_atoms(fox_cpu_stab *st, const float *r, const float *done, int B,
                        float gamma_n);

/*
 * The net's supports from the grid in the ISV: what a train step wrote, or
 * what a checkpoint or a fold reset put there since (the configured support
 * while unset). Every forward that computes an expected Q runs after it.
 */
void fox_cpu_stab_sync_atoms(fox_cpu_stab *st);

/*
 * Q_DIR_ABS_REF from the train step's mean |E[Q]| of the direction branch's
 * taken actions. (Q_ABS_REF is observed at the Mech 1 site, from the
 * targets: fox_q_ref_row.)
 */
void fox_cpu_stab_q_dir_signal(fox_cpu_stab *st, double q_dir_abs);

/*
 * Mech 6: the global norm of the finite gradients (*norm), its EMAs, and the
 * clip factor to apply (fox_cpu_clip_scale of the mode's clip).
 */
float fox_cpu_stab_grad_clip(fox_cpu_stab *st, double *norm);

/* The clamped Adam step over every tensor, each with its group's bounds (Mech 9, SP4). */
void fox_cpu_stab_adam(fox_cpu_stab *st, int64_t t, float grad_scale);

/* Adaptive mode, after Adam: Pearl B per group (+ the trunk L1 rate), then Pearl C. */
void fox_cpu_stab_post_adam(fox_cpu_stab *st);

/*
 * The halts, after a step (fox_halt_decide under engine.halt_rule): halt_nan
 * when the step trained and its loss or norm is not finite, or under the
 * strict rule when any slot 0–35 is set; halt_grad_collapse when the norm
 * stayed ≈ 0 for FOX_HALT_COLLAPSE_STEPS train steps. FOX_EHALT with the
 * message (fox_sentinel_halt_message) in msg and *reason (FOX_HALT_*); else
 * FOX_OK.
 */
int fox_cpu_stab_halt(fox_cpu_stab *st, int trained, float loss, double norm, int *reason,
                      char *msg, size_t len);

/* Fold boundary: flags, ISV per its table, Pearl D and C states, halt and fault state. */
void fox_cpu_stab_reset_fold(fox_cpu_stab *st);

/*
 * Test hook: where slot's first watched run lies (the table's or, for an
 * inline slot, the net's buffer): FOX_ENOENT when nothing is watched.
 */
int fox_cpu_stab_where(fox_cpu_stab *st, int slot, float **ptr, size_t *len);

#endif
