// Embedding, layer norm, activations, layout and the loss on the device,
// forward beside backward (autograd/device/kernels.h). Elementwise kernels run a
// grid-stride loop; row kernels give each row one warp.
#include <algorithm>
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/mask.cuh"
#include "autograd/device/kernels.h"
#include "cuda/warp.cuh"

namespace attnlab::device {

namespace {

constexpr int threads = 256;
constexpr int rows_per_block = 8;  // row kernels: 8 warps of 32 lanes

// At least one block: a launch of none is an error, and the kernels skip an empty range.
int grid_for(size_t n) { return int(std::clamp<size_t>((n + threads - 1) / threads, 1, 8192)); }
int row_grid(size_t rows) { return int(std::max<size_t>((rows + rows_per_block - 1) / rows_per_block, 1)); }

// Every index e of [0, n) once, over the whole grid.
#define FOR_EACH_INDEX(e, n) \
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < (n); e += size_t(gridDim.x) * blockDim.x)

// ---- embedding + positions ----

__global__ void embedding_forward_kernel(size_t n, size_t T, size_t D, const int32_t* tokens, const float* E,
                                         const float* P, float* x) {
    FOR_EACH_INDEX(e, n) {
        const size_t row = e / D, c = e % D, t = row % T;
        x[e] = E[size_t(tokens[row]) * D + c] + (P != nullptr ? P[t * D + c] : 0.0f);
    }
}

__global__ void embedding_scatter_kernel(size_t n, size_t D, const int32_t* tokens, const float* dx, float* dE) {
    FOR_EACH_INDEX(e, n) atomicAdd(&dE[size_t(tokens[e / D]) * D + e % D], dx[e]);
}

// ---- column sums: block (32, 16) over 32 columns, 16 lanes down the rows ----

constexpr int column_lanes = 16;

// grid (ceil(cols / 32), groups); x (groups, rows, cols), out (groups, cols)
__global__ void column_sums_kernel(size_t rows, size_t cols, const float* x, float* out, bool accumulate) {
    __shared__ float partial[column_lanes][33];
    const size_t c = size_t(blockIdx.x) * 32 + threadIdx.x;
    x += size_t(blockIdx.y) * rows * cols;
    out += size_t(blockIdx.y) * cols;
    float total = 0.0f;
    if (c < cols)
        for (size_t r = threadIdx.y; r < rows; r += column_lanes) total += x[r * cols + c];
    partial[threadIdx.y][threadIdx.x] = total;
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) return;
    float sum = 0.0f;
    for (int lane = 0; lane < column_lanes; ++lane) sum += partial[lane][threadIdx.x];
    out[c] = accumulate ? out[c] + sum : sum;
}

// ---- activations ----

__device__ __forceinline__ float normal_cdf(float x) { return 0.5f * (1.0f + erff(x * 0.70710678118654752f)); }

__global__ void activation_forward_kernel(DeviceActivation activation, size_t n, const float* x, float* y) {
    FOR_EACH_INDEX(e, n) {
        const float v = x[e];
        y[e] = activation == DeviceActivation::gelu ? v * normal_cdf(v) : max_or_nan(v, 0.0f);  // NaN stays, as in torch
    }
}

__global__ void activation_backward_kernel(DeviceActivation activation, size_t n, const float* x, const float* dy,
                                           float* dx) {
    FOR_EACH_INDEX(e, n) {
        const float v = x[e];
        float slope;
        if (activation == DeviceActivation::gelu) {
            const float density = 0.39894228040143268f * expf(-0.5f * v * v);  // phi(x)
            slope = normal_cdf(v) + v * density;                                // d/dx x Phi(x)
        } else {
            slope = v > 0.0f ? 1.0f : 0.0f;
        }
        dx[e] = dy[e] * slope;
    }
}

// ---- rotary positions: one thread per pair ----

