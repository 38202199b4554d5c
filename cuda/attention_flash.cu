// The flash attention kernel, forward and backward side by side (the
// FlashAttention-2 scheme, fp32 throughout). No (Tq, Tk) buffer exists: each
// block holds 64 queries (or 64 keys) and walks the other side in tiles of 64.
//
// Forward, per 64-query tile: online softmax over key tiles, keeping per row the
// running max m and sum l, and the unnormalised context; at the end
// context = O / l and lse = m + log l (-inf and a zero context for a row with no
// eligible key). Key tiles past the last key the causal and padding masks allow
// are skipped, and inside the last tile the keys past it are loaded as zeros,
// never read: inf or NaN in padded K/V rows (an unwritten cache tail) cannot
// reach the output as 0 * inf. A NaN among a row's eligible scores makes that
// row's context and lse NaN (max_or_nan), as on the CPU.
//
// Backward: D_i = sum_c dO_ic O_ic (row_dot_kernel); then, with P recomputed per
// tile as exp(scale q.k - lse) and dS = P (dP - D_i), dP = dO V^T:
//   kv kernel, per 64-key tile (looping over the query heads of its K/V group):
//     dV = sum P^T dO,  dK = scale sum dS^T Q
//   q kernel, per 64-query tile:  dQ = scale sum dS K
// A separate dQ pass instead of atomics: deterministic results, no zeroing.
//
// Head widths d, d_v <= 128; the tiles are padded with zeros to D = 64 or 128.
#include <cmath>

#include "autograd/device/attention.h"
#include "cuda/check.cuh"
#include "cuda/mask.cuh"
#include "cuda/tile.cuh"
#include "cuda/warp.cuh"

namespace attnlab::device {

namespace {

// Where row t of head h of batch item b starts in a (B, heads, T, width) tensor:
// b batch + h head + t row elements in (heads first: batch = heads T width,
// head = T width, row = width; packed (B, T, heads width): batch = T heads width,
// head = width, row = heads width).
struct Layout {
    long long batch, head, row;
    __device__ long long at(int b, int h, int t) const { return b * batch + h * head + t * row; }
};

Layout layout_of(AttentionLayout layout, size_t heads, size_t T, size_t width) {
    const long long n = (long long)heads, t = (long long)T, w = (long long)width;
    if (layout == AttentionLayout::packed) return {t * n * w, w, n * w};
    return {n * t * w, t * w, w};
}

struct FlashParams {
    const float* q;  // (B, H, Tq, d) or packed, as ql says
    const float* k;  // (B, H_kv, Tk, d), kl
    const float* v;  // (B, H_kv, Tk, d_v), vl
    MaskView mask;
    int H, H_kv, Tq, Tk, d, d_v;
    float scale;
    Layout ql, kl, vl, ol;  // ol: the context and its gradient (B, H, Tq, d_v); dq, dk, dv as q, k, v
};

// ---- forward ----------------------------------------------------------------

template <int D>
constexpr size_t forward_shared_bytes() {  // Q, K, V tiles (64, D + 1) and P (64, 65)
    return (3 * tile_rows * (D + 1) + tile_rows * tile_ld_p) * sizeof(float);
}

// grid (ceil(Tq / 64), H, B); out_context (B, H, Tq, d_v), lse (B, H, Tq)
template <int D>
__global__ void __launch_bounds__(tile_threads) flash_forward_kernel(FlashParams p, float* out_context, float* lse) {
    constexpr int ld = D + 1, M = D / 8;
    extern __shared__ float shared[];
    float* Qs = shared;              // (64, D)  this block's queries
    float* Ks = Qs + tile_rows * ld;  // (64, D)  the current key tile
    float* Vs = Ks + tile_rows * ld;  // (64, D)
    float* Ps = Vs + tile_rows * ld;  // (64, 64) exp(s - m) of the current tile

    const int q0 = (gridDim.x - 1 - blockIdx.x) * tile_rows;  // the longest causal rows start first
    const int h = blockIdx.y, b = blockIdx.z, kv = h / (p.H / p.H_kv);
    const size_t head = (size_t)b * p.H + h;  // of lse and row_dot (B, H, Tq)
    const float slope = alibi_slope_of(p.mask, h, p.H);
    const int row0 = tile_row0(), col0 = tile_col0();

    load_tile<D>(Qs, p.q + p.ql.at(b, h, 0), q0, p.Tq, p.d, p.ql.row);
    float out[4][M] = {};  // unnormalised context rows
    float row_max[4], row_sum[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
    }
    // keys >= key_stop are ineligible for every row of this tile (key_end grows with i): never read
    const int key_stop = mask_key_end(p.mask, b, min(q0 + tile_rows, p.Tq) - 1, p.Tq, p.Tk);
    for (int k0 = 0; k0 < key_stop; k0 += tile_rows) {
        __syncthreads();  // the previous step has finished reading Ks, Vs, Ps
        load_tile<D>(Ks, p.k + p.kl.at(b, kv, 0), k0, key_stop, p.d, p.kl.row);
        load_tile<D>(Vs, p.v + p.vl.at(b, kv, 0), k0, key_stop, p.d_v, p.vl.row);
        __syncthreads();
        float s[4][8] = {};  // q_i . k_j for i = q0 + row0 + r, j = k0 + col0 + 8 m
        tile_mma_nt<D, 8>(s, Qs, ld, Ks, ld);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int i = q0 + row0 + r;
            float tile_max = -INFINITY;
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                const int j = k0 + col0 + 8 * m;
                const bool eligible = i < p.Tq && j < p.Tk && mask_allows(p.mask, b, i, j, p.Tq, p.Tk);
                s[r][m] = eligible ? s[r][m] * p.scale + alibi_term(slope, i, j, p.Tq, p.Tk) : -INFINITY;
                tile_max = max_or_nan(tile_max, s[r][m]);
            }
            const float new_max = max_or_nan(row_max[r], row_max8(tile_max));
            // nothing eligible yet: keep zeros (and avoid -inf - -inf)
            const float correction = new_max == -INFINITY ? 1.0f : expf(row_max[r] - new_max);
            float tile_sum = 0.0f;
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                const float weight = new_max == -INFINITY ? 0.0f : expf(s[r][m] - new_max);
                Ps[(row0 + r) * tile_ld_p + col0 + 8 * m] = weight;
                tile_sum += weight;
            }
            row_sum[r] = row_sum[r] * correction + row_sum8(tile_sum);
            row_max[r] = new_max;
#pragma unroll
            for (int m = 0; m < M; ++m) out[r][m] *= correction;
        }
        __syncthreads();
        tile_mma_nn<tile_rows, M>(out, Ps, tile_ld_p, Vs, ld);  // out += P V
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int i = q0 + row0 + r;
        if (i >= p.Tq) continue;
        const bool any_eligible = row_sum[r] != 0.0f;  // NaN (a NaN score) is eligible: NaN out
        const float inverse = any_eligible ? 1.0f / row_sum[r] : 0.0f;
        float* row = out_context + p.ol.at(b, h, i);
#pragma unroll
        for (int m = 0; m < M; ++m)
            if (col0 + 8 * m < p.d_v) row[col0 + 8 * m] = out[r][m] * inverse;
        if (col0 == 0) lse[head * p.Tq + i] = any_eligible ? row_max[r] + logf(row_sum[r]) : -INFINITY;
    }
}

