/*
 * atoms.h — the moving C51 atom grid on the device (atoms.cu): the seeds'
 * atoms_update_kernel, Mech 2 at its write; twin of gpu/cpu/stab.c's
 * fox_cpu_stab_atoms and fox_cpu_stab_sync_atoms over gpu/bounds.h's
 * fox_atom_grid_update.
 */
#ifndef FOX_CUDA_ATOMS_H
#define FOX_CUDA_ATOMS_H

#include "gpu/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One block. With B > 0, a train step's Mech 2 site before the forward:
 * every branch's grid in the device ISV moves toward the batch's Bellman
 * targets (rewards r [B], done [B], the bootstrap discount gamma_n) and is
 * clamped (fox_atom_grid_update), slot 47 on the widest moved span before
 * the clamp. Either way each branch's live grid (the configured [v_min,
 * v_max] while unset) goes into ctl->support and its atoms into z [D × NA];
 * with B = 0 that is all, for the forwards after a checkpoint or a fold
 * reset rewrote the ISV.
 */
int fox__cuda_atoms_update(cudaStream_t s, const fox_cuda_stab *st, int B, const float *r,
                           const float *done, float gamma_n, int D, int NA, float v_min,
                           float v_max, float *z);

#ifdef __cplusplus
}
#endif

#endif