__global__ void rotary_kernel(size_t pairs, size_t T, size_t H, size_t d, size_t offset, double base, double sign,
                              const float* x, float* y) {
    const size_t half = d / 2;
    FOR_EACH_INDEX(e, pairs) {
        const size_t c = e % half, row = e / half, t = (row / H) % T;  // row: (b, t, h)
        const double angle = double(offset + t) * pow(base, -2.0 * double(c) / double(d));
        const float cs = float(cos(angle)), sn = float(sign * sin(angle));
        const size_t at = row * d + c;
        const float lo = x[at], hi = x[at + half];
        y[at] = lo * cs - hi * sn;
        y[at + half] = hi * cs + lo * sn;
    }
}

// ---- dropout: the keep scale of element e, from (seed, e) alone ----

__device__ __forceinline__ float keep_scale(uint64_t seed, size_t e, float p, float scale) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t(e) + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1)
    return u < p ? 0.0f : scale;
}

__global__ void dropout_kernel(size_t n, const float* x, float p, float scale, uint64_t seed, float* y) {
    FOR_EACH_INDEX(e, n) y[e] = x[e] * keep_scale(seed, e, p, scale);
}

// ---- elementwise ----

__global__ void add_into_kernel(size_t n, const float* a, float* out) {
    FOR_EACH_INDEX(e, n) out[e] += a[e];
}

__global__ void copy_rows_kernel(size_t n, size_t width, const float* from, size_t from_ld, float* to, size_t to_ld,
                                 bool accumulate) {
    FOR_EACH_INDEX(e, n) {
        const size_t r = e / width, c = e % width;
        to[r * to_ld + c] = accumulate ? to[r * to_ld + c] + from[r * from_ld + c] : from[r * from_ld + c];
    }
}

__global__ void add_broadcast_kernel(size_t n, size_t period, const float* a, const float* b, float* out) {
    FOR_EACH_INDEX(e, n) out[e] = a[e] + b[e % period];
}

__global__ void scale_kernel(size_t n, const float* x, float factor, const float* device_factor, float* out,
                             bool accumulate) {
    const float f = device_factor != nullptr ? factor * *device_factor : factor;
    FOR_EACH_INDEX(e, n) out[e] = accumulate ? out[e] + x[e] * f : x[e] * f;
}

// ---- layout: merged rows <-> heads; `to_merged` picks the direction ----

// Element e of merged (B, T, H d) and its place in heads (B, H, T, d).
__global__ void heads_layout_kernel(size_t n, size_t H, size_t T, size_t d, float* heads, float* merged,
                                    bool to_merged) {
    FOR_EACH_INDEX(e, n) {
        const size_t row = e / (H * d), col = e % (H * d), b = row / T, t = row % T, h = col / d, i = col % d;
        float* head_element = heads + ((b * H + h) * T + t) * d + i;
        if (to_merged) merged[e] = *head_element;
        else *head_element = merged[e];
    }
}

// ---- loss: one warp per row ----

__global__ void cross_entropy_kernel(size_t rows, int V, const float* logits, const int32_t* targets,
                                     const float* weight, float* loss_rows, float* dlogits) {
    const size_t row = size_t(blockIdx.x) * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    const float* z = logits + row * V;
    float* dz = dlogits + row * V;
    const float w = weight[row];
    if (w == 0.0f) {  // left out by the loss mask: no loss, no gradient
        for (int j = lane; j < V; j += 32) dz[j] = 0.0f;
        if (lane == 0) loss_rows[row] = 0.0f;
        return;
    }
    float row_max = -INFINITY;
    for (int j = lane; j < V; j += 32) row_max = max_or_nan(row_max, z[j]);
    row_max = warp_max(row_max);
    float total = 0.0f;
    for (int j = lane; j < V; j += 32) total += expf(z[j] - row_max);
    const float lse = row_max + logf(warp_sum(total));
    const int target = targets[row];
    for (int j = lane; j < V; j += 32) dz[j] = w * (expf(z[j] - lse) - (j == target ? 1.0f : 0.0f));
    if (lane == 0) loss_rows[row] = w * (lse - z[target]);
}

// ---- attention statistics: one warp per (b, h, i) query row ----

