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

uint64_t
fox_layout_fingerprint(uint64_t model_layout_hash, int format_version)
{
    const char *sent[FOX_SENTINEL_SLOTS];
    for (int i = 0; i < FOX_SENTINEL_SLOTS; i++)
        sent[i] = fox_sentinel_name(i);
    return fox__layout_fingerprint_of(fox_isv_named(0), fox_isv_named_count(), FOX_ISV_TOTAL_DIM,
                                      sent, FOX_SENTINEL_SLOTS, model_layout_hash, format_version);
}
