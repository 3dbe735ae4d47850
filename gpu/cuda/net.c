/*
 * net.c (CUDA) — foxnet v1's forward, losses, backward and optimizer step
 * as a sequence of cuBLAS products and hand kernels on seven streams, the
 * losses and the backward in loss_grad.c; with it the twin of
 * gpu/cpu/net.c, gpu/cpu/loss_grad.c and gpu/cpu/optim.c.
 *
 * Layout choices, each to cut launches or the critical path:
 *   - the online net's forward on s′, which only picks the double-DQN
 *     argmax, runs on NEXT in TF32 (C51 heads only) beside its forward on
 *     s on MAIN (fox__cuda_set_math);
 *   - the seven heads (value, 4 branches, 2 aux) run as one packed
 *     network, re-packed after every update into zero-padded slots of
 *     equal width (cuda_impl.h): their first layers are one product, their
 *     output layers one strided-batched product (in a forward of 4,096 rows
 *     or more one pointer-batched product by slots of NA outputs, without
 *     the padding), in the forward and in both halves of the backward;
 *   - every forward and input-gradient product goes through gemm.cu, which
 *     applies the stage after it (bias, ELU/ReLU, their backward masks, the
 *     IQN h ⊙ φ) in one epilogue launch; a GRN's W2 and Wr products (same
 *     input) are one strided-batched call, as are its gate and value
 *     products (each pair of tensors sits a fixed distance apart);
 *   - the online and target parameters sit np floats apart, so from
 *     iqn_beside_rows rows the IQN products of both nets are one
 *     strided-batched call (below it each net's runs beside its C51 heads);
 *   - SIDE, SIDE2 and SIDE3 in turn run the target net's forward, the IQN
 *     heads and the weight gradients, NEXT the sentinel-only d_states (in
 *     TF32), neither of which MAIN waits for until the optimizer
 *     (cuda_impl.h's streams), LATE the IQN and aux parts of d h_s2 beside
 *     its C51 part, COLLECT in adaptive mode the last Adam step's Pearl B
 *     (its second pass) beside the backward, joined before Adam;
 *   - a GRN's two-term input gradients (gate and value; skip and W2) are
 *     one product each over copies of the weight pairs side by side
 *     (pairs_init), refreshed with the packed heads.
 * Every buffer a SIDE or LATE product reads is written once per step and
 * not reused later in the step, so the streams never race.
 *
 * The stability points of the CPU's net (its hook) are here too: the
 * configured fault's injection after each sentinel buffer's producer
 * (point), Mech 10 on h_s2 between trunk and heads, the inline checks and
 * Phase C guard of d h_s2 (check.cu); all off in a parity pass
 * (stab.sites 0), like the CPU net without its hook.
 *
 * Not here: the losses' and gradients' launches (loss_grad.c), the step's
 * collection, replay and graphs (step.c), the kernels themselves (*.cu).
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/adam.h"
#include "gpu/cuda/check.h"
#include "gpu/cuda/dueling.h"
#include "gpu/cuda/gemm.h"
#include "gpu/cuda/grn.h"
#include "gpu/cuda/heads.h"
#include "gpu/cuda/iqn.h"
#include "gpu/cuda/matmul.h"
#include "gpu/cuda/net.h"
#include "gpu/cuda/sp4.h"

/* ------------------------------------------------------------------------------------------ */
/* Setup                                                                                      */

/*
 * Every device buffer of the net comes from fox__cuda_alloc, in the same order for every
 * backend: while a population's member is built, that is the next piece of the member's span,
 * so that each buffer lies a whole number of spans from member 0's (cuda_impl.h).
 */
static int
dalloc(void *pp, size_t bytes)
{
    void **p = pp;
    *p = NULL;
    if (bytes == 0)
        return 0;
    return fox__cuda_alloc(p, bytes);
}

#define DALLOC(ptr, count) FOX_TRY(dalloc(&(ptr), (size_t)(count) * sizeof *(ptr)))

size_t
fox__cuda_toff(const fox_cuda_net *n, int tensor)
{
    return n->lay->t[tensor].offset;
}

/*
 * The C51 output slots of f for both nets (fox_cuda_fwd.slots): slot 0 the
 * value head's NA outputs, then NA for every action of every branch, each
 * at its place in the packed heads (head h's row block of W2, its output
 * slot in out), so that the output layer skips the padding that makes
 * every head as wide as the widest. Each list holds n->members lanes of
 * them, lane j this backend's pointers plus j spans: for a population's
 * member 0 those are member j's, so that its step's one product covers
 * every member; any other member's passes read their first lane alone.
 */
static int
slots_init(fox_cuda_fwd *f, const fox_cuda_net *n)
{
    const fox_cuda_dims *dm = &n->dm;
    const size_t S = 1 + (size_t)dm->NAct, list = S * (size_t)n->members;
    float **host = malloc(6 * list * sizeof *host);
    if (!host)
        return FOX_ENOMEM;
    for (int net = 0; net < 2; net++) {
        float **p = host + 3 * list * net, *pk = n->pk + (size_t)net * dm->PK;
        for (int j = 0; j < n->members; j++) {
            /* Lane j: every pointer j spans on (in floats). */
            const size_t span = (size_t)j * (FOX_CUDA_MEMBER_SPAN / sizeof(float));
            size_t sl = (size_t)j * S;
            for (int h = 0; h < FOX_CUDA_C51_HEADS; h++)
                for (int a = 0; a < (h == 0 ? 1 : dm->bsize[h - 1]); a++, sl++) {
                    size_t col = (size_t)h * dm->OS + (size_t)a * dm->NA;
                    p[sl] = f->hid + span + (size_t)h * dm->HS;
                    p[list + sl] = pk + span + dm->pk_w2 + col * dm->HS;
                    p[2 * list + sl] = f->out + span + col;
                }
        }
    }
    int rv = dalloc(&f->slots[0], 6 * list * sizeof *host);
    cudaError_t e = rv == 0 ? cudaMemcpy(f->slots[0], host, 6 * list * sizeof *host,
                                         cudaMemcpyHostToDevice)
                            : cudaSuccess;
    free(host);
    FOX_TRY(rv);
    FOX_CUDA_TRY(e);
    f->slots[1] = f->slots[0] + 3 * list;
    return 0;
}

