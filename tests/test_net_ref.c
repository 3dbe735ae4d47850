/*
 * test_net_ref.c — the CPU reference network (gpu/cpu/net.c) against other
 * implementations of the same model: a naive row-by-row transcription of
 * the losses, and the float build against the double one (losses, every
 * gradient, q-values).
 *
 * Not tested here: the gradients against the losses (the finite-difference
 * checks of test_net.c) and the CUDA kernels (the GPU parity suite).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cpu/net.h"
#include "gpu/model.h"
#include "tests/net_fixture.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------------------------------ */
/* Forward semantics: a second, naive implementation of the losses, row by row                */

/*
 * The finite-difference checks only prove that the gradients match the
 * losses as net.c computes them; this plain-loop transcription of
 * docs/design.md's model checks the losses themselves (targets, dueling, quantile
 * weights, normalisations).
 */
typedef struct ref {
    const fox_model_layout *lay;
    double z[64];
} ref;

static const double *
ref_t(const ref *R, const double *p, int i)
{
    return p + R->lay->t[i].offset;
}

/* y [out] = W [out × in]·x + b (b may be NULL). */
static void
ref_lin(const double *W, const double *b, const double *x, int in, int out, double *y)
{
    for (int o = 0; o < out; o++) {
        y[o] = b ? b[o] : 0.0;
        for (int i = 0; i < in; i++)
            y[o] += W[o * in + i] * x[i];
    }
}

static void
ref_grn(const ref *R, const double *p, int first, const double *a, double *y)
{
    int in = R->lay->t[first].cols, out = R->lay->t[first].rows;
    double e2[64], e1[64], gt[64], lv[64], u[64];
    ref_lin(ref_t(R, p, first + FOX_GRN_W2), ref_t(R, p, first + FOX_GRN_B2), a, in, out, e2);
    for (int k = 0; k < out; k++)
        e2[k] = e2[k] > 0 ? e2[k] : exp(e2[k]) - 1.0;
    ref_lin(ref_t(R, p, first + FOX_GRN_W1), ref_t(R, p, first + FOX_GRN_B1), e2, out, out, e1);
    ref_lin(ref_t(R, p, first + FOX_GRN_WG), ref_t(R, p, first + FOX_GRN_BG), e1, out, out, gt);
    ref_lin(ref_t(R, p, first + FOX_GRN_WV), ref_t(R, p, first + FOX_GRN_BV), e1, out, out, lv);
    if (in != out)
        ref_lin(ref_t(R, p, first + FOX_GRN_WR), NULL, a, in, out, u);
    else
        memcpy(u, a, (size_t)out * sizeof *u);
    double mean = 0.0, var = 0.0;
    for (int k = 0; k < out; k++) {
        u[k] += lv[k] / (1.0 + exp(-gt[k]));
        mean += u[k] / out;
    }
    for (int k = 0; k < out; k++)
        var += (u[k] - mean) * (u[k] - mean) / out;
    for (int k = 0; k < out; k++)
        y[k] = (u[k] - mean) / sqrt(var + 1e-5) * ref_t(R, p, first + FOX_GRN_LN_G)[k] +
               ref_t(R, p, first + FOX_GRN_LN_B)[k];
}

static void
ref_mlp2(const ref *R, const double *p, int first, const double *x, double *y)
{
    int in = R->lay->t[first].cols, hid = R->lay->t[first].rows, out = R->lay->t[first + 2].rows;
    double h[64];
    ref_lin(ref_t(R, p, first), ref_t(R, p, first + 1), x, in, hid, h);
    for (int k = 0; k < hid; k++)
        h[k] = h[k] > 0 ? h[k] : 0.0;
    ref_lin(ref_t(R, p, first + 2), ref_t(R, p, first + 3), h, hid, out, y);
}

static void
ref_trunk(const ref *R, const double *p, const double *s, double *h2)
{
    double h1[64];
    ref_grn(R, p, FOX_P_GRN1_W2, s, h1);
    ref_grn(R, p, FOX_P_GRN2_W2, h1, h2);
}

