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

// y_g (M, N) = x_g W_g^T + b_g for g < groups, x_g at x + g x_stride (0: one x for
// every group), each group's rows from its own bias.
void project(Context& context, size_t M, size_t N, size_t K, const float* x, long long x_stride, const float* W,
             const float* b, float* y, size_t groups, const char* where) {
    if (b != nullptr) {
        const size_t n = groups * M * N;
        const int grid = int(std::clamp<size_t>((n + threads - 1) / threads, 1, 8192));
        broadcast_rows_kernel<<<grid, threads, 0, context.stream()>>>(n, M * N, N, b, y);
        check_launch(where);
    }
    gemm_batched(context, int(M), int(N), int(K), 1.0f, {x, int(K), x_stride}, {W, int(K), (long long)(N * K), true},
                 b != nullptr ? 1.0f : 0.0f, y, int(N), (long long)(M * N), int(groups), where);
}

// dW_g += dy_g^T (N, M) x_g (M, K); db_g += column sums of dy_g.
void weight_grads(Context& context, size_t M, size_t N, size_t K, const float* x, long long x_stride, const float* dy,
                  float* dW, float* db, size_t groups, const char* where) {
    gemm_batched(context, int(N), int(K), int(M), 1.0f, {dy, int(N), (long long)(M * N), true}, {x, int(K), x_stride}, 1.0f,
                 dW, int(K), (long long)(N * K), int(groups), where);
    if (db != nullptr) column_sums(context, M, N, dy, db, true, groups);
}

}  // namespace

void linear_forward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* b,
                    float* y, size_t groups) {
    project(context, M, N, K, x, 0, W, b, y, groups, "linear_forward: x W^T");  // x shared by the groups (stride 0)
}

void linear_backward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* dy,
                     float* dx, bool accumulate, float* dW, float* db, size_t groups) {
    // dx (M, K) (+)= dy_g (M, N) W_g (N, K), summed over the groups
    if (dx != nullptr)
        for (size_t g = 0; g < groups; ++g)
            gemm(context, M, K, N, {dy + g * M * N, int(N), 0}, {W + g * N * K, int(K), 0},
                 accumulate || g > 0 ? 1.0f : 0.0f, dx, K, "linear_backward: dy W");
    weight_grads(context, M, N, K, x, 0, dy, dW, db, groups, "linear_backward: dy^T x");
}

void linear_members_forward(Context& context, size_t members, size_t M, size_t N, size_t K, const float* x,
                            const float* W, const float* b, float* y) {
    project(context, M, N, K, x, (long long)(M * K), W, b, y, members, "linear_members_forward: x_g W_g^T");
}

void linear_members_backward(Context& context, size_t members, size_t M, size_t N, size_t K, const float* x,
                             const float* W, const float* dy, float* dx, bool accumulate, float* dW, float* db) {
    // dx_g (M, K) (+)= dy_g (M, N) W_g (N, K), every member's in one batched GEMM
    if (dx != nullptr)
        gemm_batched(context, int(M), int(K), int(N), 1.0f, {dy, int(N), (long long)(M * N)}, {W, int(K), (long long)(N * K)},
                     accumulate ? 1.0f : 0.0f, dx, int(K), (long long)(M * K), int(members), "linear_members_backward: dy_g W_g");
    weight_grads(context, M, N, K, x, (long long)(M * K), dy, dW, db, members, "linear_members_backward: dy_g^T x_g");
}

}  // namespace attnlab::device
