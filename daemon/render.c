/*
 * render.c — typed results, events and reports as the protocol's JSON. See
 * render.h; the key order of every object below is what clients see.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/render.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "proto/proto.h"

#ifndef FOX_VERSION
#define FOX_VERSION "0.0.0"
#endif

/* ------------------------------------------------------------ the engine's reports */

void
fox_render_num(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

cJSON *
fox_render_mask(int mask)
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; a && k < 31; k++)
        if (mask & (1 << k))
            cJSON_AddItemToArray(a, cJSON_CreateNumber(k));
    return a;
}

cJSON *
fox_render_slots(uint64_t mask)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < FOX_SENTINEL_SLOTS; i++)
        if (mask >> i & 1)
            cJSON_AddItemToArray(a, cJSON_CreateString(fox_sentinel_name(i)));
    return a;
}

/* The kind of a halt as the events and fold objects name it. */
static const char *
halt_kind(int reason)
{
    return reason == FOX_HALT_NAN             ? "halt_nan"
           : reason == FOX_HALT_GRAD_COLLAPSE ? "halt_grad_collapse"
                                              : "error";
}

cJSON *
fox_render_eval(const fox_eval_result *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    fox_render_num(o, "sharpe", r->sharpe);
    fox_render_num(o, "sharpe_gross", r->sharpe_gross);
    fox_render_num(o, "max_drawdown", r->max_drawdown);
    fox_render_num(o, "turnover", r->turnover);
    fox_render_num(o, "total_return", r->total_return);
    fox_render_num(o, "bars_per_year", r->bars_per_year);
    cJSON_AddNumberToObject(o, "bars", r->bars);
    fox_render_num(o, "sharpe_se", r->sharpe_se);
    return o;
}

/*
 * The greedy decision's no-trade band as "band": its multiple of a change's
 * cost, or "flat" where the policy stays out (FOX_BAND_FLAT).
 */
void
fox_render_band(cJSON *o, float band)
{
    if (band >= FOX_BAND_FLAT)
        cJSON_AddStringToObject(o, "band", "flat");
    else
        fox_render_num(o, "band", band);
}

/* The fold object's names of the baselines, indexed by fox_policy (the policy itself has none). */
static const char *const baseline_names[FOX_POLICY_COUNT] = {
    [FOX_POLICY_BUY_HOLD] = "buy_hold", [FOX_POLICY_FLAT] = "flat",
    [FOX_POLICY_RANDOM] = "random",     [FOX_POLICY_TREND] = "trend",
    [FOX_POLICY_ORACLE] = "oracle",     [FOX_POLICY_RULE] = "rule",
};
const char *
fox_render_baseline_name(fox_policy p)
{
    return (int)p >= 0 && p < FOX_POLICY_COUNT ? baseline_names[p] : NULL;
}

/* A member's halt as its "halt" names it: null while it trains. */
static void
member_halt(cJSON *o, int reason)
{
    if (reason == FOX_HALT_NONE)
        cJSON_AddNullToObject(o, "halt");
    else
        cJSON_AddStringToObject(o, "halt", reason == FOX_HALT_NAN ? "nan" : "grad_collapse");
}

/*
 * A population's members (engine.members > 1): their spread over seeds and
 * each member's own walk, with its values of the member keys the members
 * hold apart ("train.lr": 0.001; none where they hold none apart). Epochs count as best_epoch does (from 0, -1: none
 * chosen yet); best and worst are null while no member has chosen one.
 */
