// train.device = "cuda": the one model moved to the device (Module::to), its
// loss, gradients, clipping and Adam/AdamW/SGD update against the same model
// and optimiser on the CPU, for every architecture option; the metrics' hook
// points; dropout against central differences. Several steps (SGD's velocity,
// a loss curve, a checkpoint-like copy out and back continuing the same run) are
// in test_device_step_runs.cpp. Compiled into test_cuda (the CUDA kernels;
// skipped without a GPU) and, in the CPU build, into test_device_host, where
// tests/device_host/ carries out the device seam on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/member_rows.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "device_step_test.h"
#include "experiments/run/attention_metrics.h"
#include "layers/hooks.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab::device_step_test {
namespace {

// What the metrics read of a forward pass, per attention module ("<stack>.<l>.<module>"):
// the pattern, each head's score standard deviation under `mask` and the
// per-head outputs (B, H, Tq, d), on the CPU whichever device recorded them.
struct Trace {
    std::vector<Tensor> weights, context;
    std::vector<std::vector<double>> score_std;
};
Trace trace_of(const Hooks& hooks, const std::string& stack, const std::string& module, size_t layers,
               const AttentionMask& mask) {
    Trace t;
    for (size_t l = 0; l < layers; ++l) {
        const std::string at = stack + "." + std::to_string(l) + "." + module + ".";
        t.weights.push_back(hooks.last(at + "pattern").to(Device::cpu));
        t.context.push_back(permute(hooks.last(at + "z").to(Device::cpu), {0, 2, 1, 3}));  // (B, Tq, H, d) -> (B, H, Tq, d)
        t.score_std.push_back(score_std({hooks.last(at + "scores")}, mask));
    }
    return t;
}

class DeviceStepAgreement : public DeviceStep, public ::testing::WithParamInterface<Variant> {};

// Tolerances: loss 1e-5, gradient norm 1e-5 relative, gradients and updated
// parameters 1e-5 + 1e-3 |cpu| (float32 sums in another order).
template <class Model>
void expect_one_step_agrees(const Variant& v, const Batch& batch, double max_norm = no_clip) {
    Pair<Model> models(v.config);
    models.gpu.to(Device::cuda);
    auto cpu_opt = optimizer_for(v, models.cpu);
    auto gpu_opt = optimizer_for(v, models.gpu);
    const auto [loss, norm] = cpu_step(models.cpu, batch, max_norm);
    const auto [gpu_loss, gpu_norm] = cpu_step(models.gpu, batch, max_norm);  // the same code, on the device
    EXPECT_NEAR(gpu_loss, loss, 1e-5);
    EXPECT_NEAR(gpu_norm, norm, 1e-5 * norm);
    const NamedTensors cpu_params = models.cpu.named_parameters(), gpu_params = models.gpu.named_parameters();
    ASSERT_EQ(gpu_params.size(), cpu_params.size());
    for (size_t i = 0; i < gpu_params.size(); ++i) {
        ASSERT_EQ(gpu_params[i].first, cpu_params[i].first);
        ASSERT_EQ(gpu_params[i].second.grad().device(), Device::cuda) << gpu_params[i].first;
        expect_close(gpu_params[i].second.grad().to(Device::cpu), cpu_params[i].second.grad(), 1e-5, 1e-3,
                     "gradient of " + gpu_params[i].first);
    }
    cpu_opt->step();
    gpu_opt->step();
    for (size_t i = 0; i < gpu_params.size(); ++i)
        expect_close(gpu_params[i].second.to(Device::cpu), cpu_params[i].second, 1e-5, 1e-3, "updated " + gpu_params[i].first);
    // the optimiser state lives on the device and reads back as the CPU's
    const NamedTensors state = gpu_opt->state(), cpu_state = cpu_opt->state();
    ASSERT_EQ(state.size(), cpu_state.size());
    for (size_t i = 0; i < state.size(); ++i)
        expect_close(state[i].second.to(Device::cpu), cpu_state[i].second, 1e-7, 1e-3, "optimiser state " + state[i].first);
}

TEST_P(DeviceStepAgreement, OneStepGivesTheCpuLossGradientsAndUpdate) {
    Rng data(9);
    expect_one_step_agrees<DecoderLM>(GetParam(), random_batch(data, 3, 10, GetParam().config.vocab));
}

// The encoder-decoder: source (B, 7) with ragged lengths, target (B, 10); the
// cross-attention's keys are the encoder output, whose gradient sums over every decoder block.
TEST_P(DeviceStepAgreement, EncoderDecoderStepGivesTheCpuLossGradientsAndUpdate) {
    Rng data(10);
    const Batch batch = with_source(random_batch(data, 3, 10, GetParam().config.vocab), data);
    expect_one_step_agrees<EncoderDecoder>(GetParam(), batch);
}

INSTANTIATE_TEST_SUITE_P(Architectures, DeviceStepAgreement, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return info.param.name; });

