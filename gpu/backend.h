/*
 * backend.h — what the engine needs of a backend (internal to gpu/).
 *
 * A backend owns the network state (params, target params, Adam moments,
 * grads), the environments, the replay ring and the ISV / sentinel buffers,
 * and runs full steps. The engine owns the data, the folds, evaluation,
 * epochs and checkpoints files, and reaches the backend only through this
 * table. Both backends compute the same math; cpu/ is the reference.
 */
#ifndef FOX_BACKEND_H
#define FOX_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/config.h"
#include "gpu/data.h"
#include "gpu/model.h"
#include "gpu/train_types.h"

/* What a backend trains on; owned by the engine, valid for the backend's life. */
typedef struct fox_backend_env {
    const fox_config *cfg; /* resolved: batch and n_envs filled in */
    const fox_model_layout *lay;
    const fox_series *series;
    const fox_features *feat; /* norm refitted by the engine at each fold */
    const fox_fold *fold;     /* current fold's segments */
    /*
     * A population: the engine's members (engine.members), which a backend
     * may train in one step (CUDA; the CPU's members go one after another).
     * member is this one's index; *shared is the slot every member's create
     * sees, NULL before member 0's, where the members find what they share.
     */
    int member, members;
    void **shared;
} fox_backend_env;

/* Counters that survive a checkpoint. */
typedef struct fox_train_counters {
    int64_t adam_t;      /* Adam step (bias correction) */
    int64_t step;        /* full steps in the fold */
    int64_t train_steps; /* train steps in the fold (after learning_starts) */
    int64_t env_steps;
    uint64_t rng_state[2]; /* collection and sampling streams */
} fox_train_counters;

typedef struct fox_backend fox_backend;

/* Fields every backend struct starts with. */
typedef struct fox_backend_base {
    const struct fox_backend_ops *ops;
    volatile float *isv; /* FOX_ISV_TOTAL_DIM, host-readable at any time */
    volatile int *flags; /* FOX_SENTINEL_SLOTS, host-readable at any time */
    int halt_reason;     /* FOX_HALT_* of the last FOX_EHALT (err says why) */
    int64_t halt_step;   /* the fold's full-step count at that halt's step */
    char err[512];
} fox_backend_base;

typedef struct fox_backend_ops {
    const char *name;
    /* 1 if usable here; else 0 and why. */
    int (*available)(char *why, size_t len);
    int (*create)(fox_backend **out, const fox_backend_env *env, char *err, size_t errlen);
    void (*destroy)(fox_backend *be);
    /* The fold's features are normalized: take them, empty replay, reset envs. */
    int (*begin_fold)(fox_backend *be);
    /* Adam state, hard target sync, flags, ISV per its table. */
    int (*reset_for_fold)(fox_backend *be);
    /*
     * A chunk of steps in two halves: start_steps runs or enqueues n full
     * steps (collect = 1) or n train steps without collection (collect = 0,
     * benchmarks: the ring must hold a batch, else FOX_ESTATE);
     * finish_steps waits for the chunk and fills *st. The engine starts
     * every member's chunk before it finishes any, so that a backend that
     * runs a chunk asynchronously (CUDA) runs the members' side by side.
     * Each start_steps is followed by one finish_steps, whatever it
     * returned; either may return FOX_EHALT (below).
     */
    int (*start_steps)(fox_backend *be, int n, int collect);
    int (*finish_steps)(fox_backend *be, fox_step_stats *st);
    /*
     * Expected Q [B × n_actions] of host states [B × S], a forward pass in
     * two halves as a chunk's steps: q_start runs or enqueues it (s stays
     * the caller's, unchanged, until q_finish returns), q_finish waits for
     * it and writes q. The engine starts the pass of every member that walks
     * before it finishes any, so that a backend that runs a pass
     * asynchronously (CUDA) runs the members' side by side. Each q_start is
     * followed by one q_finish, whatever it returned, with no other call on
     * the backend between them; q_finish returns q_start's failure, if any.
     */
    int (*q_start)(fox_backend *be, const float *s, int B);
    int (*q_finish)(fox_backend *be, float *q);
    /* Copy the training state out (load = 0) or in (load = 1); arrays of n_params floats. */
    int (*state_io)(fox_backend *be, int load, float *params, float *target, float *adam_m,
                    float *adam_v, fox_train_counters *c);
    /*
     * Stability system. A chunk returns FOX_EHALT (err and
     * halt_reason set) when a step ends in halt_nan or halt_grad_collapse.
     * The test and drill hooks are each backend's debug library's
     * (gpu/cpu/debug.h, gpu/cuda/debug.h), not ops.
     */
    /* Arm a fault into slot's buffer at the fold's train step `step`; NULL if unsupported. */
    int (*arm_fault)(fox_backend *be, int slot, int kind, int64_t step);
    /*
     * Most bars a greedy evaluation walk predicts per forward pass (gpu/lookahead.h), 1 to
     * FOX_LOOKAHEAD_MAX: 1 where every row costs its arithmetic and a broken guess wastes it
     * (the CPU), more where a call costs its launches whatever its rows (CUDA).
     */
    int eval_lookahead;
} fox_backend_ops;

extern const fox_backend_ops fox_cpu_backend_ops;
#ifdef FOX_HAVE_CUDA
extern const fox_backend_ops fox_cuda_backend_ops;
#endif

#endif
