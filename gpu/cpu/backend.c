/*
 * backend.c — the CPU reference backend: environments, n-step collection,
 * replay, the train step (net.c + optim.c) and the stability system
 * (stab.c), in plain C. Everything the CUDA backend does on the device
 * happens here in the same order with the same math, so that it can be
 * checked against this; train_begin/train_end and run_steps spell that
 * order out.
 *
 * Single-threaded apart from BLAS; deterministic for a seed.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/env.h"
#include "common/error.h"
#include "gpu/isv.h"
#include "common/log.h"
#include "gpu/sentinel.h"
#include "gpu/cpu/net.h"
#include "gpu/cpu/optim.h"
#include "gpu/cpu/replay.h"
#include "gpu/cpu/stab.h"
#include "gpu/cpu/backend_impl.h"

#ifdef FOX_HAVE_OPENBLAS_THREADS
void openblas_set_num_threads(int);

/*
 * OpenBLAS has one thread pool a process: the engines of several threads
 * share it, the last one created setting its size; two never resize it at
 * once.
 */
static pthread_mutex_t blas_threads_lock = PTHREAD_MUTEX_INITIALIZER;

static void
set_blas_threads(int n)
{
    pthread_mutex_lock(&blas_threads_lock);
    openblas_set_num_threads(n);
    pthread_mutex_unlock(&blas_threads_lock);
}
#endif

static int
cpu_available(char *why, size_t len)
{
    (void)why;
    (void)len;
    return 1;
}

static void
cpu_destroy(fox_backend *be_)
{
    cpu_backend *be = (cpu_backend *)be_;
    if (!be)
        return;
    fox_cpu_net_destroy(be->net);
    fox_replay_fini(&be->replay);
    free(be->params);
    free(be->target);
    free(be->grads);
    free(be->adam_m);
    free(be->adam_v);
    free(be->envs);
    free(be->states);
    free(be->q);
    free(be->bs);
    free(be->bs_next);
    free(be->br);
    free(be->bdone);
    free(be->bw);
    free(be->baux);
    free(be->btau);
    free(be->btau_next);
    free(be->bprio);
    free(be->ba);
    free(be->bregime);
    free(be->bidx);
    free(be);
}

/*
 * The stability system over this backend's buffers: the fused-check table,
 * set once (SP2), and the net's stability points. Every sentinel buffer that
 * exists on the CPU backend is an entry, except the inline slots (12, 33–35:
 * checked at their points) and the reserved ones.
 */
static int
watch_buffers(cpu_backend *be, char *err, size_t errlen)
{
    const fox_config *cfg = be->env.cfg;
    fox_cpu_stab *st = &be->stab;
    size_t S = (size_t)be->S, B = (size_t)be->B;
    int rv = fox_cpu_stab_init(st, cfg, be->lay, be->base.isv, be->base.flags, be->net, be->params,
                               be->grads, be->adam_m, be->adam_v, err, errlen);
    struct {
        int slot;
        const float *p;
        size_t n;
    } own[] = {
        {FOX_SENT_STATES, be->bs, B * S},
        {FOX_SENT_NEXT_STATES, be->bs_next, B * S},
        {FOX_SENT_GRADS, be->grads, be->np},
        {FOX_SENT_PARAMS, be->params, be->np},
        {FOX_SENT_REWARDS, be->br, B},
        {FOX_SENT_ENV_OBS, be->states, (size_t)be->N * S},
        {FOX_SENT_REPLAY_PRIORITIES, be->bprio, B},
    };
    for (size_t k = 0; k < sizeof own / sizeof own[0] && rv == FOX_OK; k++)
        rv = fox_cpu_stab_watch(st, own[k].slot, own[k].p, own[k].n);
    /* The threshold slices of the optimizer buffers (Mech 5). */
    for (int i = FOX_SENT_HALT_END; i < FOX_SENTINEL_SLOTS && rv == FOX_OK; i++) {
        const char *buf = fox_sentinel_buffer(i);
        const float *base = strcmp(buf, "params") == 0   ? be->params
                            : strcmp(buf, "adam_m") == 0 ? be->adam_m
                            : strcmp(buf, "adam_v") == 0 ? be->adam_v
                                                         : NULL;
        if (base)
            rv = fox_cpu_stab_watch_groups(st, i, base);
    }
    if (rv == FOX_OK)
        rv = fox_cpu_stab_watch_net(st, be->B);
    if (rv != FOX_OK && !err[0])
        snprintf(err, errlen, "cpu backend: stability table: %s", fox_strerror(rv));
    /* d_states exists only for its sentinel slot: skip the extra GEMMs when checks are off. */
    fox_cpu_net_set_hook(be->net, fox_cpu_stab_point, st, st->sentinel);
    return rv;
}

