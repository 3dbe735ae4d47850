/*
 * blas.c — cuBLAS, opened when the CUDA backend is first used.
 *
 * libcublasLt's static constructors take about 0.3 s of CPU and a few
 * hundred MB of page faults at every process start, whether or not the
 * process ever touches a GPU: a CPU run, `foxd --help` and each of the test
 * suite's hundreds of daemon starts paid it. So libfoxgpu does not link
 * cuBLAS. It defines the cuBLAS entry points the backend calls, with the
 * headers' own prototypes (the compiler checks each against its
 * declaration), and each forwards to the function of the same name in
 * libcublas, opened with dlopen the first time one is needed
 * (fox__cuda_blas_open, which the backend's available() calls once it has
 * found a device). A machine with a GPU but without the library then runs
 * the CPU backend, and says why.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>

#include "gpu/cuda/cuda_impl.h"

/* The library's soname for the toolkit this was built with (CUBLAS_VER_MAJOR). */
#define STR_(x) #x
#define STR(x)  STR_(x)
#define FOX_CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

/* Every entry point the backend calls: its name in the library, resolved once. */
#define FOX_CUBLAS_FUNCTIONS(X)                                                                    \
    X(cublasCreate_v2)                                                                             \
    X(cublasDestroy_v2)                                                                            \
    X(cublasSetStream_v2)                                                                          \
    X(cublasSetWorkspace_v2)                                                                       \
    X(cublasSetMathMode)                                                                           \
    X(cublasGetStatusString)                                                                       \
    X(cublasSgemm_v2)                                                                              \
    X(cublasSgemv_v2)                                                                              \
    X(cublasSgemmBatched)                                                                          \
    X(cublasSgemmStridedBatched)                                                                   \
    X(cublasSgemvStridedBatched)                                                                   \
    X(cublasSgemvBatched)                                                                          \
    X(cublasGemmEx)                                                                                \
    X(cublasGemmBatchedEx)                                                                         \
    X(cublasGemmStridedBatchedEx)

static struct {
#define FOX_CUBLAS_POINTER(name) __typeof__(name) *name;
    FOX_CUBLAS_FUNCTIONS(FOX_CUBLAS_POINTER)
#undef FOX_CUBLAS_POINTER
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static char blas_why[256];

static void
blas_load(void)
{
    void *lib = dlopen(FOX_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(blas_why, sizeof blas_why, "cannot open %s: %s", FOX_CUBLAS_SONAME, dlerror());
        return;
    }
#define FOX_CUBLAS_RESOLVE(name)                                                                   \
    if (!(blas.name = (__typeof__(name) *)dlsym(lib, #name))) {                                    \
        snprintf(blas_why, sizeof blas_why, "%s has no %s", FOX_CUBLAS_SONAME, #name);             \
        memset(&blas, 0, sizeof blas);                                                             \
        return;                                                                                    \
    }
    FOX_CUBLAS_FUNCTIONS(FOX_CUBLAS_RESOLVE)
#undef FOX_CUBLAS_RESOLVE
}

int
fox__cuda_blas_open(char *why, size_t len)
{
    pthread_once(&blas_once, blas_load);
    if (blas.cublasCreate_v2)
        return 1;
    snprintf(why, len, "%s", blas_why);
    return 0;
}

/* A call before the library could be opened fails as an uninitialized handle would. */
#define FOX_CUBLAS_READY(name)                                                                     \
    do {                                                                                           \
        char why_[8];                                                                              \
        if (!blas.name && !fox__cuda_blas_open(why_, sizeof why_))                                 \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                                  \
    } while (0)

cublasStatus_t CUBLASWINAPI
cublasCreate_v2(cublasHandle_t *handle)
{
    FOX_CUBLAS_READY(cublasCreate_v2);
    return blas.cublasCreate_v2(handle);
}

cublasStatus_t CUBLASWINAPI
cublasDestroy_v2(cublasHandle_t handle)
{
    FOX_CUBLAS_READY(cublasDestroy_v2);
    return blas.cublasDestroy_v2(handle);
}

cublasStatus_t CUBLASWINAPI
cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
{
    FOX_CUBLAS_READY(cublasSetStream_v2);
    return blas.cublasSetStream_v2(handle, streamId);
}

cublasStatus_t CUBLASWINAPI
cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes)
{
    FOX_CUBLAS_READY(cublasSetWorkspace_v2);
    return blas.cublasSetWorkspace_v2(handle, workspace, workspaceSizeInBytes);
}

cublasStatus_t CUBLASWINAPI
cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    FOX_CUBLAS_READY(cublasSetMathMode);
    return blas.cublasSetMathMode(handle, mode);
}

const char *CUBLASWINAPI
cublasGetStatusString(cublasStatus_t status)
{
    char why[8];
    if (!blas.cublasGetStatusString && !fox__cuda_blas_open(why, sizeof why))
        return "cuBLAS not loaded";
    return blas.cublasGetStatusString(status);
}

cublasStatus_t CUBLASWINAPI
cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
               int n, int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
               const float *beta, float *C, int ldc)
{
    FOX_CUBLAS_READY(cublasSgemm_v2);
    return blas.cublasSgemm_v2(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
                               ldc);
}

cublasStatus_t CUBLASWINAPI
cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float *alpha,
               const float *A, int lda, const float *x, int incx, const float *beta, float *y,
               int incy)
{
    FOX_CUBLAS_READY(cublasSgemv_v2);
    return blas.cublasSgemv_v2(handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);
}

