/*
 * debug.c — the CUDA backend's debug entry points (gpu/cuda/debug.h): its
 * kernels and stages run on host arrays, for the parity test, the drills and
 * the GPU benchmarks. Built into libfoxgpu_debug, which only tests and
 * benchmarks link; foxd links none of it (tests/nm_debug.sh checks).
 *
 * Each entry point overwrites the training state it touches (parameters,
 * Adam moments, counters, the device ISV): call it on a backend made for the
 * purpose. Single thread: the caller's, synchronously.
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/isv.h"
#include "gpu/per.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/backend_impl.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/ctx.h"
#include "gpu/cuda/adam.h"
#include "gpu/cuda/atoms.h"
#include "gpu/cuda/check.h"
#include "gpu/cuda/grn.h"
#include "gpu/cuda/net.h"
#include "gpu/cuda/per.h"
#include "gpu/cuda/sp4.h"
#include "gpu/cuda/debug.h"

/* Free a debug call's device scratch once the work that may read it is done. */
static void
release(void *scratch)
{
    cudaDeviceSynchronize();
    cudaFree(scratch);
}

/* The fused check over chunks [n] now, outside any step; the halts are left alone. */
static int
check_now_with(fox_cuda_backend *be, const fox_cuda_chunk *chunks, int n)
{
    cudaStream_t s0 = be->net.st[0];
    FOX_TRY(fox__cuda_sync_ctl(be));
    int halt = be->hctl->halt, run = be->hctl->collapse_run;
    FOX_TRY(fox__cuda_check(s0, &be->net.stab, chunks, n, 0));
    FOX_TRY(fox__cuda_sync_ctl(be));
    be->hctl->halt = halt;
    be->hctl->collapse_run = run;
    return fox__cuda_put_ctl(be);
}

/*
 * A host batch, both nets' parameters and the loss's hyperparameters (into *h) onto the device;
 * scratch [1 + B] (device) takes the aux label scale, then the importance weights.
 */