static cJSON *
members_json(const fox_fold_report *r)
{
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return NULL;
    cJSON_AddNumberToObject(m, "n", r->n_members);
    cJSON_AddNumberToObject(m, "lead", r->lead);
    cJSON_AddNumberToObject(m, "training", r->members_training);
    cJSON_AddNumberToObject(m, "measured", r->members_n);
    fox_render_num(m, "mean", r->members_n > 0 ? r->members_mean : NAN);
    fox_render_num(m, "se", r->members_n > 0 ? r->members_se : NAN);
    fox_render_num(m, "best", r->members_best >= 0 ? r->members_best : NAN);
    fox_render_num(m, "worst", r->members_worst >= 0 ? r->members_worst : NAN);
    cJSON *each = cJSON_AddArrayToObject(m, "each");
    for (int k = 0; each && k < r->n_members; k++) {
        const fox_member_report *x = &r->members[k];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "member", k);
        cJSON_AddNumberToObject(e, "seed", (double)x->seed);
        cJSON_AddNumberToObject(e, "epoch", x->best_epoch);
        fox_render_num(e, "val_sharpe", x->best_val_sharpe);
        fox_render_num(e, "test_sharpe", x->test_at_best.sharpe);
        fox_render_num(e, "test_sharpe_se", x->test_at_best.sharpe_se);
        fox_render_num(e, "turnover", x->test_at_best.turnover);
        fox_render_band(e, x->band);
        /*
         * The member keys the members hold apart, by their dotted names
         * beside the rest (a level deeper would pass the wire's nesting
         * limit): which member learnt with which values.
         */
        for (int i = 0; i < FOX_MEMBER_KEYS; i++)
            if (r->member_keys & (1u << i))
                cJSON_AddNumberToObject(e, fox_member_key(i), x->values[i]);
        member_halt(e, x->halt_reason);
        if (x->halt_reason == FOX_HALT_NONE)
            cJSON_AddNullToObject(e, "halt_step");
        else
            cJSON_AddNumberToObject(e, "halt_step", (double)x->halt_step);
        if (x->halt_slot >= 0)
            cJSON_AddStringToObject(e, "halt_slot", fox_sentinel_name(x->halt_slot));
        else
            cJSON_AddNullToObject(e, "halt_slot");
        cJSON_AddItemToArray(each, e);
    }
    return m;
}

static const char *const select_names[] = {
    [FOX_SELECT_SMOOTHED] = "smoothed", [FOX_SELECT_BEST] = "best", [FOX_SELECT_LAST] = "last"};

