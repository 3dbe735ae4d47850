/*
 * net_decl.h — the declarations of net.h for one real type. Included by
 * net.h twice (FOX_REAL float and double); no include guard on purpose.
 */
/* The step's batch and hyperparameters in this real type (gpu/train_types.h). */
typedef FOX_TRAIN(batch) FOX_NET(batch);
typedef FOX_TRAIN(hparams) FOX_NET(hparams);
typedef fox_train_loss FOX_NET(loss);

/*
 * A stability point of loss_grad: the net has just written buf [n], the
 * buffer that sentinel slot `slot` watches (sentinel.h), and nothing has read
 * it yet. The backend checks, injects faults, produces ISV signals and clamps
 * there (Mech 1 at slot 46, Mech 10 at slot 12, the inline checks 12 and
 * 33–35); it may rewrite buf in place. The points come in step order, listed
 * at the top of net.c. The net itself stays the unclamped math: with no hook
 * (the finite-difference checks) it computes exactly what it computed before.
 */
typedef void (*FOX_NET(hook_fn))(void *ctx, int slot, FOX_REAL *buf, size_t n);

typedef struct FOX_NET_T FOX_NET_T;

/* Scratch for batches up to max_batch. The layout is copied. */
int FOX_NET(create)(FOX_NET_T **out, const fox_model_layout *lay, int max_batch);
void FOX_NET(destroy)(FOX_NET_T *net);

/*
 * Expected Q of every flat action, Σ_j p_d(a, j)·z_j, for B ≤ max_batch
 * states: q is [B × n_actions], branch d's actions at branch_off[d].
 */
int FOX_NET(q_values)(FOX_NET_T *net, const FOX_REAL *params, const FOX_REAL *s, int B,
                      FOX_REAL *q);

/*
 * One training step's losses and gradients. grads (n_params) is overwritten.
 * priority (may be NULL) receives Σ_d |δ_d| per sample, where δ_d is the
 * difference of expected values between the target pmf and branch d's
 * predicted pmf for the chosen action.
 */
int FOX_NET(loss_grad)(FOX_NET_T *net, const FOX_REAL *params, const FOX_REAL *target_params,
                       const FOX_NET(batch) *b, const FOX_NET(hparams) *hp,
                       FOX_NET(loss) *loss, FOX_REAL *grads, FOX_REAL *priority);

/*
 * Install the stability hook of every later loss_grad (fn NULL: none, the
 * state after create). want_d_states: also compute d_states, the gradient
 * into the input states (slot 32; nothing else needs it).
 */
void FOX_NET(set_hook)(FOX_NET_T *net, FOX_NET(hook_fn) fn, void *ctx, int want_d_states);

/*
 * The buffer that sentinel slot `slot` watches, when the net owns it: *ptr and
 * *n (the part a batch of B ≤ max_batch rows uses, contiguous), or NULL and 0
 * for a slot whose buffer lives elsewhere (states, grads, params, ...).
 * Pointers are fixed for the net's life, so a backend builds its fused-check
 * table from this once. Slots 33–35 all name d_h_s2.
 */
void FOX_NET(sentinel_buffer)(FOX_NET_T *net, int slot, int B, FOX_REAL **ptr, size_t *n);

/*
 * Mech 2, the atom write path: move branch d's C51 support to [lo, hi]
 * (lo < hi), its atoms evenly spaced again (Δz recomputed from the clamped
 * span, as the seeds' per-sample support does). Every later forward, target
 * projection, expected Q and q_values of that branch uses it. FOX_EINVAL
 * unless d is a branch and lo < hi, both finite.
 */
int FOX_NET(set_support)(FOX_NET_T *net, int d, FOX_REAL lo, FOX_REAL hi);

/*
 * The unit of the IQN's values (fox_td_scale, which the backend sets as each
 * train step begins): the IQN head's quantiles are scale × its outputs,
 * online and target, and its quantile Huber loss takes the TD errors
 * divided by scale, so that with the moving atom grid the head, its loss and
 * the gradient it sends into the trunk do not change with the size of the
 * rewards, as the C51 head's do not on a grid that moves with them.
 * FOX_EINVAL unless finite and > 0.
 */
int FOX_NET(set_td_scale)(FOX_NET_T *net, FOX_REAL scale);

/*
 * C51 projection of one distribution: probabilities p over the support
 * z_j = v_min + j·Δz, shifted to Tz_j = clamp(r + g·z_j, v_min, v_max)
 * (g = γ^n·(1 − done)) and split between the two neighbouring atoms. out
 * sums to Σ p. A non-finite Tz_j (a poisoned reward) counts as 0 before the
 * support clamp, so the split indices stay in range. Exposed for the
 * hand-computed tests.
 */
void FOX_NET(c51_project)(const FOX_REAL *p, int NA, FOX_REAL v_min, FOX_REAL v_max, FOX_REAL r,
                          FOX_REAL g, FOX_REAL *out);

/*
 * Layer entry points for the finite-difference tests. They allocate their
 * scratch on every call: never use them in a training step.
 *
 * GRN(in → out) on B rows. p[k] are the block's tensors in FOX_GRN_* order
 * with the shapes of model.h (p[FOX_GRN_WR] and dp[FOX_GRN_WR] NULL exactly
 * when in == out, the identity skip). Forward a [B × in] → y [B × out]; the
 * backward of dy [B × out] overwrites dp[k] and da [B × in] (da may be NULL).
 */
int FOX_NET(grn_fwd_bwd)(int in, int out, int B, const FOX_REAL *const p[FOX_GRN_NT],
                         const FOX_REAL *a, const FOX_REAL *dy, FOX_REAL *y,
                         FOX_REAL *const dp[FOX_GRN_NT], FOX_REAL *da);

/*
 * LayerNorm over N features of B rows (biased variance, eps 1e-5):
 * y = x̂·g + b for x [B × N]; the backward of dy overwrites dx [B × N],
 * dg [N] and db [N].
 */
int FOX_NET(layernorm_fwd_bwd)(int N, int B, const FOX_REAL *x, const FOX_REAL *g,
                               const FOX_REAL *b, const FOX_REAL *dy, FOX_REAL *y, FOX_REAL *dx,
                               FOX_REAL *dg, FOX_REAL *db);