cublasStatus_t CUBLASWINAPI
cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                   int m, int n, int k, const float *alpha, const float *const Aarray[], int lda,
                   const float *const Barray[], int ldb, const float *beta, float *const Carray[],
                   int ldc, int batchCount)
{
    FOX_CUBLAS_READY(cublasSgemmBatched);
    return blas.cublasSgemmBatched(handle, transa, transb, m, n, k, alpha, Aarray, lda, Barray,
                                   ldb, beta, Carray, ldc, batchCount);
}

cublasStatus_t CUBLASWINAPI
cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                          int m, int n, int k, const float *alpha, const float *A, int lda,
                          long long int strideA, const float *B, int ldb, long long int strideB,
                          const float *beta, float *C, int ldc, long long int strideC,
                          int batchCount)
{
    FOX_CUBLAS_READY(cublasSgemmStridedBatched);
    return blas.cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, strideA,
                                          B, ldb, strideB, beta, C, ldc, strideC, batchCount);
}

cublasStatus_t CUBLASWINAPI
cublasSgemvStridedBatched(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                          const float *alpha, const float *A, int lda, long long int strideA,
                          const float *x, int incx, long long int stridex, const float *beta,
                          float *y, int incy, long long int stridey, int batchCount)
{
    FOX_CUBLAS_READY(cublasSgemvStridedBatched);
    return blas.cublasSgemvStridedBatched(handle, trans, m, n, alpha, A, lda, strideA, x, incx,
                                          stridex, beta, y, incy, stridey, batchCount);
}

cublasStatus_t CUBLASWINAPI
cublasSgemvBatched(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float *alpha,
                   const float *const Aarray[], int lda, const float *const xarray[], int incx,
                   const float *beta, float *const yarray[], int incy, int batchCount)
{
    FOX_CUBLAS_READY(cublasSgemvBatched);
    return blas.cublasSgemvBatched(handle, trans, m, n, alpha, Aarray, lda, xarray, incx, beta,
                                   yarray, incy, batchCount);
}

cublasStatus_t CUBLASWINAPI
cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
             int n, int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
             const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
             cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    FOX_CUBLAS_READY(cublasGemmEx);
    return blas.cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
                             beta, C, Ctype, ldc, computeType, algo);
}

cublasStatus_t CUBLASWINAPI
cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                    int m, int n, int k, const void *alpha, const void *const Aarray[],
                    cudaDataType Atype, int lda, const void *const Barray[], cudaDataType Btype,
                    int ldb, const void *beta, void *const Carray[], cudaDataType Ctype, int ldc,
                    int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    FOX_CUBLAS_READY(cublasGemmBatchedEx);
    return blas.cublasGemmBatchedEx(handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda,
                                    Barray, Btype, ldb, beta, Carray, Ctype, ldc, batchCount,
                                    computeType, algo);
}

cublasStatus_t CUBLASWINAPI
cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const void *alpha,
                           const void *A, cudaDataType Atype, int lda, long long int strideA,
                           const void *B, cudaDataType Btype, int ldb, long long int strideB,
                           const void *beta, void *C, cudaDataType Ctype, int ldc,
                           long long int strideC, int batchCount, cublasComputeType_t computeType,
                           cublasGemmAlgo_t algo)
{
    FOX_CUBLAS_READY(cublasGemmStridedBatchedEx);
    return blas.cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                                           strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc,
                                           strideC, batchCount, computeType, algo);
}
