// bench_ops: attnlab's batched matmul and softmax at attention shapes, forward
// and forward+backward, beside a plain OpenBLAS sgemm loop on preallocated
// buffers (the reference our matmul must reach: >= 90% of its speed).
//
// One JSON line per measurement on stdout; bench/bench_ops.py prints the same
// lines for PyTorch and bench/ops_table.py turns both into one table.
//
// Method (shared with bench_ops.py): each workload is warmed up and gets
// N = max(min_reps, seconds / its warm-up time) repetitions; the median is
// reported. The workloads of one group (e.g. our scores product and the sgemm
// loops computing the same product) take turns: a third of each one's reps,
// then the next one's, three times round, so that a change of machine load
// hits all of them, while each keeps its own data in cache during its turn
// (alternating every single rep made the S = 128 products ~25% slower for all).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "autograd/cpu/memory.h"
#include "autograd/cpu/blas.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "bench/bench_common.h"

namespace attnlab {
namespace {

using bench::json_string;
using bench::median;
using bench::print_probe;
using bench::sgemm_loop;

struct Settings {
    int threads = 1;
    double seconds = 0.3;         // target length of one workload's measurement
    size_t min_reps = 5;
    size_t max_reps = 400;
    size_t blocks = 3;            // turns each workload's reps are split into, the group's workloads alternating
    double warmup_seconds = 0.1;  // per workload, after at least 2 repetitions
};

struct AttentionShape {
    size_t batch, seq, head;  // batch = B*H; seq = S; head = d
};

// One timed workload. `run` does the timed work and returns what must outlive
// the timer (its output) so that freeing it is not timed; `reset` (untimed)
// drops accumulated gradients between repetitions.
struct Workload {
    std::string name;
    double flops;  // 0 when not a matmul
    double bytes;  // memory traffic of a softmax, 0 otherwise
    std::function<Tensor()> run;
    std::function<void()> reset = [] {};
    std::vector<double> times{};
};

double seconds_of(Workload& w) {
    const auto start = std::chrono::steady_clock::now();
    Tensor out = w.run();
    const auto stop = std::chrono::steady_clock::now();
    out = Tensor();
    w.reset();
    return std::chrono::duration<double>(stop - start).count();
}

void measure_group(std::vector<Workload>& group, const Settings& settings) {
    std::vector<size_t> reps;
    for (Workload& w : group) {
        std::vector<double> warm;
        double spent = 0;
        while (warm.size() < 2 || spent < settings.warmup_seconds) {
            warm.push_back(seconds_of(w));
            spent += warm.back();
        }
        const double estimate = median(std::vector<double>(warm.begin() + 1, warm.end()));
        const double wanted = std::ceil(settings.seconds / std::max(estimate, 1e-9));
        reps.push_back(std::clamp(static_cast<size_t>(wanted), settings.min_reps, settings.max_reps));
    }
    for (size_t turn = 1; turn <= settings.blocks; ++turn)
        for (size_t i = 0; i < group.size(); ++i) {
            const size_t until = (reps[i] * turn + settings.blocks - 1) / settings.blocks;
            while (group[i].times.size() < until) group[i].times.push_back(seconds_of(group[i]));
        }
}

void print_measurement(const Workload& w, const AttentionShape& shape, int threads) {
    const double med = median(w.times);
    std::ostringstream line;
    line.precision(6);
    line << "{\"framework\": \"attnlab\", \"workload\": " << json_string(w.name) << ", \"batch\": " << shape.batch
         << ", \"seq\": " << shape.seq << ", \"head\": " << shape.head << ", \"threads\": " << threads
         << ", \"reps\": " << w.times.size() << ", \"median_s\": " << med;
    line << ", \"gflops\": ";
    if (w.flops > 0) line << w.flops / med * 1e-9; else line << "null";
    line << ", \"gbytes_s\": ";
    if (w.bytes > 0) line << w.bytes / med * 1e-9; else line << "null";
    line << ", \"times_s\": [";
    for (size_t i = 0; i < w.times.size(); ++i) line << (i ? ", " : "") << w.times[i];
    line << "]}";
    std::cout << line.str() << std::endl;
}

std::vector<float> floats_of(const Tensor& t) {
    const std::vector<double> v = t.values();
    return std::vector<float>(v.begin(), v.end());
}

// Plain buffers for C = A @ B and its backward, A (batch,M,K), B (batch,K,N).
struct PlainProduct {
    size_t batch, M, N, K;
    std::vector<float> A, B, C, dC, dA, dB;
    PlainProduct(size_t batch_, size_t M_, size_t N_, size_t K_, std::vector<float> A_, std::vector<float> B_)
        : batch(batch_), M(M_), N(N_), K(K_), A(std::move(A_)), B(std::move(B_)), C(batch * M * N),
          dC(batch * M * N, 1.0f), dA(batch * M * K), dB(batch * K * N) {}
    void forward() { sgemm_loop(batch, false, false, M, N, K, A.data(), B.data(), C.data()); }
    // The three GEMMs of the engine's matmul forward and backward.
    void forward_backward() {
        forward();
        sgemm_loop(batch, false, true, M, K, N, dC.data(), B.data(), dA.data());  // dA = dC B^T  (batch,M,K)
        sgemm_loop(batch, true, false, K, N, M, A.data(), dC.data(), dB.data());  // dB = A^T dC  (batch,K,N)
    }
};

// Largest |ours - plain| over the product, to show both compute the same thing.
double max_difference(const Tensor& ours, const std::vector<float>& plain) {
    const std::vector<double> v = ours.values();
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::abs(v[i] - plain[i]));
    return worst;
}

void bench_shape(const AttentionShape& shape, const Settings& settings, Rng& rng) {
    const size_t B = shape.batch, S = shape.seq, d = shape.head;
    const double product_flops = 2.0 * B * S * S * d;  // both products: B (S,S,d) multiply-adds
    const double probs_bytes = 4.0 * B * S * S;        // one pass over a (B,S,S) float32 tensor

    Tensor q = rng.normal({B, S, d}, 0, 1).set_requires_grad(true);   // (B,S,d)
    Tensor k = rng.normal({B, S, d}, 0, 1).set_requires_grad(true);   // (B,S,d)
    Tensor kt = transpose(k, -1, -2).detach().set_requires_grad(true);  // (B,d,S), contiguous
    Tensor v = rng.normal({B, S, d}, 0, 1).set_requires_grad(true);   // (B,S,d)
    Tensor probs = rng.uniform({B, S, S}, 0, 1).set_requires_grad(true);  // (B,S,S)
    Tensor logits = rng.normal({B, S, S}, 0, 1).set_requires_grad(true);  // (B,S,S)
    const Tensor seed = Tensor::ones({B, S, S});  // d(sum of outputs)/d(output) for (B,S,S) outputs
    const Tensor context_seed = Tensor::ones({B, S, d});
    Tensor q_in = q.detach(), k_in = k.detach(), kt_in = kt.detach(), v_in = v.detach(), probs_in = probs.detach(),
           logits_in = logits.detach();  // the same values without requires_grad, for forward-only runs

    PlainProduct scores_plain(B, S, S, d, floats_of(q), floats_of(kt));  // Q (B,S,d) @ K^T (B,d,S)
    PlainProduct context_plain(B, S, d, S, floats_of(probs), floats_of(v));  // P (B,S,S) @ V (B,S,d)
    const std::vector<float> k_plain = floats_of(k);
    std::vector<float> scores_nt(B * S * S);  // Q K^T with K transposed by the sgemm flag, no copy

    auto drop_grads = [](std::vector<Tensor> ts) {
        return [ts]() mutable { for (Tensor& t : ts) t.zero_grad(); };
    };
    std::vector<std::vector<Workload>> groups;
    groups.push_back({
        {"scores_fwd", product_flops, 0, [&] { return matmul(q_in, transpose(k_in, -1, -2)); }},
        {"scores_mm_fwd", product_flops, 0, [&] { return matmul(q_in, kt_in); }},
        {"sgemm_scores_fwd", product_flops, 0, [&] { scores_plain.forward(); return Tensor(); }},
        {"sgemm_scores_nt_fwd", product_flops, 0, [&] {
             sgemm_loop(B, false, true, S, S, d, scores_plain.A.data(), k_plain.data(), scores_nt.data());
             return Tensor();
         }},
    });
    groups.push_back({
        {"context_fwd", product_flops, 0, [&] { return matmul(probs_in, v_in); }},
        {"sgemm_context_fwd", product_flops, 0, [&] { context_plain.forward(); return Tensor(); }},
    });
    groups.push_back({
        {"scores_fwdbwd", 3 * product_flops, 0,
         [&] { Tensor out = matmul(q, transpose(k, -1, -2)); out.backward(seed); return out; }, drop_grads({q, k})},
        {"scores_mm_fwdbwd", 3 * product_flops, 0,
         [&] { Tensor out = matmul(q, kt); out.backward(seed); return out; }, drop_grads({q, kt})},
        {"sgemm_scores_fwdbwd", 3 * product_flops, 0, [&] { scores_plain.forward_backward(); return Tensor(); }},
    });
    groups.push_back({
        {"context_fwdbwd", 3 * product_flops, 0,
         [&] { Tensor out = matmul(probs, v); out.backward(context_seed); return out; }, drop_grads({probs, v})},
        {"sgemm_context_fwdbwd", 3 * product_flops, 0, [&] { context_plain.forward_backward(); return Tensor(); }},
    });
    groups.push_back({
        {"softmax_fwd", 0, 2 * probs_bytes, [&] { return softmax(logits_in, -1); }},  // read x, write y
    });
    groups.push_back({
        {"softmax_fwdbwd", 0, 5 * probs_bytes,  // forward, then read g and y, write dx
         [&] { Tensor out = softmax(logits, -1); out.backward(seed); return out; }, drop_grads({logits})},
    });

    // Before timing: our products equal the plain loops' (same inputs, same sgemm calls).
    scores_plain.forward();
    context_plain.forward();
    sgemm_loop(B, false, true, S, S, d, scores_plain.A.data(), k_plain.data(), scores_nt.data());
    std::cout << "{\"framework\": \"attnlab\", \"check\": true, \"batch\": " << B << ", \"seq\": " << S
              << ", \"head\": " << d << ", \"scores_max_diff\": "
              << max_difference(matmul(q_in, transpose(k_in, -1, -2)), scores_plain.C)
              << ", \"scores_nt_max_diff\": " << max_difference(matmul(q_in, kt_in), scores_nt)
              << ", \"context_max_diff\": " << max_difference(matmul(probs_in, v_in), context_plain.C) << "}"
              << std::endl;

    for (std::vector<Workload>& group : groups) {
        measure_group(group, settings);
        for (const Workload& w : group) print_measurement(w, shape, settings.threads);
    }
}

int run(int argc, char** argv) {
    cxxopts::Options options("bench_ops", "attnlab matmul and softmax at attention shapes vs plain OpenBLAS sgemm");
    options.add_options()
        ("threads", "OpenBLAS threads", cxxopts::value<int>()->default_value("1"))
        ("seconds", "target seconds per measurement", cxxopts::value<double>()->default_value("0.3"))
        ("min-reps", "minimum repetitions per measurement", cxxopts::value<size_t>()->default_value("5"))
        ("blocks", "turns each workload's reps are split into", cxxopts::value<size_t>()->default_value("3"))
        ("seq", "sequence lengths S", cxxopts::value<std::vector<size_t>>()->default_value("128,512"))
        ("head", "head widths d", cxxopts::value<std::vector<size_t>>()->default_value("32,64"))
        ("h,help", "show this help");
    const auto args = options.parse(argc, argv);
    if (args.count("help")) {
        std::cout << options.help() << std::endl;
        return 0;
    }
    Settings settings;
    settings.threads = args["threads"].as<int>();
    settings.seconds = args["seconds"].as<double>();
    settings.min_reps = args["min-reps"].as<size_t>();
    settings.blocks = args["blocks"].as<size_t>();
    if (settings.threads < 1) throw Error("[bench_ops] --threads must be at least 1");
    if (settings.min_reps < 1) throw Error("[bench_ops] --min-reps must be at least 1");
    if (settings.blocks < 1) throw Error("[bench_ops] --blocks must be at least 1");
    set_blas_threads(settings.threads);

    std::cout << "{\"framework\": \"attnlab\", \"meta\": true, \"threads\": " << settings.threads
              << ", \"blas_threads\": " << blas_threads()
              << ", \"openblas_corename\": " << json_string(openblas_get_corename())
              << ", \"openblas_config\": " << json_string(openblas_get_config()) << "}" << std::endl;

    // A fresh process's first GEMMs are much slower (OpenBLAS's buffers and
    // thread pool are cold): run the largest product for a while first.
    {
        Rng rng(1);
        PlainProduct warm(64, 512, 512, 64, floats_of(rng.normal({64, 512, 64}, 0, 1)),
                          floats_of(rng.normal({64, 64, 512}, 0, 1)));
        const auto start = std::chrono::steady_clock::now();
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 0.5)
            warm.forward_backward();
    }

    print_probe("start", settings.threads);
    Rng rng(2024);
    for (size_t seq : args["seq"].as<std::vector<size_t>>())
        for (size_t head : args["head"].as<std::vector<size_t>>()) bench_shape({64, seq, head}, settings, rng);
    print_probe("end", settings.threads);
    return 0;
}

}  // namespace
}  // namespace attnlab

int main(int argc, char** argv) {
    attnlab::keep_freed_memory();  // as the attnlab CLI does
    try {
        return attnlab::run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "bench_ops: " << e.what() << std::endl;
        return 2;
    }
}
