/*
 * net_impl.h — what net.c (the layers, the forward passes, the net's
 * scratch) and loss_grad.c (targets, losses and the backward of a training
 * step) share, in the real type of this compilation: the net's struct, its
 * views and caches, and the helpers loss_grad.c calls. Included by those two
 * files only.
 */
#ifndef FOX_CPU_NET_IMPL_H
#define FOX_CPU_NET_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/cpu/net.h"

/*
 * net.h declares both variants; pick this compilation's after including it
 * (net.h defines and undefines these same names around each declaration).
 */
#ifdef FOX_NET_DOUBLE
#define FOX_REAL double
#define FOX_NET(name) fox_cpud_net_##name
#define FOX_NET_T fox_cpud_net
#define GEMM cblas_dgemm
#define R_EXP exp
#define R_EXPM1 expm1
#define R_LOG log
#define R_SQRT sqrt
#define R_COS cos
#define R_FABS fabs
#define R_FLOOR floor
#define R_CEIL ceil
#else
#define FOX_REAL float
#define FOX_NET(name) fox_cpu_net_##name
#define FOX_NET_T fox_cpu_net
#define GEMM cblas_sgemm
#define R_EXP expf
#define R_EXPM1 expm1f
#define R_LOG logf
#define R_SQRT sqrtf
#define R_COS cosf
#define R_FABS fabsf
#define R_FLOOR floorf
#define R_CEIL ceilf
#endif

typedef FOX_REAL real;
#define R(x) ((real)(x))

/*
 * Both files are compiled twice (float, and double for the finite-difference
 * checks) into the same test binaries, so the helpers they share take an
 * external name per real type, fox__cpu_net_* or fox__cpud_net_*, as zlib's
 * Z_PREFIX renames its symbols: the code keeps calling them by their short
 * names.
 */
#ifdef FOX_NET_DOUBLE
#define FOX_NET_I(name) fox__cpud_net_##name
#else
#define FOX_NET_I(name) fox__cpu_net_##name
#endif
#define aux_fwd FOX_NET_I(aux_fwd)
#define branch_hid FOX_NET_I(branch_hid)
#define branch_rows FOX_NET_I(branch_rows)
#define c51_forward FOX_NET_I(c51_forward)
#define dueling_bwd FOX_NET_I(dueling_bwd)
#define expected_z FOX_NET_I(expected_z)
#define grn_bwd FOX_NET_I(grn_bwd)
#define iqn_fwd FOX_NET_I(iqn_fwd)
#define linear_bwd FOX_NET_I(linear_bwd)
#define mlp2_bwd FOX_NET_I(mlp2_bwd)
#define net_view_of FOX_NET_I(net_view_of)
#define point FOX_NET_I(point)
#define relu_bwd FOX_NET_I(relu_bwd)

typedef struct grn {
    int in, out;
    const real *p[FOX_GRN_NT]; /* FOX_GRN_* order; p[FOX_GRN_WR] NULL for the identity skip */
    real *d[FOX_GRN_NT];       /* their gradients, accumulated; NULL in a forward-only view */
} grn;

typedef struct grn_cache {
    real *eta2; /* [B × out] ELU(W2·a + b2) */
    real *eta1; /* [B × out] W1·η2 + b1 */
    real *sg;   /* [B × out] σ(Wg·η1 + bg) */
    real *lin;  /* [B × out] Wv·η1 + bv */
    real *glu;  /* [B × out] g = σ ⊙ lin */
    real *xhat; /* [B × out] LayerNorm-normalised r + g */
    real *rstd; /* [B] */
    real *y;    /* [B × out] x̂·γ + β: the block's output */
} grn_cache;

typedef struct mlp2 {
    int in, hid, out;
    const real *w1, *b1, *w2, *b2; /* [hid × in] [hid] [out × hid] [out] */
    real *dw1, *db1, *dw2, *db2;   /* NULL in a forward-only view */
} mlp2;

typedef struct iqn_head {
    const real *wphi, *bphi, *wq, *bq; /* [H2 × NC] [H2] [NAct × H2] [NAct] */
    real *dwphi, *dbphi, *dwq, *dbq;
} iqn_head;

/* Pointers into one params buffer (and its grads, or NULL) by the layout. */
typedef struct net_view {
    grn g1, g2;
    mlp2 val, br[FOX_MAX_BRANCHES], auxr, auxg;
    iqn_head iqn;
} net_view;

/*
 * Per-action buffers ([B × NAct × NA]) keep branch d's [B × n_d × NA] block
 * at B·off_d·NA, like d_logit, so that each is one contiguous run for a
 * batch of B rows (one entry of the fused check). branch_rows finds it.
 */
typedef struct c51_acts {
    grn_cache g1, g2; /* g1.y = h_s1 [B × H1], g2.y = h_s2 [B × H2] */
    real *val_hid;    /* [B × HH] */
    real *val;        /* [B × NA] V */
    real *br_hid;     /* [D × B × HH]: branch d's hidden layer at d·B·HH */
    real *adv;        /* [B × NAct × NA] A_d per branch */
    real *logp;       /* [B × NAct × NA] log p_d after dueling */
} c51_acts;

