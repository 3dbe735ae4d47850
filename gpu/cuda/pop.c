/*
 * pop.c (CUDA) — a population's members at fixed distances (cuda_impl.h's
 * FOX_CUDA_MEMBER_SPAN), so that one launch and one batched product serve
 * all of them: one reserved virtual range of K spans, member k's device
 * memory mapped into span k while its backend is built, one mapped host
 * block of K host spans for the members' ISV and flags, and the pool of
 * the two-level products' pointer tables (matmul.c).
 *
 * A member's backend makes its allocations through fox__cuda_alloc (ctx.c)
 * in a fixed order; while this file builds member k (fox__cuda_pop_build),
 * each allocation is the next piece of span k, physical memory mapped in as
 * the pieces pass its end. Member 0's pieces are written down, and every
 * other member's must fall at the same offsets with the same sizes, else
 * its creation fails: then each buffer of member k lies exactly k spans
 * from member 0's. The step over all members is step.c's; the members'
 * backends are backend.c's. The driver's virtual memory calls are taken
 * through the runtime's entry-point query, so that nothing links libcuda.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "common/error.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/backend_impl.h"
#include "gpu/cuda/cuda_impl.h"
#include "gpu/cuda/ctx.h"

_Static_assert(FOX_ISV_TOTAL_DIM * sizeof(float) + FOX_SENTINEL_SLOTS * sizeof(int) <=
                   FOX_CUDA_MEMBER_HOST_SPAN,
               "a member's ISV and flags fit its host span");

/* The physical memory mapped at a time past a span's end (rounded to the granularity). */
#define PIECE_MIN ((size_t)64 << 20)
/* Every allocation starts on this boundary, as cudaMalloc's do. */
#define ALIGN 256
/*
 * Pointers in the pool of the two-level products' arrays: each call site of
 * a step or a pass takes 3 × entries × members once (8 MiB; past it the
 * products go an entry a call).
 */
#define POINTER_POOL (1 << 20)

/* The driver's virtual memory management, looked up once. */
static struct {
    PFN_cuMemAddressReserve_v10020 reserve;
    PFN_cuMemAddressFree_v10020 address_free;
    PFN_cuMemCreate_v10020 create;
    PFN_cuMemRelease_v10020 release;
    PFN_cuMemMap_v10020 map;
    PFN_cuMemUnmap_v10020 unmap;
    PFN_cuMemSetAccess_v10020 set_access;
    PFN_cuMemGetAllocationGranularity_v10020 granularity;
} drv;

#define DRV_TRY(call)                                                                              \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return fox__cuda_fail(__FILE__, __LINE__, #call, "driver call failed", (int)r_);       \
    } while (0)

static int
drv_entry(const char *name, void **fn)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn)
        return fox__cuda_fail(__FILE__, __LINE__, name, "no such driver entry point", (int)e);
    return FOX_OK;
}

static int
drv_open(void)
{
    if (drv.granularity)
        return FOX_OK;
    FOX_TRY(drv_entry("cuMemAddressReserve", (void **)&drv.reserve));
    FOX_TRY(drv_entry("cuMemAddressFree", (void **)&drv.address_free));
    FOX_TRY(drv_entry("cuMemCreate", (void **)&drv.create));
    FOX_TRY(drv_entry("cuMemRelease", (void **)&drv.release));
    FOX_TRY(drv_entry("cuMemMap", (void **)&drv.map));
    FOX_TRY(drv_entry("cuMemUnmap", (void **)&drv.unmap));
    FOX_TRY(drv_entry("cuMemSetAccess", (void **)&drv.set_access));
    FOX_TRY(drv_entry("cuMemGetAllocationGranularity", (void **)&drv.granularity));
    return FOX_OK;
}

static CUmemAllocationProp
pinned_on(int device)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* The population's life                                                                      */

