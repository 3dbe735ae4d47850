/*
 * print.c — foxctl's printers of replies and events. See print.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/print.h"
#include "common/clock.h"
#include "proto/table.h"

double
foxctl_jnum(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *
foxctl_jstr(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

void
foxctl_print_json(const cJSON *v)
{
    char *s = cJSON_PrintUnformatted(v);
    if (s)
        puts(s);
    free(s);
}

/*
 * A reply as received: cJSON would reprint a 16-digit id rounded, so the id
 * goes back in exactly, as foxd sent it.
 */
void
foxctl_print_reply(const fox_reply *rep)
{
    char id[24];
    if (rep->has_id) {
        snprintf(id, sizeof id, "%lld", (long long)rep->id);
        cJSON_ReplaceItemInObjectCaseSensitive(rep->doc, "id", cJSON_CreateRaw(id));
    }
    foxctl_print_json(rep->doc);
}

static void
list_text(char *buf, size_t len, const cJSON *arr)
{
    size_t n = 0;
    buf[0] = 0;
    for (const cJSON *it = arr ? arr->child : NULL; it && n < len; it = it->next)
        n += (size_t)snprintf(buf + n, len - n, "%s%.0f", n ? "," : "", it->valuedouble);
    if (!buf[0])
        snprintf(buf, len, "-");
}

void
foxctl_print_state(const cJSON *r)
{
    printf("%s\n", foxctl_jstr(r, "state", "?"));
}

void
foxctl_print_status(const cJSON *r)
{
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(r, "run");
    const cJSON *eng = cJSON_GetObjectItemCaseSensitive(r, "engine");
    const cJSON *healthy = cJSON_GetObjectItemCaseSensitive(r, "healthy");
    char folds[128], left[128];
    printf("state    %s%s   as of step %.0f, %.0f ms ago\n", foxctl_jstr(r, "state", "?"),
           cJSON_IsFalse(healthy) ? " (UNHEALTHY: stale heartbeat)" : "",
           foxctl_jnum(r, "as_of_step", 0), foxctl_jnum(r, "age_ms", 0));
    if (foxctl_jstr(r, "phase", NULL))
        printf("phase    %s\n", foxctl_jstr(r, "phase", ""));
    if (foxctl_jnum(r, "fold", -1) >= 0)
        printf("fold     %.0f   epoch %.0f/%.0f   step %.0f   loss %.4g   %.1f steps/s\n",
               foxctl_jnum(r, "fold", -1), foxctl_jnum(r, "epoch", 0) + 1,
               foxctl_jnum(run, "epochs", 0), foxctl_jnum(r, "step", 0),
               foxctl_jnum(r, "loss", NAN), foxctl_jnum(r, "steps_per_sec", 0));
    if (foxctl_jnum(run, "op_id", 0) > 0) {
        list_text(folds, sizeof folds, cJSON_GetObjectItemCaseSensitive(run, "folds"));
        list_text(left, sizeof left, cJSON_GetObjectItemCaseSensitive(run, "folds_left"));
        printf("run      op %.0f: folds %s (left %s), %.0f epochs x %.0f steps\n",
               foxctl_jnum(run, "op_id", 0), folds, left, foxctl_jnum(run, "epochs", 0),
               foxctl_jnum(run, "steps_per_epoch", 0));
    }
    if (foxctl_jstr(r, "halt_reason", NULL))
        printf("halted   %s\n", foxctl_jstr(r, "halt_reason", ""));
    if (foxctl_jnum(eng, "members", 1) > 1)
        printf("members  %.0f/%.0f training\n", foxctl_jnum(eng, "members_training", 0),
               foxctl_jnum(eng, "members", 0));
    printf("engine   %s, %.0f parameters, %.0f envs, batch %.0f, %.0f bars, fingerprint %s\n",
           foxctl_jstr(eng, "backend", "?"), foxctl_jnum(eng, "n_params", 0),
           foxctl_jnum(eng, "n_envs", 0), foxctl_jnum(eng, "batch", 0),
           foxctl_jnum(eng, "n_bars", 0), foxctl_jstr(eng, "fingerprint", "?"));
    if (foxctl_jnum(eng, "bars_per_year", 0) > 0)
        printf("data     P = %.0f bars a year (%s)\n", foxctl_jnum(eng, "bars_per_year", 0),
               foxctl_jstr(eng, "bars_per_year_from", "?"));
    printf("daemon   up %.0f s, %.0f queued, %.0f train steps in total\n",
           foxctl_jnum(r, "uptime_s", 0), foxctl_jnum(r, "queue", 0),
           foxctl_jnum(r, "total_steps", 0));
    const cJSON *done = cJSON_GetObjectItemCaseSensitive(run, "folds_done");
    if (cJSON_GetArraySize(done) > 0) {
        putchar('\n');
        fox_table_folds(stdout, done);
    }
}

