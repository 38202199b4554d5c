// The dense attention kernel: cuBLAS GEMMs around our masked softmax, forward
// and backward side by side. The (B, H, Tq, Tk) weights are materialised once.
//
// Grouped K/V: query head h = kv * group + g reads K/V head kv. For a fixed g
// the heads (b, kv * group + g) form one strided batch over n = b * H_kv + kv:
// Q_n = q + (n * group + g) * Tq * d, K_n = k + n * Tk * d. So every GEMM is
// `group` strided-batched calls of B * H_kv products, and K/V are not copied,
// except under key padding: the GEMMs that mix keys (A V, dC V^T, dS K) then read
// a copy of K or V whose rows past each batch item's length are zero, because
// cuBLAS multiplies those keys' zero weights with their rows, and 0 * inf or
// 0 * NaN in an unwritten tail (a future KV cache) would make the output NaN.
// A NaN among a row's eligible scores makes that row's weights NaN, as on the CPU.
#include <algorithm>
#include <cmath>

#include "autograd/device/attention.h"
#include "cuda/check.cuh"
#include "cuda/gemm.cuh"
#include "cuda/mask.cuh"
#include "autograd/device/kernels.h"
#include "cuda/warp.cuh"

namespace attnlab::device {

namespace {

constexpr int rows_per_block = 8;  // one warp per (b, h, query) row
constexpr int softmax_threads = rows_per_block * 32;

int row_blocks(size_t rows) { return int((rows + rows_per_block - 1) / rows_per_block); }

// In place over each row of scores (B, H, Tq, Tk): weights = softmax over the
// eligible keys, 0 elsewhere; a row with no eligible key becomes all zeros.
__global__ void masked_softmax_kernel(float* scores, long long rows, int H, int Tq, int Tk, MaskView mask) {
    const long long row = (long long)blockIdx.x * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;  // whole warps leave together
    const int lane = threadIdx.x % 32;
    const int i = int(row % Tq), b = int(row / ((long long)H * Tq));
    float* s = scores + row * Tk;  // (Tk)
    const int end = mask_key_end(mask, b, i, Tq, Tk);
    const bool per_key = mask.eligible != nullptr;  // below `end` only an explicit mask excludes keys
    if (mask.alibi) {  // the bias, before the softmax (keys >= end stay as they are: never read)
        const float slope = alibi_slope_of(mask, int(row / Tq % H), H);
        for (int j = lane; j < end; j += 32) s[j] += alibi_term(slope, i, j, Tq, Tk);
    }

    float row_max = -INFINITY;
    for (int j = lane; j < end; j += 32)
        if (!per_key || mask_allows(mask, b, i, j, Tq, Tk)) row_max = max_or_nan(row_max, s[j]);
    row_max = warp_max(row_max);
    if (row_max == -INFINITY) {  // no eligible key: zero weights (masked_rows = "zero")
        for (int j = lane; j < Tk; j += 32) s[j] = 0.0f;
        return;
    }
    float total = 0.0f;
    for (int j = lane; j < end; j += 32)
        if (!per_key || mask_allows(mask, b, i, j, Tq, Tk)) total += expf(s[j] - row_max);
    const float inverse = 1.0f / warp_sum(total);
    for (int j = lane; j < Tk; j += 32) {
        const bool eligible = j < end && (!per_key || mask_allows(mask, b, i, j, Tq, Tk));
        s[j] = eligible ? expf(s[j] - row_max) * inverse : 0.0f;
    }
}

// In place over each row of scores (B, H, Tq, Tk): -inf at ineligible keys,
// unless the row has no eligible key (then it keeps its raw scores).
__global__ void mask_scores_kernel(float* scores, long long rows, int H, int Tq, int Tk, MaskView mask) {
    const long long row = (long long)blockIdx.x * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    const int i = int(row % Tq), b = int(row / ((long long)H * Tq));
    float* s = scores + row * Tk;
    bool any = false;
    for (int j = lane; j < Tk; j += 32) any = any || mask_allows(mask, b, i, j, Tq, Tk);
    if (warp_sum(any ? 1.0f : 0.0f) == 0.0f) return;  // no eligible key in the row
    const float slope = alibi_slope_of(mask, int(row / Tq % H), H);
    for (int j = lane; j < Tk; j += 32)
        s[j] = mask_allows(mask, b, i, j, Tq, Tk) ? s[j] + alibi_term(slope, i, j, Tq, Tk) : -INFINITY;
}

// In place over each row of dA (B, H, Tq, Tk): dS_j = scale A_j (dA_j - sum_k dA_k A_k).
// Ineligible keys and all-masked rows have A = 0, so they get exactly 0.
__global__ void softmax_backward_kernel(float* grad, const float* weights, long long rows, int Tk, float scale) {
    const long long row = (long long)blockIdx.x * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    float* g = grad + row * Tk;
    const float* a = weights + row * Tk;
    float dot = 0.0f;
    for (int j = lane; j < Tk; j += 32) dot += g[j] * a[j];
    dot = warp_sum(dot);
    for (int j = lane; j < Tk; j += 32) g[j] = scale * a[j] * (g[j] - dot);
}

// out = x (B, H_kv, Tk, width) with the rows j >= key_lengths[b] zeroed.
__global__ void live_keys_kernel(long long n, int H_kv, int Tk, int width, const int32_t* key_lengths, const float* x,
                                 float* out) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        const long long row = e / width;  // (b, kv, j)
        const int j = int(row % Tk), b = int(row / ((long long)H_kv * Tk));
        out[e] = j < key_lengths[b] ? x[e] : 0.0f;
    }
}