static int
debug_batch(fox_cuda_backend *be, float *scratch, const float *params, const float *target,
            const fox_train_batch *b, const fox_train_hparams *hp, fox_cuda_loss_hp *h)
{
    fox_cuda_net *n = &be->net;
    const fox_cuda_dims *dm = &n->dm;
    int B = b->B, S = be->S, D = dm->D, NT = dm->NT;
    size_t bytes = be->np * sizeof(float);
    if (B != n->B)
        return FOX_EINVAL;
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_CUDA_TRY(cudaMemcpy(n->params, params, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(n->params + be->np, target, bytes, cudaMemcpyHostToDevice));
    fox_cuda_batch *bt = &n->bt;
    size_t fb = sizeof(float), ib = sizeof(int32_t), sb = (size_t)B * S * fb;
    FOX_CUDA_TRY(cudaMemcpy(bt->s2, b->s, sb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->s2 + (size_t)B * S, b->s_next, sb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->a, b->a, (size_t)B * D * ib, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->r, b->r, B * fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->done, b->done, B * fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->aux, b->aux_ret, B * fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->regime, b->aux_regime, B * ib, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->tau, b->tau, (size_t)B * NT * fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(bt->tau + (size_t)B * NT, b->tau_next, (size_t)B * NT * fb,
                            cudaMemcpyHostToDevice));
    if (b->w)
        FOX_CUDA_TRY(cudaMemcpy(scratch + 1, b->w, B * fb, cudaMemcpyHostToDevice));
    bt->w = b->w ? scratch + 1 : NULL;
    FOX_CUDA_TRY(cudaMemcpy(scratch, &hp->aux_label_scale, fb, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    *h = (fox_cuda_loss_hp){hp->gamma_n,     hp->iqn_lambda,      hp->aux_lambda,
                            hp->target_mode, hp->bdq_trunk_scale, scratch};
    return fox__cuda_pack(n, 0);
}

static int
debug_loss_grad(fox_cuda_backend *be, float *scratch, const float *params, const float *target,
                const fox_train_batch *b, const fox_train_hparams *hp, fox_train_loss *loss,
                float *grads, float *priority, int32_t *a_star)
{
    fox_cuda_net *n = &be->net;
    fox_cuda_batch *bt = &n->bt;
    int B = b->B, D = n->dm.D;
    size_t fb = sizeof(float), ib = sizeof(int32_t), bytes = be->np * fb;
    memset(loss, 0, sizeof *loss);
    fox_cuda_loss_hp h;
    FOX_TRY(debug_batch(be, scratch, params, target, b, hp, &h));
    /* The CPU twin runs without its stability hook: no clamp sites, points or inline checks. */
    n->stab.sites = 0;
    int rv = fox__cuda_loss_grad(n, &h);
    n->stab.sites = 1;
    bt->w = be->prioritized ? be->per.w : NULL;
    FOX_TRY(rv);
    FOX_CUDA_TRY(cudaStreamSynchronize(n->st[0]));
    FOX_CUDA_TRY(cudaMemcpy(grads, n->grads, bytes, cudaMemcpyDeviceToHost));
    if (priority)
        FOX_CUDA_TRY(cudaMemcpy(priority, bt->prio, B * fb, cudaMemcpyDeviceToHost));
    if (a_star)
        FOX_CUDA_TRY(cudaMemcpy(a_star, bt->a_star, (size_t)B * D * ib, cudaMemcpyDeviceToHost));
    double *parts = malloc((size_t)B * FOX_CUDA_PARTS * sizeof *parts);
    if (!parts)
        return FOX_ENOMEM;
    cudaError_t e = cudaMemcpy(parts, n->loss_parts, (size_t)B * FOX_CUDA_PARTS * sizeof *parts,
                               cudaMemcpyDeviceToHost);
    double sum[4] = {0, 0, 0, 0};
    for (int i = 0; i < B; i++)
        for (int k = 0; k < 4; k++)
            sum[k] += parts[(size_t)i * FOX_CUDA_PARTS + k];
    free(parts);
    FOX_CUDA_TRY(e);
    loss->c51 = sum[0];
    loss->iqn = sum[1];
    loss->aux_ret = sum[2];
    loss->aux_regime = sum[3];
    loss->total =
        sum[0] + (double)hp->iqn_lambda * sum[1] + (double)hp->aux_lambda * (sum[2] + sum[3]);
    return FOX_OK;
}

int
fox_cuda_debug_loss_grad(fox_backend *be_, const float *params, const float *target,
                         const fox_train_batch *b, const fox_train_hparams *hp,
                         fox_train_loss *loss, float *grads, float *priority, int32_t *a_star)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    float *scratch = NULL;
    int rv = fox__cuda_alloc(&scratch, (1 + (size_t)be->B) * sizeof(float));
    if (rv == FOX_OK)
        rv = debug_loss_grad(be, scratch, params, target, b, hp, loss, grads, priority, a_star);
    release(scratch);
    return fox__cuda_be_fail(be, rv, "debug_loss_grad");
}

/* One training loss_grad with adaptive bounds on a host batch, Wiener state reset first. */
static int
debug_target_q_bound(fox_cuda_backend *be, float *scratch, const float *params, const float *target,
                     const fox_train_batch *b, const fox_train_hparams *hp, float *isv)
{
    fox_cuda_net *n = &be->net;
    size_t isv_bytes = FOX_ISV_TOTAL_DIM * sizeof(float);
    fox_cuda_loss_hp h;
    FOX_TRY(debug_batch(be, scratch, params, target, b, hp, &h));
    FOX_TRY(fox__cuda_sp4_reset(n->st[0], be->sp4));
    FOX_CUDA_TRY(cudaMemcpy(be->isv_dev, isv, isv_bytes, cudaMemcpyHostToDevice));
    int adaptive = n->stab.adaptive;
    n->stab.adaptive = 1;
    int rv = fox__cuda_loss_grad(n, &h);
    n->stab.adaptive = adaptive;
    n->bt.w = be->prioritized ? be->per.w : NULL;
    FOX_TRY(rv);
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_CUDA_TRY(cudaMemcpy(isv, be->isv_dev, isv_bytes, cudaMemcpyDeviceToHost));
    return FOX_OK;
}

int
fox_cuda_debug_target_q_bound(fox_backend *be_, const float *params, const float *target,
                              const fox_train_batch *b, const fox_train_hparams *hp, float *isv)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!params || !target || !b || !hp || !isv)
        return FOX_EINVAL;
    float *scratch = NULL;
    int rv = fox__cuda_alloc(&scratch, (1 + (size_t)be->B) * sizeof(float));
    if (rv == FOX_OK)
        rv = debug_target_q_bound(be, scratch, params, target, b, hp, isv);
    release(scratch);
    return fox__cuda_be_fail(be, rv, "debug_target_q_bound");
}

static int
debug_adam(fox_cuda_backend *be, float *params, const float *grads, float *m, float *v, int64_t t,
           const float *isv, double *norm)
{
    fox_cuda_net *n = &be->net;
    size_t bytes = be->np * sizeof(float);
    cudaStream_t s0 = n->st[0];
    FOX_TRY(fox__cuda_sync_ctl(be));
    be->hctl->adam_t = t - 1;
    FOX_TRY(fox__cuda_put_ctl(be));
    FOX_CUDA_TRY(cudaMemcpy(n->params, params, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(n->grads, grads, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(n->adam_m, m, bytes, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(n->adam_v, v, bytes, cudaMemcpyHostToDevice));
    if (isv)
        FOX_CUDA_TRY(cudaMemcpy(be->isv_dev, isv, FOX_ISV_TOTAL_DIM * sizeof(float),
                                cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    /* A parity pass: the plain clip at train.grad_clip, no ISV producer (st.sites 0). */
    fox_cuda_stab st = n->stab;
    st.sites = 0;
    FOX_TRY(fox__cuda_grad_norm(s0, be->np, n->grads, n->norm_part, &st, be->B, n->dm.D,
                                n->loss_parts, &be->oc));
    FOX_TRY(fox__cuda_adam(s0, be->np, n->params, n->grads, n->adam_m, n->adam_v, n->pgroup,
                           &n->aslots, &be->oc, &st));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    FOX_CUDA_TRY(cudaMemcpy(params, n->params, bytes, cudaMemcpyDeviceToHost));
    FOX_CUDA_TRY(cudaMemcpy(m, n->adam_m, bytes, cudaMemcpyDeviceToHost));
    FOX_CUDA_TRY(cudaMemcpy(v, n->adam_v, bytes, cudaMemcpyDeviceToHost));
    if (norm) {
        double part[FOX_CUDA_NORM_BLOCKS], sum = 0.0;
        FOX_CUDA_TRY(cudaMemcpy(part, n->norm_part, sizeof part, cudaMemcpyDeviceToHost));
        for (int k = 0; k < FOX_CUDA_NORM_BLOCKS; k++)
            sum += part[k];
        *norm = sqrt(sum);
    }
    return FOX_OK;
}

int
fox_cuda_debug_adam(fox_backend *be_, float *params, const float *grads, float *m, float *v,
                    int64_t t, const float *isv, double *norm)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    return fox__cuda_be_fail(be, debug_adam(be, params, grads, m, v, t, isv, norm), "debug_adam");
}

int
fox_cuda_debug_set_math(fox_backend *be_, int math, int greedy_tf32)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    fox__cuda_drop_graphs(be);
    be->net.greedy_tf32 = greedy_tf32;
    return fox__cuda_be_fail(be, fox__cuda_set_math(&be->net, math), "set_math");
}

int
fox_cuda_debug_set_td_unit(fox_backend *be_, float unit)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!isfinite(unit) || !(unit > 0.0f))
        return FOX_EINVAL;
    int rv = fox__cuda_sync_ctl(be);
    if (rv == FOX_OK) {
        be->hctl->td_unit = unit;
        rv = fox__cuda_put_ctl(be);
    }
    return fox__cuda_be_fail(be, rv, "set_td_unit");
}

int
fox_cuda_debug_set_paths(fox_backend *be_, const fox_cuda_paths *want, fox_cuda_paths *was)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    fox__cuda_drop_graphs(be);
    fox_cuda_net *n = &be->net;
    *was = (fox_cuda_paths){n->slot_rows, n->dw_loop_rows, n->epilogue_fours, n->iqn_beside_rows};
    n->slot_rows = want->slot_rows;
    n->dw_loop_rows = want->dw_loop_rows;
    n->epilogue_fours = want->epilogue_fours;
    n->iqn_beside_rows = want->iqn_beside_rows;
    return FOX_OK;
}

int
fox_cuda_debug_set_unroll(fox_backend *be_, int steps)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (steps < 1)
        return FOX_EINVAL;
    fox__cuda_drop_graphs(be);
    be->unroll = steps;
    return FOX_OK;
}