void
foxctl_print_version(const cJSON *r)
{
    printf("foxd %s (protocol %.0f, %s backend, fingerprint %s, events at %s)\n",
           foxctl_jstr(r, "version", "?"), foxctl_jnum(r, "protocol", 0),
           foxctl_jstr(r, "backend", "?"), foxctl_jstr(r, "fingerprint", "?"),
           foxctl_jstr(r, "events", "?"));
}

/*
 * A per-member reply (isv_read, nan_flags) printed by fn: a population's
 * every member under its heading (the reply's own part is member 0's, so
 * it is not printed twice), one member's under its heading, or as before
 * populations existed.
 */
static void
by_member(const cJSON *r, void (*fn)(const cJSON *part))
{
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(r, "members");
    if (!members) {
        if (foxctl_jnum(r, "member", -1) >= 0)
            printf("member %.0f\n", foxctl_jnum(r, "member", -1));
        fn(r);
        return;
    }
    for (const cJSON *m = members->child; m; m = m->next) {
        printf("%smember %.0f\n", m == members->child ? "" : "\n", foxctl_jnum(m, "member", -1));
        fn(m);
    }
}

static void
isv_slots(const cJSON *r)
{
    const cJSON *slots = cJSON_GetObjectItemCaseSensitive(r, "slots");
    for (const cJSON *s = slots ? slots->child : NULL; s; s = s->next) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "value");
        printf("%5.0f  %-28s %s", foxctl_jnum(s, "index", -1), foxctl_jstr(s, "name", "?"),
               cJSON_IsNumber(v) ? "" : "non-finite\n");
        if (cJSON_IsNumber(v))
            printf("%.9g\n", v->valuedouble);
    }
}

void
foxctl_print_isv(const cJSON *r)
{
    printf("ISV as of step %.0f\n", foxctl_jnum(r, "as_of_step", 0));
    by_member(r, isv_slots);
}

void
foxctl_print_isv_list(const cJSON *r)
{
    const cJSON *slots = cJSON_GetObjectItemCaseSensitive(r, "slots");
    for (const cJSON *s = slots ? slots->child : NULL; s; s = s->next)
        printf("%5.0f  %-28s %-6s %s\n", foxctl_jnum(s, "index", -1), foxctl_jstr(s, "name", "?"),
               foxctl_jstr(s, "reset", "?"), foxctl_jstr(s, "doc", ""));
    printf("(%.0f slots in all; unnamed ones are reserved)\n", foxctl_jnum(r, "total", 0));
}

static void
flags_fired(const cJSON *fired)
{
    if (cJSON_GetArraySize(fired) == 0) {
        printf("no sentinel flag set\n");
        return;
    }
    for (const cJSON *f = fired->child; f; f = f->next)
        printf("slot %2.0f  %-24s buffer %-16s%s\n", foxctl_jnum(f, "slot", -1),
               foxctl_jstr(f, "name", "?"), foxctl_jstr(f, "buffer", "?"),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "halts")) ? "  (halts)" : "");
}

static void
flags_of(const cJSON *part)
{
    flags_fired(cJSON_GetObjectItemCaseSensitive(part, "fired"));
}

void
foxctl_print_flags(const cJSON *r)
{
    const cJSON *cleared = cJSON_GetObjectItemCaseSensitive(r, "cleared");
    if (cleared) {
        printf("cleared %d flag(s)", cJSON_GetArraySize(cleared));
        for (const cJSON *c = cleared->child; c; c = c->next)
            printf("%s %s", c == cleared->child ? ":" : ",", c->valuestring);
        putchar('\n');
        return;
    }
    by_member(r, flags_of);
}

void
foxctl_print_sentinels(const cJSON *r)
{
    const cJSON *slots = cJSON_GetObjectItemCaseSensitive(r, "slots");
    for (const cJSON *s = slots ? slots->child : NULL; s; s = s->next)
        printf("%3.0f  %-24s %-16s %-10s %s%s\n", foxctl_jnum(s, "slot", -1),
               foxctl_jstr(s, "name", "?"), foxctl_jstr(s, "buffer", ""),
               foxctl_jstr(s, "kind", ""), foxctl_jstr(s, "rule", ""),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "halts")) ? " (halts)" : "");
}

