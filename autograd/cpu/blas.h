// Row-major GEMM: C = alpha op(A) op(B) + beta C, float32 through libxsmm's JIT
// kernels where they apply (jit_gemm.h) and kernels::gemm otherwise, both in
// one order of addition on every CPU (kernels.h), float64 through OpenBLAS's
// dgemm (whose last bits may differ between CPUs);
// with op(A) (M,K), op(B) (K,N), C (M,N), all contiguous row-major, or with
// explicit leading dimensions (lda, ldb, ldc: the row strides of A, B and C as
// stored) for blocks inside larger arrays.
//
// OpenBLAS runs at one thread (threads.h). A product large enough to be worth
// it is cut here into row blocks of C (or column blocks when C has few rows),
// one per thread of attnlab's pool; inside a parallel loop it runs whole.
#pragma once

#include <cstddef>

namespace attnlab {

template <class T>
void gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, T alpha, const T* A, const T* B, T beta, T* C);

template <class T>
void gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, T alpha, const T* A, size_t lda, const T* B,
          size_t ldb, T beta, T* C, size_t ldc);

// Threads OpenBLAS may use (its own pool); returns the previous setting.
// attnlab keeps it at 1 (set_threads in threads.h); the op benchmark sets it.
int set_blas_threads(int threads);
int blas_threads();

// One BLAS thread, and OpenBLAS's own worker threads stopped: idle, they spin
// for 0.1 s of a core after the library loads. For a program's main, before any
// other thread may call BLAS (the CLI; not the Python module, a guest in a
// process whose other threads may be inside OpenBLAS through numpy).
void stop_blas_workers();

}  // namespace attnlab
