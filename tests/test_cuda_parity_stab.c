/*
 * test_cuda_parity_stab.c — part of the CUDA parity test (test_cuda_parity.c
 * has the fixture and main): the stability kernels against their CPU twins
 * (sentinel.h, bounds.h): the fused check on each kind of rule and on
 * strided buffers, the h_s2 site, the atom grid, the SP4 producers, the
 * gradient clip, and the target-Q bound inside the loss.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/bounds.h"
#include "gpu/cpu/net.h"
#include "gpu/cpu/stab.h"
#include "gpu/cuda/debug.h"
#include "gpu/isv.h"
#include "gpu/rng.h"
#include "gpu/sentinel.h"
#include "tests/testutil.h"
#include "tests/cuda_parity.h"

/* ------------------------------------------------------------------------------------------ */
/* The stability kernels against their CPU twins (sentinel.h, bounds.h)                        */

/* The fused check kernel fires exactly when fox_sentinel_check does, on each kind of rule. */
START_TEST(check_kernel_vs_cpu)
{
    /*
     * Ten chunks of the check kernel (4096 floats each); the odd length is staged
     * misaligned (fox_cuda_debug_check), so the float4 body's scalar head and tail run too.
     */
    const size_t lens[] = {40000, 40003};
    size_t n = lens[1];
    float *x = malloc(n * sizeof *x), isv[FOX_ISV_TOTAL_DIM];
    ck_assert_ptr_nonnull(x);
    fox_isv_init(isv);
    isv[FOX_ISV_Q_ABS_REF] = 3.0f;
    isv[FOX_ISV_H_S2_RMS_EMA] = 0.5f; /* below 1: eff = 1 (the ε on the multiplier) */
    fox_rng rng;
    fox_rng_seed(&rng, 9);
    const int slots[] = {FOX_SENT_H_S1, FOX_SENT_TRUNK_WEIGHT_MAX, FOX_SENT_H_S2_MAX_ABS,
                         FOX_SENT_TRUNK_ADAM_V_MAX, FOX_SENT_ATOM_SPAN_MAX};
    int cases = 0;
    for (size_t li = 0; li < 2; li++)
    for (size_t si = 0; si < sizeof slots / sizeof slots[0]; si++) {
        int slot = slots[si];
        float t = 0.0f;
        if (fox_sentinel_kind(slot) == FOX_SENT_KIND_THRESHOLD)
            FOX_CK_OK(fox_sentinel_threshold(slot, isv, &t));
        size_t len = slot == FOX_SENT_ATOM_SPAN_MAX ? 51 + li : lens[li];
        /* clean; one NaN; one Inf; at the threshold; just below it */
        for (int c = 0; c < 5; c++) {
            for (size_t k = 0; k < len; k++)
                x[k] = (float)fox_rng_normal(&rng);
            size_t at = (size_t)fox_rng_below(&rng, (uint32_t)len);
            if (c == 1)
                x[at] = NAN;
            else if (c == 2)
                x[at] = -INFINITY;
            else if (c == 3 && t > 0.0f)
                x[at] = slot == FOX_SENT_ATOM_SPAN_MAX ? x[at] + t : t;
            else if (c == 4 && t > 0.0f)
                x[at] = slot == FOX_SENT_ATOM_SPAN_MAX ? 0.0f : nextafterf(t, 0.0f);
            int cpu = 0, gpu_fired = -1;
            FOX_CK_OK(fox_sentinel_check(slot, x, len, isv, &cpu));
            FOX_CK_OK(fox_cuda_debug_check(fox_parity_gpu, slot, x, 1, (int)len, (int)len, isv,
                                           &gpu_fired));
            ck_assert_msg(gpu_fired == cpu, "slot %d case %d: gpu %d cpu %d", slot, c, gpu_fired,
                          cpu);
            cases++;
        }
    }
    printf("stab check kernel: %d cases over %zu slots and 2 lengths agree with "
           "fox_sentinel_check\n", cases, sizeof slots / sizeof slots[0]);
    free(x);
}
END_TEST

/*
 * The fused check on strided buffers (the packed heads' logit columns): whole rows 16 bytes at
 * a time where width, stride and pointer allow, by scalar loads elsewhere. The columns past
 * the watched ones hold NaN, which must not fire; a NaN, an Inf or a value at the threshold in
 * a watched column must, as fox_sentinel_check does on the watched values alone.
 */
