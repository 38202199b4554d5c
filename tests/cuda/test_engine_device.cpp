// Tensors on the device (autograd/device_ops.h): every op a training step uses,
// forward and input gradients against the same op on the CPU, and Module::to.
// Whole training steps are in test_device_step.cpp. Compiled into
// test_cuda (the CUDA kernels; skipped without a GPU) and test_device_host (the
// device seam carried out on the host, its memory filled with NaN: a kernel
// that reads what nothing wrote fails the comparison).
#include <gtest/gtest.h>

#include <functional>

#include "autograd/attention.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "device_step_test.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab::device_step_test {
namespace {

using EngineDevice = cuda_test::DeviceTest;

Tensor random(Rng& rng, const Shape& shape) { return rng.normal(shape, 0.0, 1.0).set_requires_grad(true); }

TEST_F(EngineDevice, TensorsMoveThereAndBack) {
    const Tensor x = Tensor::from_values({1, -2, 3.5, 4, 5, 6}, {2, 3});
    const Tensor d = x.to(Device::cuda);
    EXPECT_EQ(d.device(), Device::cuda);
    EXPECT_EQ(d.shape(), x.shape());
    EXPECT_EQ(d.values(), x.values());
    EXPECT_EQ(d.at({1, 2}), 6.0);
    EXPECT_EQ(d.to(Device::cpu).values(), x.values());
    EXPECT_EQ(d.clone().values(), x.values());
    EXPECT_THROW(x.to(DType::f64).to(Device::cuda), Error);
}

TEST_F(EngineDevice, WhatTheDeviceCannotTakeIsSaid) {
    const Tensor d = Tensor::ones({2, 3}).to(Device::cuda);
    try {  // the strided views take at most device::max_rank axes
        (void)permute(reshape(d, {1, 1, 1, 1, 1, 1, 1, 2, 3}), {8, 7, 6, 5, 4, 3, 2, 1, 0});
        FAIL() << "permute took 9 axes on the device";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("[permute] a tensor of 9 axes (the device takes at most 8) has no device kernel"),
                  std::string::npos) << e.what();
    }
    try {
        (void)(d + Tensor::ones({2, 3}));
        FAIL() << "add mixed the devices";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
    }
}

TEST_F(EngineDevice, ElementwiseShapeAndLinearOpsMatchTheCpu) {
    Rng rng(1);
    expect_same_on_both("linear", {random(rng, {2, 5, 8}), random(rng, {6, 8}), random(rng, {6})},
                        [](const Inputs& t) { return linear(t[0], t[1], t[2]); });
    expect_same_on_both("linear without bias", {random(rng, {7, 8}), random(rng, {3, 8})},
                        [](const Inputs& t) { return linear(t[0], t[1], Tensor()); });
    expect_same_on_both("add", {random(rng, {2, 5, 8}), random(rng, {2, 5, 8})}, [](const Inputs& t) { return t[0] + t[1]; });
    expect_same_on_both("add of rows", {random(rng, {2, 5, 8}), random(rng, {5, 8})}, [](const Inputs& t) { return t[0] + t[1]; });
    expect_same_on_both("x + x", {random(rng, {4, 8})}, [](const Inputs& t) { return t[0] + t[0]; });
    expect_same_on_both("gelu", {random(rng, {3, 9})}, [](const Inputs& t) { return gelu(t[0]); });
    expect_same_on_both("relu", {random(rng, {3, 9})}, [](const Inputs& t) { return relu(t[0]); });
    expect_same_on_both("reshape", {random(rng, {2, 6})}, [](const Inputs& t) { return reshape(t[0], {3, 4}); });
    expect_same_on_both("slice of rows", {random(rng, {6, 4})}, [](const Inputs& t) { return slice(t[0], 0, 1, 4); });
    expect_same_on_both("concat on the middle axis (the KV cache)", {random(rng, {2, 3, 8}), random(rng, {2, 1, 8})},
                        [](const Inputs& t) { return concat({t[0], t[1]}, 1); });
    expect_same_on_both("concat of one tensor twice, last axis", {random(rng, {3, 4})},
                        [](const Inputs& t) { return concat({t[0], t[0]}, -1); });
    // add hands one gradient to both operands; each then adds more of its own (copied before, not in place)
    expect_same_on_both("a shared gradient, then more", {random(rng, {4, 8}), random(rng, {4, 8}), random(rng, {8, 8})},
                        [](const Inputs& t) { return linear(t[0] + t[1], t[2], Tensor()) + gelu(t[0]) + relu(t[1]); });
    expect_same_on_both("a shared gradient, then more (backward order reversed)", {random(rng, {4, 8}), random(rng, {4, 8})},
                        [](const Inputs& t) { return gelu(t[0]) + (t[0] + t[1]); });
    // a gradient reaching one tensor by two paths adds
    expect_same_on_both("two uses", {random(rng, {4, 8}), random(rng, {8, 8})},
                        [](const Inputs& t) { return linear(t[0], t[1], Tensor()) + gelu(t[0]); });
}