int
fox__cuda_pop_join(void **shared, int members, int member, int device, fox_cuda_pop **out)
{
    *out = NULL;
    fox_cuda_pop *pop = *shared;
    if (!pop) {
        if (member != 0)
            return FOX_ESTATE; /* member 0 makes the population: the engine creates in order */
        FOX_TRY(drv_open());
        if (!(pop = calloc(1, sizeof *pop)))
            return FOX_ENOMEM;
        pop->K = members;
        pop->device = device;
        CUmemAllocationProp prop = pinned_on(device);
        int rv = FOX_OK;
        CUresult r = drv.granularity(&pop->gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
        if (r == CUDA_SUCCESS)
            r = drv.reserve(&pop->base, (size_t)members * FOX_CUDA_MEMBER_SPAN, 0, 0, 0);
        if (r != CUDA_SUCCESS)
            rv = fox__cuda_fail(__FILE__, __LINE__, "cuMemAddressReserve",
                                "the members' virtual range", (int)r);
        cudaError_t e = cudaSuccess;
        if (rv == FOX_OK)
            e = cudaHostAlloc((void **)&pop->host, (size_t)members * FOX_CUDA_MEMBER_HOST_SPAN,
                              cudaHostAllocMapped);
        if (rv == FOX_OK && e == cudaSuccess)
            e = cudaHostGetDevicePointer((void **)&pop->host_dev, pop->host, 0);
        pop->ptrs.cap = POINTER_POOL;
        if (rv == FOX_OK && e == cudaSuccess)
            e = cudaMalloc((void **)&pop->ptrs.base, POINTER_POOL * sizeof *pop->ptrs.base);
        for (int k = 0; rv == FOX_OK && e == cudaSuccess && k < members; k++)
            e = cudaEventCreateWithFlags(&pop->ev_member[k], cudaEventDisableTiming);
        if (rv == FOX_OK && e == cudaSuccess)
            e = cudaEventCreateWithFlags(&pop->ev_done, cudaEventDisableTiming);
        if (rv == FOX_OK && e != cudaSuccess)
            rv = fox__cuda_fail(__FILE__, __LINE__, "population", cudaGetErrorString(e), (int)e);
        if (rv != FOX_OK) {
            pop->refs = 1;
            fox__cuda_pop_leave(pop);
            return rv;
        }
        memset(pop->host, 0, (size_t)members * FOX_CUDA_MEMBER_HOST_SPAN);
        pop->shared = shared;
        *shared = pop;
    }
    if (member < 0 || member >= pop->K || pop->be[member])
        return FOX_ESTATE;
    pop->refs++;
    *out = pop;
    return FOX_OK;
}

void
fox__cuda_pop_leave(fox_cuda_pop *pop)
{
    if (!pop || --pop->refs > 0)
        return;
    fox__cuda_pop_drop_graphs(pop);
    for (int k = 0; k < pop->K; k++) {
        fox_cuda_span *sp = &pop->span[k];
        CUdeviceptr at = pop->base + (CUdeviceptr)k * FOX_CUDA_MEMBER_SPAN;
        for (int i = 0; i < sp->n_pieces; i++) {
            drv.unmap(at, sp->piece[i].size);
            drv.release(sp->piece[i].handle);
            at += sp->piece[i].size;
        }
        if (pop->ev_member[k])
            cudaEventDestroy(pop->ev_member[k]);
    }
    if (pop->ev_done)
        cudaEventDestroy(pop->ev_done);
    if (pop->shared)
        *pop->shared = NULL;
    if (pop->base)
        drv.address_free(pop->base, (size_t)pop->K * FOX_CUDA_MEMBER_SPAN);
    cudaFreeHost(pop->host);
    cudaFreeHost(pop->pass_room);
    cudaFree(pop->ptrs.base);
    free(pop->log);
    free(pop);
}

/* ------------------------------------------------------------------------------------------ */
/* Building a member: its allocations from its span                                           */

/* The member this thread builds (or destroys): its population and index, or NULL. */
static _Thread_local fox_cuda_pop *building;
static _Thread_local int building_member;
static _Thread_local int building_count;

void
fox__cuda_pop_build(fox_cuda_pop *pop, int member)
{
    building = pop;
    building_member = member;
    building_count = 0;
}

int
fox__cuda_pop_building(void)
{
    return building != NULL;
}

/* Map physical memory past span sp's end until `end` bytes of it are mapped. */
static int
map_to(fox_cuda_pop *pop, int member, size_t end)
{
    fox_cuda_span *sp = &pop->span[member];
    if (end > FOX_CUDA_MEMBER_SPAN)
        return FOX_ENOMEM;
    while (sp->mapped < end) {
        if (sp->n_pieces == FOX_CUDA_SPAN_PIECES)
            return FOX_ENOMEM;
        size_t size = end - sp->mapped < PIECE_MIN ? PIECE_MIN : end - sp->mapped;
        size = (size + pop->gran - 1) / pop->gran * pop->gran;
        if (sp->mapped + size > FOX_CUDA_MEMBER_SPAN)
            size = FOX_CUDA_MEMBER_SPAN - sp->mapped;
        CUmemAllocationProp prop = pinned_on(pop->device);
        CUmemGenericAllocationHandle h;
        CUresult r = drv.create(&h, size, &prop, 0);
        if (r == CUDA_ERROR_OUT_OF_MEMORY)
            return FOX_ENOMEM;
        DRV_TRY(r);
        CUdeviceptr at = pop->base + (CUdeviceptr)member * FOX_CUDA_MEMBER_SPAN + sp->mapped;
        if ((r = drv.map(at, size, 0, h, 0)) != CUDA_SUCCESS) {
            drv.release(h);
            DRV_TRY(r);
        }
        sp->piece[sp->n_pieces].handle = h;
        sp->piece[sp->n_pieces].size = size;
        sp->n_pieces++;
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof acc);
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = pop->device;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        DRV_TRY(drv.set_access(at, size, &acc, 1));
        sp->mapped += size;
    }
    return FOX_OK;
}