START_TEST(check_kernel_strided)
{
    const int shapes[][3] = {/* rows, cols, ld */
                             {9, 816, 1428},
                             {9, 51, 1428},
                             {9, 816, 1430},
                             {2, 5000, 5004}};
    const int slots[] = {FOX_SENT_ADV_LOGITS, FOX_SENT_H_S2_MAX_ABS};
    float isv[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    fox_rng rng;
    fox_rng_seed(&rng, 23);
    int cases = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int rows = shapes[k][0], cols = shapes[k][1], ld = shapes[k][2];
        float *x = malloc((size_t)rows * ld * sizeof *x),
              *w = malloc((size_t)rows * cols * sizeof *w);
        ck_assert(x && w);
        for (size_t si = 0; si < sizeof slots / sizeof slots[0]; si++) {
            int slot = slots[si];
            float t = 0.0f;
            if (fox_sentinel_kind(slot) == FOX_SENT_KIND_THRESHOLD)
                FOX_CK_OK(fox_sentinel_threshold(slot, isv, &t));
            /* clean; one NaN; one Inf; at the threshold */
            for (int c = 0; c < 4; c++) {
                for (int r = 0; r < rows; r++)
                    for (int j = 0; j < ld; j++)
                        x[(size_t)r * ld + j] = j < cols ? (float)fox_rng_normal(&rng) : NAN;
                int r = (int)fox_rng_below(&rng, (uint32_t)rows);
                int j = (int)fox_rng_below(&rng, (uint32_t)cols);
                float *at = &x[(size_t)r * ld + j];
                *at = c == 1 ? NAN : c == 2 ? INFINITY : c == 3 && t > 0.0f ? -t : *at;
                for (int q = 0; q < rows; q++)
                    memcpy(w + (size_t)q * cols, x + (size_t)q * ld, (size_t)cols * sizeof *w);
                int cpu = 0, gpu_fired = -1;
                FOX_CK_OK(fox_sentinel_check(slot, w, (size_t)rows * cols, isv, &cpu));
                FOX_CK_OK(
                    fox_cuda_debug_check(fox_parity_gpu, slot, x, rows, cols, ld, isv, &gpu_fired));
                ck_assert_msg(gpu_fired == cpu, "slot %d %d x %d (ld %d) case %d: gpu %d cpu %d",
                              slot, rows, cols, ld, c, gpu_fired, cpu);
                ck_assert_msg(c == 0              ? !cpu
                              : c < 3 || t > 0.0f ? cpu
                                                  : 1,
                              "slot %d case %d: the reference did not fire", slot, c);
                cases++;
            }
        }
        free(x);
        free(w);
    }
    printf("stab check kernel, strided: %d cases over %zu shapes agree with fox_sentinel_check\n",
           cases, sizeof shapes / sizeof shapes[0]);
}
END_TEST

/*
 * Mech 10's site: the clamped h_s2, the RMS EMA and slots 12 / 49 as stab.c
 * computes them, from the site's own kernel with fixed bounds, from inside
 * GRN2's tail (fixed bounds' path), there on LayerNorm inputs with the GLU
 * shut, against the CPU's LayerNorm (γ scaled so that the clamp and slot 49
 * engage in the second pass), and both ways with adaptive bounds (the p99,
 * its pass 1 in the tail there, then the site kernel): H_S2_BOUND from the
 * pre-clamp p99 (a fresh SP4 state, so Pearl A takes the observation), then
 * the clamp at it.
 */
