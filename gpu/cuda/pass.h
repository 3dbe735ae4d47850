/*
 * pass.h — a population's evaluation pass between the host and the
 * members' buffers (pass.cu): one launch takes every member's states (and
 * its ISV) from the population's mapped pinned room, one gives every
 * member's Q back, so that a round of the members' passes is one graph of
 * kernels, with no copy a member.
 */
#ifndef FOX_CUDA_PASS_H
#define FOX_CUDA_PASS_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Under fox__cuda_launch_members() members: member z's n floats of states from room + z·stride
 * (the device's address of mapped pinned memory) into x, and its n_isv floats of mapped ISV
 * isv_host into isv_dev (both member 0's addresses, shifted as every kernel's).
 */
int fox__cuda_pass_take(cudaStream_t s, const float *room, size_t stride, int n, float *x,
                        const float *isv_host, float *isv_dev, int n_isv);
/* Member z's n floats of Q q into room + z·stride + at. */
int fox__cuda_pass_give(cudaStream_t s, const float *q, int n, float *room, size_t stride,
                        size_t at);

#ifdef __cplusplus
}
#endif

#endif
