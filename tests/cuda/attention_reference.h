// Shared by the CUDA attention tests: random inputs, the CPU op as reference
// (forward, weights and gradients through backward with a seed), the
// log-sum-exp computed on the host in double, and the comparison with its
// stated tolerance.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "autograd/attention.h"
#include "autograd/rng.h"
#include "attention_host.h"
#include "autograd/device/backend.h"
#include "device_context_test.h"

namespace attnlab::device {
// gtest prints parameters with this (else as raw bytes in the test list)
inline void PrintTo(AttentionKernel kernel, std::ostream* os) { *os << to_string(kernel); }
}  // namespace attnlab::device

namespace attnlab::cuda_test {

using attnlab::device::AttentionDims;
using attnlab::device::AttentionKernel;

// fp32 agreement with the CPU op: |gpu - cpu| <= abs_tolerance + rel_tolerance |cpu|,
// element by element, for context, weights, lse and every gradient.
constexpr double abs_tolerance = 1e-4;
constexpr double rel_tolerance = 1e-4;

inline Tensor random_tensor(Rng& rng, const Shape& shape) { return rng.normal(shape, 0.0, 1.0, DType::f32); }

struct Inputs {
    Tensor q, k, v, dcontext;  // (B, H, Tq, d), (B, H_kv, Tk, d), (B, H_kv, Tk, d_v), (B, H, Tq, d_v)
};

inline Inputs random_inputs(const AttentionDims& s, uint64_t seed) {
    Rng rng(seed);
    return {random_tensor(rng, {s.B, s.H, s.Tq, s.d}), random_tensor(rng, {s.B, s.H_kv, s.Tk, s.d}),
            random_tensor(rng, {s.B, s.H_kv, s.Tk, s.d_v}), random_tensor(rng, {s.B, s.H, s.Tq, s.d_v})};
}

struct Reference {
    Tensor context, weights, dq, dk, dv;
};

// The CPU op on copies of the inputs, with need_weights, then backward(dcontext).
inline Reference cpu_reference(const Inputs& in, const AttentionMask& mask, AttentionOptions options) {
    Tensor q = in.q.clone().set_requires_grad(true);
    Tensor k = in.k.clone().set_requires_grad(true);
    Tensor v = in.v.clone().set_requires_grad(true);
    options.need_weights = true;
    AttentionResult result = attention(q, k, v, mask, options);
    result.context.backward(in.dcontext);
    return {result.context.detach(), result.weights, q.grad(), k.grad(), v.grad()};
}

// log sum_j exp(scale q_i . k_j) over eligible keys, in double; -inf for a row with none.
inline std::vector<double> reference_lse(const Inputs& in, const AttentionMask& mask, double scale) {
    const Shape& qs = in.q.shape();
    const size_t B = qs[0], H = qs[1], Tq = qs[2], d = qs[3], H_kv = in.k.size(1), Tk = in.k.size(2);
    const std::vector<double> q = in.q.values(), k = in.k.values();
    std::vector<double> lse;
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h)
            for (size_t i = 0; i < Tq; ++i) {
                std::vector<double> scores;
                for (size_t j = 0; j < Tk; ++j) {
                    if (!mask.allows(b, i, j, Tq, Tk)) continue;
                    const double* qi = q.data() + ((b * H + h) * Tq + i) * d;
                    const double* kj = k.data() + ((b * H_kv + h / (H / H_kv)) * Tk + j) * d;
                    double dot = 0;
                    for (size_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
                    scores.push_back(scale * dot);
                }
                if (scores.empty()) {
                    lse.push_back(-std::numeric_limits<double>::infinity());
                    continue;
                }
                double m = scores[0], total = 0;
                for (double s : scores) m = std::max(m, s);
                for (double s : scores) total += std::exp(s - m);
                lse.push_back(m + std::log(total));
            }
    return lse;
}

// Element-wise check with the tolerance above; reports the worst element.
inline void expect_close(const std::vector<double>& gpu, const std::vector<double>& cpu, const std::string& what) {
    ASSERT_EQ(gpu.size(), cpu.size()) << what;
    size_t worst = 0, bad = 0;
    double worst_excess = -1;
    for (size_t e = 0; e < cpu.size(); ++e) {
        const bool both_neg_inf = std::isinf(cpu[e]) && cpu[e] < 0 && std::isinf(gpu[e]) && gpu[e] < 0;
        if (both_neg_inf) continue;
        const double excess = std::abs(gpu[e] - cpu[e]) - (abs_tolerance + rel_tolerance * std::abs(cpu[e]));
        if (!(excess <= 0)) ++bad;  // NaN counts as bad
        if (!(excess <= worst_excess)) {
            worst_excess = excess;
            worst = e;
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << cpu.size() << " elements off; worst at flat index "
                       << worst << ": gpu " << gpu[worst] << ", cpu " << cpu[worst];
}

inline void expect_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
    ASSERT_TRUE(gpu.defined()) << what << " missing";
    ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
    expect_close(gpu.values(), cpu.values(), what);
}

// One agreement case: a shape and a mask, run on both kernels.
struct Case {
    std::string name;
    AttentionDims dims;
    AttentionMask mask;
    MaskedRows masked_rows = MaskedRows::error;
};

inline AttentionMask causal() {
    AttentionMask mask;
    mask.causal = true;
    return mask;
}

inline AttentionMask padded(std::vector<size_t> lengths, bool is_causal = false) {
    AttentionMask mask;
    mask.key_lengths = std::move(lengths);
    mask.causal = is_causal;
    return mask;
}

struct Param {
    Case c;
    AttentionKernel kernel;
};

inline void PrintTo(const Param& param, std::ostream* os) { *os << param.c.name << ", " << device::to_string(param.kernel); }

// Every case on both kernels, named "<case>_<kernel>" by param_name.
inline std::vector<Param> params(const std::vector<Case>& cases) {
    std::vector<Param> all;
    for (const Case& c : cases)
        for (AttentionKernel kernel : {AttentionKernel::dense, AttentionKernel::flash}) all.push_back({c, kernel});
    return all;
}
inline std::string param_name(const ::testing::TestParamInfo<Param>& info) {
    return info.param.c.name + "_" + device::to_string(info.param.kernel);
}

// The kernel against the CPU op on random inputs drawn from `seed`: the context
// (and the weights for dense, the log-sum-exp for flash), then dq, dk, dv for a
// random dcontext, each within the tolerance above.
inline void expect_agreement(device::Context& context, AttentionKernel kernel, const AttentionDims& dims,
                             const AttentionMask& mask, MaskedRows masked_rows, uint64_t seed) {
    const Inputs in = random_inputs(dims, seed);
    AttentionOptions options;
    options.scale = 1.0 / std::sqrt(double(dims.d));
    options.masked_rows = masked_rows;
    const Reference cpu = cpu_reference(in, mask, options);
    options.need_weights = kernel == AttentionKernel::dense;
    const device::HostAttention gpu = device::attention_host(context, kernel, in.q, in.k, in.v, mask, options);
    expect_close(gpu.context, cpu.context, "context");
    if (kernel == AttentionKernel::dense) expect_close(gpu.weights, cpu.weights, "weights");
    if (kernel == AttentionKernel::flash) {
        ASSERT_TRUE(gpu.lse.defined());
        expect_close(gpu.lse.values(), reference_lse(in, mask, options.scale), "lse");
    }
    options.need_weights = false;
    const device::HostAttentionGrads grads =
        device::attention_backward_host(context, kernel, in.q, in.k, in.v, mask, options, in.dcontext);
    expect_close(grads.dq, cpu.dq, "dq");
    expect_close(grads.dk, cpu.dk, "dk");
    expect_close(grads.dv, cpu.dv, "dv");
}

}  // namespace attnlab::cuda_test
