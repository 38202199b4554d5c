// The generic kernels of the device seam (autograd/device/primitives.h), each
// checked against the CPU op of the same name. Elementwise kernels run a
// grid-stride loop; row kernels give each row a team of lanes (a warp, or the
// whole block for long rows) whose partial results meet in a fixed tree, so a
// reduction gives the same bits on every run (no atomics).
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "autograd/device/primitives.h"
#include "autograd/pointwise.h"
#include "cuda/check.cuh"
#include "cuda/gemm.cuh"
#include "cuda/warp.cuh"

namespace attnlab::device {

namespace {

constexpr int threads = 256;
constexpr int max_blocks = 65535;  // row kernels loop over further rows

// At least one block: a launch of none is an error.
int grid_for(size_t n) { return int(std::clamp<size_t>((n + threads - 1) / threads, 1, 8192)); }

// Every index e of [0, n) once, over the whole grid.
#define FOR_EACH_INDEX(e, n) \
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < (n); e += size_t(gridDim.x) * blockDim.x)

// ---- strided views ----

// Drops the axes of size 1 and merges an axis into the next where every view
// steps through the two as through one (stride = next size * next stride), so
// that a contiguous or simply broadcast input costs one or two divisions per
// element. Checks the contract: rank <= max_rank, equal sizes, prod(sizes) = n.
void simplify(Strided* views, int count, size_t n, const std::string& where) {
    const unsigned rank = views[0].rank;
    if (rank > max_rank)
        fail("cuda", where + ": a view of rank " + std::to_string(rank) + ", above " + std::to_string(max_rank));
    size_t elements = 1;
    for (unsigned axis = 0; axis < rank; ++axis) elements *= views[0].sizes[axis];
    if (elements != n)
        fail("cuda", where + ": the view has " + std::to_string(elements) + " elements, not " + std::to_string(n));
    for (int v = 1; v < count; ++v) {
        bool same = views[v].rank == rank;
        for (unsigned axis = 0; same && axis < rank; ++axis) same = views[v].sizes[axis] == views[0].sizes[axis];
        if (!same) fail("cuda", where + ": the two views have different sizes");
    }
    unsigned kept = 0;
    for (unsigned axis = 0; axis < rank; ++axis) {
        const size_t size = views[0].sizes[axis];
        if (size == 1) continue;
        bool merges = kept > 0;
        for (int v = 0; merges && v < count; ++v) merges = views[v].strides[kept - 1] == size * views[v].strides[axis];
        for (int v = 0; v < count; ++v) {
            Strided& view = views[v];
            if (merges) {
                view.sizes[kept - 1] *= size;
                view.strides[kept - 1] = view.strides[axis];
            } else {
                view.sizes[kept] = size;
                view.strides[kept] = view.strides[axis];
            }
        }
        if (!merges) ++kept;
    }
    for (int v = 0; v < count; ++v) views[v].rank = kept;
}

// Where element i of the result reads through `at`.
__device__ __forceinline__ size_t offset_of(const Strided& at, size_t i) {
    size_t offset = at.offset;
    for (unsigned axis = at.rank; axis-- > 0;) {
        offset += (i % at.sizes[axis]) * at.strides[axis];
        i /= at.sizes[axis];
    }
    return offset;
}

// The same through two views of equal sizes, with one index decomposition.
__device__ __forceinline__ void offsets_of(const Strided& at_a, const Strided& at_b, size_t i, size_t& a, size_t& b) {
    a = at_a.offset;
    b = at_b.offset;
    for (unsigned axis = at_a.rank; axis-- > 0;) {
        const size_t index = i % at_a.sizes[axis];
        a += index * at_a.strides[axis];
        b += index * at_b.strides[axis];
        i /= at_a.sizes[axis];
    }
}

__device__ __forceinline__ void put(float* out, size_t e, float value, bool accumulate) {
    out[e] = accumulate ? out[e] + value : value;
}

// ---- elementwise ----

__global__ void binary_kernel(BinaryOp op, size_t n, const float* a, Strided at_a, const float* b, Strided at_b,
                              float* out, bool accumulate) {
    FOR_EACH_INDEX(e, n) {
        size_t a_offset, b_offset;
        offsets_of(at_a, at_b, e, a_offset, b_offset);
        put(out, e, binary_value(op, a[a_offset], b[b_offset]), accumulate);
    }
}

__global__ void unary_kernel(UnaryOp op, size_t n, const float* x, float param, float* y) {
    FOR_EACH_INDEX(e, n) y[e] = unary_value(op, x[e], param);
}

__global__ void unary_backward_kernel(UnaryOp op, size_t n, const float* x, const float* y, const float* dy,
                                      float param, float* dx, bool accumulate) {
    FOR_EACH_INDEX(e, n) put(dx, e, unary_grad(op, x, y, e, dy[e], param), accumulate);
}

template <class F>
__global__ void pointwise_kernel(size_t n, const float* x, float param, float* y) {
    FOR_EACH_INDEX(e, n) y[e] = pointwise::value_at<F>(pointwise::Libm{}, x[e], param);
}

template <class F>
__global__ void pointwise_backward_kernel(size_t n, const float* x, const float* dy, float param, float* dx,
                                          bool accumulate) {
    FOR_EACH_INDEX(e, n) put(dx, e, dy[e] * pointwise::derivative_at<F>(pointwise::Libm{}, x[e], param), accumulate);
}

__global__ void masked_fill_kernel(size_t n, const float* x, const uint8_t* mask, float value, float* out,
                                   bool accumulate) {
    FOR_EACH_INDEX(e, n) put(out, e, mask[e] ? value : x[e], accumulate);
}

// ---- layout ----

__global__ void copy_strided_kernel(size_t n, const float* x, Strided at, float* out, bool accumulate) {
    FOR_EACH_INDEX(e, n) put(out, e, x[offset_of(at, e)], accumulate);
}

// ---- rows: a team of `lanes` threads per row ----
//
// lanes 32: a warp per row, 8 rows a block; lanes 256: the block per row. Lane
// l takes columns l, l + lanes, ... in order; the lanes of a warp meet in the
// xor tree of warp.cuh, the 8 warps of a block in order 0..7 through `scratch`.

constexpr size_t long_row = 1024;  // columns above which a row gets the whole block
int lanes_for(size_t cols) { return cols > long_row ? threads : 32; }
int team_grid(size_t rows, int lanes) {
    const size_t per_block = threads / lanes;
    return int(std::clamp<size_t>((rows + per_block - 1) / per_block, 1, max_blocks));
}

// Every row once, to the team of `lanes` threads it falls to; the team leaves
// the loop together (a warp, or the block: the barriers below are reached by all).
#define FOR_EACH_ROW(row, rows, lanes)                                                                           \
    for (size_t row = size_t(blockIdx.x) * (blockDim.x / (lanes)) + threadIdx.x / (lanes); row < (rows); \
         row += size_t(gridDim.x) * (blockDim.x / (lanes)))

constexpr int warps_per_block = threads / 32;

__device__ __forceinline__ float team_sum(float value, int lanes, float* scratch) {
    value = warp_sum(value);
    if (lanes == 32) return value;
    __syncthreads();  // every warp has read scratch since its last use
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
    __syncthreads();
    float total = scratch[0];
    for (int w = 1; w < warps_per_block; ++w) total += scratch[w];
    return total;
}

__device__ __forceinline__ float team_max(float value, int lanes, float* scratch) {
    value = warp_max(value);
    if (lanes == 32) return value;
    __syncthreads();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
    __syncthreads();
    float best = scratch[0];
    for (int w = 1; w < warps_per_block; ++w) best = max_or_nan(best, scratch[w]);
    return best;
}

// (value, index) <- (other, other_index) when the other comes first in the
// order NaN, then larger, then (on a tie) smaller index: the first column where
// a row's max is, or its first NaN. A total order, so any tree gives the same.
__device__ __forceinline__ void keep_first_max(float& value, int& index, float other, int other_index) {
    const bool nan = value != value, other_nan = other != other;
    const bool other_wins = nan || other_nan ? other_nan && (!nan || other_index < index)
                                             : other > value || (other == value && other_index < index);
    if (other_wins) {
        value = other;
        index = other_index;
    }
}

__device__ __forceinline__ void team_first_max(float& value, int& index, int lanes, float* scratch_values,
                                               int* scratch_indices) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, value, offset);
        const int other_index = __shfl_xor_sync(0xffffffffu, index, offset);
        keep_first_max(value, index, other, other_index);
    }
    if (lanes == 32) return;
    __syncthreads();
    if (threadIdx.x % 32 == 0) {
        scratch_values[threadIdx.x / 32] = value;
        scratch_indices[threadIdx.x / 32] = index;
    }
    __syncthreads();
    value = scratch_values[0];
    index = scratch_indices[0];
    for (int w = 1; w < warps_per_block; ++w) keep_first_max(value, index, scratch_values[w], scratch_indices[w]);
}

