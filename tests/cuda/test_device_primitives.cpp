// Every op on the device primitives (autograd/device/primitives.h) against the
// same op on the CPU, values and gradients: broadcasting arithmetic, unary
// maths, reductions over any axes, softmax over any axis, masked_fill,
// permute, slices, matmul; then the compositions of autograd/composed.h and
// attention scores taking gradients, which are those ops together. Compiled
// into test_cuda (the kernels, on a GPU or the emulator) and test_device_host
// (the host loops, memory filled with NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "autograd/attention.h"
#include "autograd/composed.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "device_step_test.h"
#include "layers/hooks.h"
#include "layers/multihead.h"

namespace attnlab::device_step_test {
namespace {

using DevicePrimitives = cuda_test::DeviceTest;

Tensor random(Rng& rng, const Shape& shape) { return rng.normal(shape, 0.0, 1.0).set_requires_grad(true); }
Tensor positive(Rng& rng, const Shape& shape) {  // for log, sqrt, pow and divisors: values in [0.5, 2.5)
    return (rng.uniform(shape, 0.0, 1.0) * 2.0 + 0.5).detach().set_requires_grad(true);
}

TEST_F(DevicePrimitives, BroadcastingArithmetic) {
    Rng rng(1);
    const std::vector<std::pair<Shape, Shape>> shapes = {
        {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{4}, {2, 3, 4}}, {{2, 1, 4}, {3, 1}},  // both ways
        {{2, 3, 4}, {}}, {{}, {3, 4}}, {{1, 5}, {7, 1}}, {{2, 1, 3, 1}, {1, 4, 1, 5}}};
    for (const auto& [sa, sb] : shapes) {
        const std::string at = shape_str(sa) + " with " + shape_str(sb);
        expect_same_on_both("add " + at, {random(rng, sa), random(rng, sb)}, [](const Inputs& t) { return t[0] + t[1]; });
        expect_same_on_both("sub " + at, {random(rng, sa), random(rng, sb)}, [](const Inputs& t) { return t[0] - t[1]; });
        expect_same_on_both("mul " + at, {random(rng, sa), random(rng, sb)}, [](const Inputs& t) { return t[0] * t[1]; });
        expect_same_on_both("div " + at, {random(rng, sa), positive(rng, sb)}, [](const Inputs& t) { return t[0] / t[1]; });
    }
    expect_same_on_both("x * x / x - x", {positive(rng, {3, 5})}, [](const Inputs& t) { return t[0] * t[0] / t[0] - t[0]; });
    expect_same_on_both("with scalars", {random(rng, {3, 5})}, [](const Inputs& t) { return (2.0 * t[0] + 1.0) / 4.0 - 3.0; });
    const Tensor frozen = rng.normal({3, 5}, 0.0, 1.0);  // no gradient wanted: only the other side's
    expect_same_on_both("one side frozen", {random(rng, {3, 5}), frozen}, [](const Inputs& t) { return t[0] * t[1] / (t[1] * t[1] + 1.0); });
}

TEST_F(DevicePrimitives, UnaryMaths) {
    Rng rng(2);
    for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 300}}) {
        const std::string at = " of " + shape_str(shape);
        expect_same_on_both("neg" + at, {random(rng, shape)}, [](const Inputs& t) { return -t[0]; });
        expect_same_on_both("exp" + at, {random(rng, shape)}, [](const Inputs& t) { return exp(t[0]); });
        expect_same_on_both("log" + at, {positive(rng, shape)}, [](const Inputs& t) { return log(t[0]); });
        expect_same_on_both("sqrt" + at, {positive(rng, shape)}, [](const Inputs& t) { return sqrt(t[0]); });
        expect_same_on_both("tanh" + at, {random(rng, shape)}, [](const Inputs& t) { return tanh(t[0]); });
        expect_same_on_both("pow -0.5" + at, {positive(rng, shape)}, [](const Inputs& t) { return pow(t[0], -0.5); });
        expect_same_on_both("pow 3" + at, {random(rng, shape)}, [](const Inputs& t) { return pow(t[0], 3.0); });
    }
}

// Every function of autograd/pointwise.h, through the one device kernel each
// way; param 0.3 (a cap or a threshold; GeluTanh takes none).
TEST_F(DevicePrimitives, EveryPointwiseFunction) {
    Rng rng(12);
    for (size_t function = 0; function < pointwise::All::count; ++function)
        pointwise::visit(function, [&]<class F>() {
            for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 300}})
                expect_same_on_both(std::string(F::name) + " of " + shape_str(shape), {random(rng, shape)},
                                    [](const Inputs& t) { return apply<F>(t[0], 0.3); });
        });
}