typedef struct iqn_cache {
    real *cosf; /* [B·NT × NC] cos(π k τ) */
    real *phi;  /* [B·NT × H2] ReLU(Wφ·cos + bφ) */
    real *x;    /* [B·NT × H2] h_s2 ⊙ φ */
    real *q;    /* [B·NT × NAct] */
} iqn_cache;

typedef struct aux_cache {
    real *ret_hid;  /* [B × HA] */
    real *ret;      /* [B] predicted scaled next-bar return */
    real *reg_hid;  /* [B × HA] */
    real *reg_logp; /* [B × NR] log-softmax of the regime logits */
} aux_cache;

struct FOX_NET_T {
    fox_model_layout lay;
    int max_batch;
    /* Branch d's C51 support: the layout's, or the grid as Mech 2 last wrote it. */
    real sup_min[FOX_MAX_BRANCHES], sup_max[FOX_MAX_BRANCHES];
    real *z; /* [D × NA] branch d's atoms z_dj = sup_min[d] + j·Δz_d at d·NA */
    c51_acts on;       /* online net on s: everything backward needs */
    c51_acts on_next;  /* online net on s′: the double-DQN argmax only (q_values reuses it) */
    c51_acts tgt;      /* target net on s′ */
    iqn_cache iq_on;   /* online quantiles at tau */
    iqn_cache iq_tgt;  /* target quantiles at tau_next */
    aux_cache aux;
    int32_t *a_star;   /* [B × D] greedy next sub-action per branch */
    real *m;           /* [B × D × NA] target pmf per branch (MEAN: D equal rows) */
    real *p_tmp;       /* [NA] */
    real *target_q;    /* [B × D × NT] IQN targets θ′ (Mech 1 clips them, slot 46) */
    real *cur_lp;      /* [B × D × NA] log p_d(s, a_d) of the taken actions */
    real *td;          /* [B] Σ_d |E_m[z] − E_{p_d}[z]|: TD errors, the PER priorities */
    real *aux_loss_v;  /* [2] next-bar MSE, regime CE */
    real *total_loss_v; /* [1] */
    /* gradients of activations */
    real *d_logit;     /* [B × NAct × NA], branch d's [B × n_d × NA] at B·off_d·NA */
    real *d_adv;       /* [B × NAct × NA], same layout */
    real *d_val;       /* [B × NA] */
    real *d_hid;       /* [B × max(HH, HA)] */
    real *dh_c51;      /* [B × H2] d h_s2 from the value and branch heads */
    real *dh_aux;      /* [B × H2] d h_s2 from the aux heads */
    real *dh_iqn;      /* [B × H2] d h_s2 from the IQN head */
    real *dh_s2;       /* [B × H2] */
    real *dh_s1;       /* [B × H1] */
    real *d_states;    /* [B × S] gradient into the states (want_d_states) */
    real *d_q;         /* [B·NT × NAct] */
    real *d_x;         /* [B·NT × H2] d_q·Wq: the IQN gradient towards the trunk */
    real *d_phi;       /* [B·NT × H2] */
    real *d_ret;       /* [B] */
    real *d_reg;       /* [B × NR] */
    real *grn_tmp[4];  /* [B × max(H1, H2)] */
    real *arena;
    real td_scale; /* the unit of the IQN's values (set_td_scale; 1 at creation) */
    FOX_NET(hook_fn) hook; /* stability points (set_hook); NULL: none */
    void *hook_ctx;
    int want_d_states;
};

/* Dense layers and activations (net.c). */
void linear_bwd(int B, int in, int out, const real *dy, const real *x, const real *W, real *dW,
                real *db, real *dx, real dx_beta);
void relu_bwd(size_t n, const real *y, real *d);
void grn_bwd(const grn *g, int B, const real *a, const grn_cache *c, const real *dy, real *da,
             real *const tmp[4]);
void mlp2_bwd(const mlp2 *m, int B, const real *x, const real *hid, const real *dy, real *dhid,
              real *dx);
void dueling_bwd(int B, int n, int NA, const real *dlogit, real *dV, real *dA);
real expected_z(const real *logp, const real *z, int NA);

/* A stability point (net_decl.h): hk NULL (a pass without points) or slot < 0 is none. */
void point(const struct FOX_NET_T *hk, int slot, real *buf, size_t n);

/* The views of one parameter buffer and the forward passes (net.c). */
net_view net_view_of(const fox_model_layout *lay, const real *params, real *grads);
real *branch_rows(const fox_model_layout *lay, real *base, int B, int d);
real *branch_hid(const fox_model_layout *lay, const c51_acts *a, int B, int d);
void c51_forward(const net_view *v, const fox_model_layout *lay, c51_acts *a, const real *s, int B,
                 const struct FOX_NET_T *hk);
void iqn_fwd(const iqn_head *h, const fox_model_layout *lay, int B, const real *hs2,
             const real *tau, iqn_cache *c);
void aux_fwd(const net_view *v, const fox_model_layout *lay, int B, const real *hs2,
             aux_cache *c);

#endif