static int
cpu_create(fox_backend **out, const fox_backend_env *env, char *err, size_t errlen)
{
    const fox_config *cfg = env->cfg;
    cpu_backend *be = calloc(1, sizeof *be);
    *out = NULL;
    if (!be)
        return FOX_ENOMEM;
    be->base.ops = &fox_cpu_backend_ops;
    be->base.isv = be->isv_mem;
    be->base.flags = be->flags_mem;
    be->env = *env;
    be->lay = env->lay;
    be->S = env->lay->S;
    be->N = cfg->n_envs;
    be->B = cfg->batch;
    be->D = env->lay->n_branches;
    be->n_step = cfg->n_step;
    be->np = env->lay->n_params;
#ifdef FOX_HAVE_OPENBLAS_THREADS
    if (cfg->threads > 0)
        set_blas_threads(cfg->threads);
#endif
    size_t np = be->np, S = (size_t)be->S, B = (size_t)be->B, N = (size_t)be->N;
    size_t NT = (size_t)env->lay->NT, NAct = (size_t)env->lay->n_actions;
    int max_b = be->B > be->N ? be->B : be->N;
    int rv = fox_cpu_net_create(&be->net, env->lay, max_b);
    if (rv == FOX_OK)
        rv = fox_replay_init(&be->replay, cfg->replay_capacity, cfg->prioritized, cfg->per_alpha);
    if (rv != FOX_OK) {
        snprintf(err, errlen, "cpu backend: %s", fox_strerror(rv));
        cpu_destroy((fox_backend *)be);
        return rv;
    }
    be->params = calloc(np, sizeof(float));
    be->target = calloc(np, sizeof(float));
    be->grads = calloc(np, sizeof(float));
    be->adam_m = calloc(np, sizeof(float));
    be->adam_v = calloc(np, sizeof(float));
    be->envs = calloc(N, sizeof *be->envs);
    be->states = calloc(N * S, sizeof(float));
    be->q = calloc(N * NAct, sizeof(float));
    be->bs = calloc(B * S, sizeof(float));
    be->bs_next = calloc(B * S, sizeof(float));
    be->br = calloc(B, sizeof(float));
    be->bdone = calloc(B, sizeof(float));
    be->bw = calloc(B, sizeof(float));
    be->baux = calloc(B, sizeof(float));
    be->btau = calloc(B * NT, sizeof(float));
    be->btau_next = calloc(B * NT, sizeof(float));
    be->bprio = calloc(B, sizeof(float));
    be->ba = calloc(B * 4, sizeof(int32_t));
    be->bregime = calloc(B, sizeof(int32_t));
    be->bidx = calloc(B, sizeof(int32_t));
    if (!be->params || !be->target || !be->grads || !be->adam_m || !be->adam_v || !be->envs ||
        !be->states || !be->q || !be->bs || !be->bs_next || !be->br || !be->bdone || !be->bw ||
        !be->baux || !be->btau || !be->btau_next || !be->bprio || !be->ba || !be->bregime ||
        !be->bidx) {
        snprintf(err, errlen, "cpu backend: out of memory");
        cpu_destroy((fox_backend *)be);
        return FOX_ENOMEM;
    }
    fox_model_init_params(env->lay, be->params, cfg->seed);
    memcpy(be->target, be->params, np * sizeof(float));
    be->envp = (fox_env_params){cfg->fee, cfg->half_spread, cfg->limit_fee, cfg->reward_scale,
                                cfg->size_levels, cfg->urgency_levels};
    const fox_series *s = env->series;
    be->bars = (fox_env_bars){s->open, s->high, s->low, s->close};
    fox_rng_seed(&be->rng_collect, cfg->seed ^ 0xc011ec7ULL);
    fox_rng_seed(&be->rng_sample, cfg->seed ^ 0x5a3b1eULL);
    fox_isv_init((float *)be->isv_mem);
    if ((rv = watch_buffers(be, err, errlen)) != FOX_OK) {
        cpu_destroy((fox_backend *)be);
        return rv;
    }
    *out = (fox_backend *)be;
    return FOX_OK;
}