cJSON *
fox_render_fold(const fox_fold_report *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "fold", r->fold);
    cJSON_AddNumberToObject(o, "epochs", r->epochs_done);
    cJSON_AddNumberToObject(o, "best_epoch", r->best_epoch);
    fox_render_num(o, "best_val_sharpe", r->best_val_sharpe);
    fox_render_num(o, "test_sharpe", r->test_at_best.sharpe);
    fox_render_num(o, "test_sharpe_gross", r->test_at_best.sharpe_gross);
    fox_render_num(o, "test_max_drawdown", r->test_at_best.max_drawdown);
    fox_render_num(o, "test_turnover", r->test_at_best.turnover);
    fox_render_num(o, "final_loss", r->final_loss);
    fox_render_num(o, "steps_per_sec", r->steps_per_sec);
    fox_render_num(o, "bars_per_year", r->bars_per_year);
    cJSON_AddItemToObject(o, "flagged", fox_render_slots(r->flagged));
    fox_render_num(o, "test_sharpe_se", r->test_at_best.sharpe_se);
    cJSON_AddNumberToObject(o, "test_bars", r->test_at_best.bars);
    cJSON_AddStringToObject(o, "select",
                            r->select_rule >= 0 && r->select_rule <= FOX_SELECT_LAST
                                ? select_names[r->select_rule]
                                : "?");
    cJSON_AddNumberToObject(o, "select_window", r->select_window);
    fox_render_num(o, "select_score", r->select_score);
    fox_render_num(o, "test_sharpe_last", r->test_at_last.sharpe);
    fox_render_num(o, "test_sharpe_mean", r->test_sharpe_mean);
    cJSON_AddNumberToObject(o, "trend_k", r->trend_k);
    cJSON_AddNumberToObject(o, "trend_k_tried", r->trend_k_tried);
    fox_render_band(o, r->band);
    if (r->has_rule)
        cJSON_AddStringToObject(o, "rule", r->rule_name);
    else
        cJSON_AddNullToObject(o, "rule");
    cJSON *b = cJSON_AddObjectToObject(o, "baselines");
    for (int p = 0; b && p < FOX_POLICY_COUNT; p++) {
        if (!baseline_names[p])
            continue;
        if ((p == FOX_POLICY_ORACLE && !r->has_oracle) || (p == FOX_POLICY_RULE && !r->has_rule)) {
            cJSON_AddNullToObject(b, baseline_names[p]);
            continue;
        }
        cJSON *eval = fox_render_eval(&r->test_policy[p]);
        /* The policy against this baseline on the same bars (fox_paired); absent if unmeasured. */
        if (eval && r->vs[p].bars > 0) {
            fox_render_num(eval, "policy_diff", r->vs[p].diff);
            fox_render_num(eval, "policy_diff_se", r->vs[p].se);
        }
        cJSON_AddItemToObject(b, baseline_names[p], eval);
    }
    fox_render_num(o, "oracle_fraction", r->oracle_fraction);
    fox_render_num(o, "wall_s", r->wall_secs);
    fox_render_num(o, "train_s", r->train_secs);
    fox_render_num(o, "eval_s", r->eval_secs);
    cJSON_AddNumberToObject(o, "eval_bars", (double)r->eval_bars);
    cJSON_AddNumberToObject(o, "eval_passes", (double)r->eval_passes);
    if (r->halt_reason != FOX_HALT_NONE) {
        /* The stability system stopped the fold; its figures are those of the epochs it closed. */
        cJSON *h = cJSON_AddObjectToObject(o, "halted");
        cJSON_AddStringToObject(h, "kind", halt_kind(r->halt_reason));
        cJSON_AddNumberToObject(h, "step", (double)r->halt_step);
        cJSON_AddItemToObject(h, "slots", fox_render_slots(r->halt_slots));
    }
    /* One member's fold is the fold itself: its object stays as it always was. */
    if (r->n_members > 1)
        cJSON_AddItemToObject(o, "members", members_json(r));
    return o;
}

cJSON *
fox_render_times(const fox_engine_times *t, double writing)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    fox_render_num(o, "startup_s", t->startup);
    fox_render_num(o, "fold_setup_s", t->fold_setup);
    fox_render_num(o, "train_s", t->train);
    fox_render_num(o, "eval_s", t->eval);
    fox_render_num(o, "writing_s", t->checkpoint + writing);
    cJSON_AddNumberToObject(o, "eval_bars", (double)t->eval_bars);
    cJSON_AddNumberToObject(o, "eval_passes", (double)t->eval_passes);
    return o;
}

cJSON *
fox_render_epoch(const fox_epoch_report *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "fold", r->fold);
    cJSON_AddNumberToObject(o, "epoch", r->epoch);
    cJSON_AddNumberToObject(o, "step", (double)r->last.step);
    fox_render_num(o, "loss", r->last.loss);
    fox_render_num(o, "mean_loss", r->mean_loss);
    fox_render_num(o, "loss_c51", r->last.loss_c51);
    fox_render_num(o, "loss_iqn", r->last.loss_iqn);
    fox_render_num(o, "loss_aux", r->last.loss_aux);
    fox_render_num(o, "grad_norm", r->last.grad_norm);
    fox_render_num(o, "epsilon", r->last.epsilon);
    fox_render_num(o, "steps_per_sec", r->steps_per_sec);
    cJSON_AddItemToObject(o, "val", fox_render_eval(&r->val));
    cJSON_AddItemToObject(o, "test", fox_render_eval(&r->test));
    fox_render_band(o, r->band);
    if (r->n_members > 1) {
        cJSON *a = cJSON_AddArrayToObject(o, "members");
        for (int k = 0; a && k < r->n_members; k++) {
            const fox_member_epoch *x = &r->members[k];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "member", k);
            cJSON_AddBoolToObject(e, "training", x->training);
            fox_render_num(e, "val_sharpe", x->val_sharpe);
            fox_render_num(e, "test_sharpe", x->test_sharpe);
            fox_render_num(e, "turnover", x->test_turnover);
            fox_render_band(e, x->band);
            cJSON_AddItemToArray(a, e);
        }
    }
    return o;
}

