// Linear layers on cuBLAS (autograd/device/kernels.h): y = x W^T + b and its backward,
// each one GEMM (gemm.cuh turns the row-major products into cuBLAS's
// column-major ones). The bias starts y and the GEMM adds onto it, as the CPU op.
#include <algorithm>

#include "cuda/check.cuh"
#include "cuda/gemm.cuh"
#include "autograd/device/kernels.h"

namespace attnlab::cuda {

namespace {

constexpr int threads = 256;

// y (M, N) = b broadcast over the rows
__global__ void broadcast_rows_kernel(size_t n, size_t N, const float* b, float* y) {
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x)
        y[e] = b[e % N];
}

void gemm(Context& context, size_t M, size_t N, size_t K, const GemmOperand& A, const GemmOperand& B, float beta,
          float* C, size_t ldc, const char* where) {
    gemm_batched(context, int(M), int(N), int(K), 1.0f, A, B, beta, C, int(ldc), 0, 1, where);
}

}  // namespace

void linear_forward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* b,
                    float* y) {
    if (b != nullptr) {
        const size_t n = M * N;
        const int grid = int(std::clamp<size_t>((n + threads - 1) / threads, 1, 8192));
        broadcast_rows_kernel<<<grid, threads, 0, context.stream()>>>(n, N, b, y);
        check_launch("linear_forward: bias");
    }
    // y (M, N) (+)= x (M, K) W^T (K, N)
    gemm(context, M, N, K, {x, int(K), 0}, {W, int(K), 0, true}, b != nullptr ? 1.0f : 0.0f, y, N,
         "linear_forward: x W^T");
}

void linear_backward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* dy,
                     float* dx, bool accumulate, float* dW, float* db) {
    // dx (M, K) (+)= dy (M, N) W (N, K)
    if (dx != nullptr)
        gemm(context, M, K, N, {dy, int(N), 0}, {W, int(K), 0}, accumulate ? 1.0f : 0.0f, dx, K,
             "linear_backward: dy W");
    // dW (N, K) += dy^T (N, M) x (M, K)
    gemm(context, N, K, M, {dy, int(N), 0, true}, {x, int(K), 0}, 1.0f, dW, K, "linear_backward: dy^T x");
    if (db != nullptr) column_sums(context, M, N, dy, db, true);
}

}  // namespace attnlab::cuda