TEST_F(DevicePrimitives, ReductionsOverAnyAxes) {
    Rng rng(3);
    const Shape shape{2, 3, 4, 5};
    const std::vector<std::vector<int>> axes_list = {{}, {-1}, {0}, {1}, {0, 2}, {1, 3}, {0, 1, 2, 3}, {2, 1}};
    for (const auto& axes : axes_list)
        for (const bool keepdim : {false, true}) {
            std::string at = " over {";
            for (int a : axes) at += std::to_string(a) + ",";
            at += keepdim ? "} keepdim" : "}";
            expect_same_on_both("sum" + at, {random(rng, shape)}, [&](const Inputs& t) { return sum(t[0], axes, keepdim); });
            expect_same_on_both("mean" + at, {random(rng, shape)}, [&](const Inputs& t) { return mean(t[0], axes, keepdim); });
            expect_same_on_both("max" + at, {random(rng, shape)}, [&](const Inputs& t) { return max(t[0], axes, keepdim); });
        }
    expect_same_on_both("sum of a long row", {random(rng, {2, 5000})}, [](const Inputs& t) { return sum(t[0], {1}); });
    // ties: the gradient goes to the first maximal element on both devices
    const Tensor ties = Tensor::from_values({1, 3, 3, 0, 2, 2, 2, 1}, {2, 4}).set_requires_grad(true);
    expect_same_on_both("max with ties", {ties}, [](const Inputs& t) { return max(t[0], {1}); });
}

TEST_F(DevicePrimitives, MaxAndSoftmaxKeepNaN) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const Tensor x = Tensor::from_values({1, nan, 5, 2, 4, 3, nan, 0}, {2, 4});
    const Tensor m = max(x.to(Device::cuda), {1}).to(Device::cpu), m_cpu = max(x, {1});
    for (size_t r = 0; r < 2; ++r) {
        EXPECT_TRUE(std::isnan(m.at({r}))) << "row " << r;
        EXPECT_TRUE(std::isnan(m_cpu.at({r}))) << "row " << r << " on the cpu";
    }
    const Tensor s = softmax(x.to(Device::cuda), -1).to(Device::cpu);
    for (double v : s.values()) EXPECT_TRUE(std::isnan(v));
}

TEST_F(DevicePrimitives, SoftmaxOverAnyAxis) {
    Rng rng(4);
    for (const int axis : {-1, 0, 1, 2}) {
        const std::string at = " over axis " + std::to_string(axis);
        expect_same_on_both("softmax" + at, {random(rng, {3, 4, 6})}, [axis](const Inputs& t) { return softmax(t[0], axis); });
        expect_same_on_both("log_softmax" + at, {random(rng, {3, 4, 6})},
                            [axis](const Inputs& t) { return log_softmax(t[0], axis); });
    }
    expect_same_on_both("softmax of long rows", {random(rng, {3, 2000})}, [](const Inputs& t) { return softmax(t[0] * 4.0, -1); });
}

TEST_F(DevicePrimitives, MaskedFill) {
    Rng rng(5);
    const Mask causal({1, 4, 4}, {0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0});  // broadcast over the batch
    expect_same_on_both("masked_fill broadcast", {random(rng, {2, 4, 4})},
                        [&](const Inputs& t) { return masked_fill(t[0], causal, -1e9); });
    expect_same_on_both("masked_fill then softmax", {random(rng, {2, 4, 4})},
                        [&](const Inputs& t) { return softmax(masked_fill(t[0], causal, -INFINITY), -1); });
}

TEST_F(DevicePrimitives, PermutesSlicesAndMatmuls) {
    Rng rng(6);
    expect_same_on_both("permute", {random(rng, {2, 3, 4, 5})}, [](const Inputs& t) { return permute(t[0], {2, 0, 3, 1}); });
    expect_same_on_both("transpose", {random(rng, {3, 7})}, [](const Inputs& t) { return transpose(t[0], 0, 1); });
    expect_same_on_both("slice of the last axis", {random(rng, {2, 3, 8})}, [](const Inputs& t) { return slice(t[0], -1, 2, 7); });
    expect_same_on_both("slice of the middle axis", {random(rng, {2, 6, 3})}, [](const Inputs& t) { return slice(t[0], 1, 1, 4); });
    expect_same_on_both("split halves, swapped", {random(rng, {2, 3, 8})}, [](const Inputs& t) {
        const std::vector<Tensor> halves = split(t[0], {4, 4}, -1);
        return concat({halves[1], halves[0] * 2.0}, -1);
    });
    expect_same_on_both("matmul 2-D", {random(rng, {5, 7}), random(rng, {7, 3})}, [](const Inputs& t) { return matmul(t[0], t[1]); });
    expect_same_on_both("matmul batched", {random(rng, {2, 3, 5, 7}), random(rng, {2, 3, 7, 4})},
                        [](const Inputs& t) { return matmul(t[0], t[1]); });
    expect_same_on_both("matmul with a shared right operand", {random(rng, {2, 3, 5, 7}), random(rng, {7, 4})},
                        [](const Inputs& t) { return matmul(t[0], t[1]); });
    expect_same_on_both("x x^T", {random(rng, {2, 4, 6})}, [](const Inputs& t) { return matmul(t[0], transpose(t[0], 1, 2)); });
}

