/*
 * sentinel.c — the sentinel table behind sentinel.h, its lookups, thresholds
 * and the CPU twin of the fused check kernel.
 *
 * Everything is generated from FOX_SENTINEL_MAP. The checks here only answer
 * "does this buffer fire"; the sticky flag write, the launch and the halts
 * belong to the engine and the trainer.
 */
#include "gpu/sentinel.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "gpu/isv.h"

static const fox_sentinel_slot_info table[FOX_SENTINEL_SLOTS] = {
#define X(i, E, n, b, g, k, m, base, mult, pw, site, eng, doc)                                     \
    [i] = {(i),                                                                                    \
           #n,                                                                                     \
           b,                                                                                      \
           (g),                                                                                    \
           FOX_SENT_KIND_##k,                                                                      \
           FOX_SENT_MEASURE_##m,                                                                   \
           FOX_SENT_BASE_##base,                                                                   \
           (mult),                                                                                 \
           (pw),                                                                                   \
           FOX_SENT_SITE_##site,                                                                   \
           FOX_SENT_ENGAGE_##eng,                                                                  \
           doc},
    FOX_SENTINEL_MAP(X)
#undef X
};

/* Every slot 0..49 is in the map exactly once: -Woverride-init catches a twice, this a gap. */
enum {
#define X(i, E, n, b, g, k, m, base, mult, pw, site, eng, doc) +1
    N_ENTRIES = 0 FOX_SENTINEL_MAP(X)
#undef X
};
_Static_assert(N_ENTRIES == FOX_SENTINEL_SLOTS, "one map entry per sentinel slot");
_Static_assert(FOX_SENT_H_S2_MAX_ABS == FOX_SENTINEL_SLOTS - 1, "slot 49 is the last");
_Static_assert(FOX_SENT_D_H_S2_POST_IQN + 1 == FOX_SENT_HALT_END, "halts cover 0-35");

const fox_sentinel_slot_info *
fox_sentinel_info(int i)
{
    return i >= 0 && i < FOX_SENTINEL_SLOTS ? &table[i] : NULL;
}

const char *
fox_sentinel_name(int i)
{
    return i >= 0 && i < FOX_SENTINEL_SLOTS ? table[i].name : NULL;
}

const char *
fox_sentinel_buffer(int i)
{
    return i >= 0 && i < FOX_SENTINEL_SLOTS ? table[i].buffer : NULL;
}

const char *
fox_sentinel_doc(int i)
{
    return i >= 0 && i < FOX_SENTINEL_SLOTS ? table[i].doc : NULL;
}

int
fox_sentinel_index(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        if (strcasecmp(table[i].name, name) == 0)
            return i;
    return -1;
}

int
fox_sentinel_kind(int i)
{
    return i >= 0 && i < FOX_SENTINEL_SLOTS ? table[i].kind : -1;
}

const char *
fox_sentinel_kind_name(int kind)
{
    switch (kind) {
    case FOX_SENT_KIND_NONFINITE:
        return "nonfinite";
    case FOX_SENT_KIND_THRESHOLD:
        return "threshold";
    default:
        return "?";
    }
}

int
fox_sentinel_rule_text(int i, char *buf, size_t len)
{
    const fox_sentinel_slot_info *s = fox_sentinel_info(i);
    if (!s || !buf || len == 0)
        return FOX_EINVAL;
    int n;
    if (s->site == FOX_SENT_SITE_NONE) {
        n = snprintf(buf, len, "reserved: never fires");
    } else if (s->kind == FOX_SENT_KIND_NONFINITE) {
        n = snprintf(buf, len, "any NaN/Inf");
    } else {
        const char *eff = s->base == FOX_SENT_BASE_H_S2_RMS ? "h_eff" : "q_eff";
        int slot = s->base == FOX_SENT_BASE_H_S2_RMS ? FOX_ISV_H_S2_RMS_EMA : FOX_ISV_Q_ABS_REF;
        n = snprintf(buf, len, "%s >= %g x %s%s, %s = max(ISV[%d], 1)",
                     s->measure == FOX_SENT_MEASURE_SPAN ? "max x - min x" : "max|x|",
                     (double)s->mult, eff, s->power == 2 ? "^2" : "", eff, slot);
    }
    return n >= 0 && (size_t)n < len ? FOX_OK : FOX_EINVAL;
}

