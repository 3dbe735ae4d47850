/*
 * net.h — foxnet v1 on the CPU: forward, losses and backward in plain C with
 * CBLAS for every matrix product. The reference every CUDA kernel is checked
 * against.
 *
 * net.c is compiled twice: with FOX_REAL = float (fox_cpu_net_*, the
 * training backend) and with FOX_REAL = double (fox_cpud_net_*, used only by
 * the finite-difference gradient checks), so both share one source.
 *
 * Math (docs/design.md, "The model"): GRN trunk s → h_s1 → h_s2; value head and D
 * branch heads with per-branch local-mean dueling on the logits, log_softmax
 * over atoms; C51 cross-entropy against the projected double-DQN target
 * (mean over branches, or per branch); IQN head with quantile Huber loss
 * (κ = 1) against the target net's quantiles at the greedy next action per
 * branch; aux heads (next-bar return MSE, regime 4-way CE).
 * Loss = c51 + iqn_lambda·iqn + aux_lambda·(aux_ret + aux_regime).
 * Normalisations: c51 and iqn are means over batch and branches weighted by
 * w_b (iqn: Σ_i mean_j ρ_ij per branch); aux_ret is the w_b-weighted batch
 * mean of the squared error; aux_regime the unweighted batch mean of the CE.
 * The exact conventions a CUDA port must copy are listed at the top of
 * net.c. No stability clamps here: the backend runs them (Mech 10, Mech 1,
 * the inline checks) at the net's stability points (set_hook).
 *
 * Not thread-safe: a net owns its scratch; one thread uses it.
 */
#ifndef FOX_CPU_NET_H
#define FOX_CPU_NET_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/model.h"
#include "gpu/train_types.h"

/* float: the training backend */
#define FOX_REAL float
#define FOX_NET(name) fox_cpu_net_##name
#define FOX_NET_T fox_cpu_net
#define FOX_TRAIN(name) fox_train_##name
#include "gpu/cpu/net_decl.h"
#undef FOX_REAL
#undef FOX_NET
#undef FOX_NET_T
#undef FOX_TRAIN

/* double: the finite-difference gradient checks */
#define FOX_REAL double
#define FOX_NET(name) fox_cpud_net_##name
#define FOX_NET_T fox_cpud_net
#define FOX_TRAIN(name) fox_train_##name##_d
#include "gpu/cpu/net_decl.h"
#undef FOX_REAL
#undef FOX_NET
#undef FOX_NET_T
#undef FOX_TRAIN

#endif

