/*
 * table.c — the CUDA backend's stability tables: every sentinel buffer of
 * the GPU step in the fused check's table (stab.c's watch_buffers, on device
 * buffers), cut into the check kernel's chunks; the slots' rules; and the
 * arming of a fault at its slot's point.
 *
 * All of it is set once at construction (a fault may be armed again between
 * chunks); the kernels that read it are check.cu's. Single thread: the
 * trainer's.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/backend_impl.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/ctx.h"
#include "gpu/cuda/sp4.h"

static int
watch(fox_cuda_backend *be, int slot, const float *ptr, int rows, int cols, int ld)
{
    if (!ptr || rows < 1 || cols < 1)
        return FOX_OK;
    if (be->n_checks == FOX_CUDA_MAX_CHECKS)
        return FOX_EINTERNAL;
    be->checks[be->n_checks++] = (fox_cuda_check){ptr, slot, rows, cols, ld};
    return FOX_OK;
}

static int
watch_run(fox_cuda_backend *be, int slot, const float *ptr, size_t len)
{
    return watch(be, slot, ptr, 1, (int)len, (int)len);
}

/* The runs of a params-layout buffer over slot's param groups (fox_cpu_stab_watch_groups). */
static int
watch_groups(fox_cuda_backend *be, int slot, const float *base)
{
    fox_param_run runs[FOX_P_COUNT];
    int n = fox_sentinel_param_runs(slot, be->lay, runs);
    for (int k = 0; k < n; k++)
        FOX_TRY(watch_run(be, slot, base + runs[k].offset, runs[k].len));
    return FOX_OK;
}

/* The first watched element of slot (its table entry's start), or NULL. */
static float *
first_of(const fox_cuda_backend *be, int slot)
{
    for (int k = 0; k < be->n_checks; k++)
        if (be->checks[k].slot == slot)
            return (float *)be->checks[k].ptr;
    return NULL;
}

/*
 * Every sentinel buffer the GPU step has, with the CPU's slot meaning; the
 * inline slots (12, 33–35) and reserved ones are no entries. Where the GPU
 * keeps a buffer in another shape the entry says so: v/adv logits and their
 * gradients are column ranges of the packed head outputs (before the output
 * biases, whose own NaN the params slot sees); aux_loss and total_loss are
 * the step's scalars in ctl.
 */
