/*
 * lookahead.c — predicted bars for the greedy evaluation walk (lookahead.h
 * says why a prediction that holds gives the action of a pass of its own).
 *
 * How many bars a segment predicts adapts to how long its guesses hold: a
 * pass used to its end doubles the next one's window, a guess that broke
 * after j bars makes the next window 2j. On the GPU a pass costs its launches
 * whatever its rows; on the CPU every predicted row costs its arithmetic, so
 * the window stays near what the policy's runs of repeated actions use.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/lookahead.h"

#define WINDOW_START 4

typedef struct seg_ahead {
    int t0, n;        /* the last pass predicted bars t0 .. t0 + n − 1 */
    int window;       /* bars the next pass predicts */
    int32_t guess[4]; /* the last action taken: the prediction's action */
    const float *q;   /* this call: the segment's Q row, NULL until found */
    int pass_row;     /* this call: its first row in the pass, −1 if none */
} seg_ahead;

struct fox_lookahead {
    const fox_model_layout *lay;
    int n_seg, window_max;
    seg_ahead *seg;
    float *port;   /* [n_seg × window_max × 3] predicted portfolio features */
    float *q;      /* [n_seg × window_max × n_actions] their expected Q */
    float *s_pass; /* [n_seg × window_max × S] the states of one pass */
    float *q_pass; /* [n_seg × window_max × n_actions] */
};

fox_lookahead *
fox__lookahead_new(const fox_model_layout *lay, int n_segments, int window_max)
{
    if (n_segments < 1 || window_max < 1 || window_max > FOX_LOOKAHEAD_MAX)
        return NULL;
    fox_lookahead *la = calloc(1, sizeof *la);
    if (!la)
        return NULL;
    size_t rows = (size_t)n_segments * window_max;
    la->lay = lay;
    la->n_seg = n_segments;
    la->window_max = window_max;
    la->seg = calloc((size_t)n_segments, sizeof *la->seg);
    la->port = calloc(rows * FOX_PORTFOLIO_FEATURES, sizeof(float));
    la->q = calloc(rows * lay->n_actions, sizeof(float));
    la->s_pass = calloc(rows * lay->S, sizeof(float));
    la->q_pass = calloc(rows * lay->n_actions, sizeof(float));
    if (!la->seg || !la->port || !la->q || !la->s_pass || !la->q_pass) {
        fox__lookahead_free(la);
        return NULL;
    }
    fox__lookahead_reset(la);
    return la;
}

void
fox__lookahead_free(fox_lookahead *la)
{
    if (!la)
        return;
    free(la->seg);
    free(la->port);
    free(la->q);
    free(la->s_pass);
    free(la->q_pass);
    free(la);
}

void
fox__lookahead_reset(fox_lookahead *la)
{
    for (int k = 0; k < la->n_seg; k++) {
        memset(&la->seg[k], 0, sizeof la->seg[k]);
        la->seg[k].window = WINDOW_START < la->window_max ? WINDOW_START : la->window_max;
    }
}

/* Row j of segment k's prediction, if it holds for the true features port of bar t. */
static const float *
predicted_q(const fox_lookahead *la, int k, int t, const float port[3])
{
    const seg_ahead *g = &la->seg[k];
    int j = t - g->t0;
    if (j < 0 || j >= g->n)
        return NULL;
    const float *want = la->port + ((size_t)k * la->window_max + j) * FOX_PORTFOLIO_FEATURES;
    if (memcmp(want, port, FOX_PORTFOLIO_FEATURES * sizeof *port) != 0)
        return NULL;
    return la->q + ((size_t)k * la->window_max + j) * la->lay->n_actions;
}

/* Size the next window from how far the last prediction held (t − t0 bars of n). */
static void
adapt_window(fox_lookahead *la, seg_ahead *g, int t)
{
    if (g->n == 0)
        return;
    int held = t - g->t0;
    int w = held >= g->n ? 2 * g->window : 2 * held;
    if (w < 2)
        w = 2;
    g->window = w < la->window_max ? w : la->window_max;
}

/*
 * Predict segment k's next bars from its true state at bar t, taking the
 * guessed action at every bar, into the pass's rows from row r0; returns
 * the rows written.
 */
static int
predict(fox_lookahead *la, const fox_features *feat, const fox_env_params *p,
        const fox_env_bars *bars, const fox_lookahead_seg *sg, int r0)
{
    const fox_model_layout *lay = la->lay;
    seg_ahead *g = &la->seg[sg->id];
    int n = sg->end - 1 - sg->t; /* decision bars left: t .. end − 2 */
    if (n > g->window)
        n = g->window;
    fox_env_pos ps = *sg->st;
    float *port = la->port + (size_t)sg->id * la->window_max * FOX_PORTFOLIO_FEATURES;
    for (int j = 0; j < n; j++) {
        float *pj = port + (size_t)j * FOX_PORTFOLIO_FEATURES;
        fox_env_portfolio(&ps, bars->close[sg->t + j], pj);
        fox__state_build(feat, lay->S, sg->t + j, pj, la->s_pass + (size_t)(r0 + j) * lay->S);
        if (j + 1 < n)
            fox_env_step(p, bars, sg->t + j, &ps, g->guess);
    }
    g->t0 = sg->t;
    g->n = n;
    return n;
}

int
fox__lookahead_prepare(fox_lookahead *la, const fox_features *feat, const fox_env_params *p,
                       const fox_env_bars *bars, const fox_lookahead_seg *segs, int n,
                       fox_lookahead_pass *pass)
{
    int rows = 0;
    for (int i = 0; i < n; i++)
        if (segs[i].id < 0 || segs[i].id >= la->n_seg)
            return FOX_EINVAL;
    for (int i = 0; i < n; i++) {
        const fox_lookahead_seg *sg = &segs[i];
        seg_ahead *g = &la->seg[sg->id];
        float port[FOX_PORTFOLIO_FEATURES];
        fox_env_portfolio(sg->st, bars->close[sg->t], port);
        g->q = predicted_q(la, sg->id, sg->t, port);
        g->pass_row = -1;
        if (g->q)
            continue;
        adapt_window(la, g, sg->t);
        g->pass_row = rows;
        rows += predict(la, feat, p, bars, sg, rows);
    }
    *pass = (fox_lookahead_pass){la->s_pass, la->q_pass, rows};
    return FOX_OK;
}

void
fox__lookahead_consume(fox_lookahead *la, const fox_env_params *p, const fox_lookahead_seg *segs,
                       int n, int32_t (*a)[4])
{
    const fox_model_layout *lay = la->lay;
    for (int i = 0; i < n; i++) {
        seg_ahead *g = &la->seg[segs[i].id];
        if (g->pass_row >= 0) {
            /* The pass's rows become the segment's prediction, kept for the bars to come. */
            float *q = la->q + (size_t)segs[i].id * la->window_max * lay->n_actions;
            memcpy(q, la->q_pass + (size_t)g->pass_row * lay->n_actions,
                   (size_t)g->n * lay->n_actions * sizeof *q);
            g->q = q;
        }
        fox_model_greedy_action(lay, g->q, a[i]);
        fox_env_band(p, segs[i].st->pos, g->q + lay->branch_off[FOX_BR_DIRECTION], segs[i].band,
                     a[i]);
        memcpy(g->guess, a[i], sizeof a[i]);
    }
}
