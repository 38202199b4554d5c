// The float32 products both GEMM tests run: test_gemm.cpp against a float64 loop,
// test_isa.cpp against kernels.h's one order of addition, bit for bit. Every
// transpose, leading dimensions wider than the matrix, alpha and beta, libxsmm's
// tiles (jit_gemm.cpp) with remainders in both tiled dimensions, and the sizes an
// AVX2 CPU once sent to OpenBLAS.
#pragma once

#include <cstddef>
#include <vector>

namespace attnlab::test {

struct GemmCase {
    size_t M, N, K;
    bool ta, tb;
    float alpha, beta;
    size_t pad;  // extra values per stored row of A, B and C
};

inline std::vector<GemmCase> gemm_cases() {
    std::vector<GemmCase> out;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            out.push_back({16, 16, 16, ta, tb, 1, 0, 0});      // one attention head
            out.push_back({7, 5, 3, ta, tb, 1, 0, 2});         // odd sizes inside wider rows
            out.push_back({33, 300, 270, ta, tb, 1, 0, 0});    // N K above one tile: 256-column tiles and a K remainder
            out.push_back({9, 520, 400, ta, tb, 1, 1, 3});     // tiles, beta = 1, padded rows
            out.push_back({20, 256, 64, ta, tb, 1, 0, 0});     // N a multiple of 128: transposed B's scratch rows padded
            out.push_back({20, 512, 256, ta, tb, 1, 1, 0});    // the same, tiled, beta = 1
            out.push_back({256, 256, 64, ta, tb, 1, 1, 0});    // 2^22 multiply-adds: once OpenBLAS's on AVX2
            out.push_back({12, 10, 8, ta, tb, 0.25f, 0, 0});   // alpha after the product
            out.push_back({12, 10, 8, ta, tb, 0.5f, 1, 0});    // alpha with beta = 1: kernels::gemm alone
            out.push_back({12, 10, 8, ta, tb, 1, 0.5f, 1});    // other beta: kernels::gemm alone
        }
    out.push_back({2048, 256, 64, false, true, 1, 0, 0});  // the default experiment's feed-forward product (2^25)
    return out;
}

}  // namespace attnlab::test
