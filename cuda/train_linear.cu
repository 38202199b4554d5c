// Linear layers on cuBLAS (autograd/device/kernels.h): y = x W^T + b and its backward,
// each one GEMM (gemm.cuh turns the row-major products into cuBLAS's
// column-major ones). The bias starts y and the GEMM adds onto it, as the CPU op.
#include <algorithm>

#include "cuda/check.cuh"
#include "cuda/gemm.cuh"
#include "autograd/device/kernels.h"

namespace attnlab::device {

namespace {

constexpr int threads = 256;

// y (G, M, N) = b (G, N) broadcast over the rows of each group; MN = M N
__global__ void broadcast_rows_kernel(size_t n, size_t MN, size_t N, const float* b, float* y) {
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x)
        y[e] = b[e / MN * N + e % N];
}

void gemm(Context& context, size_t M, size_t N, size_t K, const GemmOperand& A, const GemmOperand& B, float beta,
          float* C, size_t ldc, const char* where) {
    gemm_batched(context, int(M), int(N), int(K), 1.0f, A, B, beta, C, int(ldc), 0, 1, where);
}

}  // namespace

void linear_forward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* b,
                    float* y, size_t groups) {
    if (b != nullptr) {
        const size_t n = groups * M * N;
        const int grid = int(std::clamp<size_t>((n + threads - 1) / threads, 1, 8192));
        broadcast_rows_kernel<<<grid, threads, 0, context.stream()>>>(n, M * N, N, b, y);
        check_launch("linear_forward: bias");
    }
    // y_g (M, N) (+)= x (M, K) W_g^T (K, N), x shared by the groups (stride 0)
    gemm_batched(context, int(M), int(N), int(K), 1.0f, {x, int(K), 0}, {W, int(K), (long long)(N * K), true},
                 b != nullptr ? 1.0f : 0.0f, y, int(N), (long long)(M * N), int(groups), "linear_forward: x W^T");
}

void linear_backward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* dy,
                     float* dx, bool accumulate, float* dW, float* db, size_t groups) {
    // dx (M, K) (+)= dy_g (M, N) W_g (N, K), summed over the groups
    if (dx != nullptr)
        for (size_t g = 0; g < groups; ++g)
            gemm(context, M, K, N, {dy + g * M * N, int(N), 0}, {W + g * N * K, int(K), 0},
                 accumulate || g > 0 ? 1.0f : 0.0f, dx, K, "linear_backward: dy W");
    // dW_g (N, K) += dy_g^T (N, M) x (M, K)
    gemm_batched(context, int(N), int(K), int(M), 1.0f, {dy, int(N), (long long)(M * N), true}, {x, int(K), 0}, 1.0f, dW,
                 int(K), (long long)(N * K), int(groups), "linear_backward: dy^T x");
    if (db != nullptr) column_sums(context, M, N, dy, db, true, groups);
}

}  // namespace attnlab::device