int
fox_sentinel_threshold(int i, const float *isv, float *out)
{
    const fox_sentinel_slot_info *s = fox_sentinel_info(i);
    if (!s || !isv || !out || s->kind != FOX_SENT_KIND_THRESHOLD)
        return FOX_EINVAL;
    float eff = fox_isv_eff(
        isv[s->base == FOX_SENT_BASE_H_S2_RMS ? FOX_ISV_H_S2_RMS_EMA : FOX_ISV_Q_ABS_REF]);
    float t = s->mult;
    for (int p = 0; p < s->power; p++)
        t *= eff;
    *out = t;
    return FOX_OK;
}

int
fox_sentinel_is_halt(int i)
{
    return i >= 0 && i < FOX_SENT_HALT_END && table[i].site != FOX_SENT_SITE_NONE;
}

int
fox_sentinel_group_slot(int family, int group)
{
    const char *buf = family == FOX_SENT_FAMILY_WEIGHT   ? "params"
                      : family == FOX_SENT_FAMILY_ADAM_M ? "adam_m"
                      : family == FOX_SENT_FAMILY_ADAM_V ? "adam_v"
                                                         : NULL;
    if (!buf || group < 0 || group >= FOX_GROUP_COUNT)
        return -1;
    /* Only the threshold slots carry group masks; slot 14 (params, NaN/Inf) watches it all. */
    for (int i = FOX_SENT_HALT_END; i < FOX_SENTINEL_SLOTS; i++)
        if (strcasecmp(table[i].buffer, buf) == 0 && (table[i].groups & FOX_SENT_G(group)))
            return i;
    return -1;
}

int
fox_sentinel_fault_slot(const char *name)
{
    int i = fox_sentinel_index(name);
    if (i >= 0)
        return table[i].site == FOX_SENT_SITE_NONE ? -1 : i;
    if (!name || !name[0])
        return -1;
    for (i = 0; i < FOX_SENTINEL_SLOTS; i++)
        if (strcasecmp(table[i].buffer, name) == 0)
            return i;
    return -1;
}

int
fox_sentinel_halt_text(const volatile int *flags, char *buf, size_t len)
{
    int count = 0;
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    for (int i = 0; i < FOX_SENT_HALT_END; i++) {
        if (!flags[i] || !fox_sentinel_is_halt(i))
            continue;
        if (used < len) {
            int w =
                snprintf(buf + used, len - used, "%s%d %s", count ? ", " : "", i, table[i].name);
            used += w > 0 ? (size_t)w : 0;
        }
        count++;
    }
    return count;
}

void
fox_sentinel_halt_message(char *buf, size_t len, int reason, const volatile int *flags,
                          float loss, float norm)
{
    char slots[400];
    int n = fox_sentinel_halt_text(flags, slots, sizeof slots);
    if (reason == FOX_HALT_GRAD_COLLAPSE)
        snprintf(buf, len, "halt_grad_collapse: grad norm <= %g for %d train steps",
                 FOX_HALT_COLLAPSE_NORM, FOX_HALT_COLLAPSE_STEPS);
    else if (!isfinite(loss) || !isfinite(norm))
        snprintf(buf, len, "halt_nan: loss %g, grad norm %g%s%s", (double)loss, (double)norm,
                 n ? "; slots " : "", slots);
    else
        snprintf(buf, len, "halt_nan: slots %s", slots);
}

uint64_t
fox_sentinel_mask(const volatile int *flags)
{
    _Static_assert(FOX_SENTINEL_SLOTS <= 64, "a slot per bit");
    uint64_t m = 0;
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        if (flags[i])
            m |= 1ull << i;
    return m;
}

