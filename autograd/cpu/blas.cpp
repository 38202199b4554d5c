#include "autograd/cpu/blas.h"

#include <cblas.h>

#include "autograd/cpu/jit_gemm.h"
#include "autograd/cpu/kernels.h"
#include "autograd/cpu/threads.h"

// OpenBLAS's pthread build starts its worker threads when it is loaded, and each
// spins (sched_yield) for about 2^28 cycles waiting for work before it sleeps:
// 0.1 s of a second core in every attnlab process, which at `sweep --jobs 2`
// is taken from the other cell. stop_blas_workers stops them; OpenBLAS starts
// them again by itself if it is later asked for more than one thread. Weak: OpenBLAS's serial
// and OpenMP builds have no such server, and then there is nothing to stop.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

namespace attnlab {

namespace {

CBLAS_TRANSPOSE flag(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// float32: libxsmm's kernels where they apply (jit_gemm.h), kernels::gemm
// otherwise; both in kernels.h's one order, so a product's bits do not depend
// on the CPU. Not OpenBLAS, whose sgemm adds in an order of its own per CPU,
// unless ATTNLAB_GEMM=fast asks for it (jit_gemm.h).
void blas_gemm(bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
               size_t ldb, float beta, float* C, size_t ldc) {
    if (jit_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
    if (openblas_takes(M, N, K))  // ATTNLAB_GEMM=fast on an AVX2 CPU: faster, in OpenBLAS's order
        cblas_sgemm(CblasRowMajor, flag(ta), flag(tb), static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
                    A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
    else
        kernels::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void blas_gemm(bool ta, bool tb, size_t M, size_t N, size_t K, double alpha, const double* A, size_t lda,
               const double* B, size_t ldb, double beta, double* C, size_t ldc) {
    cblas_dgemm(CblasRowMajor, flag(ta), flag(tb), static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
                A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

constexpr size_t kMinBlock = 32;  // rows or columns per thread, at least

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, T alpha, const T* A, size_t lda, const T* B,
          size_t ldb, T beta, T* C, size_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {  // BLAS rejects a leading dimension of 0
        for (size_t i = 0; i < M; ++i)
            for (size_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
        return;
    }
    if (threads() == 1 || in_parallel_region() || M * N * K < kParallelWork) {
        blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (M >= N || N < 2 * kMinBlock) {
        // rows [r0, r1) of C need rows [r0, r1) of op(A): A + r0 rows, or A + r0 columns when transposed
        parallel_for(M, [&](size_t r0, size_t r1) {
            const T* A_block = trans_a ? A + r0 : A + r0 * lda;
            blas_gemm(trans_a, trans_b, r1 - r0, N, K, alpha, A_block, lda, B, ldb, beta, C + r0 * ldc, ldc);
        }, kMinBlock);
    } else {
        // columns [c0, c1) of C need columns [c0, c1) of op(B)
        parallel_for(N, [&](size_t c0, size_t c1) {
            const T* B_block = trans_b ? B + c0 * ldb : B + c0;
            blas_gemm(trans_a, trans_b, M, c1 - c0, K, alpha, A, lda, B_block, ldb, beta, C + c0, ldc);
        }, kMinBlock);
    }
}

template <class T>
void gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, T alpha, const T* A, const T* B, T beta, T* C) {
    gemm<T>(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N);
}

template void gemm<float>(bool, bool, size_t, size_t, size_t, float, const float*, const float*, float, float*);
template void gemm<double>(bool, bool, size_t, size_t, size_t, double, const double*, const double*, double, double*);
template void gemm<float>(bool, bool, size_t, size_t, size_t, float, const float*, size_t, const float*, size_t, float,
                          float*, size_t);
template void gemm<double>(bool, bool, size_t, size_t, size_t, double, const double*, size_t, const double*, size_t,
                           double, double*, size_t);

int set_blas_threads(int threads) {
    const int previous = openblas_get_num_threads();
    // not when unchanged: openblas_set_num_threads starts stopped workers again
    if (threads != previous) openblas_set_num_threads(threads);
    return previous;
}

void stop_blas_workers() {
    set_blas_threads(1);
    if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace attnlab