/* Branch d's probabilities [n_d × NA] at trunk output h. */
static void
ref_probs(const ref *R, const double *p, const double *h, int d, double *prob)
{
    int NA = R->lay->NA, n = R->lay->branch_size[d];
    double V[64], A[8 * 64];
    ref_mlp2(R, p, FOX_P_VAL_W1, h, V);
    ref_mlp2(R, p, FOX_P_BR0_W1 + FOX_BRANCH_NT * d, h, A);
    for (int a = 0; a < n; a++) {
        double mx = -INFINITY, sum = 0.0;
        double *row = prob + a * NA;
        for (int j = 0; j < NA; j++) {
            double mean = 0.0;
            for (int a2 = 0; a2 < n; a2++)
                mean += A[a2 * NA + j] / n;
            row[j] = V[j] + A[a * NA + j] - mean;
            mx = fmax(mx, row[j]);
        }
        for (int j = 0; j < NA; j++)
            sum += row[j] = exp(row[j] - mx);
        for (int j = 0; j < NA; j++)
            row[j] /= sum;
    }
}

static double
ref_mean_z(const ref *R, const double *prob)
{
    double e = 0.0;
    for (int j = 0; j < R->lay->NA; j++)
        e += prob[j] * R->z[j];
    return e;
}

/* IQN quantiles [NAct] at trunk output h and fraction tau. */
static void
ref_iqn(const ref *R, const double *p, const double *h, double tau, double *q)
{
    int NC = R->lay->NC, H2 = R->lay->H2;
    double c[64], phi[64];
    for (int k = 0; k < NC; k++)
        c[k] = cos(M_PI * k * tau);
    ref_lin(ref_t(R, p, FOX_P_IQN_WPHI), ref_t(R, p, FOX_P_IQN_BPHI), c, NC, H2, phi);
    for (int k = 0; k < H2; k++)
        phi[k] = (phi[k] > 0 ? phi[k] : 0.0) * h[k];
    ref_lin(ref_t(R, p, FOX_P_IQN_WQ), ref_t(R, p, FOX_P_IQN_BQ), phi, H2, R->lay->n_actions, q);
}

static void
ref_losses(const ref *R, const double *on, const double *tg, const inputs *in,
           const fox_cpud_net_hparams *hp, fox_cpud_net_loss *l, double *prio)
{
    const fox_model_layout *lay = R->lay;
    int B = in->B, D = lay->n_branches, NA = lay->NA, NT = lay->NT, S = lay->S;
    memset(l, 0, sizeof *l);
    for (int b = 0; b < B; b++) {
        double h[64], hn[64], ht[64], g = hp->gamma_n * (1.0 - in->done[b]), w = in->w[b];
        ref_trunk(R, on, in->s + b * S, h);
        ref_trunk(R, on, in->s_next + b * S, hn);
        ref_trunk(R, tg, in->s_next + b * S, ht);
        double m[4][64], pchosen[4][64];
        int astar[4];
        for (int d = 0; d < D; d++) {
            double pr[8 * 64];
            ref_probs(R, on, hn, d, pr);
            astar[d] = 0;
            for (int a = 1; a < lay->branch_size[d]; a++)
                if (ref_mean_z(R, pr + a * NA) > ref_mean_z(R, pr + astar[d] * NA))
                    astar[d] = a;
            ref_probs(R, tg, ht, d, pr);
            fox_cpud_net_c51_project(pr + astar[d] * NA, NA, lay->v_min, lay->v_max, in->r[b], g,
                                     m[d]);
            ref_probs(R, on, h, d, pr);
            memcpy(pchosen[d], pr + in->a[b * D + d] * NA, (size_t)NA * sizeof(double));
        }
        if (hp->target_mode == FOX_TARGET_MEAN)
            for (int j = 0; j < NA; j++) {
                double mean = 0.0;
                for (int d = 0; d < D; d++)
                    mean += m[d][j] / D;
                for (int d = 0; d < D; d++)
                    m[d][j] = mean;
            }
        prio[b] = 0.0;
        for (int d = 0; d < D; d++) {
            for (int j = 0; j < NA; j++)
                l->c51 -= w * m[d][j] * log(pchosen[d][j]) / (B * D);
            prio[b] += fabs(ref_mean_z(R, m[d]) - ref_mean_z(R, pchosen[d]));
        }
        for (int d = 0; d < D; d++) {
            int col = lay->branch_off[d] + in->a[b * D + d];
            int col_t = lay->branch_off[d] + astar[d];
            for (int i = 0; i < NT; i++) {
                double qi[16], qj[16], tau = in->tau[b * NT + i];
                ref_iqn(R, on, h, tau, qi);
                for (int j = 0; j < NT; j++) {
                    ref_iqn(R, tg, ht, in->tau_next[b * NT + j], qj);
                    double delta = in->r[b] + g * qj[col_t] - qi[col];
                    double hub = fabs(delta) <= 1.0 ? 0.5 * delta * delta : fabs(delta) - 0.5;
                    l->iqn += w * fabs(tau - (delta < 0)) * hub / NT / (B * D);
                }
            }
        }
        double pred, lg[8], mx = -INFINITY, sum = 0.0;
        ref_mlp2(R, on, FOX_P_AUXR_W1, h, &pred);
        double err = pred - in->aux_ret[b] / hp->aux_label_scale;
        l->aux_ret += w * err * err / B;
        ref_mlp2(R, on, FOX_P_AUXG_W1, h, lg);
        for (int k = 0; k < lay->NR; k++)
            mx = fmax(mx, lg[k]);
        for (int k = 0; k < lay->NR; k++)
            sum += exp(lg[k] - mx);
        l->aux_regime += -(lg[in->regime[b]] - mx - log(sum)) / B;
    }
    l->total = l->c51 + hp->iqn_lambda * l->iqn + hp->aux_lambda * (l->aux_ret + l->aux_regime);
}

