/*
 * rng.h — the one random number generator of foxhunt, identical on host and
 * device: splitmix64. A sequential stream (fox_rng) for host code and a
 * counter form (fox_rng_at) for kernels, so that the CPU and CUDA backends
 * draw the same numbers for the same (seed, counter).
 */
#ifndef FOX_RNG_H
#define FOX_RNG_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define FOX_HD __host__ __device__ __forceinline__
#else
#define FOX_HD static inline
#endif

typedef struct fox_rng {
    uint64_t s;
} fox_rng;

FOX_HD uint64_t
fox_rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The value at position idx of stream seed, without state. */
FOX_HD uint64_t
fox_rng_at(uint64_t seed, uint64_t idx)
{
    return fox_rng_mix(seed ^ fox_rng_mix(idx + 0x9e3779b97f4a7c15ULL));
}

/* 24-bit uniform in [0, 1). */
FOX_HD float
fox_rng_unit(uint64_t bits)
{
    return (float)(bits >> 40) * (1.0f / 16777216.0f);
}

FOX_HD void
fox_rng_seed(fox_rng *r, uint64_t seed)
{
    r->s = fox_rng_mix(seed + 0x632be59bd9b4e019ULL);
}

FOX_HD uint64_t
fox_rng_next(fox_rng *r)
{
    r->s += 0x9e3779b97f4a7c15ULL;
    return fox_rng_mix(r->s);
}

FOX_HD float
fox_rng_uniform(fox_rng *r)
{
    return fox_rng_unit(fox_rng_next(r));
}

/* Uniform integer in [0, n), n > 0. */
FOX_HD uint32_t
fox_rng_below(fox_rng *r, uint32_t n)
{
    return (uint32_t)(((fox_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Standard normal (Box–Muller, double precision for the host generator). */
FOX_HD double
fox_rng_normal(fox_rng *r)
{
    double u1 = ((double)(fox_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(fox_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
