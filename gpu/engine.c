/*
 * engine.c — the backend-neutral engine: configuration resolution, backend
 * choice, data and folds, epochs and the fold report. Evaluation lives in
 * evaluate.c, checkpoint files in checkpoint.c; the math of a step lives in
 * the backends.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/engine_impl.h"
#include "common/hash.h"
#include "common/log.h"
#include "gpu/isv.h"
#include "gpu/layout.h"
#include "gpu/sentinel.h"

/* Bump when the checkpoint payload or a table changes meaning. */
#define FOX_FORMAT_VERSION 1

_Static_assert(FOX_HALT_MAX_SLOTS == FOX_SENT_HALT_END, "halt_info holds every halt slot");
_Static_assert(FOX_SELECT_WINDOW_MAX == 64, "train.select_window's range in config.c");

static const fox_backend_ops *
pick_backend(int want, char *err, size_t errlen)
{
    char why[256] = "not built with CUDA";
#ifdef FOX_HAVE_CUDA
    if (want != FOX_BACKEND_CPU && fox_cuda_backend_ops.available(why, sizeof why))
        return &fox_cuda_backend_ops;
#endif
    if (want == FOX_BACKEND_CUDA) {
        snprintf(err, errlen, "backend cuda requested but unavailable: %s", why);
        return NULL;
    }
    if (want == FOX_BACKEND_AUTO)
        fox_log(FOX_LOG_NOTICE, "%s: CPU backend", why);
    return &fox_cpu_backend_ops;
}

int
fox_engine_create(fox_engine **out, const fox_config *cfg, char *err, size_t errlen)
{
    char local[512];
    if (!err) {
        err = local;
        errlen = sizeof local;
    }
    *out = NULL;
    int rv = fox_config_validate(cfg, err, errlen);
    if (rv != FOX_OK)
        return rv;
    fox_engine *e = calloc(1, sizeof *e);
    if (!e)
        return FOX_ENOMEM;
    e->created_at = fox_mono_s();
    e->cfg = *cfg;
    if (e->cfg.data_seed == 0)
        e->cfg.data_seed = e->cfg.seed;
    e->fold = -1;
    e->next_fault_slot = -1;
    e->ops = pick_backend(cfg->backend, err, errlen);
    if (!e->ops) {
        free(e);
        return FOX_ENODEV;
    }
    /* A non-"none" fault kind is the explicit request; it must name a sentinel buffer. */
    if (cfg->fault_kind != FOX_FAULT_NONE && fox_sentinel_fault_slot(cfg->fault_buffer) < 0) {
        snprintf(err, errlen, "debug.inject_fault.buffer: '%s' names no sentinel buffer",
                 cfg->fault_buffer);
        free(e);
        return FOX_EINVAL;
    }
    int gpu = e->ops != &fox_cpu_backend_ops;
    if (e->cfg.n_envs == 0)
        e->cfg.n_envs = gpu ? 1024 : 64;
    if (e->cfg.batch == 0)
        e->cfg.batch = gpu ? 256 : 64;
    if ((rv = fox_model_layout_init(&e->lay, &e->cfg)) != FOX_OK) {
        snprintf(err, errlen, "model widths unusable");
        free(e);
        return rv;
    }
    e->fingerprint = fox_layout_fingerprint(fox_model_layout_hash(&e->lay), FOX_FORMAT_VERSION);
    e->fingerprint_before_grid =
        fox_layout_fingerprint_before_grid(fox_model_layout_hash(&e->lay), FOX_FORMAT_VERSION);
    /* A backend's forward pass takes up to max(batch, envs) rows at a time. */
    e->call_rows = e->cfg.batch > e->cfg.n_envs ? e->cfg.batch : e->cfg.n_envs;
    e->members = calloc((size_t)e->cfg.members, sizeof *e->members);
    if (!e->members) {
        fox_engine_destroy(e);
        return FOX_ENOMEM;
    }
    /*
     * Member k is the run of its own config alone (train.seed + k, and its
     * values of the listed keys), on the same data (data.seed): its backend
     * and its walks read nothing else. Each walks with a lookahead of its
     * own, so that the members' walks go side by side (evaluate.c).
     */
    for (int k = 0; k < e->cfg.members; k++) {
        fox_member *m = &e->members[k];
        fox_config_member(&e->cfg, k, &m->cfg);
        m->band = m->cfg.band;
        if (!(m->ahead = fox__lookahead_new(&e->lay, FOX_EVAL_WALKS_MAX, e->ops->eval_lookahead))) {
            fox_engine_destroy(e);
            return FOX_ENOMEM;
        }
    }
    e->ensemble.cfg = e->cfg;
    e->ensemble.band = e->cfg.band;
    if (e->cfg.policy_members == FOX_POLICY_MEMBERS_ENSEMBLE &&
        (!(e->ensemble.ahead =
               fox__lookahead_new(&e->lay, FOX_EVAL_WALKS_MAX, e->ops->eval_lookahead)) ||
         !(e->q_scratch = malloc((size_t)e->call_rows * e->lay.n_actions * sizeof(float))))) {
        fox_engine_destroy(e);
        return FOX_ENOMEM;
    }
    e->m = &e->members[0];
    *out = e;
    return FOX_OK;
}

