/*
 * env.h — the trading environment's step, identical on host and device.
 *
 * The decision is taken at the close of bar t from features of bars ≤ t and
 * filled on bar t+1, never on the bar that produced the signal: market orders
 * at open[t+1] (close-only data: close[t+1]) paying half-spread + fee; limit
 * orders at the limit price close[t], only if bar t+1's range reaches it
 * (close-only: if close[t+1] does), paying limit_fee. Reward = the log return
 * of the position held across the fill, minus costs, times reward_scale.
 *
 * Header-inline (FOX_HD) so that the CUDA backend runs the same code.
 */
#ifndef FOX_ENV_H
#define FOX_ENV_H

#include <math.h>
#include <stdint.h>

#include "gpu/rng.h"

/* The four branches: direction, size, order type, urgency. */
enum { FOX_BR_DIRECTION = 0, FOX_BR_SIZE = 1, FOX_BR_ORDER = 2, FOX_BR_URGENCY = 3 };
enum { FOX_DIR_SHORT = 0, FOX_DIR_FLAT = 1, FOX_DIR_LONG = 2 };
enum { FOX_ORDER_MARKET = 0, FOX_ORDER_LIMIT = 1 };

typedef struct fox_env_params {
    float fee, half_spread, limit_fee, reward_scale;
    int size_levels, urgency_levels;
} fox_env_params;

/* Read-only view of the series the environment walks. */
typedef struct fox_env_bars {
    const float *open, *high, *low, *close; /* open/high/low NULL when close-only */
} fox_env_bars;

/* Portfolio of one environment. */
typedef struct fox_env_pos {
    float pos;   /* position in [-1, 1] */
    float entry; /* fill price of the current position's opening */
    int held;    /* bars since the position was opened */
} fox_env_pos;

/* Outcome of one step. */
typedef struct fox_env_fill {
    float reward;    /* net, scaled */
    float ret_net;   /* net log return of the bar (unscaled) */
    float ret_gross; /* before costs */
    float dpos;      /* |Δposition| actually filled */
} fox_env_fill;

/* Target position of an action: direction × size, moved by urgency. */
FOX_HD float
fox_env_target(const fox_env_params *p, float pos, const int32_t a[4])
{
    float dir = (float)(a[FOX_BR_DIRECTION] - 1);
    float size = (float)(a[FOX_BR_SIZE] + 1) / (float)p->size_levels;
    float urgency = (float)(a[FOX_BR_URGENCY] + 1) / (float)p->urgency_levels;
    return pos + urgency * (dir * size - pos);
}

/* Step from the close of bar t to the close of bar t+1. */
FOX_HD fox_env_fill
fox_env_step(const fox_env_params *p, const fox_env_bars *b, int t, fox_env_pos *st,
             const int32_t a[4])
{
    fox_env_fill f;
    float c0 = b->close[t], c1 = b->close[t + 1];
    float want = fox_env_target(p, st->pos, a);
    float delta = want - st->pos;
    float fill_px = b->open ? b->open[t + 1] : c1;
    float cost_rate = p->fee + p->half_spread;
    if (a[FOX_BR_ORDER] == FOX_ORDER_LIMIT && delta != 0.0f) {
        float limit = c0;
        float lo = b->low ? b->low[t + 1] : c1, hi = b->high ? b->high[t + 1] : c1;
        int reached = delta > 0.0f ? lo <= limit : hi >= limit;
        if (!reached)
            delta = 0.0f;
        fill_px = limit;
        cost_rate = p->limit_fee;
    }
    float old = st->pos, now = st->pos + delta;
    f.ret_gross = old * logf(fill_px / c0) + now * logf(c1 / fill_px);
    f.dpos = fabsf(delta);
    f.ret_net = f.ret_gross - cost_rate * f.dpos;
    f.reward = f.ret_net * p->reward_scale;
    /* A position opened or flipped starts a new entry; scaling in keeps it. */
    if (now != 0.0f && (old == 0.0f || (old > 0.0f) != (now > 0.0f))) {
        st->entry = fill_px;
        st->held = 0;
    }
    st->held = now != 0.0f ? st->held + 1 : 0;
    st->pos = now;
    return f;
}

/*
 * The reward a learner is trained on: the step's reward with the costs
 * charged cost_mult times instead of once (env.train_cost_mult), so that
 * trading looks dearer to the learner than it is and only an edge that
 * clears the dearer cost is worth a change of position. The reported
 * figures (ret_net) always charge the costs once. cost_mult 1 gives the
 * step's reward bit for bit.
 */
FOX_HD float
fox_env_train_reward(const fox_env_params *p, const fox_env_fill *f, float cost_mult)
{
    return f->reward - (cost_mult - 1.0f) * (f->ret_gross - f->ret_net) * p->reward_scale;
}

/* The direction of a position: FOX_DIR_SHORT, FOX_DIR_FLAT or FOX_DIR_LONG. */
FOX_HD int
fox_env_direction(float pos)
{
    return pos > 0.0f ? FOX_DIR_LONG : pos < 0.0f ? FOX_DIR_SHORT : FOX_DIR_FLAT;
}

/*
 * The no-trade band of a greedy decision: the greedy action a keeps the
 * direction the position pos already has unless the direction branch's Q
 * of the new direction, q_dir[a's], exceeds the current direction's by more
 * than per_unit × |Δposition| of the change a asks for. per_unit is in the
 * Q's units (reward units): policy.band × the market cost × reward_scale.
 *
 * Why: the greedy argmax already nets the cost out of Q, but Q is an
 * estimate, and where nothing can be earned its noise alone flips the
 * argmax, paying the cost at every flip. A switch must now beat the noise
 * by a margin proportional to what it costs (a discrete form of the no-trade
 * region that proportional costs imply). Size and urgency stay greedy.
 */
FOX_HD void
fox_env_band(const fox_env_params *p, float pos, const float *q_dir, float per_unit, int32_t a[4])
{
    int cur = fox_env_direction(pos);
    if (per_unit <= 0.0f || a[FOX_BR_DIRECTION] == cur)
        return;
    float change = fabsf(fox_env_target(p, pos, a) - pos);
    if (q_dir[a[FOX_BR_DIRECTION]] - q_dir[cur] <= per_unit * change)
        a[FOX_BR_DIRECTION] = cur;
}

/* The three portfolio features of a state at the close of bar t. */
FOX_HD void
fox_env_portfolio(const fox_env_pos *st, float close_t, float out[3])
{
    float pnl = 0.0f;
    if (st->pos != 0.0f)
        pnl = (st->pos > 0.0f ? 1.0f : -1.0f) * 20.0f * logf(close_t / st->entry);
    out[0] = st->pos;
    out[1] = fminf(fmaxf(pnl, -5.0f), 5.0f);
    out[2] = (float)(st->held < 64 ? st->held : 64) / 64.0f;
}

#endif
