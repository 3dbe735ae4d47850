/*
 * pass.cu — a population's evaluation pass between the host and the
 * members' buffers (pass.h): copies through mapped pinned memory, block z
 * member z's. A member's room is at a stride that the pass gives (the
 * rows of a forward), not at a member span: the kernels compute their
 * member's room from it and shift the rest of their arguments as every
 * kernel does. Copies only: the arithmetic on either side is the
 * forward's (net.c) and the walk's (gpu/evaluate.c).
 */
#include <stddef.h>

#include "gpu/cuda/device.cuh"
#include "gpu/cuda/pass.h"

#define PASS_THREADS 256

__global__ void
pass_take_kernel(const float *room, size_t stride, int n, float *x, const float *isv_host,
                 float *isv_dev, int n_isv)
{
    pdl_enter();
    fox_member_args(x, isv_dev);
    isv_host = fox_member_host(isv_host);
    const float *src = room + blockIdx.z * stride;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = src[i];
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < n_isv; i += blockDim.x)
            isv_dev[i] = isv_host[i];
}

__global__ void
pass_give_kernel(const float *q, int n, float *room, size_t stride, size_t at)
{
    pdl_enter();
    fox_member_args(q);
    float *dst = room + blockIdx.z * stride + at;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = q[i];
}

static unsigned int
blocks_for(int n)
{
    int b = (n + PASS_THREADS - 1) / PASS_THREADS;
    return b < 1 ? 1 : b > 64 ? 64 : b;
}

int
fox__cuda_pass_take(cudaStream_t s, const float *room, size_t stride, int n, float *x,
                    const float *isv_host, float *isv_dev, int n_isv)
{
    FOX_CUDA_TRY(launch(pass_take_kernel, blocks_for(n), PASS_THREADS, 0, s, room, stride, n, x,
                        isv_host, isv_dev, n_isv));
    return 0;
}

int
fox__cuda_pass_give(cudaStream_t s, const float *q, int n, float *room, size_t stride, size_t at)
{
    FOX_CUDA_TRY(launch(pass_give_kernel, blocks_for(n), PASS_THREADS, 0, s, q, n, room, stride,
                        at));
    return 0;
}