void
fox_engine_destroy(fox_engine *e)
{
    if (!e)
        return;
    for (int k = 0; e->members && k < e->cfg.members; k++) {
        fox_member *m = &e->members[k];
        if (m->be)
            e->ops->destroy(m->be);
        free(m->greedy_ret);
        free(m->chosen_ret);
        fox__lookahead_free(m->ahead);
    }
    free(e->members);
    free(e->ensemble.greedy_ret);
    free(e->ensemble.chosen_ret);
    fox__lookahead_free(e->ensemble.ahead);
    free(e->q_scratch);
    fox_features_fini(&e->feat);
    fox_series_fini(&e->series);
    for (int p = 0; p < FOX_POLICY_COUNT; p++)
        free(e->test_ret[p]);
    free(e);
}

const char *
fox_engine_errmsg(const fox_engine *e)
{
    return e ? e->err : "";
}

int
fox_engine_source_is_generator(const char *source)
{
    return fox_series_is_generator(source);
}

int
fox_engine_load_data(fox_engine *e)
{
    char err[512] = "";
    int rv;
    if (e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "data already loaded");
    fox_gen_params gp = {e->cfg.edge_lag, e->cfg.edge_coef};
    rv = fox_series_generate(&e->series, e->cfg.data, e->cfg.synth_bars, e->cfg.data_seed, &gp);
    if (rv == FOX_ENOENT) /* not a generator's name: a CSV path */
        rv = fox_series_load_csv(&e->series, e->cfg.data, e->cfg.price_column,
                                 200 * (e->cfg.n_folds + 1), err, sizeof err);
    if (rv != FOX_OK)
        return fox__engine_fail(e, rv, "data: %s", err[0] ? err : fox_strerror(rv));
    if (e->cfg.bars_per_year > 0) {
        e->series.bars_per_year = e->cfg.bars_per_year;
        e->series.bars_per_year_from = "data.bars_per_year";
    } else if (!(e->series.bars_per_year >= FOX_MIN_BARS_PER_YEAR &&
                 e->series.bars_per_year <= FOX_MAX_BARS_PER_YEAR)) {
        /* Timestamps in another unit, or rows that are not bars: every annualized figure
         * would be off by the same factor, silently. */
        return fox__engine_fail(e, FOX_EINVAL,
                                "data: %s: P = %g bars a year (%s), outside [%g, %g] (one bar a "
                                "year to one a second): are the times unix seconds? Give them "
                                "so, or set data.bars_per_year",
                                e->series.source, e->series.bars_per_year,
                                e->series.bars_per_year_from, FOX_MIN_BARS_PER_YEAR,
                                FOX_MAX_BARS_PER_YEAR);
    }
    if ((rv = fox_features_compute(&e->feat, &e->series, e->lay.S)) != FOX_OK)
        return fox__engine_fail(e, rv, "features: %s", fox_strerror(rv));
    /* The backends need the series; they are created once the data exists, one a member. */
    fox_fold_split(e->series.n, e->feat.warmup, e->cfg.n_folds, 0, &e->seg);
    /*
     * The members are a population: what sets them apart (their seeds and the member keys) is
     * each member's data, so that a backend may train them in one step.
     */
    int population = e->cfg.members;
    for (int k = 0; k < e->cfg.members; k++) {
        fox_member *m = &e->members[k];
        fox_backend_env env = {&m->cfg,   &e->lay,    &e->series,         &e->feat,
                               &e->seg,   k,          population,         &e->backend_shared};
        if ((rv = e->ops->create(&m->be, &env, err, sizeof err)) != FOX_OK)
            return fox__engine_fail(e, rv, "member %d: %s", k, err);
        fox_isv_store_fingerprint((float *)((fox_backend_base *)m->be)->isv, e->fingerprint);
    }
    e->data_loaded = 1;
    e->times.startup = fox_mono_s() - e->created_at;
    fox_log(FOX_LOG_INFO,
            "engine: %s backend, %d member%s of %zu parameters, %d envs, batch %d, %d bars from "
            "%s, P = %.0f bars a year (%s)",
            e->ops->name, e->cfg.members, e->cfg.members == 1 ? "" : "s", e->lay.n_real,
            e->cfg.n_envs, e->cfg.batch, e->series.n,
            e->series.source, e->series.bars_per_year, e->series.bars_per_year_from);
    return FOX_OK;
}

/*
 * Arm the current member's fault `after` train steps past its counter now
 * (0: the next train step); the backend takes the absolute count.
 */
