/*
 * gemm_probe.c — how much a product of foxnet's shapes could gain from picking its cuBLASLt
 * algorithm by timing instead of taking cuBLAS's heuristic: for each shape, cublasSgemm (what
 * the backend calls) against every algorithm cublasLtMatmulAlgoGetHeuristic offers (up to
 * 16), each timed as a CUDA graph of 200 dependent launches (no host in the loop), FP32; and
 * cublasSgemm in TF32 (tensor cores) at K and at 3·K, the cost of a 3xTF32 product done as
 * one TF32 product over split operands side by side ([A_hi A_hi A_lo]·[B_hi; B_lo; B_hi]).
 * A diagnostic for the GPU machine (bench/gpu_run.sh probe_gemm), not part of the daemon.
 *
 *   gemm_probe [batch]     the shapes of the default net at that train batch (256)
 */
#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CB(x)                                                                                      \
    do {                                                                                           \
        int s_ = (int)(x);                                                                         \
        if (s_ != 0) {                                                                             \
            fprintf(stderr, "%s: status %d\n", #x, s_);                                            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { REPS = 200, MAX_ALGOS = 16 };

typedef struct shape {
    const char *what;
    int ta, tb, m, n, k;
} shape;

static cudaStream_t st;
static cudaEvent_t e0, e1;

/* One product with everything it needs: cuBLAS's own call (algo NULL) or one Lt algorithm. */
typedef struct call {
    cublasHandle_t h;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    const cublasLtMatmulAlgo_t *algo;
    shape s;
    const float *A, *B;
    float *C;
    void *ws;
    size_t ws_size;
} call;

static int
issue(const call *c)
{
    const float one = 1.0f, zero = 0.0f;
    const shape *s = &c->s;
    if (!c->algo)
        return cublasSgemm(c->h, s->ta ? CUBLAS_OP_T : CUBLAS_OP_N, s->tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                           s->m, s->n, s->k, &one, c->A, s->ta ? s->k : s->m, c->B,
                           s->tb ? s->n : s->k, &zero, c->C, s->m);
    return cublasLtMatmul(c->lt, c->d, &one, c->A, c->la, c->B, c->lb, &zero, c->C, c->lc, c->C,
                          c->lc, c->algo, c->ws, c->ws_size, st);
}

/* µs per launch of REPS launches captured as one graph and replayed; < 0 if one fails. */
static float
graph_us(const call *c)
{
    cudaGraph_t g;
    cudaGraphExec_t x;
    int bad = 0;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < REPS; r++)
        bad |= issue(c) != 0;
    CK(cudaStreamEndCapture(st, &g));
    if (bad) {
        cudaGraphDestroy(g);
        return -1.0f;
    }
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphLaunch(x, st)); /* warm-up */
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(x, st));
    CK(cudaEventRecord(e1, st));
    float ms;
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    return ms * 1000.0f / REPS;
}

