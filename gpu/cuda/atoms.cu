/*
 * atoms.cu — the moving C51 atom grid: each branch's support moved once per
 * train step toward the batch's Bellman targets and clamped by Mech 2 at its
 * write, slot 47 on the span before the clamp, and the atoms every forward
 * of the step reads (docs/stability.md, "The atom grid").
 *
 * Twin: gpu/cpu/stab.c's fox_cpu_stab_atoms and fox_cpu_stab_sync_atoms.
 * The rule and the clamp are gpu/bounds.h's fox_atom_grid_update, compiled
 * here as it is; the grid lives in the device ISV, so a captured graph
 * never bakes a stale support.
 */
#include <math.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/atoms.h"
#include "gpu/cuda/device.cuh"

#define ATOMS_THREADS 256

__global__ void
atoms_update_kernel(fox_cuda_stab st, int B, const float *r, const float *done, float gamma_n,
                    int D, int NA, float v_min, float v_max, float *z)
{
    pdl_enter();
    fox_member_args(st, r, done, z);
    if (fox_member_steps())
        gamma_n = st.ctl->key.gamma_n;
    __shared__ float s_lo[FOX_MAX_BRANCHES], s_hi[FOX_MAX_BRANCHES];
    __shared__ float part_lo[ATOMS_THREADS / WARP][FOX_MAX_BRANCHES];
    __shared__ float part_hi[ATOMS_THREADS / WARP][FOX_MAX_BRANCHES];
    const int t = threadIdx.x, lane = t % WARP, w = t / WARP;
    /* The grid the targets are reduced over; with no batch, the live grid the atoms take. */
    if (t < D && B > 0)
        fox_atom_grid_base(st.isv, st.moving_grid, t, v_min, v_max, &s_lo[t], &s_hi[t]);
    else if (t < D)
        fox_atom_grid_live(st.isv, t, v_min, v_max, &s_lo[t], &s_hi[t]);
    __syncthreads();
    if (B > 0) {
        float mn[FOX_MAX_BRANCHES], mx[FOX_MAX_BRANCHES];
        for (int d = 0; d < FOX_MAX_BRANCHES; d++) {
            mn[d] = INFINITY;
            mx[d] = -INFINITY;
        }
        for (int b = t; b < B; b += blockDim.x) {
            /* Rounded as the CPU's twin rounds them: no fused multiply-add. */
            float g = __fmul_rn(gamma_n, 1.0f - done[b]);
            for (int d = 0; d < D; d++) {
                mn[d] = fminf(mn[d], __fadd_rn(r[b], __fmul_rn(g, s_lo[d])));
                mx[d] = fmaxf(mx[d], __fadd_rn(r[b], __fmul_rn(g, s_hi[d])));
            }
        }
        for (int d = 0; d < D; d++) {
            float a = -warp_max(-mn[d]), c = warp_max(mx[d]);
            if (lane == 0) {
                part_lo[w][d] = a;
                part_hi[w][d] = c;
            }
        }
        __syncthreads();
        if (t == 0) {
            float span = 0.0f;
            for (int d = 0; d < D; d++) {
                float tz_lo = INFINITY, tz_hi = -INFINITY;
                for (int k = 0; k < ATOMS_THREADS / WARP; k++) {
                    tz_lo = fminf(tz_lo, part_lo[k][d]);
                    tz_hi = fmaxf(tz_hi, part_hi[k][d]);
                }
                fox_atom_grid_targets(st.moving_grid, v_min, v_max, &tz_lo, &tz_hi);
                float sd =
                    fox_atom_grid_update(st.isv, st.adaptive ? st.sp4->ws : NULL, st.adaptive,
                                         st.moving_grid, d, v_min, v_max, tz_lo, tz_hi);
                /* A NaN span must win the maximum: slot 47 counts it as exceeding. */
                span = isnan(sd) || sd > span ? sd : span;
                fox_atom_grid_live(st.isv, d, v_min, v_max, &s_lo[d], &s_hi[d]);
            }
            if (st.sentinel && !(span < threshold_of(st, FOX_SENT_ATOM_SPAN_MAX)))
                st.flags[FOX_SENT_ATOM_SPAN_MAX] = 1;
        }
        __syncthreads();
    }
    if (t < D) {
        st.ctl->support[t][0] = s_lo[t];
        st.ctl->support[t][1] = s_hi[t];
    }
    for (int k = t; k < D * NA; k += blockDim.x) {
        int d = k / NA, j = k % NA;
        float dz = (s_hi[d] - s_lo[d]) / (float)(NA - 1);
        z[k] = __fadd_rn(s_lo[d], __fmul_rn((float)j, dz));
    }
}

int
fox__cuda_atoms_update(cudaStream_t s, const fox_cuda_stab *st, int B, const float *r,
                       const float *done, float gamma_n, int D, int NA, float v_min, float v_max,
                       float *z)
{
    FOX_CUDA_TRY(launch(atoms_update_kernel, 1, ATOMS_THREADS, 0, s, *st, B, r, done, gamma_n, D,
                        NA, v_min, v_max, z));
    return 0;
}
