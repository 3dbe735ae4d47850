/*
 * model.c — foxnet v1 parameter layout: shapes, names, groups and padded
 * offsets of every tensor, the deterministic initialisation and the layout
 * hash that goes into the checkpoint fingerprint.
 *
 * It does not compute anything of the network (cpu/net.c and the CUDA
 * kernels do) and does not allocate: the caller owns the params buffer.
 * Branch sizes come from fox_config_branches (config.c).
 */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "common/hash.h"
#include "gpu/model.h"
#include "gpu/rng.h"

/* Widths above this are refused, so every rows × cols product fits an int. */
#define MAX_WIDTH 65536

/* How fox_model_init_params fills a tensor. */
enum {
    K_WEIGHT,     /* Glorot uniform ±sqrt(6 / (in + out)) */
    K_WEIGHT_OUT, /* Glorot × HEAD_OUT_SCALE: last layer of a C51 head */
    K_BIAS,       /* 0 */
    K_ONE         /* 1: LayerNorm γ */
};

/*
 * The last layers of the value and branch heads start 10× smaller than
 * Glorot, so that the initial logits are small and every atom distribution
 * starts near uniform instead of confidently wrong.
 */
#define HEAD_OUT_SCALE 0.1f

typedef struct tensor_info {
    const char *name;
    int kind;
} tensor_info;

