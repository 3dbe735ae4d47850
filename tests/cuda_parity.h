/*
 * cuda_parity.h — what the three files of the CUDA parity test share
 * (test_cuda_parity.c, test_cuda_parity_stab.c, test_cuda_parity_engine.c):
 * the fixture's state, which test_cuda_parity.c's setup fills before each
 * kernel-level test, the batch with a clear double-DQN argmax, the loss
 * hyperparameters, and the functions that add each file's tests to the
 * suite's test cases. Built only with CUDA (FOX_HAVE_CUDA).
 */
#ifndef FOX_TESTS_CUDA_PARITY_H
#define FOX_TESTS_CUDA_PARITY_H

#include <check.h>
#include <math.h>
#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/cpu/net.h"
#include "gpu/data.h"
#include "gpu/rng.h"

#define BATCH 256

/* The fixture: the default network on the synthetic series, one CUDA backend. */
extern fox_config fox_parity_cfg;
extern fox_model_layout fox_parity_lay;
extern fox_series fox_parity_series;
extern fox_features fox_parity_feat;
extern fox_fold fox_parity_fold;
extern fox_backend *fox_parity_gpu;
extern float *fox_parity_params, *fox_parity_target; /* perturbed: every head carries signal */

static inline double
rel_scalar(double x, double ref)
{
    return fabs(x - ref) / (fabs(ref) > 1e-300 ? fabs(ref) : 1e-300);
}

/* ------------------------------------------------------------------------------------------ */
/* A batch with a clear double-DQN argmax (so that both backends pick the same a*)             */

typedef struct host_batch {
    float s[BATCH * 64], s_next[BATCH * 64], r[BATCH], done[BATCH], w[BATCH], aux[BATCH];
    float tau[BATCH * 8], tau_next[BATCH * 8];
    int32_t a[BATCH * 4], regime[BATCH];
} host_batch;

static inline void
random_port(fox_rng *rng, float port[3])
{
    port[0] = (float)((int)fox_rng_below(rng, 9) - 4) / 4.0f;
    port[1] = port[0] != 0.0f ? 4.0f * fox_rng_uniform(rng) - 2.0f : 0.0f;
    port[2] = port[0] != 0.0f ? (float)fox_rng_below(rng, 65) / 64.0f : 0.0f;
}

static inline void
fill_row(fox_rng *rng, host_batch *hb, int b)
{
    int span = fox_parity_fold.train_end - fox_parity_fold.train_begin - 8;
    int t = fox_parity_fold.train_begin + (int)fox_rng_below(rng, (uint32_t)span);
    float port[3], port2[3];
    random_port(rng, port);
    random_port(rng, port2);
    fox__state_build(&fox_parity_feat, fox_parity_lay.S, t, port,
                     hb->s + (size_t)b * fox_parity_lay.S);
    fox__state_build(&fox_parity_feat, fox_parity_lay.S, t + fox_parity_cfg.n_step, port2,
                     hb->s_next + (size_t)b * fox_parity_lay.S);
    for (int d = 0; d < 4; d++)
        hb->a[b * 4 + d] = (int32_t)fox_rng_below(rng, (uint32_t)fox_parity_lay.branch_size[d]);
    hb->r[b] = 3.0f * fox_rng_uniform(rng) - 1.5f;
    hb->done[b] = fox_rng_uniform(rng) < 0.1f ? 1.0f : 0.0f;
    hb->w[b] = 0.2f + 0.8f * fox_rng_uniform(rng);
    hb->aux[b] = logf(fox_parity_series.close[t + 1] / fox_parity_series.close[t]);
    hb->regime[b] = fox_parity_series.regime[t];
    for (int k = 0; k < fox_parity_lay.NT; k++) {
        hb->tau[b * fox_parity_lay.NT + k] = fox_rng_uniform(rng);
        hb->tau_next[b * fox_parity_lay.NT + k] = fox_rng_uniform(rng);
    }
}

/* Rows whose online argmax over s′ has a near-tie are redrawn: rounding may break a tie either way.
 */
static inline void
make_batch(host_batch *hb, uint64_t seed)
{
    fox_rng rng;
    fox_rng_seed(&rng, seed);
    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, &fox_parity_lay, BATCH));
    float *q = malloc((size_t)BATCH * fox_parity_lay.n_actions * sizeof *q);
    ck_assert_ptr_nonnull(q);
    for (int b = 0; b < BATCH; b++)
        fill_row(&rng, hb, b);
    for (int round = 0; round < 100; round++) {
        FOX_CK_OK(fox_cpu_net_q_values(net, fox_parity_params, hb->s_next, BATCH, q));
        int redrawn = 0;
        for (int b = 0; b < BATCH; b++)
            for (int d = 0; d < 4; d++) {
                const float *qd =
                    q + (size_t)b * fox_parity_lay.n_actions + fox_parity_lay.branch_off[d];
                float best = -INFINITY, second = -INFINITY;
                for (int k = 0; k < fox_parity_lay.branch_size[d]; k++)
                    if (qd[k] > best) {
                        second = best;
                        best = qd[k];
                    } else if (qd[k] > second) {
                        second = qd[k];
                    }
                if (best - second < 1e-4f * (1.0f + fabsf(best))) {
                    fill_row(&rng, hb, b);
                    redrawn++;
                    d = 4;
                }
            }
        if (!redrawn)
            break;
        ck_assert_msg(round < 99, "could not draw a batch without argmax near-ties");
    }
    free(q);
    fox_cpu_net_destroy(net);
}

static inline fox_cpu_net_batch
batch_view(const host_batch *hb, int weighted)
{
    fox_cpu_net_batch b = {BATCH,   hb->s,  hb->s_next, hb->a,      hb->r,       hb->done,
                           weighted ? hb->w : NULL, hb->aux, hb->regime, hb->tau, hb->tau_next};
    return b;
}

/* The configured loss hyperparameters, target mode `mode`, an aux label scale of 0.004. */
static inline fox_cpu_net_hparams
loss_hparams(int mode)
{
    return (fox_cpu_net_hparams){powf(fox_parity_cfg.gamma, (float)fox_parity_cfg.n_step),
                                 fox_parity_cfg.iqn_lambda,
                                 fox_parity_cfg.aux_lambda,
                                 0.004f,
                                 mode,
                                 1};
}

/* Add test_cuda_parity_stab.c's tests (the stability kernels) to the kernel-level case. */
void fox_parity_stab_tests(TCase *tc);

/* Add test_cuda_parity_engine.c's kernel-level tests (the sum tree) to tc. */
void fox_parity_per_tests(TCase *tc);

/* Add test_cuda_parity_engine.c's engine-level tests to te. */
void fox_parity_engine_tests(TCase *te);

#endif