START_TEST(h_s2_site_vs_cpu)
{
    const int H2 = 128;
    const size_t n = (size_t)BATCH * H2;
    float *h = malloc(n * sizeof *h), *ref = malloc(n * sizeof *ref), *x = malloc(n * sizeof *x);
    float *zero = calloc(n, sizeof *zero), *dx = malloc(n * sizeof *dx), gam[128], beta[128],
          dg[128], db[128];
    float isv[FOX_ISV_TOTAL_DIM], isv_ref[FOX_ISV_TOTAL_DIM];
    int flags[FOX_SENTINEL_SLOTS];
    static fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    ck_assert(h && ref && x && zero && dx);
    fox_rng rng;
    fox_rng_seed(&rng, 12);
    static const char *names[] = {"site kernel", "site in GRN2's tail", "adaptive site kernel",
                                  "adaptive site after GRN2's tail"};
    for (int mode = 0; mode < 4; mode++)
        for (int pass = 0; pass < 2; pass++) {
            const int tail = mode % 2, adaptive = mode >= 2;
            fox_isv_init(isv);
            isv[FOX_ISV_H_S2_RMS_EMA] = pass ? 2.0f : 0.0f; /* the Pearl A sentinel, a value */
            memcpy(isv_ref, isv, sizeof isv);
            for (size_t k = 0; k < n; k++)
                x[k] = 3.0f * (float)fox_rng_normal(&rng);
            if (pass) {
                x[5] = NAN;
                x[n / 2] = INFINITY;
                x[n - 3] = -5e5f; /* past 100 × h_eff and past slot 49's 1e3 × h_eff */
            }
            /* In the tail h_s2 is the LayerNorm's output: |x̂| ≤ √128, γ takes it past both. */
            for (int c = 0; c < H2; c++) {
                gam[c] = pass ? 600.0f : 20.0f;
                beta[c] = 0.0f;
            }
            if (tail)
                FOX_CK_OK(
                    fox_cpu_net_layernorm_fwd_bwd(H2, BATCH, x, gam, beta, zero, h, dx, dg, db));
            else
                memcpy(h, x, n * sizeof *h);
            int f12 = fox_sentinel_check_nonfinite(h, n), f49 = 0;
            FOX_CK_OK(fox_sentinel_check(FOX_SENT_H_S2_MAX_ABS, h, n, isv_ref, &f49));
            float bound = fox_bound_h_s2_fixed(isv_ref[FOX_ISV_H_S2_RMS_EMA]);
            if (adaptive) {
                fox_bounds_wiener_init(ws);
                float p99 = fox_p99_abs(h, n);
                if (p99 > 0.0f)
                    fox_bounds_observe(isv_ref, ws, FOX_ISV_H_S2_BOUND, p99);
                bound = fox_bound_adaptive(isv_ref[FOX_ISV_H_S2_BOUND]);
            }
            double ss = 0.0;
            size_t clamped = 0;
            for (size_t k = 0; k < n; k++) {
                ref[k] = fox_clamp_finite(h[k], bound);
                clamped += ref[k] != h[k];
                ss += (double)ref[k] * ref[k];
            }
            /* Adaptive: Pearls A+D from the fresh state (pass 1: the value 2 keeps, x_lag primed).
             */
            fox_signal_observe(isv_ref, ws, FOX_ISV_H_S2_RMS_EMA, (float)sqrt(ss / (double)n),
                               adaptive);
            float rms = isv_ref[FOX_ISV_H_S2_RMS_EMA];
            memcpy(h, x, n * sizeof *h);
            FOX_CK_OK(fox_cuda_debug_h_s2_site(fox_parity_gpu, h, n, tail ? H2 : 0, gam[0],
                                               adaptive, isv, flags));
            /*
             * The fixed-bound site alone moves bits as the CPU does; the tail's sums go in
             * another order, and the device's p99 may contract its last step into an FMA.
             */
            double worst = 0.0;
            for (size_t k = 0; k < n; k++) {
                double d = fabs((double)h[k] - ref[k]) / fmax(1.0, fabs((double)ref[k]));
                worst = isnan(d) ? INFINITY : fmax(worst, d);
            }
            ck_assert_msg(tail       ? worst < 1e-4
                          : adaptive ? worst < 1e-6
                                     : memcmp(h, ref, n * sizeof *h) == 0,
                          "%s pass %d: clamped h_s2 differs (worst %g)", names[mode], pass, worst);
            ck_assert_int_eq(flags[FOX_SENT_H_S2], f12);
            ck_assert_int_eq(flags[FOX_SENT_H_S2_MAX_ABS], f49);
            double e = rel_scalar(isv[FOX_ISV_H_S2_RMS_EMA], rms);
            ck_assert_msg(e < (tail ? 1e-5 : 1e-6), "%s pass %d: H_S2_RMS_EMA gpu %g cpu %g",
                          names[mode], pass, (double)isv[FOX_ISV_H_S2_RMS_EMA], (double)rms);
            if (adaptive)
                ck_assert_msg(rel_scalar(isv[FOX_ISV_H_S2_BOUND], isv_ref[FOX_ISV_H_S2_BOUND]) <
                                  (tail ? 1e-4 : 1e-6),
                              "%s pass %d: H_S2_BOUND gpu %.9g cpu %.9g", names[mode], pass,
                              (double)isv[FOX_ISV_H_S2_BOUND], (double)isv_ref[FOX_ISV_H_S2_BOUND]);
            printf("stab h_s2 %s pass %d: %zu of %zu clamped at %.6g, worst rel diff %.2g, flags "
                   "12=%d 49=%d as the CPU, RMS EMA %.6g (rel err %.2g)\n",
                   names[mode], pass, clamped, n, (double)bound, worst, f12, f49, (double)rms, e);
        }
    free(h);
    free(ref);
    free(x);
    free(zero);
    free(dx);
}
END_TEST

/*
 * The atom grid's kernel against its CPU twin: fox_cpu_stab_atoms's
 * reduction of the batch's Bellman targets over each branch's grid, the
 * shared fox_atom_grid_update and the CPU net's atoms (set_support), in
 * both bounds modes, from the unset grid and from a moved one: the same
 * grids in the ISV, the same atoms, slot 47 alike. Before Q_ABS_REF is
 * observed (pass 0) the unset grid stays so; then (pass 1) it starts from
 * the batch's reward range; rewards 1e4 times the bound (pass 2) move the
 * grid past slot 47's threshold before Mech 2 holds it; B = 0 (pass 3) only
 * rewrites the atoms of a grid set by hand.
 */
