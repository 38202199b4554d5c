#include "autograd/blas.h"

#include <cblas.h>

namespace attnlab {

namespace {
CBLAS_TRANSPOSE flag(bool trans) { return trans ? CblasTrans : CblasNoTrans; }
}  // namespace

template <>
void gemm<float>(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha, const float* A,
                 const float* B, float beta, float* C) {
    if (M == 0 || N == 0) return;
    if (K == 0) {  // BLAS rejects a leading dimension of 0
        for (size_t i = 0; i < M * N; ++i) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    const int lda = static_cast<int>(trans_a ? M : K), ldb = static_cast<int>(trans_b ? K : N);
    cblas_sgemm(CblasRowMajor, flag(trans_a), flag(trans_b), static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), alpha, A, lda, B, ldb, beta, C, static_cast<int>(N));
}

template <>
void gemm<double>(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, double alpha, const double* A,
                  const double* B, double beta, double* C) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (size_t i = 0; i < M * N; ++i) C[i] = beta == 0.0 ? 0.0 : beta * C[i];
        return;
    }
    const int lda = static_cast<int>(trans_a ? M : K), ldb = static_cast<int>(trans_b ? K : N);
    cblas_dgemm(CblasRowMajor, flag(trans_a), flag(trans_b), static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), alpha, A, lda, B, ldb, beta, C, static_cast<int>(N));
}

int set_blas_threads(int threads) {
    const int previous = openblas_get_num_threads();
    openblas_set_num_threads(threads);
    return previous;
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace attnlab
