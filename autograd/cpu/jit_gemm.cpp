#include "autograd/cpu/jit_gemm.h"

#include <libxsmm.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace attnlab {

namespace {

std::atomic<bool> enabled{true};

// libxsmm's kernels are column-major: C'(m, n) = A'(m, k) B'(k, n). A row-major
// (M, N) matrix is the same memory as a column-major (N, M) one, so row-major
//   C (M,N) = op(A) (M,K) op(B) (K,N)
// is column-major
//   C' (N,M) = op(B)' (N,K) op(A)' (K,M),   m = N, n = M, k = K,
// with B in the kernel's first operand and A in its second. A transposed A
// (stored (K, M)) is the kernel's TRANS_B flag. A transposed B (stored (N, K))
// would be its TRANS_A flag, which libxsmm 1.17 does not generate: B is copied
// transposed into per-thread scratch first by libxsmm's own transposition
// (N*K values, against M*N*K multiply-adds).
//
// The kernels do not block for the cache: the first operand (B, K x N) is read
// once per column block of C. Products whose B exceeds kTile values run as
// tiles of at most 256 columns of C by kTile / 256 rows of B (256 KiB), the
// fastest of 2^14, 2^15, 2^16 and whole on the shapes measured, C accumulating
// over the K tiles (beta = 1 after the first).
constexpr size_t kTile = size_t(1) << 16;
constexpr size_t kTileColumns = 256;

// Where the kernels are AVX2 at widest, OpenBLAS's sgemm (AVX2 too, but blocked
// for the cache) is faster on large products: libxsmm's AVX2 kernels ran
// 1.1-1.6x OpenBLAS up to 2^21 multiply-adds and 0.6-1.0x above
// (LIBXSMM_TARGET=hsw bench/bench_gemm, bench/RESULTS.md). With AVX-512 they
// were 1.3-2.3x at every size measured.
constexpr size_t kAvx2MaxWork = size_t(1) << 21;

bool wide_kernels() {
    static const bool avx512 = libxsmm_get_target_archid() >= LIBXSMM_X86_AVX512;
    return avx512;
}

std::vector<float>& scratch() {
    thread_local std::vector<float> buffer;
    return buffer;
}

// The rows of a transposed B in scratch: N values, 16 more where N is a
// multiple of 128. libxsmm's transposition writes down columns, and at a stride
// of a multiple of 512 bytes those columns fall into a few cache sets: on the
// 2-core AVX-512 machine, 0.9-1.0 ns a value at N = 256 or 512 and K = 64-512
// against 0.05-0.15 with the padding, and 0.05-0.12 on every other weight shape
// of the configs. The scalar 16 x 16 blocks it replaced took 0.47-0.56 (2.8-3.6
// at N >= 1024). The padding changes where B's rows lie, not the arithmetic.
size_t transposed_stride(size_t N) { return N % 128 == 0 ? N + 16 : N; }

libxsmm_smmfunction kernel(size_t m, size_t n, size_t k, size_t lda, size_t ldb, size_t ldc, float beta, bool trans_b) {
    const libxsmm_blasint la = static_cast<libxsmm_blasint>(lda), lb = static_cast<libxsmm_blasint>(ldb),
                          lc = static_cast<libxsmm_blasint>(ldc);
    const float alpha = 1;
    const int flags = trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : 0, prefetch = LIBXSMM_PREFETCH_NONE;
    return libxsmm_smmdispatch(static_cast<libxsmm_blasint>(m), static_cast<libxsmm_blasint>(n),
                               static_cast<libxsmm_blasint>(k), &la, &lb, &lc, &alpha, &beta, &flags, &prefetch);
}

}  // namespace

void set_jit_gemm(bool on) { enabled.store(on); }
bool jit_gemm() { return enabled.load(); }

bool jit_sgemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda,
               const float* B, size_t ldb, float beta, float* C, size_t ldc) {
    if (!enabled.load(std::memory_order_relaxed)) return false;
    if (beta != 0.0f && beta != 1.0f) return false;
    if (alpha != 1.0f && beta != 0.0f) return false;  // alpha is applied after the product
    if (M == 0 || N == 0 || K == 0) return false;
    if (!wide_kernels() && M * N * K > kAvx2MaxWork) return false;

    size_t nb = N, kb = K;
    libxsmm_smmfunction whole = nullptr;  // the one kernel of an untiled product
    const size_t ldb_kernel = trans_b ? transposed_stride(N) : ldb;
    if (N * K > kTile) {
        nb = std::min(N, kTileColumns);
        kb = std::min(K, std::max<size_t>(16, kTile / nb));
        // Every kernel the tiles need (full tiles, the narrower last ones, beta
        // then 1), before anything is written.
        for (size_t m : {nb, N % nb})
            for (size_t k : {kb, K % kb})
                for (float b : {beta, 1.0f})
                    if (m && k && !kernel(m, M, k, ldb_kernel, lda, ldc, b, trans_a)) return false;
    } else if (!(whole = kernel(N, M, K, ldb_kernel, lda, ldc, beta, trans_a))) {
        return false;
    }
    if (trans_b) {  // B stored (N, K) -> (K, N), rows ldb_kernel apart
        std::vector<float>& Bt = scratch();
        Bt.resize(K * ldb_kernel);
        libxsmm_otrans(Bt.data(), B, sizeof(float), static_cast<libxsmm_blasint>(K), static_cast<libxsmm_blasint>(N),
                       static_cast<libxsmm_blasint>(ldb), static_cast<libxsmm_blasint>(ldb_kernel));
        B = Bt.data();
        ldb = ldb_kernel;
    }
    if (whole) whole(B, A, C);
    else for (size_t n0 = 0; n0 < N; n0 += nb)
        for (size_t k0 = 0; k0 < K; k0 += kb) {
            const size_t m = std::min(nb, N - n0), k = std::min(kb, K - k0);
            const libxsmm_smmfunction f = kernel(m, M, k, ldb, lda, ldc, k0 == 0 ? beta : 1.0f, trans_a);
            const float* first = B + k0 * ldb + n0;             // rows k0.. and columns n0.. of B (K, N)
            const float* second = trans_a ? A + k0 * lda : A + k0;  // rows k0.. of A^T (K, M), or columns k0.. of A (M, K)
            f(first, second, C + n0);
        }
    if (alpha != 1.0f)
        for (size_t i = 0; i < M; ++i) {
            float* __restrict row = C + i * ldc;  // restrict: the loop vectorises
            for (size_t j = 0; j < N; ++j) row[j] *= alpha;
        }
    return true;
}

}  // namespace attnlab
