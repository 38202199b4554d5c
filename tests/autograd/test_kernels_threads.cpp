// The vectorised float kernels against libm, and the thread pool's contract.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "autograd/cpu/kernels.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/cpu/blas.h"
#include "autograd/cpu/threads.h"

namespace attnlab {
namespace {

TEST(Kernels, ExpMatchesLibmWithinFourTenthsOfAMillionth) {
    std::vector<float> x;
    for (double v = -86.5; v <= 88.7; v += 0.0137) x.push_back(static_cast<float>(v));
    std::vector<float> y(x.size());
    kernels::exp_shifted(x.data(), 0.0f, y.data(), x.size());
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = std::exp(static_cast<double>(x[i]));
        worst = std::max(worst, std::abs(y[i] - want) / want);
    }
    EXPECT_LT(worst, 4e-7);
}

TEST(Kernels, ExpEdgeCases) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(kernels::exp(-inf), 0.0f);
    EXPECT_EQ(kernels::exp(-100.0f), 0.0f);
    EXPECT_EQ(kernels::exp(0.0f), 1.0f);
    EXPECT_EQ(kernels::exp(100.0f), inf);
    EXPECT_TRUE(std::isnan(kernels::exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Kernels, MaxIsTheLargestValueAtEveryLengthAndPosition) {
    // every length across the vector body and its remainder, the largest value in each place
    for (size_t n = 1; n <= 40; ++n)
        for (size_t at = 0; at < n; ++at) {
            std::vector<float> x(n);
            for (size_t i = 0; i < n; ++i) x[i] = -1000.0f + 0.5f * static_cast<float>((i * 7) % 13);
            x[at] = -3.25f;
            EXPECT_EQ(kernels::max(x.data(), n), -3.25f) << "n=" << n << " at=" << at;
            std::vector<double> xd(x.begin(), x.end());
            EXPECT_EQ(kernels::max(xd.data(), n), -3.25) << "n=" << n << " at=" << at;
        }
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> with_inf = {-inf, 2.0f, inf, 1.0f};
    EXPECT_EQ(kernels::max(with_inf.data(), with_inf.size()), inf);
}

TEST(Kernels, ExpShiftedReturnsTheSumOfItsOutputs) {
    std::vector<float> x(37), y(37);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i);
    const float total = kernels::exp_shifted(x.data(), 3.6f, y.data(), x.size());
    double want = 0;
    for (size_t i = 0; i < x.size(); ++i) want += std::exp(static_cast<double>(x[i]) - 3.6);
    EXPECT_NEAR(total, want, 1e-6 * want);
}

TEST(Kernels, GeluAndItsGradientMatchTheFloat64Form) {
    std::vector<float> x;
    for (double v = -12.0; v <= 12.0; v += 0.0031) x.push_back(static_cast<float>(v));
    std::vector<float> y(x.size()), ones(x.size(), 1.0f), dy(x.size());
    kernels::gelu_forward(x.data(), y.data(), x.size());
    kernels::gelu_backward(ones.data(), x.data(), y.data(), dy.data(), x.size());
    std::vector<double> xd(x.begin(), x.end()), yd(x.size()), onesd(x.size(), 1.0), dyd(x.size());
    kernels::gelu_forward(xd.data(), yd.data(), xd.size());
    kernels::gelu_backward(onesd.data(), xd.data(), yd.data(), dyd.data(), xd.size());
    double worst_y = 0, worst_dy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        worst_y = std::max(worst_y, std::abs(y[i] - yd[i]) / std::max(1.0, std::abs(yd[i])));
        worst_dy = std::max(worst_dy, std::abs(dy[i] - dyd[i]));
        // the float64 form itself against the textbook x Phi(x)
        EXPECT_NEAR(yd[i], xd[i] * 0.5 * (1 + std::erf(xd[i] / std::numbers::sqrt2)), 1e-12);
    }
    EXPECT_LT(worst_y, 1e-6);
    EXPECT_LT(worst_dy, 1e-6);
}

// Softmax rows are exponentiated in place. exp_shifted takes a tail as the last
// 16 values in one block; in place or not, at every length, each value must be
// the one the value alone gets (n = 1), and the sum the sum of the outputs.
TEST(Kernels, ExpShiftedInPlaceEqualsOutOfPlaceAtEveryLength) {
    Rng rng(11);
    for (size_t n = 1; n <= 53; ++n) {
        const std::vector<double> xd = rng.normal({n}, 0, 3).values();
        const std::vector<float> x(xd.begin(), xd.end());
        std::vector<float> out(n), in_place = x;
        const float total = kernels::exp_shifted(x.data(), 0.75f, out.data(), n);
        const float total_in_place = kernels::exp_shifted(in_place.data(), 0.75f, in_place.data(), n);
        ASSERT_EQ(total, total_in_place) << "n " << n;
        ASSERT_EQ(total, kernels::sum(out.data(), n)) << "n " << n;
        for (size_t i = 0; i < n; ++i) {
            float alone;
            kernels::exp_shifted(&x[i], 0.75f, &alone, 1);
            ASSERT_EQ(out[i], alone) << "n " << n << " at " << i;
            ASSERT_EQ(in_place[i], alone) << "n " << n << " at " << i;
        }
    }
}