int
fox__cuda_pop_alloc(void *pp, size_t bytes)
{
    fox_cuda_pop *pop = building;
    int k = building_member;
    fox_cuda_span *sp = &pop->span[k];
    size_t off = (sp->used + ALIGN - 1) / ALIGN * ALIGN;
    int i = building_count++;
    if (k == 0) {
        if (pop->n_log == pop->cap_log) {
            int cap = pop->cap_log ? 2 * pop->cap_log : 256;
            fox_cuda_piece_log *l = realloc(pop->log, (size_t)cap * sizeof *l);
            if (!l)
                return FOX_ENOMEM;
            pop->log = l;
            pop->cap_log = cap;
        }
        pop->log[pop->n_log++] = (fox_cuda_piece_log){off, bytes};
    } else if (i >= pop->n_log || pop->log[i].offset != off || pop->log[i].bytes != bytes) {
        /* Member k's buffers would not lie k spans from member 0's. */
        return fox__cuda_fail(__FILE__, __LINE__, "population member", "allocations differ "
                              "from member 0's", i);
    }
    FOX_TRY(map_to(pop, k, off + bytes));
    sp->used = off + bytes;
    *(void **)pp = (void *)(uintptr_t)(pop->base + (CUdeviceptr)k * FOX_CUDA_MEMBER_SPAN + off);
    return FOX_OK;
}

int
fox__cuda_pop_built(fox_cuda_pop *pop, int member)
{
    int count = building_count;
    building = NULL;
    /* Every piece of member 0's, none more or fewer. */
    if (member > 0 && count != pop->n_log)
        return fox__cuda_fail(__FILE__, __LINE__, "population member",
                              "allocation count differs from member 0's", count);
    return FOX_OK;
}

static int
pop_owns(const fox_cuda_pop *pop, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return pop && a >= pop->base && a < pop->base + (uintptr_t)pop->K * FOX_CUDA_MEMBER_SPAN;
}

int
fox__cuda_pop_building_owns(const void *p)
{
    return pop_owns(building, p);
}

float *
fox__cuda_pop_host(fox_cuda_pop *pop, int member, int device_side)
{
    char *room = device_side ? pop->host_dev : pop->host;
    return (float *)(room + (size_t)member * FOX_CUDA_MEMBER_HOST_SPAN);
}

void
fox__cuda_pop_drop_graphs(fox_cuda_pop *pop)
{
    fox__cuda_drop_step_graphs(pop->graph);
    fox__cuda_drop_pass_graphs(&pop->passes);
}
