/*
 * model.h — foxnet v1 shapes and the flat parameter layout.
 *
 * All parameters live in one float buffer; each tensor starts at an offset
 * padded to FOX_PARAM_ALIGN floats (256 bytes) so that device loads stay
 * aligned. grads, adam_m, adam_v and target_params share this layout, so one
 * offset addresses the same tensor in each. Weights are stored row-major as
 * [out × in]: y = x · Wᵀ + b. The layout is a pure function of the config.
 */
#ifndef FOX_MODEL_H
#define FOX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/config.h"

#define FOX_PARAM_ALIGN 64

/* Param groups, for bounds and diagnostics (docs/design.md, "The model"). */
enum {
    FOX_GROUP_GRN1 = 0,
    FOX_GROUP_GRN2 = 1,
    FOX_GROUP_VALUE = 2,
    FOX_GROUP_BRANCHES = 3,
    FOX_GROUP_IQN = 4,
    FOX_GROUP_AUX_NEXT_BAR = 5,
    FOX_GROUP_AUX_REGIME = 6,
    FOX_GROUP_LAYERNORM = 7,
    FOX_GROUP_COUNT = 8
};

/*
 * The tensors of one GRN block, in layout order. Wr is absent (0 × 0) when
 * in == out (identity skip).
 */
#define FOX_GRN_TENSORS(X, P)                                                                      \
    X(P##_W2) X(P##_B2) X(P##_W1) X(P##_B1) X(P##_WG) X(P##_BG) X(P##_WV) X(P##_BV) X(P##_WR)      \
        X(P##_LN_G) X(P##_LN_B)

#define FOX_BRANCH_TENSORS(X, D) X(BR##D##_W1) X(BR##D##_B1) X(BR##D##_W2) X(BR##D##_B2)

#define FOX_PARAM_TENSORS(X)                                                                       \
    FOX_GRN_TENSORS(X, GRN1)                                                                       \
    FOX_GRN_TENSORS(X, GRN2)                                                                       \
    X(VAL_W1) X(VAL_B1) X(VAL_W2) X(VAL_B2)                                                        \
    FOX_BRANCH_TENSORS(X, 0) FOX_BRANCH_TENSORS(X, 1) FOX_BRANCH_TENSORS(X, 2)                     \
    FOX_BRANCH_TENSORS(X, 3)                                                                       \
    X(IQN_WPHI) X(IQN_BPHI) X(IQN_WQ) X(IQN_BQ)                                                    \
    X(AUXR_W1) X(AUXR_B1) X(AUXR_W2) X(AUXR_B2)                                                    \
    X(AUXG_W1) X(AUXG_B1) X(AUXG_W2) X(AUXG_B2)

enum {
#define X(n) FOX_P_##n,
    FOX_PARAM_TENSORS(X)
#undef X
    FOX_P_COUNT
};

/* Offsets of a GRN block's tensors relative to its first (FOX_P_GRN1_W2). */
enum {
    FOX_GRN_W2 = 0, FOX_GRN_B2, FOX_GRN_W1, FOX_GRN_B1, FOX_GRN_WG, FOX_GRN_BG,
    FOX_GRN_WV, FOX_GRN_BV, FOX_GRN_WR, FOX_GRN_LN_G, FOX_GRN_LN_B, FOX_GRN_NT
};
/* Same for one branch (FOX_P_BR0_W1 + FOX_BRANCH_NT * d + k). */
enum { FOX_BR_W1 = 0, FOX_BR_B1, FOX_BR_W2, FOX_BR_B2, FOX_BRANCH_NT };

typedef struct fox_tensor_desc {
    const char *name;  /* "grn1.w2" */
    int group;         /* FOX_GROUP_* */
    int rows, cols;    /* [out × in] for weights; cols = 1 for vectors; 0 × 0 when absent */
    size_t offset;     /* in floats, multiple of FOX_PARAM_ALIGN */
} fox_tensor_desc;

typedef struct fox_model_layout {
    /* shapes */
    int S, H1, H2, HH, NA, NT, NC, HA, NR;
    int n_branches;                      /* D */
    int branch_size[FOX_MAX_BRANCHES];   /* n_d */
    int branch_off[FOX_MAX_BRANCHES];    /* first flat action of branch d */
    int n_actions;                       /* Σ n_d */
    float v_min, v_max;
    /* parameters */
    fox_tensor_desc t[FOX_P_COUNT];
    size_t n_params;                     /* padded total, floats */
    size_t n_real;                       /* unpadded count, for reports */
} fox_model_layout;

/* Compute the layout of foxnet v1 for cfg. FOX_EINVAL if widths are unusable. */
int fox_model_layout_init(fox_model_layout *lay, const fox_config *cfg);

/* Elements of tensor i (rows × cols). */
static inline size_t
fox_tensor_size(const fox_model_layout *lay, int i)
{
    return (size_t)lay->t[i].rows * (size_t)lay->t[i].cols;
}

/*
 * The greedy action of one state: the best sub-action of every branch from
 * its expected Q q_row [n_actions], ties to the lowest sub-action. Data
 * collection and the evaluation walk must break ties alike, so both use it.
 */
static inline void
fox_model_greedy_action(const fox_model_layout *lay, const float *q_row, int32_t a[4])
{
    for (int d = 0; d < lay->n_branches; d++) {
        const float *q = q_row + lay->branch_off[d];
        int best = 0;
        for (int k = 1; k < lay->branch_size[d]; k++)
            if (q[k] > q[best])
                best = k;
        a[d] = best;
    }
}

/*
 * Initialise params (n_params floats, padding zeroed) deterministically from
 * seed: weights uniform ±sqrt(6/(in+out)) (Glorot), biases 0, LayerNorm γ 1
 * and β 0, the last layers of the C51 heads scaled down so that initial
 * distributions start near uniform.
 */
void fox_model_init_params(const fox_model_layout *lay, float *params, uint64_t seed);

/* 64-bit FNV-1a hash of the layout (names, shapes, offsets), an input of the fingerprint. */
uint64_t fox_model_layout_hash(const fox_model_layout *lay);

#endif