static int
arm_fault_after(fox_engine *e, int slot, int kind, int64_t after)
{
    fox_train_counters c;
    e->ops->state_io(e->m->be, 0, NULL, NULL, NULL, NULL, &c);
    return e->ops->arm_fault(e->m->be, slot, kind, c.train_steps + after);
}

/* Arm a fault into member `member`'s backend, or every member's (member < 0). */
static int
arm_members(fox_engine *e, int member, int slot, int kind, int64_t after)
{
    fox_member *was = e->m;
    int rv = FOX_OK;
    for (int k = 0; k < e->cfg.members && rv == FOX_OK; k++)
        if (member < 0 || member == k) {
            e->m = &e->members[k];
            rv = arm_fault_after(e, slot, kind, after);
        }
    e->m = was;
    return rv;
}

/* The members still training in the fold. */
static int
members_training(const fox_engine *e)
{
    int n = 0;
    for (int k = 0; k < e->cfg.members; k++)
        n += e->members[k].halt.reason == FOX_HALT_NONE;
    return n;
}

/* The lead member: member 0, else the first still training. */
static int
lead_member(const fox_engine *e)
{
    for (int k = 0; k < e->cfg.members; k++)
        if (e->members[k].halt.reason == FOX_HALT_NONE)
            return k;
    return 0;
}

fox_member *
fox__engine_policy_member(const fox_engine *e)
{
    if (e->cfg.policy_members == FOX_POLICY_MEMBERS_ENSEMBLE)
        return (fox_member *)&e->ensemble;
    return &e->members[e->policy_loaded ? 0 : lead_member(e)];
}

/* The ensemble's index where a member's is asked for (fox_fold_report.lead). */
#define ENSEMBLE_LEAD (-1)

int
fox_engine_reset_for_fold(fox_engine *e)
{
    if (!e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "reset_for_fold before load_data");
    int rv = FOX_OK;
    for (int k = 0; k < e->cfg.members; k++) {
        fox_member *m = &e->members[k];
        int r = e->ops->reset_for_fold(m->be);
        if (rv == FOX_OK)
            rv = r;
        fox_isv_store_fingerprint((float *)((fox_backend_base *)m->be)->isv, e->fingerprint);
        memset(&m->halt, 0, sizeof m->halt);
        m->fold_step = 0;
    }
    memset(&e->halt, 0, sizeof e->halt);
    if (rv == FOX_OK && e->next_fault_slot >= 0) {
        rv = arm_members(e, e->next_fault_member, e->next_fault_slot, e->next_fault_kind,
                         e->next_fault_step);
        e->next_fault_slot = -1;
    }
    return rv;
}

/* Refuse steps while the fold is halted. */
static int
check_not_halted(fox_engine *e, const char *what)
{
    if (e->halt.reason == FOX_HALT_NONE)
        return FOX_OK;
    return fox__engine_fail(e, FOX_ESTATE,
                            "%s: fold %d halted at step %lld (%s); begin_fold or reset_for_fold "
                            "to continue",
                            what, e->halt.fold, (long long)e->halt.step, e->halt.message);
}

/*
 * Member k's backend stopped a step with FOX_EHALT: keep why, as text and
 * as data, and freeze the member. The fold halts (FOX_EHALT, with this
 * member's halt) when fewer than engine.quorum members are left.
 */
static int
record_halt(fox_engine *e, int k)
{
    fox_member *m = &e->members[k];
    fox_backend_base *b = (fox_backend_base *)m->be;
    fox_halt_info *h = &m->halt;
    memset(h, 0, sizeof *h);
    h->reason = b->halt_reason == FOX_HALT_GRAD_COLLAPSE ? FOX_HALT_GRAD_COLLAPSE : FOX_HALT_NAN;
    h->member = k;
    h->fold = e->fold;
    h->step = b->halt_step;
    for (int i = 0; i < FOX_SENT_HALT_END; i++)
        if (b->flags[i] && fox_sentinel_is_halt(i)) {
            h->slots[h->n_slots] = i;
            h->names[h->n_slots++] = fox_sentinel_name(i);
        }
    if (e->cfg.members == 1)
        snprintf(h->message, sizeof h->message, "%s", b->err);
    else
        snprintf(h->message, sizeof h->message, "member %d: %.480s", k, b->err);
    int left = members_training(e);
    fox_log(FOX_LOG_WARNING, "engine: fold %d step %lld: %s%s", h->fold, (long long)h->step,
            h->message,
            left >= e->cfg.quorum && e->cfg.members > 1 ? " (frozen; the fold goes on)" : "");
    if (left >= e->cfg.quorum)
        return FOX_OK;
    e->halt = *h;
    return fox__engine_fail(e, FOX_EHALT, "%s", h->message);
}

void
fox_engine_halt_info(const fox_engine *e, fox_halt_info *out)
{
    *out = e->halt;
}