// ---- backward ---------------------------------------------------------------

// row_dot (B, H, Tq): D_i = sum_c dO_ic O_ic, one warp per row; dO and O as ol says.
__global__ void row_dot_kernel(const float* dcontext, const float* context, float* row_dot, long long rows, int d_v,
                               int H, int Tq, Layout ol) {
    const long long row = (long long)blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    const long long at = ol.at(int(row / ((long long)H * Tq)), int(row / Tq % H), int(row % Tq));
    float dot = 0.0f;
    for (int c = lane; c < d_v; c += 32) dot += dcontext[at + c] * context[at + c];
    dot = warp_sum(dot);
    if (lane == 0) row_dot[row] = dot;
}

template <int D>
constexpr size_t backward_shared_bytes() {  // four (64, D + 1) tiles, a (64, 65) tile, lse and D_i of 64 rows
    return (4 * tile_rows * (D + 1) + tile_rows * tile_ld_p + 2 * tile_rows) * sizeof(float);
}

// grid (ceil(Tk / 64), H_kv, B); dk (B, H_kv, Tk, d), dv (B, H_kv, Tk, d_v).
// Tile rows are keys here: s[r][m] is k_j . q_i for j = k0 + row0 + r, i = q0 + col0 + 8 m.
template <int D>
__global__ void __launch_bounds__(tile_threads)
    flash_backward_kv_kernel(FlashParams p, const float* lse, const float* dcontext, const float* row_dot, float* dk,
                             float* dv) {
    constexpr int ld = D + 1, M = D / 8;
    extern __shared__ float shared[];
    float* Ks = shared;                // (64, D)  this block's keys
    float* Vs = Ks + tile_rows * ld;    // (64, D)
    float* Qs = Vs + tile_rows * ld;    // (64, D)  the current query tile
    float* dOs = Qs + tile_rows * ld;   // (64, D)
    float* Ps = dOs + tile_rows * ld;   // (64 keys, 64 queries): P^T, then dS^T
    float* lse_s = Ps + tile_rows * tile_ld_p;  // (64)
    float* dot_s = lse_s + tile_rows;           // (64)

    const int k0 = blockIdx.x * tile_rows;
    const int kv = blockIdx.y, b = blockIdx.z, group = p.H / p.H_kv;
    const int row0 = tile_row0(), col0 = tile_col0();

    const int key_limit = p.mask.key_lengths != nullptr ? p.mask.key_lengths[b] : p.Tk;
    load_tile<D>(Ks, p.k + p.kl.at(b, kv, 0), k0, key_limit, p.d, p.kl.row);  // padding keys never read
    load_tile<D>(Vs, p.v + p.vl.at(b, kv, 0), k0, key_limit, p.d_v, p.vl.row);
    float dk_acc[4][M] = {}, dv_acc[4][M] = {};
    if (k0 < key_limit) {  // a tile of padding keys only gets zero gradients
        // causal: query i sees key k0 only from i = k0 - (Tk - Tq) on
        const int first_query = p.mask.causal ? max(0, k0 - (p.Tk - p.Tq)) : 0;
        for (int g = 0; g < group; ++g) {
            const int h = kv * group + g;
            const size_t head = (size_t)b * p.H + h;
            const float slope = alibi_slope_of(p.mask, h, p.H);
            for (int q0 = first_query / tile_rows * tile_rows; q0 < p.Tq; q0 += tile_rows) {
                __syncthreads();  // the previous step has finished reading Qs, dOs, Ps
                load_tile<D>(Qs, p.q + p.ql.at(b, h, 0), q0, p.Tq, p.d, p.ql.row);
                load_tile<D>(dOs, dcontext + p.ol.at(b, h, 0), q0, p.Tq, p.d_v, p.ol.row);
                if (threadIdx.x < tile_rows) {
                    const int i = q0 + threadIdx.x;
                    lse_s[threadIdx.x] = i < p.Tq ? lse[head * p.Tq + i] : -INFINITY;
                    dot_s[threadIdx.x] = i < p.Tq ? row_dot[head * p.Tq + i] : 0.0f;
                }
                __syncthreads();
                float s[4][8] = {}, dp[4][8] = {};
                tile_mma_nt<D, 8>(s, Ks, ld, Qs, ld);   // k_j . q_i
                tile_mma_nt<D, 8>(dp, Vs, ld, dOs, ld);  // dP_ij = dO_i . v_j
#pragma unroll
                for (int r = 0; r < 4; ++r)
#pragma unroll
                    for (int m = 0; m < 8; ++m) {
                        const int j = k0 + row0 + r, col = col0 + 8 * m, i = q0 + col;
                        const float row_lse = lse_s[col];
                        const bool eligible = i < p.Tq && j < p.Tk && row_lse != -INFINITY &&
                                              mask_allows(p.mask, b, i, j, p.Tq, p.Tk);
                        const float weight =
                            eligible ? expf(s[r][m] * p.scale + alibi_term(slope, i, j, p.Tq, p.Tk) - row_lse) : 0.0f;  // P_ij
                        dp[r][m] = weight * (dp[r][m] - dot_s[col]);                               // dS_ij / scale
                        Ps[(row0 + r) * tile_ld_p + col] = weight;
                    }
                __syncthreads();
                tile_mma_nn<tile_rows, M>(dv_acc, Ps, tile_ld_p, dOs, ld);  // dV_j += sum_i P_ij dO_i
                __syncthreads();
#pragma unroll
                for (int r = 0; r < 4; ++r)
#pragma unroll
                    for (int m = 0; m < 8; ++m) Ps[(row0 + r) * tile_ld_p + col0 + 8 * m] = dp[r][m];
                __syncthreads();
                tile_mma_nn<tile_rows, M>(dk_acc, Ps, tile_ld_p, Qs, ld);  // dK_j += sum_i dS_ij q_i
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int j = k0 + row0 + r;
        if (j >= p.Tk) continue;
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const int c = col0 + 8 * m;
            if (c < p.d) dk[p.kl.at(b, kv, j) + c] = dk_acc[r][m] * p.scale;
            if (c < p.d_v) dv[p.vl.at(b, kv, j) + c] = dv_acc[r][m];
        }
    }
}

// grid (ceil(Tq / 64), H, B); dq (B, H, Tq, d). Tile rows are queries, as in the forward.
template <int D>
__global__ void __launch_bounds__(tile_threads)
    flash_backward_q_kernel(FlashParams p, const float* lse, const float* dcontext, const float* row_dot, float* dq) {
    constexpr int ld = D + 1, M = D / 8;
    extern __shared__ float shared[];
    float* Qs = shared;                // (64, D)  this block's queries
    float* dOs = Qs + tile_rows * ld;   // (64, D)
    float* Ks = dOs + tile_rows * ld;   // (64, D)  the current key tile
    float* Vs = Ks + tile_rows * ld;    // (64, D)
    float* Ps = Vs + tile_rows * ld;    // (64, 64) dS of the current tile

    const int q0 = (gridDim.x - 1 - blockIdx.x) * tile_rows;
    const int h = blockIdx.y, b = blockIdx.z, kv = h / (p.H / p.H_kv);
    const size_t head = (size_t)b * p.H + h;  // of lse and row_dot (B, H, Tq)
    const float slope = alibi_slope_of(p.mask, h, p.H);
    const int row0 = tile_row0(), col0 = tile_col0();

    load_tile<D>(Qs, p.q + p.ql.at(b, h, 0), q0, p.Tq, p.d, p.ql.row);
    load_tile<D>(dOs, dcontext + p.ol.at(b, h, 0), q0, p.Tq, p.d_v, p.ol.row);
    float row_lse[4], dot[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int i = q0 + row0 + r;
        row_lse[r] = i < p.Tq ? lse[head * p.Tq + i] : -INFINITY;
        dot[r] = i < p.Tq ? row_dot[head * p.Tq + i] : 0.0f;
    }
    float dq_acc[4][M] = {};
    const int key_stop = mask_key_end(p.mask, b, min(q0 + tile_rows, p.Tq) - 1, p.Tq, p.Tk);
    for (int k0 = 0; k0 < key_stop; k0 += tile_rows) {
        __syncthreads();
        load_tile<D>(Ks, p.k + p.kl.at(b, kv, 0), k0, key_stop, p.d, p.kl.row);  // keys past key_stop never read
        load_tile<D>(Vs, p.v + p.vl.at(b, kv, 0), k0, key_stop, p.d_v, p.vl.row);
        __syncthreads();
        float s[4][8] = {}, dp[4][8] = {};
        tile_mma_nt<D, 8>(s, Qs, ld, Ks, ld);    // q_i . k_j, bitwise as in the forward
        tile_mma_nt<D, 8>(dp, dOs, ld, Vs, ld);  // dP_ij = dO_i . v_j
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                const int i = q0 + row0 + r, j = k0 + col0 + 8 * m;
                const bool eligible = i < p.Tq && j < p.Tk && row_lse[r] != -INFINITY &&
                                      mask_allows(p.mask, b, i, j, p.Tq, p.Tk);
                const float weight = eligible ? expf(s[r][m] * p.scale + alibi_term(slope, i, j, p.Tq, p.Tk) - row_lse[r]) : 0.0f;
                Ps[(row0 + r) * tile_ld_p + col0 + 8 * m] = weight * (dp[r][m] - dot[r]);  // dS_ij / scale
            }
        __syncthreads();
        tile_mma_nn<tile_rows, M>(dq_acc, Ps, tile_ld_p, Ks, ld);  // dQ_i += sum_j dS_ij k_j
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int i = q0 + row0 + r;
        if (i >= p.Tq) continue;
#pragma unroll
        for (int m = 0; m < M; ++m)
            if (col0 + 8 * m < p.d) dq[p.ql.at(b, h, i) + col0 + 8 * m] = dq_acc[r][m] * p.scale;
    }
}