static void
env_reset(cpu_backend *be, cpu_env *e)
{
    const fox_fold *f = be->env.fold;
    /* Leave room for at least n steps before the segment's last bar. */
    int span = f->train_end - 1 - f->train_begin - be->n_step;
    e->bar = f->train_begin + (int)fox_rng_below(&be->rng_collect, (uint32_t)(span > 1 ? span : 1));
    e->steps = 0;
    e->st = (fox_env_pos){0.0f, be->bars.close[e->bar], 0};
    e->wlen = 0;
}

static int
cpu_begin_fold(fox_backend *be_)
{
    cpu_backend *be = (cpu_backend *)be_;
    fox_replay_clear(&be->replay);
    for (int i = 0; i < be->N; i++)
        env_reset(be, &be->envs[i]);
    return FOX_OK;
}

/*
 * reset_for_fold: Mech 4, every Adam state of the one optimizer (m, v, t);
 * Mech 3, the hard target sync; then the stability system's tables: flags,
 * ISV per its reset rules, Pearl D and C states (fox_cpu_stab_reset_fold).
 * GRAD_NORM_SLOW_EMA is `keep` in the ISV table: Mech 8 stays reverted.
 */
static int
cpu_reset_for_fold(fox_backend *be_)
{
    cpu_backend *be = (cpu_backend *)be_;
    memset(be->adam_m, 0, be->np * sizeof(float));
    memset(be->adam_v, 0, be->np * sizeof(float));
    be->ctr.adam_t = 0;
    be->ctr.step = 0;
    be->ctr.env_steps = 0;
    be->ctr.train_steps = 0;
    fox_cpu_target_sync(be->target, be->params, be->np, 0.0f);
    fox_cpu_stab_reset_fold(&be->stab);
    be->base.halt_reason = FOX_HALT_NONE;
    return FOX_OK;
}

static float
epsilon(const cpu_backend *be)
{
    const fox_config *c = be->env.cfg;
    double frac = (double)be->ctr.train_steps / (double)c->eps_decay_steps;
    if (frac > 1.0)
        frac = 1.0;
    return (float)(c->eps_start + (c->eps_end - c->eps_start) * frac);
}

/* Emit the window's oldest entry as a transition bootstrapping from env e's current state. */
static void
emit_oldest(cpu_backend *be, cpu_env *e, const float port_now[3], float done)
{
    fox_transition t;
    float g = 1.0f, R = 0.0f, gamma = be->env.cfg->gamma;
    for (int k = 0; k < e->wlen; k++) {
        R += g * e->wr[k];
        g *= gamma;
    }
    t.bar = e->wbar[0];
    t.bar_next = e->bar;
    memcpy(t.port, e->wport[0], sizeof t.port);
    memcpy(t.port_next, port_now, sizeof t.port_next);
    memcpy(t.a, e->wa[0], sizeof t.a);
    t.r = R;
    t.done = done;
    fox_replay_push(&be->replay, &t);
    e->wlen--;
    memmove(e->wbar, e->wbar + 1, (size_t)e->wlen * sizeof e->wbar[0]);
    memmove(e->wport, e->wport + 1, (size_t)e->wlen * sizeof e->wport[0]);
    memmove(e->wa, e->wa + 1, (size_t)e->wlen * sizeof e->wa[0]);
    memmove(e->wr, e->wr + 1, (size_t)e->wlen * sizeof e->wr[0]);
}

