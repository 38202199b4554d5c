// train.device = "cuda", the whole step (experiments/run/device_training.h):
// DeviceTraining's loss, gradients, clipping and Adam/AdamW update against the
// autograd model and optimiser on the CPU, for every architecture option the
// device step takes; the metrics' trace; dropout against central differences.
// Several steps (SGD's velocity, a loss curve, download and a fresh upload
// continuing the same run) are in test_device_step_runs.cpp. Compiled into
// test_cuda (the CUDA kernels; skipped without a GPU) and, in the CPU build,
// into test_device_host, where tests/device_host/ carries out the device
// interface on the host (the composition, not the kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "device_step_test.h"
#include "experiments/run/attention_metrics.h"
#include "experiments/run/device_training.h"
#include "layers/hooks.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab::device_step_test {
namespace {

// The CPU model's record of a forward pass in the device trace's form, from its
// hook points: per module (prefixes "<stack>.<l>.<module>") the pattern, each
// head's score standard deviation under `mask` and the per-head outputs.
AttentionTrace cpu_trace(const Hooks& hooks, const std::string& stack, const std::string& module, size_t layers,
                         const AttentionMask& mask) {
    AttentionTrace t;
    for (size_t l = 0; l < layers; ++l) {
        const std::string at = stack + "." + std::to_string(l) + "." + module + ".";
        t.weights.push_back(hooks.last(at + "pattern"));
        t.context.push_back(permute(hooks.last(at + "z"), {0, 2, 1, 3}));  // (B, Tq, H, d) -> (B, H, Tq, d)
        const std::vector<double> per_head = score_std({hooks.last(at + "scores")}, mask);
        t.score_std.push_back(per_head);
    }
    return t;
}

class DeviceStepAgreement : public DeviceStep, public ::testing::WithParamInterface<Variant> {};

// Tolerances: loss 1e-5, gradient norm 1e-5 relative, gradients and updated
// parameters 1e-5 + 1e-3 |cpu| (float32 sums in another order).
template <class Model>
void expect_one_step_agrees(cuda::Context& context, const Variant& v, const Batch& batch) {
    Pair<Model> models(v.config);
    auto cpu_opt = optimizer_for(v, models.cpu);
    auto gpu_opt = optimizer_for(v, models.gpu);
    const auto [loss, norm] = cpu_step(models.cpu, batch, no_clip);
    DeviceTraining device(context, models.gpu, *gpu_opt);
    const DeviceTraining::StepResult r = device.step(batch, cpu_opt->lr, no_clip);
    EXPECT_NEAR(r.loss, loss, 1e-5);
    EXPECT_NEAR(r.grad_norm, norm, 1e-5 * norm);

    const NamedTensors grads = device.gradients();
    const NamedTensors cpu_params = models.cpu.named_parameters();
    ASSERT_EQ(grads.size(), cpu_params.size());
    for (size_t i = 0; i < grads.size(); ++i) {
        ASSERT_EQ(grads[i].first, cpu_params[i].first);
        expect_close(grads[i].second, cpu_params[i].second.grad(), 1e-5, 1e-3, "gradient of " + grads[i].first);
    }
    cpu_opt->step();
    device.download();
    const NamedTensors gpu_params = models.gpu.named_parameters();
    for (size_t i = 0; i < gpu_params.size(); ++i)
        expect_close(gpu_params[i].second, cpu_params[i].second, 1e-5, 1e-3, "updated " + gpu_params[i].first);
    // the optimiser state came back too
    const NamedTensors state = gpu_opt->state(), cpu_state = cpu_opt->state();
    ASSERT_EQ(state.size(), cpu_state.size());
    for (size_t i = 0; i < state.size(); ++i)
        expect_close(state[i].second, cpu_state[i].second, 1e-7, 1e-3, "optimiser state " + state[i].first);
}

TEST_P(DeviceStepAgreement, OneStepGivesTheCpuLossGradientsAndUpdate) {
    Rng data(9);
    expect_one_step_agrees<DecoderLM>(*context, GetParam(), random_batch(data, 3, 10, GetParam().config.vocab));
}

// The encoder-decoder: source (B, 7) with ragged lengths, target (B, 10); the
// cross-attention's keys are the encoder output, whose gradient sums over every decoder block.
TEST_P(DeviceStepAgreement, EncoderDecoderStepGivesTheCpuLossGradientsAndUpdate) {
    Rng data(10);
    const Batch batch = with_source(random_batch(data, 3, 10, GetParam().config.vocab), data);
    expect_one_step_agrees<EncoderDecoder>(*context, GetParam(), batch);
}

INSTANTIATE_TEST_SUITE_P(Architectures, DeviceStepAgreement, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return info.param.name; });

