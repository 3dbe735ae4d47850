/*
 * lookahead.h — the greedy policy's actions for the evaluation walks, many
 * bars to a forward pass (internal to gpu/; evaluate.c is its one caller).
 *
 * A walk is sequential: the state of bar t holds the portfolio features
 * (position, its P&L, its age) that the action at t−1 made. But a policy
 * mostly repeats itself, so the walk guesses: from bar t's true state it
 * assumes the previous action is taken again, predicts the portfolio features
 * of bars t+1, t+2, ... with the environment's own step, and evaluates all
 * those states in one forward pass. Walking on, a bar whose true portfolio
 * features equal the predicted ones bit for bit takes its action from that
 * pass, because its network input is the same; the first bar that differs
 * starts the next pass from its true state. The actions are those of one
 * forward pass per bar as long as a row's Q does not depend on the rows
 * computed beside it (tests/test_lookahead.c compares the two walks).
 */
#ifndef FOX_LOOKAHEAD_H
#define FOX_LOOKAHEAD_H

#include <stdint.h>

#include "gpu/backend.h"
#include "gpu/env.h"

/* Most bars one segment predicts in one pass. */
#define FOX_LOOKAHEAD_MAX 64

typedef struct fox_lookahead fox_lookahead;

/*
 * Buffers for up to n_segments segments of layout lay. window_max (1 to
 * FOX_LOOKAHEAD_MAX) bounds the bars a segment predicts: 1 gives one forward
 * pass per bar, the reference walk. NULL when out of memory.
 */
fox_lookahead *fox__lookahead_new(const fox_model_layout *lay, int n_segments, int window_max);
void fox__lookahead_free(fox_lookahead *la);

/* Forget every prediction: a new walk (or new weights) begins. */
void fox__lookahead_reset(fox_lookahead *la);

/* One live segment's position in its walk. */
typedef struct fox_lookahead_seg {
    int id;                /* 0 .. n_segments − 1, fixed for the walk */
    int t, end;            /* the next decision bar; the segment ends at end */
    const fox_env_pos *st; /* the true portfolio before bar t's action */
    float band;            /* its no-trade band per unit of position (Q's units; 0: none) */
} fox_lookahead_seg;

/*
 * The forward pass a round of a walk needs: rows states [rows × S], whose
 * expected Q [rows × n_actions] the caller writes into q; both buffers are
 * the lookahead's. rows is 0 when every segment's prediction held.
 */
typedef struct fox_lookahead_pass {
    const float *s;
    float *q;
    int rows;
} fox_lookahead_pass;

/*
 * A round in two halves, so that the caller can run the passes of several
 * walks (several members' lookaheads) side by side between them. prepare:
 * for each of the n live segments, its Q row from a prediction that holds,
 * else its predicted bars join the round's pass; FOX_EINVAL for a segment
 * id out of range. consume, once the pass's Q is in: the greedy action of
 * each of the same n segments at its bar t into a[i]. Argmax ties go to the
 * lowest sub-action; the direction then keeps to the segment's no-trade band
 * (fox_env_band), which depends on the position alone besides Q, so a
 * prediction that holds gives the same action.
 */
int fox__lookahead_prepare(fox_lookahead *la, const fox_features *feat, const fox_env_params *p,
                           const fox_env_bars *bars, const fox_lookahead_seg *segs, int n,
                           fox_lookahead_pass *pass);
void fox__lookahead_consume(fox_lookahead *la, const fox_env_params *p,
                            const fox_lookahead_seg *segs, int n, int32_t (*a)[4]);

#endif
