/*
 * per.h — the arithmetic of prioritized replay that both backends run as
 * is: the sum tree's leaf and its descent, the stratified proportional draw,
 * the importance weight and the "pushed over since the draw" test. The CPU
 * ring (gpu/cpu/replay.c) and the device's kernels (gpu/cuda/per.cu) call
 * these same FOX_HD functions, so that the same tree and the same uniforms
 * give the same indices and weights on both.
 *
 * The tree is tree[2 × leaves] doubles, leaves a power of two ≥ the ring's
 * capacity: tree[leaves + i] is slot i's leaf, tree[1] the total. Every
 * inner node is recomputed as the exact sum of its two children (never
 * moved by a difference), so the tree is a pure function of its leaves and
 * carries no drift, whatever order the updates came in; that is what lets
 * the device, which rebuilds the paths of a whole batch level by level,
 * hold the CPU's tree bit for bit.
 *
 * Pure functions; C and C++ (nvcc) compatible.
 */
#ifndef FOX_PER_H
#define FOX_PER_H

#include <math.h>
#include <stdint.h>

#include "gpu/rng.h" /* FOX_HD, the counter-form draws */

/* Added to every measured priority so that no transition's probability becomes 0. */
#define FOX_PER_PRIORITY_EPS 1e-6f

/*
 * A leaf: priority^α, computed in double and rounded to float. The rounding
 * makes it the same on the host (glibc's pow) and the device (CUDA's pow,
 * within 2 ulp of double): the two differ only where the exact value lies
 * within a few double ulps of a float rounding boundary.
 */
FOX_HD double
fox_per_leaf(float priority, float alpha)
{
    return (double)(float)pow((double)priority, (double)alpha);
}

/* The leaf whose prefix sum covers mass u, u in [0, tree[1]). */
FOX_HD int
fox_per_find(const double *tree, int leaves, double u)
{
    int node = 1;
    while (node < leaves) {
        int left = 2 * node;
        if (u < tree[left]) {
            node = left;
        } else {
            u -= tree[left];
            node = left + 1;
        }
    }
    return node - leaves;
}

/*
 * Draw b of B, stratified: uniform u in [0, 1) places it in the b-th of B
 * equal slices of the total mass. Slots past the ring's size hold 0 and are
 * never found except by rounding at the very end, which takes the last one.
 */
FOX_HD int
fox_per_draw(const double *tree, int leaves, int size, int b, int B, float u)
{
    double slice = tree[1] / (double)B;
    int i = fox_per_find(tree, leaves, ((double)b + (double)u) * slice);
    return i >= size ? size - 1 : i;
}

/* Slot i's importance weight before normalization: (size · P(i))^-β. */
FOX_HD double
fox_per_weight(const double *tree, int leaves, int size, int i, float beta)
{
    double p = tree[leaves + i] / tree[1];
    return pow((double)size * (p > 0.0 ? p : 1e-12), -(double)beta);
}

/*
 * Whether slot i of a ring of capacity was written by a push after the ring
 * had taken `since` pushes, `pushes` now: its transition is not the one
 * that was drawn, and it keeps the priority it was pushed with.
 */
FOX_HD int
fox_per_pushed_over(uint64_t pushes, uint64_t since, int capacity, int i)
{
    uint64_t n = pushes - since;
    if (n >= (uint64_t)capacity)
        return 1;
    int first = (int)(since % (uint64_t)capacity);
    return (uint64_t)((i - first + capacity) % capacity) < n;
}

/*
 * The uniform of draw b (of B) at train step t on the device: a counter
 * stream keyed by (seed, t·B + b), so that a captured graph replays new
 * draws. The CPU draws its uniforms from its own sequential stream.
 */
FOX_HD float
fox_per_uniform(uint64_t seed, int64_t t, int b, int B)
{
    return fox_rng_unit(fox_rng_at(seed, (uint64_t)t * (uint64_t)B + (uint64_t)b));
}

#endif