void
foxctl_print_config(const cJSON *r)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, "values");
    for (const cJSON *it = v ? v->child : NULL; it; it = it->next) {
        char *s = cJSON_PrintUnformatted(it);
        printf("%s = %s\n", it->string, s ? s : "?");
        free(s);
    }
    const cJSON *applied = cJSON_GetObjectItemCaseSensitive(r, "applied");
    if (applied) {
        printf("applied:");
        for (const cJSON *a = applied->child; a; a = a->next)
            printf(" %s", a->valuestring);
        printf("%s\n", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "engine_recreated"))
                           ? " (engine recreated)"
                           : "");
    }
}

static void
print_epoch_line(FILE *out, const cJSON *e, double epochs)
{
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(e, "val");
    const cJSON *test = cJSON_GetObjectItemCaseSensitive(e, "test");
    fprintf(out, "fold %.0f epoch %.0f", foxctl_jnum(e, "fold", -1),
            foxctl_jnum(e, "epoch", 0) + 1);
    if (epochs > 0)
        fprintf(out, "/%.0f", epochs);
    fprintf(out, ": loss %.4g  val Sharpe %.3f  test Sharpe %.3f  %.0f steps/s\n",
            foxctl_jnum(e, "mean_loss", NAN), foxctl_jnum(val, "sharpe", NAN),
            foxctl_jnum(test, "sharpe", NAN), foxctl_jnum(e, "steps_per_sec", 0));
}

void
foxctl_print_metrics(const cJSON *r)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "counters");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive(r, "epochs");
    const cJSON *folds = cJSON_GetObjectItemCaseSensitive(r, "folds");
    printf("steps %.0f  epochs %.0f  folds %.0f  halts %.0f  checkpoints %.0f\n",
           foxctl_jnum(c, "total_steps", 0), foxctl_jnum(c, "epochs", 0),
           foxctl_jnum(c, "folds", 0), foxctl_jnum(c, "halts", 0),
           foxctl_jnum(c, "checkpoints", 0));
    printf("requests %.0f (errors %.0f, busy %.0f, resends answered %.0f)  events %.0f\n",
           foxctl_jnum(c, "requests", 0), foxctl_jnum(c, "request_errors", 0),
           foxctl_jnum(c, "busy", 0), foxctl_jnum(c, "dedup_hits", 0), foxctl_jnum(c, "events", 0));
    for (const cJSON *e = epochs ? epochs->child : NULL; e; e = e->next)
        print_epoch_line(stdout, e, 0);
    if (cJSON_GetArraySize(folds) > 0)
        fox_table_folds(stdout, folds);
}

void
foxctl_print_loaded(const cJSON *r)
{
    printf("checkpoint loaded from %s (parameters %s)\n", foxctl_jstr(r, "path", "?"),
           foxctl_jstr(r, "params_digest", "?"));
}

void
foxctl_print_shutdown(const cJSON *r)
{
    const char *ck = foxctl_jstr(r, "checkpoint", NULL);
    const char *ckerr = foxctl_jstr(r, "checkpoint_error", NULL);
    const char *kept = foxctl_jstr(r, "checkpoint_kept", NULL);
    if (ck)
        printf("foxd is stopping; checkpoint saved to %s\n", ck);
    else if (kept)
        printf("foxd is stopping; its engine holds no training, so %s was kept as it is\n", kept);
    else if (ckerr)
        printf("foxd is stopping; the checkpoint FAILED: %s\n", ckerr);
    else
        printf("foxd is stopping (no checkpoint)\n");
}

void
foxctl_progress_clear(foxctl_progress *p)
{
    if (p->bar_shown)
        fputs("\r\033[K", stderr);
    p->bar_shown = 0;
}

/* Note a seq gap: PUB dropped events for this subscriber. */
void
foxctl_progress_gap(foxctl_progress *p, const fox_event *ev)
{
    if (p->last_seq && ev->seq > p->last_seq + 1) {
        foxctl_progress_clear(p);
        fprintf(stderr, "! missed %llu event(s) (seq %llu..%llu)\n",
                (unsigned long long)(ev->seq - p->last_seq - 1),
                (unsigned long long)p->last_seq + 1, (unsigned long long)ev->seq - 1);
    }
    p->last_seq = ev->seq;
}