/*
 * The scans read |x| as its bits: for |x| ≥ 0 the integer order is the float
 * order, +inf is 0x7f800000 and every NaN lies above it, so "non-finite" and
 * "!(|x| < t)" for t > 0 are both "abs bits ≥ a limit". Four lanes at a time
 * (a GCC vector extension: one SSE2 register; signed lanes, as SSE2
 * compares, which |x|'s bits never need), OR-ed over blocks of 256 values
 * with the early exit between blocks, so a clean buffer, the usual case,
 * streams through without a branch per value.
 */
typedef int32_t i32x4 __attribute__((vector_size(16)));

#define ABS_BITS 0x7fffffff
#define INF_BITS 0x7f800000

static int
any_abs_bits_at_least(const float *buf, size_t n, int32_t limit)
{
    const i32x4 absm = {ABS_BITS, ABS_BITS, ABS_BITS, ABS_BITS};
    const i32x4 lim = {limit, limit, limit, limit};
    size_t i = 0;
    while (i + 4 <= n) {
        size_t stop = n - i > 256 ? i + 256 : n;
        i32x4 hit = {0, 0, 0, 0};
        for (; i + 4 <= stop; i += 4) {
            i32x4 b;
            memcpy(&b, buf + i, sizeof b);
            hit |= (b & absm) >= lim;
        }
        if (hit[0] | hit[1] | hit[2] | hit[3])
            return 1;
    }
    for (; i < n; i++) {
        int32_t b;
        memcpy(&b, buf + i, sizeof b);
        if ((b & ABS_BITS) >= limit)
            return 1;
    }
    return 0;
}

int
fox_sentinel_check_nonfinite(const float *buf, size_t n)
{
    return any_abs_bits_at_least(buf, n, INF_BITS);
}

int
fox_sentinel_check_threshold(const float *buf, size_t n, float threshold)
{
    /* !(|x| < t): NaN, which compares false with everything, fires; t ≤ 0 or NaN fires all. */
    if (!(threshold > 0.0f))
        return n > 0;
    int32_t limit;
    memcpy(&limit, &threshold, sizeof limit);
    return any_abs_bits_at_least(buf, n, limit);
}

int
fox_sentinel_check_span(const float *buf, size_t n, float threshold)
{
    if (n == 0)
        return 0;
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(buf[i]))
            return 1;
        lo = buf[i] < lo ? buf[i] : lo;
        hi = buf[i] > hi ? buf[i] : hi;
    }
    return !(hi - lo < threshold);
}

int
fox_sentinel_check(int i, const float *buf, size_t n, const float *isv, int *fired)
{
    const fox_sentinel_slot_info *s = fox_sentinel_info(i);
    if (!s || !fired || (n > 0 && !buf))
        return FOX_EINVAL;
    *fired = 0;
    if (s->site == FOX_SENT_SITE_NONE)
        return FOX_OK;
    if (s->kind == FOX_SENT_KIND_NONFINITE) {
        *fired = fox_sentinel_check_nonfinite(buf, n);
        return FOX_OK;
    }
    float t;
    int rv = fox_sentinel_threshold(i, isv, &t);
    if (rv != FOX_OK)
        return rv;
    *fired = s->measure == FOX_SENT_MEASURE_SPAN ? fox_sentinel_check_span(buf, n, t)
                                                 : fox_sentinel_check_threshold(buf, n, t);
    return FOX_OK;
}

int
fox_sentinel_param_runs(int slot, const fox_model_layout *lay, fox_param_run *runs)
{
    unsigned mask = fox_sentinel_info(slot)->groups;
    int n_runs = 0, open = 0;
    for (int i = 0; i < FOX_P_COUNT; i++) {
        size_t n = fox_tensor_size(lay, i);
        if (!n)
            continue;
        if (mask == FOX_SENT_G_ALL || (mask & FOX_SENT_G(lay->t[i].group))) {
            if (!open)
                runs[n_runs++] = (fox_param_run){lay->t[i].offset, 0};
            runs[n_runs - 1].len = lay->t[i].offset + n - runs[n_runs - 1].offset;
            open = 1;
        } else {
            open = 0;
        }
    }
    return n_runs;
}
