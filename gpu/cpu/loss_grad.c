/*
 * loss_grad.c — one training step of the CPU reference network
 * (fox_cpu_net_loss_grad, net_decl.h): the forwards it needs, the double-DQN
 * argmax, the C51 and IQN targets, the C51, IQN and aux losses with the
 * gradients of the head outputs, and the backward of the heads into d h_s2
 * and of the trunk. Compiled twice like net.c (float, and double for the
 * finite-difference checks); the conventions and the stability points in
 * step order are listed at the top of net.c.
 *
 * The CUDA backend's twins carry the same names: the loss kernel's parts
 * (gpu/cuda/loss.cu) and the launches of gpu/cuda/loss_grad.c.
 *
 * Not here: the layers and the forward passes (net.c), the clamps, guard,
 * clipping and Adam (optim.c, stab.c).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "gpu/sentinel.h"
#include "gpu/cpu/net_impl.h"

/* ------------------------------------------------------------------------------------------ */
/* Targets                                                                                    */

void
FOX_NET(c51_project)(const FOX_REAL *p, int NA, FOX_REAL v_min, FOX_REAL v_max, FOX_REAL r,
                     FOX_REAL g, FOX_REAL *out)
{
    real dz = (v_max - v_min) / (real)(NA - 1);
    for (int j = 0; j < NA; j++)
        out[j] = R(0);
    for (int j = 0; j < NA; j++) {
        real tz = r + g * (v_min + (real)j * dz);
        /* A NaN would pass both comparisons and floor() to an index out of range. */
        if (!isfinite(tz))
            tz = R(0);
        tz = tz < v_min ? v_min : tz > v_max ? v_max : tz;
        /* Rounding can put b a hair outside [0, NA−1] even with tz clamped. */
        real b = (tz - v_min) / dz;
        b = b < R(0) ? R(0) : b > (real)(NA - 1) ? (real)(NA - 1) : b;
        int l = (int)R_FLOOR(b), u = (int)R_CEIL(b);
        if (l == u) {
            /* On an atom exactly: the two-way split below would drop the mass. */
            out[l] += p[j];
        } else {
            out[l] += p[j] * ((real)u - b);
            out[u] += p[j] * (b - (real)l);
        }
    }
}

/* a*_d(s′) = argmax_a E_online[Z_d(s′, a)] for every row; ties to the lowest a. */
static void
greedy_next(struct FOX_NET_T *net, int B)
{
    const fox_model_layout *lay = &net->lay;
    int D = lay->n_branches;
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++) {
            int n = lay->branch_size[d], best = 0;
            real best_q = R(0);
            for (int a = 0; a < n; a++) {
                const real *lp =
                    branch_rows(lay, net->on_next.logp, B, d) + ((size_t)b * n + a) * lay->NA;
                real q = expected_z(lp, net->z + (size_t)d * lay->NA, lay->NA);
                if (a == 0 || q > best_q) {
                    best = a;
                    best_q = q;
                }
            }
            net->a_star[b * D + d] = best;
        }
}

/*
 * Target pmf per (b, d): the target net's p_d(s′, a*_d) projected with
 * reward r and discount γⁿ(1 − done) onto branch d's own support. MEAN
 * replaces every branch's pmf by the mean of the D projections (BDQ's shared
 * target), atom by atom: a mean of distributions because the grid's rule
 * gives every branch the same support (docs/stability.md, "The atom grid").
 */
static void
c51_targets(struct FOX_NET_T *net, const FOX_NET(batch) *bt, const FOX_NET(hparams) *hp)
{
    const fox_model_layout *lay = &net->lay;
    int D = lay->n_branches, NA = lay->NA;
    for (int b = 0; b < bt->B; b++) {
        real g = hp->gamma_n * (R(1) - bt->done[b]);
        real *mb = net->m + (size_t)b * D * NA;
        for (int d = 0; d < D; d++) {
            int n = lay->branch_size[d];
            const real *lp = branch_rows(lay, net->tgt.logp, bt->B, d) +
                             ((size_t)b * n + net->a_star[b * D + d]) * NA;
            for (int j = 0; j < NA; j++)
                net->p_tmp[j] = R_EXP(lp[j]);
            FOX_NET(c51_project)(net->p_tmp, NA, net->sup_min[d], net->sup_max[d], bt->r[b], g,
                                 mb + (size_t)d * NA);
        }
        if (hp->target_mode != FOX_TARGET_MEAN)
            continue;
        for (int j = 0; j < NA; j++) {
            real mean = R(0);
            for (int d = 0; d < D; d++)
                mean += mb[(size_t)d * NA + j];
            mean /= (real)D;
            for (int d = 0; d < D; d++)
                mb[(size_t)d * NA + j] = mean;
        }
    }
}