/* ------------------------------------------------------------ read commands */

cJSON *
fox_render_version(const fox_snapshot *s, const fox_dconf *d)
{
    char fp[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", FOX_VERSION);
    cJSON_AddNumberToObject(o, "protocol", FOX_PROTO_VERSION);
    cJSON_AddStringToObject(o, "backend", s->info.backend ? s->info.backend : "?");
    snprintf(fp, sizeof fp, "%016" PRIx64, s->info.fingerprint);
    cJSON_AddStringToObject(o, "fingerprint", fp);
    cJSON_AddStringToObject(o, "events", d->pub);
    return o;
}

cJSON *
fox_render_status(const fox_snapshot *s, int queued, const fox_counters *n, int64_t now)
{
    char fp[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "state", fox_tstate_name(s->state));
    cJSON_AddBoolToObject(o, "healthy", fox_trainer_healthy(s, now, 0));
    cJSON_AddNumberToObject(o, "as_of_step", (double)s->total_steps);
    cJSON_AddNumberToObject(o, "age_ms", (double)(now - s->as_of_ms));
    cJSON_AddNumberToObject(o, "heartbeat_age_ms", (double)(now - s->beat_ms));
    if (s->phase[0])
        cJSON_AddStringToObject(o, "phase", s->phase);
    cJSON_AddNumberToObject(o, "fold", s->fold);
    cJSON_AddNumberToObject(o, "epoch", s->epoch);
    cJSON_AddNumberToObject(o, "step", (double)s->step);
    cJSON_AddNumberToObject(o, "total_steps", (double)s->total_steps);
    fox_render_num(o, "loss", s->loss);
    fox_render_num(o, "epsilon", s->epsilon);
    fox_render_num(o, "steps_per_sec", s->steps_per_sec);
    cJSON *run = cJSON_AddObjectToObject(o, "run");
    cJSON_AddNumberToObject(run, "op_id", (double)s->op_id);
    cJSON_AddItemToObject(run, "folds", fox_render_mask(s->run_mask));
    cJSON_AddItemToObject(run, "folds_left", fox_render_mask(s->folds_left));
    cJSON_AddNumberToObject(run, "epochs", s->epochs);
    cJSON_AddNumberToObject(run, "steps_per_epoch", s->steps_per_epoch);
    cJSON *done = cJSON_AddArrayToObject(run, "folds_done");
    for (int i = 0; i < s->n_done; i++)
        cJSON_AddItemToArray(done, fox_render_fold(&s->done[i]));
    if (s->state == FOX_TSTATE_HALTED)
        cJSON_AddStringToObject(o, "halt_reason", s->halt_reason);
    cJSON *ops = cJSON_AddArrayToObject(o, "ops");
    for (int i = 0; i < s->n_ops; i++) {
        cJSON *op = cJSON_CreateObject();
        cJSON_AddNumberToObject(op, "op_id", (double)s->ops[i].op_id);
        cJSON_AddStringToObject(op, "cmd", fox_cmd_name(s->ops[i].cmd));
        cJSON_AddStringToObject(op, "state",
                                !s->ops[i].done                 ? "running"
                                : s->ops[i].status == FOX_OK    ? "done"
                                : s->ops[i].status == FOX_EHALT ? "halted"
                                                                : "failed");
        if (s->ops[i].done && s->ops[i].status != FOX_OK) {
            cJSON_AddStringToObject(op, "code", fox_proto_code_name(s->ops[i].status));
            cJSON_AddStringToObject(op, "message", s->ops[i].message);
        }
        cJSON_AddItemToArray(ops, op);
    }
    cJSON *eng = cJSON_AddObjectToObject(o, "engine");
    cJSON_AddStringToObject(eng, "backend", s->info.backend ? s->info.backend : "?");
    cJSON_AddNumberToObject(eng, "n_params", (double)s->info.n_params);
    cJSON_AddNumberToObject(eng, "n_envs", s->info.n_envs);
    cJSON_AddNumberToObject(eng, "batch", s->info.batch);
    cJSON_AddNumberToObject(eng, "n_bars", s->info.n_bars);
    fox_render_num(eng, "bars_per_year", s->info.bars_per_year);
    if (s->info.bars_per_year_from)
        cJSON_AddStringToObject(eng, "bars_per_year_from", s->info.bars_per_year_from);
    snprintf(fp, sizeof fp, "%016" PRIx64, s->info.fingerprint);
    cJSON_AddStringToObject(eng, "fingerprint", fp);
    cJSON_AddNumberToObject(eng, "members", s->info.n_members);
    cJSON_AddNumberToObject(eng, "members_training", s->info.members_training);
    cJSON_AddItemToObject(eng, "times", fox_render_times(&s->info.times, 0.0));
    cJSON_AddNumberToObject(o, "queue", queued);
    cJSON_AddNumberToObject(o, "uptime_s", (double)(now - n->start_ms) / 1000.0);
    return o;
}

cJSON *
fox_render_metrics(const fox_snapshot *s, const fox_counters *n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *c = cJSON_AddObjectToObject(o, "counters");
    cJSON_AddNumberToObject(c, "total_steps", (double)s->total_steps);
    cJSON_AddNumberToObject(c, "epochs", (double)s->epochs_total);
    cJSON_AddNumberToObject(c, "folds", (double)s->folds_total);
    cJSON_AddNumberToObject(c, "halts", (double)s->halts_total);
    cJSON_AddNumberToObject(c, "checkpoints", (double)s->checkpoints_total);
    cJSON_AddNumberToObject(c, "requests", (double)n->requests);
    cJSON_AddNumberToObject(c, "request_errors", (double)n->errors);
    cJSON_AddNumberToObject(c, "dedup_hits", (double)n->dedup_hits);
    cJSON_AddNumberToObject(c, "busy", (double)n->busy);
    cJSON_AddNumberToObject(c, "events", (double)n->events);
    fox_render_num(o, "steps_per_sec", s->steps_per_sec);
    fox_render_num(o, "loss", s->loss);
    cJSON *e = cJSON_AddArrayToObject(o, "epochs");
    for (int i = 0; i < s->n_recent; i++)
        cJSON_AddItemToArray(e, fox_render_epoch(&s->recent[i]));
    cJSON *f = cJSON_AddArrayToObject(o, "folds");
    for (int i = 0; i < s->n_done; i++)
        cJSON_AddItemToArray(f, fox_render_fold(&s->done[i]));
    return o;
}

cJSON *
fox_render_isv_read(const fox_snapshot *s, const int *idx, int n, const float *isv)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "as_of_step", (double)s->total_steps);
    cJSON *a = cJSON_AddArrayToObject(o, "slots");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", idx[i]);
        cJSON_AddStringToObject(e, "name", fox_isv_name(idx[i]));
        fox_render_num(e, "value", isv[idx[i]]);
        cJSON_AddItemToArray(a, e);
    }
    return o;
}

