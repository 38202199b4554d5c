// What the device step's tests share (test_device_step.cpp: one step against
// the CPU; test_device_step_runs.cpp: several steps, resumes): the tiny model and
// its variants' optimisers, random ragged batches, the CPU step as the trainer
// takes it, and the tolerance check. Compiled into test_cuda and test_device_host.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/device/context.h"
#include "device_context_test.h"
#include "data/tasks.h"
#include "experiments/run/attention_metrics.h"
#include "layers/hooks.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab::device_step_test {

inline constexpr double no_clip = std::numeric_limits<double>::infinity();

using DeviceStep = cuda_test::DeviceTest;

inline ModelConfig tiny() {
    ModelConfig c;
    c.vocab = 13;
    c.layers = 2;
    c.max_len = 12;
    c.block.attention.width = 16;
    c.block.attention.heads = 4;
    c.block.ffn = 32;
    return c;
}

struct Variant {
    std::string name;
    ModelConfig config;
    std::string optimizer = "adamw";  // | "adam" (L2 in the gradient) | "sgd" (momentum, Nesterov) | "sgd_plain"
};
inline void PrintTo(const Variant& v, std::ostream* out) { *out << v.name; }

// Random tokens and targets, ragged lengths, a loss mask over the valid positions
// with a few more left out. Row 1 also counts its padded positions: under a
// causal mask only padded queries can see padded keys, so without them in the
// loss the key-padding mask would change nothing the test sees.
inline Batch random_batch(Rng& data, size_t B, size_t T, size_t V) {
    Batch b;
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (int32_t& t : tokens) t = static_cast<int32_t>(data.integer(0, V));
    for (int32_t& t : targets) t = static_cast<int32_t>(data.integer(0, V));
    b.inputs = Indices({B, T}, tokens);
    b.targets = Indices({B, T}, targets);
    std::vector<uint8_t> counted(B * T, 0);
    for (size_t i = 0; i < B; ++i) {
        const size_t length = T - (i * 3) % (T - 1);
        b.lengths.push_back(length);
        for (size_t t = 0; t < T; ++t) counted[i * T + t] = (t < length || i == 1) && (i + t) % 5 != 0;
    }
    b.loss_mask = Mask({B, T}, counted);
    return b;
}

// The batch with a source (B, 7) of ragged lengths, for an encoder-decoder.
inline Batch with_source(Batch batch, Rng& data) {
    const size_t B = batch.inputs.shape[0], S = 7;
    std::vector<int32_t> src(B * S);
    for (int32_t& t : src) t = static_cast<int32_t>(data.integer(0, tiny().vocab));
    batch.src = Indices({B, S}, src);
    for (size_t b = 0; b < B; ++b) batch.src_lengths.push_back(S - (b * 3) % S);
    return batch;
}

// eps 1e-2 makes the update lr g / (|g| + eps) smooth in g: two implementations'
// float-level gradient differences then stay float-level in the parameters (at
// eps 1e-8 a near-zero gradient's sign alone moves a parameter by lr).
inline std::unique_ptr<Optimizer> optimizer_for(const Variant& v, Module& model, double eps = 1e-2) {
    if (v.optimizer == "adam") return std::make_unique<Adam>(model.named_parameters(), 1e-2, 0.9, 0.999, eps, 0.1, false);
    if (v.optimizer == "sgd") return std::make_unique<SGD>(model.named_parameters(), 0.1, 0.9, true, 0.01);
    if (v.optimizer == "sgd_plain") return std::make_unique<SGD>(model.named_parameters(), 0.1);
    return make_adamw(model.named_parameters(), 1e-2, 0.9, 0.999, eps, 0.1);
}

