/*
 * layout.h — the layout fingerprint: one 64-bit hash of every slot table
 * (ISV and sentinel), the model layout and the checkpoint format version,
 * so that a checkpoint written under one layout is refused under another.
 *
 * It has a room of its own because it reads both tables: the ISV table
 * knows nothing of the sentinels, and the sentinels read the ISV, so
 * neither can hold it without an include circle. It stores nothing; the
 * engine writes the result into the ISV with fox_isv_store_fingerprint.
 *
 * Threading: pure functions; safe from any thread.
 */
#ifndef FOX_LAYOUT_H
#define FOX_LAYOUT_H

#include <stdint.h>

#include "gpu/isv.h"

/*
 * Layout fingerprint: a 64-bit hash of the ISV table (every named slot's index
 * and name, and FOX_ISV_TOTAL_DIM), the sentinel table (every slot's index and
 * name, and FOX_SENTINEL_SLOTS), the model layout hash (fox_model_layout_hash)
 * and the checkpoint format version. Checkpoints store it; loading refuses a
 * mismatch.
 *
 * Each 32-bit half of the result is shaped to be a normal, finite float when
 * reinterpreted (bit 30 clear, bit 29 set: magnitude in [2^-63, 2)), so the
 * two ISV slots that hold it are never NaN, Inf, zero or denormal: they
 * survive JSON (isv_read), NaN scans of the ISV buffer and flush-to-zero
 * arithmetic. That leaves 60 bits of hash, ample for catching a layout change.
 */
uint64_t fox_layout_fingerprint(uint64_t model_layout_hash, int format_version);

/*
 * The fingerprint this layout had before the moving atom grid's ISV slots
 * (FOX_ISV_ATOM_GRID_BASE, 2 per branch) were named. A checkpoint written
 * then differs from one of this layout only by those slots, which it holds
 * at 0, the grid's unset state: it loads, and its grid starts again from
 * the configured support.
 */
uint64_t fox_layout_fingerprint_before_grid(uint64_t model_layout_hash, int format_version);

/*
 * Internal (exposed for tests): the fingerprint of explicit tables, so a test
 * can change one entry and watch the hash move. fox_layout_fingerprint is
 * this function applied to the real tables.
 */
uint64_t fox__layout_fingerprint_of(const fox_isv_slot_info *isv_named, int n_isv_named,
                                    int isv_dim, const char *const *sentinel_names, int n_sentinel,
                                    uint64_t model_layout_hash, int format_version);

#endif