cJSON *
fox_render_isv_list(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "total", FOX_ISV_TOTAL_DIM);
    cJSON *a = cJSON_AddArrayToObject(o, "slots");
    for (int k = 0; k < fox_isv_named_count(); k++) {
        const fox_isv_slot_info *si = fox_isv_named(k);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", si->index);
        cJSON_AddStringToObject(e, "name", si->name);
        cJSON_AddStringToObject(e, "reset", fox_isv_rule_name(si->rule));
        if (si->rule == FOX_ISV_VALUE)
            cJSON_AddNumberToObject(e, "reset_value", si->value);
        cJSON_AddStringToObject(e, "doc", si->doc);
        cJSON_AddItemToArray(a, e);
    }
    return o;
}

/* Does slot i, once set, halt the fold under halt_rule (fox_halt_decide)? */
static int
slot_halts(int i, int halt_rule)
{
    return halt_rule == FOX_HALT_RULE_STRICT && fox_sentinel_is_halt(i);
}

cJSON *
fox_render_nan_flags(const int *flags, int halt_rule)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *fired = cJSON_AddArrayToObject(o, "fired");
    cJSON *all = cJSON_AddArrayToObject(o, "flags");
    int count = 0;
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        cJSON_AddItemToArray(all, cJSON_CreateNumber(flags[i]));
        if (!flags[i])
            continue;
        count++;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "slot", i);
        cJSON_AddStringToObject(e, "name", fox_sentinel_name(i));
        cJSON_AddStringToObject(e, "buffer", fox_sentinel_buffer(i));
        cJSON_AddBoolToObject(e, "halts", slot_halts(i, halt_rule));
        cJSON_AddItemToArray(fired, e);
    }
    cJSON_AddNumberToObject(o, "count", count);
    return o;
}