// The metrics' forward on the device: per kind and layer the weights, each
// head's score standard deviation and per-head outputs, as the CPU forward's
// hook points record them; then, after a step, the evaluation's logits as the
// CPU model's with the same (updated) parameters.
TEST_F(DeviceStep, TraceAndLogitsAreTheCpuForwards) {
    const Variant v{"trace", tiny()};
    Rng data(14);
    const Batch batch = with_source(random_batch(data, 3, 10, v.config.vocab), data);
    Pair<DecoderLM> decoders(v.config);
    Pair<EncoderDecoder> enc_decs(v.config);
    decoders.gpu.to(Device::cuda);
    enc_decs.gpu.to(Device::cuda);
    const auto expect_same_trace = [](const Trace& got, const Trace& want, const std::string& kind) {
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
    AttentionMask causal_padded, source;
    causal_padded.causal = true;
    causal_padded.key_lengths = batch.lengths;
    source.key_lengths = batch.src_lengths;
    const size_t L = v.config.layers;
    Hooks cpu_hooks, gpu_hooks;
    for (Hooks* h : {&cpu_hooks, &gpu_hooks}) h->record("*attn.pattern").record("*attn.scores").record("*attn.z");
    {
        NoGradGuard no_grad;
        Tensor cpu_out, gpu_out;
        {
            HookScope cpu_scope(decoders.cpu, cpu_hooks), gpu_scope(decoders.gpu, gpu_hooks);
            cpu_out = decoders.cpu.forward(batch.inputs, batch.lengths);
            gpu_out = decoders.gpu.forward(batch.inputs, batch.lengths);
        }
        expect_close(gpu_out.to(Device::cpu), cpu_out, 1e-5, 1e-4, "decoder logits");
        expect_same_trace(trace_of(gpu_hooks, "blocks", "attn", L, causal_padded),
                          trace_of(cpu_hooks, "blocks", "attn", L, causal_padded), "self");
        cpu_hooks.clear_recorded();
        gpu_hooks.clear_recorded();
        {
            HookScope cpu_scope(enc_decs.cpu, cpu_hooks), gpu_scope(enc_decs.gpu, gpu_hooks);
            cpu_out = enc_decs.cpu.forward(batch.src, batch.src_lengths, batch.inputs, batch.lengths);
            gpu_out = enc_decs.gpu.forward(batch.src, batch.src_lengths, batch.inputs, batch.lengths);
        }
        expect_close(gpu_out.to(Device::cpu), cpu_out, 1e-5, 1e-4, "encoder-decoder logits");
        for (const auto& [stack, module, mask, kind] :
             std::vector<std::tuple<std::string, std::string, AttentionMask, std::string>>{
                 {"encoder", "attn", source, "enc_self"}, {"decoder", "attn", causal_padded, "dec_self"},
                 {"decoder", "cross_attn", source, "cross"}})
            expect_same_trace(trace_of(gpu_hooks, stack, module, L, mask), trace_of(cpu_hooks, stack, module, L, mask), kind);
    }
    auto decoder_opt = optimizer_for(v, decoders.gpu);
    auto enc_dec_opt = optimizer_for(v, enc_decs.gpu);
    cpu_step(decoders.gpu, batch, no_clip);
    decoder_opt->step();
    cpu_step(enc_decs.gpu, batch, no_clip);
    enc_dec_opt->step();
    // the CPU model given the device's updated parameters
    decoders.cpu.load_state_dict(decoders.gpu.state_dict());
    enc_decs.cpu.load_state_dict(enc_decs.gpu.state_dict());
    NoGradGuard no_grad;
    expect_close(cpu_logits(decoders.gpu, batch).to(Device::cpu), cpu_logits(decoders.cpu, batch), 1e-5, 1e-4,
                 "decoder logits after a step");
    expect_close(cpu_logits(enc_decs.gpu, batch).to(Device::cpu), cpu_logits(enc_decs.cpu, batch), 1e-5, 1e-4,
                 "encoder-decoder logits after a step");
}

// With embedding, residual and attention dropout the masks are the device's own, so the
// CPU model is no reference; the gradients are checked against central
// differences of the device loss along a random direction instead (the same
// seed gives the same masks).
// Tolerance: 2% of the directional derivative (float32, eps 1e-3).
template <class Model>
void expect_dropout_gradients_match_differences(const Batch& batch) {
    ModelConfig c = tiny();
    c.block.dropout = 0.2;
    c.embedding_dropout = 0.2;
    c.block.attention.dropout = 0.2;
    const auto device_loss = [&](const ModelConfig& config, double shift, const std::vector<double>& direction,
                                 std::vector<double>* grads) {
        Rng init(5), dropout(6);
        Model model(config, init, &dropout);
        size_t at = 0;
        for (auto& [name, p] : model.named_parameters()) {
            std::vector<double> values = p.values();
            for (double& v : values) v += shift * direction[at++];
            Tensor(p).assign(Tensor::from_values(values, p.shape()));
        }
        model.to(Device::cuda);
        model.train();
        Tensor loss = cross_entropy(cpu_logits(model, batch), batch.targets, batch.loss_mask);
        const double value = loss.item();
        if (grads) {
            loss.backward();
            for (const auto& [name, p] : model.named_parameters()) {
                const std::vector<double> g = p.grad().values();
                grads->insert(grads->end(), g.begin(), g.end());
            }
        }
        return value;
    };
    Rng init(5), direction_rng(7);
    size_t count = 0;
    for (const auto& [name, p] : Model(c, init, nullptr).named_parameters()) count += p.numel();
    std::vector<double> direction(count);
    for (double& d : direction) d = direction_rng.normal();
    std::vector<double> grads;
    const double at_zero = device_loss(c, 0.0, direction, &grads);
    ModelConfig plain = c;
    plain.block.dropout = 0;
    plain.embedding_dropout = 0;
    plain.block.attention.dropout = 0;
    EXPECT_GT(std::abs(at_zero - device_loss(plain, 0.0, direction, nullptr)), 1e-3)
        << "dropout changed nothing: the check would be vacuous";
    double analytic = 0;
    for (size_t i = 0; i < grads.size(); ++i) analytic += grads[i] * direction[i];
    const double eps = 1e-3;
    const double numeric = (device_loss(c, eps, direction, nullptr) - device_loss(c, -eps, direction, nullptr)) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 0.02 * std::abs(numeric)) << "directional derivative";
}