static int
debug_collapse(fox_cuda_backend *be, const float *grads, int steps, int *halt)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    FOX_TRY(fox__cuda_sync_ctl(be));
    be->hctl->halt = FOX_HALT_NONE;
    be->hctl->collapse_run = 0;
    FOX_TRY(fox__cuda_put_ctl(be));
    memset(be->flags_mem, 0, FOX_SENTINEL_SLOTS * sizeof(int));
    FOX_CUDA_TRY(cudaMemcpy(n->grads, grads, be->np * sizeof(float), cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemset(n->loss_parts, 0, (size_t)be->B * FOX_CUDA_PARTS * sizeof(double)));
    FOX_CUDA_TRY(cudaDeviceSynchronize()); /* as debug_stage */
    fox_cuda_stab st = n->stab;
    st.sites = 0;
    for (int k = 0; k < steps; k++) {
        FOX_TRY(fox__cuda_grad_norm(s0, be->np, n->grads, n->norm_part, &st, be->B, n->dm.D,
                                    n->loss_parts, &be->oc));
        FOX_TRY(fox__cuda_check(s0, &st, NULL, 0, 1));
    }
    FOX_TRY(fox__cuda_sync_ctl(be));
    *halt = be->hctl->halt;
    return FOX_OK;
}

int
fox_cuda_debug_collapse(fox_backend *be_, const float *grads, int steps, int *halt)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!grads || steps < 0 || !halt)
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, debug_collapse(be, grads, steps, halt), "debug_collapse");
}