__global__ void score_moments_kernel(AttentionDims s, const float* q, const float* k, MaskView mask, float scale,
                                     double* moments) {
    const size_t rows = s.B * s.H * s.Tq;
    const size_t row = size_t(blockIdx.x) * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    const int i = int(row % s.Tq), h = int((row / s.Tq) % s.H), b = int(row / (s.Tq * s.H));
    const int kv = h / int(s.H / s.H_kv);
    const float* qi = q + row * s.d;
    const float* kb = k + (size_t(b) * s.H_kv + kv) * s.Tk * s.d;
    double count = 0, sum = 0, squares = 0;
    const float slope = alibi_slope_of(mask, h, int(s.H));
    for (int j = lane; j < int(s.Tk); j += 32) {
        if (!mask_allows(mask, b, i, j, int(s.Tq), int(s.Tk))) continue;
        float dot = 0.0f;
        for (size_t c = 0; c < s.d; ++c) dot += qi[c] * kb[size_t(j) * s.d + c];
        const double score = double(scale * dot + alibi_term(slope, i, j, int(s.Tq), int(s.Tk)));
        count += 1;
        sum += score;
        squares += score * score;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        count += __shfl_xor_sync(0xffffffffu, count, offset);
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    }
    if (lane == 0) {
        atomicAdd(&moments[h * 3 + 0], count);
        atomicAdd(&moments[h * 3 + 1], sum);
        atomicAdd(&moments[h * 3 + 2], squares);
    }
}

// ---- stacked members' parameters: piece blockIdx.y, member m's row of it ----

__global__ void members_to_stacked_kernel(size_t members, const size_t* table, const float* const* member_blocks,
                                          float* stacked) {
    const size_t* piece = table + 3 * size_t(blockIdx.y);
    const size_t count = piece[2];
    FOR_EACH_INDEX(i, members * count) stacked[piece[0] + i] = member_blocks[i / count][piece[1] + i % count];
}

__global__ void stacked_to_members_kernel(size_t members, const size_t* table, const float* stacked,
                                          float* const* member_blocks, bool accumulate) {
    const size_t* piece = table + 3 * size_t(blockIdx.y);
    const size_t count = piece[2];
    FOR_EACH_INDEX(i, members * count) {
        float& to = member_blocks[i / count][piece[1] + i % count];
        to = accumulate ? to + stacked[piece[0] + i] : stacked[piece[0] + i];
    }
}
}  // namespace

void score_moments(Context& context, const AttentionDims& dims, const float* q, const float* k, const MaskView& mask,
                   float scale, double* moments) {
    score_moments_kernel<<<row_grid(dims.B * dims.H * dims.Tq), rows_per_block * 32, 0, context.stream()>>>(
        dims, q, k, mask, scale, moments);
    check_launch("score_moments");
}

void embedding_forward(Context& context, size_t B, size_t T, size_t D, const int32_t* tokens, const float* E,
                       const float* P, float* x) {
    const size_t n = B * T * D;
    embedding_forward_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, T, D, tokens, E, P, x);
    check_launch("embedding_forward");
}

void embedding_backward(Context& context, size_t B, size_t T, size_t D, const int32_t* tokens, const float* dx,
                        float* dE, float* dP) {
    const size_t n = B * T * D;
    embedding_scatter_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, D, tokens, dx, dE);
    check_launch("embedding_backward: scatter");
    if (dP != nullptr) column_sums(context, B, T * D, dx, dP, true);  // dx as (B, T D): sum over the batch
}

void column_sums(Context& context, size_t rows, size_t cols, const float* x, float* out, bool accumulate, size_t groups) {
    if (cols == 0 || groups == 0) return;
    const dim3 block(32, column_lanes), grid(unsigned((cols + 31) / 32), unsigned(groups));
    column_sums_kernel<<<grid, block, 0, context.stream()>>>(rows, cols, x, out, accumulate);
    check_launch("column_sums");
}

void activation_forward(Context& context, DeviceActivation activation, size_t n, const float* x, float* y) {
    activation_forward_kernel<<<grid_for(n), threads, 0, context.stream()>>>(activation, n, x, y);
    check_launch("activation_forward");
}