TEST_F(DeviceStep, DropoutGradientsMatchCentralDifferences) {
    Rng data(16);
    expect_dropout_gradients_match_differences<DecoderLM>(random_batch(data, 3, 10, tiny().vocab));
    const Batch batch = with_source(random_batch(data, 3, 10, tiny().vocab), data);
    expect_dropout_gradients_match_differences<EncoderDecoder>(batch);
}

// Stacked members (train.seeds_mode = "stacked") on the device: one model holding
// three members' parameters along a leading axis, their batches side by side, gives
// each member the loss and gradients of its own model's pass: bit for bit where the
// device is deterministic (exact_device), else to rounding.
void expect_stacked_members_own_pass(const ModelConfig& config, const std::string& what) {
    SCOPED_TRACE(what);
    constexpr size_t K = 3, B = 2, T = 8;
    std::vector<std::unique_ptr<DecoderLM>> members;
    std::vector<Batch> batches;
    Rng data(40);
    for (size_t m = 0; m < K; ++m) {
        Rng init(50 + m);
        members.push_back(std::make_unique<DecoderLM>(config, init, nullptr));
        members.back()->to(Device::cuda);
        batches.push_back(random_batch(data, B, T, config.vocab));
    }
    Rng unused(0);
    DecoderLM stacked(config, unused, nullptr);
    stacked.stack_members(K);
    stacked.to(Device::cuda);
    std::vector<NamedTensors> own;
    for (const auto& m : members) own.push_back(m->named_parameters());
    const MemberRows rows(stacked.named_parameters(), own);
    EXPECT_TRUE(rows.one_launch());  // each model one block: the values in, the gradients out, one launch each
    rows.set_values();
    std::vector<int32_t> tokens;  // the members' batches side by side: member m's rows m B .. m B + B - 1
    std::vector<size_t> lengths;
    for (const Batch& b : batches) {
        tokens.insert(tokens.end(), b.inputs.values.begin(), b.inputs.values.end());
        lengths.insert(lengths.end(), b.lengths.begin(), b.lengths.end());
    }
    const Tensor logits = stacked.forward(Indices({K * B, T}, tokens), lengths);  // (K B, T, V)
    Tensor total;
    std::vector<double> losses;
    for (size_t m = 0; m < K; ++m) {
        const Tensor loss = cross_entropy(slice(logits, 0, m * B, (m + 1) * B), batches[m].targets, batches[m].loss_mask);
        losses.push_back(loss.item());
        total = total.defined() ? total + loss : loss;
    }
    total.backward();
    rows.add_grads();
    double worst = 0;
    for (size_t m = 0; m < K; ++m) {
        std::vector<std::vector<double>> given;  // what the stacked pass gave member m
        for (const auto& [name, p] : own[m]) {
            ASSERT_TRUE(p.grad().defined()) << "member " << m << ": " << name;
            given.push_back(p.grad().values());
        }
        members[m]->zero_grad();
        const Tensor loss = cross_entropy(members[m]->forward(batches[m].inputs, batches[m].lengths), batches[m].targets, batches[m].loss_mask);
        loss.backward();
        EXPECT_NEAR(losses[m], loss.item(), cuda_test::exact_device ? 0.0 : 1e-6) << "member " << m;
        for (size_t i = 0; i < own[m].size(); ++i) {
            const std::vector<double> alone = own[m][i].second.grad().values();
            double gap = 0;
            for (size_t e = 0; e < alone.size(); ++e) gap = std::max(gap, std::abs(given[i][e] - alone[e]));
            EXPECT_LE(gap, cuda_test::exact_device ? 0.0 : 1e-5) << "member " << m << ": " << own[m][i].first;
            worst = std::max(worst, gap);
        }
    }
    // The stacked pass sums attention's q, k and v input gradients in a member's solo
    // order (linears: q's product, then k's and v's added on), so it is exact here.
    std::printf("%s: largest gradient difference from the members' own passes: %.3g\n", what.c_str(), worst);
}

