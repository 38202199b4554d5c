// bench_pointwise: activations per element, forward and forward+backward, on
// one (rows, cols) float32 tensor: the fused gelu kernel, gelu_tanh from its one
// definition (autograd/pointwise.h), and gelu_tanh composed of eight generic ops
// as it was before (the cliff the definitions remove). One JSON line per
// measurement; bench/bench_pointwise.py times PyTorch's on the same shape and
// bench/run_pointwise.sh prints both as one table.
//
//   build/bench/bench_pointwise --elements 524288 --seconds 1
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "autograd/cpu/threads.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "bench/bench_common.h"

namespace attnlab {
namespace {

// gelu_tanh as it was written before the definitions: ops composed, each a pass.
Tensor gelu_tanh_composed(const Tensor& x) {
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (tanh(c * (x + 0.044715 * pow(x, 3.0))) + 1.0);
}

// Median seconds of `run` over at least min_reps runs filling `seconds`, after a warm-up.
double median_seconds(const std::function<void()>& run, double seconds, size_t min_reps) {
    using clock = std::chrono::steady_clock;
    for (int i = 0; i < 3; ++i) run();
    std::vector<double> times;
    const auto start = clock::now();
    while (times.size() < min_reps || std::chrono::duration<double>(clock::now() - start).count() < seconds) {
        const auto t0 = clock::now();
        run();
        times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    return bench::median(times);
}

int run(int argc, char** argv) {
    cxxopts::Options options("bench_pointwise", "activations per element: fused, from a definition, composed");
    options.add_options()
        ("elements", "elements of the tensor (rows of 512)", cxxopts::value<size_t>()->default_value("524288"))
        ("threads", "attnlab's threads", cxxopts::value<int>()->default_value("1"))
        ("seconds", "timed seconds per measurement", cxxopts::value<double>()->default_value("1"))
        ("min-reps", "minimum timed runs", cxxopts::value<size_t>()->default_value("10"))
        ("h,help", "show this help");
    const auto args = options.parse(argc, argv);
    if (args.count("help")) {
        std::cout << options.help() << std::endl;
        return 0;
    }
    const size_t n = args["elements"].as<size_t>(), cols = 512;
    if (n == 0 || n % cols) throw Error("[bench_pointwise] --elements must be a positive multiple of 512");
    const int threads = args["threads"].as<int>();
    if (threads < 1) throw Error("[bench_pointwise] --threads must be at least 1");
    set_threads(threads);
    const double seconds = args["seconds"].as<double>();
    const size_t min_reps = args["min-reps"].as<size_t>();

    Rng rng(1);
    const Tensor x_in = rng.normal({n / cols, cols}, 0, 2);  // (rows, 512), values like pre-activations
    Tensor x = x_in.detach().set_requires_grad(true);
    const Tensor seed = Tensor::ones({n / cols, cols});
    const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> activations = {
        {"gelu", [](const Tensor& t) { return gelu(t); }},
        {"gelu_tanh", [](const Tensor& t) { return gelu_tanh(t); }},
        {"gelu_tanh_composed", gelu_tanh_composed},
    };
    for (const auto& [name, f] : activations) {
        const double forward = median_seconds([&] { (void)f(x_in); }, seconds, min_reps);
        const double both = median_seconds([&] {
            f(x).backward(seed);
            x.zero_grad();
        }, seconds, min_reps);
        std::cout << "{\"framework\": \"attnlab\", \"activation\": " << bench::json_string(name) << ", \"elements\": " << n
                  << ", \"threads\": " << threads << ", \"fwd_ns_per_element\": " << forward / n * 1e9
                  << ", \"fwdbwd_ns_per_element\": " << both / n * 1e9 << "}" << std::endl;
    }
    return 0;
}

}  // namespace
}  // namespace attnlab

int main(int argc, char** argv) {
    try {
        return attnlab::run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << e.what() << std::endl;
        return 2;
    }
}