cJSON *
fox_render_sentinel_list(int halt_rule)
{
    char rule[256];
    cJSON *o = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(o, "slots");
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "slot", i);
        cJSON_AddStringToObject(e, "name", fox_sentinel_name(i));
        cJSON_AddStringToObject(e, "buffer", fox_sentinel_buffer(i));
        cJSON_AddStringToObject(e, "kind", fox_sentinel_kind_name(fox_sentinel_kind(i)));
        if (fox_sentinel_rule_text(i, rule, sizeof rule) == 0)
            cJSON_AddStringToObject(e, "rule", rule);
        cJSON_AddBoolToObject(e, "halts", slot_halts(i, halt_rule));
        cJSON_AddStringToObject(e, "doc", fox_sentinel_doc(i));
        cJSON_AddItemToArray(a, e);
    }
    return o;
}

cJSON *
fox_render_config(const fox_config *cfg, const int *idx, int n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *v = cJSON_AddObjectToObject(o, "values");
    if (n == 0)
        for (int i = 0; i < fox_config_key_count(); i++)
            cJSON_AddItemToObject(v, fox_config_key_name(i), fox_conf_key_json(cfg, i));
    for (int k = 0; k < n; k++)
        cJSON_AddItemToObject(v, fox_config_key_name(idx[k]), fox_conf_key_json(cfg, idx[k]));
    return o;
}

/* ------------------------------------------------------------ the trainer */

