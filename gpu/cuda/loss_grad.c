/*
 * loss_grad.c (CUDA) — a training step's losses and gradients on the
 * device: the forwards they need, the loss kernel's launch and the
 * backward, in the order of their launches over the net's streams; the
 * twin of gpu/cpu/loss_grad.c, its parts cut at the CPU's seams:
 * forwards, losses, iqn_trunk_grad (the start of the CPU's iqn_bwd),
 * heads_bwd (c51_heads_bwd and aux_bwd), iqn_bwd, trunk_bwd.
 *
 * Not here: the net's buffers, streams, forward and optimizer (net.c), the
 * kernels themselves (*.cu).
 */
#include "gpu/sentinel.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/check.h"
#include "gpu/cuda/gemm.h"
#include "gpu/cuda/grn.h"
#include "gpu/cuda/heads.h"
#include "gpu/cuda/iqn.h"
#include "gpu/cuda/loss.h"
#include "gpu/cuda/matmul.h"
#include "gpu/cuda/net.h"
#include "gpu/cuda/sp4.h"

/*
 * Backward of a GRN over the first B rows of its forward cache f_rows rows
 * long: weight gradients (side streams, cuBLAS) into grads at the block's
 * offsets, da [B × in] (NULL: not needed) on MAIN, or with aside on NEXT
 * forked after dη2 (d_states: in TF32, see below), *aside its stream for
 * the caller to join (nothing else on MAIN waits for it).
 */
static int
grn_bwd(fox_cuda_net *n, int first, int in, int out, const float *a, const fox_cuda_grn_act *c,
        int f_rows, const float *dy, float *da, int *aside, fox_cuda_grn_grad *gg)
{
    const int B = n->B;
    const float *P = n->params;
    float *G = n->grads;
    cudaStream_t s0 = n->st[0];
    const float *ones = n->ones;
    int ws;
#define T(k)  (P + fox__cuda_toff(n, first + (k)))
#define DT(k) (G + fox__cuda_toff(n, first + (k)))
    /* du and dη2 side by side in dud (rows 2·out apart), for the product [du dη2]·[Wr; W2]. */
    float *du = gg->dud, *deta2 = gg->dud + out;
    const int k = fox__cuda_grn_index(first);
    FOX_TRY(fox__cuda_ln_glu_bwd(s0, B, out, dy, c->xhat, c->rstd, T(FOX_GRN_LN_G), c->zgv,
                                 (long long)f_rows * out, du, gg->dyx, gg->dzgv));
    long long gv =
        (long long)(fox__cuda_toff(n, first + FOX_GRN_WV) - fox__cuda_toff(n, first + FOX_GRN_WG));
    long long gvb =
        (long long)(fox__cuda_toff(n, first + FOX_GRN_BV) - fox__cuda_toff(n, first + FOX_GRN_BG));
    FOX_TRY(fox__cuda_side(n, &ws));
    FOX_TRY(fox__cuda_colsum(n->cb[ws], B, out, gg->dyx, out, ones, DT(FOX_GRN_LN_G), 0.0f));
    FOX_TRY(fox__cuda_colsum(n->cb[ws], B, out, dy, out, ones, DT(FOX_GRN_LN_B), 0.0f));
    if (in != out)
        FOX_TRY(fox__cuda_lin_dw(n->cb[ws], B, in, out, du, 2 * out, a, in, DT(FOX_GRN_WR), 0.0f));
    FOX_TRY(fox__cuda_lin_dw_batched(n->cb[ws], n->dw_loop_rows, B, out, out, NULL, gg->dzgv,
                                     2 * out, out, c->eta1, out, 0, DT(FOX_GRN_WG), gv, 2));
    FOX_TRY(fox__cuda_colsum_batched(n->cb[ws], B, out, gg->dzgv, 2 * out, out, ones,
                                     DT(FOX_GRN_BG), gvb, 2));
    /* dη1 = dzg·Wg + dlin·Wv = [dzg dlin]·[Wg; Wv]: one product (pairs_init). */
    fox_cuda_gemm m =
        fox__cuda_gemm_of(B, out, 2 * out, 0, gg->dzgv, 2 * out, n->wgv[k], out, gg->deta1, out);
    FOX_TRY(fox__cuda_product(n, 0, &m));
    FOX_TRY(fox__cuda_side(n, &ws));
    FOX_TRY(fox__cuda_lin_dw(n->cb[ws], B, out, out, gg->deta1, out, c->eta2, out, DT(FOX_GRN_W1),
                             0.0f));
    FOX_TRY(fox__cuda_colsum(n->cb[ws], B, out, gg->deta1, out, ones, DT(FOX_GRN_B1), 0.0f));
    /* dη2 = (dη1·W1) ⊙ ELU'(η2). */
    m = fox__cuda_gemm_of(B, out, out, 0, gg->deta1, out, T(FOX_GRN_W1), out, deta2, 2 * out);
    m.dy = c->eta2;
    m.lddy = out;
    m.dact = FOX_ACT_ELU;
    FOX_TRY(fox__cuda_product(n, 0, &m));
    FOX_TRY(fox__cuda_side(n, &ws));
    FOX_TRY(fox__cuda_lin_dw(n->cb[ws], B, in, out, deta2, 2 * out, a, in, DT(FOX_GRN_W2), 0.0f));
    FOX_TRY(fox__cuda_colsum(n->cb[ws], B, out, deta2, 2 * out, ones, DT(FOX_GRN_B2), 0.0f));
    if (da) {
        int ds = FOX_CUDA_MAIN;
        if (aside) {
            /*
             * d_states feeds only its sentinel slot's NaN/Inf rule, which a product's rounding
             * does not change (a NaN or Inf in du, dη2 or the weights reaches it either way;
             * short of an overflow at FLT_MAX): NEXT's TF32 handle, ~4× less time before
             * the optimizer, which waits for it.
             */
            FOX_TRY(fox__cuda_fork(n, FOX_CUDA_NEXT, aside));
            ds = *aside;
        }
        /* da = [du dη2]·[Wr; W2] (skip path first, as the CPU adds them), or du + dη2·W2. */
        if (n->wr2[k]) {
            m = fox__cuda_gemm_of(B, in, 2 * out, 0, du, 2 * out, n->wr2[k], in, da, in);
        } else {
            m = fox__cuda_gemm_of(B, in, out, 0, deta2, 2 * out, T(FOX_GRN_W2), in, da, in);
            m.add = du;
            m.ldadd = 2 * out;
        }
        FOX_TRY(fox__cuda_product(n, ds, &m));
    }
#undef T
#undef DT
    return 0;
}

