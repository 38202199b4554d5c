// Row-major GEMM through OpenBLAS (sgemm / dgemm): C = alpha op(A) op(B) + beta C,
// with op(A) (M,K), op(B) (K,N), C (M,N), all contiguous row-major.
#pragma once

#include <cstddef>

namespace attnlab {

template <class T>
void gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, T alpha, const T* A, const T* B, T beta, T* C);

// Threads OpenBLAS may use (its own pool); returns the previous setting.
int set_blas_threads(int threads);
int blas_threads();

}  // namespace attnlab
