/*
 * launch_probe.cu — how many small kernels a second the device runs when nothing but the
 * launches costs: each stream replays a CUDA graph of NODES dependent one-block kernels
 * (the shape of a train step at batch 256: ~120 dependent launches, each doing little), and
 * STREAMS such streams run side by side in one process. Run K copies at once (under MPS or
 * not) to see what K independent trainers could get at best from the same launches.
 * A diagnostic for the GPU machine (bench/gpu_run.sh probe_launch), not part of the daemon.
 *
 *   launch_probe [--nodes N] [--streams S] [--reps R] [--seconds T]
 *
 * Prints one line: streams, nodes, graphs replayed, kernels per second, and the time of one
 * graph per stream (µs), the figure to set against a train step's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "launch_probe: %s: %s\n", #x, cudaGetErrorString(e_));                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { MAX_STREAMS = 64 };

/* A kernel that does a token of dependent work, so that it is not optimized away. */
__global__ void
tick(float *p)
{
    p[threadIdx.x] = p[threadIdx.x] * 0.5f + 1.0f;
}

static double
now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int
arg_int(int argc, char **argv, int *i, const char *name, int *out)
{
    if (strcmp(argv[*i], name) != 0)
        return 0;
    if (*i + 1 >= argc || (*out = atoi(argv[*i + 1])) <= 0) {
        fprintf(stderr, "launch_probe: %s needs a positive integer\n", name);
        exit(2);
    }
    ++*i;
    return 1;
}

int
main(int argc, char **argv)
{
    int nodes = 120, streams = 1, reps = 200, seconds = 5;
    for (int i = 1; i < argc; i++) {
        if (!arg_int(argc, argv, &i, "--nodes", &nodes) &&
            !arg_int(argc, argv, &i, "--streams", &streams) &&
            !arg_int(argc, argv, &i, "--reps", &reps) &&
            !arg_int(argc, argv, &i, "--seconds", &seconds)) {
            fprintf(stderr, "usage: launch_probe [--nodes N] [--streams S] [--reps R] [--seconds T]\n");
            return 2;
        }
    }
    if (streams > MAX_STREAMS) {
        fprintf(stderr, "launch_probe: at most %d streams\n", MAX_STREAMS);
        return 2;
    }
    cudaStream_t st[MAX_STREAMS];
    cudaGraphExec_t ex[MAX_STREAMS];
    for (int s = 0; s < streams; s++) {
        float *p;
        CK(cudaMalloc(&p, 32 * sizeof *p));
        CK(cudaMemset(p, 0, 32 * sizeof *p));
        CK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st[s], cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < nodes; k++)
            tick<<<1, 32, 0, st[s]>>>(p);
        CK(cudaStreamEndCapture(st[s], &g));
        CK(cudaGraphInstantiate(&ex[s], g, 0));
        CK(cudaGraphDestroy(g));
    }
    /* Warm-up, then whole rounds of REPS graphs a stream until SECONDS have passed. */
    for (int s = 0; s < streams; s++)
        CK(cudaGraphLaunch(ex[s], st[s]));
    CK(cudaDeviceSynchronize());
    long graphs = 0;
    double t0 = now_s(), t1;
    do {
        for (int r = 0; r < reps; r++)
            for (int s = 0; s < streams; s++)
                CK(cudaGraphLaunch(ex[s], st[s]));
        CK(cudaDeviceSynchronize());
        graphs += (long)reps * streams;
        t1 = now_s();
    } while (t1 - t0 < seconds);
    double kps = graphs * (double)nodes / (t1 - t0);
    printf("launch_probe: streams %d nodes %d graphs %ld kernels/s %.0f graph_us %.1f\n", streams,
           nodes, graphs, kps, (t1 - t0) * 1e6 / ((double)graphs / streams));
    return 0;
}