/* The loss's inputs and outputs (fox__cuda_loss_targets and fox__cuda_loss). */
static fox_cuda_loss_args
loss_args(fox_cuda_net *n)
{
    const fox_cuda_dims *dm = &n->dm;
    const int B = n->B;
    const float *P = n->params, *PT = n->params + n->np;
    fox_cuda_batch *bt = &n->bt;
    fox_cuda_bwd *bw = &n->bw;
    fox_cuda_fwd *on = &n->on;
    fox_cuda_loss_args la = {
        .B = B,
        .z = n->z,
        .on_logp = on->logp,
        .on_out = on->out,
        .nx_q = n->nx.q,
        .tg_logp = n->tg.logp,
        .iq_q = n->iq.q,
        .bq_on = P + fox__cuda_toff(n, FOX_P_IQN_BQ),
        .bq_tg = PT + fox__cuda_toff(n, FOX_P_IQN_BQ),
        .b2_on = n->pk + dm->pk_b2,
        .tau = bt->tau,
        .a = bt->a,
        .regime = bt->regime,
        .r = bt->r,
        .done = bt->done,
        .w = bt->w,
        .aux_ret = bt->aux,
        .dout = bw->dout,
        .d_q = bw->d_q,
        .prio = bt->prio,
        .parts = n->loss_parts,
        .a_star = bt->a_star,
        .proj = n->proj,
        .tq = n->tq,
        .q_ref_part = n->q_ref_part,
        .st = n->stab,
    };
    return la;
}

/* Adaptive bounds in a training step: SP4's TARGET_Q_BOUND and Pearl B's second pass. */
static int
sp4_on(const fox_cuda_net *n)
{
    return n->stab.adaptive && n->stab.sites;
}

