/*
 * step.c — the CUDA backend's step: one collection from every environment,
 * one train step and the target update, enqueued on the device's streams
 * and captured into CUDA graphs, one per kind of step (collect only, full,
 * train only), replayed until the fold ends or the graphs are dropped (a
 * fault armed, the math changed). A population's members (pop.c) run a
 * round of their chunks as one step: member 0's, captured with every
 * launch and product covering all of them.
 *
 * Not here: the math each stage launches (net.c, *.cu), the device state
 * (backend.c), the fused check's table (table.c). One thread a backend: its
 * engine's; the eager first step and the captures hold the context's
 * section, so that no other engine's allocation or module load meets them.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/backend_impl.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/ctx.h"
#include "gpu/cuda/adam.h"
#include "gpu/cuda/atoms.h"
#include "gpu/cuda/check.h"
#include "gpu/cuda/collect.h"
#include "gpu/cuda/net.h"
#include "gpu/cuda/per.h"
#include "gpu/cuda/sp4.h"

/* The configured fault's injection at slot's point (stab.c's point), only at that slot. */
static int
point(fox_cuda_backend *be, int s, int slot, float *p, float *p2, int after_count)
{
    if (be->net.fault_slot != slot)
        return FOX_OK;
    return fox__cuda_inject(be->net.st[s], &be->net.stab, p, p2, after_count);
}

/* One collection from every environment on stream s; trains: the step trains too. */
static int
enqueue_collect(fox_cuda_backend *be, int s, int trains)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t st = n->st[s];
    FOX_TRY(fox__cuda_collect_state(st, &be->cc, be->envs, be->xcol));
    /* A fault is armed only in a step that trains (fox_cpu_stab_begin_step). */
    if (trains)
        FOX_TRY(point(be, s, FOX_SENT_ENV_OBS, be->xcol, NULL, 0));
    FOX_TRY(fox__cuda_forward(n, s, &be->col, be->xcol, be->N, 0, 0, 0));
    FOX_TRY(fox__cuda_collect_act(st, &be->cc, be->fold, be->envs, be->wbar, be->wport, be->wa,
                                  be->wr, be->col.q, be->ctl, be->staged, be->counts));
    FOX_TRY(fox__cuda_collect_push(st, &be->cc, be->staged, be->counts, be->ring, be->ctl));
    if (be->prioritized)
        FOX_TRY(fox__cuda_per_push(st, &be->per, be->counts, be->N));
    return FOX_OK;
}

/*
 * A train step, and in a full step (collect) the collection beside it: the
 * batch is drawn (prioritized: by per.cu's tree) and gathered from the ring
 * as it stood before this step's push (the CPU backend's order), so the
 * collection, with the tree's leaves of its pushes, can run on its own
 * stream from the gather (and the pre-step's atoms it acts on) until the
 * optimizer; the priorities go into the tree after the step's points.
 * Ends with the target update and re-pack forked onto LATE and, on MAIN,
 * the points after the step's statistics, where the fused check follows
 * (with dependent launch: no cross-stream wait before it).
 */
static int
enqueue_train(fox_cuda_backend *be, int collect)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    fox_cuda_batch *bt = &n->bt;
    size_t BS = (size_t)be->B * be->S;
    if (be->prioritized)
        FOX_TRY(fox__cuda_per_sample(s0, &be->per, be->ctl, bt->idx));
    FOX_TRY(fox__cuda_gather(s0, &be->cc, be->ring, be->d_regime, be->lay->NT, be->ctl, bt));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_STATES, bt->s2, NULL, 0));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_NEXT_STATES, bt->s2 + BS, NULL, 0));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_REWARDS, bt->r, NULL, 0));
    FOX_TRY(fox__cuda_pre_step(s0, &n->stab, be->B, bt->aux));
    FOX_TRY(fox__cuda_atoms_update(s0, &n->stab, be->B, bt->r, bt->done, be->hp.gamma_n,
                                   be->lay->n_branches, be->lay->NA, be->lay->v_min,
                                   be->lay->v_max, n->z));
    int cs = FOX_CUDA_MAIN;
    if (collect) {
        FOX_TRY(fox__cuda_fork(n, FOX_CUDA_COLLECT, &cs));
        FOX_TRY(enqueue_collect(be, cs, 1));
    }
    FOX_TRY(fox__cuda_loss_grad(n, &be->hp));
    FOX_TRY(fox__cuda_dep(n, cs, FOX_CUDA_MAIN));
    FOX_TRY(fox__cuda_optim(n, &be->oc, be->ctl, be->isv_dev, be->isv_map));
    /* The re-pack beside the fused check, which reads nothing it writes. */
    int ps;
    FOX_TRY(fox__cuda_fork(n, FOX_CUDA_LATE, &ps));
    FOX_TRY(fox__cuda_repack(n, ps, &be->oc, be->ctl));
    /* After the step was counted: the losses and the priorities. */
    float *ctl = (float *)be->ctl;
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_AUX_LOSS, ctl + offsetof(fox_cuda_ctl, loss_aux) / 4,
                  NULL, 1));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_TOTAL_LOSS, ctl + offsetof(fox_cuda_ctl, loss) / 4,
                  NULL, 1));
    FOX_TRY(point(be, FOX_CUDA_MAIN, FOX_SENT_REPLAY_PRIORITIES, bt->prio, NULL, 1));
    if (be->prioritized)
        FOX_TRY(fox__cuda_per_update(n->st[FOX_CUDA_MAIN], &be->per, bt->idx, bt->prio));
    return FOX_OK;
}