int
fox__cuda_fwd_alloc(fox_cuda_fwd *f, const fox_cuda_net *n, int R)
{
    const fox_model_layout *lay = n->lay;
    const fox_cuda_dims *dm = &n->dm;
    const int outs[2] = {lay->H1, lay->H2}, skips[2] = {lay->S != lay->H1, lay->H1 != lay->H2};
    fox_cuda_grn_act *g[2] = {&f->g1, &f->g2};
    f->cap = R;
    for (int k = 0; k < 2; k++) {
        size_t len = (size_t)R * outs[k];
        DALLOC(g[k]->eta2, skips[k] ? 2 * len : len);
        DALLOC(g[k]->eta1, len);
        DALLOC(g[k]->zgv, 2 * len);
        DALLOC(g[k]->xhat, len);
        DALLOC(g[k]->rstd, R);
        DALLOC(g[k]->y, len);
    }
    DALLOC(f->hid, (size_t)R * dm->HW);
    DALLOC(f->out, (size_t)R * dm->OW);
    /* The output layer writes each head's real outputs only: its padding (watched) stays 0. */
    FOX_CUDA_TRY(cudaMemset(f->out, 0, (size_t)R * dm->OW * sizeof(float)));
    DALLOC(f->logp, (size_t)R * dm->NAct * dm->NA);
    DALLOC(f->q, (size_t)R * dm->NAct);
    return slots_init(f, n);
}

void
fox__cuda_fwd_free(fox_cuda_fwd *f)
{
    fox__cuda_free(f->slots[0]);
    fox_cuda_grn_act *g[2] = {&f->g1, &f->g2};
    for (int k = 0; k < 2; k++) {
        fox__cuda_free(g[k]->eta2);
        fox__cuda_free(g[k]->eta1);
        fox__cuda_free(g[k]->zgv);
        fox__cuda_free(g[k]->xhat);
        fox__cuda_free(g[k]->rstd);
        fox__cuda_free(g[k]->y);
    }
    fox__cuda_free(f->hid);
    fox__cuda_free(f->out);
    fox__cuda_free(f->logp);
    fox__cuda_free(f->q);
    memset(f, 0, sizeof *f);
}

static int
grn_grad_alloc(fox_cuda_grn_grad *g, int B, int out)
{
    size_t n = (size_t)B * out;
    DALLOC(g->dud, 2 * n);
    DALLOC(g->dyx, n);
    DALLOC(g->dzgv, 2 * n);
    DALLOC(g->deta1, n);
    return 0;
}

static void
grn_grad_free(fox_cuda_grn_grad *g)
{
    fox__cuda_free(g->dud);
    fox__cuda_free(g->dyx);
    fox__cuda_free(g->dzgv);
    fox__cuda_free(g->deta1);
}

static void
dims_of(fox_cuda_dims *dm, fox_cuda_heads *hd, const fox_model_layout *lay)
{
    memset(dm, 0, sizeof *dm);
    dm->S = lay->S;
    dm->H1 = lay->H1;
    dm->H2 = lay->H2;
    dm->HH = lay->HH;
    dm->NA = lay->NA;
    dm->NT = lay->NT;
    dm->NC = lay->NC;
    dm->HA = lay->HA;
    dm->NR = lay->NR;
    dm->D = lay->n_branches;
    dm->NAct = lay->n_actions;
    for (int d = 0; d < FOX_MAX_BRANCHES; d++) {
        dm->bsize[d] = lay->branch_size[d];
        dm->boff[d] = lay->branch_off[d];
    }
    dm->v_min = lay->v_min;
    dm->v_max = lay->v_max;

    /* Packed order: value, branches 0..3, aux next-bar, aux regime. */
    const int first[FOX_CUDA_HEADS] = {FOX_P_VAL_W1,
                                       FOX_P_BR0_W1,
                                       FOX_P_BR0_W1 + FOX_BRANCH_NT,
                                       FOX_P_BR0_W1 + 2 * FOX_BRANCH_NT,
                                       FOX_P_BR0_W1 + 3 * FOX_BRANCH_NT,
                                       FOX_P_AUXR_W1,
                                       FOX_P_AUXG_W1};
    for (int h = 0; h < FOX_CUDA_HEADS; h++) {
        int f = first[h];
        hd->w1[h] = lay->t[f].offset;
        hd->b1[h] = lay->t[f + 1].offset;
        hd->w2[h] = lay->t[f + 2].offset;
        hd->b2[h] = lay->t[f + 3].offset;
        hd->hid[h] = lay->t[f].rows;
        hd->out[h] = lay->t[f + 2].rows;
        dm->HS = hd->hid[h] > dm->HS ? hd->hid[h] : dm->HS;
        dm->OS = hd->out[h] > dm->OS ? hd->out[h] : dm->OS;
        if (h >= FOX_CUDA_C51_HEADS && hd->out[h] > dm->AUXW)
            dm->AUXW = hd->out[h];
    }
    dm->HW = FOX_CUDA_HEADS * dm->HS;
    dm->OW = FOX_CUDA_HEADS * dm->OS;
    /* Each part starts 64 floats aligned, like the tensors of the parameter layout. */
#define ALIGN64(x) (((x) + 63) / 64 * 64)
    dm->pk_w1 = 0;
    dm->pk_b1 = ALIGN64((size_t)dm->HW * dm->H2);
    dm->pk_w2 = dm->pk_b1 + ALIGN64((size_t)dm->HW);
    dm->pk_b2 = dm->pk_w2 + ALIGN64((size_t)FOX_CUDA_HEADS * dm->OS * dm->HS);
    dm->PK = dm->pk_b2 + ALIGN64((size_t)dm->OW);
#undef ALIGN64
}