// What the key-mixing GEMMs read for K or V (B, H_kv, Tk, width): x itself
// without key lengths, else its copy with the padding rows zeroed, kept in `copy`.
const float* live_keys(Context& context, const AttentionDims& dims, const MaskView& mask, const float* x, int width,
                       DeviceBuffer& copy, const char* where) {
    if (mask.key_lengths == nullptr) return x;
    const long long n = (long long)(dims.B * dims.H_kv * dims.Tk) * width;
    copy = context.allocate_floats(size_t(n));
    const int threads = 256, blocks = int(std::min<long long>((n + threads - 1) / threads, 8192));
    live_keys_kernel<<<blocks, threads, 0, context.stream()>>>(n, int(dims.H_kv), int(dims.Tk), width,
                                                               mask.key_lengths, x, copy.floats());
    check_launch(where);
    return copy.floats();
}

struct Strides {  // elements between consecutive batch entries n = b * H_kv + kv, and head offsets
    int group, batch;
    long long q, kv_k, kv_v, scores, out;  // q/out per query head group; kv per K/V head
};

Strides strides_of(const AttentionDims& dims) {
    const long long group = (long long)(dims.H / dims.H_kv);
    return {int(group), int(dims.B * dims.H_kv), group * (long long)(dims.Tq * dims.d), (long long)(dims.Tk * dims.d),
            (long long)(dims.Tk * dims.d_v), group * (long long)(dims.Tq * dims.Tk),
            group * (long long)(dims.Tq * dims.d_v)};
}

// scores = scale Q K^T   (Tq, Tk) per head, into `scores` (B, H, Tq, Tk)
void scores_gemm(Context& context, const AttentionDims& dims, const float* q, const float* k, float scale,
                 float* scores, const char* where) {
    const int Tq = int(dims.Tq), Tk = int(dims.Tk), d = int(dims.d);
    const Strides st = strides_of(dims);
    for (int g = 0; g < st.group; ++g)
        gemm_batched(context, Tq, Tk, d, scale, {q + (size_t)g * Tq * d, d, st.q}, {k, d, st.kv_k, true}, 0.0f,
                     scores + (size_t)g * Tq * Tk, Tk, st.scores, st.batch, where);
}

}  // namespace

std::vector<KernelResources> dense_kernel_resources(Context&) {
    return {
        resources_of("masked_softmax_kernel", masked_softmax_kernel, softmax_threads, 0),
        resources_of("softmax_backward_kernel", softmax_backward_kernel, softmax_threads, 0),
        resources_of("live_keys_kernel", live_keys_kernel, 256, 0),
    };
}

void dense_attention_forward(Context& context, const AttentionDims& dims, const float* q, const float* k,
                             const float* v, const MaskView& mask, float scale, float* out_context, float* weights,
                             const WeightDropout& dropout) {
    const int Tq = int(dims.Tq), Tk = int(dims.Tk), d_v = int(dims.d_v);
    const Strides st = strides_of(dims);
    scores_gemm(context, dims, q, k, scale, weights, "dense_attention_forward: Q K^T");  // straight into the weights
    const size_t rows = dims.B * dims.H * dims.Tq;
    masked_softmax_kernel<<<row_blocks(rows), softmax_threads, 0, context.stream()>>>(weights, (long long)rows,
                                                                                       int(dims.H), Tq, Tk, mask);
    check_launch("dense_attention_forward: masked_softmax_kernel");
    DeviceBuffer v_copy;
    const float* v_live = live_keys(context, dims, mask, v, d_v, v_copy, "dense_attention_forward: live_keys_kernel");
    const float* A = weights;  // the weights the context is made of: after dropout, in training
    if (dropout.p > 0) {
        dropout_forward(context, rows * Tk, weights, dropout.p, dropout.seed, dropout.dropped);
        A = dropout.dropped;
    }
    for (int g = 0; g < st.group; ++g) {
        // context = A V   (Tq, d_v)
        gemm_batched(context, Tq, d_v, Tk, 1.0f, {A + (size_t)g * Tq * Tk, Tk, st.scores}, {v_live, d_v, st.kv_v},
                     0.0f, out_context + (size_t)g * Tq * d_v, d_v, st.out, st.batch, "dense_attention_forward: A V");
    }
}