static int
debug_grad_clip(fox_cuda_backend *be, int reset, int adaptive, const float *grads,
                float q_dir_abs, float *isv, float *clip_scale)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    if (reset)
        FOX_TRY(fox__cuda_sp4_reset(s0, be->sp4));
    FOX_CUDA_TRY(cudaMemcpy(n->grads, grads, be->np * sizeof(float), cudaMemcpyHostToDevice));
    /* Sample 0 carries the batch's whole Σ|E[Z]| (part 4), the kernel divides it back. */
    double parts[FOX_CUDA_PARTS] = {0};
    parts[4] = (double)q_dir_abs * be->B;
    FOX_CUDA_TRY(cudaMemset(n->loss_parts, 0, (size_t)be->B * FOX_CUDA_PARTS * sizeof(double)));
    FOX_CUDA_TRY(cudaMemcpy(n->loss_parts, parts, sizeof parts, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(
        cudaMemcpy(be->isv_dev, isv, FOX_ISV_TOTAL_DIM * sizeof(float), cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaDeviceSynchronize()); /* as debug_stage */
    fox_cuda_stab st = n->stab;
    st.sites = 1;
    st.adaptive = adaptive;
    FOX_TRY(fox__cuda_grad_norm(s0, be->np, n->grads, n->norm_part, &st, be->B, n->dm.D,
                                n->loss_parts, &be->oc));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    FOX_CUDA_TRY(
        cudaMemcpy(isv, be->isv_dev, FOX_ISV_TOTAL_DIM * sizeof(float), cudaMemcpyDeviceToHost));
    FOX_TRY(fox__cuda_sync_ctl(be));
    *clip_scale = be->hctl->clip_scale;
    return FOX_OK;
}

int
fox_cuda_debug_grad_clip(fox_backend *be_, int reset, int adaptive, const float *grads,
                         float q_dir_abs, float *isv, float *clip_scale)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!grads || !isv || !clip_scale)
        return FOX_EINVAL;
    return fox__cuda_be_fail(
        be, debug_grad_clip(be, reset, adaptive, grads, q_dir_abs, isv, clip_scale),
        "debug_grad_clip");
}

void
fox_cuda_debug_memory(const fox_backend *be_, size_t *total, size_t *replay)
{
    const fox_cuda_backend *be = (const fox_cuda_backend *)be_;
    if (total)
        *total = be->bytes_total;
    if (replay)
        *replay = be->bytes_replay;
}

/* ---- the stability kernels against their CPU twins ---------------------------------------- */

/*
 * x [n] and isv into the device, flags cleared; the halts left as they were by the caller.
 * The copies go on the default stream, which MAIN (non-blocking) does not wait for, and a
 * pageable copy may return before its transfer lands: the device is synchronized after them.
 */