// The fused ops' compositions run on the device as they stand, and agree with
// the fused ops there: the fast path checked against its reference on the device.
TEST_F(DevicePrimitives, CompositionsRunOnTheDevice) {
    Rng rng(7);
    expect_same_on_both("composed layer_norm", {random(rng, {2, 5, 8}), random(rng, {8}), random(rng, {8})},
                        [](const Inputs& t) { return composed::layer_norm(t[0], t[1], t[2]); });
    expect_same_on_both("composed rms_norm", {random(rng, {2, 5, 8}), random(rng, {8})},
                        [](const Inputs& t) { return composed::rms_norm(t[0], t[1]); });
    expect_same_on_both("layer_norm without weight or bias", {random(rng, {3, 8})},
                        [](const Inputs& t) { return layer_norm(t[0], Tensor(), Tensor()); });
    expect_same_on_both("rms_norm without weight", {random(rng, {3, 8})}, [](const Inputs& t) { return rms_norm(t[0], Tensor()); });
    expect_same_on_both("composed linear", {random(rng, {2, 5, 8}), random(rng, {6, 8}), random(rng, {6})},
                        [](const Inputs& t) { return composed::linear(t[0], t[1], t[2]); });
    expect_same_on_both("composed rotary", {random(rng, {2, 5, 8})}, [](const Inputs& t) { return composed::rotary(t[0], 2, 3, 10000.0); });
    expect_same_on_both("composed softmax", {random(rng, {3, 7})}, [](const Inputs& t) { return composed::softmax(t[0], -1); });
    const Indices targets({2, 3}, {1, 0, 4, 2, 2, 3});
    const Mask counted({2, 3}, {1, 1, 0, 1, 0, 1});
    expect_same_on_both("composed cross_entropy", {random(rng, {2, 3, 5})},
                        [&](const Inputs& t) { return composed::cross_entropy(t[0], targets, counted); });

    // fast against composed, both on the device: values and every gradient
    const auto fast_against_composed = [&](const std::string& what, const Inputs& cpu_inputs,
                                           const std::function<Tensor(const Inputs&)>& fast,
                                           const std::function<Tensor(const Inputs&)>& reference) {
        const Inputs a = copies_on_device(cpu_inputs), b = copies_on_device(cpu_inputs);
        const Tensor y_fast = fast(a), y_ref = reference(b);
        expect_close(y_fast.to(Device::cpu), y_ref.to(Device::cpu), 1e-5, 1e-4, what + " on the device: output");
        const Tensor seed = rng.normal(y_fast.shape(), 0.0, 1.0).to(Device::cuda);
        sum(y_fast * seed).backward();
        sum(y_ref * seed).backward();
        for (size_t i = 0; i < a.size(); ++i)
            if (a[i].defined() && a[i].requires_grad())
                expect_close(a[i].grad().to(Device::cpu), b[i].grad().to(Device::cpu), 1e-5, 1e-4,
                             what + " on the device: gradient of input " + std::to_string(i));
    };
    fast_against_composed("layer_norm", {random(rng, {2, 5, 8}), random(rng, {8}), random(rng, {8})},
                          [](const Inputs& t) { return layer_norm(t[0], t[1], t[2]); },
                          [](const Inputs& t) { return composed::layer_norm(t[0], t[1], t[2]); });
    fast_against_composed("rms_norm", {random(rng, {2, 5, 8}), random(rng, {8})},
                          [](const Inputs& t) { return rms_norm(t[0], t[1]); },
                          [](const Inputs& t) { return composed::rms_norm(t[0], t[1]); });
    fast_against_composed("rotary", {random(rng, {2, 5, 8})}, [](const Inputs& t) { return rotary(t[0], 2, 1, 100.0); },
                          [](const Inputs& t) { return composed::rotary(t[0], 2, 1, 100.0); });
    fast_against_composed("linear", {random(rng, {2, 5, 8}), random(rng, {6, 8}), random(rng, {6})},
                          [](const Inputs& t) { return linear(t[0], t[1], t[2]); },
                          [](const Inputs& t) { return composed::linear(t[0], t[1], t[2]); });
    fast_against_composed("softmax", {random(rng, {3, 7})}, [](const Inputs& t) { return softmax(t[0], -1); },
                          [](const Inputs& t) { return composed::softmax(t[0], -1); });
    fast_against_composed("cross_entropy", {random(rng, {2, 3, 5})},
                          [&](const Inputs& t) { return cross_entropy(t[0], targets, counted); },
                          [&](const Inputs& t) { return composed::cross_entropy(t[0], targets, counted); });
    AttentionMask causal_padded;
    causal_padded.causal = true;
    causal_padded.key_lengths = {5, 3};
    fast_against_composed("attention", {random(rng, {2, 5, 8}), random(rng, {2, 5, 4}), random(rng, {2, 5, 6})},
                          [&](const Inputs& t) {
                              AttentionOptions options;
                              options.scale = 0.5;
                              return attention_packed(t[0], t[1], t[2], 2, 1, causal_padded, options).context;
                          },
                          [&](const Inputs& t) {
                              return composed::attention(t[0], t[1], t[2], 2, 1, causal_padded, 0.5, MaskedRows::error);
                          });
}

