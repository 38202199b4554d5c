// Shared-memory tiles for the flash kernels: 64 rows per tile, 128 threads per
// block. Thread t owns tile rows 4 * (t / 8) .. + 3 and columns t % 8, + 8, + 16, ...;
// the 8 lanes sharing rows are adjacent in one warp, so row reductions are
// three shuffles (row_max8, row_sum8). Tiles of width D are stored with a
// leading dimension of D + 1 so that the column walks below hit distinct banks.
#pragma once

#include "cuda/warp.cuh"

namespace attnlab::device {

constexpr int tile_rows = 64;      // queries per block, keys per step
constexpr int tile_threads = 128;  // 16 row groups x 8 column lanes
constexpr int tile_ld_p = tile_rows + 1;  // leading dimension of a (64, 64) tile

__device__ __forceinline__ int tile_row0() { return int(threadIdx.x / 8) * 4; }  // first of this thread's 4 rows
__device__ __forceinline__ int tile_col0() { return int(threadIdx.x % 8); }      // columns col0 + 8 m

// tile (64, D), ld D + 1  <-  rows [row0, row0 + 64) of src (rows, width), row r at
// src + r stride, zeros beyond: rows at or past `rows` are never read (callers pass
// the key end there, so that masked keys past it cannot bring inf or NaN into the tile).
template <int D>
__device__ void load_tile(float* tile, const float* src, int row0, int rows, int width, long long stride) {
    for (int e = threadIdx.x; e < tile_rows * D; e += tile_threads) {
        const int r = e / D, c = e % D, row = row0 + r;
        tile[r * (D + 1) + c] = row < rows && c < width ? src[(long long)row * stride + c] : 0.0f;
    }
}

// acc[r][m] += sum_k A[row0 + r][k] * B[col0 + 8 m][k]      (A B^T)
template <int K, int M>
__device__ __forceinline__ void tile_mma_nt(float (&acc)[4][M], const float* A, int lda, const float* B, int ldb) {
    const int row0 = tile_row0(), col0 = tile_col0();
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
        float a[4], b[M];
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = A[(row0 + r) * lda + k];
#pragma unroll
        for (int m = 0; m < M; ++m) b[m] = B[(col0 + 8 * m) * ldb + k];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) acc[r][m] = fmaf(a[r], b[m], acc[r][m]);
    }
}

// acc[r][m] += sum_k A[row0 + r][k] * B[k][col0 + 8 m]      (A B)
template <int K, int M>
__device__ __forceinline__ void tile_mma_nn(float (&acc)[4][M], const float* A, int lda, const float* B, int ldb) {
    const int row0 = tile_row0(), col0 = tile_col0();
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
        float a[4], b[M];
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = A[(row0 + r) * lda + k];
#pragma unroll
        for (int m = 0; m < M; ++m) b[m] = B[k * ldb + col0 + 8 * m];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) acc[r][m] = fmaf(a[r], b[m], acc[r][m]);
    }
}

// Over the 8 lanes that share a row (lanes differing in their low 3 bits).
__device__ __forceinline__ float row_max8(float value) {  // NaN if any lane's value is NaN
    for (int offset = 1; offset < 8; offset *= 2)
        value = max_or_nan(value, __shfl_xor_sync(0xffffffffu, value, offset));
    return value;
}
__device__ __forceinline__ float row_sum8(float value) {
    for (int offset = 1; offset < 8; offset *= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

}  // namespace attnlab::device
