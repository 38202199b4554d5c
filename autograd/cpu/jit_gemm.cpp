#include "autograd/cpu/jit_gemm.h"

#include <libxsmm.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/cpu/kernels.h"

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

// libxsmm's target, chosen once before the first kernel is generated: the
// instruction set in use (kernels::isa(): ATTNLAB_ISA=avx2 makes an AVX-512 CPU
// generate AVX2 kernels); 0 where its kernels would not fuse their multiply-adds
// (below AVX2), else libxsmm's archid.
int kernel_target() {
    static const int target = [] {
        libxsmm_init();  // reads the CPU; the target set below replaces its choice
        if (kernels::isa() == kernels::Isa::avx2 && libxsmm_get_target_archid() > LIBXSMM_X86_AVX2)
            libxsmm_set_target_arch("hsw");
        return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX2 ? libxsmm_get_target_archid() : 0;
    }();
    return target;
}

// libxsmm's kernels: never with the generic set, whose CPUs have no FMA.
bool fused_kernels() { return kernel_target() != 0 && kernels::isa() != kernels::Isa::generic; }

// Above this many multiply-adds libxsmm's AVX2 kernels ran 0.6-1.0x OpenBLAS's
// sgemm (LIBXSMM_TARGET=hsw bench/bench_gemm, bench/RESULTS.md): ATTNLAB_GEMM=fast.
constexpr size_t kAvx2MaxWork = size_t(1) << 21;

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

// libxsmm's AVX-512 kernels split k between 2 or 4 accumulators, added at the
// end, wherever a block of C is one vector (16 floats) tall and fewer than 12
// columns wide in libxsmm's column-major terms (libxsmm 1.17,
// generator_gemm_avx512_microkernel.c: "number of n accumulators to hide FMA
// latencies"). In ours, where libxsmm's m is our N and its n our M: a kernel
// of at most 16 columns and 2 to 11 rows, and the last 1 to 16 columns of a
// kernel wider than 64 (its 64-column blocks leave one vector, blocked with at
// most 6 rows). Those are not kernels::gemm's order. The leading columns of a
// kernel that libxsmm computes as chains: all, all but such a last block, or
// none; tests/autograd/test_isa.cpp scans the shapes on each machine it runs on.
size_t chained_columns(size_t columns, size_t rows) {
    if (kernel_target() < LIBXSMM_X86_AVX512) return columns;  // AVX2: one accumulator, every shape
    if (columns <= 16) return rows == 1 || rows >= 12 ? columns : 0;
    const size_t last = columns % 64;
    return columns > 64 && last >= 1 && last <= 16 ? columns - last : columns;
}

}  // namespace

bool fast_gemm_setting() {
    static const bool fast = [] {
        const char* value = std::getenv("ATTNLAB_GEMM");
        if (value == nullptr || *value == '\0' || std::string(value) == "portable") return false;
        if (std::string(value) == "fast") return true;
        throw std::invalid_argument("ATTNLAB_GEMM: expected portable or fast, got '" + std::string(value).substr(0, 40) + "'");
    }();
    return fast;
}

bool openblas_takes(size_t M, size_t N, size_t K) {
    return fast_gemm_setting() && kernel_target() != 0 && kernel_target() < LIBXSMM_X86_AVX512 && M * N * K > kAvx2MaxWork;
}

void set_jit_gemm(bool on) { enabled.store(on); }
bool jit_gemm() { return enabled.load(); }