// ---- launching ----------------------------------------------------------------

FlashParams params_of(const AttentionDims& dims, const float* q, const float* k, const float* v, const MaskView& mask,
                      float scale, AttentionLayout layout) {
    return {q, k, v, mask, int(dims.H), int(dims.H_kv), int(dims.Tq), int(dims.Tk), int(dims.d), int(dims.d_v), scale,
            layout_of(layout, dims.H, dims.Tq, dims.d), layout_of(layout, dims.H_kv, dims.Tk, dims.d),
            layout_of(layout, dims.H_kv, dims.Tk, dims.d_v), layout_of(layout, dims.H, dims.Tq, dims.d_v)};
}

unsigned tiles_of(size_t n) { return unsigned((n + tile_rows - 1) / tile_rows); }

// Kernels above 48 KiB of dynamic shared memory must say so first.
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* where) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), where);
}

template <int D>
void forward(Context& context, const FlashParams& p, const AttentionDims& dims, float* out_context, float* lse) {
    constexpr size_t bytes = forward_shared_bytes<D>();
    allow_shared(flash_forward_kernel<D>, bytes, "flash_attention_forward: shared memory");
    const dim3 grid(tiles_of(dims.Tq), unsigned(dims.H), unsigned(dims.B));
    flash_forward_kernel<D><<<grid, tile_threads, bytes, context.stream()>>>(p, out_context, lse);
    check_launch("flash_attention_forward: flash_forward_kernel");
}