static int
collect(cpu_backend *be, float eps)
{
    const fox_model_layout *lay = be->lay;
    const fox_features *feat = be->env.feat;
    int S = be->S, NAct = lay->n_actions;
    for (int i = 0; i < be->N; i++) {
        float port[3];
        cpu_env *e = &be->envs[i];
        fox_env_portfolio(&e->st, be->bars.close[e->bar], port);
        fox__state_build(feat, S, e->bar, port, be->states + (size_t)i * S);
    }
    fox_cpu_stab_point(&be->stab, FOX_SENT_ENV_OBS, be->states, (size_t)be->N * S);
    int rv = fox_cpu_net_q_values(be->net, be->params, be->states, be->N, be->q);
    if (rv != FOX_OK)
        return rv;
    const fox_fold *f = be->env.fold;
    for (int i = 0; i < be->N; i++) {
        cpu_env *e = &be->envs[i];
        int32_t a[4];
        fox_model_greedy_action(lay, be->q + (size_t)i * NAct, a);
        for (int d = 0; d < lay->n_branches; d++)
            if (fox_rng_uniform(&be->rng_collect) < eps)
                a[d] = (int32_t)fox_rng_below(&be->rng_collect, (uint32_t)lay->branch_size[d]);
        float port[3];
        fox_env_portfolio(&e->st, be->bars.close[e->bar], port);
        fox_env_fill fill = fox_env_step(&be->envp, &be->bars, e->bar, &e->st, a);
        e->wbar[e->wlen] = e->bar;
        memcpy(e->wport[e->wlen], port, sizeof port);
        memcpy(e->wa[e->wlen], a, sizeof e->wa[0]);
        e->wr[e->wlen] = fox_env_train_reward(&be->envp, &fill, be->env.cfg->train_cost_mult);
        e->wlen++;
        e->bar++;
        e->steps++;
        float port_now[3];
        fox_env_portfolio(&e->st, be->bars.close[e->bar], port_now);
        int ended = e->bar + 1 >= f->train_end || e->steps >= be->env.cfg->episode_len;
        if (e->wlen == be->n_step)
            emit_oldest(be, e, port_now, ended ? 1.0f : 0.0f);
        if (ended) {
            while (e->wlen > 0)
                emit_oldest(be, e, port_now, 1.0f);
            env_reset(be, e);
        }
    }
    be->ctr.env_steps += be->N;
    return FOX_OK;
}

static void
gather_batch(cpu_backend *be)
{
    const fox_features *feat = be->env.feat;
    const fox_series *s = be->env.series;
    int S = be->S, NT = be->lay->NT;
    fox_replay_sample(&be->replay, &be->rng_sample, be->B, be->env.cfg->per_beta, be->bidx, be->bw);
    be->bpushes = be->replay.pushes;
    for (int b = 0; b < be->B; b++) {
        const fox_transition *t = &be->replay.items[be->bidx[b]];
        fox__state_build(feat, S, t->bar, t->port, be->bs + (size_t)b * S);
        fox__state_build(feat, S, t->bar_next, t->port_next, be->bs_next + (size_t)b * S);
        memcpy(be->ba + 4 * b, t->a, sizeof t->a);
        be->br[b] = t->r;
        be->bdone[b] = t->done;
        be->baux[b] = logf(s->close[t->bar + 1] / s->close[t->bar]);
        be->bregime[b] = s->regime[t->bar];
    }
    for (int k = 0; k < be->B * NT; k++) {
        be->btau[k] = fox_rng_uniform(&be->rng_sample);
        be->btau_next[k] = fox_rng_uniform(&be->rng_sample);
    }
    fox_cpu_stab_point(&be->stab, FOX_SENT_STATES, be->bs, (size_t)be->B * S);
    fox_cpu_stab_point(&be->stab, FOX_SENT_NEXT_STATES, be->bs_next, (size_t)be->B * S);
    fox_cpu_stab_point(&be->stab, FOX_SENT_REWARDS, be->br, (size_t)be->B);
}

/*
 * A train step, in the order the CUDA backend mirrors, in two halves so that
 * a full step's collection comes between them (the CUDA backend runs it
 * beside the second half): train_begin draws the batch from the ring as it
 * stands before the collection's pushes, then the aux label scale and Mech 2
 * on the atoms (which the collection acts with); train_end runs forward,
 * losses and backward with the net's stability points (Mech 10, Mech 1,
 * inline checks); Q_ABS_REF; Mech 6's clip; the clamped Adam step (Mech 9,
 * SP4 m/v); the SP4 Pearls B and C; target sync; replay priorities.
 */
static void
train_begin(cpu_backend *be)
{
    gather_batch(be);
    be->baux_scale = fox_cpu_stab_pre_step(&be->stab, be->baux, be->B);
    const fox_config *c = be->env.cfg;
    fox_cpu_stab_atoms(&be->stab, be->br, be->bdone, be->B, powf(c->gamma, (float)c->n_step));
}