int
fox__cuda_set_math(fox_cuda_net *n, int math)
{
    /*
     * FP32 by default: at these widths the step is bound by launches, not
     * arithmetic, and FP32 keeps the parity with the CPU backend at ~1e-6.
     * TF32 (10-bit mantissa products) and BF16 (7-bit) pay only at large
     * batches; the parity test measures their error against the CPU. A mode
     * is the backend's (engine.cuda_math), so every stream's handle gets it
     * here, where the handles are made. BF16 is no math mode: the handle
     * keeps the default mode and matmul.c passes the compute type to each
     * call. The exceptions to FP32 (greedy_tf32) are the
     * forwards whose Q values only pick greedy actions: the collection's on
     * COLLECT (the ε-greedy behaviour policy) and the online net's on s′ on
     * NEXT (double DQN's a*). TF32's ~1e-3 relative error there decides
     * only near-ties (the parity test counts the actions it changes), and
     * the collection's products over every environment in TF32 shorten a
     * full step noticeably at small batches (docs/performance.md). NEXT
     * also runs d_states, whose only reader is the sentinel's NaN/Inf rule
     * (grn_bwd).
     */
    if (math != FOX_CUDA_MATH_FP32 && math != FOX_CUDA_MATH_TF32 && math != FOX_CUDA_MATH_BF16)
        return FOX_EINVAL;
    for (int k = 0; k < FOX_CUDA_STREAMS; k++) {
        int greedy = (k == FOX_CUDA_COLLECT || k == FOX_CUDA_NEXT) && n->greedy_tf32;
        int m = math == FOX_CUDA_MATH_FP32 && greedy ? FOX_CUDA_MATH_TF32 : math;
        FOX_CUBLAS_TRY(cublasSetMathMode(n->cb[k].h, m == FOX_CUDA_MATH_TF32
                                                         ? CUBLAS_TF32_TENSOR_OP_MATH
                                                         : CUBLAS_DEFAULT_MATH));
        n->cb[k].math = m;
    }
    n->math = math;
    return 0;
}

#define CUBLAS_WORKSPACE (32u << 20)

/* The param group of every element of the layout (255 in the padding), for Adam's clamps. */
static int
pgroup_init(fox_cuda_net *n)
{
    const fox_model_layout *lay = n->lay;
    uint8_t *g = malloc(n->np);
    if (!g)
        return FOX_ENOMEM;
    memset(g, 255, n->np);
    for (int i = 0; i < FOX_P_COUNT; i++)
        memset(g + lay->t[i].offset, lay->t[i].group, fox_tensor_size(lay, i));
    int rv = dalloc(&n->pgroup, n->np);
    cudaError_t e = rv == 0 ? cudaMemcpy(n->pgroup, g, n->np, cudaMemcpyHostToDevice) : cudaSuccess;
    free(g);
    FOX_TRY(rv);
    FOX_CUDA_TRY(e);
    return 0;
}

/*
 * Each GRN's weight pairs side by side (wgv, wr2), copied by the head-pack
 * launch (pairs): in the layout other tensors sit between them, and each of
 * dη1 = [dzg dlin]·[Wg; Wv] and da = [du dη2]·[Wr; W2] is one product over
 * K = 2·out instead of two in a row on the backward's critical path.
 */
static int
pairs_init(fox_cuda_net *n)
{
    static const int grn[2] = {FOX_P_GRN1_W2, FOX_P_GRN2_W2};
    const int in[2] = {n->dm.S, n->dm.H1}, out[2] = {n->dm.H1, n->dm.H2};
    static const int t[4] = {FOX_GRN_WG, FOX_GRN_WV, FOX_GRN_WR, FOX_GRN_W2};
    fox_cuda_segments *sg = &n->pairs;
    size_t at[2][2] = {{0}}; /* where each GRN's [Wg; Wv] and [Wr; W2] start in sg->dst */
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < (in[k] != out[k] ? 4 : 2); j++) {
            if (j % 2 == 0)
                at[k][j / 2] = sg->total;
            sg->src[sg->count] = fox__cuda_toff(n, grn[k] + t[j]);
            sg->len[sg->count] = (size_t)out[k] * (j < 2 ? out[k] : in[k]);
            sg->total += sg->len[sg->count++];
        }
    DALLOC(sg->dst, sg->total);
    for (int k = 0; k < 2; k++) {
        n->wgv[k] = sg->dst + at[k][0];
        n->wr2[k] = in[k] != out[k] ? sg->dst + at[k][1] : NULL;
    }
    return 0;
}