static int
build_table(fox_cuda_backend *be)
{
    fox_cuda_net *n = &be->net;
    const fox_cuda_dims *dm = &n->dm;
    int B = be->B, S = be->S, H2 = dm->H2, NT = dm->NT, NAct = dm->NAct;
    int rq = B * NT, lpw = NAct * dm->NA;
    fox_cuda_fwd *on = &n->on;
    float *ctl = (float *)be->ctl;
    FOX_TRY(watch(be, FOX_SENT_STATES, n->bt.s2, B, S, S));
    FOX_TRY(watch(be, FOX_SENT_V_LOGITS, on->out, B, dm->NA, dm->OW));
    FOX_TRY(watch(be, FOX_SENT_ADV_LOGITS, on->out + dm->OS, B, dm->D * dm->OS, dm->OW));
    FOX_TRY(watch_run(be, FOX_SENT_AUX_LOSS, ctl + offsetof(fox_cuda_ctl, loss_aux) / 4, 1));
    FOX_TRY(watch(be, FOX_SENT_NEXT_STATES, n->bt.s2 + (size_t)B * S, B, S, S));
    FOX_TRY(watch(be, FOX_SENT_TARGET_LOGITS, n->tg.logp, B, lpw, lpw));
    FOX_TRY(watch_run(be, FOX_SENT_GRADS, n->grads, be->np));
    FOX_TRY(watch_run(be, FOX_SENT_CURRENT_LP, on->logp, (size_t)B * dm->D * dm->NA));
    FOX_TRY(watch_run(be, FOX_SENT_PROJECTED, n->proj, (size_t)B * dm->D * dm->NA));
    FOX_TRY(watch(be, FOX_SENT_IQN_Q_ONLINE, n->iq.q, rq, NAct, NAct));
    FOX_TRY(watch(be, FOX_SENT_IQN_Q_TARGET, n->iq.q + (size_t)rq * NAct, rq, NAct, NAct));
    FOX_TRY(watch_run(be, FOX_SENT_TD_ERRORS, n->bt.prio, B));
    FOX_TRY(watch(be, FOX_SENT_H_S1, on->g1.y, B, dm->H1, dm->H1));
    FOX_TRY(watch_run(be, FOX_SENT_PARAMS, n->params, be->np));
    FOX_TRY(watch_run(be, FOX_SENT_REWARDS, n->bt.r, B));
    FOX_TRY(watch(be, FOX_SENT_H_S2_ETA2, on->g2.eta2, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_H_S2_ETA1, on->g2.eta1, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_H_S2_GATE, on->g2.zgv, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_H_S2_GLU, n->glu, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_H_S2_LN_IN, n->ln_in, B, H2, H2));
    FOX_TRY(watch_run(be, FOX_SENT_TOTAL_LOSS, ctl + offsetof(fox_cuda_ctl, loss) / 4, 1));
    FOX_TRY(watch(be, FOX_SENT_ENV_OBS, be->xcol, be->N, S, S));
    FOX_TRY(watch_run(be, FOX_SENT_REPLAY_PRIORITIES, n->bt.prio, B));
    FOX_TRY(watch(be, FOX_SENT_D_V_LOGITS, n->bw.dout, B, dm->NA, dm->OW));
    FOX_TRY(watch(be, FOX_SENT_D_ADV_LOGITS, n->bw.dout + dm->OS, B, dm->D * dm->OS, dm->OW));
    FOX_TRY(watch(be, FOX_SENT_IQN_TRUNK_GRAD, n->bw.d_x, rq, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_IQN_D_H_S2, n->bw.dh_iqn, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_D_IQN_Q, n->bw.d_q, rq, NAct, NAct));
    FOX_TRY(watch(be, FOX_SENT_AUX_D_H_S2, n->bw.dh_aux, B, H2, H2));
    FOX_TRY(watch(be, FOX_SENT_D_STATES, n->d_states, B, S, S));
    for (int i = FOX_SENT_HALT_END; i < FOX_SENTINEL_SLOTS; i++) {
        const char *buf = fox_sentinel_buffer(i);
        const float *base = strcmp(buf, "params") == 0   ? n->params
                            : strcmp(buf, "adam_m") == 0 ? n->adam_m
                            : strcmp(buf, "adam_v") == 0 ? n->adam_v
                                                         : NULL;
        if (base)
            FOX_TRY(watch_groups(be, i, base));
    }
    FOX_TRY(watch(be, FOX_SENT_TARGET_Q_POST_CLIP, n->tq, B, dm->D * NT, dm->D * NT));
    FOX_TRY(watch_run(be, FOX_SENT_ATOM_SPAN_MAX, n->z, (size_t)dm->D * dm->NA));
    FOX_TRY(watch(be, FOX_SENT_H_S2_MAX_ABS, on->g2.y, B, H2, H2));
    return FOX_OK;
}

/*
 * Arm a fault (fox_cpu_stab_arm_fault): its slot, value and train step in
 * ctl for the device, its point on the host. Which launch injects depends on
 * the slot, so the graphs are captured again at the next step.
 */
int
fox__cuda_arm(fox_cuda_backend *be, int slot, int kind, int64_t step)
{
    fox_cuda_net *n = &be->net;
    FOX_TRY(fox__cuda_sync_ctl(be));
    be->hctl->fault_slot = slot;
    be->hctl->fault_value = kind == FOX_FAULT_NAN ? NAN : kind == FOX_FAULT_INF ? INFINITY : 1e30f;
    be->hctl->fault_step = step;
    be->hctl->fault_done = 0;
    n->fault_slot = slot;
    n->stab.ctl_fault_inline = slot == FOX_SENT_D_H_S2_POST_AUX || slot == FOX_SENT_IQN_D_H_S2 ||
                               slot == FOX_SENT_D_H_S2_POST_IQN;
    /* Points after Adam take the fault at the slot's first watched element (stab.c). */
    int post_adam = slot == FOX_SENT_PARAMS ||
                    (slot >= FOX_SENT_TRUNK_ADAM_M_MAX && slot <= FOX_SENT_IQN_WEIGHT_MAX &&
                     slot != FOX_SENT_TARGET_Q_POST_CLIP && slot != FOX_SENT_ATOM_SPAN_MAX);
    n->fault_at = post_adam ? first_of(be, slot) : NULL;
    fox__cuda_drop_graphs(be);
    return fox__cuda_put_ctl(be);
}

static int
contiguous(const fox_cuda_check *e)
{
    return e->rows == 1 || e->ld == e->cols;
}

/*
 * The fused check's blocks over table tab [n] into chunks (NULL: count
 * only); returns their number. Each entry is cut into runs of at most
 * FOX_CUDA_CHUNK floats (a span entry is one chunk; a strided one whole
 * rows, one at least), except that a
 * contiguous max-|x| threshold entry lying inside a contiguous non-finite
 * one (a weight bound's group run inside params) is not read twice: the
 * outer entry's chunks are cut at its ends and carry its slot as well.
 */
