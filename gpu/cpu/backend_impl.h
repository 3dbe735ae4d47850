/*
 * backend_impl.h — the CPU backend's state, shared by backend.c and the
 * test-support library's debug.c (gpu/cpu/debug.h), which reads the
 * stability system's buffers in host memory. Nothing else includes it.
 */
#ifndef FOX_CPU_BACKEND_IMPL_H
#define FOX_CPU_BACKEND_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/env.h"
#include "gpu/isv.h"
#include "gpu/rng.h"
#include "gpu/sentinel.h"
#include "gpu/cpu/net.h"
#include "gpu/cpu/replay.h"
#include "gpu/cpu/stab.h"

/* One environment: where it is, what it holds, its open n-step window. */
typedef struct cpu_env {
    int bar;   /* decision bar t */
    int steps; /* steps in this episode */
    fox_env_pos st;
    int wlen; /* entries in the n-step window */
    int wbar[64];
    float wport[64][3];
    int32_t wa[64][4];
    float wr[64];
} cpu_env;

typedef struct cpu_backend {
    fox_backend_base base;
    fox_backend_env env;
    const fox_model_layout *lay;
    int S, N, B, D, n_step;
    size_t np;
    float *params, *target, *grads, *adam_m, *adam_v;
    fox_cpu_net *net;
    fox_replay replay;
    cpu_env *envs;
    fox_env_params envp;
    fox_env_bars bars;
    fox_rng rng_collect, rng_sample;
    fox_train_counters ctr;
    /* scratch */
    float *states, *q; /* [N × S], [N × n_actions] */
    float *bs, *bs_next, *br, *bdone, *bw, *baux, *btau, *btau_next, *bprio;
    int32_t *ba, *bregime, *bidx;
    uint64_t bpushes; /* the ring's pushes when the batch was drawn */
    float baux_scale; /* the batch's aux label scale */
    float isv_mem[FOX_ISV_TOTAL_DIM];
    int flags_mem[FOX_SENTINEL_SLOTS];
    fox_cpu_stab stab;
    float last_loss; /* of the last train step, for the halts */
    double last_norm;
    /* The chunk start_steps ran, for finish_steps: the CPU runs it there and then. */
    fox_step_stats chunk_stats;
    int chunk_rv;
    /* The forward pass q_start took, for q_finish, which computes it. */
    const float *pass_s;
    int pass_B;
} cpu_backend;

#endif