static int
debug_stage(fox_cuda_backend *be, float **dx, const float *x, size_t n, const float *isv)
{
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_TRY(fox__cuda_alloc(dx, n * sizeof(float)));
    FOX_CUDA_TRY(cudaMemcpy(*dx, x, n * sizeof(float), cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(
        cudaMemcpy(be->isv_dev, isv, FOX_ISV_TOTAL_DIM * sizeof(float), cudaMemcpyHostToDevice));
    memset(be->flags_mem, 0, FOX_SENTINEL_SLOTS * sizeof(int));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    return FOX_OK;
}

/*
 * The buffer is staged n mod 4 floats past a 16-byte boundary (n = rows · ld), so that an
 * odd length also runs the kernel's scalar head and tail around its float4 body; the chunks
 * are cut as the backend cuts them, so that a threshold fires from any block.
 */
static int
debug_check(fox_cuda_backend *be, int slot, const float *x, int rows, int cols, int ld,
            const float *isv, int *fired)
{
    float *dbuf = NULL;
    fox_cuda_chunk *dc = NULL;
    int nc = 0;
    size_t n = (size_t)rows * ld, off = n % 4;
    float *xs = malloc((n + off) * sizeof *xs);
    int rv = xs ? FOX_OK : FOX_ENOMEM;
    if (rv == FOX_OK) {
        memset(xs, 0, off * sizeof *xs);
        memcpy(xs + off, x, n * sizeof *xs);
        rv = debug_stage(be, &dbuf, xs, n + off, isv);
    }
    fox_cuda_check e = {dbuf ? dbuf + off : NULL, slot, rows, cols, ld};
    if (rv == FOX_OK)
        rv = fox__cuda_upload_chunks(&e, 1, &dc, &nc);
    if (rv == FOX_OK)
        rv = check_now_with(be, dc, nc);
    *fired = be->flags_mem[slot];
    free(xs);
    cudaFree(dbuf);
    cudaFree(dc);
    return rv;
}

int
fox_cuda_debug_check(fox_backend *be_, int slot, const float *x, int rows, int cols, int ld,
                     const float *isv, int *fired)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (slot < 0 || slot >= FOX_SENTINEL_SLOTS || rows < 1 || cols < 1 || ld < cols ||
        (long long)rows * ld > INT_MAX || !x || !isv || !fired)
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, debug_check(be, slot, x, rows, cols, ld, isv, fired),
                             "debug_check");
}

/*
 * GRN2's tail with the site on LayerNorm inputs x (fox_cuda_debug_h_s2_site), y into x; with
 * adaptive bounds the site's launches after the tail's pass 1, as in the forward.
 */
static int
debug_tail_site(fox_cuda_backend *be, const fox_cuda_stab *st, float *x, int rows, int out,
                float gamma)
{
    size_t n = (size_t)rows * out;
    /* zgv [2n], xhat [n], y [n], rstd [rows], then bg, bv, γ, β [out each]. */
    size_t len = 4 * n + (size_t)rows + 4 * (size_t)out;
    float *w = NULL, *g = malloc((size_t)out * sizeof *g);
    int rv = g ? fox__cuda_alloc(&w, len * sizeof(float)) : FOX_ENOMEM;
    float *zgv = w, *xhat = w + 2 * n, *y = xhat + n, *rstd = y + n, *par = rstd + rows;
    for (int c = 0; rv == FOX_OK && c < out; c++)
        g[c] = gamma;
    if (rv == FOX_OK && (cudaMemset(w, 0, len * sizeof(float)) != cudaSuccess ||
                         cudaMemcpy(par + 2 * out, g, (size_t)out * sizeof *g,
                                    cudaMemcpyHostToDevice) != cudaSuccess ||
                         cudaDeviceSynchronize() != cudaSuccess)) /* as debug_stage */
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "tail site", 0);
    if (rv == FOX_OK)
        rv = fox__cuda_grn_tail(be->net.st[0], rows, out, zgv, x, par, par + out, par + 2 * out,
                                par + 3 * out, xhat, rstd, y, NULL, NULL, st);
    if (rv == FOX_OK && st->adaptive)
        rv = fox__cuda_h_s2_site(be->net.st[0], st, y, n, 1);
    if (rv == FOX_OK && cudaMemcpyAsync(x, y, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                        be->net.st[0]) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpyAsync", "tail site", 0);
    if (cudaStreamSynchronize(be->net.st[0]) != cudaSuccess && rv == FOX_OK)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaStreamSynchronize", "tail site", 0);
    cudaFree(w);
    free(g);
    return rv;
}

