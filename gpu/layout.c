/*
 * layout.c — the layout fingerprint behind layout.h: FNV-1a over both slot
 * tables, the model layout hash and the format version, spread by one
 * splitmix64 round and shaped so that each half is a normal float.
 *
 * It reads the tables through their public lookups and stores nothing; the
 * two ISV slots that hold the result are isv.c's.
 */
#include "gpu/layout.h"

#include "common/hash.h"
#include "gpu/rng.h"
#include "gpu/sentinel.h"

/*
 * Shape a 32-bit half into a normal finite float pattern: clear bit 30 (the
 * exponent field stays ≤ 127, so no Inf/NaN and |v| < 2) and set bit 29 (the
 * exponent field stays ≥ 64, so no zero or denormal). Two bits lost per half.
 */
static uint32_t
float_safe(uint32_t h)
{
    return (h & ~0x40000000u) | 0x20000000u;
}

uint64_t
fox__layout_fingerprint_of(const fox_isv_slot_info *isv_named, int n_isv_named, int isv_dim,
                           const char *const *sentinel_names, int n_sentinel,
                           uint64_t model_layout_hash, int format_version)
{
    uint64_t h = FOX_FNV_OFFSET;
    h = fox_fnv1a_str(h, "foxhunt layout fingerprint v1");
    h = fox_fnv1a_u64(h, (uint64_t)isv_dim);
    for (int k = 0; k < n_isv_named; k++) {
        h = fox_fnv1a_u64(h, (uint64_t)isv_named[k].index);
        h = fox_fnv1a_str(h, isv_named[k].name);
    }
    h = fox_fnv1a_u64(h, (uint64_t)n_sentinel);
    for (int i = 0; i < n_sentinel; i++) {
        h = fox_fnv1a_u64(h, (uint64_t)i);
        h = fox_fnv1a_str(h, sentinel_names[i] ? sentinel_names[i] : "");
    }
    h = fox_fnv1a_u64(h, model_layout_hash);
    h = fox_fnv1a_u64(h, (uint64_t)(int64_t)format_version);
    /* FNV's last bytes barely reach the high bits; one splitmix64 round spreads them. */
    h = fox_rng_mix(h);
    uint64_t lo = float_safe((uint32_t)h), hi = float_safe((uint32_t)(h >> 32));
    return (hi << 32) | lo;
}

/* The fingerprint over the named ISV slots outside [skip_from, skip_to). */
static uint64_t
fingerprint_skipping(uint64_t model_layout_hash, int format_version, int skip_from, int skip_to)
{
    const char *sent[FOX_SENTINEL_SLOTS];
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        sent[i] = fox_sentinel_name(i);
    fox_isv_slot_info named[FOX_ISV_TOTAL_DIM];
    int n = 0;
    for (int k = 0; k < fox_isv_named_count(); k++) {
        const fox_isv_slot_info *s = fox_isv_named(k);
        if (s->index < skip_from || s->index >= skip_to)
            named[n++] = *s;
    }
    return fox__layout_fingerprint_of(named, n, FOX_ISV_TOTAL_DIM, sent, FOX_SENTINEL_SLOTS,
                                      model_layout_hash, format_version);
}

uint64_t
fox_layout_fingerprint(uint64_t model_layout_hash, int format_version)
{
    return fingerprint_skipping(model_layout_hash, format_version, 0, 0);
}

uint64_t
fox_layout_fingerprint_before_grid(uint64_t model_layout_hash, int format_version)
{
    return fingerprint_skipping(model_layout_hash, format_version, FOX_ISV_ATOM_GRID_BASE,
                                FOX_ISV_ATOM_GRID_BASE + 2 * FOX_ISV_SP4_BRANCHES);
}