// Stacked members (train.seeds): the ops that read a member's own parameters, each
// block of rows through its member's, on the device as on the CPU.
TEST_F(DevicePrimitives, StackedMembersOpsAsTheCpuOnes) {
    Rng rng(8);
    expect_same_on_both("linear, 2 members of 6 rows", {random(rng, {4, 3, 8}), random(rng, {2, 6, 8}), random(rng, {2, 6})},
                        [](const Inputs& t) { return linear(t[0], t[1], t[2]); });
    expect_same_on_both("linear_members, blocks of 2, 0 and 3 rows, no bias", {random(rng, {5, 8}), random(rng, {3, 6, 8})},
                        [](const Inputs& t) { return linear_members(t[0], t[1], Tensor(), {2, 0, 3}); });
    expect_same_on_both("linear_members, blocks of 1, 4 and 0 rows", {random(rng, {5, 8}), random(rng, {3, 6, 8}), random(rng, {3, 6})},
                        [](const Inputs& t) { return linear_members(t[0], t[1], t[2], {1, 4, 0}); });
    const Indices ids({4, 2}, {0, 4, 4, 1, 2, 2, 0, 3});  // members 0 and 1: two sequences each
    expect_same_on_both("embedding, 2 members' tables", {random(rng, {2, 5, 3})},
                        [&](const Inputs& t) { return embedding(t[0], ids); });
    expect_same_on_both("layer_norm, 2 members", {random(rng, {4, 3, 8}), random(rng, {2, 8}), random(rng, {2, 8})},
                        [](const Inputs& t) { return layer_norm(t[0], t[1], t[2]); });
    expect_same_on_both("layer_norm, 2 members, no bias", {random(rng, {4, 3, 8}), random(rng, {2, 8})},
                        [](const Inputs& t) { return layer_norm(t[0], t[1], Tensor()); });
    expect_same_on_both("rms_norm, 3 members", {random(rng, {6, 2, 8}), random(rng, {3, 8})},
                        [](const Inputs& t) { return rms_norm(t[0], t[1]); });
    const Indices member_targets({6}, {3, 0, 4, 1, 1, 2});
    expect_same_on_both("cross_entropy_members, members of 2, 0, 3 and 1 rows", {random(rng, {6, 5})},
                        [&](const Inputs& t) { return cross_entropy_members(t[0], member_targets, {2, 0, 3, 1}); });
}