static int
debug_h_s2_site(fox_cuda_backend *be, float *h, size_t n, int tail_out, float gamma, int adaptive,
                float *isv, int *flags)
{
    float *dh = NULL;
    fox_cuda_stab st = be->net.stab;
    st.adaptive = adaptive;
    int rv = debug_stage(be, &dh, h, n, isv);
    if (rv == FOX_OK && adaptive)
        rv = fox__cuda_sp4_reset(be->net.st[0], be->sp4);
    if (rv == FOX_OK && tail_out > 0)
        rv = debug_tail_site(be, &st, dh, (int)(n / (size_t)tail_out), tail_out, gamma);
    else if (rv == FOX_OK)
        rv = fox__cuda_h_s2_site(be->net.st[0], &st, dh, n, 0);
    if (rv == FOX_OK && cudaStreamSynchronize(be->net.st[0]) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaStreamSynchronize", "site", 0);
    if (rv == FOX_OK &&
        (cudaMemcpy(h, dh, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
         cudaMemcpy(isv, be->isv_dev, FOX_ISV_TOTAL_DIM * sizeof(float), cudaMemcpyDeviceToHost) !=
             cudaSuccess))
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "site", 0);
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        flags[i] = be->flags_mem[i];
    cudaFree(dh);
    return rv;
}

int
fox_cuda_debug_h_s2_site(fox_backend *be_, float *h, size_t n, int tail_out, float gamma,
                         int adaptive, float *isv, int *flags)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!h || n < 1 || !isv || !flags || tail_out < 0 ||
        (tail_out > 0 && (n % (size_t)tail_out || n / (size_t)tail_out > (size_t)be->B)))
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, debug_h_s2_site(be, h, n, tail_out, gamma, adaptive, isv, flags),
                             "debug_h_s2_site");
}

static int
debug_atoms(fox_cuda_backend *be, const float *r, const float *done, int B, float gamma_n,
            int adaptive, float *isv, float *z, int *flags)
{
    fox_cuda_net *n = &be->net;
    const fox_model_layout *lay = be->lay;
    size_t nz = (size_t)lay->n_branches * lay->NA;
    float *drd = NULL;
    fox_cuda_stab st = n->stab;
    st.adaptive = adaptive;
    st.moving_grid = 1; /* the rule the CPU twin of the parity test computes */
    /* r and done side by side in one staged buffer (at least one float, for B = 0). */
    float *rd = calloc(2 * (size_t)B + 1, sizeof *rd);
    int rv = rd ? FOX_OK : FOX_ENOMEM;
    if (rv == FOX_OK) {
        memcpy(rd, r, (size_t)B * sizeof *rd);
        memcpy(rd + B, done, (size_t)B * sizeof *rd);
        rv = debug_stage(be, &drd, rd, 2 * (size_t)B + 1, isv);
    }
    if (rv == FOX_OK && adaptive)
        rv = fox__cuda_sp4_reset(n->st[0], be->sp4);
    if (rv == FOX_OK)
        rv = fox__cuda_atoms_update(n->st[0], &st, B, drd, drd + B, gamma_n, lay->n_branches,
                                    lay->NA, lay->v_min, lay->v_max, n->z);
    if (rv == FOX_OK && cudaStreamSynchronize(n->st[0]) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaStreamSynchronize", "atoms", 0);
    if (rv == FOX_OK &&
        (cudaMemcpy(z, n->z, nz * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
         cudaMemcpy(isv, be->isv_dev, FOX_ISV_TOTAL_DIM * sizeof(float), cudaMemcpyDeviceToHost) !=
             cudaSuccess))
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "atoms", 0);
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        flags[i] = be->flags_mem[i];
    free(rd);
    cudaFree(drd);
    return rv;
}

int
fox_cuda_debug_atoms(fox_backend *be_, const float *r, const float *done, int B, float gamma_n,
                     int adaptive, float *isv, float *z, int *flags)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (B < 0 || B > be->B || (B > 0 && (!r || !done)) || !isv || !z || !flags)
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, debug_atoms(be, r, done, B, gamma_n, adaptive, isv, z, flags),
                             "debug_atoms");
}

