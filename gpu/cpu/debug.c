/*
 * debug.c — the CPU backend's test and drill hooks (gpu/cpu/debug.h), built
 * into libfoxgpu_debug, which only tests link; foxd links none of it
 * (tests/nm_debug.sh checks).
 */
#include <stddef.h>

#include "common/error.h"
#include "gpu/cpu/backend_impl.h"
#include "gpu/cpu/debug.h"
#include "gpu/cpu/net.h"
#include "gpu/cpu/stab.h"

int
fox_cpu_debug_sentinel_where(fox_backend *be_, int slot, float **ptr, size_t *len)
{
    cpu_backend *be = (cpu_backend *)be_;
    if (fox_cpu_stab_where(&be->stab, slot, ptr, len) == FOX_OK)
        return FOX_OK;
    /* The inline slots are not table entries: their buffers are the net's. */
    fox_cpu_net_sentinel_buffer(be->net, slot, be->B, ptr, len);
    return *ptr ? FOX_OK : FOX_ENOENT;
}

int
fox_cpu_debug_check_now(fox_backend *be_)
{
    fox_cpu_stab_check(&((cpu_backend *)be_)->stab);
    return FOX_OK;
}