int
fox__cuda_net_init(fox_cuda_net *n, const fox_model_layout *lay, int B, int fwd_rows, int members)
{
    memset(n, 0, sizeof *n);
    if (members < 1)
        return FOX_EINVAL;
    n->lay = lay;
    n->np = lay->n_params;
    n->B = B;
    n->members = members;
    n->use_side = 1;
    n->slot_rows = FOX_CUDA_SLOT_ROWS;
    n->iqn_beside_rows = FOX_CUDA_IQN_BESIDE_ROWS;
    n->dw_loop_rows = FOX_CUDA_DW_LOOP_ROWS;
    n->epilogue_fours = 1;
    dims_of(&n->dm, &n->heads, lay);
    const fox_cuda_dims *dm = &n->dm;
    /*
     * When blocks wait for a multiprocessor, first MAIN's and LATE's: the
     * online forward, the loss, the chain of input gradients, and on LATE
     * d h_s2's IQN and aux parts; the collection and adaptive mode's
     * deferred Pearl B (off the train step's path) last. Every stream at one
     * priority measured slower at both batch 256 and 4096
     * (docs/performance.md).
     */
    int least = 0, greatest = 0;
    FOX_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (int k = 0; k < FOX_CUDA_STREAMS; k++) {
        int prio = k == FOX_CUDA_MAIN || k == FOX_CUDA_LATE ? greatest
                   : k == FOX_CUDA_COLLECT                    ? least
                                                              : (least + greatest) / 2;
        FOX_CUDA_TRY(cudaStreamCreateWithPriority(&n->st[k], cudaStreamNonBlocking, prio));
        FOX_CUBLAS_TRY(cublasCreate(&n->cb[k].h));
        FOX_CUBLAS_TRY(cublasSetStream(n->cb[k].h, n->st[k]));
        n->cb[k].s = n->st[k];
        /* A workspace of its own per handle: cuBLAS must not allocate inside a graph capture. */
        FOX_TRY(dalloc(&n->cb_work[k], CUBLAS_WORKSPACE));
        FOX_CUBLAS_TRY(cublasSetWorkspace(n->cb[k].h, n->cb_work[k], CUBLAS_WORKSPACE));
    }
    FOX_TRY(fox__cuda_set_math(n, FOX_CUDA_MATH_FP32));
    for (int k = 0; k < FOX_CUDA_EVENTS; k++)
        FOX_CUDA_TRY(cudaEventCreateWithFlags(&n->ev[k], cudaEventDisableTiming));

    size_t np = n->np;
    DALLOC(n->params, 2 * np);
    DALLOC(n->grads, np);
    DALLOC(n->adam_m, np);
    DALLOC(n->adam_v, np);
    /* Padding between tensors is never written by a kernel: zero it once. */
    FOX_CUDA_TRY(cudaMemset(n->params, 0, 2 * np * sizeof(float)));
    FOX_CUDA_TRY(cudaMemset(n->grads, 0, np * sizeof(float)));
    FOX_CUDA_TRY(cudaMemset(n->adam_m, 0, np * sizeof(float)));
    FOX_CUDA_TRY(cudaMemset(n->adam_v, 0, np * sizeof(float)));
    FOX_TRY(pairs_init(n));
    DALLOC(n->pk, 2 * dm->PK);
    /* Alignment gaps of the packed heads are never written: zero them once. */
    FOX_CUDA_TRY(cudaMemset(n->pk, 0, 2 * dm->PK * sizeof(float)));
    size_t nz = (size_t)dm->D * dm->NA;
    DALLOC(n->z, nz);
    float *z = malloc(nz * sizeof *z);
    if (!z)
        return FOX_ENOMEM;
    /*
     * Every branch on the configured support until atoms.cu moves it, computed the CPU's way,
     * so both backends start from the same atoms.
     */
    float dz = (lay->v_max - lay->v_min) / (float)(lay->NA - 1);
    for (size_t k = 0; k < nz; k++)
        z[k] = lay->v_min + (float)(k % (size_t)lay->NA) * dz;
    cudaError_t ce = cudaMemcpy(n->z, z, nz * sizeof *z, cudaMemcpyHostToDevice);
    free(z);
    FOX_CUDA_TRY(ce);

    n->n_ones = B * dm->NT;
    if (n->n_ones < fwd_rows)
        n->n_ones = fwd_rows;
    float *ones = malloc((size_t)n->n_ones * sizeof *ones);
    if (!ones)
        return FOX_ENOMEM;
    for (int k = 0; k < n->n_ones; k++)
        ones[k] = 1.0f;
    DALLOC(n->ones, n->n_ones);
    ce = cudaMemcpy(n->ones, ones, (size_t)n->n_ones * sizeof *ones, cudaMemcpyHostToDevice);
    free(ones);
    FOX_CUDA_TRY(ce);

    FOX_TRY(fox__cuda_fwd_alloc(&n->on, n, B));
    FOX_TRY(fox__cuda_fwd_alloc(&n->nx, n, B));
    FOX_TRY(fox__cuda_fwd_alloc(&n->tg, n, B));

    size_t rq = (size_t)B * dm->NT;
    DALLOC(n->iq.cosf, 2 * rq * dm->NC);
    DALLOC(n->iq.phi, 2 * rq * dm->H2);
    DALLOC(n->iq.x, 2 * rq * dm->H2);
    DALLOC(n->iq.q, 2 * rq * dm->NAct);
    if (members > 1) {
        size_t wide = (size_t)dm->H2 * (dm->NAct > dm->NC ? dm->NAct : dm->NC);
        DALLOC(n->split_part[0], FOX_CUDA_SPLIT_BLOCKS * wide);
        DALLOC(n->split_part[1], FOX_CUDA_SPLIT_BLOCKS * wide);
    }

    fox_cuda_bwd *bw = &n->bw;
    DALLOC(bw->dout, (size_t)B * dm->OW);
    DALLOC(bw->dhid, (size_t)B * dm->HW);
    DALLOC(bw->dpk, dm->PK);
    DALLOC(bw->dh_s2, (size_t)B * dm->H2);
    DALLOC(bw->dh_s1, (size_t)B * dm->H1);
    DALLOC(bw->d_q, rq * dm->NAct);
    DALLOC(bw->d_x, rq * dm->H2);
    DALLOC(bw->d_phi, rq * dm->H2);
    DALLOC(bw->dh_aux, (size_t)B * dm->H2);
    DALLOC(bw->dh_iqn, (size_t)B * dm->H2);
    FOX_TRY(grn_grad_alloc(&bw->g1, B, dm->H1));
    FOX_TRY(grn_grad_alloc(&bw->g2, B, dm->H2));

    fox_cuda_batch *bt = &n->bt;
    DALLOC(bt->s2, (size_t)2 * B * dm->S);
    DALLOC(bt->a, (size_t)B * dm->D);
    DALLOC(bt->r, B);
    DALLOC(bt->done, B);
    DALLOC(bt->aux, B);
    DALLOC(bt->regime, B);
    DALLOC(bt->tau, 2 * rq);
    DALLOC(bt->idx, B);
    DALLOC(bt->prio, B);
    DALLOC(bt->a_star, (size_t)B * dm->D);
    bt->w = NULL;
    DALLOC(n->loss_parts, (size_t)B * FOX_CUDA_PARTS);
    DALLOC(n->norm_part, (1 + FOX_CUDA_PARTS) * FOX_CUDA_NORM_BLOCKS);
    DALLOC(n->q_ref_part, B);
    DALLOC(n->proj, (size_t)B * dm->D * dm->NA);
    DALLOC(n->tq, (size_t)B * dm->D * dm->NT);
    DALLOC(n->glu, (size_t)B * dm->H2);
    DALLOC(n->ln_in, (size_t)B * dm->H2);
    DALLOC(n->d_states, (size_t)B * dm->S);
    FOX_TRY(pgroup_init(n));
    for (int g = 0; g < FOX_GROUP_COUNT; g++) {
        n->aslots.w[g] = fox_sentinel_group_slot(FOX_SENT_FAMILY_WEIGHT, g);
        n->aslots.m[g] = fox_sentinel_group_slot(FOX_SENT_FAMILY_ADAM_M, g);
        n->aslots.v[g] = fox_sentinel_group_slot(FOX_SENT_FAMILY_ADAM_V, g);
    }
    n->fault_slot = -1;
    return 0;
}