static int
debug_sp4(fox_cuda_backend *be, int reset, const float *params, const float *grads, const float *m,
          const float *v, const float *h, size_t nh, const float *tq, size_t ntq, float *isv)
{
    fox_cuda_net *n = &be->net;
    cudaStream_t s0 = n->st[0];
    size_t bytes = be->np * sizeof(float);
    float *dh = NULL, *dtq = NULL;
    if (reset)
        FOX_TRY(fox__cuda_sp4_reset(s0, be->sp4));
    int rv = debug_stage(be, &dh, h, nh, isv);
    if (rv == FOX_OK)
        rv = fox__cuda_alloc(&dtq, ntq * sizeof(float));
    if (rv == FOX_OK &&
        (cudaMemcpy(dtq, tq, ntq * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(n->params, params, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(n->grads, grads, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(n->adam_m, m, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(n->adam_v, v, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaDeviceSynchronize() != cudaSuccess)) /* as debug_stage */
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "sp4", 0);
    if (rv == FOX_OK)
        rv = fox__cuda_p99_observe(s0, &n->stab, dh, nh, FOX_ISV_H_S2_BOUND, FOX_CUDA_P99_H_S2);
    if (rv == FOX_OK)
        rv = fox__cuda_p99_observe(s0, &n->stab, dtq, ntq, FOX_ISV_TARGET_Q_BOUND, FOX_CUDA_P99_TQ);
    if (rv == FOX_OK)
        rv = fox__cuda_l1_deficit(s0, &n->stab, n->grads);
    if (rv == FOX_OK)
        rv =
            fox__cuda_post_adam(s0, &n->stab, 0, be->np, n->params, n->grads, n->adam_m, n->adam_v);
    if (rv == FOX_OK && cudaStreamSynchronize(s0) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaStreamSynchronize", "sp4", 0);
    if (rv == FOX_OK && cudaMemcpy(isv, be->isv_dev, FOX_ISV_TOTAL_DIM * sizeof(float),
                                   cudaMemcpyDeviceToHost) != cudaSuccess)
        rv = fox__cuda_fail(__FILE__, __LINE__, "cudaMemcpy", "sp4", 0);
    cudaFree(dh);
    cudaFree(dtq);
    return rv;
}

int
fox_cuda_debug_sp4(fox_backend *be_, int reset, const float *params, const float *grads,
                   const float *m, const float *v, const float *h, size_t nh, const float *tq,
                   size_t ntq, float *isv)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!params || !grads || !m || !v || !h || nh < 1 || !tq || ntq < 1 || !isv)
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, debug_sp4(be, reset, params, grads, m, v, h, nh, tq, ntq, isv),
                             "debug_sp4");
}

/* ------------------------------------------------------------------------------------------ */
/* Prioritized replay                                                                         */

static int
per_io(fox_cuda_backend *be, int load, double *tree, float *max_priority, int *size,
       uint64_t *pushes, uint64_t *sampled_at)
{
    fox_cuda_per *per = &be->per;
    size_t tb = 2 * (size_t)per->leaves * sizeof(double);
    fox_cuda_per_ctl pc;
    FOX_TRY(fox__cuda_sync_ctl(be));
    FOX_CUDA_TRY(cudaMemcpy(&pc, per->ctl, sizeof pc, cudaMemcpyDeviceToHost));
    if (!load) {
        if (tree)
            FOX_CUDA_TRY(cudaMemcpy(tree, per->tree, tb, cudaMemcpyDeviceToHost));
        if (max_priority)
            *max_priority = pc.max_priority;
        if (size)
            *size = be->hctl->ring_size;
        if (pushes)
            *pushes = pc.pushes;
        if (sampled_at)
            *sampled_at = pc.sampled_at;
        return FOX_OK;
    }
    if (tree)
        FOX_CUDA_TRY(cudaMemcpy(per->tree, tree, tb, cudaMemcpyHostToDevice));
    if (max_priority)
        pc.max_priority = *max_priority;
    if (pushes)
        pc.pushes = *pushes;
    if (sampled_at)
        pc.sampled_at = *sampled_at;
    FOX_CUDA_TRY(cudaMemcpy(per->ctl, &pc, sizeof pc, cudaMemcpyHostToDevice));
    if (size)
        be->hctl->ring_size = *size;
    be->hctl->ring_head = (int)(pc.pushes % (uint64_t)per->capacity);
    return fox__cuda_put_ctl(be);
}

int
fox_cuda_debug_per_io(fox_backend *be_, int load, double *tree, float *max_priority, int *size,
                      uint64_t *pushes, uint64_t *sampled_at)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!be->prioritized || (load && size && (*size < 1 || *size > be->per.capacity)))
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, per_io(be, load, tree, max_priority, size, pushes, sampled_at),
                             "debug_per_io");
}