/*
 * The forwards: the online net on s′ for a* (C51 heads, TF32: greedy_tf32)
 * on NEXT, the target net on s′ on SIDE, beside the online net on s with
 * the stability points and Mech 10 on MAIN. Below iqn_beside_rows rows
 * each net's IQN head runs on a stream of its own from its trunk's end,
 * beside its C51 heads (its cosine embedding there from the step's
 * start); from there, where the machine is full anyway, both in one
 * product after the two forwards. Mech 1's producers on the raw IQN
 * targets (Q_ABS_REF; in adaptive mode SP4's TARGET_Q_BOUND, their p99)
 * follow the target net's IQN and the online net's a* (NEXT), beside the
 * online forward where the IQN runs beside.
 */
static int
forwards(fox_cuda_net *n, const fox_cuda_loss_hp *hp, const fox_cuda_loss_args *la)
{
    const fox_cuda_dims *dm = &n->dm;
    const int B = n->B, rq = B * dm->NT;
    cudaStream_t s0 = n->st[0];
    fox_cuda_batch *bt = &n->bt;
    fox_cuda_fwd *on = &n->on;
    const int sites = n->stab.sites;
    int ws;
    const float *s_next = bt->s2 + (size_t)B * dm->S;
    const int beside = B < n->iqn_beside_rows;
    int ns, iq_tg = FOX_CUDA_MAIN, iq_on = FOX_CUDA_MAIN;
    n->side_next = 0; /* every capture of a step assigns the same streams */
    FOX_TRY(fox__cuda_fork(n, FOX_CUDA_NEXT, &ns));
    FOX_TRY(fox__cuda_forward(n, ns, &n->nx, s_next, B, 0, 0, 0));
    FOX_TRY(fox__cuda_side(n, &ws));
    if (beside) {
        FOX_TRY(fox__cuda_forward_trunk(n, ws, &n->tg, s_next, B, 1, 0));
        FOX_TRY(fox__cuda_side(n, &iq_tg));
        FOX_TRY(fox__cuda_iqn_cos(n->st[iq_tg], rq, dm->NC, bt->tau + rq,
                                  n->iq.cosf + (size_t)rq * dm->NC));
        FOX_TRY(fox__cuda_dep(n, ws, iq_tg));
        FOX_TRY(fox__cuda_iqn_fwd(n, iq_tg, 1, 1));
        if (sites) {
            FOX_TRY(fox__cuda_dep(n, ns, iq_tg));
            FOX_TRY(fox__cuda_loss_targets(n->st[iq_tg], dm, hp, la));
        }
        FOX_TRY(fox__cuda_side(n, &iq_on));
        FOX_TRY(fox__cuda_iqn_cos(n->st[iq_on], rq, dm->NC, bt->tau, n->iq.cosf));
        FOX_TRY(fox__cuda_forward_heads(n, ws, &n->tg, 1, 0, 0));
    } else {
        FOX_TRY(fox__cuda_iqn_cos(n->st[ws], 2 * rq, dm->NC, bt->tau, n->iq.cosf));
        FOX_TRY(fox__cuda_forward(n, ws, &n->tg, s_next, B, 1, 0, 0));
    }
    FOX_TRY(fox__cuda_forward_trunk(n, 0, on, bt->s2, B, 0, 1));
    if (beside) {
        FOX_TRY(fox__cuda_dep(n, FOX_CUDA_MAIN, iq_on));
        FOX_TRY(fox__cuda_iqn_fwd(n, iq_on, 0, 1));
    }
    FOX_TRY(fox__cuda_forward_heads(n, 0, on, 0, 1, 1));
    FOX_TRY(fox__cuda_dep(n, ws, 0));
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_TARGET_LOGITS, n->tg.logp, NULL, 0));
    if (beside) {
        FOX_TRY(fox__cuda_dep(n, iq_tg, FOX_CUDA_MAIN));
        FOX_TRY(fox__cuda_dep(n, iq_on, FOX_CUDA_MAIN));
    } else {
        FOX_TRY(fox__cuda_iqn_fwd(n, FOX_CUDA_MAIN, 0, 2));
    }
    FOX_TRY(fox__cuda_dep(n, ns, FOX_CUDA_MAIN));
    if (sites && !beside)
        FOX_TRY(fox__cuda_loss_targets(s0, dm, hp, la));
    return 0;
}

