/*
 * net_fixture.h — what the CPU network's tests (test_net.c, test_net_ref.c)
 * and the optimizer's (test_optim.c) share: the shrunk network of the
 * checks, seeded parameters and input batches in double with float copies,
 * and the fixture holding a double network over them. Static inline only, as
 * in testutil.h.
 */
#ifndef FOX_TESTS_NET_FIXTURE_H
#define FOX_TESTS_NET_FIXTURE_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu/config.h"
#include "gpu/cpu/net.h"
#include "gpu/model.h"
#include "gpu/rng.h"
#include "tests/testutil.h"

/* The shrunk network of the gradient checks: every width distinct, so a swapped index shows. */
static inline void
small_config(fox_config *c)
{
    fox_config_default(c);
    c->state_dim = 8;
    c->h1 = 12;
    c->h2 = 10;
    c->head_hidden = 8;
    c->n_atoms = 11;
    c->n_tau = 4;
    c->n_cos = 6;
    c->aux_hidden = 5;
    c->n_regimes = 4;
    c->size_levels = 4;
    c->order_types = 2;
    c->urgency_levels = 3;
    c->v_min = -3.0f;
    c->v_max = 3.0f;
}

static inline double
uniform(fox_rng *g, double lo, double hi)
{
    return lo + (hi - lo) * fox_rng_uniform(g);
}

/* Params from fox_model_init_params plus uniform noise on every real element, in double. */
static inline double *
params_make(const fox_model_layout *lay, uint64_t seed, double noise)
{
    float *pf = malloc(lay->n_params * sizeof *pf);
    double *p = calloc(lay->n_params, sizeof *p);
    ck_assert(pf && p);
    fox_model_init_params(lay, pf, seed);
    fox_rng g;
    fox_rng_seed(&g, seed ^ 0x5eedULL);
    for (int i = 0; i < FOX_P_COUNT; i++)
        for (size_t k = 0; k < fox_tensor_size(lay, i); k++) {
            size_t o = lay->t[i].offset + k;
            p[o] = pf[o] + uniform(&g, -noise, noise);
        }
    free(pf);
    return p;
}

/* One batch of random inputs, in double, with float copies for the float build. */
typedef struct inputs {
    int B;
    double *s, *s_next, *r, *done, *w, *aux_ret, *tau, *tau_next;
    float *fs, *fs_next, *fr, *fdone, *fw, *faux_ret, *ftau, *ftau_next;
    int32_t *a, *regime;
} inputs;