void activation_backward(Context& context, DeviceActivation activation, size_t n, const float* x, const float* dy,
                         float* dx) {
    activation_backward_kernel<<<grid_for(n), threads, 0, context.stream()>>>(activation, n, x, dy, dx);
    check_launch("activation_backward");
}

void rotary(Context& context, size_t B, size_t T, size_t H, size_t d, size_t offset, double base, double sign,
            const float* x, float* y) {
    const size_t pairs = B * T * H * (d / 2);
    if (pairs == 0) return;
    rotary_kernel<<<grid_for(pairs), threads, 0, context.stream()>>>(pairs, T, H, d, offset, base, sign, x, y);
    check_launch("rotary");
}

void dropout_forward(Context& context, size_t n, const float* x, float p, uint64_t seed, float* y) {
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    dropout_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, x, p, scale, seed, y);
    check_launch("dropout_forward");
}

void dropout_backward(Context& context, size_t n, const float* dy, float p, uint64_t seed, float* dx) {
    dropout_forward(context, n, dy, p, seed, dx);  // the same mask and scale
}

void add_into(Context& context, size_t n, const float* a, float* out) {
    add_into_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, a, out);
    check_launch("add_into");
}

void copy_rows(Context& context, size_t rows, size_t width, const float* from, size_t from_ld, float* to, size_t to_ld,
               bool accumulate) {
    const size_t n = rows * width;
    if (n == 0) return;
    copy_rows_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, width, from, from_ld, to, to_ld, accumulate);
    check_launch("copy_rows");
}

void add_broadcast(Context& context, size_t n, size_t period, const float* a, const float* b, float* out) {
    if (n == 0) return;
    add_broadcast_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, period, a, b, out);
    check_launch("add_broadcast");
}

void scale(Context& context, size_t n, const float* x, float factor, const float* device_factor, float* out,
           bool accumulate) {
    if (n == 0) return;
    scale_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, x, factor, device_factor, out, accumulate);
    check_launch("scale");
}

void merge_heads(Context& context, size_t B, size_t H, size_t T, size_t d, const float* heads, float* merged) {
    const size_t n = B * H * T * d;
    heads_layout_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, H, T, d, const_cast<float*>(heads), merged,
                                                                         true);
    check_launch("merge_heads");
}

void split_heads(Context& context, size_t B, size_t H, size_t T, size_t d, const float* dmerged, float* dheads) {
    const size_t n = B * H * T * d;
    heads_layout_kernel<<<grid_for(n), threads, 0, context.stream()>>>(n, H, T, d, dheads, const_cast<float*>(dmerged),
                                                                         false);
    check_launch("split_heads");
}

void cross_entropy_forward_backward(Context& context, size_t M, size_t V, const float* logits, const int32_t* targets,
                                    const float* weight, float* loss_rows, float* dlogits) {
    cross_entropy_kernel<<<row_grid(M), rows_per_block * 32, 0, context.stream()>>>(M, int(V), logits, targets, weight,
                                                                                     loss_rows, dlogits);
    check_launch("cross_entropy_forward_backward");
}

void members_to_stacked(Context& context, size_t members, size_t pieces, const size_t* table,
                        const float* const* member_blocks, float* stacked) {
    if (pieces == 0 || members == 0) return;
    members_to_stacked_kernel<<<dim3(64, unsigned(pieces)), threads, 0, context.stream()>>>(members, table, member_blocks, stacked);
    check_launch("members_to_stacked");
}

void stacked_to_members(Context& context, size_t members, size_t pieces, const size_t* table, const float* stacked,
                        float* const* member_blocks, bool accumulate) {
    if (pieces == 0 || members == 0) return;
    stacked_to_members_kernel<<<dim3(64, unsigned(pieces)), threads, 0, context.stream()>>>(members, table, stacked,
                                                                                        member_blocks, accumulate);
    check_launch("stacked_to_members");
}

}  // namespace attnlab::device
