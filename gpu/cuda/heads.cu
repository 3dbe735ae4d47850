/*
 * heads.cu — the packing of the seven two-layer heads (value, branches,
 * aux) into one zero-padded packed network after their parameters change,
 * with the hard target sync when it is due, and the unpacking of the packed
 * network's gradient into the parameter layout (model.h).
 */
#include <math.h>
#include <stdint.h>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/device.cuh"
#include "gpu/cuda/heads.h"

/* ------------------------------------------------------------------------------------------ */
/* Packing the heads                                                                          */

/*
 * Parameter index behind element o of one net's packed heads, or −1 for
 * padding (which packs as 0 and unpacks nowhere). In 32 bits, a quarter of
 * the instructions of 64-bit divisions: PK < 2³² (fits_u32), which the
 * config's limits keep it (1.4·10⁹ floats at most).
 */
static __device__ __forceinline__ long long
packed_source(const fox_cuda_dims &dm, const fox_cuda_heads &hd, unsigned o)
{
    if (o < (unsigned)dm.pk_b1) {
        if (o >= (unsigned)dm.HW * dm.H2)
            return -1; /* alignment gap */
        int row = (int)(o / dm.H2), col = (int)(o % dm.H2), h = row / dm.HS, r = row % dm.HS;
        return r < hd.hid[h] ? (long long)(hd.w1[h] + (size_t)r * dm.H2 + col) : -1;
    }
    if (o < (unsigned)dm.pk_w2) {
        int row = (int)(o - dm.pk_b1), h = row / dm.HS, r = row % dm.HS;
        if (row >= dm.HW)
            return -1;
        return r < hd.hid[h] ? (long long)(hd.b1[h] + r) : -1;
    }
    if (o < (unsigned)dm.pk_b2) {
        unsigned e = o - (unsigned)dm.pk_w2, per = (unsigned)dm.OS * dm.HS;
        if (e >= FOX_CUDA_HEADS * per)
            return -1;
        int h = (int)(e / per), r = (int)(e % per / dm.HS), c = (int)(e % dm.HS);
        return r < hd.out[h] && c < hd.hid[h] ? (long long)(hd.w2[h] + (size_t)r * hd.hid[h] + c)
                                              : -1;
    }
    int e = (int)(o - dm.pk_b2), h = e / dm.OS, r = e % dm.OS;
    if (e >= dm.OW)
        return -1;
    return r < hd.out[h] ? (long long)(hd.b2[h] + r) : -1;
}

/* packed_source's 32-bit indices hold every element of the packed heads. */
static int
fits_u32(const fox_cuda_dims *dm)
{
    return dm->PK <= UINT32_MAX;
}

/*
 * pk [2][PK] from params [2][np], then the segments sg (online values) end
 * to end into sg.dst. When `sync` (a hard target sync due at this step,
 * read from ctl on the device) the target is first set to the online
 * parameters, and the target's packed copy is taken from the online values
 * directly, so the parts of the launch never depend on each other. In a
 * training step without a sync (`update`) the target has not moved since
 * its copy was last packed, so only the online half is: the launch's grid
 * is sized for a sync and the threads past the work exit.
 */
__global__ void
head_pack_kernel(fox_cuda_dims dm, fox_cuda_heads hd, fox_cuda_segments sg, float *params,
                 size_t np, float *pk, int update, int target_sync, const fox_cuda_ctl *ctl)
{
    pdl_enter();
    fox_member_args(params, pk, ctl);
    /* sg's one pointer alone: its arrays, indexed by segment, stay in the parameter space. */
    float *dst = fox_member(sg.dst);
    int sync = update && ctl->train_steps % target_sync == 0;
    size_t n_sync = sync ? np : 0, n_pk = n_sync + (update && !sync ? 1 : 2) * dm.PK;
    size_t n = n_pk + sg.total;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        if (k < n_sync) {
            params[np + k] = params[k];
            continue;
        }
        if (k >= n_pk) {
            size_t j = k - n_pk, at = j;
            int q = 0;
            while (at >= sg.len[q])
                at -= sg.len[q++];
            dst[j] = params[sg.src[q] + at];
            continue;
        }
        size_t e = k - n_sync;
        int which = e >= dm.PK;
        size_t o = e - (which ? dm.PK : 0);
        long long i = packed_source(dm, hd, (unsigned)o);
        pk[e] = i < 0 ? 0.0f : params[(which && !sync ? np : 0) + (size_t)i];
    }
}

int
fox__cuda_head_pack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                    const fox_cuda_segments *sg, float *params, size_t np, float *pk,
                    const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl)
{
    int update = oc && ctl;
    if ((update && oc->polyak > 0.0f) || !fits_u32(dm))
        return FOX_EINVAL;
    size_t n = 2 * dm->PK + sg->total + (update ? np : 0);
    FOX_CUDA_TRY(launch(head_pack_kernel, grid_for(n, 256), 256, 0, s, *dm, *hd, *sg, params, np,
                        pk, update, update ? oc->target_sync : 1, ctl));
    return 0;
}

/* The packed heads' gradient into the parameter layout (padding dropped). */
__global__ void
head_unpack_kernel(fox_cuda_dims dm, fox_cuda_heads hd, const float *dpk, float *grads)
{
    pdl_enter();
    fox_member_args(dpk, grads);
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < dm.PK;
         k += (size_t)gridDim.x * blockDim.x) {
        long long i = packed_source(dm, hd, (unsigned)k);
        if (i >= 0)
            grads[i] = dpk[k];
    }
}

int
fox__cuda_head_unpack(cudaStream_t s, const fox_cuda_dims *dm, const fox_cuda_heads *hd,
                      const float *dpk, float *grads)
{
    if (!fits_u32(dm))
        return FOX_EINVAL;
    FOX_CUDA_TRY(
        launch(head_unpack_kernel, grid_for(dm->PK, 256), 256, 0, s, *dm, *hd, dpk, grads));
    return 0;
}