// Every architecture and optimiser option the device step takes.
inline std::vector<Variant> variants() {
    std::vector<Variant> v;
    v.push_back({"pre_learned_gelu", tiny()});
    ModelConfig c = tiny();
    c.block.norm = Norm::post;
    v.push_back({"post_norm", c});
    c = tiny();
    c.block.norm = Norm::none;
    v.push_back({"no_norm", c});
    c = tiny();
    c.positional = Positional::sinusoidal;
    v.push_back({"sinusoidal", c});
    c = tiny();
    c.positional = Positional::none;
    v.push_back({"no_positions", c});
    c = tiny();
    c.block.ffn = 0;
    v.push_back({"attention_only", c});
    c = tiny();
    c.block.activation = Activation::relu;
    v.push_back({"relu", c});
    c = tiny();
    c.block.attention.kv_heads = 2;
    v.push_back({"grouped_kv", c});
    c = tiny();
    c.block.attention.bias = false;
    v.push_back({"no_bias", c});
    c = tiny();
    c.block.attention.heads = 1;
    c.block.attention.head_width = 136;  // above the flash kernel's tiles: the dense kernel
    v.push_back({"dense_kernel", c});
    c = tiny();
    c.block.attention.scale = "none";
    v.push_back({"unscaled", c});
    c = tiny();
    c.positional = Positional::rotary;
    v.push_back({"rotary", c});
    c = tiny();
    c.positional = Positional::alibi;
    v.push_back({"alibi", c});
    c.block.attention.heads = 1;
    c.block.attention.head_width = 136;  // ALiBi on the dense kernel
    v.push_back({"alibi_dense_kernel", c});
    v.push_back({"adam_l2", tiny(), "adam"});
    v.push_back({"sgd_nesterov", tiny(), "sgd"});
    v.push_back({"sgd_plain", tiny(), "sgd_plain"});
    return v;
}

// The same model twice (same seed): one for the CPU, one for the device.
template <class Model>
struct Pair {
    Model cpu, gpu;
    explicit Pair(const ModelConfig& c) : cpu(make(c)), gpu(make(c)) {}
    static Model make(const ModelConfig& c) {
        Rng init(5);
        return Model(c, init, nullptr);
    }
};

inline Tensor cpu_logits(const DecoderLM& model, const Batch& b) { return model.forward(b.inputs, b.lengths); }
inline Tensor cpu_logits(const EncoderDecoder& model, const Batch& b) {
    return model.forward(b.src, b.src_lengths, b.inputs, b.lengths);
}

// One CPU step as the trainer takes it; returns {loss, grad norm} and leaves the gradients.
template <class Model>
std::pair<double, double> cpu_step(Model& model, const Batch& b, double max_norm) {
    Tensor loss = cross_entropy(cpu_logits(model, b), b.targets, b.loss_mask);
    const double value = loss.item();
    loss.backward();
    const double norm = clip_grad_norm(model.named_parameters(), max_norm);
    return {value, norm};
}

inline void expect_close(const Tensor& actual, const Tensor& expected, double atol, double rtol, const std::string& what) {
    ASSERT_EQ(actual.shape(), expected.shape()) << what;
    const std::vector<double> a = actual.values(), e = expected.values();
    double worst = 0;
    size_t where = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] == e[i]) continue;  // infinities (masked scores) included
        const double excess = std::abs(a[i] - e[i]) - (atol + rtol * std::abs(e[i]));
        if (!(excess <= worst)) {
            worst = std::isnan(excess) ? std::numeric_limits<double>::infinity() : excess;
            where = i;
        }
    }
    EXPECT_LE(worst, 0.0) << what << ": element " << where << " is " << a[where] << ", expected " << e[where];
}

using Inputs = std::vector<Tensor>;

inline Inputs copies_on_device(const Inputs& inputs) {
    Inputs out;
    for (const Tensor& t : inputs) out.push_back(t.defined() ? t.to(Device::cuda).set_requires_grad(t.requires_grad()) : Tensor());
    return out;
}

// f on the CPU inputs and on copies on the device: the outputs, and the
// gradients of sum(output * seed) for a random seed, within 1e-5 + 1e-4 |cpu|.
inline void expect_same_on_both(const std::string& what, const Inputs& cpu, const std::function<Tensor(const Inputs&)>& f) {
    const Inputs gpu = copies_on_device(cpu);
    const Tensor y_cpu = f(cpu), y_gpu = f(gpu);
    ASSERT_EQ(y_gpu.device(), Device::cuda) << what;
    expect_close(y_gpu.to(Device::cpu), y_cpu, 1e-5, 1e-4, what + ": output");
    Rng rng(3);
    const Tensor seed = rng.normal(y_cpu.shape(), 0.0, 1.0);
    y_cpu.backward(y_cpu.dim() == 0 ? Tensor() : seed);
    y_gpu.backward(y_gpu.dim() == 0 ? Tensor() : seed.to(Device::cuda));
    for (size_t i = 0; i < cpu.size(); ++i) {
        if (!cpu[i].defined() || !cpu[i].requires_grad()) continue;
        ASSERT_TRUE(gpu[i].grad().defined()) << what << ": input " << i << " got no gradient";
        EXPECT_EQ(gpu[i].grad().device(), Device::cuda);
        expect_close(gpu[i].grad().to(Device::cpu), cpu[i].grad(), 1e-5, 1e-4, what + ": gradient of input " + std::to_string(i));
    }
}

}  // namespace attnlab::device_step_test