template <int D>
void backward(Context& context, const FlashParams& p, const AttentionDims& dims, const float* lse,
              const float* dcontext, const float* row_dot, float* dq, float* dk, float* dv) {
    constexpr size_t bytes = backward_shared_bytes<D>();
    allow_shared(flash_backward_kv_kernel<D>, bytes, "flash_attention_backward: shared memory");
    allow_shared(flash_backward_q_kernel<D>, bytes, "flash_attention_backward: shared memory");
    const dim3 kv_grid(tiles_of(dims.Tk), unsigned(dims.H_kv), unsigned(dims.B));
    flash_backward_kv_kernel<D><<<kv_grid, tile_threads, bytes, context.stream()>>>(p, lse, dcontext, row_dot, dk, dv);
    check_launch("flash_attention_backward: flash_backward_kv_kernel");
    const dim3 q_grid(tiles_of(dims.Tq), unsigned(dims.H), unsigned(dims.B));
    flash_backward_q_kernel<D><<<q_grid, tile_threads, bytes, context.stream()>>>(p, lse, dcontext, row_dot, dq);
    check_launch("flash_attention_backward: flash_backward_q_kernel");
}

bool fits_64(const AttentionDims& dims) { return dims.d <= 64 && dims.d_v <= 64; }

void check_widths(const AttentionDims& dims, const char* where) {
    if (dims.d > flash_max_head_width || dims.d_v > flash_max_head_width)
        fail("attention", std::string(where) + ": head widths d = " + std::to_string(dims.d) + ", d_v = " +
                              std::to_string(dims.d_v) + " exceed " + std::to_string(flash_max_head_width));
}

}  // namespace

