// float32 GEMM through libxsmm's JIT-compiled kernels (Debian's libxsmm-dev).
//
// Why: Debian 12's OpenBLAS (0.3.21) runs its Haswell (AVX2) sgemm on this
// project's machines, pays a lock, a zeroing pass of C and a packing copy on
// every call, and holds that lock against other threads. libxsmm generates a
// kernel for each (m, n, k, leading dimensions) on first use, for the widest
// vector unit the CPU has, and calls it without packing or locking: with
// AVX-512, 1.3-2.3x OpenBLAS's GFLOP/s from 16x16x16 to 4096x1024x256 on one
// thread; AVX2 only, 1.1-1.6x up to 2^21 multiply-adds (bench/RESULTS.md,
// "GEMM kernels").
//
// Its AVX2 kernels, and its AVX-512 kernels but for the shapes jit_gemm.cpp's
// chained_columns lists, compute every element of C as the same chain of fused
// multiply-adds over k in order, kernels::gemm's order (kernels.h), so a
// product has the same bits on every CPU with FMA; without FMA (libxsmm's SSE
// and AVX kernels multiply and add apart) this path is not used. blas.h routes
// float32 products here and to kernels::gemm for what this path refuses
// (tests/autograd/test_isa.cpp checks that both give the same bits).
#pragma once

#include <cstddef>

namespace attnlab {

// Row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm with CblasRowMajor.
// Returns false, having touched nothing, when this path does not apply: the
// JIT path is switched off, the kernels in use are the generic set (kernels.h:
// no FMA, or ATTNLAB_ISA=generic), alpha != 1 with beta != 0, beta not 0 or 1,
// libxsmm has no kernel for the shape, or its AVX-512 kernel would split k
// among accumulators for every column (a product of at most 16 columns and 2
// to 11 rows). Callers then use kernels::gemm. Where only a product's last 1
// to 16 columns would be split, kernels::gemm computes those here. With
// ATTNLAB_ISA=avx2 on an AVX-512 CPU libxsmm generates AVX2 kernels too.
bool jit_sgemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda,
               const float* B, size_t ldb, float beta, float* C, size_t ldc);

// ATTNLAB_GEMM, read at the first product: unset or "portable", every float32
// product in kernels.h's one order (the same bits on every CPU); "fast", where
// libxsmm's kernels are AVX2 at widest, products above 2^21 multiply-adds go to
// OpenBLAS's sgemm, which was up to 1.5x faster there on large products
// (bench/RESULTS.md, issue 51) but adds in an order of its own per CPU: such a
// run's numbers then depend on the machine. Any other value throws
// std::invalid_argument naming it. With AVX-512 kernels "fast" changes nothing.
bool fast_gemm_setting();
// Whether that rule sends this product to OpenBLAS.
bool openblas_takes(size_t M, size_t N, size_t K);

// On by default. Off sends every float32 product to kernels::gemm (the same
// bits, slower; tests and benchmarks compare the two).
void set_jit_gemm(bool on);
bool jit_gemm();

}  // namespace attnlab
