// float32 GEMM through libxsmm's JIT-compiled kernels (Debian's libxsmm-dev).
//
// Why: Debian 12's OpenBLAS (0.3.21) runs its Haswell (AVX2) sgemm on this
// project's machines, pays a lock, a zeroing pass of C and a packing copy on
// every call, and holds that lock against other threads. libxsmm generates a
// kernel for each (m, n, k, leading dimensions) on first use, for the widest
// vector unit the CPU has, and calls it without packing or locking: with
// AVX-512, 1.3-2.3x OpenBLAS's GFLOP/s from 16x16x16 to 4096x1024x256 on one
// thread; AVX2 only, 1.1-1.6x up to 2^21 multiply-adds (bench/RESULTS.md,
// "GEMM kernels"). blas.h routes float32 products here and
// keeps OpenBLAS for float64 and for what this path refuses.
#pragma once

#include <cstddef>

namespace attnlab {

// Row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm with CblasRowMajor.
// Returns false, having touched nothing, when this path does not apply: the
// JIT path is switched off, alpha != 1 with beta != 0, beta not 0 or 1, the
// CPU has no kernel for the shape, or (a CPU without AVX-512) the product has
// more than 2^21 multiply-adds, where OpenBLAS was faster. Callers then use
// OpenBLAS.
bool jit_sgemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda,
               const float* B, size_t ldb, float beta, float* C, size_t ldc);

// On by default. Off sends every float32 product to OpenBLAS (benchmarks
// compare the two; results then differ from the JIT path's in the last bits).
void set_jit_gemm(bool on);
bool jit_gemm();

}  // namespace attnlab