void
fox__cuda_net_fini(fox_cuda_net *n)
{
    for (int k = 0; k < FOX_CUDA_STREAMS; k++)
        if (n->st[k])
            cudaStreamSynchronize(n->st[k]);
    fox__cuda_fwd_free(&n->on);
    fox__cuda_fwd_free(&n->nx);
    fox__cuda_fwd_free(&n->tg);
    void *bufs[] = {n->params, n->grads, n->adam_m, n->adam_v, n->pk, n->pairs.dst, n->z, n->ones,
                    n->iq.cosf, n->iq.phi, n->iq.x, n->iq.q, n->bw.dout, n->bw.dhid, n->bw.dpk,
                    n->bw.dh_s2, n->bw.dh_s1, n->bw.d_q, n->bw.d_x,
                    n->bt.s2, n->bt.a, n->bt.r, n->bt.done, n->bt.aux, n->bt.regime, n->bt.tau,
                    n->bt.idx, n->bt.prio, n->bt.a_star, n->loss_parts, n->norm_part, n->q_ref_part,
                    n->bw.d_phi, n->bw.dh_aux, n->bw.dh_iqn, n->proj, n->tq, n->glu, n->ln_in,
                    n->d_states, n->pgroup, n->split_part[0], n->split_part[1]};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        fox__cuda_free(bufs[k]);
    grn_grad_free(&n->bw.g1);
    grn_grad_free(&n->bw.g2);
    for (int k = 0; k < FOX_CUDA_EVENTS; k++)
        if (n->ev[k])
            cudaEventDestroy(n->ev[k]);
    for (int k = 0; k < FOX_CUDA_STREAMS; k++) {
        if (n->cb[k].h)
            cublasDestroy(n->cb[k].h);
        fox__cuda_free(n->cb_work[k]);
        if (n->st[k])
            cudaStreamDestroy(n->st[k]);
    }
    memset(n, 0, sizeof *n);
}

/* ------------------------------------------------------------------------------------------ */
/* Streams                                                                                    */

int
fox__cuda_dep(fox_cuda_net *n, int from, int to)
{
    if (from == to)
        return 0;
    if (to == FOX_CUDA_MAIN)
        n->forked[from] = 0;
    cudaEvent_t ev = n->ev[n->ev_next];
    n->ev_next = (n->ev_next + 1) % FOX_CUDA_EVENTS;
    FOX_CUDA_TRY(cudaEventRecord(ev, n->st[from]));
    FOX_CUDA_TRY(cudaStreamWaitEvent(n->st[to], ev, 0));
    return 0;
}

int
fox__cuda_fork(fox_cuda_net *n, int to, int *s)
{
    *s = n->use_side ? to : FOX_CUDA_MAIN;
    if (*s != FOX_CUDA_MAIN)
        n->forked[*s] = 1;
    return fox__cuda_dep(n, FOX_CUDA_MAIN, *s);
}

int
fox__cuda_join_all(fox_cuda_net *n)
{
    for (int k = 1; k < FOX_CUDA_STREAMS; k++)
        if (n->forked[k])
            FOX_TRY(fox__cuda_dep(n, k, FOX_CUDA_MAIN));
    return 0;
}