START_TEST(atoms_kernel_vs_cpu)
{
    const fox_model_layout *lay = &fox_parity_lay;
    const int D = lay->n_branches, NA = lay->NA;
    const float gn = powf(fox_parity_cfg.gamma, (float)fox_parity_cfg.n_step);
    float r[BATCH], done[BATCH], isv[FOX_ISV_TOTAL_DIM], isv_ref[FOX_ISV_TOTAL_DIM];
    float *z = malloc((size_t)D * NA * sizeof *z);
    int flags[FOX_SENTINEL_SLOTS];
    static fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_cpu_net *net = NULL;
    FOX_CK_OK(fox_cpu_net_create(&net, lay, BATCH));
    ck_assert_ptr_nonnull(z);
    fox_rng rng;
    fox_rng_seed(&rng, 47);
    for (int adaptive = 0; adaptive < 2; adaptive++) {
        fox_isv_init(isv);
        for (int pass = 0; pass < 4; pass++) {
            int B = pass == 3 ? 0 : BATCH;
            /* Pass 0 before Q_ABS_REF's first observation: the unset grid waits. */
            isv[FOX_ISV_Q_ABS_REF] = pass == 0 ? 0.0f : 0.5f;
            float scale = pass == 2 ? 1e5f : 3.0f;
            for (int b = 0; b < BATCH; b++) {
                r[b] = scale * (float)fox_rng_normal(&rng);
                done[b] = fox_rng_uniform(&rng) < 0.1f ? 1.0f : 0.0f;
            }
            if (pass == 3) {
                int k = fox_isv_atom_grid_slot(D - 1);
                isv[k] = -0.25f;
                isv[k + 1] = 3.5f;
            }
            memcpy(isv_ref, isv, sizeof isv);
            /* The twin: what fox_cpu_stab_atoms does, in its order. */
            fox_bounds_wiener_init(ws);
            float span = 0.0f;
            for (int d = 0; d < D && B > 0; d++) {
                float lo, hi, tz_lo = INFINITY, tz_hi = -INFINITY;
                fox_atom_grid_base(isv_ref, 1, d, lay->v_min, lay->v_max, &lo, &hi);
                for (int b = 0; b < B; b++) {
                    float g = gn * (1.0f - done[b]);
                    tz_lo = fminf(tz_lo, r[b] + g * lo);
                    tz_hi = fmaxf(tz_hi, r[b] + g * hi);
                }
                float sd = fox_atom_grid_update(isv_ref, adaptive ? ws : NULL, adaptive, 1, d,
                                                lay->v_min, lay->v_max, tz_lo, tz_hi);
                span = sd > span ? sd : span;
            }
            float t;
            FOX_CK_OK(fox_sentinel_threshold(FOX_SENT_ATOM_SPAN_MAX, isv_ref, &t));
            int f47 = B > 0 && !(span < t);
            FOX_CK_OK(
                fox_cuda_debug_atoms(fox_parity_gpu, r, done, B, gn, adaptive, isv, z, flags));
            for (int i = 0; i < FOX_ISV_TOTAL_DIM; i++)
                ck_assert_msg(isv[i] == isv_ref[i] ||
                                  fabsf(isv[i] - isv_ref[i]) <= 1e-6f * fabsf(isv_ref[i]),
                              "adaptive %d pass %d: ISV %d (%s) %.9g, cpu %.9g", adaptive, pass, i,
                              fox_isv_name(i), isv[i], isv_ref[i]);
            ck_assert_msg(flags[FOX_SENT_ATOM_SPAN_MAX] == f47,
                          "adaptive %d pass %d: slot 47 %d, cpu %d (span %g, threshold %g)",
                          adaptive, pass, flags[FOX_SENT_ATOM_SPAN_MAX], f47, span, t);
            ck_assert_msg(pass != 2 || f47, "adaptive %d: slot 47 did not fire", adaptive);
            ck_assert_msg((pass == 0) == fox_atom_grid_unset(isv, 0),
                          "adaptive %d pass %d: grid unset %d", adaptive, pass,
                          fox_atom_grid_unset(isv, 0));
            for (int d = 0; d < D; d++) {
                float lo, hi, *zc;
                size_t nzc;
                fox_atom_grid_live(isv_ref, d, lay->v_min, lay->v_max, &lo, &hi);
                FOX_CK_OK(fox_cpu_net_set_support(net, d, lo, hi));
                fox_cpu_net_sentinel_buffer(net, FOX_SENT_ATOM_SPAN_MAX, 1, &zc, &nzc);
                ck_assert_int_eq(nzc, (size_t)D * NA);
                for (int j = 0; j < NA; j++) {
                    float a = z[d * NA + j], c = zc[d * NA + j];
                    ck_assert_msg(fabsf(a - c) <= 1e-6f * (fabsf(lo) + fabsf(hi)),
                                  "adaptive %d pass %d: branch %d atom %d %.9g, cpu %.9g",
                                  adaptive, pass, d, j, a, c);
                }
            }
            printf("atoms %s pass %d: branch 0 [%.4g, %.4g], slot 47 %d\n",
                   adaptive ? "adaptive" : "fixed", pass, isv[fox_isv_atom_grid_slot(0)],
                   isv[fox_isv_atom_grid_slot(0) + 1], f47);
        }
    }
    /* The shared backend's atoms back on the configured support, which later passes assume. */
    fox_isv_init(isv);
    FOX_CK_OK(fox_cuda_debug_atoms(fox_parity_gpu, r, done, 0, gn, 0, isv, z, flags));
    fox_cpu_net_destroy(net);
    free(z);
}
END_TEST