static int
train_end(cpu_backend *be, fox_step_stats *st)
{
    const fox_config *c = be->env.cfg;
    fox_cpu_stab *sb = &be->stab;
    float aux_scale = be->baux_scale;
    fox_cpu_net_batch batch = {be->B, be->bs, be->bs_next, be->ba, be->br, be->bdone,
                               c->prioritized ? be->bw : NULL, be->baux, be->bregime,
                               be->btau, be->btau_next};
    fox_cpu_net_hparams hp = {powf(c->gamma, (float)c->n_step),
                              c->iqn_lambda,
                              c->aux_lambda,
                              aux_scale,
                              c->target_mode,
                              c->bdq_trunk_scale};
    fox_cpu_net_loss loss;
    int rv = fox_cpu_net_loss_grad(be->net, be->params, be->target, &batch, &hp, &loss, be->grads,
                                   be->bprio);
    if (rv != FOX_OK)
        return rv;
    fox_cpu_stab_q_dir_signal(sb, loss.q_dir_abs);
    fox_cpu_stab_point(sb, FOX_SENT_GRADS, be->grads, be->np);
    double norm;
    float scale = fox_cpu_stab_grad_clip(sb, &norm);
    be->ctr.adam_t++;
    fox_cpu_stab_adam(sb, be->ctr.adam_t, scale);
    fox_cpu_stab_point(sb, FOX_SENT_PARAMS, be->params, be->np);
    fox_cpu_stab_point(sb, FOX_SENT_TRUNK_ADAM_M_MAX, be->adam_m, be->np);
    fox_cpu_stab_point(sb, FOX_SENT_TRUNK_ADAM_V_MAX, be->adam_v, be->np);
    fox_cpu_stab_post_adam(sb);
    be->ctr.train_steps++;
    if (c->polyak > 0.0f)
        fox_cpu_target_sync(be->target, be->params, be->np, c->polyak);
    else if (be->ctr.train_steps % c->target_sync == 0)
        fox_cpu_target_sync(be->target, be->params, be->np, 0.0f);
    fox_cpu_stab_point(sb, FOX_SENT_REPLAY_PRIORITIES, be->bprio, (size_t)be->B);
    fox_replay_update(&be->replay, be->bidx, be->bprio, be->B, be->bpushes);
    be->last_loss = (float)loss.total;
    be->last_norm = norm;
    st->loss = (float)loss.total;
    st->loss_c51 = (float)loss.c51;
    st->loss_iqn = (float)loss.iqn;
    st->loss_aux = (float)(loss.aux_ret + loss.aux_regime);
    st->grad_norm = (float)norm;
    /* Summed as the device sums it: each step's float loss, in double. */
    st->loss_sum += (double)st->loss;
    st->trained++;
    return FOX_OK;
}

/*
 * The end of every full step: the fused check (SP2), then the halts. On a
 * halt the message names the slots and the step stops the caller's loop.
 */
static int
end_step(cpu_backend *be, int trained)
{
    fox_cpu_stab_check(&be->stab);
    int rv = fox_cpu_stab_halt(&be->stab, trained, be->last_loss, be->last_norm,
                               &be->base.halt_reason, be->base.err, sizeof be->base.err);
    if (rv == FOX_EHALT)
        be->base.halt_step = be->ctr.step;
    return rv;
}

static int
run_steps(cpu_backend *be, int n, fox_step_stats *st)
{
    const fox_config *c = be->env.cfg;
    memset(st, 0, sizeof *st);
    int rv = FOX_OK;
    for (int i = 0; i < n && rv == FOX_OK; i++) {
        int ready = be->replay.size >= c->learning_starts && be->replay.size >= be->B;
        float eps = ready ? epsilon(be) : c->eps_start;
        fox_cpu_stab_begin_step(&be->stab, be->ctr.train_steps, ready);
        /*
         * The collection acts on the train step's atoms, or without one on the grid in the
         * ISV, which a checkpoint or a fold reset may have rewritten since (the CUDA backend's
         * collection-only graph does the same).
         */
        if (ready)
            train_begin(be);
        else
            fox_cpu_stab_sync_atoms(&be->stab);
        rv = collect(be, eps);
        if (rv == FOX_OK && ready)
            rv = train_end(be, st);
        if (rv != FOX_OK)
            return rv;
        be->ctr.step++;
        st->epsilon = eps;
        rv = end_step(be, ready);
    }
    st->step = be->ctr.step;
    st->env_steps = be->ctr.env_steps;
    return rv;
}