// Linears of one input, as attention's q, k and v: side by side in a module's
// parameter block (Module::to) they run as one batched GEMM each way; the
// outputs and every gradient are still those of one linear each.
struct Projections : Module {
    Projections(size_t in, const std::vector<size_t>& outs, bool bias, Rng& init) {
        for (size_t out : outs) layers.push_back(std::make_unique<Linear>(in, out, bias, init));
        for (size_t i = 0; i < layers.size(); ++i) register_module(std::to_string(i), *layers[i]);
    }
    std::vector<const Linear*> each() const {
        std::vector<const Linear*> out;
        for (const auto& layer : layers) out.push_back(layer.get());
        return out;
    }
    std::vector<std::unique_ptr<Linear>> layers;
};

// The gradients of sum_i sum(y_i * seed_i) over the projections `used`, on the CPU and on the device.
void expect_projections_match(const std::string& what, const std::vector<size_t>& outs, bool bias,
                              const std::vector<size_t>& used) {
    Rng init(4), data(5);
    Projections cpu(8, outs, bias, init);
    Rng init_again(4);
    Projections gpu(8, outs, bias, init_again);
    gpu.to(Device::cuda);
    const Tensor x_cpu = random(data, {2, 3, 8});
    const Tensor x_gpu = x_cpu.to(Device::cuda).set_requires_grad(true);
    const std::vector<Tensor> y_cpu = forward_each(cpu.each(), x_cpu), y_gpu = forward_each(gpu.each(), x_gpu);
    ASSERT_EQ(y_gpu.size(), outs.size());
    for (size_t i : used) {  // one backward per output, adding up (the graph kept for the next)
        expect_close(y_gpu[i].to(Device::cpu), y_cpu[i], 1e-5, 1e-4, what + ": output " + std::to_string(i));
        const Tensor seed = data.normal(y_cpu[i].shape(), 0.0, 1.0);
        y_cpu[i].backward(seed, true);
        y_gpu[i].backward(seed.to(Device::cuda), true);
    }
    expect_close(x_gpu.grad().to(Device::cpu), x_cpu.grad(), 1e-5, 1e-4, what + ": gradient of x");
    const NamedTensors p_cpu = cpu.named_parameters(), p_gpu = gpu.named_parameters();
    for (size_t i = 0; i < p_cpu.size(); ++i) {
        if (!p_cpu[i].second.grad().defined()) {
            if (p_gpu[i].second.grad().defined()) {
                for (double g : p_gpu[i].second.grad().values()) EXPECT_EQ(g, 0.0) << what << ": " << p_gpu[i].first;
            }
            continue;
        }
        expect_close(p_gpu[i].second.grad().to(Device::cpu), p_cpu[i].second.grad(), 1e-5, 1e-4,
                     what + ": gradient of " + p_cpu[i].first);
    }
}