static const int side_streams[3] = {FOX_CUDA_SIDE, FOX_CUDA_SIDE2, FOX_CUDA_SIDE3};
#define N_SIDES ((int)(sizeof side_streams / sizeof side_streams[0]))

/* The next side stream in turn, forked at this point: for a forward or weight gradients. */
int
fox__cuda_side(fox_cuda_net *n, int *ws)
{
    int to = side_streams[n->side_next];
    n->side_next = (n->side_next + 1) % N_SIDES;
    return fox__cuda_fork(n, to, ws);
}

/* A product stage on stream s with its epilogue (gemm.cu), by the net's epilogue path. */
int
fox__cuda_product(fox_cuda_net *n, int s, fox_cuda_gemm *m)
{
    m->by_ones = !n->epilogue_fours;
    return fox__cuda_gemm(n->cb[s], n->st[s], m);
}

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                    */

/* 0 for GRN1's block (tensors from first), 1 for GRN2's. */
int
fox__cuda_grn_index(int first)
{
    return first == FOX_P_GRN1_W2 ? 0 : 1;
}

int
fox__cuda_pack(fox_cuda_net *n, int s)
{
    return fox__cuda_head_pack(n->st[s], &n->dm, &n->heads, &n->pairs, n->params, n->np, n->pk,
                               NULL, NULL);
}

/* A product with everything off: α 1, one batch entry. */
fox_cuda_gemm
fox__cuda_gemm_of(int M, int N, int K, int bt, const float *A, int lda, const float *B, int ldb,
                  float *C, int ldc)
{
    fox_cuda_gemm g;
    memset(&g, 0, sizeof g);
    g.M = M;
    g.N = N;
    g.K = K;
    g.nz = 1;
    g.bt = bt;
    g.A = A;
    g.lda = lda;
    g.B = B;
    g.ldb = ldb;
    g.C = C;
    g.ldc = ldc;
    g.alpha = 1.0f;
    g.mul_div = 1;
    return g;
}

/*
 * A stability point (the CPU's point()): the configured fault's injection
 * into p[0] (and p2[0]), launched only at its own slot's point and only in
 * a training pass, so that a run without a fault has no launch for it.
 */
int
fox__cuda_point(fox_cuda_net *n, int s, int slot, float *p, float *p2, int after_count)
{
    if (n->fault_slot != slot || !n->stab.sites)
        return 0;
    return fox__cuda_inject(n->st[s], &n->stab, p, p2, after_count);
}

/*
 * GRN(a [R × in] → g->y [R × out]) with the block's tensors from `first` in
 * P (the online or the target net's parameters). pts: the stage slots (η2,
 * η1, gate, glu, LayerNorm input) at their points, and g, r + g kept in
 * n->glu / n->ln_in (GRN2 of a training pass), or NULL; site: Mech 10 on
 * g->y in the tail's launch (fox__cuda_grn_tail).
 */
static int
grn_fwd(fox_cuda_net *n, int s, const float *P, int first, int in, int out, const float *a, int R,
        fox_cuda_grn_act *g, int pts, int site)
{
    cudaStream_t st = n->st[s];
#define T(k) (P + fox__cuda_toff(n, first + (k)))
    /* η2 = ELU(W2·a + b2) and the skip Wr·a (R·out floats later) in one launch. */
    int skip = in != out;
    fox_cuda_gemm m = fox__cuda_gemm_of(R, out, in, 1, a, in, T(FOX_GRN_W2), in, g->eta2, out);
    m.bias[0] = T(FOX_GRN_B2);
    m.act[0] = FOX_ACT_ELU;
    m.fill = g->eta1; /* b1 under η1: its product adds W1·η2 with β = 1 (no epilogue launch) */
    m.fill_bias = T(FOX_GRN_B1);
    if (skip) {
        m.nz = 2;
        m.sb = (long long)(fox__cuda_toff(n, first + FOX_GRN_WR) -
                           fox__cuda_toff(n, first + FOX_GRN_W2));
        m.sc = (long long)R * out;
    }
    FOX_TRY(fox__cuda_product(n, s, &m));
    if (pts)
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_H_S2_ETA2, g->eta2, NULL, 0));
    const float *r = skip ? g->eta2 + (size_t)R * out : a;
    /* η1 = W1·η2 + b1, b1 laid in η1 by the last epilogue. */
    m = fox__cuda_gemm_of(R, out, out, 1, g->eta2, out, T(FOX_GRN_W1), out, g->eta1, out);
    m.beta = 1.0f;
    FOX_TRY(fox__cuda_product(n, s, &m));
    if (pts)
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_H_S2_ETA1, g->eta1, NULL, 0));
    /*
     * Gate and value products (Wv sits a fixed distance after Wg); their biases are added in
     * the tail kernel, so this stage has no epilogue launch.
     */
    m = fox__cuda_gemm_of(R, out, out, 1, g->eta1, out, T(FOX_GRN_WG), out, g->zgv, out);
    m.nz = 2;
    m.sb =
        (long long)(fox__cuda_toff(n, first + FOX_GRN_WV) - fox__cuda_toff(n, first + FOX_GRN_WG));
    m.sc = (long long)R * out;
    FOX_TRY(fox__cuda_product(n, s, &m));
    FOX_TRY(fox__cuda_grn_tail(st, R, out, g->zgv, r, T(FOX_GRN_BG), T(FOX_GRN_BV), T(FOX_GRN_LN_G),
                               T(FOX_GRN_LN_B), g->xhat, g->rstd, g->y, pts ? n->glu : NULL,
                               pts ? n->ln_in : NULL, site ? &n->stab : NULL));
    if (pts) {
        /* Inside the fused tail on the CPU's side of it: these faults fire their slot only. */
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_H_S2_GATE, g->zgv, NULL, 0));
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_H_S2_GLU, n->glu, NULL, 0));
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_H_S2_LN_IN, n->ln_in, NULL, 0));
    }
