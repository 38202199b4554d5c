// A run's numbers do not depend on the CPU (kernels.h): every instruction set's
// float kernels the machine runs, the generic one included, give the same bits
// on the same inputs, and every float32 product, through libxsmm's kernels or
// kernels::gemm, is the one order of addition kernels.h defines, written out
// here as a plain loop. tests/cli/test_isa.py trains under each set.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "autograd/cpu/blas.h"
#include "autograd/cpu/jit_gemm.h"
#include "autograd/cpu/kernels.h"
#include "autograd/cpu/threads.h"
#include "autograd/pointwise.h"
#include "tests/autograd/gemm_cases.h"

namespace attnlab {
namespace {

using kernels::Isa;

std::vector<Isa> sets_this_cpu_runs() {
    std::vector<Isa> sets;
    for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512})
        if (isa <= kernels::widest_isa()) sets.push_back(isa);
    return sets;
}

// Restores the set in use and the JIT path when a test ends.
struct IsaGuard {
    Isa saved = kernels::isa();
    ~IsaGuard() {
        kernels::set_isa(saved);
        set_jit_gemm(true);
    }
};

std::vector<float> random_values(size_t n, unsigned seed, float scale = 3) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0, scale);
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every kernel's outputs on one input, concatenated.
std::vector<float> every_kernel(size_t n) {
    const std::vector<float> x = random_values(n, static_cast<unsigned>(n)), y = random_values(n, static_cast<unsigned>(n + 1000));
    std::vector<float> out{kernels::sum(x.data(), n), kernels::dot(x.data(), y.data(), n), kernels::max(x.data(), n)};
    std::vector<float> e(n), gelu(n), dgelu(n);
    out.push_back(kernels::exp_shifted(x.data(), out[2], e.data(), n));
    kernels::gelu_forward(x.data(), gelu.data(), n);
    kernels::gelu_backward(y.data(), x.data(), gelu.data(), dgelu.data(), n);
    for (const auto* v : {&e, &gelu, &dgelu}) out.insert(out.end(), v->begin(), v->end());
    // every pointwise function of autograd/pointwise.h, forward and backward
    for (size_t function = 0; function < pointwise::All::count; ++function) {
        std::vector<float> fx(n), dfx(n);
        kernels::pointwise_forward(function, x.data(), 0.3f, fx.data(), n);
        kernels::pointwise_backward(function, y.data(), x.data(), 0.3f, dfx.data(), n);
        for (const auto* v : {&fx, &dfx}) out.insert(out.end(), v->begin(), v->end());
    }
    // LayerNorm over 7 rows of n (four together, three alone), with and without w and b
    const size_t rows = 7;
    const std::vector<float> X = random_values(rows * n, 7), G = random_values(rows * n, 8), w = random_values(n, 9, 1),
                             b = random_values(n, 10, 1);
    for (bool affine : {false, true}) {
        std::vector<float> h(rows * n), out_y(rows * n), rstd(rows), dx(rows * n);
        kernels::layer_norm_rows(X.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr, 1e-5f, h.data(), out_y.data(),
                                 rstd.data(), rows, n);
        kernels::layer_norm_rows_backward(G.data(), affine ? w.data() : nullptr, h.data(), rstd.data(), dx.data(), rows, n);
        for (const auto* v : {&h, &out_y, &rstd, &dx}) out.insert(out.end(), v->begin(), v->end());
    }
    return out;
}

TEST(Isa, EveryKernelGivesTheSameBitsOnEverySet) {
    IsaGuard guard;
    for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257, 1000}) {
        kernels::set_isa(Isa::generic);
        const std::vector<float> want = every_kernel(n);
        for (Isa isa : sets_this_cpu_runs()) {
            kernels::set_isa(isa);
            EXPECT_TRUE(same_bits(every_kernel(n), want)) << kernels::isa_name(isa) << " against generic, n = " << n;
        }
    }
}

using Product = test::GemmCase;