static int
cut_chunks(const fox_cuda_check *tab, int n, fox_cuda_chunk *chunks)
{
    int inside[FOX_CUDA_MAX_CHECKS], count = 0;
    for (int i = 0; i < n; i++) {
        const fox_cuda_check *e = &tab[i];
        const fox_sentinel_slot_info *si = fox_sentinel_info(e->slot);
        inside[i] = -1;
        if (si->kind != FOX_SENT_KIND_THRESHOLD || si->measure != FOX_SENT_MEASURE_MAX_ABS ||
            !contiguous(e))
            continue;
        const float *lo = e->ptr, *hi = e->ptr + (size_t)e->rows * e->cols;
        for (int j = 0; j < n && inside[i] < 0; j++) {
            const fox_cuda_check *o = &tab[j];
            if (fox_sentinel_info(o->slot)->kind == FOX_SENT_KIND_NONFINITE && contiguous(o) &&
                lo >= o->ptr && hi <= o->ptr + (size_t)o->rows * o->cols)
                inside[i] = j;
        }
        for (int k = 0; k < i && inside[i] >= 0; k++) /* runs of one outer entry are disjoint */
            if (inside[k] == inside[i] && lo < tab[k].ptr + (size_t)tab[k].rows * tab[k].cols &&
                tab[k].ptr < hi)
                inside[i] = -1;
    }
    for (int j = 0; j < n; j++) {
        if (inside[j] >= 0)
            continue;
        const fox_cuda_check *e = &tab[j];
        const fox_sentinel_slot_info *si = fox_sentinel_info(e->slot);
        int threshold = si->kind == FOX_SENT_KIND_THRESHOLD;
        int span = si->measure == FOX_SENT_MEASURE_SPAN;
        /* A strided entry in whole rows, which the kernel can then read 16 bytes at a time. */
        int len = e->rows * e->cols, rows_in = FOX_CUDA_CHUNK / e->cols;
        int step = span            ? len
                   : contiguous(e) ? FOX_CUDA_CHUNK
                                   : (rows_in > 1 ? rows_in : 1) * e->cols;
        for (int at = 0; at < len;) {
            int end = at + step < len ? at + step : len;
            int inner = -1;
            for (int i = 0; i < n; i++) {
                if (inside[i] != j)
                    continue;
                int lo = (int)(tab[i].ptr - e->ptr), hi = lo + tab[i].rows * tab[i].cols;
                if (lo <= at && at < hi)
                    inner = i;
                if (lo <= at && hi < end && at < hi)
                    end = hi;
                else if (at < lo && lo < end)
                    end = lo;
            }
            if (chunks)
                chunks[count] = (fox_cuda_chunk){e->ptr,
                                                 at,
                                                 end - at,
                                                 e->cols,
                                                 e->ld,
                                                 (short)(threshold ? -1 : e->slot),
                                                 (short)(threshold    ? e->slot
                                                         : inner >= 0 ? tab[inner].slot
                                                                      : -1),
                                                 span};
            count++;
            at = end;
        }
    }
    return count;
}

int
fox__cuda_upload_chunks(const fox_cuda_check *tab, int n, fox_cuda_chunk **out, int *n_out)
{
    int nc = cut_chunks(tab, n, NULL);
    fox_cuda_chunk *chunks = malloc((size_t)(nc > 0 ? nc : 1) * sizeof *chunks);
    if (!chunks)
        return FOX_ENOMEM;
    cut_chunks(tab, n, chunks);
    int rv = fox__cuda_alloc(out, (size_t)(nc > 0 ? nc : 1) * sizeof *chunks);
    cudaError_t ce =
        rv == FOX_OK ? cudaMemcpy(*out, chunks, (size_t)nc * sizeof *chunks, cudaMemcpyHostToDevice)
                     : cudaSuccess;
    free(chunks);
    *n_out = nc;
    FOX_TRY(rv);
    FOX_CUDA_TRY(ce);
    return FOX_OK;
}