void attention_scores(Context& context, const AttentionDims& dims, const float* q, const float* k,
                      const MaskView& mask, float scale, float* scores) {
    scores_gemm(context, dims, q, k, scale, scores, "attention_scores: Q K^T");
    const size_t rows = dims.B * dims.H * dims.Tq;
    mask_scores_kernel<<<row_blocks(rows), softmax_threads, 0, context.stream()>>>(scores, (long long)rows,
                                                                                   int(dims.H), int(dims.Tq),
                                                                                   int(dims.Tk), mask);
    check_launch("attention_scores: mask_scores_kernel");
}

void dense_attention_backward(Context& context, const AttentionDims& dims, const float* q, const float* k,
                              const float* v, const float* weights, const float* dcontext, float scale, float* dq,
                              float* dk, float* dv, float* scratch, const WeightDropout& dropout,
                              const MaskView& mask) {
    const int Tq = int(dims.Tq), Tk = int(dims.Tk), d = int(dims.d), d_v = int(dims.d_v);
    const Strides st = strides_of(dims);
    DeviceBuffer k_copy, v_copy;
    const float* k_live = live_keys(context, dims, mask, k, d, k_copy, "dense_attention_backward: live_keys_kernel");
    const float* v_live = live_keys(context, dims, mask, v, d_v, v_copy, "dense_attention_backward: live_keys_kernel");
    const float* used = dropout.p > 0 ? dropout.dropped : weights;  // what the context was made of
    for (int g = 0; g < st.group; ++g) {
        const float* A = used + (size_t)g * Tq * Tk;           // (Tq, Tk) per head
        const float* dC = dcontext + (size_t)g * Tq * d_v;     // (Tq, d_v) per head
        const float beta = g == 0 ? 0.0f : 1.0f;               // K/V gradients sum over the group
        // dV += A^T dC   (Tk, d_v)
        gemm_batched(context, Tk, d_v, Tq, 1.0f, {A, Tk, st.scores, true}, {dC, d_v, st.out}, beta, dv, d_v, st.kv_v,
                     st.batch, "dense_attention_backward: A^T dC");
        // dA = dC V^T   (Tq, Tk)
        gemm_batched(context, Tq, Tk, d_v, 1.0f, {dC, d_v, st.out}, {v_live, d_v, st.kv_v, true}, 0.0f,
                     scratch + (size_t)g * Tq * Tk, Tk, st.scores, st.batch, "dense_attention_backward: dC V^T");
    }
    const size_t rows = dims.B * dims.H * dims.Tq;
    if (dropout.p > 0)  // d(weights) = d(dropped) through the same mask and scale
        dropout_backward(context, rows * Tk, scratch, dropout.p, dropout.seed, scratch);
    softmax_backward_kernel<<<row_blocks(rows), softmax_threads, 0, context.stream()>>>(scratch, weights,
                                                                                         (long long)rows, Tk, scale);
    check_launch("dense_attention_backward: softmax_backward_kernel");
    for (int g = 0; g < st.group; ++g) {
        const float* dS = scratch + (size_t)g * Tq * Tk;  // (Tq, Tk) per head, scale included
        const float beta = g == 0 ? 0.0f : 1.0f;
        // dQ = dS K   (Tq, d)
        gemm_batched(context, Tq, d, Tk, 1.0f, {dS, Tk, st.scores}, {k_live, d, st.kv_k}, 0.0f,
                     dq + (size_t)g * Tq * d, d, st.q, st.batch, "dense_attention_backward: dS K");
        // dK += dS^T Q   (Tk, d)
        gemm_batched(context, Tk, d, Tq, 1.0f, {dS, Tk, st.scores, true}, {q + (size_t)g * Tq * d, d, st.q}, beta, dk,
                     d, st.kv_k, st.batch, "dense_attention_backward: dS^T Q");
    }
}

}  // namespace attnlab::device