cJSON *
fox_render_result(const fox_tcmd *c)
{
    const fox_tresult *r = &c->result;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    switch (c->cmd) {
    case FOX_CMD_CONFIG_SET: {
        /* A config_set succeeds whole or not at all: every key it names was applied. */
        cJSON *applied = cJSON_AddArrayToObject(o, "applied");
        for (const cJSON *it = c->values ? c->values->child : NULL; it; it = it->next)
            cJSON_AddItemToArray(applied, cJSON_CreateString(it->string));
        cJSON_AddBoolToObject(o, "engine_recreated", r->engine_recreated);
        break;
    }
    case FOX_CMD_RUN:
    case FOX_CMD_START_FOLD:
        cJSON_AddBoolToObject(o, "accepted", 1);
        cJSON_AddNumberToObject(o, "op_id", (double)c->op_id);
        cJSON_AddItemToObject(o, "folds", fox_render_mask(r->folds_mask));
        cJSON_AddNumberToObject(o, "epochs", r->epochs);
        cJSON_AddNumberToObject(o, "steps_per_epoch", r->steps_per_epoch);
        cJSON_AddStringToObject(o, "run_dir", r->run_dir);
        break;
    case FOX_CMD_NAN_FLAGS:
        cJSON_AddItemToObject(o, "cleared", fox_render_slots(r->cleared));
        break;
    case FOX_CMD_CHECKPOINT_SAVE:
        /* Answered before the save runs: no state, the op_done event completes it. */
        cJSON_AddBoolToObject(o, "accepted", 1);
        cJSON_AddNumberToObject(o, "op_id", (double)c->op_id);
        cJSON_AddStringToObject(o, "path", c->path);
        cJSON_AddStringToObject(o, "params_digest", r->params_digest);
        return o;
    case FOX_CMD_CHECKPOINT_LOAD:
        cJSON_AddStringToObject(o, "path", c->path);
        cJSON_AddStringToObject(o, "params_digest", r->params_digest);
        break;
    case FOX_CMD_INJECT_FAULT:
        cJSON_AddBoolToObject(o, "armed", 1);
        cJSON_AddStringToObject(o, "buffer", c->fault_buffer);
        cJSON_AddStringToObject(o, "kind", c->fault_kind);
        cJSON_AddNumberToObject(o, "step", c->fault_step);
        cJSON_AddBoolToObject(o, "next_fold", r->fault_next_fold);
        if (c->fault_member >= 0)
            cJSON_AddNumberToObject(o, "member", c->fault_member);
        break;
    case FOX_CMD_BACKTEST:
        /* The record's result as it is: bars, the fold row, policy, baselines, run_dir. */
        for (const cJSON *it = c->backtest ? c->backtest->child : NULL; it; it = it->next)
            cJSON_AddItemToObject(o, it->string, cJSON_Duplicate(it, 1));
        break;
    case FOX_CMD_SHUTDOWN:
        if (r->checkpoint_saved) {
            cJSON_AddStringToObject(o, "checkpoint", c->path);
        } else {
            cJSON_AddNullToObject(o, "checkpoint");
            if (r->checkpoint_failed)
                cJSON_AddStringToObject(o, "checkpoint_error", r->checkpoint_error);
            if (r->checkpoint_kept)
                cJSON_AddStringToObject(o, "checkpoint_kept", c->path);
        }
        break;
    default:
        break;
    }
    cJSON_AddStringToObject(o, "state", fox_tstate_name(r->state));
    return o;
}

static const char *const event_names[FOX_TEVENT_COUNT] = {
    "state", "op_done", "fold_begin", "step", "epoch_end", "fold_end", "halt"};

const char *
fox_render_event_name(const fox_tevent *ev)
{
    return ev->type >= 0 && ev->type < FOX_TEVENT_COUNT ? event_names[ev->type] : "?";
}

static cJSON *
op_done_json(const fox_tevent *ev)
{
    const int status = ev->u.op_done.status;
    const char *msg = ev->u.op_done.message;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "op_id", (double)ev->u.op_done.op_id);
    cJSON_AddStringToObject(d, "cmd", fox_cmd_name(ev->u.op_done.cmd));
    cJSON_AddBoolToObject(d, "ok", status == FOX_OK);
    if (status == FOX_EHALT)
        cJSON_AddBoolToObject(d, "halted", 1);
    if (status != FOX_OK) {
        cJSON *e = cJSON_AddObjectToObject(d, "error");
        cJSON_AddStringToObject(e, "code", fox_proto_code_name(status));
        cJSON_AddStringToObject(e, "message", msg && msg[0] ? msg : fox_strerror(status));
    }
    cJSON *r = cJSON_AddObjectToObject(d, "result");
    if (ev->u.op_done.cmd == FOX_CMD_CHECKPOINT_SAVE) {
        cJSON_AddStringToObject(r, "path", ev->u.op_done.path);
    } else {
        cJSON *folds = cJSON_AddArrayToObject(r, "folds");
        for (int i = 0; i < ev->u.op_done.n_folds; i++)
            cJSON_AddItemToArray(folds, fox_render_fold(&ev->u.op_done.folds[i]));
        if (ev->u.op_done.run_dir)
            cJSON_AddStringToObject(r, "run_dir", ev->u.op_done.run_dir);
    }
    return d;
}

