// cuBLAS on the host: handles and a reference column-major strided-batched
// SGEMM, C_n = alpha op(A_n) op(B_n) + beta C_n, summed in double. It checks
// what cuBLAS checks (sizes, leading dimensions at least the rows of the stored
// matrix) and reads C only when beta != 0, as cuBLAS does.
#include <algorithm>
#include <cstdio>

#include "cublas_v2.h"
#include "internal.h"

namespace cuemu {
void count_blas_handle(int change);
}

using cuemu::internal::take_injected_failure;

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
    if (take_injected_failure("cublasCreate")) return CUBLAS_STATUS_NOT_INITIALIZED;
    *handle = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
    cuemu::count_blas_handle(+1);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    cuemu::count_blas_handle(-1);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    if (take_injected_failure("cublasSetStream")) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (take_injected_failure("cublasSetMathMode")) return CUBLAS_STATUS_INVALID_VALUE;
    handle->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
        case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
        default: return cublasGetStatusName(status);
    }
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount) {
    const auto refuse = [&](cublasStatus_t status, const char* why) {
        std::fprintf(stderr, "[cuemu] cublasSgemmStridedBatched: %s (m %d n %d k %d, lda %d ldb %d ldc %d)\n", why, m,
                     n, k, lda, ldb, ldc);
        return status;
    };
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    ++cuemu::internal::counts().gemms;
    if (m < 0 || n < 0 || k < 0 || batchCount < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, "a negative size");
    // column-major: op(A) is m x k, stored as m x k (N) or k x m (T); likewise B
    if (lda < std::max(1, transa == CUBLAS_OP_N ? m : k)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "lda too small");
    if (ldb < std::max(1, transb == CUBLAS_OP_N ? k : n)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "ldb too small");
    if (ldc < std::max(1, m)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "ldc too small");
    if (handle->math_mode != CUBLAS_DEFAULT_MATH) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "math mode not default");
    for (long long batch = 0; batch < batchCount; ++batch) {
        const float* a = A + batch * strideA;
        const float* b = B + batch * strideB;
        float* c = C + batch * strideC;
        for (long long j = 0; j < n; ++j)
            for (long long i = 0; i < m; ++i) {
                double sum = 0;
                for (long long p = 0; p < k; ++p) {
                    const float x = transa == CUBLAS_OP_N ? a[i + p * lda] : a[p + i * lda];  // op(A)(i, p)
                    const float y = transb == CUBLAS_OP_N ? b[p + j * ldb] : b[j + p * ldb];  // op(B)(p, j)
                    sum += double(x) * double(y);
                }
                float& out = c[i + j * ldc];
                const float value = float(double(*alpha) * sum);
                out = *beta == 0.0f ? value : value + *beta * out;
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}