// x (rows, cols) -> out (rows)
__global__ void sum_rows_kernel(int lanes, size_t rows, size_t cols, const float* x, float scale, float* out,
                                bool accumulate) {
    __shared__ float scratch[warps_per_block];
    const size_t lane = threadIdx.x % lanes;
    FOR_EACH_ROW(row, rows, lanes) {
        const float* xr = x + row * cols;
        float total = 0.0f;
        for (size_t c = lane; c < cols; c += lanes) total += xr[c];
        total = team_sum(total, lanes, scratch);
        if (lane == 0) put(out, row, scale * total, accumulate);
    }
}

// x (rows, cols) -> out, index (rows)
__global__ void max_rows_kernel(int lanes, size_t rows, size_t cols, const float* x, float* out, int32_t* index) {
    __shared__ float scratch_values[warps_per_block];
    __shared__ int scratch_indices[warps_per_block];
    const size_t lane = threadIdx.x % lanes;
    FOR_EACH_ROW(row, rows, lanes) {
        const float* xr = x + row * cols;
        float best = -INFINITY;
        int best_index = INT_MAX;  // a lane without columns loses to every column
        for (size_t c = lane; c < cols; c += lanes) keep_first_max(best, best_index, xr[c], int(c));
        team_first_max(best, best_index, lanes, scratch_values, scratch_indices);
        if (lane == 0) {
            out[row] = best;
            index[row] = best_index;
        }
    }
}