int
fox_engine_member_halt_info(const fox_engine *e, int member, fox_halt_info *out)
{
    if (member < 0 || member >= e->cfg.members)
        return FOX_EINVAL;
    *out = e->members[member].halt;
    return FOX_OK;
}

int
fox_engine_begin_fold(fox_engine *e, int fold)
{
    if (!e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "begin_fold before load_data");
    double t0 = fox_mono_s();
    int rv = fox_fold_split(e->series.n, e->feat.warmup, e->cfg.n_folds, fold, &e->seg);
    if (rv != FOX_OK)
        return fox__engine_fail(e, rv, "fold %d: no such fold of %d (or blocks too short)", fold,
                                e->cfg.n_folds);
    /* Normalization is fitted on the training blocks only. */
    fox_features_normalize(&e->feat, e->seg.train_begin, e->seg.train_end);
    for (int k = 0; k < e->cfg.members; k++)
        if ((rv = e->ops->begin_fold(e->members[k].be)) != FOX_OK)
            return fox__engine_fail(e, rv, "begin_fold: member %d: %s", k, fox_strerror(rv));
    if ((rv = fox_engine_reset_for_fold(e)) != FOX_OK)
        return rv;
    e->fold = fold;
    e->policy_loaded = 0;
    e->m = &e->members[0];
    fox_fold_report *fr = &e->m->rep;
    memset(fr, 0, sizeof *fr);
    fr->fold = fold;
    fr->best_epoch = -1;
    fr->bars_per_year = e->series.bars_per_year;
    fr->select_rule = e->cfg.select_rule;
    fr->select_window = e->cfg.select_rule == FOX_SELECT_SMOOTHED ? e->cfg.select_window : 1;
    /* The fold's own times start here; its baselines' walks count as its evaluation. */
    e->fold_times0 = e->times;
    e->fold_t0 = t0;
    if ((rv = fox__engine_baselines(e)) != FOX_OK) {
        e->fold = -1;
        return rv;
    }
    /* Every member starts from the same report: the fold's baselines, no epoch yet. */
    for (int k = 0; k <= e->cfg.members; k++) {
        fox_member *m = k < e->cfg.members ? &e->members[k] : &e->ensemble;
        if (k > 0)
            m->rep = *fr;
        m->band = m->cfg.band;
        m->test_sharpe_sum = 0.0;
        m->epoch_loss_sum = 0.0;
        m->epoch_loss_n = 0;
        memset(&m->last, 0, sizeof m->last);
    }
    e->epoch_t0 = fox_mono_s();
    e->epoch_step0 = 0;
    e->times.fold_setup += e->epoch_t0 - t0 - (e->times.eval - e->fold_times0.eval);
    return FOX_OK;
}

/*
 * Keep what the epoch report shows of the last step: exploration and
 * counters of the chunk just run, and the losses of the last chunk that
 * trained (a chunk still filling the replay ring trains nothing and reports
 * a loss of 0).
 */
static void
keep_last_stats(fox_member *m, const fox_step_stats *st)
{
    m->last.step = st->step;
    m->last.env_steps = st->env_steps;
    m->last.epsilon = st->epsilon;
    if (st->loss != 0.0f) {
        m->last.loss = st->loss;
        m->last.loss_c51 = st->loss_c51;
        m->last.loss_iqn = st->loss_iqn;
        m->last.loss_aux = st->loss_aux;
        m->last.grad_norm = st->grad_norm;
    }
}

/*
 * n steps of every member still training (collect: full steps, else train
 * steps alone): each member's backend first starts its chunk, then each
 * finishes it, so that where a backend runs its chunk asynchronously (CUDA)
 * the members' chunks run side by side. *stats gets the lead member's.
 */