#define GRN_INFO(P, p)                                                                             \
    [FOX_P_##P##_W2] = {p ".w2", K_WEIGHT}, [FOX_P_##P##_B2] = {p ".b2", K_BIAS},                  \
    [FOX_P_##P##_W1] = {p ".w1", K_WEIGHT}, [FOX_P_##P##_B1] = {p ".b1", K_BIAS},                  \
    [FOX_P_##P##_WG] = {p ".wg", K_WEIGHT}, [FOX_P_##P##_BG] = {p ".bg", K_BIAS},                  \
    [FOX_P_##P##_WV] = {p ".wv", K_WEIGHT}, [FOX_P_##P##_BV] = {p ".bv", K_BIAS},                  \
    [FOX_P_##P##_WR] = {p ".wr", K_WEIGHT}, [FOX_P_##P##_LN_G] = {p ".ln_g", K_ONE},               \
    [FOX_P_##P##_LN_B] = {p ".ln_b", K_BIAS}

#define MLP2_INFO(P, p, k2)                                                                        \
    [FOX_P_##P##_W1] = {p ".w1", K_WEIGHT}, [FOX_P_##P##_B1] = {p ".b1", K_BIAS},                  \
    [FOX_P_##P##_W2] = {p ".w2", k2}, [FOX_P_##P##_B2] = {p ".b2", K_BIAS}

static const tensor_info info[FOX_P_COUNT] = {
    GRN_INFO(GRN1, "grn1"),
    GRN_INFO(GRN2, "grn2"),
    MLP2_INFO(VAL, "value", K_WEIGHT_OUT),
    MLP2_INFO(BR0, "branch0", K_WEIGHT_OUT),
    MLP2_INFO(BR1, "branch1", K_WEIGHT_OUT),
    MLP2_INFO(BR2, "branch2", K_WEIGHT_OUT),
    MLP2_INFO(BR3, "branch3", K_WEIGHT_OUT),
    [FOX_P_IQN_WPHI] = {"iqn.wphi", K_WEIGHT},
    [FOX_P_IQN_BPHI] = {"iqn.bphi", K_BIAS},
    [FOX_P_IQN_WQ] = {"iqn.wq", K_WEIGHT},
    [FOX_P_IQN_BQ] = {"iqn.bq", K_BIAS},
    MLP2_INFO(AUXR, "aux_ret", K_WEIGHT),
    MLP2_INFO(AUXG, "aux_regime", K_WEIGHT),
};

_Static_assert(FOX_MAX_BRANCHES == 4, "the tensor list names exactly four branches");

static void
set_shape(fox_model_layout *lay, int i, int rows, int cols, int group)
{
    lay->t[i].name = info[i].name;
    lay->t[i].rows = rows;
    lay->t[i].cols = cols;
    lay->t[i].group = group;
}

/* GRN(in → out) starting at tensor first; its LayerNorm γ/β go to the LN group. */
static void
set_grn(fox_model_layout *lay, int first, int in, int out, int group)
{
    set_shape(lay, first + FOX_GRN_W2, out, in, group);
    set_shape(lay, first + FOX_GRN_B2, out, 1, group);
    set_shape(lay, first + FOX_GRN_W1, out, out, group);
    set_shape(lay, first + FOX_GRN_B1, out, 1, group);
    set_shape(lay, first + FOX_GRN_WG, out, out, group);
    set_shape(lay, first + FOX_GRN_BG, out, 1, group);
    set_shape(lay, first + FOX_GRN_WV, out, out, group);
    set_shape(lay, first + FOX_GRN_BV, out, 1, group);
    /* The skip is the identity when the widths match: no tensor at all. */
    if (in == out)
        set_shape(lay, first + FOX_GRN_WR, 0, 0, group);
    else
        set_shape(lay, first + FOX_GRN_WR, out, in, group);
    set_shape(lay, first + FOX_GRN_LN_G, out, 1, FOX_GROUP_LAYERNORM);
    set_shape(lay, first + FOX_GRN_LN_B, out, 1, FOX_GROUP_LAYERNORM);
}

/* Two-layer MLP in → hid → out (W1, b1, W2, b2 from tensor first). */
static void
set_mlp2(fox_model_layout *lay, int first, int in, int hid, int out, int group)
{
    set_shape(lay, first + 0, hid, in, group);
    set_shape(lay, first + 1, hid, 1, group);
    set_shape(lay, first + 2, out, hid, group);
    set_shape(lay, first + 3, out, 1, group);
}

static int
width_ok(int w)
{
    return w >= 1 && w <= MAX_WIDTH;
}

int
fox_model_layout_init(fox_model_layout *lay, const fox_config *cfg)
{
    if (!lay || !cfg)
        return FOX_EINVAL;
    memset(lay, 0, sizeof *lay);
    lay->S = cfg->state_dim;
    lay->H1 = cfg->h1;
    lay->H2 = cfg->h2;
    lay->HH = cfg->head_hidden;
    lay->NA = cfg->n_atoms;
    lay->NT = cfg->n_tau;
    lay->NC = cfg->n_cos;
    lay->HA = cfg->aux_hidden;
    lay->NR = cfg->n_regimes;
    lay->v_min = cfg->v_min;
    lay->v_max = cfg->v_max;

    const int widths[] = {lay->S, lay->H1, lay->H2, lay->HH, lay->NA,
                          lay->NT, lay->NC, lay->HA, lay->NR};
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++)
        if (!width_ok(widths[k]))
            return FOX_EINVAL;
    /* Two atoms at least: Δz = (v_max − v_min)/(NA − 1). */
    if (lay->NA < 2 || !(lay->v_min < lay->v_max))
        return FOX_EINVAL;

    lay->n_branches = fox_config_branches(cfg, lay->branch_size);
    if (lay->n_branches != FOX_MAX_BRANCHES)
        return FOX_EINVAL;
    for (int d = 0; d < lay->n_branches; d++) {
        if (lay->branch_size[d] < 1 || lay->branch_size[d] > 256)
            return FOX_EINVAL;
        lay->branch_off[d] = lay->n_actions;
        lay->n_actions += lay->branch_size[d];
    }

    set_grn(lay, FOX_P_GRN1_W2, lay->S, lay->H1, FOX_GROUP_GRN1);
    set_grn(lay, FOX_P_GRN2_W2, lay->H1, lay->H2, FOX_GROUP_GRN2);
    set_mlp2(lay, FOX_P_VAL_W1, lay->H2, lay->HH, lay->NA, FOX_GROUP_VALUE);
    for (int d = 0; d < lay->n_branches; d++)
        set_mlp2(lay, FOX_P_BR0_W1 + FOX_BRANCH_NT * d, lay->H2, lay->HH,
                 lay->branch_size[d] * lay->NA, FOX_GROUP_BRANCHES);
    set_shape(lay, FOX_P_IQN_WPHI, lay->H2, lay->NC, FOX_GROUP_IQN);
    set_shape(lay, FOX_P_IQN_BPHI, lay->H2, 1, FOX_GROUP_IQN);
    set_shape(lay, FOX_P_IQN_WQ, lay->n_actions, lay->H2, FOX_GROUP_IQN);
    set_shape(lay, FOX_P_IQN_BQ, lay->n_actions, 1, FOX_GROUP_IQN);
    set_mlp2(lay, FOX_P_AUXR_W1, lay->H2, lay->HA, 1, FOX_GROUP_AUX_NEXT_BAR);
    set_mlp2(lay, FOX_P_AUXG_W1, lay->H2, lay->HA, lay->NR, FOX_GROUP_AUX_REGIME);

    /* Every tensor starts on a FOX_PARAM_ALIGN boundary; an absent one takes no room. */
    size_t off = 0;
    for (int i = 0; i < FOX_P_COUNT; i++) {
        size_t n = fox_tensor_size(lay, i);
        lay->t[i].offset = off;
        lay->n_real += n;
        off += (n + FOX_PARAM_ALIGN - 1) / FOX_PARAM_ALIGN * FOX_PARAM_ALIGN;
    }
    lay->n_params = off;
    return FOX_OK;
}

void
fox_model_init_params(const fox_model_layout *lay, float *params, uint64_t seed)
{
    memset(params, 0, lay->n_params * sizeof *params);
    for (int i = 0; i < FOX_P_COUNT; i++) {
        const fox_tensor_desc *t = &lay->t[i];
        float *p = params + t->offset;
        size_t n = fox_tensor_size(lay, i);
        if (info[i].kind == K_ONE) {
            for (size_t k = 0; k < n; k++)
                p[k] = 1.0f;
            continue;
        }
        if (info[i].kind == K_BIAS)
            continue;
        /* rows = fan_out, cols = fan_in. */
        float limit = sqrtf(6.0f / (float)(t->rows + t->cols));
        if (info[i].kind == K_WEIGHT_OUT)
            limit *= HEAD_OUT_SCALE;
        /*
         * Counter-based draws keyed by the element's flat index: the value of
         * a parameter depends only on (seed, offset), so a device-side
         * initialiser can reproduce it without replaying a stream.
         */
        for (size_t k = 0; k < n; k++) {
            float u = fox_rng_unit(fox_rng_at(seed, (uint64_t)(t->offset + k)));
            p[k] = (2.0f * u - 1.0f) * limit;
        }
    }
}

uint64_t
fox_model_layout_hash(const fox_model_layout *lay)
{
    uint64_t h = FOX_FNV_OFFSET;
    for (int i = 0; i < FOX_P_COUNT; i++) {
        const fox_tensor_desc *t = &lay->t[i];
        h = fox_fnv1a_str(h, t->name);
        h = fox_fnv1a_u64(h, (uint64_t)t->group);
        h = fox_fnv1a_u64(h, (uint64_t)t->rows);
        h = fox_fnv1a_u64(h, (uint64_t)t->cols);
        h = fox_fnv1a_u64(h, (uint64_t)t->offset);
    }
    return fox_fnv1a_u64(h, (uint64_t)lay->n_params);
}