/*
 * A step ends with the fused check and the halts on MAIN, then the ISV
 * published (the optimizer's finish kernel already did in a training
 * step), and every stream forked during it joined back into MAIN. In a
 * training step the check runs beside the heads' re-pack, which writes
 * nothing it reads (the packed copies and the target net).
 */
static int
enqueue(fox_cuda_backend *be, int kind)
{
    fox_cuda_net *n = &be->net;
    if (kind == G_COLLECT) {
        /*
         * The atoms of the grid in the ISV, which a checkpoint or a fold reset may have
         * rewritten since the last train step; then, on the collection's stream (its cuBLAS
         * handle's math), the collection as in a full step.
         */
        FOX_TRY(fox__cuda_atoms_update(n->st[FOX_CUDA_MAIN], &n->stab, 0, NULL, NULL, 0.0f,
                                       be->lay->n_branches, be->lay->NA, be->lay->v_min,
                                       be->lay->v_max, n->z));
        int cs;
        FOX_TRY(fox__cuda_fork(n, FOX_CUDA_COLLECT, &cs));
        FOX_TRY(enqueue_collect(be, cs, 0));
        FOX_TRY(fox__cuda_dep(n, cs, FOX_CUDA_MAIN));
    } else
        FOX_TRY(enqueue_train(be, kind == G_FULL));
    FOX_TRY(fox__cuda_check(n->st[FOX_CUDA_MAIN], &n->stab, be->d_chunks, be->n_chunks,
                            kind != G_COLLECT));
    if (kind == G_COLLECT)
        FOX_TRY(
            fox__cuda_publish(n->st[FOX_CUDA_MAIN], be->isv_dev, be->isv_map, FOX_ISV_TOTAL_DIM));
    return fox__cuda_join_all(n);
}

/* The eager step, inside the context's section (ctx.h). */
static int
eager_in_section(fox_cuda_backend *be, int kind)
{
    fox__cuda_section_enter();
    int rv = enqueue(be, kind);
    fox__cuda_section_leave();
    return rv;
}

/* The steps of one graph: `count` steps of a kind in a row (1, or be->unroll). */
typedef struct steps_of {
    int kind, count;
} steps_of;

static int
enqueue_steps(fox_cuda_backend *be, const void *arg)
{
    const steps_of *sk = arg;
    for (int i = 0; i < sk->count; i++)
        FOX_TRY(enqueue(be, sk->kind));
    return FOX_OK;
}

static int
capture_in_section(fox_cuda_backend *be, int kind, int count, cudaGraphExec_t *out)
{
    steps_of sk = {kind, count};
    return fox__cuda_capture(be, enqueue_steps, &sk, cudaGraphInstantiateFlagUseNodePriority, out);
}

/*
 * count steps of a kind, from be's step with the graphs `graph` and warm flags `warm` (be's own,
 * or its population's, whose launches cover every member). The first of each kind runs eagerly
 * (it loads every kernel's module outside any capture); the next capture the graphs every later
 * one replays: unroll steps to a launch while that many are left (a step inside a graph starts
 * without the delay a graph's launch puts before its second node), then one step to a launch.
 */
