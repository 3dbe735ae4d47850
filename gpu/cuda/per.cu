/*
 * per.cu — prioritized replay on the device: the sum tree's push, draw and
 * update, each one block that reads its counters on the device, so that the
 * captured step samples and re-prioritizes without the host. Twins:
 * gpu/cpu/replay.c (fox_replay_push, fox_replay_sample_at,
 * fox_replay_update), through the arithmetic both run (gpu/per.h).
 *
 * Inner nodes are rebuilt, not moved by differences: each kernel sets its
 * leaves, then recomputes the nodes above them level by level (a barrier
 * between levels), every node the sum of its two children as the CPU's
 * tree_set does, so the device's tree equals the CPU's bit for bit. Two
 * threads may rebuild the same node in one level (two pushes' ranges, one
 * slot drawn twice); they write the same value.
 */
#include <math.h>
#include <stdint.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "gpu/per.h"
#include "gpu/cuda/device.cuh"
#include "gpu/cuda/per.h"

#define PER_THREADS 1024

struct max_op {
    template <typename T>
    __device__ __forceinline__ T operator()(const T &a, const T &b) const
    {
        return b > a ? b : a;
    }
};

/* Nodes lo..hi of one level, each the sum of its children (the level below is complete). */
static __device__ void
rebuild(double *tree, int lo, int hi)
{
    for (int node = lo + (int)threadIdx.x; node <= hi; node += blockDim.x)
        tree[node] = tree[2 * node] + tree[2 * node + 1];
}

/* ------------------------------------------------------------------------------------------ */
/* Push: the slots the collection wrote this step, at the max priority (fox_replay_push)      */

__global__ void
per_push_kernel(fox_cuda_per per, const int *counts, int N)
{
    pdl_enter();
    fox_member_args(per, counts);
    typedef cub::BlockReduce<int, PER_THREADS> reduce_t;
    __shared__ typename reduce_t::TempStorage tmp;
    __shared__ int s_total;
    int local = 0;
    for (int i = threadIdx.x; i < N; i += blockDim.x)
        local += counts[i];
    int total = reduce_t(tmp).Sum(local);
    if (threadIdx.x == 0)
        s_total = total;
    __syncthreads();
    total = s_total;
    if (total == 0)
        return;
    /* The ring's head is pushes mod capacity: both start at 0 when it is emptied. */
    uint64_t before = per.ctl->pushes;
    int cap = per.capacity, L = per.leaves, first = (int)(before % (uint64_t)cap);
    double leaf = fox_per_leaf(per.ctl->max_priority, per.alpha);
    for (int k = threadIdx.x; k < total; k += blockDim.x)
        per.tree[L + (first + k) % cap] = leaf;
    __syncthreads();
    /* At most a capacity's pushes: the slots first.. and, past the ring's end, 0.. */
    int hi0 = (first + total < cap ? first + total : cap) - 1, hi1 = first + total - cap - 1;
    for (int shift = 1; (L >> shift) >= 1; shift++) {
        rebuild(per.tree, (L + first) >> shift, (L + hi0) >> shift);
        if (hi1 >= 0)
            rebuild(per.tree, L >> shift, (L + hi1) >> shift);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        per.ctl->pushes = before + (uint64_t)total;
}

/* ------------------------------------------------------------------------------------------ */
/* Draw: stratified proportional, weights normalized by their maximum (fox_replay_sample_at)  */

__global__ void
per_sample_kernel(fox_cuda_per per, const fox_cuda_ctl *ctl, int32_t *idx)
{
    pdl_enter();
    fox_member_args(per, ctl, idx);
    typedef cub::BlockReduce<double, PER_THREADS> reduce_t;
    __shared__ typename reduce_t::TempStorage tmp;
    __shared__ double s_max;
    int B = per.B, L = per.leaves, size = ctl->ring_size;
    int64_t t = ctl->train_steps;
    double wmax = 0.0;
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
        int i = fox_per_draw(per.tree, L, size, b, B, fox_per_uniform(ctl->seed_per, t, b, B));
        idx[b] = i;
        wmax = max_op()(wmax, fox_per_weight(per.tree, L, size, i, per.beta));
    }
    wmax = reduce_t(tmp).Reduce(wmax, max_op());
    if (threadIdx.x == 0) {
        s_max = wmax;
        per.ctl->sampled_at = per.ctl->pushes;
    }
    __syncthreads();
    for (int b = threadIdx.x; b < B; b += blockDim.x)
        per.w[b] = (float)(fox_per_weight(per.tree, L, size, idx[b], per.beta) / s_max);
}

/* ------------------------------------------------------------------------------------------ */
/* Update: the batch's priorities in batch order (fox_replay_update)                          */

/*
 * The CPU walks the batch in order: an entry whose slot was pushed over is
 * skipped, a non-finite priority takes the running max priority, a finite
 * one raises it, and of a slot drawn twice the last entry's leaf stays.
 * Here the running max is an exclusive max-scan over the batch, and the
 * last entry of each slot wins an atomicMax on its owner cell.
 */