/*
 * IQN targets θ′ [B × D × NT]: θ′_j = r + γⁿ(1 − done)·s·q_target(τ′_j)[off_d + a*_d],
 * the target head's output in the step's unit s (the net's td_scale). Unlike
 * the C51 target, nothing bounds them by construction: this is the buffer
 * Mech 1 clips (slot 46).
 */
static void
iqn_targets(struct FOX_NET_T *net, const FOX_NET(batch) *bt, const FOX_NET(hparams) *hp)
{
    const fox_model_layout *lay = &net->lay;
    int D = lay->n_branches, NT = lay->NT, NAct = lay->n_actions;
    for (int b = 0; b < bt->B; b++) {
        real g = hp->gamma_n * (R(1) - bt->done[b]) * net->td_scale;
        for (int d = 0; d < D; d++) {
            int col_t = lay->branch_off[d] + net->a_star[b * D + d];
            real *th = net->target_q + ((size_t)b * D + d) * NT;
            for (int j = 0; j < NT; j++)
                th[j] = bt->r[b] + g * net->iq_tgt.q[((size_t)b * NT + j) * NAct + col_t];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Losses: each returns its value and writes the gradient of λ·loss w.r.t. its head's output  */

static real
weight_of(const FOX_NET(batch) *bt, int b)
{
    return bt->w ? bt->w[b] : R(1);
}

/*
 * C51: (1/(B·D)) Σ_b Σ_d w_b·(−Σ_j m_j log p_d(s, a_d, j)). d_logit gets
 * coef·(p_j·Σm − m_j) at the chosen action's row, 0 at the others.
 * td[b] = Σ_d |E_m[z] − E_{p_d(s,a_d)}[z]| (the PER priority). lo->q_dir_abs
 * gets the mean |E_{p_0(s,a_0)}[z]| of the direction branch.
 */
static double
c51_loss(struct FOX_NET_T *net, const FOX_NET(batch) *bt, FOX_NET(loss) *lo)
{
    const fox_model_layout *lay = &net->lay;
    int B = bt->B, D = lay->n_branches, NA = lay->NA;
    /* The taken actions' log-probabilities, gathered: the buffer slot 7 watches. */
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++) {
            int n = lay->branch_size[d], a = bt->a[b * D + d];
            memcpy(net->cur_lp + ((size_t)b * D + d) * NA,
                   branch_rows(lay, net->on.logp, B, d) + ((size_t)b * n + a) * NA,
                   (size_t)NA * sizeof *net->cur_lp);
        }
    point(net, FOX_SENT_CURRENT_LP, net->cur_lp, (size_t)B * D * NA);
    double loss = 0.0, q_dir = 0.0;
    memset(net->d_logit, 0, (size_t)B * lay->n_actions * NA * sizeof *net->d_logit);
    for (int b = 0; b < B; b++) {
        real coef = weight_of(bt, b) / (real)(B * D);
        real prio = R(0);
        for (int d = 0; d < D; d++) {
            int n = lay->branch_size[d], a = bt->a[b * D + d];
            const real *lp = net->cur_lp + ((size_t)b * D + d) * NA;
            const real *m = net->m + ((size_t)b * D + d) * NA;
            real *dl = branch_rows(lay, net->d_logit, B, d) + ((size_t)b * n + a) * NA;
            const real *z = net->z + (size_t)d * NA;
            real ce = R(0), msum = R(0), em = R(0), ep = R(0);
            for (int j = 0; j < NA; j++) {
                ce -= m[j] * lp[j];
                msum += m[j];
                em += m[j] * z[j];
                ep += R_EXP(lp[j]) * z[j];
            }
            for (int j = 0; j < NA; j++)
                dl[j] = coef * (R_EXP(lp[j]) * msum - m[j]);
            loss += (double)(coef * ce);
            prio += R_FABS(em - ep);
            if (d == 0)
                q_dir += R_FABS(ep);
        }
        net->td[b] = prio;
    }
    point(net, FOX_SENT_TD_ERRORS, net->td, (size_t)B);
    lo->q_dir_abs = q_dir / (double)B;
    return loss;
}

/* Huber (κ = 1) and its derivative. */
static real
huber(real x)
{
    real ax = R_FABS(x);
    return ax <= R(1) ? R(0.5) * x * x : ax - R(0.5);
}

static real
huber_grad(real x)
{
    return x > R(1) ? R(1) : x < R(-1) ? R(-1) : x;
}

/*
 * IQN quantile Huber: θ_i = s·q(τ_i)[off_d + a_d] with s the step's unit (the
 * net's td_scale), θ′_j the target_q row of (b, d) (iqn_targets), δ_ij =
 * (θ′_j − θ_i) / s, ρ_ij = |τ_i − 1{δ_ij < 0}|·Huber(δ_ij); loss = (1/(B·D))
 * Σ_b w_b Σ_d Σ_i (1/NT) Σ_j ρ_ij. d_q gets λ·∂loss/∂q, where ∂δ_ij/∂q = −1.
 */
static double
iqn_loss(struct FOX_NET_T *net, const FOX_NET(batch) *bt, const FOX_NET(hparams) *hp)
{
    const fox_model_layout *lay = &net->lay;
    int B = bt->B, D = lay->n_branches, NT = lay->NT, NAct = lay->n_actions;
    double loss = 0.0;
    const real s = net->td_scale;
    memset(net->d_q, 0, (size_t)B * NT * NAct * sizeof *net->d_q);
    for (int b = 0; b < B; b++) {
        real coef = weight_of(bt, b) / (real)(B * D) / (real)NT;
        for (int d = 0; d < D; d++) {
            int col = lay->branch_off[d] + bt->a[b * D + d];
            const real *theta_t = net->target_q + ((size_t)b * D + d) * NT;
            for (int i = 0; i < NT; i++) {
                size_t qi = ((size_t)b * NT + i) * NAct + col;
                real theta = s * net->iq_on.q[qi], tau = bt->tau[b * NT + i];
                real rho = R(0), drho = R(0);
                for (int j = 0; j < NT; j++) {
                    real delta = (theta_t[j] - theta) / s;
                    real wq = R_FABS(tau - (delta < R(0) ? R(1) : R(0)));
                    rho += wq * huber(delta);
                    drho += wq * huber_grad(delta);
                }
                loss += (double)(coef * rho);
                net->d_q[qi] -= hp->iqn_lambda * coef * drho;
            }
        }
    }
    return loss;
}

/*
 * Aux: next-bar MSE (1/B) Σ w_b·(pred − aux_ret/scale)², regime CE
 * (1/B) Σ −log p(label), unweighted, into aux_loss_v [2]. d_ret, d_reg get
 * λ·∂/∂(head output).
 */
static void
aux_loss(struct FOX_NET_T *net, const FOX_NET(batch) *bt, const FOX_NET(hparams) *hp)
{
    int B = bt->B, NR = net->lay.NR;
    real lam = hp->aux_lambda;
    double ret_loss = 0.0, reg_loss = 0.0;
    for (int b = 0; b < B; b++) {
        real w = weight_of(bt, b);
        real err = net->aux.ret[b] - bt->aux_ret[b] / hp->aux_label_scale;
        ret_loss += (double)(w * err * err / (real)B);
        net->d_ret[b] = lam * R(2) * w * err / (real)B;

        const real *lp = net->aux.reg_logp + (size_t)b * NR;
        int label = bt->aux_regime[b];
        reg_loss -= (double)(lp[label] / (real)B);
        for (int k = 0; k < NR; k++)
            net->d_reg[(size_t)b * NR + k] =
                lam * (R_EXP(lp[k]) - (k == label ? R(1) : R(0))) / (real)B;
    }
    net->aux_loss_v[0] = (real)ret_loss;
    net->aux_loss_v[1] = (real)reg_loss;
}

/* ------------------------------------------------------------------------------------------ */
/* Backward of the heads into d h_s2                                                          */

/* d_logit → the dueling backward of every branch: d_val [B × NA], d_adv [B × NAct × NA]. */
static void
c51_duel_bwd(struct FOX_NET_T *net, int B)
{
    const fox_model_layout *lay = &net->lay;
    memset(net->d_val, 0, (size_t)B * lay->NA * sizeof *net->d_val);
    for (int d = 0; d < lay->n_branches; d++)
        dueling_bwd(B, lay->branch_size[d], lay->NA, branch_rows(lay, net->d_logit, B, d),
                    net->d_val, branch_rows(lay, net->d_adv, B, d));
}

/* d_adv, d_val → branch and value heads; d h_s2 = scale·(their input gradient). */
static void
c51_heads_bwd(struct FOX_NET_T *net, const net_view *v, int B, real scale)
{
    const fox_model_layout *lay = &net->lay;
    const real *hs2 = net->on.g2.y;
    size_t nh = (size_t)B * lay->H2;
    memset(net->dh_c51, 0, nh * sizeof *net->dh_c51);
    for (int d = 0; d < lay->n_branches; d++)
        mlp2_bwd(&v->br[d], B, hs2, branch_hid(lay, &net->on, B, d),
                 branch_rows(lay, net->d_adv, B, d), net->d_hid, net->dh_c51);
    mlp2_bwd(&v->val, B, hs2, net->on.val_hid, net->d_val, net->d_hid, net->dh_c51);
    for (size_t k = 0; k < nh; k++)
        net->dh_s2[k] = scale * net->dh_c51[k];
}

/* Aux heads → their weights and dh_aux [B × H2], the aux heads' gradient into h_s2. */
static void
aux_bwd(struct FOX_NET_T *net, const net_view *v, int B)
{
    const real *hs2 = net->on.g2.y;
    memset(net->dh_aux, 0, (size_t)B * net->lay.H2 * sizeof *net->dh_aux);
    mlp2_bwd(&v->auxr, B, hs2, net->aux.ret_hid, net->d_ret, net->d_hid, net->dh_aux);
    mlp2_bwd(&v->auxg, B, hs2, net->aux.reg_hid, net->d_reg, net->d_hid, net->dh_aux);
}

/*
 * d_q → Wq, bq (and d_x = d_q·Wq, the IQN gradient towards the trunk), then
 * dh_iqn [B × H2] = Σ_i d_x ⊙ φ_i (through x = h_s2 ⊙ φ) and d φ = d_x ⊙ h_s2
 * → Wφ, bφ. The point between them is the seeds' slot 26.
 */
static void
iqn_bwd(struct FOX_NET_T *net, const iqn_head *h, int B)
{
    const fox_model_layout *lay = &net->lay;
    const iqn_cache *c = &net->iq_on;
    const real *hs2 = net->on.g2.y;
    int rows = B * lay->NT, H2 = lay->H2;
    linear_bwd(rows, H2, lay->n_actions, net->d_q, c->x, h->wq, h->dwq, h->dbq, net->d_x, R(0));
    point(net, FOX_SENT_IQN_TRUNK_GRAD, net->d_x, (size_t)rows * H2);
    memset(net->dh_iqn, 0, (size_t)B * H2 * sizeof *net->dh_iqn);
    for (int r = 0; r < rows; r++) {
        const real *hb = hs2 + (size_t)(r / lay->NT) * H2;
        real *dhb = net->dh_iqn + (size_t)(r / lay->NT) * H2;
        const real *dx = net->d_x + (size_t)r * H2;
        real *dphi = net->d_phi + (size_t)r * H2;
        const real *phi = c->phi + (size_t)r * H2;
        for (int k = 0; k < H2; k++) {
            dhb[k] += dx[k] * phi[k];
            dphi[k] = dx[k] * hb[k];
        }
    }
    relu_bwd((size_t)rows * H2, c->phi, net->d_phi);
    linear_bwd(rows, lay->NC, H2, net->d_phi, c->cosf, h->wphi, h->dwphi, h->dbphi, NULL, R(0));
}

/* dh_s2 += a head's gradient into h_s2 [B × H2]. */
static void
add_into(real *dh, const real *x, size_t n)
{
    for (size_t k = 0; k < n; k++)
        dh[k] += x[k];
}

static int
check_inputs(const FOX_NET_T *net, const FOX_NET(batch) *bt, const FOX_NET(hparams) *hp)
{
    const fox_model_layout *lay = &net->lay;
    if (bt->B < 1 || bt->B > net->max_batch || !bt->s || !bt->s_next || !bt->a || !bt->r ||
        !bt->done || !bt->aux_ret || !bt->aux_regime || !bt->tau || !bt->tau_next)
        return FOX_EINVAL;
    if ((hp->target_mode != FOX_TARGET_MEAN && hp->target_mode != FOX_TARGET_INDEP) ||
        !(hp->aux_label_scale > R(0)))
        return FOX_EINVAL;
    int D = lay->n_branches;
    for (int b = 0; b < bt->B; b++) {
        for (int d = 0; d < D; d++)
            if (bt->a[b * D + d] < 0 || bt->a[b * D + d] >= lay->branch_size[d])
                return FOX_EINVAL;
        if (bt->aux_regime[b] < 0 || bt->aux_regime[b] >= lay->NR)
            return FOX_EINVAL;
    }
    return FOX_OK;
}

int
FOX_NET(loss_grad)(FOX_NET_T *net, const FOX_REAL *params, const FOX_REAL *target_params,
                   const FOX_NET(batch) *bt, const FOX_NET(hparams) *hp, FOX_NET(loss) *loss,
                   FOX_REAL *grads, FOX_REAL *priority)
{
    if (!net || !params || !target_params || !bt || !hp || !loss || !grads)
        return FOX_EINVAL;
    int rv = check_inputs(net, bt, hp);
    if (rv != FOX_OK)
        return rv;
    const fox_model_layout *lay = &net->lay;
    int B = bt->B, D = lay->n_branches;
    memset(grads, 0, lay->n_params * sizeof *grads);
    net_view on = net_view_of(lay, params, grads);
    net_view tg = net_view_of(lay, target_params, NULL);

    const size_t nh = (size_t)B * lay->H2, nact = (size_t)B * lay->n_actions * lay->NA;
    const size_t nq = (size_t)B * lay->NT * lay->n_actions;

    /* Forward: online on s (cached for backward), online on s′ (argmax), target on s′. */
    c51_forward(&on, lay, &net->on, bt->s, B, net);
    c51_forward(&on, lay, &net->on_next, bt->s_next, B, NULL);
    c51_forward(&tg, lay, &net->tgt, bt->s_next, B, NULL);
    point(net, FOX_SENT_TARGET_LOGITS, net->tgt.logp, nact);
    greedy_next(net, B);
    c51_targets(net, bt, hp);
    point(net, FOX_SENT_PROJECTED, net->m, (size_t)B * D * lay->NA);
    iqn_fwd(&on.iqn, lay, B, net->on.g2.y, bt->tau, &net->iq_on);
    point(net, FOX_SENT_IQN_Q_ONLINE, net->iq_on.q, nq);
    iqn_fwd(&tg.iqn, lay, B, net->tgt.g2.y, bt->tau_next, &net->iq_tgt);
    point(net, FOX_SENT_IQN_Q_TARGET, net->iq_tgt.q, nq);
    iqn_targets(net, bt, hp);
    point(net, FOX_SENT_TARGET_Q_POST_CLIP, net->target_q, (size_t)B * D * lay->NT);
    aux_fwd(&on, lay, B, net->on.g2.y, &net->aux);

    /* Losses, and the gradients of the head outputs (λ included). */
    loss->c51 = c51_loss(net, bt, loss);
    if (priority)
        memcpy(priority, net->td, (size_t)B * sizeof *priority);
    loss->iqn = iqn_loss(net, bt, hp);
    point(net, FOX_SENT_D_IQN_Q, net->d_q, nq);
    aux_loss(net, bt, hp);
    point(net, FOX_SENT_AUX_LOSS, net->aux_loss_v, 2);
    loss->aux_ret = (double)net->aux_loss_v[0];
    loss->aux_regime = (double)net->aux_loss_v[1];
    net->total_loss_v[0] = (real)(loss->c51 + (double)hp->iqn_lambda * loss->iqn +
                                  (double)hp->aux_lambda * (loss->aux_ret + loss->aux_regime));
    point(net, FOX_SENT_TOTAL_LOSS, net->total_loss_v, 1);
    loss->total = (double)net->total_loss_v[0];

    /* Backward: heads into d h_s2 (C51 scaled as in BDQ, then aux, then IQN), then the trunk. */
    real scale = hp->bdq_trunk_scale ? R(1) / (real)(D + 1) : R(1);
    c51_duel_bwd(net, B);
    point(net, FOX_SENT_D_V_LOGITS, net->d_val, (size_t)B * lay->NA);
    point(net, FOX_SENT_D_ADV_LOGITS, net->d_adv, nact);
    c51_heads_bwd(net, &on, B, scale);
    point(net, FOX_SENT_D_H_S2_POST_MAIN, net->dh_s2, nh);
    aux_bwd(net, &on, B);
    point(net, FOX_SENT_AUX_D_H_S2, net->dh_aux, nh);
    add_into(net->dh_s2, net->dh_aux, nh);
    point(net, FOX_SENT_D_H_S2_POST_AUX, net->dh_s2, nh);
    iqn_bwd(net, &on.iqn, B);
    point(net, FOX_SENT_IQN_D_H_S2, net->dh_iqn, nh);
    add_into(net->dh_s2, net->dh_iqn, nh);
    point(net, FOX_SENT_D_H_S2_POST_IQN, net->dh_s2, nh);
    grn_bwd(&on.g2, B, net->on.g1.y, &net->on.g2, net->dh_s2, net->dh_s1, net->grn_tmp);
    grn_bwd(&on.g1, B, bt->s, &net->on.g1, net->dh_s1, net->want_d_states ? net->d_states : NULL,
            net->grn_tmp);
    if (net->want_d_states)
        point(net, FOX_SENT_D_STATES, net->d_states, (size_t)B * lay->S);
    return FOX_OK;
}