static int
steps_with(fox_cuda_backend *be, cudaGraphExec_t graph[G_KINDS][2], int warm[G_KINDS], int kind,
           int count)
{
    if (count > 0 && !warm[kind]) {
        warm[kind] = 1;
        FOX_TRY(eager_in_section(be, kind));
        count--;
    }
    cudaStream_t s0 = be->net.st[0];
    for (; count >= be->unroll && be->unroll > 1; count -= be->unroll) {
        if (!graph[kind][1])
            FOX_TRY(capture_in_section(be, kind, be->unroll, &graph[kind][1]));
        FOX_CUDA_TRY(cudaGraphLaunch(graph[kind][1], s0));
    }
    for (; count > 0; count--) {
        if (!graph[kind][0])
            FOX_TRY(capture_in_section(be, kind, 1, &graph[kind][0]));
        FOX_CUDA_TRY(cudaGraphLaunch(graph[kind][0], s0));
    }
    return FOX_OK;
}

static int
steps(fox_cuda_backend *be, int kind, int count)
{
    return steps_with(be, be->graph, be->warm, kind, count);
}

/* Take the host's ISV writes, clear the chunk's train count. */
static int
chunk_begin(fox_cuda_backend *be)
{
    cudaStream_t s0 = be->net.st[0];
    FOX_CUDA_TRY(cudaMemcpyAsync(be->isv_dev, be->isv_mem, FOX_ISV_TOTAL_DIM * sizeof(float),
                                 cudaMemcpyHostToDevice, s0));
    FOX_CUDA_TRY(cudaMemsetAsync(&be->ctl->trained, 0, sizeof be->ctl->trained, s0));
    FOX_CUDA_TRY(cudaMemsetAsync(&be->ctl->loss_sum, 0, sizeof be->ctl->loss_sum, s0));
    return FOX_OK;
}

/*
 * The end of a run of steps: in adaptive mode the last Adam step's Pearl B
 * (its second pass, which a step defers to the next one, fox__cuda_loss_grad) and
 * the ISV published, so that the host reads, and the next chunk_begin takes
 * back, the ISV of the CPU's step order; then the device's ctl.
 */
static int
chunk_end(fox_cuda_backend *be)
{
    fox_cuda_net *n = &be->net;
    if (n->stab.adaptive) {
        cudaStream_t s0 = n->st[0];
        /* Its pass 1 ran after that Adam, in the step (fox__cuda_optim). */
        FOX_TRY(
            fox__cuda_post_adam_pass2(s0, &n->stab, 1, be->np, n->params, n->adam_m, n->adam_v));
        FOX_TRY(fox__cuda_publish(s0, be->isv_dev, be->isv_map, FOX_ISV_TOTAL_DIM));
    }
    return fox__cuda_sync_ctl(be);
}

static void
stats_of(const fox_cuda_ctl *h, fox_step_stats *st)
{
    if (h->trained > 0) {
        st->loss = h->loss;
        st->loss_c51 = h->loss_c51;
        st->loss_iqn = h->loss_iqn;
        st->loss_aux = h->loss_aux;
        st->grad_norm = h->grad_norm;
        st->loss_sum = h->loss_sum;
        st->trained = h->trained;
    }
}

/*
 * The halts the device decided (check_kernel's last block), after a chunk's
 * sync: FOX_EHALT with halt_reason and the message the CPU gives. The
 * device notices a halt at the step it happens and from then on moves no
 * parameter (Adam skips); the host learns of it at the end of the chunk.
 */
static int
halted(fox_cuda_backend *be)
{
    const fox_cuda_ctl *h = be->hctl;
    if (h->halt == FOX_HALT_NONE)
        return FOX_OK;
    be->base.halt_reason = h->halt;
    be->base.halt_step = h->halt_step;
    fox_sentinel_halt_message(be->base.err, sizeof be->base.err, h->halt, be->flags_mem,
                              h->halt_loss, h->halt_norm);
    return FOX_EHALT;
}

