/*
 * dueling.cu — the dueling C51 kernel: value plus mean-centred advantage
 * per branch, log_softmax over the atoms and the expected Q, the twin of
 * gpu/cpu/net.c's dueling_fwd, log_softmax_rows and expected_z in the same
 * arithmetic order wherever the order is not a parallel reduction.
 *
 * Not here: the heads' products (gemm.cu, matmul.c), the backward (the loss
 * kernel, loss.cu).
 */
#include <math.h>
#include <stdint.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/device.cuh"
#include "gpu/cuda/dueling.h"

/* ------------------------------------------------------------------------------------------ */
/* Dueling (twin of dueling_fwd + log_softmax_rows + expected_z)                              */

/*
 * One block per row, one warp per flat action: the row's value and
 * advantage outputs staged in shared memory once with their output biases
 * (out holds the products only; V in output slot 0, branch d in slot 1 + d)
 * and each branch's mean advantage per atom once, then per warp logit_j =
 * V_j + A_a,j − mean_a′ A_a′,j, log_softmax over the atoms and q = Σ_j
 * p_j·z_dj on branch d's own atoms z [D × NA] (one warp per action
 * reading its branch's whole slot from global
 * memory instead read every slot once per action, which made the launch
 * several times longer at large batches). With `chosen` ([rows × D] sub-actions) one warp per branch, for the
 * row's chosen action only: logp [rows × D × NA], no q (the training
 * forward on s, whose loss reads nothing else). K > 0 (NA ≤ 32·K): the
 * logits are computed once and kept in registers (row_each over the
 * atoms); K = 0: recomputed in each pass, so any atom count works.
 */
template <int K>
__global__ void
dueling_kernel(fox_cuda_dims dm, const float *__restrict__ out, const float *__restrict__ b2,
               const float *__restrict__ z, const int32_t *__restrict__ chosen,
               float *__restrict__ logp, float *__restrict__ q)
{
    pdl_enter();
    fox_member_args(out, b2, z, chosen, logp, q);
    /* [(1 + D)·OS] outputs + biases, then [D × NA] mean advantages */
    extern __shared__ __align__(16) float sh[];
    const int NA = dm.NA, n_out = (1 + dm.D) * dm.OS;
    float *mean = sh + n_out;
    const size_t row = blockIdx.x;
    const float *orow = out + row * dm.OW;
    /* 16 bytes a load where the row allows: every load issued at once, not one after another. */
    if (n_out % 4 == 0 && (((uintptr_t)orow | (uintptr_t)b2) & 15) == 0) {
        for (int k = threadIdx.x; k < n_out / 4; k += blockDim.x) {
            float4 o = ((const float4 *)orow)[k], c = ((const float4 *)b2)[k];
            ((float4 *)sh)[k] = make_float4(o.x + c.x, o.y + c.y, o.z + c.z, o.w + c.w);
        }
    } else {
        for (int k = threadIdx.x; k < n_out; k += blockDim.x)
            sh[k] = orow[k] + b2[k];
    }
    __syncthreads();
    for (int k = threadIdx.x; k < dm.D * NA; k += blockDim.x) {
        int d = k / NA, j = k % NA, n = dm.bsize[d];
        const float *A = sh + (size_t)(1 + d) * dm.OS;
        float m = 0.0f;
        for (int a2 = 0; a2 < n; a2++)
            m += A[a2 * NA + j];
        mean[k] = m / (float)n;
    }
    __syncthreads();
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int d = chosen ? w : branch_of(dm, w);
    const int a = chosen ? chosen[row * dm.D + d] : w - dm.boff[d];
    const float *A = sh + (size_t)(1 + d) * dm.OS + (size_t)a * NA, *M = mean + d * NA;
    auto logit = [&](int j) { return sh[j] + A[j] - M[j]; };
    float keep[K > 0 ? K : 1] = {}; /* filled below when K > 0 (the front end cannot tell) */
    auto value = [&](int j, int c) {
        if constexpr (K > 0)
            return keep[j];
        else
            return logit(c);
    };
    if constexpr (K > 0)
        row_each<K>(lane, NA, [&](int j, int c) { keep[j] = logit(c); });
    float mx = -INFINITY;
    row_each<K>(lane, NA, [&](int j, int c) { mx = fmaxf(mx, value(j, c)); });
    mx = warp_max(mx);
    float sum = 0.0f;
    row_each<K>(lane, NA, [&](int j, int c) { sum += expf(value(j, c) - mx); });
    float lse = mx + logf(warp_sum(sum));
    float e = 0.0f;
    const size_t wid = chosen ? row * dm.D + d : row * dm.NAct + w;
    float *lp = logp + wid * NA;
    row_each<K>(lane, NA, [&](int j, int c) {
        float v = value(j, c) - lse;
        lp[c] = v;
        if (q)
            e += expf(v) * z[d * NA + c];
    });
    if (q) {
        e = warp_sum(e);
        if (lane == 0)
            q[wid] = e;
    }
}

int
fox__cuda_dueling(cudaStream_t s, int rows, const fox_cuda_dims *dm, const float *out,
                  const float *b2, const float *z, const int32_t *chosen, float *logp, float *q)
{
    if (dm->NAct * WARP > 1024)
        return FOX_EINVAL; /* a warp per action in one block */
    size_t shared = ((size_t)(1 + dm->D) * dm->OS + (size_t)dm->D * dm->NA) * sizeof(float);
    int warps = chosen ? dm->D : dm->NAct;
    FOX_CUDA_TRY(by_row_slots(dm->NA, [&](auto k) {
        return launch(dueling_kernel<decltype(k)::value>, rows, warps * WARP, shared, s, *dm, out,
                      b2, z, chosen, logp, chosen ? nullptr : q);
    }));
    return 0;
}