// index, dy (rows) -> dx (rows, cols): one thread per row, each its own element
__global__ void scatter_rows_kernel(size_t rows, size_t cols, const int32_t* index, const float* dy, float* dx) {
    FOR_EACH_INDEX(row, rows) dx[row * cols + size_t(index[row])] += dy[row];
}

// x (rows, cols) -> y (rows, cols); y may be x (each element is read, then written, by one thread)
__global__ void softmax_rows_kernel(int lanes, size_t rows, size_t cols, const float* x, bool log, float* y) {
    __shared__ float scratch[warps_per_block];
    const size_t lane = threadIdx.x % lanes;
    FOR_EACH_ROW(row, rows, lanes) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float m = -INFINITY;
        for (size_t c = lane; c < cols; c += lanes) m = max_or_nan(m, xr[c]);
        m = team_max(m, lanes, scratch);
        float s = 0.0f;
        for (size_t c = lane; c < cols; c += lanes) s += expf(xr[c] - m);
        s = team_sum(s, lanes, scratch);
        if (log) {
            const float log_s = logf(s);
            for (size_t c = lane; c < cols; c += lanes) yr[c] = xr[c] - m - log_s;
        } else {
            for (size_t c = lane; c < cols; c += lanes) yr[c] = expf(xr[c] - m) / s;
        }
    }
}

// y, dy (rows, cols) -> dx (rows, cols)
__global__ void softmax_rows_backward_kernel(int lanes, size_t rows, size_t cols, const float* y, const float* dy,
                                             bool log, float* dx, bool accumulate) {
    __shared__ float scratch[warps_per_block];
    const size_t lane = threadIdx.x % lanes;
    FOR_EACH_ROW(row, rows, lanes) {
        const float *yr = y + row * cols, *gr = dy + row * cols;
        float* dxr = dx + row * cols;
        float s = 0.0f;  // sum(dy y), or sum(dy) for log_softmax
        for (size_t c = lane; c < cols; c += lanes) s += log ? gr[c] : gr[c] * yr[c];
        s = team_sum(s, lanes, scratch);
        for (size_t c = lane; c < cols; c += lanes)
            put(dxr, c, log ? gr[c] - expf(yr[c]) * s : yr[c] * (gr[c] - s), accumulate);
    }
}

// ---- products ----

// C = beta C, for an empty inner dimension (beta 0 never reads C, as in cuBLAS)
__global__ void scale_matrix_kernel(size_t n, float beta, float* C) {
    FOR_EACH_INDEX(e, n) C[e] = beta == 0.0f ? 0.0f : beta * C[e];
}

int as_int(size_t value, const char* what) {
    if (value > size_t(INT_MAX))
        fail("cuda", std::string("gemm: ") + what + " " + std::to_string(value) + " above INT_MAX");
    return int(value);
}

long long as_long(size_t value, const char* what) {
    if (value > size_t(LLONG_MAX)) fail("cuda", std::string("gemm: ") + what + " above LLONG_MAX");
    return (long long)value;
}

}  // namespace

void binary(Context& context, BinaryOp op, size_t n, const float* a, const Strided& at_a, const float* b,
            const Strided& at_b, float* out, bool accumulate) {
    if (n == 0) return;
    Strided views[2] = {at_a, at_b};
    simplify(views, 2, n, "binary");
    binary_kernel<<<grid_for(n), threads, 0, context.stream()>>>(op, n, a, views[0], b, views[1], out, accumulate);
    check_launch("binary");
}

void unary(Context& context, UnaryOp op, size_t n, const float* x, float param, float* y) {
    if (n == 0) return;
    unary_kernel<<<grid_for(n), threads, 0, context.stream()>>>(op, n, x, param, y);
    check_launch("unary");
}