// The scores of attention composed of separate ops take gradients on the
// device (hook-replaced scores or patterns need them), under every mask kind.
TEST_F(DevicePrimitives, AttentionScoresAndComposedAttentionTakeGradients) {
    Rng rng(8);
    AttentionMask causal;
    causal.causal = true;
    AttentionMask padded_alibi = causal;
    padded_alibi.key_lengths = {5, 3};
    padded_alibi.variant.alibi = true;
    AttentionMask softcapped = padded_alibi;  // a score modifier: composed only
    softcapped.variant.softcap = 1.5;
    AttentionMask windowed = padded_alibi;  // an eligibility rule: the device's byte mask
    windowed.variant.window = 2;
    for (const auto& [name, mask] : {std::pair{"causal", causal}, std::pair{"padded, ALiBi", padded_alibi},
                                     std::pair{"padded, ALiBi, softcap", softcapped},
                                     std::pair{"padded, ALiBi, window 2", windowed}}) {
        expect_same_on_both(std::string("scores, ") + name, {random(rng, {2, 5, 8}), random(rng, {2, 5, 4})},
                            [&](const Inputs& t) { return attention_scores(t[0], t[1], 2, 1, mask, 0.5); });
        expect_same_on_both(std::string("composed attention, ") + name,
                            {random(rng, {2, 5, 8}), random(rng, {2, 5, 4}), random(rng, {2, 5, 6})},
                            [&](const Inputs& t) {
                                return composed::attention(t[0], t[1], t[2], 2, 1, mask, 0.5, MaskedRows::zero);
                            });
    }
    AttentionMask sinks = padded_alibi;  // attention sinks: the sink logits an input with a gradient
    sinks.variant.sinks = true;
    expect_same_on_both("composed attention, padded, ALiBi, sinks",
                        {random(rng, {2, 5, 8}), random(rng, {2, 5, 4}), random(rng, {2, 5, 6}), random(rng, {2})},
                        [&](const Inputs& t) {
                            return composed::attention(t[0], t[1], t[2], 2, 1, sinks, 0.5, MaskedRows::zero, t[3]);
                        });
    AttentionMask relative = causal;  // T5's relative bias: the table an input with a gradient (the embedding op's)
    relative.key_lengths = {5, 3};
    relative.variant.rel_buckets = 4;
    relative.variant.rel_max_distance = 8;
    expect_same_on_both("composed attention, padded, relative bias",
                        {random(rng, {2, 5, 8}), random(rng, {2, 5, 4}), random(rng, {2, 5, 6}), random(rng, {4, 2})},
                        [&](const Inputs& t) {
                            return composed::attention(t[0], t[1], t[2], 2, 1, relative, 0.5, MaskedRows::zero, Tensor(), t[3]);
                        });
}

// A hook replacing the scores or the pattern puts attention on separate ops;
// on the device those now take gradients: the module's output and every
// gradient (input, parameters) against the same module on the CPU.
TEST_F(DevicePrimitives, HookReplacedScoresAndPatternTakeGradientsOnTheDevice) {
    AttentionConfig config;
    config.width = 8;
    config.heads = 2;
    config.kv_heads = 1;
    AttentionMask mask;
    mask.causal = true;
    mask.key_lengths = {5, 4};
    for (const std::string point : {"scores", "pattern"}) {
        Rng init_cpu(11), init_gpu(11), data(12);
        MultiHeadAttention cpu(config, init_cpu, nullptr), gpu(config, init_gpu, nullptr);
        gpu.to(Device::cuda);
        const Tensor x = data.normal({2, 5, 8}, 0.0, 1.0).set_requires_grad(true);
        const Tensor x_gpu = x.to(Device::cuda).set_requires_grad(true);
        const Tensor seed = data.normal({2, 5, 8}, 0.0, 1.0);
        // scores halved (a temperature), or the pattern squared (weights no longer sum to 1)
        Hooks hooks;
        hooks.replace(point, [&](const std::string&, const Tensor& value) {
            return point == "scores" ? value * 0.5 : value * value;
        });
        Tensor y_cpu, y_gpu;
        {
            HookScope scope(cpu, hooks);
            y_cpu = cpu.forward(x, x, mask).out;
        }
        {
            HookScope scope(gpu, hooks);
            y_gpu = gpu.forward(x_gpu, x_gpu, mask).out;
        }
        ASSERT_EQ(y_gpu.device(), Device::cuda);
        expect_close(y_gpu.to(Device::cpu), y_cpu, 1e-5, 1e-4, point + ": output");
        sum(y_cpu * seed).backward();
        sum(y_gpu * seed.to(Device::cuda)).backward();
        expect_close(x_gpu.grad().to(Device::cpu), x.grad(), 1e-5, 1e-4, point + ": input gradient");
        const auto cpu_params = cpu.named_parameters(), gpu_params = gpu.named_parameters();
        for (size_t i = 0; i < cpu_params.size(); ++i)
            expect_close(gpu_params[i].second.grad().to(Device::cpu), cpu_params[i].second.grad(), 1e-5, 1e-4,
                         point + ": gradient of " + cpu_params[i].first);
    }
}

}  // namespace
}  // namespace attnlab::device_step_test
