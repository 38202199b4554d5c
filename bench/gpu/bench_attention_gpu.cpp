// Times our device attention (flash and dense kernels), causal, fp32, forward
// and forward+backward, with CUDA events on the Context's stream; prints one
// JSON line per measurement (bench/gpu/bench_sdpa.py prints the same for
// torch.nn.functional.scaled_dot_product_attention; gpu_table.py joins them).
//
//   bench_attention_gpu [--reps N] [--quick] [--max-dense-gib G] [--no-cpu]
//
// FLOP convention (the same in bench_sdpa.py): a full forward is 4 B H S^2 d
// (two GEMMs of 2 B H S^2 d); causal counts half of it; the backward counts
// 2.5x the forward (five GEMMs instead of two), so forward+backward is 3.5x.
// TFLOP/s = those FLOPs / median time.
//
// Shapes (B, H, S, d): (8, 8, 1024, 64), (4, 8, 4096, 64), (1, 8, 16384, 64);
// --quick keeps the first. The dense kernel needs two (B, H, S, S) float
// buffers and is skipped above --max-dense-gib (default 40). The CPU op
// (attnlab::attention, this machine's cores) is timed at the first shape
// unless --no-cpu.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/attention.h"
#include "autograd/rng.h"
#include "autograd/device/attention.h"
#include "autograd/device/backend.h"

namespace {

using namespace attnlab;
using attnlab::device::AttentionDims;
using attnlab::device::AttentionKernel;

struct BenchShape {
    size_t B, H, S, d;
};

struct Timing {
    double median_ms, min_ms;
};

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) fail("cuda", std::string("bench: ") + what + ": " + cudaGetErrorString(status));
}

