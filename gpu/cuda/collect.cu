/*
 * collect.cu — the environments, the n-step collection and the replay ring
 * on the device, and the batch gather. Twins: gpu/cpu/backend.c (collect,
 * emit_oldest, env_reset, gather_batch) and gpu/env.h, which both backends
 * run as is. Random numbers come from rng.h's counter form keyed by (stream
 * seed, step counter, index), so nothing is drawn on the host and a
 * captured graph replays new draws; the streams therefore differ from the
 * CPU backend's sequential ones (same distributions, different values).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include <cub/block/block_scan.cuh>

#include "gpu/bounds.h"
#include "gpu/isv.h"
#include "gpu/sentinel.h"
#include "gpu/cuda/collect.h"
#include "gpu/cuda/device.cuh"

/* Key offsets of the counter-based streams, so that no two uses share a draw. */
#define SLOT_RESET 15   /* per env and step: 2 per branch for ε-greedy, 15 for a reset */
#define SLOTS_PER_ENV 16

/* fox_rng_below of a draw already made. */
static __device__ __forceinline__ uint32_t
below_bits(uint64_t bits, uint32_t n)
{
    return (uint32_t)(((bits >> 32) * (uint64_t)n) >> 32);
}

/* ------------------------------------------------------------------------------------------ */
/* Environments and collection (twins of backend.c's env_reset, collect, emit_oldest)         */

static __device__ void
env_reset(fox_cuda_env *e, const fox_cuda_collect_cfg &c, fox_cuda_fold f, uint64_t bits)
{
    /* Leave room for at least n steps before the segment's last bar. */
    int span = f.train_end - 1 - f.train_begin - c.n_step;
    e->bar = f.train_begin + (int)below_bits(bits, (uint32_t)(span > 1 ? span : 1));
    e->steps = 0;
    e->st.pos = 0.0f;
    e->st.entry = c.bars.close[e->bar];
    e->st.held = 0;
    e->wstart = 0;
    e->wlen = 0;
}

__global__ void
env_reset_kernel(fox_cuda_collect_cfg c, const fox_cuda_ctl *ctl, const fox_cuda_fold *fold,
                 fox_cuda_env *envs, uint64_t gen)
{
    pdl_enter();
    fox_member_args(c, ctl, fold, envs);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c.N)
        return;
    uint64_t key = ((gen + 1) * (uint64_t)c.N + (uint64_t)i) * SLOTS_PER_ENV + SLOT_RESET;
    env_reset(&envs[i], c, *fold, fox_rng_at(ctl->seed_collect ^ 0xbe61f01dULL, key));
}

int
fox__cuda_env_reset(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_ctl *ctl,
                    const fox_cuda_fold *fold, fox_cuda_env *envs, uint64_t gen)
{
    FOX_CUDA_TRY(
        launch(env_reset_kernel, (c->N + 255) / 256, 256, 0, s, *c, ctl, fold, envs, gen));
    return 0;
}

/* fox__state_build on the device: features of bar t, zeros, portfolio in the last 3. */
static __device__ __forceinline__ float
state_at(const fox_cuda_collect_cfg &c, int t, const float port[3], int k)
{
    if (k >= c.S - 3)
        return port[k - (c.S - 3)];
    return k < c.n_feat ? c.norm[(size_t)t * c.n_feat + k] : 0.0f;
}

__global__ void
collect_state_kernel(fox_cuda_collect_cfg c, const fox_cuda_env *envs, float *X)
{
    pdl_enter();
    fox_member_args(c, envs, X);
    size_t n = (size_t)c.N * c.S;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(k / c.S), col = (int)(k % c.S);
        fox_cuda_env e = envs[i];
        float port[3];
        fox_env_portfolio(&e.st, c.bars.close[e.bar], port);
        X[k] = state_at(c, e.bar, port, col);
    }
}

int
fox__cuda_collect_state(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_env *envs,
                        float *X)
{
    FOX_CUDA_TRY(
        launch(collect_state_kernel, grid_for((size_t)c->N * c->S, 256), 256, 0, s, *c, envs, X));
    return 0;
}

/*
 * Thread per environment: greedy action from q, ε-greedy per branch, one
 * env.h step, the n-step window, and the transitions it emits this step
 * (staged [N × n_step], count in counts[i]; collect_push orders them into
 * the ring). ε follows the CPU: eps_start until the ring is ready, then
 * the linear decay over train steps; both read from ctl.
 */
