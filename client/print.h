/*
 * print.h — how foxctl shows foxd's replies and events to people: one
 * printer per command's result (stdout), the progress of a run (stderr:
 * one line per epoch and fold, a bar while a terminal watches), and the
 * raw JSON for --json. The per-fold table is proto/table.h, shared with
 * `foxd --once`.
 *
 * Printers read the protocol's objects defensively: a missing field prints
 * as a default ("?", "n/a"), never a crash. Not thread-safe (stdio).
 */
#ifndef FOX_CLIENT_PRINT_H
#define FOX_CLIENT_PRINT_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "proto/proto.h"

/* A number or a string field of o, or dflt when it is missing or of another type. */
double foxctl_jnum(const cJSON *o, const char *k, double dflt);
const char *foxctl_jstr(const cJSON *o, const char *k, const char *dflt);

/* v as one line of JSON on stdout. */
void foxctl_print_json(const cJSON *v);
/*
 * A reply as received: cJSON would reprint a 16-digit id rounded, so the id
 * goes back in exactly, as foxd sent it.
 */
void foxctl_print_reply(const fox_reply *rep);

/* The result of each command, as people read it, on stdout. */
void foxctl_print_state(const cJSON *r);
void foxctl_print_status(const cJSON *r);
void foxctl_print_version(const cJSON *r);
void foxctl_print_isv(const cJSON *r);
void foxctl_print_isv_list(const cJSON *r);
void foxctl_print_flags(const cJSON *r);
void foxctl_print_sentinels(const cJSON *r);
void foxctl_print_config(const cJSON *r);
void foxctl_print_metrics(const cJSON *r);
void foxctl_print_loaded(const cJSON *r);
void foxctl_print_shutdown(const cJSON *r);

/* What a stream of events has shown so far on stderr. */
typedef struct foxctl_progress {
    int tty;
    int bar_shown;
    uint64_t last_seq;
    double epochs;
    char backend[32];     /* the engine's backend, shown in the bar ("" unknown) */
    int n_folds;          /* folds in the run (0 unknown): the walk's time left */
    int folds_done;       /* folds of the run finished so far */
    int64_t walk_start_ms; /* when the wait began (monotonic) */
    int64_t fold_start_ms; /* when the fold in progress began (0 unknown) */
} foxctl_progress;

/* Erase the progress bar, if one is shown, before a line of text. */
void foxctl_progress_clear(foxctl_progress *p);
/* Note a seq gap: PUB dropped events for this subscriber. */
void foxctl_progress_gap(foxctl_progress *p, const fox_event *ev);
/* One event, as a human reads it (progress on stderr). */
void foxctl_show_event(foxctl_progress *p, const fox_event *ev);

#endif