// Median and minimum over `reps` runs of `work`, each between two events on the stream.
Timing time_gpu(device::Context& context, int reps, const std::function<void()>& work) {
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    std::vector<double> ms;
    for (int rep = 0; rep < reps; ++rep) {
        check(cudaEventRecord(start, context.stream()), "cudaEventRecord");
        work();
        check(cudaEventRecord(stop, context.stream()), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float elapsed = 0;
        check(cudaEventElapsedTime(&elapsed, start, stop), "cudaEventElapsedTime");
        ms.push_back(elapsed);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms.front()};
}

double forward_flops(const BenchShape& s) {  // causal: half of 4 B H S^2 d
    return 0.5 * 4.0 * double(s.B) * double(s.H) * double(s.S) * double(s.S) * double(s.d);
}

void print_line(const char* impl, const BenchShape& s, const char* pass, const Timing& t, double flops, int reps,
                const std::string& device) {
    std::printf(
        "{\"framework\": \"attnlab\", \"impl\": \"%s\", \"dtype\": \"float32\", \"device\": \"%s\", \"B\": %zu, "
        "\"H\": %zu, \"S\": %zu, \"d\": %zu, \"causal\": true, \"pass\": \"%s\", \"ms\": %.4f, \"ms_min\": %.4f, "
        "\"reps\": %d, \"tflops\": %.3f}\n",
        impl, device.c_str(), s.B, s.H, s.S, s.d, pass, t.median_ms, t.min_ms, reps, flops / (t.median_ms * 1e9));
    std::fflush(stdout);
}

std::vector<float> random_values(Rng& rng, size_t count) {
    std::vector<float> values(count);
    for (float& x : values) x = float(rng.uniform(-1.0, 1.0));
    return values;
}

// Whether the dense kernel's two (B, H, S, S) float buffers fit in max_dense_gib;
// if not, says so in a line of its own.
bool dense_fits(const BenchShape& s, double max_dense_gib) {
    const double gib = 2.0 * double(s.B * s.H * s.S) * double(s.S) * sizeof(float) / double(1ull << 30);
    if (gib > max_dense_gib) {
        std::printf("{\"framework\": \"attnlab\", \"impl\": \"dense\", \"B\": %zu, \"H\": %zu, \"S\": %zu, "
                    "\"d\": %zu, \"skipped\": \"needs %.1f GiB of (B, H, S, S) buffers > %.1f\"}\n",
                    s.B, s.H, s.S, s.d, gib, max_dense_gib);
        return false;
    }
    return true;
}

// The CPU op (attnlab::attention) on the same inputs, for scale; one warm-up, then reps / 2 (at least 1) timed.
void bench_cpu(const BenchShape& s, const std::vector<float>& q_host, const std::vector<float>& k_host,
               const std::vector<float>& v_host, const std::vector<float>& dc_host, const AttentionMask& mask,
               const AttentionOptions& options, int reps, double flops) {
    const Shape shape{s.B, s.H, s.S, s.d};
    auto tensor = [&](const std::vector<float>& values) {
        return Tensor::from_values(std::vector<double>(values.begin(), values.end()), shape, DType::f32, true);
    };
    const Tensor qt = tensor(q_host), kt = tensor(k_host), vt = tensor(v_host), seed = tensor(dc_host).detach();
    auto run = [&](bool with_backward) {
        AttentionResult r = attention(qt, kt, vt, mask, options);
        if (with_backward) r.context.backward(seed);
    };
    for (bool with_backward : {false, true}) {
        run(with_backward);
        const int cpu_reps = std::max(1, reps / 2);
        std::vector<double> ms;
        for (int rep = 0; rep < cpu_reps; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            run(with_backward);
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        print_line("cpu", s, with_backward ? "fwd+bwd" : "fwd", {ms[ms.size() / 2], ms.front()},
                   with_backward ? 3.5 * flops : flops, cpu_reps, "cpu");
    }
}

void bench_shape(device::Context& context, const BenchShape& s, int reps, double max_dense_gib, bool cpu,
                 const std::string& device) {
    const AttentionDims dims{s.B, s.H, s.H, s.S, s.S, s.d, s.d};
    AttentionMask mask;
    mask.causal = true;
    AttentionOptions options;
    options.scale = 1.0 / std::sqrt(double(s.d));
    const float scale = float(options.scale);
    const size_t n = s.B * s.H * s.S * s.d;  // elements of q, k, v, context and each gradient
    Rng rng(1);
    const std::vector<float> q_host = random_values(rng, n), k_host = random_values(rng, n),
                             v_host = random_values(rng, n), dc_host = random_values(rng, n);
    const device::DeviceBuffer q = device::to_device(context, q_host), k = device::to_device(context, k_host),
                             v = device::to_device(context, v_host), dC = device::to_device(context, dc_host);
    device::DeviceBuffer out = context.allocate_floats(n), dq = context.allocate_floats(n),
                       dk = context.allocate_floats(n), dv = context.allocate_floats(n);
    const device::DeviceMask device_mask(context, mask, dims);
    const double flops = forward_flops(s);
    std::vector<float> flash_context;

    for (AttentionKernel kernel : {AttentionKernel::flash, AttentionKernel::dense}) {
        device::check_attention(dims, mask, options, kernel);
        const std::string name = device::to_string(kernel);
        device::DeviceBuffer weights, scratch, lse, row_dot;
        std::function<void()> forward, backward;
        if (kernel == AttentionKernel::dense) {
            if (!dense_fits(s, max_dense_gib)) continue;
            weights = context.allocate_floats(s.B * s.H * s.S * s.S);
            scratch = context.allocate_floats(s.B * s.H * s.S * s.S);
            forward = [&] {
                device::dense_attention_forward(context, dims, q.floats(), k.floats(), v.floats(), device_mask.view(),
                                              scale, out.floats(), weights.floats());
            };
            backward = [&] {
                device::dense_attention_backward(context, dims, q.floats(), k.floats(), v.floats(), weights.floats(),
                                               dC.floats(), scale, dq.floats(), dk.floats(), dv.floats(),
                                               scratch.floats(), {}, device_mask.view());
            };
        } else {
            lse = context.allocate_floats(s.B * s.H * s.S);
            row_dot = context.allocate_floats(s.B * s.H * s.S);
            forward = [&] {
                device::flash_attention_forward(context, dims, q.floats(), k.floats(), v.floats(), device_mask.view(),
                                              scale, out.floats(), lse.floats());
            };
            backward = [&] {
                device::flash_attention_backward(context, dims, q.floats(), k.floats(), v.floats(), out.floats(),
                                               lse.floats(), dC.floats(), device_mask.view(), scale, dq.floats(),
                                               dk.floats(), dv.floats(), row_dot.floats());
            };
        }
        forward();  // warm-up (and the kernels' first-launch costs)
        backward();
        context.synchronize("bench warm-up");
        print_line(name.c_str(), s, "fwd", time_gpu(context, reps, forward), flops, reps, device);
        print_line(name.c_str(), s, "fwd+bwd", time_gpu(context, reps, [&] { forward(); backward(); }), 3.5 * flops,
                   reps, device);
        // The two kernels must agree (the tests check both against the CPU op on small shapes).
        forward();
        const std::vector<float> result = device::to_host_floats(context, out, n);
        if (kernel == AttentionKernel::flash) {
            flash_context = result;
        } else {
            double worst = 0;
            for (size_t e = 0; e < n; ++e) worst = std::max(worst, double(std::abs(result[e] - flash_context[e])));
            std::printf("{\"framework\": \"attnlab\", \"check\": \"flash vs dense context\", \"S\": %zu, "
                        "\"max_abs_diff\": %.3g}\n",
                        s.S, worst);
        }
    }

    if (cpu) bench_cpu(s, q_host, k_host, v_host, dc_host, mask, options, reps, flops);
}

}  // namespace

int main(int argc, char** argv) {
    int reps = 10;
    bool quick = false, cpu = true;
    double max_dense_gib = 40.0;
    for (int a = 1; a < argc; ++a) {
        const std::string arg = argv[a];
        if (arg == "--reps" && a + 1 < argc) {
            reps = std::max(1, std::atoi(argv[++a]));
        } else if (arg == "--max-dense-gib" && a + 1 < argc) {
            max_dense_gib = std::atof(argv[++a]);
        } else if (arg == "--quick") {
            quick = true;
        } else if (arg == "--no-cpu") {
            cpu = false;
        } else {
            std::fprintf(stderr, "usage: bench_attention_gpu [--reps N] [--quick] [--max-dense-gib G] [--no-cpu]\n");
            return 2;
        }
    }
    const device::DeviceInfo info = device::probe();
    if (!info.available) {
        std::fprintf(stderr, "bench_attention_gpu: %s\n", info.reason.c_str());
        return 1;
    }
    try {
        device::Context context;
        std::vector<BenchShape> shapes{{8, 8, 1024, 64}, {4, 8, 4096, 64}, {1, 8, 16384, 64}};
        if (quick) shapes.resize(1);
        for (size_t i = 0; i < shapes.size(); ++i) {
            bench_shape(context, shapes[i], reps, max_dense_gib, cpu && i == 0, info.name);
            context.empty_cache();  // each shape's buffers go back to the device
        }
        const device::AllocatorStats stats = context.memory_stats();
        std::printf("{\"framework\": \"attnlab\", \"peak_device_bytes\": %zu, \"device_allocations\": %zu}\n",
                    stats.peak_bytes_in_use, stats.device_allocations);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "bench_attention_gpu: %s\n", error.what());
        return 1;
    }
    return 0;
}
