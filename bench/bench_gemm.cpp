// bench_gemm: attnlab's float32 gemm (blas.h: libxsmm's JIT kernels, in tiles)
// against plain OpenBLAS cblas_sgemm, one thread, on the products the bench
// training workloads make (bench_train --size small | medium | large | nanogpt:
// Linear forward X W^T, its two gradients, one attention head's Q K^T and P V).
//
//   build/bench/bench_gemm [--seconds S]        (prints a Markdown table)
//
// Each shape: both sides warmed up, then timed in alternating turns (OpenBLAS,
// attnlab, three times round) of seconds/6 each; the median of each side's
// per-call times is reported, with GFLOP/s and their ratio.
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "autograd/cpu/blas.h"
#include "autograd/cpu/jit_gemm.h"
#include "autograd/cpu/threads.h"
#include "bench/bench_common.h"

namespace attnlab {
namespace {

struct Shape3 {
    const char* what;
    size_t M, N, K;
    bool ta, tb;
};

// What each bench_train size multiplies (rows = batch x sequence).
const std::vector<Shape3> kShapes = {
    {"small: head Q K^T", 16, 16, 16, false, true},
    {"small: head P V", 16, 16, 16, false, false},
    {"small: X W^T (rows 512, 32 -> 32)", 512, 32, 32, false, true},
    {"small: X W^T (rows 512, 32 -> 128)", 512, 128, 32, false, true},
    {"small: dX = G W (rows 512, 128 -> 32)", 512, 32, 128, false, false},
    {"small: dW = G^T X (128 x 32 over 512 rows)", 128, 32, 512, true, false},
    {"nanogpt: head Q K^T", 64, 64, 32, false, true},
    {"nanogpt: X W^T (rows 768, 128 -> 384)", 768, 384, 128, false, true},
    {"nanogpt: X W^T (rows 768, 128 -> 512)", 768, 512, 128, false, true},
    {"nanogpt: dX = G W (rows 768, 512 -> 128)", 768, 128, 512, false, false},
    {"nanogpt: dW = G^T X (512 x 128 over 768 rows)", 512, 128, 768, true, false},
    {"medium: X W^T (rows 4096, 128 -> 512)", 4096, 512, 128, false, true},
    {"medium: dW = G^T X (512 x 128 over 4096 rows)", 512, 128, 4096, true, false},
    {"large: X W^T (rows 4096, 256 -> 1024)", 4096, 1024, 256, false, true},
    {"large: dX = G W (rows 4096, 1024 -> 256)", 4096, 256, 1024, false, false},
    {"large: dW = G^T X (1024 x 256 over 4096 rows)", 1024, 256, 4096, true, false},
    {"gpt2-vocabulary: logits X W^T (rows 64, 256 -> 50257)", 64, 50257, 256, false, true},
};

// Median seconds per call of f over `turns` turns of `seconds` each, alternating with g.
std::pair<double, double> alternate(const std::function<void()>& f, const std::function<void()>& g, double seconds) {
    using clock = std::chrono::steady_clock;
    std::vector<double> tf, tg;
    f();
    g();
    for (int turn = 0; turn < 3; ++turn)
        for (auto [fn, times] : {std::pair{&f, &tf}, std::pair{&g, &tg}}) {
            const auto end = clock::now() + std::chrono::duration<double>(seconds);
            do {
                const auto t0 = clock::now();
                (*fn)();
                times->push_back(std::chrono::duration<double>(clock::now() - t0).count());
            } while (clock::now() < end);
        }
    return {bench::median(tf), bench::median(tg)};
}

int run(int argc, char** argv) {
    cxxopts::Options options("bench_gemm", "attnlab's float32 gemm (libxsmm JIT kernels) vs OpenBLAS sgemm, one thread");
    options.add_options()("seconds", "seconds per shape", cxxopts::value<double>()->default_value("1.2"))(
        "h,help", "show this help");
    const auto args = options.parse(argc, argv);
    if (args.count("help")) {
        std::printf("%s\n", options.help().c_str());
        return 0;
    }
    const double seconds = args["seconds"].as<double>();
    set_threads(1);  // and OpenBLAS at one thread
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    std::printf("| product | M x N x K | OpenBLAS GFLOP/s | attnlab GFLOP/s | ratio |\n|---|---|---|---|---|\n");
    for (const Shape3& s : kShapes) {
        std::vector<float> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N);
        for (float& x : A) x = u(rng);
        for (float& x : B) x = u(rng);
        const int lda = static_cast<int>(s.ta ? s.M : s.K), ldb = static_cast<int>(s.tb ? s.K : s.N);
        auto openblas = [&] {
            cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                        static_cast<int>(s.M), static_cast<int>(s.N), static_cast<int>(s.K), 1.0f, A.data(), lda,
                        B.data(), ldb, 0.0f, C.data(), static_cast<int>(s.N));
        };
        auto ours = [&] { gemm<float>(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), B.data(), 0.0f, C.data()); };
        const auto [t_blas, t_ours] = alternate(openblas, ours, seconds / 6);
        const double flop = 2.0 * static_cast<double>(s.M * s.N * s.K);
        std::printf("| %s | %zu x %zu x %zu%s%s | %.1f | %.1f | %.2f |\n", s.what, s.M, s.N, s.K, s.ta ? " (A^T)" : "",
                    s.tb ? " (B^T)" : "", flop / t_blas / 1e9, flop / t_ours / 1e9, t_blas / t_ours);
    }
    return 0;
}

}  // namespace
}  // namespace attnlab

int main(int argc, char** argv) {
    try {
        return attnlab::run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gemm: %s\n", e.what());
        return 2;
    }
}