std::vector<KernelResources> flash_kernel_resources(Context&) {
    return {
        resources_of("flash_forward_kernel<64>", flash_forward_kernel<64>, tile_threads, forward_shared_bytes<64>()),
        resources_of("flash_forward_kernel<128>", flash_forward_kernel<128>, tile_threads, forward_shared_bytes<128>()),
        resources_of("flash_backward_kv_kernel<64>", flash_backward_kv_kernel<64>, tile_threads,
                     backward_shared_bytes<64>()),
        resources_of("flash_backward_kv_kernel<128>", flash_backward_kv_kernel<128>, tile_threads,
                     backward_shared_bytes<128>()),
        resources_of("flash_backward_q_kernel<64>", flash_backward_q_kernel<64>, tile_threads,
                     backward_shared_bytes<64>()),
        resources_of("flash_backward_q_kernel<128>", flash_backward_q_kernel<128>, tile_threads,
                     backward_shared_bytes<128>()),
        resources_of("row_dot_kernel", row_dot_kernel, 256, 0),
    };
}

void flash_attention_forward(Context& context, const AttentionDims& dims, const float* q, const float* k,
                             const float* v, const MaskView& mask, float scale, float* out_context, float* lse,
                             AttentionLayout layout) {
    check_widths(dims, "flash_attention_forward");
    const FlashParams p = params_of(dims, q, k, v, mask, scale, layout);
    if (fits_64(dims))
        forward<64>(context, p, dims, out_context, lse);
    else
        forward<128>(context, p, dims, out_context, lse);
}

void flash_attention_backward(Context& context, const AttentionDims& dims, const float* q, const float* k,
                              const float* v, const float* out_context, const float* lse, const float* dcontext,
                              const MaskView& mask, float scale, float* dq, float* dk, float* dv, float* row_dot,
                              AttentionLayout layout) {
    check_widths(dims, "flash_attention_backward");
    const FlashParams p = params_of(dims, q, k, v, mask, scale, layout);
    const long long rows = (long long)(dims.B * dims.H * dims.Tq);
    row_dot_kernel<<<unsigned((rows + 7) / 8), 256, 0, context.stream()>>>(dcontext, out_context, row_dot, rows,
                                                                            int(dims.d_v), int(dims.H), int(dims.Tq), p.ol);
    check_launch("flash_attention_backward: row_dot_kernel");
    if (fits_64(dims))
        backward<64>(context, p, dims, lse, dcontext, row_dot, dq, dk, dv);
    else
        backward<128>(context, p, dims, lse, dcontext, row_dot, dq, dk, dv);
}

}  // namespace attnlab::device