int
fox__cuda_stab_init(fox_cuda_backend *be, char *err, size_t errlen)
{
    const fox_config *c = be->cfg;
    fox_cuda_net *n = &be->net;
    fox_cuda_rule rules[FOX_SENTINEL_SLOTS];
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        const fox_sentinel_slot_info *si = fox_sentinel_info(i);
        /* Under the seeds rule no slot halts: a set slot only flags (fox_halt_decide). */
        int halt = c->halt_rule == FOX_HALT_RULE_STRICT && fox_sentinel_is_halt(i);
        rules[i] = (fox_cuda_rule){si->kind,  si->measure, si->base, si->power,
                                   si->site,  halt,        si->mult};
    }
    FOX_TRY(fox__cuda_alloc(&be->d_rules, sizeof rules));
    FOX_CUDA_TRY(cudaMemcpy(be->d_rules, rules, sizeof rules, cudaMemcpyHostToDevice));
    /* A double a block of the site's grid, or of GRN2's tail where it runs there. */
    size_t site_blocks = ((size_t)be->B + FOX_CUDA_TAIL_ROWS - 1) / FOX_CUDA_TAIL_ROWS;
    if (site_blocks < FOX_CUDA_SITE_BLOCKS)
        site_blocks = FOX_CUDA_SITE_BLOCKS;
    FOX_TRY(fox__cuda_alloc(&be->site_part, site_blocks * sizeof(double)));
    FOX_TRY(fox__cuda_alloc(&be->sp4, sizeof *be->sp4));
    FOX_TRY(fox__cuda_sp4_reset(n->st[0], be->sp4));
    int rv = build_table(be);
    if (rv != FOX_OK) {
        snprintf(err, errlen, "cuda backend: stability table: %s", fox_strerror(rv));
        return rv;
    }
    /*
     * An activation buffer is read by the check before its producer first
     * runs: start it at 0 (not the training state, the support or ctl).
     */
    const float *keep[][2] = {{n->params, n->params + 2 * be->np},
                              {n->adam_m, n->adam_m + be->np},
                              {n->adam_v, n->adam_v + be->np},
                              {n->z, n->z + (size_t)n->dm.D * n->dm.NA},
                              {(const float *)be->ctl, (const float *)(be->ctl + 1)}};
    for (int k = 0; k < be->n_checks; k++) {
        const fox_cuda_check *e = &be->checks[k];
        size_t extent = (size_t)(e->rows - 1) * e->ld + e->cols;
        int state = 0;
        for (size_t j = 0; j < sizeof keep / sizeof keep[0]; j++)
            state |= e->ptr >= keep[j][0] && e->ptr < keep[j][1];
        if (!state)
            FOX_CUDA_TRY(cudaMemset((void *)e->ptr, 0, extent * sizeof(float)));
    }
    FOX_TRY(fox__cuda_upload_chunks(be->checks, be->n_checks, &be->d_chunks, &be->n_chunks));
    n->want_d_states = c->sentinel != 0;
    n->stab = (fox_cuda_stab){.sentinel = c->sentinel != 0,
                              .flags = be->flags_map,
                              .rules = be->d_rules,
                              .isv = be->isv_dev,
                              .ctl = be->ctl,
                              .grad_clip = c->grad_clip,
                              .site_part = be->site_part,
                              .sites = 1,
                              .adaptive = c->bounds_mode == FOX_BOUNDS_ADAPTIVE,
                              .moving_grid = c->atom_grid == FOX_ATOM_GRID_MOVING,
                              .sp4 = be->sp4,
                              .pgroup = n->pgroup};
    /* SP4: Pearl C's totals (each group's elements) and the trunk input layer for the L1 rate. */
    const fox_model_layout *lay = n->lay;
    for (int i = 0; i < FOX_P_COUNT; i++)
        n->stab.gsize[lay->t[i].group] += (unsigned int)fox_tensor_size(lay, i);
    n->stab.l1_off = lay->t[FOX_P_GRN1_W2].offset;
    n->stab.l1_rows = lay->t[FOX_P_GRN1_W2].rows;
    n->stab.l1_cols = lay->t[FOX_P_GRN1_W2].cols;
    if (n->stab.l1_cols > FOX_CUDA_L1_COLS) /* model.state_dim's bound keeps it there */
        return FOX_EINVAL;
    /* debug.inject_fault: a non-"none" kind is the explicit request (stab.c). */
    FOX_TRY(fox__cuda_sync_ctl(be));
    be->hctl->fault_slot = -1;
    n->fault_slot = -1;
    if (c->fault_kind != FOX_FAULT_NONE) {
        int slot = fox_sentinel_fault_slot(c->fault_buffer);
        if (slot < 0) {
            snprintf(err, errlen, "debug.inject_fault.buffer: '%s' names no sentinel buffer",
                     c->fault_buffer);
            return FOX_EINVAL;
        }
        return fox__cuda_arm(be, slot, c->fault_kind, c->fault_step);
    }
    return fox__cuda_put_ctl(be);
}