// The metrics' forward on the device: per kind and layer the weights, each
// head's score standard deviation and per-head outputs, as the CPU forward's
// maps; then, after a step, the evaluation's logits as the CPU model's.
TEST_F(DeviceStep, TraceAndLogitsAreTheCpuForwards) {
    const Variant v{"trace", tiny()};
    Rng data(14);
    const Batch batch = with_source(random_batch(data, 3, 10, v.config.vocab), data);
    Pair<DecoderLM> decoders(v.config);
    Pair<EncoderDecoder> enc_decs(v.config);
    auto decoder_opt = optimizer_for(v, decoders.gpu);
    auto enc_dec_opt = optimizer_for(v, enc_decs.gpu);
    DeviceTraining decoder(*context, decoders.gpu, *decoder_opt), enc_dec(*context, enc_decs.gpu, *enc_dec_opt);
    const auto expect_same_trace = [](const AttentionTrace& got, const AttentionTrace& want, const std::string& kind) {
        ASSERT_EQ(got.weights.size(), want.weights.size()) << kind;
        ASSERT_FALSE(want.weights.empty()) << kind;
        for (size_t l = 0; l < want.weights.size(); ++l) {
            const std::string where = kind + " layer " + std::to_string(l);
            expect_close(got.weights[l], want.weights[l], 1e-6, 1e-4, where + " weights");
            expect_close(got.context[l], want.context[l], 1e-5, 1e-4, where + " per-head outputs");
            ASSERT_EQ(got.score_std[l].size(), want.score_std[l].size()) << where;
            for (size_t h = 0; h < want.score_std[l].size(); ++h)
                EXPECT_NEAR(got.score_std[l][h], want.score_std[l][h], 1e-5 * want.score_std[l][h]) << where << " head " << h;
        }
    };
    NoGradGuard no_grad;
    AttentionMask causal_padded, source;
    causal_padded.causal = true;
    causal_padded.key_lengths = batch.lengths;
    source.key_lengths = batch.src_lengths;
    const size_t L = v.config.layers;
    Hooks cpu_hooks;
    cpu_hooks.record("*attn.pattern").record("*attn.scores").record("*attn.z");
    AttentionMaps device_maps;
    Tensor cpu_out;
    {
        HookScope scope(decoders.cpu, cpu_hooks);
        cpu_out = decoders.cpu.forward(batch.inputs, batch.lengths);
    }
    expect_close(decoder.trace(batch, device_maps), cpu_out, 1e-5, 1e-4, "decoder logits");
    expect_same_trace(device_maps.self, cpu_trace(cpu_hooks, "blocks", "attn", L, causal_padded), "self");
    AttentionMaps enc_dec_device;
    cpu_hooks.clear_recorded();
    {
        HookScope scope(enc_decs.cpu, cpu_hooks);
        cpu_out = enc_decs.cpu.forward(batch.src, batch.src_lengths, batch.inputs, batch.lengths);
    }
    expect_close(enc_dec.trace(batch, enc_dec_device), cpu_out, 1e-5, 1e-4, "encoder-decoder logits");
    expect_same_trace(enc_dec_device.enc_self, cpu_trace(cpu_hooks, "encoder", "attn", L, source), "enc_self");
    expect_same_trace(enc_dec_device.self, cpu_trace(cpu_hooks, "decoder", "attn", L, causal_padded), "dec_self");
    expect_same_trace(enc_dec_device.cross, cpu_trace(cpu_hooks, "decoder", "cross_attn", L, source), "cross");

    decoder.step(batch, 1e-2, no_clip);
    enc_dec.step(batch, 1e-2, no_clip);
    decoder.download();
    enc_dec.download();
    expect_close(decoder.logits(batch), cpu_logits(decoders.gpu, batch), 1e-5, 1e-4, "decoder logits after a step");
    expect_close(enc_dec.logits(batch), cpu_logits(enc_decs.gpu, batch), 1e-5, 1e-4, "encoder-decoder logits after a step");
}

// With embedding, residual and attention dropout the masks are the device's own, so the
// CPU model is no reference; the gradients are checked against central
// differences of the device loss along a random direction instead (the same
// seed gives the same masks, and lr = 0 leaves the parameters as they are).
// Tolerance: 2% of the directional derivative (float32, eps 1e-3).
template <class Model>
void expect_dropout_gradients_match_differences(cuda::Context& context, const Batch& batch) {
    ModelConfig c = tiny();
    c.block.dropout = 0.2;
    c.embedding_dropout = 0.2;
    c.block.attention.dropout = 0.2;
    const auto make = [&](double shift, const std::vector<double>& direction, NamedTensors* grads) {
        Rng init(5), dropout(6);
        Model model(c, init, &dropout);
        size_t at = 0;
        for (auto& [name, p] : model.named_parameters()) {
            std::vector<double> values = p.values();
            for (double& v : values) v += shift * direction[at++];
            Tensor(p).assign(Tensor::from_values(values, p.shape()));
        }
        auto opt = make_adamw(model.named_parameters(), 0.0);
        DeviceTraining device(context, model, *opt);
        const double loss = device.step(batch, 0.0, no_clip).loss;
        if (grads) *grads = device.gradients();
        return loss;
    };
    Rng init(5), direction_rng(7);
    size_t count = 0;
    for (const auto& [name, p] : Model(c, init, nullptr).named_parameters()) count += p.numel();
    std::vector<double> direction(count);
    for (double& d : direction) d = direction_rng.normal();
    NamedTensors grads;
    const double at_zero = make(0.0, direction, &grads), with_no_dropout = [&] {
        ModelConfig plain = c;
        plain.block.dropout = 0;
        plain.embedding_dropout = 0;
        plain.block.attention.dropout = 0;
        Rng i(5);
        Model model(plain, i, nullptr);
        auto opt = make_adamw(model.named_parameters(), 0.0);
        return DeviceTraining(context, model, *opt).step(batch, 0.0, no_clip).loss;
    }();
    EXPECT_GT(std::abs(at_zero - with_no_dropout), 1e-3) << "dropout changed nothing: the check would be vacuous";
    double analytic = 0;
    size_t at = 0;
    for (const auto& [name, g] : grads)
        for (double v : g.values()) analytic += v * direction[at++];
    const double eps = 1e-3;
    const double numeric = (make(eps, direction, nullptr) - make(-eps, direction, nullptr)) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 0.02 * std::abs(numeric)) << "directional derivative";
}