#undef T
    return 0;
}

/* The forward's trunk: X [R × S] → h_s2 in f->g2.y, with Mech 10 where site is set. */
int
fox__cuda_forward_trunk(fox_cuda_net *n, int s, fox_cuda_fwd *f, const float *X, int R, int target,
                        int site)
{
    if (R < 1 || R > f->cap)
        return FOX_EINVAL;
    const fox_cuda_dims *dm = &n->dm;
    /* The target net's parameters sit np floats after the online's. */
    const float *P = n->params + (target ? n->np : 0);
    int pts = site && n->stab.sites;
    f->rows = R;
    FOX_TRY(grn_fwd(n, s, P, FOX_P_GRN1_W2, dm->S, dm->H1, X, R, &f->g1, 0, 0));
    if (pts)
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_H_S1, f->g1.y, NULL, 0));
    /*
     * Mech 10 on the online net's h_s2 (slot 12's fault injected first) inside GRN2's tail
     * with fixed bounds, one launch fewer on the critical chain; adaptive bounds need the
     * whole p99 before the first clamp, so the tail takes its pass 1 and the site follows.
     */
    FOX_TRY(grn_fwd(n, s, P, FOX_P_GRN2_W2, dm->H1, dm->H2, f->g1.y, R, &f->g2, pts, pts));
    if (pts && n->stab.adaptive)
        FOX_TRY(fox__cuda_h_s2_site(n->st[s], &n->stab, f->g2.y, (size_t)R * dm->H2, 1));
    return 0;
}

/* The forward's heads on f->g2.y (the trunk's rows): hid, out, then logp and Q. */
int
fox__cuda_forward_heads(fox_cuda_net *n, int s, fox_cuda_fwd *f, int target, int aux, int site)
{
    const fox_cuda_dims *dm = &n->dm;
    /* The target net's packed heads sit PK floats after the online's. */
    const float *pk = n->pk + (target ? dm->PK : 0);
    cudaStream_t st = n->st[s];
    const int R = f->rows, pts = site && n->stab.sites;
    /* The packed heads: one launch per layer (the C51 heads' only, without aux). */
    int nh = aux ? FOX_CUDA_HEADS : FOX_CUDA_C51_HEADS;
    fox_cuda_gemm m = fox__cuda_gemm_of(R, nh * dm->HS, dm->H2, 1, f->g2.y, dm->H2, pk + dm->pk_w1,
                                        dm->H2, f->hid, dm->HW);
    m.bias[0] = pk + dm->pk_b1;
    m.act[0] = FOX_ACT_RELU;
    FOX_TRY(fox__cuda_product(n, s, &m));
    /*
     * The output layer: from slot_rows rows the C51 heads' outputs by slots of NA
     * (pointer-batched, so that no head is computed at the widest head's OS outputs), then the
     * aux heads' AUXW; below, every head at OS in one strided-batched product.
     */
    const int by_slots = R >= n->slot_rows, h0 = by_slots ? FOX_CUDA_C51_HEADS : 0;
    if (by_slots)
        FOX_TRY(fox__cuda_gemm_slots(n->cb[s], R, dm->NA, dm->HS, f->slots[target], 1 + dm->NAct,
                                     n->members, dm->HW, dm->HS, dm->OW));
    if (nh > h0) {
        m = fox__cuda_gemm_of(R, by_slots ? dm->AUXW : dm->OS, dm->HS, 1, f->hid + h0 * dm->HS,
                              dm->HW, pk + dm->pk_w2 + (size_t)h0 * dm->OS * dm->HS, dm->HS,
                              f->out + h0 * dm->OS, dm->OW);
        m.nz = nh - h0;
        m.sa = dm->HS;
        m.sb = (long long)dm->OS * dm->HS;
        m.sc = dm->OS;
        FOX_TRY(fox__cuda_product(n, s, &m));
    }
    if (pts) {
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_V_LOGITS, f->out, NULL, 0));
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_ADV_LOGITS, f->out + dm->OS, NULL, 0));
    }
    /* The training forward on s: the chosen actions' only (the loss's; slot 7 as the CPU's). */
    FOX_TRY(fox__cuda_dueling(st, R, dm, f->out, pk + dm->pk_b2, n->z, site ? n->bt.a : NULL,
                              f->logp, f->q));
    if (pts)
        FOX_TRY(fox__cuda_point(n, s, FOX_SENT_CURRENT_LP, f->logp, NULL, 0));
    return 0;
}

int
fox__cuda_forward(fox_cuda_net *n, int s, fox_cuda_fwd *f, const float *X, int R, int target,
                  int aux, int site)
{
    FOX_TRY(fox__cuda_forward_trunk(n, s, f, X, R, target, site));
    return fox__cuda_forward_heads(n, s, f, target, aux, site);
}

/*
 * The IQN heads of nets z0 … z0 + nz − 1 (0 online on h_s2(s) with τ, 1
 * target on h_s2′ with τ′; nz 2: both in one strided-batched product) on
 * stream s, from row rq·z0 of the IQN buffers: φ = ReLU(cos·Wφ + bφ), x =
 * φ ⊙ h (h's row for every NT of its τ), q = x·Wq; cos from
 * fox__cuda_iqn_cos already there. Fault points: slots 9 and 10.
 */
