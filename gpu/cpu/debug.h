/*
 * debug.h — test and drill hooks of the CPU backend's stability system, for
 * the drill tests only: they live in libfoxgpu_debug, which foxd does not
 * link (the engine reaches the backend through fox_cpu_backend_ops alone).
 *
 * be is a backend made by fox_cpu_backend_ops.create (the engine's, through
 * engine_impl.h); both run on the caller's thread, the one that steps it.
 */
#ifndef FOX_CPU_DEBUG_H
#define FOX_CPU_DEBUG_H

#include <stddef.h>

#include "gpu/backend.h"

/*
 * Where slot's first watched run lies in host memory: *ptr and *len, which
 * the caller may overwrite to plant a value for the next check.
 * FOX_ENOENT when no buffer of the backend is watched by slot.
 */
int fox_cpu_debug_sentinel_where(fox_backend *be, int slot, float **ptr, size_t *len);

/* One fused check over the whole table now, outside any step; the halts are left alone. */
int fox_cpu_debug_check_now(fox_backend *be);

#endif