void unary_backward(Context& context, UnaryOp op, size_t n, const float* x, const float* y, const float* dy,
                    float param, float* dx, bool accumulate) {
    if (n == 0) return;
    unary_backward_kernel<<<grid_for(n), threads, 0, context.stream()>>>(op, n, x, y, dy, param, dx, accumulate);
    check_launch("unary_backward");
}

void pointwise(Context& context, size_t function, size_t n, const float* x, float param, float* y) {
    if (n == 0) return;
    pointwise::visit(function, [&]<class F>() {
        pointwise_kernel<F><<<grid_for(n), threads, 0, context.stream()>>>(n, x, param, y);
    });
    check_launch("pointwise");
}

void pointwise_backward(Context& context, size_t function, size_t n, const float* x, const float* dy, float param,
                        float* dx, bool accumulate) {
    if (n == 0) return;
    pointwise::visit(function, [&]<class F>() {
        pointwise_backward_kernel<F><<<grid_for(n), threads, 0, context.stream()>>>(n, x, dy, param, dx, accumulate);
    });
    check_launch("pointwise_backward");
}

void masked_fill(Context& context, size_t n, const float* x, const uint8_t* mask, float value, float* out,
                 bool accumulate) {
    if (n == 0) return;
    masked_fill_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, x, mask, value, out, accumulate);
    check_launch("masked_fill");
}

void copy_strided(Context& context, size_t n, const float* x, const Strided& at, float* out, bool accumulate) {
    if (n == 0) return;
    Strided view = at;
    simplify(&view, 1, n, "copy_strided");
    copy_strided_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, x, view, out, accumulate);
    check_launch("copy_strided");
}

void sum_rows(Context& context, size_t rows, size_t cols, const float* x, float scale, float* out, bool accumulate) {
    if (rows == 0) return;  // cols 0: every row sums to 0
    const int lanes = lanes_for(cols);
    sum_rows_kernel<<<team_grid(rows, lanes), threads, 0, context.stream()>>>(lanes, rows, cols, x, scale, out,
                                                                              accumulate);
    check_launch("sum_rows");
}

void max_rows(Context& context, size_t rows, size_t cols, const float* x, float* out, int32_t* index) {
    if (rows == 0) return;
    if (cols == 0) fail("cuda", "max_rows: rows of 0 columns have no maximum");
    if (cols > size_t(INT_MAX)) fail("cuda", "max_rows: " + std::to_string(cols) + " columns, above an int32 index");
    const int lanes = lanes_for(cols);
    max_rows_kernel<<<team_grid(rows, lanes), threads, 0, context.stream()>>>(lanes, rows, cols, x, out, index);
    check_launch("max_rows");
}

void scatter_rows(Context& context, size_t rows, size_t cols, const int32_t* index, const float* dy, float* dx) {
    if (rows == 0 || cols == 0) return;
    scatter_rows_kernel<<<grid_for(rows), threads, 0, context.stream()>>>(rows, cols, index, dy, dx);
    check_launch("scatter_rows");
}

void softmax_rows(Context& context, size_t rows, size_t cols, const float* x, bool log, float* y) {
    if (rows == 0 || cols == 0) return;
    const int lanes = lanes_for(cols);
    softmax_rows_kernel<<<team_grid(rows, lanes), threads, 0, context.stream()>>>(lanes, rows, cols, x, log, y);
    check_launch("softmax_rows");
}

void softmax_rows_backward(Context& context, size_t rows, size_t cols, const float* y, const float* dy, bool log,
                           float* dx, bool accumulate) {
    if (rows == 0 || cols == 0) return;
    const int lanes = lanes_for(cols);
    softmax_rows_backward_kernel<<<team_grid(rows, lanes), threads, 0, context.stream()>>>(lanes, rows, cols, y, dy,
                                                                                           log, dx, accumulate);
    check_launch("softmax_rows_backward");
}

void gemm(Context& context, size_t batch, size_t M, size_t N, size_t K, float alpha, const MatrixArg& A,
          const MatrixArg& B, float beta, float* C) {
    if (batch == 0 || M == 0 || N == 0) return;
    if (K == 0) {  // op(A) op(B) is all zeros; cuBLAS would still insist on leading dimensions of at least 1
        const size_t n = batch * M * N;
        scale_matrix_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, beta, C);
        check_launch("gemm: empty inner dimension");
        return;
    }
    const GemmOperand a{A.data, as_int(A.ld, "A's leading dimension"), as_long(A.stride, "A's batch stride"),
                        A.transposed};
    const GemmOperand b{B.data, as_int(B.ld, "B's leading dimension"), as_long(B.stride, "B's batch stride"),
                        B.transposed};
    gemm_batched(context, as_int(M, "M"), as_int(N, "N"), as_int(K, "K"), alpha, a, b, beta, C, as_int(N, "N"),
                 as_long(M * N, "M N"), as_int(batch, "batch"), "gemm");
}

}  // namespace attnlab::device
