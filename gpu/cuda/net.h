/*
 * net.h — the network on the device (net.c): its buffers, streams and
 * cuBLAS handles, and the orchestration of a forward, the losses and
 * gradients (loss_grad.c), and the optimizer over the kernel families'
 * launchers.
 */
#ifndef FOX_CUDA_NET_H
#define FOX_CUDA_NET_H

#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The net of a train batch of B rows whose forwards take up to fwd_rows; members: the
 * population's member count, 1 outside one (the output slots' lanes, fox_cuda_fwd.slots).
 */
int fox__cuda_net_init(fox_cuda_net *n, const fox_model_layout *lay, int B, int fwd_rows,
                       int members);
void fox__cuda_net_fini(fox_cuda_net *n);
/*
 * Activation buffers of a forward pass over up to R rows, once the net's own buffers (its packed
 * heads) exist; free is safe on a zeroed struct.
 */
int fox__cuda_fwd_alloc(fox_cuda_fwd *f, const fox_cuda_net *n, int R);
void fox__cuda_fwd_free(fox_cuda_fwd *f);
/*
 * The products' math, FOX_CUDA_MATH_FP32, _TF32 or _BF16 (else FOX_EINVAL), on every stream's
 * handle; under FP32, COLLECT's and NEXT's in TF32 where n->greedy_tf32 says so.
 */
int fox__cuda_set_math(fox_cuda_net *n, int math);
/* Re-pack the heads of both nets after their parameters changed. */
int fox__cuda_pack(fox_cuda_net *n, int s);
/*
 * Forward on X [R × S] on stream s of the online net (target 0) or the
 * target net (target 1); the aux heads too if aux. site: the training pass,
 * with the stability points of the online net's rows [0, B) and the Mech 10
 * site.
 */
int fox__cuda_forward(fox_cuda_net *n, int s, fox_cuda_fwd *f, const float *X, int R, int target,
                      int aux, int site);
/*
 * Losses and every gradient of the batch in n->bt (grads, loss_parts, prio), every stream it
 * forks joined but COLLECT in adaptive mode: beside the backward, the last Adam step's Pearl B
 * (its second pass, gated), which fox__cuda_optim joins before Adam.
 */
int fox__cuda_loss_grad(fox_cuda_net *n, const fox_cuda_loss_hp *hp);
/*
 * Guard, norm, clip, Adam, the L1 rate's deficit, Pearl B's first pass (adaptive), the step's
 * statistics and the ISV publication.
 */
int fox__cuda_optim(fox_cuda_net *n, const fox_cuda_optim_cfg *oc, fox_cuda_ctl *ctl,
                    float *isv_dev, float *isv_map);
/* After fox__cuda_optim, on stream s: the target update that is due, the heads re-packed. */
int fox__cuda_repack(fox_cuda_net *n, int s, const fox_cuda_optim_cfg *oc, const fox_cuda_ctl *ctl);
/*
 * What net.c's forward and loss_grad.c's losses and gradients share: a
 * tensor's offset in the flat parameters, the GRN block of tensor `first`
 * (0: GRN1, 1: GRN2), a product with everything off (α 1, one batch entry),
 * a product stage on stream s with its epilogue (gemm.cu), a stability
 * point (the configured fault's injection into p[0] and p2[0] at its own
 * slot in a training pass), and the next side stream in turn, forked now.
 */
size_t fox__cuda_toff(const fox_cuda_net *n, int tensor);
int fox__cuda_grn_index(int first);
fox_cuda_gemm fox__cuda_gemm_of(int M, int N, int K, int bt, const float *A, int lda,
                                const float *B, int ldb, float *C, int ldc);
int fox__cuda_product(fox_cuda_net *n, int s, fox_cuda_gemm *m);
int fox__cuda_point(fox_cuda_net *n, int s, int slot, float *p, float *p2, int after_count);
int fox__cuda_side(fox_cuda_net *n, int *ws);
/*
 * The parts of fox__cuda_forward on stream s: the trunk (site: the training
 * pass's points and Mech 10), the heads (aux: the aux heads too), and the
 * IQN heads of nz nets from net z0 (0 online, 1 target).
 */
int fox__cuda_forward_trunk(fox_cuda_net *n, int s, fox_cuda_fwd *f, const float *X, int R,
                            int target, int site);
int fox__cuda_forward_heads(fox_cuda_net *n, int s, fox_cuda_fwd *f, int target, int aux, int site);
int fox__cuda_iqn_fwd(fox_cuda_net *n, int s, int z0, int nz);
/* Record on stream `from`, wait on stream `to`. */
int fox__cuda_dep(fox_cuda_net *n, int from, int to);
/* *s = stream `to` (FOX_CUDA_*), forked from MAIN at this point; MAIN itself without use_side. */
int fox__cuda_fork(fox_cuda_net *n, int to, int *s);
/* Join every stream forked and not joined back since into MAIN (a graph's capture must). */
int fox__cuda_join_all(fox_cuda_net *n);

#ifdef __cplusplus
}
#endif

#endif