int
main(int argc, char **argv)
{
    int B = argc > 1 ? atoi(argv[1]) : 256, NT = 8;
    /* col-major forms of foxnet's products: forward (T,N), input gradient (N,N), dW (N,T). */
    shape sh[] = {
        {"grn1 w2 fwd 64->256", 1, 0, 256, 2 * B, 64},
        {"grn1 w1 fwd 256->256", 1, 0, 256, 2 * B, 256},
        {"grn2 w2 fwd 256->128", 1, 0, 128, 2 * B, 256},
        {"grn2 w1 fwd 128->128", 1, 0, 128, 2 * B, 128},
        {"heads hid fwd 128->896", 1, 0, 896, 2 * B, 128},
        {"heads out fwd 128->204", 1, 0, 204, 2 * B, 128},
        {"iqn phi fwd 64->128", 1, 0, 128, B * NT, 64},
        {"target grn1 w1 fwd", 1, 0, 256, B, 256},
        {"heads hid dX 896->128", 0, 0, 128, B, 896},
        {"grn2 w1 dX 128->128", 0, 0, 128, B, 128},
        {"grn2 w2 dX 128->256", 0, 0, 256, B, 128},
        {"grn1 w1 dX 256->256", 0, 0, 256, B, 256},
        {"iqn dX 128->128 rows B*NT", 0, 0, 128, B * NT, 128},
        {"grn1 w1 dW", 0, 1, 256, 256, B},
        {"heads hid dW", 0, 1, 128, 896, B},
        {"iqn phi dW", 0, 1, 64, 128, B * NT},
    };
    int nsh = (int)(sizeof sh / sizeof sh[0]);

    CK(cudaStreamCreate(&st));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    cublasHandle_t h, h_tf32;
    cublasLtHandle_t lt;
    CB(cublasCreate(&h));
    CB(cublasSetStream(h, st));
    CB(cublasCreate(&h_tf32));
    CB(cublasSetStream(h_tf32, st));
    CB(cublasSetMathMode(h_tf32, CUBLAS_TF32_TENSOR_OP_MATH));
    CB(cublasLtCreate(&lt));
    size_t ws_size = 32u << 20, big = (size_t)64 << 20;
    void *ws;
    float *A, *Bm, *C;
    CK(cudaMalloc(&ws, ws_size));
    CK(cudaMalloc((void **)&A, big));
    CK(cudaMalloc((void **)&Bm, big));
    CK(cudaMalloc((void **)&C, big));
    CK(cudaMemset(A, 0, big));
    CK(cudaMemset(Bm, 0, big));
    CB(cublasSetWorkspace(h, ws, ws_size));
    CB(cublasSetWorkspace(h_tf32, ws, ws_size));

    printf("| shape | m n k | cublasSgemm µs | Lt heuristic #0 µs | best Lt µs (index, splitK) | "
           "algos | TF32 µs | TF32 at 3·K µs |\n|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nsh; i++) {
        shape s = sh[i];
        int lda = s.ta ? s.k : s.m, ldb = s.tb ? s.n : s.k, ldc = s.m;
        cublasOperation_t oa = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        call c = {h, lt, NULL, NULL, NULL, NULL, NULL, s, A, Bm, C, ws, ws_size};
        float t_def = graph_us(&c);
        call tc = c;
        tc.h = h_tf32;
        float t_tf32 = graph_us(&tc);
        tc.s.k = 3 * s.k;
        float t_3x = graph_us(&tc);

        CB(cublasLtMatmulDescCreate(&c.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CB(cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
        CB(cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
        CB(cublasLtMatrixLayoutCreate(&c.la, CUDA_R_32F, s.ta ? s.k : s.m, s.ta ? s.m : s.k, lda));
        CB(cublasLtMatrixLayoutCreate(&c.lb, CUDA_R_32F, s.tb ? s.n : s.k, s.tb ? s.k : s.n, ldb));
        CB(cublasLtMatrixLayoutCreate(&c.lc, CUDA_R_32F, s.m, s.n, ldc));
        cublasLtMatmulPreference_t pref;
        CB(cublasLtMatmulPreferenceCreate(&pref));
        CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws_size, sizeof ws_size));
        cublasLtMatmulHeuristicResult_t res[MAX_ALGOS];
        int got = 0;
        CB(cublasLtMatmulAlgoGetHeuristic(lt, c.d, c.la, c.lb, c.lc, c.lc, pref, MAX_ALGOS, res,
                                          &got));
        float t0 = -1.0f, best = 1e30f;
        int bi = -1, bsplit = 0;
        for (int a = 0; a < got; a++) {
            if (res[a].state != CUBLAS_STATUS_SUCCESS)
                continue;
            c.algo = &res[a].algo;
            float t = graph_us(&c);
            if (a == 0)
                t0 = t;
            if (t > 0 && t < best) {
                int split = 0;
                size_t wr;
                cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                     &split, sizeof split, &wr);
                best = t, bi = a, bsplit = split;
            }
        }
        printf("| %s | %d %d %d | %.2f | %.2f | %.2f (%d, %d) | %d | %.2f | %.2f |\n", s.what, s.m,
               s.n, s.k, t_def, t0, best, bi, bsplit, got, t_tf32, t_3x);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(c.la);
        cublasLtMatrixLayoutDestroy(c.lb);
        cublasLtMatrixLayoutDestroy(c.lc);
        cublasLtMatmulDescDestroy(c.d);
    }
    return 0;
}