/*
 * SP4 (adaptive bounds): the device producers against stab.c's maths, fed
 * the same buffers. One round is what a train step produces outside the
 * Adam kernel and Mech 2 / Mech 6: the p99 of |h_s2| → H_S2_BOUND and of
 * |target Q| → TARGET_Q_BOUND (observe skips 0), Pearl B per group →
 * slots 136–167, Pearl C (no engagements here: the rate decays), the L1
 * rate → 168, all through Pearls A+D with the Wiener state on the device.
 * Six rounds from the fold-boundary state with drifting scales, NaN / Inf
 * holes and a degenerate (all-zero) target round; all 40 slots 131–170
 * compared after every round. Tolerance 1e-4 relative (+1e-7 absolute): the
 * histograms are exact integer counts on both sides, so a p99 differs only
 * by the device's fused multiply-adds in the interpolation and Pearl D (an
 * ulp each) and by the order of the double sums (wd rate, L1).
 */
static void
sp4_cpu_round(float *isv, fox_wiener_state *ws, fox_pearl_c_state pc[3][FOX_GROUP_COUNT],
              const float *w, const float *g, const float *m, const float *v, const float *h,
              size_t nh, const float *tq, size_t ntq)
{
    float o = fox_p99_abs(h, nh);
    if (o > 0.0f)
        fox_bounds_observe(isv, ws, FOX_ISV_H_S2_BOUND, o);
    o = fox_p99_abs(tq, ntq);
    if (o > 0.0f)
        fox_bounds_observe(isv, ws, FOX_ISV_TARGET_Q_BOUND, o);
    for (int grp = 0; grp < FOX_GROUP_COUNT; grp++) {
        fox_span sp[FOX_P_COUNT];
        int ns = 0;
        size_t total = 0;
        for (int i = 0; i < FOX_P_COUNT; i++) {
            size_t n = fox_tensor_size(&fox_parity_lay, i);
            if (n && fox_parity_lay.t[i].group == grp) {
                sp[ns++] = (fox_span){fox_parity_lay.t[i].offset, n};
                total += n;
            }
        }
        if (!ns)
            continue;
        fox_group_stats gs;
        FOX_CK_OK(fox_pearl_b_group(w, g, m, v, sp, ns, &gs));
        fox_bounds_observe_group(isv, ws, grp, &gs);
        int slots[3] = {fox_isv_weight_bound_slot(grp), fox_isv_adam_m_bound_slot(grp),
                        fox_isv_adam_v_bound_slot(grp)};
        for (int f = 0; f < 3; f++) {
            float bound = isv[slots[f]];
            if (fox_pearl_c_update(&pc[f][grp], 0.0f, (float)total, 0.0f, &bound))
                isv[slots[f]] = bound;
        }
    }
    size_t o1 = fox_parity_lay.t[FOX_P_GRN1_W2].offset;
    float l1 = fox_pearl_b_l1_rate(w + o1, g + o1, fox_parity_lay.t[FOX_P_GRN1_W2].rows,
                                   fox_parity_lay.t[FOX_P_GRN1_W2].cols);
    fox_bounds_observe(isv, ws, FOX_ISV_L1_LAMBDA, l1);
}