START_TEST(test_losses_vs_naive)
{
    net_fx f;
    net_fx_init(&f, 3, 31);
    ref R = {.lay = &f.lay};
    ck_assert_int_le(f.lay.NA, 64);
    for (int j = 0; j < f.lay.NA; j++)
        R.z[j] = f.lay.v_min + j * ((double)f.lay.v_max - f.lay.v_min) / (f.lay.NA - 1);
    for (int mode = 0; mode < 2; mode++) {
        fox_cpud_net_hparams hp = hparams_double(LAMBDA_IQN, LAMBDA_AUX, mode, 1);
        fox_cpud_net_loss got, want;
        double pg[3], pw[3];
        FOX_CK_OK(fox_cpud_net_loss_grad(f.net, f.params, f.target, &f.bt, &hp, &got, f.grads, pg));
        ref_losses(&R, f.params, f.target, &f.in, &hp, &want, pw);
        const double *a[] = {&got.total, &got.c51, &got.iqn, &got.aux_ret, &got.aux_regime};
        const double *b[] = {&want.total, &want.c51, &want.iqn, &want.aux_ret, &want.aux_regime};
        for (int k = 0; k < 5; k++)
            ck_assert_msg(fabs(*a[k] - *b[k]) <= 1e-12 * fabs(*b[k]),
                          "mode %d loss %d: %.17g vs %.17g", mode, k, *a[k], *b[k]);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(fabs(pg[k] - pw[k]) <= 1e-12 * pw[k], "priority %d: %.17g vs %.17g", k,
                          pg[k], pw[k]);
    }
    /* Without importance weights, w = 1. */
    f.bt.w = NULL;
    for (int b = 0; b < 3; b++)
        f.in.w[b] = 1.0;
    fox_cpud_net_hparams hp = hparams_double(LAMBDA_IQN, LAMBDA_AUX, FOX_TARGET_MEAN, 1);
    fox_cpud_net_loss got, want;
    double pg[3], pw[3];
    FOX_CK_OK(fox_cpud_net_loss_grad(f.net, f.params, f.target, &f.bt, &hp, &got, f.grads, pg));
    ref_losses(&R, f.params, f.target, &f.in, &hp, &want, pw);
    ck_assert(fabs(got.total - want.total) <= 1e-12 * fabs(want.total));
    net_fx_fini(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Float vs double                                                                            */

START_TEST(test_float_vs_double)
{
    net_fx f;
    int B = 3;
    net_fx_init(&f, B, 99);
    size_t n = f.lay.n_params;
    float *pf = to_float(f.params, n), *tf = to_float(f.target, n), *gf = malloc(n * sizeof *gf);
    ck_assert_ptr_nonnull(gf);
    fox_cpu_net *netf;
    FOX_CK_OK(fox_cpu_net_create(&netf, &f.lay, B));
    fox_cpu_net_batch bf = batch_float(&f.in);
    for (int mode = 0; mode < 2; mode++) {
        fox_cpud_net_loss ld;
        fox_cpu_net_loss lf;
        net_grad(&f, LAMBDA_IQN, LAMBDA_AUX, mode, 1, f.grads, &ld);
        fox_cpu_net_hparams hpf = {0.9f, LAMBDA_IQN, LAMBDA_AUX, 0.01f, mode, 1};
        FOX_CK_OK(fox_cpu_net_loss_grad(netf, pf, tf, &bf, &hpf, &lf, gf, NULL));
        const double *pd[] = {&ld.total, &ld.c51, &ld.iqn, &ld.aux_ret, &ld.aux_regime};
        const double *pfl[] = {&lf.total, &lf.c51, &lf.iqn, &lf.aux_ret, &lf.aux_regime};
        for (int k = 0; k < 5; k++)
            ck_assert_msg(fabs(*pfl[k] - *pd[k]) <= 1e-3 * fabs(*pd[k]), "loss %d: %.9g vs %.9g", k,
                          *pfl[k], *pd[k]);
        /*
         * Per element against the tensor's largest gradient: single elements
         * near zero carry float cancellation that a pure relative test
         * would flag.
         */
        double worst = 0.0;
        for (int i = 0; i < FOX_P_COUNT; i++) {
            const fox_tensor_desc *t = &f.lay.t[i];
            size_t sz = fox_tensor_size(&f.lay, i);
            double mx = 0.0;
            for (size_t k = 0; k < sz; k++)
                mx = fmax(mx, fabs(f.grads[t->offset + k]));
            for (size_t k = 0; k < sz; k++) {
                double d = fabs(gf[t->offset + k] - f.grads[t->offset + k]);
                double rel = d / fmax(fabs(f.grads[t->offset + k]), 1e-2 * mx);
                worst = fmax(worst, rel);
                ck_assert_msg(rel <= 1e-3, "%s[%zu]: float %.9g double %.9g", t->name, k,
                              gf[t->offset + k], f.grads[t->offset + k]);
            }
        }
        printf("float vs double (%s): worst gradient rel %.2e\n", mode ? "indep" : "mean", worst);
    }

    /* q_values agree too, and lie on the support. */
    double qd[3 * 12];
    float qf[3 * 12];
    FOX_CK_OK(fox_cpud_net_q_values(f.net, f.params, f.in.s, B, qd));
    FOX_CK_OK(fox_cpu_net_q_values(netf, pf, f.in.fs, B, qf));
    for (int k = 0; k < B * f.lay.n_actions; k++) {
        ck_assert(qd[k] >= f.lay.v_min && qd[k] <= f.lay.v_max);
        ck_assert_msg(fabs(qf[k] - qd[k]) <= 1e-4 * (1 + fabs(qd[k])), "q[%d] %g vs %g", k, qf[k],
                      qd[k]);
    }
    fox_cpu_net_destroy(netf);
    free(pf);
    free(tf);
    free(gf);
    net_fx_fini(&f);
}
END_TEST

static Suite *
net_ref_suite(void)
{
    Suite *su = suite_create("net_ref");
    TCase *tc = tcase_create("net");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_losses_vs_naive);
    tcase_add_test(tc, test_float_vs_double);
    suite_add_tcase(su, tc);
    return su;
}

int
main(void)
{
    return fox_test_run_suite(net_ref_suite());
}