int
fox__cuda_iqn_fwd(fox_cuda_net *n, int s, int z0, int nz)
{
    const fox_cuda_dims *dm = &n->dm;
    const size_t rq = (size_t)n->B * dm->NT;
    const float *P = n->params + (z0 ? n->np : 0);
    fox_cuda_gemm m = fox__cuda_gemm_of((int)rq, dm->H2, dm->NC, 1, n->iq.cosf + z0 * rq * dm->NC,
                                        dm->NC, P + fox__cuda_toff(n, FOX_P_IQN_WPHI), dm->NC,
                                        n->iq.phi + z0 * rq * dm->H2, dm->H2);
    m.nz = nz;
    m.sa = (long long)(rq * dm->NC);
    m.sb = (long long)n->np;
    m.sc = (long long)(rq * dm->H2);
    for (int z = 0; z < nz; z++) {
        m.bias[z] = P + z * n->np + fox__cuda_toff(n, FOX_P_IQN_BPHI);
        m.act[z] = FOX_ACT_RELU;
        m.mul[z] = (z0 + z) ? n->tg.g2.y : n->on.g2.y;
    }
    m.mout = n->iq.x + z0 * rq * dm->H2;
    m.ldmul = dm->H2;
    m.mul_div = dm->NT;
    FOX_TRY(fox__cuda_product(n, s, &m));
    float *q = n->iq.q + z0 * rq * dm->NAct;
    m = fox__cuda_gemm_of((int)rq, dm->NAct, dm->H2, 1, n->iq.x + z0 * rq * dm->H2, dm->H2,
                          P + fox__cuda_toff(n, FOX_P_IQN_WQ), dm->H2, q, dm->NAct);
    m.nz = nz;
    m.sa = (long long)(rq * dm->H2);
    m.sb = (long long)n->np;
    m.sc = (long long)(rq * dm->NAct);
    FOX_TRY(fox__cuda_product(n, s, &m));
    for (int z = z0; z < z0 + nz; z++)
        FOX_TRY(fox__cuda_point(n, s, z ? FOX_SENT_IQN_Q_TARGET : FOX_SENT_IQN_Q_ONLINE,
                                n->iq.q + z * rq * dm->NAct, NULL, 0));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Optimizer                                                                                  */

int
fox__cuda_optim(fox_cuda_net *n, const fox_cuda_optim_cfg *oc, fox_cuda_ctl *ctl, float *isv_dev,
                float *isv_map)
{
    cudaStream_t s0 = n->st[0];
    const int sp4 = n->stab.adaptive && n->stab.sites;
    /*
     * Pearl B's pass 2 and tail (loss_grad), whose bounds this Adam reads, unless a full
     * step joined COLLECT after it already (or it ran on MAIN: one stream).
     */
    if (sp4 && n->forked[FOX_CUDA_COLLECT])
        FOX_TRY(fox__cuda_dep(n, FOX_CUDA_COLLECT, FOX_CUDA_MAIN));
    /*
     * SP4: the L1 rate's gradient-only half beside the norm and Adam (they
     * leave grads be), on the late stream, which the step's end joins: its
     * reader, Pearl B's tail, runs in the next step (loss_grad).
     */
    if (n->stab.adaptive) {
        int ls;
        FOX_TRY(fox__cuda_fork(n, FOX_CUDA_LATE, &ls));
        FOX_TRY(fox__cuda_l1_deficit(n->st[ls], &n->stab, n->grads));
    }
    FOX_TRY(fox__cuda_grad_norm(s0, n->np, n->grads, n->norm_part, &n->stab, n->B, n->dm.D,
                                n->loss_parts, oc));
    FOX_TRY(fox__cuda_adam(s0, n->np, n->params, n->grads, n->adam_m, n->adam_v, n->pgroup,
                           &n->aslots, oc, &n->stab));
    /* The points after Adam: params (14) and the slices of params / adam_m / adam_v (36–45, 48). */
    if (n->fault_at)
        FOX_TRY(fox__cuda_point(n, 0, n->fault_slot, n->fault_at, NULL, 0));
    /*
     * Pearl B's pass 1 on this Adam's result, beside the rest of the step (which writes none
     * of params, grads and the moments, nor its scratch), before the next backward writes
     * grads: the step's end joins it. Pass 2 follows in the next step (loss_grad).
     */
    if (sp4) {
        int ps;
        FOX_TRY(fox__cuda_fork(n, FOX_CUDA_SIDE, &ps));
        FOX_TRY(fox__cuda_post_adam_pass1(n->st[ps], &n->stab, 1, n->np, n->params, n->grads,
                                          n->adam_m, n->adam_v));
    }
    /*
     * With pass 1 beside it, the fused check (next on MAIN) launches only at the finish
     * kernel's end, so that pass 1's blocks, ready at Adam's end, are dispatched before the
     * check's thousands at large batches rather than after them, which ends the step
     * earlier.
     */
    return fox__cuda_finish(s0, ctl, isv_dev, isv_map, sp4);
}

int
fox__cuda_repack(fox_cuda_net *n, int s, const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl)
{
    cudaStream_t st = n->st[s];
    /* A Polyak update reads the target it writes: its own launch before the re-pack. */
    if (oc->polyak > 0.0f) {
        FOX_TRY(fox__cuda_target(st, n->np, n->params, n->params + n->np, oc, ctl));
        return fox__cuda_pack(n, s);
    }
    return fox__cuda_head_pack(st, &n->dm, &n->heads, &n->pairs, n->params, n->np, n->pk, oc,
                               ctl);
}