// LayerNorm takes rows four at a time, side by side; each row's values must be
// those of the row taken alone, bit for bit, at every width (whole lanes and a
// remainder) and every row count (whole blocks and a tail), with and without
// its weight and bias. And they match the float64 rows within float rounding.
TEST(Kernels, LayerNormRowsTogetherEqualRowsAlone) {
    Rng rng(5);
    for (const size_t n : {1, 7, 8, 13, 32, 64, 100}) {
        for (const size_t rows : {1, 3, 4, 6, 9}) {
            const std::vector<double> xs = rng.normal({rows, n}, 0.5, 2).values(), gs = rng.normal({rows, n}, 0, 1).values();
            const std::vector<double> ws = rng.normal({n}, 1, 0.5).values(), bs = rng.normal({n}, 0, 0.5).values();
            const std::vector<float> x(xs.begin(), xs.end()), g(gs.begin(), gs.end()), w(ws.begin(), ws.end()), b(bs.begin(), bs.end());
            for (const bool affine : {false, true}) {
                const float* W = affine ? w.data() : nullptr;
                const float* B = affine ? b.data() : nullptr;
                std::vector<float> h(rows * n), y(rows * n), rstd(rows), dx(rows * n);
                kernels::layer_norm_rows(x.data(), W, B, 1e-5f, h.data(), y.data(), rstd.data(), rows, n);
                kernels::layer_norm_rows_backward(g.data(), W, h.data(), rstd.data(), dx.data(), rows, n);
                std::vector<double> hd(rows * n), yd(rows * n), rd(rows), dxd(rows * n);
                kernels::layer_norm_rows(xs.data(), affine ? ws.data() : nullptr, affine ? bs.data() : nullptr, 1e-5, hd.data(), yd.data(),
                                         rd.data(), rows, n);
                kernels::layer_norm_rows_backward(gs.data(), affine ? ws.data() : nullptr, hd.data(), rd.data(), dxd.data(), rows, n);
                for (size_t r = 0; r < rows; ++r) {
                    float h1[100], y1[100], r1, dx1[100];
                    kernels::layer_norm_rows(x.data() + r * n, W, B, 1e-5f, h1, y1, &r1, 1, n);
                    kernels::layer_norm_rows_backward(g.data() + r * n, W, h1, &r1, dx1, 1, n);
                    ASSERT_EQ(rstd[r], r1) << "n " << n << " rows " << rows << " row " << r;
                    for (size_t i = 0; i < n; ++i) {
                        ASSERT_EQ(y[r * n + i], y1[i]) << "n " << n << " rows " << rows << " row " << r << " at " << i;
                        ASSERT_EQ(dx[r * n + i], dx1[i]) << "n " << n << " rows " << rows << " row " << r << " at " << i;
                        if (n > 1) {
                            ASSERT_NEAR(y1[i], yd[r * n + i], 2e-5 * (1 + std::abs(yd[r * n + i])));
                            ASSERT_NEAR(dx1[i], dxd[r * n + i], 2e-4 * (1 + std::abs(dxd[r * n + i])));
                        }
                    }
                }
            }
        }
    }
}

// Restores the thread count a test changed.
struct ThreadCount {
    int saved = threads();
    ~ThreadCount() { set_threads(saved); }
};

TEST(Threads, ParallelForCoversTheRangeOnceInContiguousChunks) {
    ThreadCount restore;
    for (int t : {1, 2, 3}) {
        set_threads(t);
        std::vector<int> hits(1000, 0);
        parallel_for(hits.size(), [&](size_t b, size_t e) { for (size_t i = b; i < e; ++i) ++hits[i]; });
        for (int h : hits) ASSERT_EQ(h, 1);
    }
}

TEST(Threads, RethrowsTheFirstErrorAfterAllChunksFinish) {
    ThreadCount restore;
    set_threads(2);
    std::vector<int> done(2, 0);
    EXPECT_THROW(parallel_for(2, [&](size_t b, size_t) {
        done[b] = 1;
        if (b == 1) throw std::runtime_error("chunk 1 failed");
    }), std::runtime_error);
    EXPECT_EQ(done[0] + done[1], 2);
    // the pool still works afterwards
    int calls = 0;
    parallel_for(1, [&](size_t, size_t) { ++calls; });
    EXPECT_EQ(calls, 1);
}