/* A duration as h:mm:ss or m:ss; "?" when unknown. */
static const char *
duration(char *buf, size_t len, double seconds)
{
    if (!isfinite(seconds) || seconds < 0 || seconds > 1e9)
        return "?";
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, len, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

/*
 * The bar of a step event: where the fold is, the loss and speed, the
 * backend, and elapsed / left for the fold and for the whole walk (left is
 * elapsed scaled by the share still to do, so it includes evaluation).
 * Nothing between folds or after the last epoch, when the event's fold or
 * epoch no longer describe training.
 */
static void
show_bar(foxctl_progress *p, const cJSON *d)
{
    double spe = foxctl_jnum(d, "steps_per_epoch", 0), in = foxctl_jnum(d, "step_in_epoch", 0);
    double fold = foxctl_jnum(d, "fold", -1), epoch = foxctl_jnum(d, "epoch", 0);
    double epochs = foxctl_jnum(d, "epochs", 0);
    double frac = spe > 0 ? in / spe : 0;
    if (!p->tty || fold < 0 || epochs <= 0 || epoch >= epochs)
        return;
    int64_t now = fox_mono_ms();
    if (!p->fold_start_ms)
        p->fold_start_ms = now;
    double fold_share = (epoch + frac) / epochs;
    double fold_s = (double)(now - p->fold_start_ms) / 1000.0;
    double walk_s = (double)(now - p->walk_start_ms) / 1000.0;
    char a[48], b[48], c[48], e[48], walk[128] = "";
    if (p->n_folds > 0) {
        double walk_share = (p->folds_done + fold_share) / p->n_folds;
        snprintf(walk, sizeof walk, "  walk %s, %s left", duration(a, sizeof a, walk_s),
                 duration(b, sizeof b, walk_share > 0 ? walk_s * (1 - walk_share) / walk_share
                                                      : NAN));
    }
    int fill = (int)(frac * 30);
    fprintf(stderr,
            "\r\033[Kfold %.0f epoch %.0f/%.0f [%.*s%.*s] %3.0f%%  loss %.4g  %.0f steps/s  %s  "
            "fold %s, %s left%s",
            fold, epoch + 1, epochs, fill, "##############################", 30 - fill,
            "..............................", frac * 100, foxctl_jnum(d, "loss", NAN),
            foxctl_jnum(d, "steps_per_sec", 0), p->backend[0] ? p->backend : "?",
            duration(c, sizeof c, fold_s),
            duration(e, sizeof e, fold_share > 0 ? fold_s * (1 - fold_share) / fold_share : NAN),
            walk);
    p->bar_shown = 1;
}

/* One event, as a human reads it (progress on stderr). */
void
foxctl_show_event(foxctl_progress *p, const fox_event *ev)
{
    const cJSON *d = ev->data;
    if (!strcmp(ev->type, "step")) {
        show_bar(p, d);
        return;
    }
    foxctl_progress_clear(p);
    if (!strcmp(ev->type, "epoch_end")) {
        print_epoch_line(stderr, d, foxctl_jnum(d, "epochs", p->epochs));
    } else if (!strcmp(ev->type, "fold_begin")) {
        p->epochs = foxctl_jnum(d, "epochs", 0);
        p->fold_start_ms = fox_mono_ms();
        fprintf(stderr, "fold %.0f begins: %.0f epochs x %.0f steps\n", foxctl_jnum(d, "fold", -1),
                foxctl_jnum(d, "epochs", 0), foxctl_jnum(d, "steps_per_epoch", 0));
    } else if (!strcmp(ev->type, "fold_end")) {
        p->folds_done++;
        p->fold_start_ms = 0;
        fprintf(stderr, "fold %.0f done: ", foxctl_jnum(d, "fold", -1));
        fox_table_choice(stderr, d);
        if (foxctl_jnum(d, "epochs", 0) > 0)
            fprintf(stderr, "; test Sharpe %.3f ± %.3f (flat 0, buy & hold %.3f)",
                    foxctl_jnum(d, "test_sharpe", NAN), foxctl_jnum(d, "test_sharpe_se", NAN),
                    foxctl_jnum(cJSON_GetObjectItemCaseSensitive(
                                    cJSON_GetObjectItemCaseSensitive(d, "baselines"), "buy_hold"),
                                "sharpe", NAN));
        fputc('\n', stderr);
        fox_table_flagged(stderr, d);
    } else if (!strcmp(ev->type, "halt")) {
        fprintf(stderr, "HALT fold %.0f: %s\n", foxctl_jnum(d, "fold", -1),
                foxctl_jstr(d, "reason", "?"));
    } else if (!strcmp(ev->type, "state")) {
        fprintf(stderr, "state %s -> %s\n", foxctl_jstr(d, "prev", "?"),
                foxctl_jstr(d, "state", "?"));
    } else if (!strcmp(ev->type, "op_done")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "error");
        fprintf(stderr, "op %.0f (%s) %s%s%s\n", foxctl_jnum(d, "op_id", 0),
                foxctl_jstr(d, "cmd", "?"),
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "ok")) ? "done" : "failed",
                e ? ": " : "", e ? foxctl_jstr(e, "message", "") : "");
    } else {
        char *s = cJSON_PrintUnformatted(d);
        fprintf(stderr, "%s %s\n", ev->type, s ? s : "");
        free(s);
    }
}