__global__ void
collect_act_kernel(fox_cuda_collect_cfg c, const fox_cuda_fold *fold, fox_cuda_env *envs,
                   int32_t *wbar, float *wport, uint32_t *wa, float *wr, const float *q,
                   fox_cuda_ctl *ctl, fox_cuda_trans *staged, int *counts)
{
    pdl_enter();
    fox_member_args(c, fold, envs, wbar, wport, wa, wr, q, ctl, staged, counts);
    if (fox_member_steps()) {
        c.gamma = ctl->key.gamma;
        c.eps_start = ctl->key.eps_start;
        c.eps_end = ctl->key.eps_end;
        c.eps_decay_steps = ctl->key.eps_decay_steps;
        c.train_cost_mult = ctl->key.train_cost_mult;
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int ready = ctl->ring_size >= c.learning_starts && ctl->ring_size >= c.batch;
    double frac = (double)ctl->train_steps / (double)c.eps_decay_steps;
    if (frac > 1.0)
        frac = 1.0;
    float eps = ready ? (float)(c.eps_start + (c.eps_end - c.eps_start) * frac) : c.eps_start;
    if (i == 0)
        ctl->eps = eps;
    if (i >= c.N)
        return;
    fox_cuda_fold f = *fold;
    fox_cuda_env e = envs[i];
    uint64_t key = ((uint64_t)ctl->step * (uint64_t)c.N + (uint64_t)i) * SLOTS_PER_ENV;
    const uint64_t seed = ctl->seed_collect;
    int32_t a[4] = {0, 0, 0, 0};
    const float *qi = q + (size_t)i * c.NAct;
    /* Unrolled: c (the member's copy) indexed by constants stays in registers. */
#pragma unroll
    for (int d = 0; d < FOX_MAX_BRANCHES; d++) {
        if (d >= c.D)
            break;
        const float *qd = qi + c.boff[d];
        int best = 0;
        for (int k = 1; k < c.bsize[d]; k++)
            if (qd[k] > qd[best])
                best = k;
        a[d] = best;
        if (fox_rng_unit(fox_rng_at(seed, key + 2 * d)) < eps)
            a[d] = (int32_t)below_bits(fox_rng_at(seed, key + 2 * d + 1), (uint32_t)c.bsize[d]);
    }
    float port[3];
    fox_env_portfolio(&e.st, c.bars.close[e.bar], port);
    fox_env_fill fill = fox_env_step(&c.envp, &c.bars, e.bar, &e.st, a);
    int n = c.n_step;
    size_t w0 = (size_t)i * n;
    int slot = (e.wstart + e.wlen) % n;
    wbar[w0 + slot] = e.bar;
    for (int k = 0; k < 3; k++)
        wport[(w0 + slot) * 3 + k] = port[k];
    wa[w0 + slot] = (uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 |
                    (uint32_t)a[3] << 24;
    wr[w0 + slot] = fox_env_train_reward(&c.envp, &fill, c.train_cost_mult);
    e.wlen++;
    e.bar++;
    e.steps++;
    float port_now[3];
    fox_env_portfolio(&e.st, c.bars.close[e.bar], port_now);
    int ended = e.bar + 1 >= f.train_end || e.steps >= c.episode_len;
    int emit = ended ? e.wlen : e.wlen == n ? 1 : 0;
    for (int k = 0; k < emit; k++) {
        /* The oldest entry bootstraps from the current state (emit_oldest). */
        fox_cuda_trans t;
        float g = 1.0f, R = 0.0f;
        for (int j = 0; j < e.wlen; j++) {
            R += g * wr[w0 + (e.wstart + j) % n];
            g *= c.gamma;
        }
        size_t o = w0 + e.wstart;
        t.bar = wbar[o];
        t.bar_next = e.bar;
        for (int j = 0; j < 3; j++) {
            t.port[j] = wport[o * 3 + j];
            t.port_next[j] = port_now[j];
        }
        uint32_t packed = wa[o];
        for (int j = 0; j < 4; j++)
            t.a[j] = (uint8_t)(packed >> (8 * j));
        t.r = R;
        t.done = ended ? 1.0f : 0.0f;
        staged[w0 + k] = t;
        e.wstart = (e.wstart + 1) % n;
        e.wlen--;
    }
    counts[i] = emit;
    if (ended)
        env_reset(&e, c, f, fox_rng_at(seed, key + SLOT_RESET));
    envs[i] = e;
}

int
fox__cuda_collect_act(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_fold *fold,
                      fox_cuda_env *envs, int32_t *wbar, float *wport, uint32_t *wa, float *wr,
                      const float *q, fox_cuda_ctl *ctl, fox_cuda_trans *staged, int *counts)
{
    FOX_CUDA_TRY(launch(collect_act_kernel, (c->N + 127) / 128, 128, 0, s, *c, fold, envs, wbar,
                        wport, wa, wr, q, ctl, staged, counts));
    return 0;
}

#define PUSH_THREADS 1024

/*
 * One block: an exclusive scan of the emission counts, tile by tile, puts
 * every staged transition into the ring in environment order (the CPU's
 * push order), then advances the ring and the step counters.
 */
__global__ void
collect_push_kernel(int N, int n_step, int capacity, const fox_cuda_trans *staged,
                    const int *counts, fox_cuda_trans *ring, fox_cuda_ctl *ctl)
{
    pdl_enter();
    fox_member_args(staged, counts, ring, ctl);
    typedef cub::BlockScan<int, PUSH_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    int head = ctl->ring_head, total = 0;
    for (int base = 0; base < N; base += PUSH_THREADS) {
        int i = base + threadIdx.x;
        int cnt = i < N ? counts[i] : 0, off, agg;
        scan_t(tmp).ExclusiveSum(cnt, off, agg);
        for (int k = 0; k < cnt; k++)
            ring[(head + total + off + k) % capacity] = staged[(size_t)i * n_step + k];
        total += agg;
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        ctl->ring_head = (head + total) % capacity;
        ctl->ring_size = ctl->ring_size + total < capacity ? ctl->ring_size + total : capacity;
        ctl->step++;
        ctl->env_steps += N;
    }
}

int
fox__cuda_collect_push(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_trans *staged,
                       const int *counts, fox_cuda_trans *ring, fox_cuda_ctl *ctl)
{
    FOX_CUDA_TRY(launch(collect_push_kernel, 1, PUSH_THREADS, 0, s, c->N, c->n_step, c->capacity,
                        staged, counts, ring, ctl));
    return 0;
}

/*
 * Uniform sampling and the batch gather (gather_batch): thread per (b, k of
 * S) rebuilds both states; the k = 0 thread copies the scalars, the first
 * NT threads draw the IQN fractions. Draws are keyed by the train step.
 * Prioritized, the slots were drawn before (per.cu) into bt.idx.
 */
__global__ void
gather_kernel(fox_cuda_collect_cfg c, const fox_cuda_trans *ring, const int8_t *regime, int NT,
              const fox_cuda_ctl *ctl, fox_cuda_batch bt)
{
    pdl_enter();
    fox_member_args(c, ring, regime, ctl, bt);
    int B = c.batch, S = c.S;
    uint64_t seed = ctl->seed_collect ^ 0x5a3b1eULL;
    uint64_t base = (uint64_t)ctl->train_steps * ((uint64_t)B * (1 + 2 * (uint64_t)NT));
    uint32_t size = (uint32_t)ctl->ring_size;
    size_t n = (size_t)B * S;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        int b = (int)(k / S), col = (int)(k % S);
        int32_t idx =
            c.prioritized ? bt.idx[b] : (int32_t)below_bits(fox_rng_at(seed, base + b), size);
        const fox_cuda_trans *t = &ring[idx];
        bt.s2[k] = state_at(c, t->bar, t->port, col);
        bt.s2[n + k] = state_at(c, t->bar_next, t->port_next, col);
        if (col == 0) {
            for (int d = 0; d < 4; d++)
                bt.a[b * 4 + d] = t->a[d];
            bt.r[b] = t->r;
            bt.done[b] = t->done;
            bt.aux[b] = logf(c.bars.close[t->bar + 1] / c.bars.close[t->bar]);
            bt.regime[b] = regime[t->bar];
            if (!c.prioritized)
                bt.idx[b] = idx;
        }
        for (int j = col; j < NT; j += S) {
            uint64_t o = base + (uint64_t)B + (uint64_t)b * NT + j;
            bt.tau[(size_t)b * NT + j] = fox_rng_unit(fox_rng_at(seed, o));
            bt.tau[(size_t)B * NT + (size_t)b * NT + j] =
                fox_rng_unit(fox_rng_at(seed, o + (uint64_t)B * NT));
        }
    }
}

int
fox__cuda_gather(cudaStream_t s, const fox_cuda_collect_cfg *c, const fox_cuda_trans *ring,
                 const int8_t *regime, int NT, const fox_cuda_ctl *ctl, const fox_cuda_batch *bt)
{
    FOX_CUDA_TRY(launch(gather_kernel, grid_for((size_t)c->batch * c->S, 256), 256, 0, s, *c, ring,
                        regime, NT, ctl, *bt));
    return 0;
}