static int
per_sample(fox_cuda_backend *be, int64_t t, int32_t *idx, float *w, float *u)
{
    cudaStream_t s0 = be->net.st[0];
    int B = be->B;
    FOX_TRY(fox__cuda_sync_ctl(be));
    be->hctl->train_steps = t;
    FOX_TRY(fox__cuda_put_ctl(be));
    FOX_TRY(fox__cuda_per_sample(s0, &be->per, be->ctl, be->net.bt.idx));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    FOX_CUDA_TRY(
        cudaMemcpy(idx, be->net.bt.idx, (size_t)B * sizeof *idx, cudaMemcpyDeviceToHost));
    FOX_CUDA_TRY(cudaMemcpy(w, be->per.w, (size_t)B * sizeof *w, cudaMemcpyDeviceToHost));
    for (int b = 0; b < B; b++)
        u[b] = fox_per_uniform(be->hctl->seed_per, t, b, B);
    return FOX_OK;
}

int
fox_cuda_debug_per_sample(fox_backend *be_, int64_t t, int32_t *idx, float *w, float *u)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!be->prioritized || t < 0 || !idx || !w || !u)
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, per_sample(be, t, idx, w, u), "debug_per_sample");
}

static int
per_push(fox_cuda_backend *be, int count)
{
    cudaStream_t s0 = be->net.st[0];
    int *counts = calloc((size_t)be->N, sizeof *counts);
    if (!counts)
        return FOX_ENOMEM;
    counts[0] = count;
    cudaError_t e = cudaMemcpy(be->counts, counts, (size_t)be->N * sizeof *counts,
                               cudaMemcpyHostToDevice);
    free(counts);
    FOX_CUDA_TRY(e);
    FOX_TRY(fox__cuda_per_push(s0, &be->per, be->counts, be->N));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}

int
fox_cuda_debug_per_push(fox_backend *be_, int count)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!be->prioritized || count < 1 || count > be->per.capacity)
        return FOX_EINVAL;
    return fox__cuda_be_fail(be, per_push(be, count), "debug_per_push");
}

static int
per_update(fox_cuda_backend *be, const int32_t *idx, const float *prio)
{
    cudaStream_t s0 = be->net.st[0];
    size_t B = (size_t)be->B;
    FOX_CUDA_TRY(cudaMemcpy(be->net.bt.idx, idx, B * sizeof *idx, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaMemcpy(be->net.bt.prio, prio, B * sizeof *prio, cudaMemcpyHostToDevice));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    FOX_TRY(fox__cuda_per_update(s0, &be->per, be->net.bt.idx, be->net.bt.prio));
    FOX_CUDA_TRY(cudaStreamSynchronize(s0));
    return FOX_OK;
}

int
fox_cuda_debug_per_update(fox_backend *be_, const int32_t *idx, const float *prio)
{
    fox_cuda_backend *be = (fox_cuda_backend *)be_;
    FOX_CUDA_ALIVE(be);
    if (!be->prioritized || !idx || !prio)
        return FOX_EINVAL;
    for (int b = 0; b < be->B; b++)
        if (idx[b] < 0 || idx[b] >= be->per.capacity)
            return FOX_EINVAL;
    return fox__cuda_be_fail(be, per_update(be, idx, prio), "debug_per_update");
}

void
fox_cuda_debug_pop_rounds(const fox_backend *be_, fox_cuda_pop_rounds *out)
{
    const fox_cuda_pop *pop = ((const fox_cuda_backend *)be_)->pop;
    memset(out, 0, sizeof *out);
    if (pop)
        *out = (fox_cuda_pop_rounds){pop->rounds_together, pop->rounds_alone,
                                     pop->passes_together, pop->passes_alone};
}
