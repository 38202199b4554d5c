// What DeviceTraining keeps on the device and how the model maps onto it:
// shared by device_model.cpp (the buffers, the model's description on them,
// upload and download) and device_training.cpp (the step). Internal to experiments/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "experiments/run/device_block.h"
#include "experiments/run/device_training.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab {

using cuda::Context;
using cuda::DeviceBuffer;
using device::BlockMasks;
using device::BlockSaved;
using device::BlockShape;
using device::DeviceAttention;
using device::DeviceBlockParams;
using device::DeviceLayerNorm;
using device::DeviceLinear;
using device::DeviceParam;
using device::Memory;

// One side of the model on the device: embeddings and positions, blocks, final norm.
struct DeviceStack {
    uint64_t site = 0;                        // 0: decoder, 1: encoder (its dropout seeds differ)
    DeviceParam token_table, position_table;  // (V, D), (max_len, D); positions may be absent
    std::vector<DeviceBlockParams> blocks;
    std::optional<DeviceLayerNorm> final_norm;
};

// A pass's dropout: probabilities (0 in eval) and the step's seed, from which
// every site's seed follows (cuda::mix_seed).
struct DropoutPlan {
    float embedding = 0.0f, residual = 0.0f, attention = 0.0f;
    uint64_t seed = 0;
};

// What a stack's forward keeps for its backward.
struct StackPass {
    std::vector<BlockSaved> blocks;
    DeviceBuffer last;        // (M, D) the last block's output, when a final norm follows
    DeviceBuffer mean, rstd;  // (M) the final norm's statistics
};

struct DeviceTraining::Impl {
    Context& context;
    Module& model;
    Optimizer& optimizer;
    Adam* adam;  // exactly one of these two is the optimiser
    SGD* sgd;
    const ModelConfig config;

    // Every parameter at an offset of the flat buffers: first those that decay
    // (AdamW: matrices; Adam: all; SGD: none), matrices before vectors within each group, so
    // that q_proj, k_proj, v_proj (weights and biases) are adjacent and one GEMM
    // computes the three projections.
    struct Slot {
        std::string name;
        Tensor param;
        size_t offset = 0;
    };
    std::vector<Slot> slots;  // in the model's parameter order
    std::unordered_map<const TensorImpl*, size_t> offset_of;
    size_t total = 0, decaying = 0;
    DeviceBuffer params, grads;  // (total) each
    // The optimiser's per-element state, (total) each: Adam's m and v, or SGD's
    // velocity; and its counter, the same for every parameter: Adam's step
    // count, or SGD's "started" (0 or 1).
    std::vector<DeviceBuffer> moments;
    long long steps = 0;

    DeviceBuffer stats;                   // 2 doubles: [loss, sum of squared gradients] of the last step
    DeviceBuffer partials;                // reduce_partials doubles of scratch
    std::vector<DeviceBuffer> sinusoids;  // (max_len, D): the fixed tables of positional = "sinusoidal"

    // The model over the flat buffers.
    std::optional<DeviceStack> encoder;  // encoder-decoder only
    DeviceStack decoder;
    DeviceLinear head;  // (V, D), no bias
    BlockShape shape;   // all but B, T, S and dropout, set per step
    MaskedRows masked_rows = MaskedRows::error;
    float embedding_dropout = 0.0f, residual_dropout = 0.0f;  // model.dropout
    float attention_dropout = 0.0f;                           // model.attn_dropout
    Rng* dropout_rng = nullptr;           // the model's; one draw per training step gives its seed
    std::optional<uint64_t> next_seed;    // drawn for the next step (a metrics trace before it shares it)
    // The next training step's dropout (trace: consume = false, so the step sees the same masks).
    DropoutPlan training_dropout(bool consume);

    Impl(Context& c, Module& m, Optimizer& o, const ModelConfig& mc)
        : context(c), model(m), optimizer(o), adam(dynamic_cast<Adam*>(&o)), sgd(dynamic_cast<SGD*>(&o)), config(mc) {}
    // Names in Optimizer::state(): the per-element buffers' prefixes, then the counter's.
    std::vector<std::string> moment_names() const { return adam ? std::vector<std::string>{"m.", "v."} : std::vector<std::string>{"velocity."}; }
    std::string counter_name() const { return adam ? "step." : "started."; }

    DeviceParam param(const Tensor& t) {
        if (!t.defined()) return {};
        const size_t offset = offset_of.at(&t.impl());
        return {params.floats() + offset, grads.floats() + offset};
    }
    std::optional<DeviceLayerNorm> layer_norm(const std::unique_ptr<NormLayer>& norm) {
        const auto* ln = dynamic_cast<const LayerNorm*>(norm.get());  // device_step_unsupported refuses other norms
        if (!ln) return std::nullopt;
        return DeviceLayerNorm{param(ln->weight), param(ln->bias), float(ln->eps)};
    }
    DeviceLinear linear(const Linear& l) { return {param(l.weight), param(l.bias), l.weight.size(1), l.weight.size(0)}; }
    // [first; second; ...] as one (sum of outs, in) matrix: they must follow each other in the buffer.
    DeviceLinear stacked(const std::vector<const Linear*>& parts);
    DeviceAttention attention(const MultiHeadAttention& a, bool cross);
    template <class Block> DeviceBlockParams block(const Block& b);
    DeviceParam positions(const PositionalEncoding& p);

    void lay_out();
    void upload();
    void describe(const DecoderLM& m);
    void describe(const EncoderDecoder& m);

    DeviceBuffer stack_forward(const DeviceStack& stack, const int32_t* tokens, const BlockShape& s,
                               const BlockMasks& masks, const Memory& memory, const DropoutPlan& dropout,
                               StackPass& pass);
    void stack_backward(const DeviceStack& stack, const int32_t* tokens, const BlockShape& s, const BlockMasks& masks,
                        const Memory& memory, const DropoutPlan& dropout, StackPass& pass, DeviceBuffer dout);
};

}  // namespace attnlab