static inline double *
dalloc(size_t n)
{
    double *p = calloc(n, sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

static inline float *
to_float(const double *x, size_t n)
{
    float *f = malloc(n * sizeof *f);
    ck_assert_ptr_nonnull(f);
    for (size_t k = 0; k < n; k++)
        f[k] = (float)x[k];
    return f;
}

static inline void
inputs_make(inputs *in, const fox_model_layout *lay, int B, uint64_t seed)
{
    fox_rng g;
    fox_rng_seed(&g, seed);
    int S = lay->S, D = lay->n_branches, NT = lay->NT;
    in->B = B;
    in->s = dalloc((size_t)B * S);
    in->s_next = dalloc((size_t)B * S);
    in->r = dalloc(B);
    in->done = dalloc(B);
    in->w = dalloc(B);
    in->aux_ret = dalloc(B);
    in->tau = dalloc((size_t)B * NT);
    in->tau_next = dalloc((size_t)B * NT);
    in->a = calloc((size_t)B * D, sizeof *in->a);
    in->regime = calloc(B, sizeof *in->regime);
    ck_assert(in->a && in->regime);
    for (int k = 0; k < B * S; k++) {
        in->s[k] = fox_rng_normal(&g);
        in->s_next[k] = fox_rng_normal(&g);
    }
    for (int b = 0; b < B; b++) {
        in->r[b] = uniform(&g, -1.5, 1.5);
        in->done[b] = b == B - 1 ? 1.0 : 0.0; /* one terminal row: no bootstrap */
        in->w[b] = uniform(&g, 0.5, 1.5);
        in->aux_ret[b] = 0.01 * fox_rng_normal(&g);
        in->regime[b] = (int32_t)fox_rng_below(&g, (uint32_t)lay->NR);
        for (int d = 0; d < D; d++)
            in->a[b * D + d] = (int32_t)fox_rng_below(&g, (uint32_t)lay->branch_size[d]);
        for (int i = 0; i < NT; i++) {
            in->tau[b * NT + i] = uniform(&g, 0.02, 0.98);
            in->tau_next[b * NT + i] = uniform(&g, 0.02, 0.98);
        }
    }
    in->fs = to_float(in->s, (size_t)B * S);
    in->fs_next = to_float(in->s_next, (size_t)B * S);
    in->fr = to_float(in->r, B);
    in->fdone = to_float(in->done, B);
    in->fw = to_float(in->w, B);
    in->faux_ret = to_float(in->aux_ret, B);
    in->ftau = to_float(in->tau, (size_t)B * NT);
    in->ftau_next = to_float(in->tau_next, (size_t)B * NT);
}

static inline void
inputs_free(inputs *in)
{
    void *ptrs[] = {in->s,   in->s_next,   in->r,    in->done,      in->w,  in->aux_ret,
                    in->tau, in->tau_next, in->fs,   in->fs_next,   in->fr, in->fdone,
                    in->fw,  in->faux_ret, in->ftau, in->ftau_next, in->a,  in->regime};
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++)
        free(ptrs[k]);
}

static inline fox_cpud_net_batch
batch_double(const inputs *in)
{
    return (fox_cpud_net_batch){in->B, in->s,       in->s_next, in->a,   in->r,       in->done,
                                in->w, in->aux_ret, in->regime, in->tau, in->tau_next};
}

static inline fox_cpu_net_batch
batch_float(const inputs *in)
{
    return (fox_cpu_net_batch){in->B,  in->fs,       in->fs_next, in->a,    in->fr,       in->fdone,
                               in->fw, in->faux_ret, in->regime,  in->ftau, in->ftau_next};
}

/* Scale 0.01: labels of ~1 after scaling, so the MSE term is not negligible. */
static inline fox_cpud_net_hparams
hparams_double(double iqn_lambda, double aux_lambda, int target_mode, int bdq)
{
    return (fox_cpud_net_hparams){0.9, iqn_lambda, aux_lambda, 0.01, target_mode, bdq};
}

#define LAMBDA_IQN 0.7
#define LAMBDA_AUX 0.3

typedef struct net_fx {
    fox_model_layout lay;
    fox_cpud_net *net;
    double *params, *target, *grads;
    inputs in;
    fox_cpud_net_batch bt;
    fox_cpud_net_hparams hp;
    int part;
} net_fx;

static inline void
net_fx_init(net_fx *f, int B, uint64_t seed)
{
    fox_config c;
    small_config(&c);
    FOX_CK_OK(fox_model_layout_init(&f->lay, &c));
    FOX_CK_OK(fox_cpud_net_create(&f->net, &f->lay, B));
    /* Noise ±0.2 on top of the init: non-zero biases, γ ≠ 1, non-uniform atom distributions. */
    f->params = params_make(&f->lay, seed, 0.2);
    f->target = params_make(&f->lay, seed + 1, 0.2);
    f->grads = dalloc(f->lay.n_params);
    inputs_make(&f->in, &f->lay, B, seed + 2);
    f->bt = batch_double(&f->in);
}

static inline void
net_fx_fini(net_fx *f)
{
    fox_cpud_net_destroy(f->net);
    free(f->params);
    free(f->target);
    free(f->grads);
    inputs_free(&f->in);
}

/* Analytic gradient into g with the given lambdas. */
static inline void
net_grad(net_fx *f, double li, double la, int mode, int bdq, double *g, fox_cpud_net_loss *l)
{
    fox_cpud_net_hparams hp = hparams_double(li, la, mode, bdq);
    FOX_CK_OK(fox_cpud_net_loss_grad(f->net, f->params, f->target, &f->bt, &hp, l, g, NULL));
}

#endif