TEST_F(EngineDevice, ProjectionsOfOneInputMatchTheCpu) {
    expect_projections_match("q, k, v", {8, 8, 8}, true, {0, 1, 2});
    expect_projections_match("q, k, v without biases", {8, 8, 8}, false, {0, 1, 2});
    expect_projections_match("grouped k and v (a run of two after q)", {8, 4, 4}, true, {0, 1, 2});
    // the loss uses the outer two only: the middle one's rows of the run's gradient are zero
    expect_projections_match("the middle one unused", {8, 8, 8}, true, {0, 2});
    // tensors moved one by one are not side by side: one linear each
    Rng data(6);
    expect_same_on_both("projections apart", {random(data, {2, 3, 8}), random(data, {5, 8}), random(data, {5}), random(data, {5, 8})},
                        [](const Inputs& t) {
                            const std::vector<Tensor> y = linears(t[0], {t[1], t[3]}, {t[2], Tensor()});
                            return y[0] + y[1];
                        });
}

TEST_F(EngineDevice, NetworkOpsMatchTheCpu) {
    Rng rng(2);
    Indices ids({2, 5}, {0, 3, 3, 6, 1, 2, 6, 0, 0, 4});
    expect_same_on_both("embedding", {random(rng, {7, 8})}, [&](const Inputs& t) { return embedding(t[0], ids); });
    expect_same_on_both("layer_norm", {random(rng, {2, 5, 8}), random(rng, {8}), random(rng, {8})},
                        [](const Inputs& t) { return layer_norm(t[0], t[1], t[2]); });
    expect_same_on_both("rms_norm", {random(rng, {2, 5, 8}), random(rng, {8})},
                        [](const Inputs& t) { return rms_norm(t[0], t[1]); });
    expect_same_on_both("rotary", {random(rng, {2, 5, 2 * 6})}, [](const Inputs& t) { return rotary(t[0], 2, 3, 10000.0); });
    Indices targets({2, 5}, {1, 2, 3, 4, 0, 6, 5, 4, 9, 9});  // 9: out of range, but left out by the mask
    const Mask keep({2, 5}, {1, 1, 0, 1, 1, 1, 1, 0, 0, 0});
    expect_same_on_both("cross_entropy with a loss mask", {random(rng, {2, 5, 7})},
                        [&](const Inputs& t) { return cross_entropy(t[0], targets, keep); });
    expect_same_on_both("cross_entropy, nothing counted", {random(rng, {2, 5, 7})},
                        [&](const Inputs& t) { return cross_entropy(t[0], targets, Mask::filled({2, 5}, false)); });
}

// attention_packed as MultiHeadAttention calls it: the flash kernel, the dense
// one (asked for the weights, or heads too wide for flash), grouped K/V, padding.
TEST_F(EngineDevice, AttentionMatchesTheCpu) {
    Rng rng(4);
    struct Case {
        std::string name;
        size_t H, H_kv, d;
        bool need_weights, alibi = false;
    };
    for (const Case& c : {Case{"flash", 4, 4, 8, false}, Case{"dense, weights asked", 4, 4, 8, true},
                          Case{"grouped K/V", 4, 2, 8, false}, Case{"wide heads: dense", 1, 1, 136, false},
                          Case{"flash, ALiBi, 6 heads", 6, 3, 8, false, true},
                          Case{"dense, ALiBi, weights asked", 6, 6, 8, true, true}}) {
        AttentionMask mask;
        mask.variant.alibi = c.alibi;
        mask.causal = true;
        mask.key_lengths = {6, 4};
        AttentionOptions options;
        options.scale = 0.3;
        options.need_weights = c.need_weights;
        options.need_score_std = c.need_weights;
        options.masked_rows = MaskedRows::zero;
        const size_t B = 2, T = 6;
        AttentionResult cpu_result;
        expect_same_on_both("attention, " + c.name,
                            {random(rng, {B, T, c.H * c.d}), random(rng, {B, T, c.H_kv * c.d}), random(rng, {B, T, c.H_kv * c.d})},
                            [&](const Inputs& t) {
                                const AttentionResult r = attention_packed(t[0], t[1], t[2], c.H, c.H_kv, mask, options);
                                const bool there = t[0].device() == Device::cuda;
                                if (!there && c.need_weights) cpu_result = r;
                                if (there && c.need_weights) {
                                    expect_close(r.weights.to(Device::cpu), cpu_result.weights, 1e-6, 1e-4, "weights");
                                    for (size_t h = 0; h < c.H; ++h)
                                        EXPECT_NEAR(r.score_std[h], cpu_result.score_std[h], 1e-5) << "head " << h;
                                }
                                return r.context;
                            });
    }
}