__global__ void
per_update_kernel(fox_cuda_per per, const int32_t *idx, const float *prio)
{
    pdl_enter();
    fox_member_args(per, idx, prio);
    typedef cub::BlockScan<float, PER_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    int B = per.B, cap = per.capacity, L = per.leaves;
    uint64_t pushes = per.ctl->pushes, since = per.ctl->sampled_at;
    float run = per.ctl->max_priority;
    for (int base = 0; base < B; base += blockDim.x) {
        int b = base + (int)threadIdx.x;
        int live = b < B && !fox_per_pushed_over(pushes, since, cap, idx[b]);
        int finite = live && isfinite(prio[b]);
        float v = finite ? prio[b] + FOX_PER_PRIORITY_EPS : -INFINITY, before, agg;
        scan_t(tmp).ExclusiveScan(v, before, run, max_op(), agg);
        if (live) {
            per.p[b] = finite ? v : before;
            atomicMax(&per.owner[idx[b]], b);
        }
        run = max_op()(run, agg);
        __syncthreads(); /* tmp is reused by the next tile */
    }
    for (int b = threadIdx.x; b < B; b += blockDim.x)
        if (!fox_per_pushed_over(pushes, since, cap, idx[b]) && per.owner[idx[b]] == b)
            per.tree[L + idx[b]] = fox_per_leaf(per.p[b], per.alpha);
    __syncthreads();
    for (int b = threadIdx.x; b < B; b += blockDim.x)
        per.owner[idx[b]] = -1;
    for (int shift = 1; (L >> shift) >= 1; shift++) {
        for (int b = threadIdx.x; b < B; b += blockDim.x)
            if (!fox_per_pushed_over(pushes, since, cap, idx[b])) {
                int node = (L + idx[b]) >> shift;
                per.tree[node] = per.tree[2 * node] + per.tree[2 * node + 1];
            }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        per.ctl->max_priority = run;
}

/* ------------------------------------------------------------------------------------------ */
/* Launchers                                                                                  */

int
fox__cuda_per_init(fox_cuda_per *per, int capacity, int B)
{
    per->capacity = capacity;
    per->B = B;
    per->leaves = 1;
    while (per->leaves < capacity)
        per->leaves <<= 1;
    FOX_TRY(fox__cuda_alloc(&per->tree, 2 * (size_t)per->leaves * sizeof(double)));
    FOX_TRY(fox__cuda_alloc(&per->owner, (size_t)capacity * sizeof(int)));
    FOX_TRY(fox__cuda_alloc(&per->w, (size_t)B * sizeof(float)));
    FOX_TRY(fox__cuda_alloc(&per->p, (size_t)B * sizeof(float)));
    FOX_TRY(fox__cuda_alloc(&per->ctl, sizeof *per->ctl));
    FOX_CUDA_TRY(cudaMemset(per->owner, 0xff, (size_t)capacity * sizeof(int)));
    FOX_CUDA_TRY(cudaDeviceSynchronize());
    return 0;
}

void
fox__cuda_per_fini(fox_cuda_per *per)
{
    fox__cuda_free(per->tree);
    fox__cuda_free(per->owner);
    fox__cuda_free(per->w);
    fox__cuda_free(per->p);
    fox__cuda_free(per->ctl);
    per->tree = NULL;
    per->owner = NULL;
    per->w = per->p = NULL;
    per->ctl = NULL;
}

int
fox__cuda_per_clear(cudaStream_t s, const fox_cuda_per *per)
{
    /* Pageable source: synchronous with respect to the host, then ordered on s. */
    static const fox_cuda_per_ctl empty = {0, 0, 1.0f};
    FOX_CUDA_TRY(
        cudaMemsetAsync(per->tree, 0, 2 * (size_t)per->leaves * sizeof(double), s));
    FOX_CUDA_TRY(cudaMemcpyAsync(per->ctl, &empty, sizeof empty, cudaMemcpyHostToDevice, s));
    FOX_CUDA_TRY(cudaStreamSynchronize(s));
    return 0;
}

int
fox__cuda_per_push(cudaStream_t s, const fox_cuda_per *per, const int *counts, int N)
{
    FOX_CUDA_TRY(launch(per_push_kernel, 1, PER_THREADS, 0, s, *per, counts, N));
    return 0;
}

int
fox__cuda_per_sample(cudaStream_t s, const fox_cuda_per *per, const fox_cuda_ctl *ctl,
                     int32_t *idx)
{
    FOX_CUDA_TRY(launch(per_sample_kernel, 1, PER_THREADS, 0, s, *per, ctl, idx));
    return 0;
}

int
fox__cuda_per_update(cudaStream_t s, const fox_cuda_per *per, const int32_t *idx,
                     const float *prio)
{
    FOX_CUDA_TRY(launch(per_update_kernel, 1, PER_THREADS, 0, s, *per, idx, prio));
    return 0;
}