/* Losses and the gradients of every head output, with their stability points. */
static int
losses(fox_cuda_net *n, const fox_cuda_loss_hp *hp, const fox_cuda_loss_args *la)
{
    const fox_cuda_dims *dm = &n->dm;
    cudaStream_t s0 = n->st[0];
    fox_cuda_batch *bt = &n->bt;
    fox_cuda_bwd *bw = &n->bw;
    const int sp4 = sp4_on(n);
    FOX_TRY(fox__cuda_loss(s0, dm, hp, la));
    /*
     * SP4: the last Adam step's Pearl B, Pearl C and L1 rate
     * (fox_cpu_stab_post_adam), their second pass (pass 1, every read of
     * grads, ran after that Adam: fox__cuda_optim): from the loss on
     * COLLECT, the least urgent stream (after the collection in a full
     * step), beside the backward, which writes none of what it reads
     * (params, the Adam moments) and reads none of what it writes (bounds
     * that only Adam reads): joined before this step's optimizer. Gated on an
     * Adam step having run since (the backend runs it at the end of every run
     * of steps, before the host reads the ISV).
     */
    if (sp4) {
        int ps;
        FOX_TRY(fox__cuda_fork(n, FOX_CUDA_COLLECT, &ps));
        FOX_TRY(fox__cuda_post_adam_pass2(n->st[ps], &n->stab, 1, n->np, n->params, n->adam_m,
                                          n->adam_v));
    }
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_PROJECTED, n->proj, NULL, 0));
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_TARGET_Q_POST_CLIP, n->tq, NULL, 0));
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_TD_ERRORS, bt->prio, NULL, 0));
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_D_IQN_Q, bw->d_q, NULL, 0));
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_D_V_LOGITS, bw->dout, NULL, 0));
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_D_ADV_LOGITS, bw->dout + dm->OS, NULL, 0));
    return 0;
}

/*
 * d h_s2's IQN part d_x = d_q·Wq on LATE (*ls) from here (the start of the
 * CPU's iqn_bwd), and its aux part there too once d hid exists, beside the
 * heads' input gradient and the C51 part on MAIN; joined before the three
 * are summed with their inline checks (dh_s2_join).
 */
static int
iqn_trunk_grad(fox_cuda_net *n, int *ls)
{
    const fox_cuda_dims *dm = &n->dm;
    const int rq = n->B * dm->NT;
    const float *P = n->params;
    fox_cuda_bwd *bw = &n->bw;
    FOX_TRY(fox__cuda_fork(n, FOX_CUDA_LATE, ls));
    fox_cuda_gemm m =
        fox__cuda_gemm_of(rq, dm->H2, dm->NAct, 0, bw->d_q, dm->NAct,
                          P + fox__cuda_toff(n, FOX_P_IQN_WQ), dm->H2, bw->d_x, dm->H2);
    FOX_TRY(fox__cuda_product(n, *ls, &m));
    FOX_TRY(fox__cuda_point(n, *ls, FOX_SENT_IQN_TRUNK_GRAD, bw->d_x, NULL, 0));
    return 0;
}

/*
 * The C51 and aux heads' backward (the CPU's c51_heads_bwd and aux_bwd) as
 * the packed heads: input gradients on MAIN, weight gradients on the side
 * streams.
 */