static int
step_members(fox_engine *e, int n, int collect, fox_step_stats *stats, const char *what)
{
    int rv = check_not_halted(e, what);
    if (rv != FOX_OK)
        return rv;
    double t0 = fox_mono_s();
    int K = e->cfg.members, lead = lead_member(e), failed = FOX_OK;
    fox_step_stats st[FOX_MEMBERS_MAX];
    int res[FOX_MEMBERS_MAX];
    for (int k = 0; k < K; k++)
        if (e->members[k].halt.reason == FOX_HALT_NONE)
            res[k] = e->ops->start_steps(e->members[k].be, n, collect);
    for (int k = 0; k < K; k++) {
        fox_member *m = &e->members[k];
        if (m->halt.reason != FOX_HALT_NONE)
            continue;
        /* A backend fills only what its chunk computed: a chunk that trained nothing leaves 0s. */
        memset(&st[k], 0, sizeof st[k]);
        int r = e->ops->finish_steps(m->be, &st[k]);
        if (res[k] == FOX_OK)
            res[k] = r;
    }
    e->times.train += fox_mono_s() - t0;
    int64_t lead_before = e->members[lead].fold_step;
    for (int k = 0; k < K && failed == FOX_OK; k++) {
        fox_member *m = &e->members[k];
        if (m->halt.reason != FOX_HALT_NONE)
            continue;
        if (res[k] == FOX_EHALT) {
            /* The backend stopped inside the chunk; st.step is where (the fold's step count). */
            if (collect)
                m->fold_step = st[k].step;
            failed = record_halt(e, k);
            continue;
        }
        if (res[k] != FOX_OK) {
            const char *why = ((fox_backend_base *)m->be)->err;
            if (!collect && res[k] == FOX_ESTATE)
                why = "replay not filled yet";
            failed = fox__engine_fail(e, res[k], "%s: member %d: %s", what, k,
                                      why[0] ? why : fox_strerror(res[k]));
            continue;
        }
        if (!collect)
            continue; /* a benchmark's train steps: no epoch's figures */
        m->fold_step = st[k].step;
        /* Summed step by step, so the epoch's mean is the same whatever the chunks. */
        m->epoch_loss_sum += st[k].loss_sum;
        m->epoch_loss_n += st[k].trained;
        keep_last_stats(m, &st[k]);
        m->rep.final_loss = st[k].loss;
    }
    /* Steps since creation count the lead's full steps, up to a halt where it halted. */
    if (collect)
        e->total_steps += e->members[lead].fold_step - lead_before;
    if (stats)
        *stats = st[lead];
    return failed;
}

int
fox_engine_run_steps(fox_engine *e, int n, fox_step_stats *stats)
{
    if (e->fold < 0)
        return fox__engine_fail(e, FOX_ESTATE, "run_steps before begin_fold");
    return step_members(e, n, 1, stats, "run_steps");
}

int
fox_engine_train_only(fox_engine *e, int n, fox_step_stats *stats)
{
    if (e->fold < 0)
        return fox__engine_fail(e, FOX_ESTATE, "train_only before begin_fold");
    return step_members(e, n, 0, stats, "train_only");
}

/*
 * Selection on validation only; the test figure of the chosen epoch is the
 * unbiased one. The smoothed rule scores epoch j by the mean validation
 * Sharpe of epochs j−K+1..j and keeps the best full window; until K epochs
 * exist the latest (partial) window is chosen, so a fold shorter than K
 * epochs ends at its last epoch. One noisy epoch then moves the score by
 * 1/K of its jump, not all of it. Online, so the chosen epoch is always one
 * that has just ended (a checkpoint of it can be taken then). For the
 * current member.
 */
void
fox__engine_select_epoch(fox_engine *e, const fox_epoch_report *rep)
{
    fox_member *m = e->m;
    fox_fold_report *fr = &m->rep;
    int j = rep->epoch, K = fr->select_window;
    double score = rep->val.sharpe;
    int take;
    if (fr->select_rule == FOX_SELECT_SMOOTHED) {
        m->sel_val[j % K] = rep->val.sharpe;
        int have = j + 1 < K ? j + 1 : K;
        double sum = 0.0;
        for (int i = 0; i < have; i++)
            sum += m->sel_val[i];
        score = sum / have;
        take = j + 1 <= K || score > fr->select_score;
    } else {
        take = fr->select_rule == FOX_SELECT_LAST || fr->best_epoch < 0 ||
               score > fr->select_score;
    }
    if (take) {
        fr->best_epoch = j;
        fr->best_val_sharpe = rep->val.sharpe;
        fr->select_score = score;
        fr->test_at_best = rep->test;
        fr->band = rep->band;
        if (m->chosen_ret && rep->test.bars <= e->ret_cap) {
            memcpy(m->chosen_ret, m->greedy_ret, (size_t)rep->test.bars * sizeof(float));
            fox__engine_compare(e);
        }
    }
    fr->test_at_last = rep->test;
    m->test_sharpe_sum += rep->test.sharpe;
    fr->test_sharpe_mean = m->test_sharpe_sum / (j + 1);
}

/*
 * The current member's epoch, its walks done (val and test): its selection,
 * its report. The ensemble, which trains nothing, reports the training
 * figures of `trainer`, the lead member, before that member's own epoch
 * closes.
 */
static void
end_member_epoch(fox_engine *e, const fox_member *trainer, double dt, const fox_eval_result *val,
                 const fox_eval_result *test, fox_epoch_report *rep)
{
    fox_member *m = e->m;
    memset(rep, 0, offsetof(fox_epoch_report, lead));
    fox_train_counters c;
    e->ops->state_io(trainer->be, 0, NULL, NULL, NULL, NULL, &c);
    rep->fold = e->fold;
    rep->epoch = m->rep.epochs_done;
    rep->last = trainer->last;
    rep->last.step = c.step;
    rep->last.env_steps = c.env_steps;
    rep->mean_loss = trainer->epoch_loss_n
                         ? trainer->epoch_loss_sum / (double)trainer->epoch_loss_n
                         : 0.0;
    rep->steps_per_sec = dt > 0 ? (double)(c.step - e->epoch_step0) / dt : 0.0;
    rep->val = *val;
    rep->test = *test;
    rep->band = m->band;
    fox__engine_select_epoch(e, rep);
    fox_fold_report *fr = &m->rep;
    fr->epochs_done++;
    fr->final_loss = rep->mean_loss;
    fr->steps_per_sec =
        fr->steps_per_sec == 0.0
            ? rep->steps_per_sec
            : (fr->steps_per_sec * (fr->epochs_done - 1) + rep->steps_per_sec) / fr->epochs_done;
    m->epoch = (fox_member_epoch){1, rep->val.sharpe, rep->test.sharpe, rep->test.turnover,
                                  rep->band};
    m->epoch_loss_sum = 0.0;
    m->epoch_loss_n = 0;
}

