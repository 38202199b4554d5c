// gemm (blas.h) on its two float32 paths, libxsmm's JIT kernels and kernels::gemm,
// against a float64 loop: every transpose, leading dimensions wider than the
// matrix, alpha and beta, and shapes large enough to be cut into tiles
// (jit_gemm.cpp) with remainders in both tiled dimensions; and sum_rows (shape.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "autograd/cpu/blas.h"
#include "autograd/cpu/jit_gemm.h"
#include "autograd/shape.h"
#include "tests/autograd/gemm_cases.h"

namespace attnlab {
namespace {

using Case = test::GemmCase;

// C = alpha op(A) op(B) + beta C in float64 on the stored float32 values.
std::vector<double> reference(const Case& c, const std::vector<float>& A, size_t lda, const std::vector<float>& B,
                              size_t ldb, const std::vector<float>& C, size_t ldc) {
    std::vector<double> out(C.begin(), C.end());
    for (size_t i = 0; i < c.M; ++i)
        for (size_t j = 0; j < c.N; ++j) {
            double acc = 0;
            for (size_t k = 0; k < c.K; ++k) {
                const double a = c.ta ? A[k * lda + i] : A[i * lda + k];
                const double b = c.tb ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
            }
            out[i * ldc + j] = c.alpha * acc + (c.beta == 0 ? 0.0 : c.beta * C[i * ldc + j]);
        }
    return out;
}

// The largest error of gemm on the case, relative to the sum of |a b| terms' scale (K).
double worst_error(const Case& c, bool jit) {
    std::mt19937 rng(static_cast<unsigned>(c.M * 131 + c.N * 17 + c.K + c.ta * 7 + c.tb * 3));
    std::uniform_real_distribution<float> u(-1, 1);
    const size_t lda = (c.ta ? c.M : c.K) + c.pad, ldb = (c.tb ? c.K : c.N) + c.pad, ldc = c.N + c.pad;
    std::vector<float> A((c.ta ? c.K : c.M) * lda), B((c.tb ? c.N : c.K) * ldb), C(c.M * ldc);
    for (float& x : A) x = u(rng);
    for (float& x : B) x = u(rng);
    for (float& x : C) x = u(rng);
    const std::vector<double> want = reference(c, A, lda, B, ldb, C, ldc);
    std::vector<float> got = C;
    set_jit_gemm(jit);
    gemm<float>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, got.data(), ldc);
    set_jit_gemm(true);
    double worst = 0;
    for (size_t i = 0; i < c.M; ++i)
        for (size_t j = 0; j < c.N + c.pad; ++j) {
            const size_t e = i * ldc + j;
            // the padding between rows is never written
            worst = std::max(worst, j < c.N ? std::abs(got[e] - want[e]) / static_cast<double>(c.K) : std::abs(got[e] - C[e]));
        }
    return worst;
}

TEST(Gemm, JitAndOwnPathsAgreeWithFloat64) {
    for (const Case& c : test::gemm_cases())
        for (bool jit : {true, false})
            EXPECT_LT(worst_error(c, jit), 1e-6)
                << (jit ? "jit" : "kernels::gemm") << " M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << c.ta
                << " tb=" << c.tb << " alpha=" << c.alpha << " beta=" << c.beta << " pad=" << c.pad;
}

TEST(Gemm, JitPathRefusesWhatItCannotDo) {
    // C (12,2) = A (12,2) B (2,2): 12 rows, which libxsmm's AVX-512 kernels keep in one chain per element
    std::vector<float> A(24, 1), B(4, 1), C(24, 1);
    EXPECT_FALSE(jit_sgemm(false, false, 12, 2, 2, 1, A.data(), 2, B.data(), 2, 0.5f, C.data(), 2));
    EXPECT_FALSE(jit_sgemm(false, false, 12, 2, 2, 2, A.data(), 2, B.data(), 2, 1, C.data(), 2));
    EXPECT_EQ(C, std::vector<float>(24, 1));  // refused: untouched
    set_jit_gemm(false);
    EXPECT_FALSE(jit_sgemm(false, false, 12, 2, 2, 1, A.data(), 2, B.data(), 2, 0, C.data(), 2));
    set_jit_gemm(true);
    EXPECT_TRUE(jit_sgemm(false, false, 12, 2, 2, 1, A.data(), 2, B.data(), 2, 0, C.data(), 2));
    EXPECT_EQ(C, std::vector<float>(24, 2));
}

// sum_rows (shape.h), behind bias gradients and unbroadcast: bitwise the rows
// added in order, across full 16-column blocks and remainders.
TEST(SumRows, IsTheInOrderSumOfTheRows) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    for (size_t rows : {1, 3, 37})
        for (size_t n : {1, 15, 16, 17, 40}) {
            std::vector<float> x(rows * n), got(n);
            for (float& v : x) v = u(rng);
            sum_rows<float>(x.data(), rows, n, got.data());
            for (size_t i = 0; i < n; ++i) {
                float want = 0;
                for (size_t r = 0; r < rows; ++r) want += x[r * n + i];
                EXPECT_EQ(got[i], want) << "rows=" << rows << " n=" << n << " i=" << i;
            }
        }
}

}  // namespace
}  // namespace attnlab