// kernels.h's order, written out: each element one chain of fused multiply-adds
// over k in order, from C when alpha = beta = 1, else from 0 and then times
// alpha (beta = 0) or alpha acc + beta C.
void ordered_product(const Product& p, const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc) {
    for (size_t i = 0; i < p.M; ++i)
        for (size_t j = 0; j < p.N; ++j) {
            float& c = C[i * ldc + j];
            const bool from_c = p.alpha == 1 && p.beta == 1;
            float acc = from_c ? c : 0.0f;
            for (size_t k = 0; k < p.K; ++k)
                acc = std::fma(p.ta ? A[k * lda + i] : A[i * lda + k], p.tb ? B[j * ldb + k] : B[k * ldb + j], acc);
            c = from_c ? acc : p.beta == 0 ? (p.alpha == 1 ? acc : acc * p.alpha) : std::fma(p.alpha, acc, p.beta * c);
        }
}

// gemm (blas.h) on one product, on `threads` threads, against the written-out order.
void expect_ordered(const Product& p, const char* path, int threads) {
    const size_t lda = (p.ta ? p.M : p.K) + p.pad, ldb = (p.tb ? p.K : p.N) + p.pad, ldc = p.N + p.pad;
    const unsigned seed = static_cast<unsigned>(p.M * 131 + p.N * 17 + p.K + p.ta * 7 + p.tb * 3);
    const std::vector<float> A = random_values((p.ta ? p.K : p.M) * lda, seed, 1), B = random_values((p.tb ? p.N : p.K) * ldb, seed + 1, 1);
    std::vector<float> want = random_values(p.M * ldc, seed + 2, 1), got = want;
    ordered_product(p, A.data(), lda, B.data(), ldb, want.data(), ldc);
    set_threads(threads);
    gemm<float>(p.ta, p.tb, p.M, p.N, p.K, p.alpha, A.data(), lda, B.data(), ldb, p.beta, got.data(), ldc);
    set_threads(1);
    EXPECT_TRUE(same_bits(got, want)) << path << " on " << threads << " thread(s), M=" << p.M << " N=" << p.N << " K=" << p.K
                                      << " ta=" << p.ta << " tb=" << p.tb << " alpha=" << p.alpha << " beta=" << p.beta
                                      << " pad=" << p.pad;
}

TEST(Isa, EveryProductIsOneOrderOfAdditionOnEverySetAndThroughLibxsmm) {
    IsaGuard guard;
    for (const Product& p : test::gemm_cases()) {
        set_jit_gemm(false);
        for (Isa isa : sets_this_cpu_runs()) {
            kernels::set_isa(isa);
            if (isa != Isa::generic || p.M * p.N * p.K <= (size_t(1) << 22))  // libm's fmaf: slow
                expect_ordered(p, kernels::isa_name(isa), 1);
        }
        kernels::set_isa(kernels::widest_isa());
        set_jit_gemm(true);
        expect_ordered(p, "libxsmm", 1);
        expect_ordered(p, "libxsmm", 2);  // cut into row or column blocks
    }
}

// libxsmm's kernels split k among accumulators on some AVX-512 shapes
// (jit_gemm.cpp, chained_columns): the shapes around those edges, every one
// against the written-out order.
TEST(Isa, ProductsOfEveryShapeNearLibxsmmsBlockEdgesAreOneOrder) {
    IsaGuard guard;
    kernels::set_isa(kernels::widest_isa());
    std::vector<size_t> columns;
    for (size_t n = 1; n <= 20; ++n) columns.push_back(n);
    for (size_t first : {60, 124, 188, 252, 316})
        for (size_t n = first; n <= first + 24; ++n) columns.push_back(n);
    for (size_t M : {1, 2, 5, 7, 11, 12, 13, 31})
        for (size_t N : columns)
            for (size_t K : {8, 28, 33}) {
                const bool ta = (N + K) % 2 == 1, tb = (M + N) % 3 == 0;
                expect_ordered({M, N, K, ta, tb, 1, static_cast<float>(N % 2), 0}, "libxsmm", 1);
            }
}

TEST(Isa, AWiderSetThanTheCpuRunsIsRefused) {
    if (kernels::widest_isa() == Isa::avx512) GTEST_SKIP() << "this CPU runs every set";
    EXPECT_THROW(kernels::set_isa(Isa::avx512), std::invalid_argument);
}

}  // namespace
}  // namespace attnlab