int
fox_engine_end_epoch(fox_engine *e, fox_epoch_report *rep)
{
    if (e->fold < 0)
        return fox__engine_fail(e, FOX_ESTATE, "end_epoch before begin_fold");
    double dt = fox_mono_s() - e->epoch_t0;
    int K = e->cfg.members, lead = lead_member(e), rv = FOX_OK;
    int ensemble = e->cfg.policy_members == FOX_POLICY_MEMBERS_ENSEMBLE;
    fox_member *was = e->m;
    /*
     * The ensemble walks first, on its own: its passes are every member's.
     * Then the members still training walk side by side (evaluate.c).
     */
    fox_eval_result val[FOX_MEMBERS_MAX], test[FOX_MEMBERS_MAX];
    if (ensemble) {
        fox_member *ens = &e->ensemble;
        if ((rv = fox__engine_evaluate_members(e, &ens, 1, &val[0], &test[0])) != FOX_OK)
            return rv;
        e->m = ens;
        end_member_epoch(e, &e->members[lead], dt, &val[0], &test[0], rep);
    }
    fox_member *walking[FOX_MEMBERS_MAX];
    int n = 0;
    for (int k = 0; k < K; k++)
        if (e->members[k].halt.reason == FOX_HALT_NONE)
            walking[n++] = &e->members[k];
    rv = fox__engine_evaluate_members(e, walking, n, val, test);
    /* The policy's report goes to the caller; the others' parts go into its members[]. */
    fox_epoch_report other;
    for (int k = 0, i = 0; k < K && rv == FOX_OK; k++) {
        e->m = &e->members[k];
        if (e->m->halt.reason != FOX_HALT_NONE) {
            /* A frozen member's walk no longer moves: it counts its epochs, measures none. */
            e->m->rep.epochs_done++;
            e->m->epoch = (fox_member_epoch){0, NAN, NAN, NAN, e->m->band};
            continue;
        }
        end_member_epoch(e, e->m, dt, &val[i], &test[i], k == lead && !ensemble ? rep : &other);
        i++;
    }
    e->m = was;
    if (rv != FOX_OK)
        return rv;
    rep->lead = ensemble ? ENSEMBLE_LEAD : lead;
    rep->n_members = K;
    for (int k = 0; k < K; k++)
        rep->members[k] = e->members[k].epoch;
    fox_train_counters c;
    e->ops->state_io(e->members[lead].be, 0, NULL, NULL, NULL, NULL, &c);
    e->epoch_t0 = fox_mono_s();
    e->epoch_step0 = c.step;
    return FOX_OK;
}

/*
 * Each member's values of the member keys into members[].values, and which
 * keys the members hold apart into member_keys: with different values for
 * lr (say), a reader sees which member learnt at which.
 */
static void
members_values(const fox_engine *e, fox_fold_report *out)
{
    out->member_keys = 0;
    for (int i = 0; i < FOX_MEMBER_KEYS; i++) {
        for (int k = 0; k < e->cfg.members; k++) {
            char text[64];
            fox_config_get(&e->members[k].cfg, fox_member_key(i), text, sizeof text);
            out->members[k].values[i] = strtod(text, NULL);
            if (i != FOX_MEMBER_KEY_SEED && out->members[k].values[i] != out->members[0].values[i])
                out->member_keys |= 1u << i;
        }
    }
}