static int
train_only(cpu_backend *be, int n, fox_step_stats *st)
{
    if (be->replay.size < be->B || be->replay.size < be->env.cfg->learning_starts)
        return FOX_ESTATE;
    memset(st, 0, sizeof *st);
    int rv = FOX_OK;
    for (int i = 0; i < n && rv == FOX_OK; i++) {
        fox_cpu_stab_begin_step(&be->stab, be->ctr.train_steps, 1);
        train_begin(be);
        if ((rv = train_end(be, st)) == FOX_OK)
            rv = end_step(be, 1);
    }
    return rv;
}

/* The CPU runs a chunk when it starts; finishing it hands over what it returned. */
static int
cpu_start_steps(fox_backend *be_, int n, int collect)
{
    cpu_backend *be = (cpu_backend *)be_;
    memset(&be->chunk_stats, 0, sizeof be->chunk_stats);
    be->chunk_rv = collect ? run_steps(be, n, &be->chunk_stats)
                           : train_only(be, n, &be->chunk_stats);
    return FOX_OK;
}

static int
cpu_finish_steps(fox_backend *be_, fox_step_stats *st)
{
    cpu_backend *be = (cpu_backend *)be_;
    *st = be->chunk_stats;
    return be->chunk_rv;
}

/*
 * The evaluation's Q: of the online weights, or of their Polyak average
 * (policy.weights). The CPU computes a pass when it finishes: the caller
 * keeps the states until then, and no buffer of the pass's Q is needed.
 */
static int
cpu_q_start(fox_backend *be_, const float *s, int B)
{
    cpu_backend *be = (cpu_backend *)be_;
    be->pass_s = s;
    be->pass_B = B;
    return s && B >= 1 ? FOX_OK : FOX_EINVAL;
}

static int
cpu_q_finish(fox_backend *be_, float *q)
{
    cpu_backend *be = (cpu_backend *)be_;
    if (!be->pass_s || be->pass_B < 1 || !q)
        return FOX_EINVAL;
    int average = be->env.cfg->eval_weights == FOX_EVAL_WEIGHTS_AVERAGE;
    fox_cpu_stab_sync_atoms(&be->stab);
    int rv = fox_cpu_net_q_values(be->net, average ? be->target : be->params, be->pass_s,
                                  be->pass_B, q);
    be->pass_s = NULL;
    return rv;
}

static int
cpu_state_io(fox_backend *be_, int load, float *params, float *target, float *adam_m,
             float *adam_v, fox_train_counters *c)
{
    cpu_backend *be = (cpu_backend *)be_;
    size_t bytes = be->np * sizeof(float);
    if (load) {
        memcpy(be->params, params, bytes);
        memcpy(be->target, target, bytes);
        memcpy(be->adam_m, adam_m, bytes);
        memcpy(be->adam_v, adam_v, bytes);
        be->ctr = *c;
        be->rng_collect.s = c->rng_state[0];
        be->rng_sample.s = c->rng_state[1];
    } else {
        if (params)
            memcpy(params, be->params, bytes);
        if (target)
            memcpy(target, be->target, bytes);
        if (adam_m)
            memcpy(adam_m, be->adam_m, bytes);
        if (adam_v)
            memcpy(adam_v, be->adam_v, bytes);
        if (c) {
            *c = be->ctr;
            c->rng_state[0] = be->rng_collect.s;
            c->rng_state[1] = be->rng_sample.s;
        }
    }
    return FOX_OK;
}

static int
cpu_arm_fault(fox_backend *be_, int slot, int kind, int64_t step)
{
    cpu_backend *be = (cpu_backend *)be_;
    fox_cpu_stab_arm_fault(&be->stab, slot, kind, step);
    return FOX_OK;
}

const fox_backend_ops fox_cpu_backend_ops = {
    .name = "cpu",
    .arm_fault = cpu_arm_fault,
    .eval_lookahead = 1,
    .available = cpu_available,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .begin_fold = cpu_begin_fold,
    .reset_for_fold = cpu_reset_for_fold,
    .start_steps = cpu_start_steps,
    .finish_steps = cpu_finish_steps,
    .q_start = cpu_q_start,
    .q_finish = cpu_q_finish,
    .state_io = cpu_state_io,
};