/* be's chunk of n steps on its own graphs, after chunk_begin. */
static int
steps_alone(fox_cuda_backend *be, int n, int collect)
{
    const fox_config *c = be->cfg;
    if (!collect)
        return steps(be, G_TRAIN, n);
    int i = 0, halt = 0;
    /* Until the ring is ready a step only collects; readiness is known after it. */
    for (; i < n && !be->ready && !halt; i++) {
        FOX_TRY(steps(be, G_COLLECT, 1));
        FOX_TRY(fox__cuda_sync_ctl(be));
        halt = be->hctl->halt != FOX_HALT_NONE;
        be->ready = be->hctl->ring_size >= c->learning_starts && be->hctl->ring_size >= be->B;
    }
    if (!halt)
        FOX_TRY(steps(be, G_FULL, n - i));
    return FOX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* A population's round: the members' chunks as one step                                      */

/*
 * May pop's round run as one step of all its members? The step is member 0's, captured with
 * every launch covering all K, so every member takes part in it: each must have started its
 * chunk or be frozen by a halt (whose steps move no weight), and none may still be filling its
 * ring (a member steps alone until its ring is ready, as it would alone; a frozen member's ring
 * must hold a batch for the step's draw). A fault armed is a point of member 0's step: the
 * members step together only where every member has one at the same slot (each member's own
 * counters then say whether and when it fires), or none.
 */
static int
pop_together(const fox_cuda_pop *pop)
{
    for (int k = 0; k < pop->K; k++) {
        const fox_cuda_backend *m = pop->be[k];
        if (!m || !m->ready || m->net.fault_slot != pop->be[0]->net.fault_slot)
            return 0;
        if (!pop->started[k] && m->hctl->halt == FOX_HALT_NONE)
            return 0;
    }
    return 1;
}

/*
 * The round: one launch of the population's graphs on member 0's streams, after every member's
 * own work (its chunk_begin, a fold's reset) and before any member's next (its chunk_end), or
 * else each started member's chunk alone.
 */
static int
pop_round(fox_cuda_pop *pop)
{
    if (!pop_together(pop)) {
        pop->rounds_alone++;
        int rv = FOX_OK;
        for (int k = 0; k < pop->K && rv == FOX_OK; k++)
            if (pop->started[k])
                rv = steps_alone(pop->be[k], pop->n, pop->collect);
        return rv;
    }
    pop->rounds_together++;
    fox_cuda_backend *b0 = pop->be[0];
    cudaStream_t s0 = b0->net.st[0];
    for (int k = 1; k < pop->K; k++) {
        FOX_CUDA_TRY(cudaEventRecord(pop->ev_member[k], pop->be[k]->net.st[0]));
        FOX_CUDA_TRY(cudaStreamWaitEvent(s0, pop->ev_member[k], 0));
    }
    fox__cuda_set_launch_members(pop->K, &pop->ptrs);
    int rv = steps_with(b0, pop->graph, pop->warm, pop->collect ? G_FULL : G_TRAIN, pop->n);
    fox__cuda_set_launch_members(1, NULL);
    FOX_TRY(rv);
    FOX_CUDA_TRY(cudaEventRecord(pop->ev_done, s0));
    for (int k = 1; k < pop->K; k++)
        FOX_CUDA_TRY(cudaStreamWaitEvent(pop->be[k]->net.st[0], pop->ev_done, 0));
    return FOX_OK;
}

int
fox__cuda_start_steps(fox_cuda_backend *be, int n, int collect)
{
    FOX_TRY(chunk_begin(be));
    fox_cuda_pop *pop = be->pop;
    if (!pop)
        return steps_alone(be, n, collect);
    /* A round's starts come first, then its finishes: the first finish runs it. */
    if (pop->ran) {
        memset(pop->started, 0, sizeof pop->started);
        pop->ran = 0;
    }
    pop->started[be->member] = 1;
    pop->n = n;
    pop->collect = collect;
    return FOX_OK;
}

int
fox__cuda_finish_steps(fox_cuda_backend *be, fox_step_stats *st)
{
    fox_cuda_pop *pop = be->pop;
    if (pop) {
        if (!pop->ran) {
            pop->rv = pop_round(pop);
            pop->ran = 1;
        }
        FOX_TRY(pop->rv);
    }
    FOX_TRY(chunk_end(be));
    stats_of(be->hctl, st);
    int rv = halted(be);
    /*
     * The device ran the halted chunk to its end, moving no weight; the fold stopped at the
     * halt's step, where the CPU backend stops, and that is the step its counters keep (status,
     * the fold's report), whatever the chunk's length.
     */
    if (rv == FOX_EHALT && be->hctl->step != be->hctl->halt_step) {
        be->hctl->step = be->hctl->halt_step;
        FOX_TRY(fox__cuda_put_ctl(be));
    }
    st->epsilon = be->hctl->eps;
    st->step = be->hctl->step;
    st->env_steps = be->hctl->env_steps;
    return rv;
}
