/*
 * render.h — the one place where foxd's typed results become the protocol's
 * JSON (internal to daemon/): the results of the read commands, from the
 * trainer's snapshot and the mapped ISV/flag memory; the results of the
 * trainer's commands (fox_tresult); the data of the trainer's events
 * (fox_tevent); the engine's reports; and the lines of metrics.jsonl.
 *
 * Key order is part of what clients see (a SUB prefix such as
 * {"event":"halt" relies on it), so every object is built here in one fixed
 * order. A number that is not finite becomes null, since JSON has no NaN.
 *
 * Every function returns a new cJSON tree the caller owns, or NULL when out
 * of memory. What it does not do: the reply and event envelopes (proto/),
 * gathering the data (answer.c, trainer.c) or printing tables (the client).
 * Reentrant.
 */
#ifndef FOX_DAEMON_RENDER_H
#define FOX_DAEMON_RENDER_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "daemon/conf.h"
#include "daemon/trainer_types.h"
#include "gpu/engine.h"

/* Server-side counters shown by status and metrics. */
typedef struct fox_counters {
    int64_t start_ms; /* monotonic */
    int64_t requests, errors, events, dedup_hits, busy;
} fox_counters;

/* ------------------------------------------------------------ the engine's reports */

/* Add key: v to obj, or key: null when v is not finite. */
void fox_render_num(cJSON *obj, const char *key, double v);
/* A fold mask as the protocol's array of fold numbers. */
cJSON *fox_render_mask(int mask);
/* A sentinel slot mask (bit i: slot i) as the protocol's array of slot names. */
cJSON *fox_render_slots(uint64_t mask);
cJSON *fox_render_eval(const fox_eval_result *r);
/* The no-trade band into o as "band": a multiple of the cost, or "flat" (staying out). */
void fox_render_band(cJSON *o, float band);
cJSON *fox_render_fold(const fox_fold_report *r);
/*
 * The engine's wall seconds by kind of work since its creation, {"startup_s",
 * "fold_setup_s", "train_s", "eval_s", "writing_s", "eval_bars", "eval_passes"}:
 * writing_s is the checkpoint files' time plus the caller's own writing.
 */
cJSON *fox_render_times(const fox_engine_times *t, double writing);
/* A baseline's name in the fold object's "baselines" ("buy_hold", ...); NULL for the policy. */
const char *fox_render_baseline_name(fox_policy p);
cJSON *fox_render_epoch(const fox_epoch_report *r);

/* ------------------------------------------------------------ read commands */

cJSON *fox_render_version(const fox_snapshot *s, const fox_dconf *d);
/* now_ms: monotonic; queued: commands waiting for the trainer. */
cJSON *fox_render_status(const fox_snapshot *s, int queued, const fox_counters *n, int64_t now_ms);
cJSON *fox_render_metrics(const fox_snapshot *s, const fox_counters *n);
/* The n slots idx[] of isv, as of the snapshot's step. */
cJSON *fox_render_isv_read(const fox_snapshot *s, const int *idx, int n, const float *isv);
cJSON *fox_render_isv_list(void);
/*
 * flags: FOX_SENTINEL_SLOTS values as read from the engine. Each slot's
 * `halts` says whether it halts the fold under halt_rule (FOX_HALT_RULE_*,
 * the engine's engine.halt_rule): only under strict does any.
 */
cJSON *fox_render_nan_flags(const int *flags, int halt_rule);
cJSON *fox_render_sentinel_list(int halt_rule);
/* The config keys idx[] (every key when n is 0) of cfg, under "values". */
cJSON *fox_render_config(const fox_config *cfg, const int *idx, int n);

/* ------------------------------------------------------------ the trainer */

/* The result of a trainer command that succeeded (c->status == FOX_OK). */
cJSON *fox_render_result(const fox_tcmd *c);

/* An event's wire name ("op_done") and its data. */
const char *fox_render_event_name(const fox_tevent *ev);
cJSON *fox_render_event(const fox_tevent *ev);

/*
 * The line metrics.jsonl keeps for an epoch_end or fold_end event: the
 * report, the op it belongs to, its type and the wall time (malloc'd text;
 * NULL for other events or when out of memory).
 */
char *fox_render_metrics_line(const fox_tevent *ev, int64_t op_id, int64_t time_ms);

#endif