bool jit_sgemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda,
               const float* B, size_t ldb, float beta, float* C, size_t ldc) {
    if (!enabled.load(std::memory_order_relaxed)) return false;
    if (beta != 0.0f && beta != 1.0f) return false;
    if (alpha != 1.0f && beta != 0.0f) return false;  // alpha is applied after the product
    if (M == 0 || N == 0 || K == 0) return false;
    if (!fused_kernels() || openblas_takes(M, N, K)) return false;

    size_t nb = N, kb = K;
    const bool tiled = N * K > kTile;
    if (tiled) {
        nb = std::min(N, kTileColumns);
        kb = std::min(K, std::max<size_t>(16, kTile / nb));
    }
    // Columns [0, N_chained) here, the rest by kernels::gemm (chained_columns).
    const size_t N_chained = tiled ? N - N % nb + chained_columns(N % nb, M) : chained_columns(N, M);
    if (N_chained == 0) return false;
    libxsmm_smmfunction whole = nullptr;  // the one kernel of an untiled product
    // A transposed B goes to scratch whole when untiled, else one tile at a time
    // (kb x nb values, in cache as the kernel reads it): the whole of a large B
    // (a vocabulary's output layer, 50257 x 256) was written out again first.
    const size_t ldb_kernel = !trans_b ? ldb : transposed_stride(tiled ? std::min(nb, N_chained) : N_chained);
    if (tiled) {
        // Every kernel the tiles need (full tiles, the narrower last ones, beta
        // then 1), before anything is written.
        for (size_t m : {std::min(nb, N_chained), N_chained % nb})
            for (size_t k : {kb, K % kb})
                for (float b : {beta, 1.0f})
                    if (m && k && !kernel(m, M, k, ldb_kernel, lda, ldc, b, trans_a)) return false;
    } else if (!(whole = kernel(N_chained, M, K, ldb_kernel, lda, ldc, beta, trans_a))) {
        return false;
    }
    const float* B_stored = B;
    const size_t ldb_stored = ldb;
    if (trans_b && !tiled) {  // B's first N_chained rows, stored (N_chained, K) -> (K, N_chained), rows ldb_kernel apart
        std::vector<float>& Bt = scratch();
        Bt.resize(K * ldb_kernel);
        libxsmm_otrans(Bt.data(), B, sizeof(float), static_cast<libxsmm_blasint>(K), static_cast<libxsmm_blasint>(N_chained),
                       static_cast<libxsmm_blasint>(ldb), static_cast<libxsmm_blasint>(ldb_kernel));
        B = Bt.data();
        ldb = ldb_kernel;
    }
    if (trans_b && tiled) scratch().resize(kb * ldb_kernel);
    if (whole) whole(B, A, C);
    else for (size_t n0 = 0; n0 < N_chained; n0 += nb)
        for (size_t k0 = 0; k0 < K; k0 += kb) {
            const size_t m = std::min(nb, N_chained - n0), k = std::min(kb, K - k0);
            const libxsmm_smmfunction f = kernel(m, M, k, ldb_kernel, lda, ldc, k0 == 0 ? beta : 1.0f, trans_a);
            const float* first = B + k0 * ldb + n0;             // rows k0.. and columns n0.. of B (K, N)
            if (trans_b) {  // those of op(B): B's rows n0.., columns k0.., stored (m, k) -> (k, m), rows ldb_kernel apart
                libxsmm_otrans(scratch().data(), B_stored + n0 * ldb_stored + k0, sizeof(float), static_cast<libxsmm_blasint>(k),
                               static_cast<libxsmm_blasint>(m), static_cast<libxsmm_blasint>(ldb_stored),
                               static_cast<libxsmm_blasint>(ldb_kernel));
                first = scratch().data();
            }
            const float* second = trans_a ? A + k0 * lda : A + k0;  // rows k0.. of A^T (K, M), or columns k0.. of A (M, K)
            f(first, second, C + n0);
        }
    if (alpha != 1.0f)
        for (size_t i = 0; i < M; ++i) {
            float* __restrict row = C + i * ldc;  // restrict: the loop vectorises
            for (size_t j = 0; j < N_chained; ++j) row[j] *= alpha;
        }
    if (N_chained < N)  // the last columns: op(B)'s columns N_chained.. (B's rows when transposed)
        kernels::gemm(trans_a, trans_b, M, N - N_chained, K, alpha, A, lda,
                      trans_b ? B_stored + N_chained * ldb_stored : B_stored + N_chained, ldb_stored, beta, C + N_chained, ldc);
    return true;
}

}  // namespace attnlab