static int
heads_bwd(fox_cuda_net *n, const fox_cuda_loss_hp *hp, int ls)
{
    const fox_cuda_dims *dm = &n->dm;
    const int B = n->B;
    float *G = n->grads;
    cudaStream_t s0 = n->st[0];
    fox_cuda_bwd *bw = &n->bw;
    fox_cuda_fwd *on = &n->on;
    int ws;
    const float *pk = n->pk;
    int w2s;
    FOX_TRY(fox__cuda_side(n, &w2s));
    FOX_TRY(fox__cuda_lin_dw_batched(
        n->cb[w2s], n->dw_loop_rows, B, dm->HS, dm->OS, n->heads.out, bw->dout, dm->OW, dm->OS,
        on->hid, dm->HW, dm->HS, bw->dpk + dm->pk_w2, (long long)dm->OS * dm->HS, FOX_CUDA_HEADS));
    FOX_TRY(fox__cuda_colsum(n->cb[w2s], B, dm->OW, bw->dout, dm->OW, n->ones, bw->dpk + dm->pk_b2,
                             0.0f));
    /* d hid = (d out · W2) ⊙ ReLU'(hid), the seven heads in one launch. */
    fox_cuda_gemm m = fox__cuda_gemm_of(B, dm->HS, dm->OS, 0, bw->dout, dm->OW, pk + dm->pk_w2,
                                        dm->HS, bw->dhid, dm->HW);
    m.nz = FOX_CUDA_HEADS;
    m.sa = dm->OS;
    m.sb = (long long)dm->OS * dm->HS;
    m.sc = dm->HS;
    m.dy = on->hid;
    m.lddy = dm->HW;
    m.sdy = dm->HS;
    m.dact = FOX_ACT_RELU;
    if (B >= n->slot_rows) {
        /*
         * From slot_rows rows each head at its own output count (K: 51 for the value head, 1 and
         * 4 for the aux heads, not every head's padding to the widest's 204), then one mask
         * epilogue over the seven.
         */
        for (int h = 0; h < FOX_CUDA_HEADS; h++) {
            fox_cuda_gemm p =
                fox__cuda_gemm_of(B, dm->HS, n->heads.out[h], 0, bw->dout + (size_t)h * dm->OS,
                                  dm->OW, pk + dm->pk_w2 + (size_t)h * dm->OS * dm->HS, dm->HS,
                                  bw->dhid + (size_t)h * dm->HS, dm->HW);
            FOX_TRY(fox__cuda_product(n, 0, &p));
        }
        m.by_ones = !n->epilogue_fours;
        FOX_TRY(fox__cuda_epilogue(s0, &m));
    } else {
        FOX_TRY(fox__cuda_product(n, 0, &m));
    }
    FOX_TRY(fox__cuda_side(n, &ws));
    FOX_TRY(fox__cuda_lin_dw(n->cb[ws], B, dm->H2, dm->HW, bw->dhid, dm->HW, on->g2.y, dm->H2,
                             bw->dpk + dm->pk_w1, 0.0f));
    FOX_TRY(fox__cuda_colsum(n->cb[ws], B, dm->HW, bw->dhid, dm->HW, n->ones, bw->dpk + dm->pk_b1,
                             0.0f));
    /* The unpack reads every packed gradient: W2's and b2's too, written on w2s. */
    FOX_TRY(fox__cuda_dep(n, w2s, ws));
    FOX_TRY(fox__cuda_head_unpack(n->st[ws], dm, &n->heads, bw->dpk, G));
    /* d h_s2's aux part (LATE), and from the C51 heads, scaled by 1/(D+1) as in BDQ (slot 33). */
    float scale = hp->bdq_trunk_scale ? 1.0f / (float)(dm->D + 1) : 1.0f;
    int c51w = FOX_CUDA_C51_HEADS * dm->HS;
    FOX_TRY(fox__cuda_dep(n, FOX_CUDA_MAIN, ls));
    m = fox__cuda_gemm_of(B, dm->H2, dm->HW - c51w, 0, bw->dhid + c51w, dm->HW,
                          pk + dm->pk_w1 + (size_t)c51w * dm->H2, dm->H2, bw->dh_aux, dm->H2);
    FOX_TRY(fox__cuda_product(n, ls, &m));
    FOX_TRY(fox__cuda_point(n, ls, FOX_SENT_AUX_D_H_S2, bw->dh_aux, NULL, 0));
    m = fox__cuda_gemm_of(B, dm->H2, c51w, 0, bw->dhid, dm->HW, pk + dm->pk_w1, dm->H2, bw->dh_s2,
                          dm->H2);
    m.alpha = scale;
    FOX_TRY(fox__cuda_product(n, 0, &m));
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_D_H_S2_POST_MAIN, bw->dh_s2, NULL, 0));
    return 0;
}