// The hook point "scores" on the device: the kernel against the CPU's composition,
// -inf at ineligible keys, a row with no eligible key keeping its scores.
TEST_F(EngineDevice, AttentionScoresMatchTheCpu) {
    Rng rng(5);
    AttentionMask mask;
    mask.causal = true;
    mask.variant.alibi = true;
    mask.key_lengths = {5, 0};  // item 1: no eligible key anywhere
    const Tensor q = rng.normal({2, 5, 4 * 3}, 0.0, 1.0), k = rng.normal({2, 5, 2 * 3}, 0.0, 1.0);
    NoGradGuard no_grad;
    const Tensor cpu = attention_scores(q, k, 4, 2, mask, 0.7);
    const Tensor gpu = attention_scores(q.to(Device::cuda), k.to(Device::cuda), 4, 2, mask, 0.7);
    const std::vector<double> a = gpu.values(), e = cpu.values();
    ASSERT_EQ(a.size(), e.size());
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isinf(e[i])) EXPECT_EQ(a[i], e[i]) << i;
        else EXPECT_NEAR(a[i], e[i], 1e-5) << i;
    }
}

// Dropout's masks differ from the CPU's (as torch's do), so the check is its
// own: every element is dropped (0) or scaled by 1/(1-p), and the gradient
// passes exactly where the element was kept, with the same scale.
TEST_F(EngineDevice, DropoutKeepsOrDropsAndItsGradientFollows) {
    Rng rng(6), drops(7);
    const Tensor x = rng.normal({64, 32}, 1.0, 0.1).to(Device::cuda).set_requires_grad(true);
    const Tensor y = dropout(x, 0.25, true, drops);
    y.backward(Tensor::ones({64, 32}).to(Device::cuda));
    const std::vector<double> xv = x.values(), yv = y.values(), gv = x.grad().values();
    size_t dropped = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
        if (yv[i] == 0.0) {
            ++dropped;
            EXPECT_EQ(gv[i], 0.0);
        } else {
            EXPECT_NEAR(yv[i], xv[i] / 0.75, 1e-5);
            EXPECT_NEAR(gv[i], 1 / 0.75, 1e-6);
        }
    }
    EXPECT_NEAR(double(dropped) / double(xv.size()), 0.25, 0.03);
}

TEST_F(EngineDevice, ModuleToMovesEveryParameterIntoOneBlock) {
    Rng init(5);
    DecoderLM model(tiny(), init, nullptr);
    const NamedTensors before = model.named_parameters();
    std::vector<std::vector<double>> values;
    for (const auto& [name, p] : before) values.push_back(p.values());
    model.to(Device::cuda);
    const NamedTensors after = model.named_parameters();
    for (size_t i = 0; i < after.size(); ++i) {
        EXPECT_EQ(after[i].second.device(), Device::cuda) << after[i].first;
        EXPECT_TRUE(after[i].second.same(before[i].second)) << after[i].first << ": moved in place";
        EXPECT_EQ(after[i].second.values(), values[i]) << after[i].first;
    }
    model.to(Device::cpu);
    for (size_t i = 0; i < after.size(); ++i) {
        EXPECT_EQ(after[i].second.device(), Device::cpu);
        EXPECT_EQ(after[i].second.values(), values[i]) << after[i].first;
    }
}

}  // namespace
}  // namespace attnlab::device_step_test