TEST_F(DeviceStep, DropoutGradientsMatchCentralDifferences) {
    Rng data(16);
    expect_dropout_gradients_match_differences<DecoderLM>(*context, random_batch(data, 3, 10, tiny().vocab));
    const Batch batch = with_source(random_batch(data, 3, 10, tiny().vocab), data);
    expect_dropout_gradients_match_differences<EncoderDecoder>(*context, batch);
}

TEST_F(DeviceStep, ClipsByTheGlobalNormAsTheCpu) {
    const Variant v{"clip", tiny()};
    Pair<DecoderLM> models(v.config);
    auto cpu_opt = optimizer_for(v, models.cpu);
    auto gpu_opt = optimizer_for(v, models.gpu);
    Rng data(3);
    const Batch batch = random_batch(data, 2, 8, v.config.vocab);
    const double max_norm = 0.05;
    const auto [loss, norm] = cpu_step(models.cpu, batch, max_norm);
    ASSERT_GT(norm, 4 * max_norm) << "the gradient must be clipped for this test to mean anything";
    cpu_opt->step();
    DeviceTraining device(*context, models.gpu, *gpu_opt);
    const DeviceTraining::StepResult r = device.step(batch, 1e-2, max_norm);
    EXPECT_NEAR(r.grad_norm, norm, 1e-5 * norm);  // reported before clipping
    device.download();
    const NamedTensors cpu_params = models.cpu.named_parameters(), gpu_params = models.gpu.named_parameters();
    for (size_t i = 0; i < gpu_params.size(); ++i)
        expect_close(gpu_params[i].second, cpu_params[i].second, 1e-5, 1e-3, "clipped update of " + gpu_params[i].first);
}

// A NaN loss leaves every parameter as it was (the trainer stops on that step).
TEST_F(DeviceStep, ANonFiniteLossUpdatesNothing) {
    const Variant v{"nan", tiny()};
    Pair<DecoderLM> models(v.config);
    auto opt = optimizer_for(v, models.gpu);
    Tensor head = models.gpu.head.weight;
    std::vector<double> values = head.values();
    values[0] = std::nan("");
    head.assign(Tensor::from_values(values, head.shape()));
    const std::vector<double> before = models.gpu.blocks[0]->attn.q_proj.weight.values();
    DeviceTraining device(*context, models.gpu, *opt);
    Rng data(4);
    const DeviceTraining::StepResult r = device.step(random_batch(data, 2, 6, v.config.vocab), 1e-2, no_clip);
    EXPECT_TRUE(std::isnan(r.loss));
    device.download();
    EXPECT_EQ(models.gpu.blocks[0]->attn.q_proj.weight.values(), before);
}

TEST(DeviceStepSupport, NamesWhatItCannotRun) {
    Rng init(1);
    ModelConfig c = tiny();
    DecoderLM plain(c, init, nullptr);
    auto adamw = make_adamw(plain.named_parameters(), 1e-3);
    EXPECT_EQ(device_step_unsupported(plain, *adamw), "");
    SGD sgd(plain.named_parameters(), 1e-3);
    EXPECT_EQ(device_step_unsupported(plain, sgd), "");
    c.block.dropout = 0.1;  // residual dropout runs on the device
    Rng dropout(2);
    DecoderLM with_dropout(c, init, &dropout);
    auto opt = make_adamw(with_dropout.named_parameters(), 1e-3);
    EXPECT_EQ(device_step_unsupported(with_dropout, *opt), "");
    c = tiny();
    c.block.attention.dropout = 0.1;  // so does dropout on the attention weights
    DecoderLM decoder_attn_dropout(c, init, &dropout);
    auto decoder_opt = make_adamw(decoder_attn_dropout.named_parameters(), 1e-3);
    EXPECT_EQ(device_step_unsupported(decoder_attn_dropout, *decoder_opt), "");
    DecoderLM without_rng(c, init, nullptr);
    auto without_rng_opt = make_adamw(without_rng.named_parameters(), 1e-3);
    EXPECT_EQ(device_step_unsupported(without_rng, *without_rng_opt), "attention dropout without an Rng");
}

}  // namespace
}  // namespace attnlab::device_step_test