START_TEST(sp4_producers_vs_cpu)
{
    size_t np = fox_parity_lay.n_params, nh = (size_t)BATCH * 128, ntq = (size_t)BATCH * 4 * 8;
    float *w = malloc(np * sizeof *w), *g = malloc(np * sizeof *g);
    float *m = malloc(np * sizeof *m), *v = malloc(np * sizeof *v);
    float *h = malloc(nh * sizeof *h), *tq = malloc(ntq * sizeof *tq);
    ck_assert(w && g && m && v && h && tq);
    float isv[FOX_ISV_TOTAL_DIM], ref[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    memcpy(ref, isv, sizeof isv);
    static fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_pearl_c_state pc[3][FOX_GROUP_COUNT];
    fox_bounds_wiener_init(ws);
    memset(pc, 0, sizeof pc);
    fox_rng rng;
    fox_rng_seed(&rng, 131);
    double worst = 0.0;
    int worst_slot = -1;
    for (int round = 0; round < 6; round++) {
        float sc = 1.0f + 0.5f * (float)round; /* a drifting level: Pearl D must follow it */
        for (size_t k = 0; k < np; k++) {
            w[k] = fox_parity_params[k] * sc;
            g[k] = 1e-3f * sc * (float)fox_rng_normal(&rng);
            m[k] = 1e-4f * sc * (float)fox_rng_normal(&rng);
            float e = 1e-3f * sc * (float)fox_rng_normal(&rng);
            v[k] = e * e;
        }
        for (size_t k = 0; k < nh; k++)
            h[k] = 2.0f * sc * (float)fox_rng_normal(&rng);
        for (size_t k = 0; k < ntq; k++) {
            /* heavy-tailed targets; round 3 all zero (degenerate: no observation) */
            float u = fox_rng_uniform(&rng);
            tq[k] = round == 3 ? 0.0f : sc * (float)fox_rng_normal(&rng) / (0.05f + u);
        }
        if (round == 2) {
            h[7] = NAN;
            h[nh - 1] = INFINITY;
            g[fox_parity_lay.t[FOX_P_GRN1_W2].offset + 3] = NAN;
            m[11] = -INFINITY;
            tq[1] = NAN;
        }
        sp4_cpu_round(ref, ws, pc, w, g, m, v, h, nh, tq, ntq);
        FOX_CK_OK(fox_cuda_debug_sp4(fox_parity_gpu, round == 0, w, g, m, v, h, nh, tq, ntq, isv));
        for (int i = FOX_ISV_SP4_BASE; i < FOX_ISV_SP4_BASE + 40; i++) {
            double d = fabs((double)isv[i] - (double)ref[i]);
            double tol = 1e-4 * fmax(fabs((double)isv[i]), fabs((double)ref[i])) + 1e-7;
            ck_assert_msg(d <= tol, "round %d: slot %d (%s) gpu %.9g cpu %.9g", round, i,
                          fox_isv_name(i), (double)isv[i], (double)ref[i]);
            double r = d / fmax(fabs((double)ref[i]), 1e-30);
            if (ref[i] != 0.0f && r > worst) {
                worst = r;
                worst_slot = i;
            }
        }
    }
    /* Deterministic: the same inputs from a fresh state give the same bits (no float atomics). */
    float isv_a[FOX_ISV_TOTAL_DIM], isv_b[FOX_ISV_TOTAL_DIM];
    memcpy(isv_a, isv, sizeof isv);
    memcpy(isv_b, isv, sizeof isv);
    FOX_CK_OK(fox_cuda_debug_sp4(fox_parity_gpu, 1, w, g, m, v, h, nh, tq, ntq, isv_a));
    FOX_CK_OK(fox_cuda_debug_sp4(fox_parity_gpu, 1, w, g, m, v, h, nh, tq, ntq, isv_b));
    ck_assert_msg(memcmp(isv_a + FOX_ISV_SP4_BASE, isv_b + FOX_ISV_SP4_BASE,
                         40 * sizeof(float)) == 0,
                  "SP4 producers differ between two identical runs");
    ck_assert(ref[FOX_ISV_H_S2_BOUND] > 0.0f && ref[FOX_ISV_TARGET_Q_BOUND] > 0.0f);
    ck_assert(ref[FOX_ISV_WEIGHT_BOUND_GRN1] > 0.0f && ref[FOX_ISV_L1_LAMBDA] >= 0.0f);
    printf("stab sp4 producers: 6 rounds, 40 slots 131-170 within 1e-4 of the CPU; worst rel err "
           "%.2g (slot %d), H_S2_BOUND %.5g, TARGET_Q_BOUND %.5g, WEIGHT_BOUND_GRN1 %.5g, "
           "L1_LAMBDA %.5g\n",
           worst, worst_slot, (double)isv[FOX_ISV_H_S2_BOUND],
           (double)isv[FOX_ISV_TARGET_Q_BOUND], (double)isv[FOX_ISV_WEIGHT_BOUND_GRN1],
           (double)isv[FOX_ISV_L1_LAMBDA]);
    free(w);
    free(g);
    free(m);
    free(v);
    free(h);
    free(tq);
}
END_TEST

/*
 * The norm kernel's producers on the device against fox_cpu_stab_q_dir_signal
 * and fox_cpu_stab_grad_clip, in both bounds modes: 60 steps whose gradient
 * norm ramps from 2 to 20 (20 % noise, a NaN element in one step that
 * neither norm counts), whose direction Q observation drifts and whose
 * Q_ABS_REF (Mech 6's cap reads it; it is observed at the Mech 1 site)
 * drifts with it, from the fold-boundary state. Q_DIR_ABS_REF (Pearls A+D
 * in adaptive mode), GRAD_NORM_EMA, GRAD_NORM_SLOW_EMA, GRAD_CLIP_BOUND, GRAD_CLIP and
 * the clip factor agree within 1e-4 relative at every step (the norm's
 * double sums differ in order only, Pearl D by an ulp of fused
 * multiply-adds); in adaptive mode the bound follows the norm up on both.
 */
START_TEST(grad_clip_vs_cpu)
{
    size_t np = fox_parity_lay.n_params;
    float *g = malloc(np * sizeof *g), *z = malloc(np * sizeof *z);
    ck_assert(g && z);
    fox_rng rng;
    fox_rng_seed(&rng, 170);
    double zz = 0.0;
    for (size_t k = 0; k < np; k++) {
        z[k] = (float)fox_rng_normal(&rng);
        zz += (double)z[k] * z[k];
    }
    const int slots[5] = {FOX_ISV_GRAD_NORM_EMA, FOX_ISV_GRAD_NORM_SLOW_EMA,
                          FOX_ISV_GRAD_CLIP_BOUND, FOX_ISV_GRAD_CLIP, FOX_ISV_Q_DIR_ABS_REF};
    for (int adaptive = 0; adaptive <= 1; adaptive++) {
        float isv[FOX_ISV_TOTAL_DIM], ref[FOX_ISV_TOTAL_DIM];
        fox_isv_init(isv);
        memcpy(ref, isv, sizeof isv);
        fox_config c = fox_parity_cfg;
        c.bounds_mode = adaptive ? FOX_BOUNDS_ADAPTIVE : FOX_BOUNDS_FIXED;
        int flags[FOX_SENTINEL_SLOTS] = {0};
        fox_cpu_stab st = {.cfg = &c,
                           .lay = &fox_parity_lay,
                           .isv = ref,
                           .flags = flags,
                           .grads = g,
                           .adaptive = adaptive};
        fox_bounds_wiener_init(st.ws);
        float first = 0.0f;
        for (int t = 0; t < 60; t++) {
            double level = 2.0 + 18.0 * t / 59.0;
            double want = level * (1.0 + 0.2 * fox_rng_normal(&rng));
            for (size_t k = 0; k < np; k++)
                g[k] = (float)(want * z[k] / sqrt(zz));
            if (t == 30)
                g[np / 3] = NAN;
            /* The Q signals drift up with noise (Pearl D in adaptive mode, fixed α else). */
            float q = (float)(1.0 + 0.02 * t + 0.1 * fox_rng_normal(&rng));
            float qd = (float)(0.5 + 0.01 * t + 0.05 * fox_rng_normal(&rng));
            double norm;
            isv[FOX_ISV_Q_ABS_REF] = ref[FOX_ISV_Q_ABS_REF] = q;
            fox_cpu_stab_q_dir_signal(&st, qd);
            float sc_cpu = fox_cpu_stab_grad_clip(&st, &norm), sc_gpu = 0.0f;
            FOX_CK_OK(
                fox_cuda_debug_grad_clip(fox_parity_gpu, t == 0, adaptive, g, qd, isv, &sc_gpu));
            ck_assert_msg(fabsf(sc_gpu - sc_cpu) <= 1e-4f * fmaxf(sc_cpu, 1e-6f),
                          "%s step %d: clip factor gpu %.9g cpu %.9g",
                          adaptive ? "adaptive" : "fixed", t, (double)sc_gpu, (double)sc_cpu);
            for (int j = 0; j < 5; j++) {
                double a = isv[slots[j]], b = ref[slots[j]];
                ck_assert_msg(fabs(a - b) <= 1e-4 * fmax(fabs(b), 1e-6),
                              "%s step %d: %s gpu %.9g cpu %.9g", adaptive ? "adaptive" : "fixed",
                              t, fox_isv_name(slots[j]), a, b);
            }
            if (t == 0)
                first = isv[FOX_ISV_GRAD_CLIP_BOUND];
        }
        if (adaptive)
            ck_assert_msg(isv[FOX_ISV_GRAD_CLIP_BOUND] > 2.0f * first,
                          "adaptive bound %g did not follow the norm up from %g",
                          (double)isv[FOX_ISV_GRAD_CLIP_BOUND], (double)first);
        printf("stab grad clip %s: 60 steps, norm ramp 2 -> 20, device = CPU within 1e-4; "
               "GRAD_CLIP_BOUND %.4g -> %.4g, GRAD_CLIP %.4g\n",
               adaptive ? "adaptive" : "fixed", (double)first,
               (double)isv[FOX_ISV_GRAD_CLIP_BOUND], (double)isv[FOX_ISV_GRAD_CLIP]);
    }
    free(g);
    free(z);
}
END_TEST

/*
 * TARGET_Q_BOUND and Q_ABS_REF as a training loss with adaptive bounds
 * produces them (the raw IQN targets from the loss kernel's first launch,
 * Q_ABS_REF in its last block, then their p99): against stab.c's
 * observations (Pearl A, from the fold-boundary state) of the CPU net's raw
 * targets, caught at their stability point (slot 46, before Mech 1 clips
 * them). Q_ABS_REF starts at the sentinel 0, so that its observation is
 * winsorized at Mech 1's floor bound of 10 on both: half the batch's rewards
 * are scaled by 10 so that their targets reach past it. sp4_producers_vs_cpu feeds the producer a
 * buffer; this one the targets the device computes. They differ between
 * the backends by the products' rounding only, which moves a p99
 * interpolated inside a histogram bin by far less than 1e-3; targets from
 * another a*, another τ′ or a wrong count would move it by a bin (~0.4 %)
 * or more.
 */
typedef struct tq_catch {
    float *tq;
    size_t n;
} tq_catch;

static void
catch_tq(void *ctx, int slot, float *buf, size_t n)
{
    tq_catch *c = ctx;
    if (slot == FOX_SENT_TARGET_Q_POST_CLIP) {
        memcpy(c->tq, buf, n * sizeof *buf);
        c->n = n;
    }
}

START_TEST(target_q_bound_in_loss)
{
    host_batch *hb = malloc(sizeof *hb);
    size_t ntq = (size_t)BATCH * 4 * fox_parity_lay.NT;
    float *grads = malloc(fox_parity_lay.n_params * sizeof *grads);
    tq_catch c = {malloc(ntq * sizeof(float)), 0};
    ck_assert(hb && grads && c.tq);
    make_batch(hb, 41);
    for (int k = 0; k < BATCH / 2; k++)
        hb->r[k] *= 10.0f;
    /* a* from an FP32 forward, as the CPU's (make_batch keeps its argmax clear of near-ties). */
    FOX_CK_OK(fox_cuda_debug_set_math(fox_parity_gpu, FOX_CUDA_MATH_FP32, 0));
    fox_cpu_net_batch b = batch_view(hb, 0);
    fox_cpu_net_hparams hp = loss_hparams(FOX_TARGET_MEAN);
    fox_cpu_net *net = NULL;
    fox_cpu_net_loss loss;
    FOX_CK_OK(fox_cpu_net_create(&net, &fox_parity_lay, BATCH));
    fox_cpu_net_set_hook(net, catch_tq, &c, 0);
    FOX_CK_OK(fox_cpu_net_loss_grad(net, fox_parity_params, fox_parity_target, &b, &hp, &loss,
                                    grads, NULL));
    ck_assert_uint_eq(c.n, ntq);

    float isv[FOX_ISV_TOTAL_DIM], ref[FOX_ISV_TOTAL_DIM];
    fox_isv_init(isv);
    memcpy(ref, isv, sizeof isv);
    static fox_wiener_state ws[FOX_ISV_TOTAL_DIM];
    fox_bounds_wiener_init(ws);
    float p99 = fox_p99_abs(c.tq, ntq);
    ck_assert(p99 > 0.0f);
    fox_bounds_observe(ref, ws, FOX_ISV_TARGET_Q_BOUND, p99);
    int nt = fox_parity_lay.NT;
    float q_obs = fox_q_ref_obs(c.tq, ntq / (size_t)nt, nt, fox_bound_target_q_fixed(0.0f));
    ck_assert_msg(q_obs < fox_q_ref_obs(c.tq, ntq / (size_t)nt, nt, INFINITY),
                  "no target reached past the winsorizer's 10");
    fox_signal_observe(ref, ws, FOX_ISV_Q_ABS_REF, q_obs, 1);
    FOX_CK_OK(fox_cuda_debug_target_q_bound(fox_parity_gpu, fox_parity_params, fox_parity_target,
                                            &b, &hp, isv));
    double e = rel_scalar(isv[FOX_ISV_TARGET_Q_BOUND], ref[FOX_ISV_TARGET_Q_BOUND]);
    printf("stab target_q_bound in the loss: gpu %.6g cpu %.6g (p99 of %zu raw targets), rel "
           "err %.2g\n",
           (double)isv[FOX_ISV_TARGET_Q_BOUND], (double)ref[FOX_ISV_TARGET_Q_BOUND], ntq, e);
    ck_assert_msg(e < 1e-3, "TARGET_Q_BOUND gpu %g cpu %g", (double)isv[FOX_ISV_TARGET_Q_BOUND],
                  (double)ref[FOX_ISV_TARGET_Q_BOUND]);
    /* A mean of 4·BATCH rows of FP32 targets: the products' rounding moves it by far less. */
    e = rel_scalar(isv[FOX_ISV_Q_ABS_REF], ref[FOX_ISV_Q_ABS_REF]);
    printf("stab Q_ABS_REF in the loss: gpu %.6g cpu %.6g (winsorized at 10), rel err %.2g\n",
           (double)isv[FOX_ISV_Q_ABS_REF], (double)ref[FOX_ISV_Q_ABS_REF], e);
    ck_assert_msg(e < 1e-4, "Q_ABS_REF gpu %g cpu %g", (double)isv[FOX_ISV_Q_ABS_REF],
                  (double)ref[FOX_ISV_Q_ABS_REF]);
    fox_cpu_net_destroy(net);
    free(c.tq);
    free(grads);
    free(hb);
}
END_TEST

void
fox_parity_stab_tests(TCase *tc)
{
    tcase_add_test(tc, check_kernel_vs_cpu);
    tcase_add_test(tc, check_kernel_strided);
    tcase_add_test(tc, h_s2_site_vs_cpu);
    tcase_add_test(tc, atoms_kernel_vs_cpu);
    tcase_add_test(tc, sp4_producers_vs_cpu);
    tcase_add_test(tc, grad_clip_vs_cpu);
    tcase_add_test(tc, target_q_bound_in_loss);
}