/* The IQN head's weight gradients, then d h_s2's three parts joined (inline checks 33–35). */
static int
iqn_bwd(fox_cuda_net *n, int ls)
{
    const fox_cuda_dims *dm = &n->dm;
    const int B = n->B, NT = dm->NT, rq = B * NT;
    float *G = n->grads;
    cudaStream_t s0 = n->st[0];
    fox_cuda_bwd *bw = &n->bw;
    fox_cuda_fwd *on = &n->on;
    int ws;
    FOX_TRY(fox__cuda_side(n, &ws));
    FOX_TRY(fox__cuda_lin_dw_rows(n->cb[ws], rq, dm->H2, dm->NAct, bw->d_q, dm->NAct, n->iq.x,
                                  dm->H2, G + fox__cuda_toff(n, FOX_P_IQN_WQ), n->split_part[0]));
    FOX_TRY(fox__cuda_colsum(n->cb[ws], rq, dm->NAct, bw->d_q, dm->NAct, n->ones,
                             G + fox__cuda_toff(n, FOX_P_IQN_BQ), 0.0f));
    FOX_TRY(fox__cuda_dep(n, ls, FOX_CUDA_MAIN));
    FOX_TRY(fox__cuda_dh_s2_join(s0, &n->stab, B, NT, dm->H2, bw->dh_s2, bw->dh_aux, bw->dh_iqn,
                                 bw->d_x, n->iq.phi, on->g2.y, bw->d_phi));
    FOX_TRY(fox__cuda_side(n, &ws));
    FOX_TRY(fox__cuda_lin_dw_rows(n->cb[ws], rq, dm->NC, dm->H2, bw->d_phi, dm->H2, n->iq.cosf,
                                  dm->NC, G + fox__cuda_toff(n, FOX_P_IQN_WPHI),
                                  n->split_part[1]));
    FOX_TRY(fox__cuda_colsum(n->cb[ws], rq, dm->H2, bw->d_phi, dm->H2, n->ones,
                             G + fox__cuda_toff(n, FOX_P_IQN_BPHI), 0.0f));
    return 0;
}

/* The trunk's backward, GRN2 then GRN1, and every stream joined before the optimizer. */
static int
trunk_bwd(fox_cuda_net *n)
{
    const fox_cuda_dims *dm = &n->dm;
    float *G = n->grads;
    fox_cuda_batch *bt = &n->bt;
    fox_cuda_bwd *bw = &n->bw;
    fox_cuda_fwd *on = &n->on;
    FOX_TRY(grn_bwd(n, FOX_P_GRN2_W2, dm->H1, dm->H2, on->g1.y, &on->g2, on->rows, bw->dh_s2,
                    bw->dh_s1, NULL, &bw->g2));
    /* d_states only feeds its sentinel slot: beside the last weight gradients. */
    int want_ds = n->want_d_states && n->stab.sites, ds = FOX_CUDA_MAIN;
    FOX_TRY(grn_bwd(n, FOX_P_GRN1_W2, dm->S, dm->H1, bt->s2, &on->g1, on->rows, bw->dh_s1,
                    want_ds ? n->d_states : NULL, &ds, &bw->g1));
    if (want_ds)
        FOX_TRY(fox__cuda_point(n, ds, FOX_SENT_D_STATES, n->d_states, NULL, 0));
    /* Every gradient (side streams) and d_states (NEXT) in before the optimizer reads them. */
    FOX_TRY(fox__cuda_join_all(n));
    FOX_TRY(fox__cuda_point(n, 0, FOX_SENT_GRADS, G, NULL, 0));
    return 0;
}

int
fox__cuda_loss_grad(fox_cuda_net *n, const fox_cuda_loss_hp *hp)
{
    fox_cuda_loss_args la = loss_args(n);
    int ls;
    FOX_TRY(forwards(n, hp, &la));
    FOX_TRY(losses(n, hp, &la));
    FOX_TRY(iqn_trunk_grad(n, &ls));
    FOX_TRY(heads_bwd(n, hp, ls));
    FOX_TRY(iqn_bwd(n, ls));
    FOX_TRY(trunk_bwd(n));
    return 0;
}