// Which projections share a run depends on their shapes and biases: q, k and v as
// one (full heads), q apart from k and v (grouped K/V, one K/V head), no biases.
TEST_F(DeviceStep, StackedMembersGiveEachMemberItsOwnPass) {
    expect_stacked_members_own_pass(tiny(), "4 heads");
    ModelConfig grouped = tiny();
    grouped.block.attention.kv_heads = 2;
    expect_stacked_members_own_pass(grouped, "2 K/V heads");
    ModelConfig one_kv = tiny();
    one_kv.block.attention.kv_heads = 1;
    expect_stacked_members_own_pass(one_kv, "1 K/V head");
    ModelConfig no_bias = tiny();
    no_bias.block.attention.bias = false;
    expect_stacked_members_own_pass(no_bias, "no attention biases");
}

TEST_F(DeviceStep, ClipsByTheGlobalNormAsTheCpu) {
    const Variant v{"clip", tiny()};
    Rng data(3);
    const Batch batch = random_batch(data, 2, 8, v.config.vocab);
    {
        Pair<DecoderLM> models(v.config);
        ASSERT_GT(cpu_step(models.cpu, batch, no_clip).second, 4 * 0.05) << "the gradient must be clipped for this test to mean anything";
    }
    expect_one_step_agrees<DecoderLM>(v, batch, 0.05);  // the norm reported before clipping, the update clipped
}

// A NaN among the parameters gives a NaN loss and gradient norm on the device,
// as on the CPU: what the trainer stops on, before the optimiser's step.
TEST_F(DeviceStep, ANonFiniteLossIsSeenBeforeTheUpdate) {
    const Variant v{"nan", tiny()};
    Pair<DecoderLM> models(v.config);
    models.gpu.to(Device::cuda);
    Tensor head = models.gpu.head.weight;
    std::vector<double> values = head.values();
    values[0] = std::nan("");
    head.assign(Tensor::from_values(values, head.shape()));
    Rng data(4);
    const auto [loss, norm] = cpu_step(models.gpu, random_batch(data, 2, 6, v.config.vocab), no_clip);
    EXPECT_TRUE(std::isnan(loss));
    EXPECT_FALSE(std::isfinite(norm));
}

}  // namespace
}  // namespace attnlab::device_step_test
