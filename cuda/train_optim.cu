// Reductions and the Adam/AdamW and SGD updates on the device (autograd/device/kernels.h).
#include <algorithm>
#include <cmath>

#include "cuda/check.cuh"
#include "autograd/device/kernels.h"

namespace attnlab::device {

namespace {

constexpr int threads = 256;

// Pass 1: block b sums its grid-stride share of x into partials[b], in double.
__global__ void partial_sums_kernel(size_t n, const float* x, bool squares, double* partials) {
    __shared__ double lane_sums[threads];
    double total = 0.0;
    for (size_t e = size_t(blockIdx.x) * threads + threadIdx.x; e < n; e += size_t(gridDim.x) * threads) {
        const double v = x[e];
        total += squares ? v * v : v;
    }
    lane_sums[threadIdx.x] = total;
    __syncthreads();
    for (int half = threads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) lane_sums[threadIdx.x] += lane_sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = lane_sums[0];
}

// Pass 2: one thread adds the partials in order.
__global__ void sum_partials_kernel(int count, const double* partials, double* out) {
    double total = 0.0;
    for (int i = 0; i < count; ++i) total += partials[i];
    *out = total;
}

__global__ void adam_kernel(size_t n, size_t n_decay, float* P, const float* G, float* M, float* V, AdamScalars s,
                            const double* stats) {
    const double loss = stats[0], squares = stats[1];
    if (!isfinite(loss) || !isfinite(squares)) return;  // the trainer stops on this step; parameters stay
    const double factor = s.max_norm / (sqrt(squares) + 1e-6);
    const bool clip = factor < 1.0;
    const float scale = float(factor);
    for (size_t e = size_t(blockIdx.x) * threads + threadIdx.x; e < n; e += size_t(gridDim.x) * threads) {
        const bool decays = e < n_decay;
        float g = clip ? G[e] * scale : G[e];
        float p = P[e];
        if (s.decoupled) {
            if (decays) p *= s.shrink;  // AdamW: p -= lr wd p
        } else if (decays) {
            g = g + s.weight_decay * p;  // Adam: L2 term in the gradient
        }
        const float m = s.beta1 * M[e] + s.one_minus_beta1 * g;
        const float v = s.beta2 * V[e] + s.one_minus_beta2 * g * g;
        M[e] = m;
        V[e] = v;
        P[e] = p - s.step_size * m / (sqrtf(v) / s.sqrt_c2 + s.eps);
    }
}

__global__ void sgd_kernel(size_t n, float* P, const float* G, float* velocity, SgdScalars s, const double* stats) {
    const double loss = stats[0], squares = stats[1];
    if (!isfinite(loss) || !isfinite(squares)) return;
    const double factor = s.max_norm / (sqrt(squares) + 1e-6);
    const bool clip = factor < 1.0;
    const float scale = float(factor);
    for (size_t e = size_t(blockIdx.x) * threads + threadIdx.x; e < n; e += size_t(gridDim.x) * threads) {
        const float g = clip ? G[e] * scale : G[e];
        float d = g + s.weight_decay * P[e];
        if (s.momentum != 0.0f) {
            const float v = s.started ? s.momentum * velocity[e] + d : d;
            velocity[e] = v;
            d = s.nesterov ? d + s.momentum * v : v;
        }
        P[e] -= s.lr * d;
    }
}

}  // namespace

void sgd_update(Context& context, size_t n, float* P, const float* G, float* velocity, const SgdScalars& scalars,
                const double* stats) {
    const int grid = int(std::clamp<size_t>((n + threads - 1) / threads, 1, 8192));
    sgd_kernel<<<grid, threads, 0, context.stream()>>>(n, P, G, velocity, scalars, stats);
    check_launch("sgd_update");
}

void sum_to_double(Context& context, size_t n, const float* x, bool squares, double* out, double* partials) {
    const int blocks = int(std::min<size_t>(reduce_partials, std::max<size_t>(1, (n + threads - 1) / threads)));
    partial_sums_kernel<<<blocks, threads, 0, context.stream()>>>(n, x, squares, partials);
    check_launch("sum_to_double: partial sums");
    sum_partials_kernel<<<1, 1, 0, context.stream()>>>(blocks, partials, out);
    check_launch("sum_to_double: total");
}

void adam_update(Context& context, size_t n, size_t n_decay, float* P, const float* G, float* M, float* V,
                 const AdamScalars& scalars, const double* stats) {
    const int grid = int(std::min<size_t>((n + threads - 1) / threads, 8192));
    adam_kernel<<<std::max(grid, 1), threads, 0, context.stream()>>>(n, n_decay, P, G, M, V, scalars, stats);
    check_launch("adam_update");
}

void fill_zero(Context& context, void* data, size_t bytes) {
    check_cuda(cudaMemsetAsync(data, 0, bytes, context.stream()), "fill_zero");
}

}  // namespace attnlab::device