TEST(Threads, NestedLoopsRunSerially) {
    ThreadCount restore;
    set_threads(2);
    std::vector<int> inner_parallel(2, -1);
    parallel_for(2, [&](size_t b, size_t) {
        parallel_for(4, [&](size_t i0, size_t i1) { inner_parallel[b] = (i0 == 0 && i1 == 4) ? 0 : 1; });
    });
    EXPECT_EQ(inner_parallel[0], 0);
    EXPECT_EQ(inner_parallel[1], 0);
}

// Stacked members' linear layers at two threads (the members shared out, each
// member's GEMMs whole on one thread): every member's output and gradients are
// what linear on its rows alone gives at one thread, bit for bit. Member rows
// 512, 0, 300, 512, 512, 17: each product under kParallelWork, several members a chunk.
TEST(Threads, StackedMembersOnTwoThreadsAreEachMemberAlone) {
    ThreadCount restore;
    const size_t in = 64, out = 64;
    const std::vector<size_t> rows = {512, 0, 300, 512, 512, 17};
    const size_t K = rows.size();
    size_t total = 0;
    for (size_t n : rows) total += n;
    Rng rng(5);
    const Tensor x = rng.normal({total, in}, 0, 1), W = rng.normal({K, out, in}, 0, 0.1), b = rng.normal({K, out}, 0, 0.1),
                 g = rng.normal({total, out}, 0, 1);
    set_threads(2);
    const Tensor xs = x.detach().set_requires_grad(true), Ws = W.detach().set_requires_grad(true),
                 bs = b.detach().set_requires_grad(true);
    const Tensor y = linear_members(xs, Ws, bs, rows);
    y.backward(g);
    set_threads(1);
    size_t first = 0;
    for (size_t m = 0; m < K; ++m) {
        const size_t n = rows[m];
        const Tensor xm = slice(x, 0, first, first + n).detach().set_requires_grad(true);
        const Tensor Wm = reshape(slice(W, 0, m, m + 1), {out, in}).detach().set_requires_grad(true);
        const Tensor bm = reshape(slice(b, 0, m, m + 1), {out}).detach().set_requires_grad(true);
        const Tensor ym = linear(xm, Wm, bm);
        if (n > 0) ym.backward(slice(g, 0, first, first + n));
        EXPECT_EQ(slice(y, 0, first, first + n).values(), ym.values()) << "member " << m << " output";
        if (n > 0) EXPECT_EQ(slice(xs.grad(), 0, first, first + n).values(), xm.grad().values()) << "member " << m << " dx";
        const std::vector<double> dW = slice(Ws.grad(), 0, m, m + 1).values(), db = slice(bs.grad(), 0, m, m + 1).values();
        if (n > 0) {
            EXPECT_EQ(dW, Wm.grad().values()) << "member " << m << " dW";
            EXPECT_EQ(db, bm.grad().values()) << "member " << m << " db";
        } else {
            EXPECT_EQ(dW, std::vector<double>(out * in, 0.0)) << "member " << m << " (no rows) dW";
        }
        first += n;
    }
}

TEST(Threads, BadCountIsRefused) {
    EXPECT_THROW(set_threads(0), Error);
}

// OpenBLAS's pthread build keeps worker threads of its own, which spin when
// idle; stop_blas_workers stops them, and neither set_threads nor a double
// product (OpenBLAS's dgemm) after that starts them again. What is left is this process's one thread.
TEST(Threads, StoppedBlasWorkersStayStopped) {
    ThreadCount restore;
    set_threads(1);
    const int previous = set_blas_threads(2);
    std::vector<double> a(64 * 64, 1.0), c(64 * 64);
    gemm<double>(false, false, 64, 64, 64, 1.0, a.data(), a.data(), 0.0, c.data());
    stop_blas_workers();
    set_threads(1);  // as the trainer does, after the CLI stopped them
    gemm<double>(false, false, 64, 64, 64, 1.0, a.data(), a.data(), 0.0, c.data());
    EXPECT_EQ(c[0], 64.0);
    const auto tasks = std::distance(std::filesystem::directory_iterator("/proc/self/task"), {});
    EXPECT_EQ(tasks, 1);
    set_blas_threads(previous);
    set_blas_threads(1);
}

// The same training-sized computation gives bitwise the same values twice at a
// given thread count, and matches one thread within float rounding.
TEST(Threads, MatmulIsDeterministicPerThreadCountAndAgreesAcrossCounts) {
    ThreadCount restore;
    Rng rng(3);
    const Tensor a = rng.normal({512, 256}, 0, 1), b = rng.normal({256, 384}, 0, 1);
    set_threads(1);
    const std::vector<double> one = matmul(a, b).values();
    set_threads(2);
    const std::vector<double> two = matmul(a, b).values(), again = matmul(a, b).values();
    EXPECT_EQ(two, again);
    for (size_t i = 0; i < one.size(); ++i) ASSERT_NEAR(one[i], two[i], 1e-4);
}

}  // namespace
}  // namespace attnlab