static cJSON *
halt_json(const fox_tevent *ev)
{
    const fox_halt_info *hi = ev->u.halt.info;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "fold", ev->u.halt.fold);
    cJSON_AddNumberToObject(d, "epoch", ev->u.halt.epoch);
    cJSON_AddStringToObject(d, "code", fox_err_name(ev->u.halt.status));
    cJSON_AddStringToObject(d, "kind", halt_kind(hi->reason));
    cJSON_AddStringToObject(d, "reason", ev->u.halt.reason);
    if (hi->reason != FOX_HALT_NONE)
        cJSON_AddNumberToObject(d, "step", (double)hi->step);
    cJSON *slots = cJSON_AddArrayToObject(d, "slots");
    for (int i = 0; i < hi->n_slots; i++) {
        cJSON *sl = cJSON_CreateObject();
        cJSON_AddNumberToObject(sl, "slot", hi->slots[i]);
        cJSON_AddStringToObject(sl, "name", hi->names[i] ? hi->names[i] : "?");
        cJSON_AddItemToArray(slots, sl);
    }
    return d;
}

cJSON *
fox_render_event(const fox_tevent *ev)
{
    cJSON *d = NULL;
    switch (ev->type) {
    case FOX_TEVENT_STATE:
        d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "state", fox_tstate_name(ev->u.state.state));
        cJSON_AddStringToObject(d, "prev", fox_tstate_name(ev->u.state.prev));
        cJSON_AddNumberToObject(d, "fold", ev->u.state.fold);
        break;
    case FOX_TEVENT_OP_DONE:
        d = op_done_json(ev);
        break;
    case FOX_TEVENT_FOLD_BEGIN:
        d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "fold", ev->u.fold_begin.fold);
        cJSON_AddNumberToObject(d, "epochs", ev->u.fold_begin.epochs);
        cJSON_AddNumberToObject(d, "steps_per_epoch", ev->u.fold_begin.steps_per_epoch);
        break;
    case FOX_TEVENT_STEP:
        d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "fold", ev->u.step.fold);
        cJSON_AddNumberToObject(d, "epoch", ev->u.step.epoch);
        cJSON_AddNumberToObject(d, "epochs", ev->u.step.epochs);
        cJSON_AddNumberToObject(d, "step_in_epoch", ev->u.step.step_in_epoch);
        cJSON_AddNumberToObject(d, "steps_per_epoch", ev->u.step.steps_per_epoch);
        cJSON_AddNumberToObject(d, "step", (double)ev->u.step.step);
        /* A loss that is not finite is left out of a step event, not sent as null. */
        if (isfinite(ev->u.step.loss))
            cJSON_AddNumberToObject(d, "loss", ev->u.step.loss);
        cJSON_AddNumberToObject(d, "steps_per_sec", ev->u.step.steps_per_sec);
        break;
    case FOX_TEVENT_EPOCH_END:
        d = fox_render_epoch(ev->u.epoch_end.report);
        cJSON_AddNumberToObject(d, "epochs", ev->u.epoch_end.epochs);
        break;
    case FOX_TEVENT_FOLD_END:
        d = fox_render_fold(ev->u.fold_end.report);
        break;
    case FOX_TEVENT_HALT:
        d = halt_json(ev);
        break;
    default:
        break;
    }
    return d;
}

char *
fox_render_metrics_line(const fox_tevent *ev, int64_t op_id, int64_t time_ms)
{
    cJSON *o;
    const char *type;
    if (ev->type == FOX_TEVENT_EPOCH_END) {
        o = fox_render_epoch(ev->u.epoch_end.report);
        type = "epoch";
    } else if (ev->type == FOX_TEVENT_FOLD_END) {
        o = fox_render_fold(ev->u.fold_end.report);
        type = "fold";
    } else {
        return NULL;
    }
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "op_id", (double)op_id);
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "time_ms", (double)time_ms);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
