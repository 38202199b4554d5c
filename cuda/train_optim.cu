// Reductions and the Adam/AdamW and SGD updates on the device (autograd/device/kernels.h).
// The sums, the Adam update and the clipping and zeroing of gradients take a
// table of pieces, one launch for several models (stacked members) or one.
#include <algorithm>
#include <cmath>

#include "cuda/check.cuh"
#include "autograd/device/kernels.h"

namespace attnlab::device {

namespace {

constexpr int threads = 256;

// Pieces a launch takes by value: its parameters stay under CUDA's 4 KiB
// (32 Adam runs of 96 bytes); more pieces take more launches.
constexpr size_t table_size = 32;
template <class Piece>
struct Table {
    Piece piece[table_size];
};
static_assert(sizeof(Table<AdamRun>) + sizeof(double*) <= 4096, "adam_kernel's parameters");

// `launch(table, count)` for each table_size pieces in turn.
template <class Piece, class Launch>
void by_tables(const std::vector<Piece>& pieces, Launch launch) {
    for (size_t first = 0; first < pieces.size(); first += table_size) {
        const size_t count = std::min(table_size, pieces.size() - first);
        Table<Piece> table{};
        std::copy_n(pieces.begin() + first, count, table.piece);
        launch(table, count);
    }
}

// Blocks of a sum of n: its partials, in the order pass 2 adds them.
__host__ __device__ inline size_t sum_blocks(size_t n) {
    const size_t blocks = n == 0 ? 1 : (n + threads - 1) / threads;
    return blocks < reduce_partials ? blocks : reduce_partials;
}

// Pass 1, piece blockIdx.y: its block b sums its grid-stride share of x into
// partials[b], in double (sum_blocks(n) blocks, whatever the grid's width).
__global__ void partial_sums_kernel(Table<SumPiece> t, bool squares, double* partials) {
    __shared__ double lane_sums[threads];
    const SumPiece& piece = t.piece[blockIdx.y];
    const size_t blocks = sum_blocks(piece.n);
    if (blockIdx.x >= blocks) return;  // the whole block: no barrier waits for it
    double total = 0.0;
    for (size_t e = size_t(blockIdx.x) * threads + threadIdx.x; e < piece.n; e += blocks * threads) {
        const double v = piece.x[e];
        total += squares ? v * v : v;
    }
    lane_sums[threadIdx.x] = total;
    __syncthreads();
    for (int half = threads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) lane_sums[threadIdx.x] += lane_sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.y * reduce_partials + blockIdx.x] = lane_sums[0];
}

// Pass 2: thread p adds piece p's partials in order.
__global__ void sum_partials_kernel(Table<SumPiece> t, size_t count, const double* partials) {
    const size_t p = threadIdx.x;
    if (p >= count) return;
    double total = 0.0;
    for (size_t i = 0; i < sum_blocks(t.piece[p].n); ++i) total += partials[p * reduce_partials + i];
    *t.piece[p].out = total;
}

// x *= factor (zero: x = 0) over piece blockIdx.y.
__global__ void pieces_kernel(Table<ScalePiece> t, bool zero) {
    const ScalePiece& piece = t.piece[blockIdx.y];
    for (size_t e = size_t(blockIdx.x) * threads + threadIdx.x; e < piece.n; e += size_t(gridDim.x) * threads)
        piece.x[e] = zero ? 0.0f : piece.x[e] * piece.factor;
}

__global__ void adam_kernel(Table<AdamRun> t, const double* stats) {
    const double loss = stats[0], squares = stats[1];
    if (!isfinite(loss) || !isfinite(squares)) return;  // the trainer stops on this step; parameters stay
    const AdamRun& run = t.piece[blockIdx.y];
    const AdamScalars& s = run.scalars;
    const double factor = s.max_norm / (sqrt(squares) + 1e-6);
    const bool clip = factor < 1.0;
    const float scale = float(factor);
    for (size_t e = size_t(blockIdx.x) * threads + threadIdx.x; e < run.n; e += size_t(gridDim.x) * threads) {
        const bool decays = e < run.n_decay;
        float g = clip ? run.G[e] * scale : run.G[e];
        float p = run.P[e];
        if (s.decoupled) {
            if (decays) p *= s.shrink;  // AdamW: p -= lr wd p
        } else if (decays) {
            g = g + s.weight_decay * p;  // Adam: L2 term in the gradient
        }
        const float m = s.beta1 * run.M[e] + s.one_minus_beta1 * g;
        const float v = s.beta2 * run.V[e] + s.one_minus_beta2 * g * g;
        run.M[e] = m;
        run.V[e] = v;
        run.P[e] = p - s.step_size * m / (sqrtf(v) / s.sqrt_c2 + s.eps);
    }
}

// The grid of an element-wise launch over `count` pieces: wide enough for the largest.
template <class Piece>
dim3 grid_over(const Table<Piece>& t, size_t count) {
    size_t most = 1;
    for (size_t p = 0; p < count; ++p) most = std::max(most, t.piece[p].n);
    return dim3(unsigned(std::min<size_t>((most + threads - 1) / threads, 8192)), unsigned(count));
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

void sums_to_double(Context& context, const std::vector<SumPiece>& pieces, bool squares, double* partials) {
    by_tables(pieces, [&](const Table<SumPiece>& t, size_t count) {
        size_t widest = 1;
        for (size_t p = 0; p < count; ++p) widest = std::max(widest, sum_blocks(t.piece[p].n));
        partial_sums_kernel<<<dim3(unsigned(widest), unsigned(count)), threads, 0, context.stream()>>>(t, squares, partials);
        check_launch("sums_to_double: partial sums");
        sum_partials_kernel<<<1, unsigned(table_size), 0, context.stream()>>>(t, count, partials);
        check_launch("sums_to_double: totals");
        partials += table_size * reduce_partials;
    });
}

void adam_update(Context& context, const std::vector<AdamRun>& runs, const double* stats) {
    by_tables(runs, [&](const Table<AdamRun>& t, size_t count) {
        adam_kernel<<<grid_over(t, count), threads, 0, context.stream()>>>(t, stats);
        check_launch("adam_update");
    });
}

void scale_pieces(Context& context, const std::vector<ScalePiece>& pieces) {
    by_tables(pieces, [&](const Table<ScalePiece>& t, size_t count) {
        pieces_kernel<<<grid_over(t, count), threads, 0, context.stream()>>>(t, false);
        check_launch("scale_pieces");
    });
}

void zero_pieces(Context& context, const std::vector<ScalePiece>& pieces) {
    by_tables(pieces, [&](const Table<ScalePiece>& t, size_t count) {
        pieces_kernel<<<grid_over(t, count), threads, 0, context.stream()>>>(t, true);
        check_launch("zero_pieces");
    });
}

void fill_zero(Context& context, void* data, size_t bytes) {
    check_cuda(cudaMemsetAsync(data, 0, bytes, context.stream()), "fill_zero");
}

}  // namespace attnlab::device