/* members[] and the spread over them, from each member's own report. */
static void
members_spread(const fox_engine *e, fox_fold_report *out)
{
    int K = e->cfg.members;
    out->n_members = K;
    out->members_training = members_training(e);
    out->members_n = 0;
    out->members_best = out->members_worst = -1;
    double sum = 0.0, sum2 = 0.0;
    for (int k = 0; k < K; k++) {
        const fox_member *m = &e->members[k];
        fox_member_report *r = &out->members[k];
        *r = (fox_member_report){m->cfg.seed,
                                 m->rep.best_epoch,
                                 m->rep.best_val_sharpe,
                                 m->rep.test_at_best,
                                 m->rep.band,
                                 m->halt.reason,
                                 m->halt.step,
                                 m->halt.n_slots ? m->halt.slots[0] : -1,
                                 {0}};
        if (m->rep.best_epoch < 0)
            continue;
        double s = m->rep.test_at_best.sharpe;
        sum += s;
        sum2 += s * s;
        out->members_n++;
        if (out->members_best < 0 || s > out->members[out->members_best].test_at_best.sharpe)
            out->members_best = k;
        if (out->members_worst < 0 || s < out->members[out->members_worst].test_at_best.sharpe)
            out->members_worst = k;
    }
    members_values(e, out);
    int n = out->members_n;
    out->members_mean = n ? sum / n : NAN;
    double var = n > 1 ? (sum2 - n * out->members_mean * out->members_mean) / (n - 1) : 0.0;
    out->members_se = n > 1 && var > 0.0 ? sqrt(var / n) : 0.0;
}

int
fox_engine_fold_report(const fox_engine *e, fox_fold_report *out)
{
    if (e->fold < 0)
        return FOX_ESTATE;
    const fox_member *policy = fox__engine_policy_member(e);
    *out = policy->rep;
    out->lead = policy == &e->ensemble ? ENSEMBLE_LEAD : (int)(policy - e->members);
    /* A slot set in any member is reported: the flags warn, whichever member raised them. */
    out->flagged = 0;
    for (int k = 0; k < e->cfg.members; k++)
        out->flagged |= fox_sentinel_mask(fox_engine_member_flags(e, k));
    out->wall_secs = fox_mono_s() - e->fold_t0;
    out->train_secs = e->times.train - e->fold_times0.train;
    out->eval_secs = e->times.eval - e->fold_times0.eval;
    out->eval_bars = e->times.eval_bars - e->fold_times0.eval_bars;
    out->eval_passes = e->times.eval_passes - e->fold_times0.eval_passes;
    out->test_policy[FOX_POLICY_GREEDY] = out->test_at_best;
    const fox_eval_result *oracle = &out->test_policy[FOX_POLICY_ORACLE];
    out->oracle_fraction = out->has_oracle && out->epochs_done > 0 && oracle->sharpe > 0.0
                               ? out->test_at_best.sharpe / oracle->sharpe
                               : NAN;
    out->halt_reason = e->halt.reason;
    out->halt_step = e->halt.step;
    out->halt_slots = 0;
    for (int i = 0; i < e->halt.n_slots; i++)
        out->halt_slots |= 1ull << e->halt.slots[i];
    members_spread(e, out);
    return FOX_OK;
}

int
fox_engine_backtest(fox_engine *e, fox_fold_report *out)
{
    if (!e->policy_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "backtest before load_policy");
    fox_eval_result policy, val;
    fox_member *m = e->m = fox__engine_policy_member(e);
    int rv = fox__engine_ret_bufs(e, e->seg.test_end - e->seg.test_begin);
    if (rv != FOX_OK)
        return rv;
    /* The band as a fold chooses it, on the bars before the range where there are enough. */
    m->band = m->cfg.band;
    if (e->cfg.band_rule == FOX_BAND_RULE_VALIDATION &&
        e->seg.val_end - e->seg.val_begin >= FOX_TREND_VAL_MIN_BARS &&
        (rv = fox__engine_choose_bands(e, &m, 1, &val)) != FOX_OK)
        return rv;
    if ((rv = fox_engine_evaluate(e, FOX_SPLIT_TEST, FOX_POLICY_GREEDY, &policy)) != FOX_OK ||
        (rv = fox__engine_baselines(e)) != FOX_OK)
        return rv;
    fox_fold_report *fr = &m->rep;
    fr->test_at_best = policy;
    fr->band = m->band;
    memcpy(m->chosen_ret, m->greedy_ret, (size_t)policy.bars * sizeof(float));
    fox__engine_compare(e);
    fr->best_val_sharpe = NAN;
    fr->select_score = NAN;
    fr->final_loss = NAN;
    fr->steps_per_sec = NAN;
    fr->test_sharpe_mean = NAN;
    fr->test_at_last.sharpe = NAN;
    rv = fox_engine_fold_report(e, out);
    /* A backtest walks one policy: the members' block says so. */
    out->n_members = 1;
    out->members_training = 1;
    return rv;
}

void
fox_engine_get_info(const fox_engine *e, fox_engine_info *out)
{
    memset(out, 0, sizeof *out);
    int lead = lead_member(e);
    out->backend = e->ops->name;
    out->n_params = e->lay.n_real;
    out->n_envs = e->cfg.n_envs;
    out->batch = e->cfg.batch;
    out->n_bars = e->series.n;
    out->bars_per_year = e->series.bars_per_year;
    out->bars_per_year_from = e->series.bars_per_year_from;
    out->fold = e->fold;
    out->epoch = e->members[lead].rep.epochs_done;
    out->total_steps = e->total_steps;
    out->fingerprint = e->fingerprint;
    out->n_members = e->cfg.members;
    out->members_training = members_training(e);
    out->times = e->times;
    out->val_begin = e->seg.val_begin;
    out->val_end = e->seg.val_end;
    out->test_begin = e->seg.test_begin;
    out->test_end = e->seg.test_end;
    if (e->data_loaded) {
        fox_train_counters c;
        e->ops->state_io(e->members[lead].be, 0, NULL, NULL, NULL, NULL, &c);
        out->step = c.step;
    }
}

