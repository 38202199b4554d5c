// The FMA peak of one core: 12 independent chains of vector fused multiply-adds
// (enough to cover the FMA units' latency on current x86 cores), each lane 2
// flops, timed over 2^26 rounds. The ceiling a float32 GEMM or training step is
// compared against beside the sgemm probe (bench/train_table.py: % of peak).
// AVX2 (8 lanes) on every CPU attnlab's AVX2 kernels run on; AVX-512 (16 lanes)
// where the CPU has it.
#pragma once

#include <immintrin.h>

#include <chrono>
#include <cstddef>

namespace attnlab::bench {

constexpr int kFmaChains = 12;
constexpr size_t kFmaRounds = size_t(1) << 26;

inline double fma_gflops(size_t lanes, double seconds) { return 2.0 * lanes * kFmaChains * kFmaRounds / seconds * 1e-9; }

[[gnu::target("avx2,fma")]] inline double fma_peak_avx2() {
    __m256 acc[kFmaChains];
    for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm256_set1_ps(1.0f + 1e-3f * c);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    const auto start = std::chrono::steady_clock::now();
    for (size_t r = 0; r < kFmaRounds; ++r)
#pragma GCC unroll 12  // the chains in registers
        for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    volatile float keep = 0;  // the chains' results are used
    for (int c = 0; c < kFmaChains; ++c) keep = keep + _mm256_cvtss_f32(acc[c]);
    return fma_gflops(8, seconds);
}

[[gnu::target("avx512f")]] inline double fma_peak_avx512() {
    __m512 acc[kFmaChains];
    for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 1e-3f * c);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    const auto start = std::chrono::steady_clock::now();
    for (size_t r = 0; r < kFmaRounds; ++r)
#pragma GCC unroll 12  // the chains in registers
        for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    volatile float keep = 0;
    for (int c = 0; c < kFmaChains; ++c) keep = keep + _mm512_cvtss_f32(acc[c]);
    return fma_gflops(16, seconds);
}

}  // namespace attnlab::bench