const double *
fox_engine_bar_times(const fox_engine *e)
{
    return e->data_loaded ? e->series.time : NULL;
}

const volatile float *
fox_engine_member_isv(const fox_engine *e, int member)
{
    if (!e->data_loaded || member < 0 || member >= e->cfg.members)
        return NULL;
    return ((fox_backend_base *)e->members[member].be)->isv;
}

const volatile int *
fox_engine_member_flags(const fox_engine *e, int member)
{
    if (!e->data_loaded || member < 0 || member >= e->cfg.members)
        return NULL;
    return ((fox_backend_base *)e->members[member].be)->flags;
}

const volatile float *
fox_engine_isv(const fox_engine *e)
{
    return fox_engine_member_isv(e, 0);
}

const volatile int *
fox_engine_flags(const fox_engine *e)
{
    return fox_engine_member_flags(e, 0);
}

int
fox_engine_clear_flags(fox_engine *e)
{
    if (!e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "no backend yet (load_data first)");
    for (int k = 0; k < e->cfg.members; k++) {
        volatile int *flags = ((fox_backend_base *)e->members[k].be)->flags;
        for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
            flags[i] = 0;
    }
    return FOX_OK;
}

int
fox_engine_inject_fault(fox_engine *e, int member, const char *buffer, int kind, int64_t after,
                        int at_next_fold)
{
    int slot = fox_sentinel_fault_slot(buffer);
    if (slot < 0)
        return fox__engine_fail(e, FOX_ENOENT, "inject_fault: '%s' names no sentinel buffer",
                                buffer);
    if (kind != FOX_FAULT_NAN && kind != FOX_FAULT_INF && kind != FOX_FAULT_HUGE)
        return fox__engine_fail(e, FOX_EINVAL, "inject_fault: kind must be nan, inf or huge");
    if (member >= e->cfg.members)
        return fox__engine_fail(e, FOX_EINVAL, "inject_fault: no member %d (engine.members = %d)",
                                member, e->cfg.members);
    if (!e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "inject_fault before load_data");
    if (!e->ops->arm_fault)
        return fox__engine_fail(e, FOX_ESTATE, "inject_fault: the %s backend cannot arm faults",
                                e->ops->name);
    if (after < 0)
        after = 0;
    if (at_next_fold) {
        /*
         * The fold that ran last left its train-step count in the backend,
         * and the next fold's reset sets it back to 0: a step counted from
         * now would land `count` steps late, so the arming waits for it.
         */
        e->next_fault_slot = slot;
        e->next_fault_kind = kind;
        e->next_fault_member = member;
        e->next_fault_step = after;
        return FOX_OK;
    }
    /* One fault at a time: this one replaces any still waiting for a fold. */
    e->next_fault_slot = -1;
    return arm_members(e, member, slot, kind, after);
}

size_t
fox_engine_param_count(const fox_engine *e)
{
    return e->lay.n_params;
}

int
fox_engine_member_params(fox_engine *e, int member, float *out, size_t n)
{
    if (!e->data_loaded)
        return fox__engine_fail(e, FOX_ESTATE, "no backend yet (load_data first)");
    if (member < 0 || member >= e->cfg.members)
        return fox__engine_fail(e, FOX_EINVAL, "no member %d (engine.members = %d)", member,
                                e->cfg.members);
    if (n < e->lay.n_params)
        return fox__engine_fail(e, FOX_EINVAL, "buffer of %zu floats, %zu needed", n,
                                e->lay.n_params);
    return e->ops->state_io(e->members[member].be, 0, out, NULL, NULL, NULL, NULL);
}

int
fox_engine_get_params(fox_engine *e, float *out, size_t n)
{
    return fox_engine_member_params(e, 0, out, n);
}

int
fox_engine_params_digest(fox_engine *e, int member, uint64_t *out)
{
    size_t n = fox_engine_param_count(e);
    float *p = malloc(n * sizeof *p);
    if (!p)
        return fox__engine_fail(e, FOX_ENOMEM, "params digest: out of memory");
    int rv = fox_engine_member_params(e, member, p, n);
    if (rv == FOX_OK)
        *out = fox_fnv1a(FOX_FNV_OFFSET, p, n * sizeof *p);
    free(p);
    return rv;
}

void
fox_engine_set_eval_hook(fox_engine *e, fox_eval_bar_fn fn, void *arg)
{
    e->bar_hook = fn;
    e->bar_arg = arg;
}
