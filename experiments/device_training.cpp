#include "experiments/device_training.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <unordered_map>

#include "autograd/tensor_impl.h"
#include "data/tasks.h"
#include "experiments/device_block.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab {

using namespace cuda;
using device::BlockSaved;
using device::BlockShape;
using device::BlockMasks;
using device::DeviceAttention;
using device::DeviceBlockParams;
using device::DeviceLayerNorm;
using device::DeviceLinear;
using device::DeviceParam;
using device::Memory;

namespace {

std::string attention_unsupported(const MultiHeadAttention& a) {
    if (a.dropout > 0) return "attention dropout (model.attn_dropout) has no device kernel yet";
    if (!a.head_edits.empty()) return "head edits (ablation) are not on the device step";
    return "";
}

std::string residual_unsupported(const Residual* r) {
    return r != nullptr && r->drop.p > 0 ? "residual dropout (model.dropout) has no device kernel yet" : "";
}

// "" when the device step can run this encoder or decoder block.
template <class Block>
std::string block_unsupported(const Block& block) {
    for (const std::string& reason : {attention_unsupported(block.attn), residual_unsupported(&block.res1),
                                      residual_unsupported(block.res2.get())})
        if (!reason.empty()) return reason;
    return "";
}

std::string model_unsupported(const Module& model, const Dropout& embedding_dropout, const Optimizer& optimizer) {
    if (dynamic_cast<const Adam*>(&optimizer) == nullptr) return "optim.name = \"sgd\" has no device update yet";
    for (const auto& [name, p] : model.named_parameters())
        if (p.dtype() != DType::f32) return "parameter " + name + " is " + to_string(p.dtype()) + ", not float32";
    if (embedding_dropout.p > 0) return "embedding dropout (model.dropout) has no device kernel yet";
    return "";
}

}  // namespace

std::string device_step_unsupported(const DecoderLM& model, const Optimizer& optimizer) {
    std::string reason = model_unsupported(model, model.emb_drop, optimizer);
    for (const auto& block : model.blocks)
        if (reason.empty()) reason = block_unsupported(*block);
    return reason;
}

std::string device_step_unsupported(const EncoderDecoder& model, const Optimizer& optimizer) {
    std::string reason = model_unsupported(model, model.emb_drop, optimizer);
    for (const auto& block : model.encoder)
        if (reason.empty()) reason = block_unsupported(*block);
    for (const auto& block : model.decoder) {
        if (reason.empty()) reason = block_unsupported(*block);
        if (reason.empty() && block->cross_attn) reason = attention_unsupported(*block->cross_attn);
        if (reason.empty()) reason = residual_unsupported(block->res_cross.get());
    }
    return reason;
}

// One side of the model on the device: embeddings and positions, blocks, final norm.
struct DeviceStack {
    DeviceParam token_table, position_table;  // (V, D), (max_len, D); positions may be absent
    std::vector<DeviceBlockParams> blocks;
    std::optional<DeviceLayerNorm> final_norm;
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
    Adam& optimizer;
    const ModelConfig config;

    // Every parameter at an offset of the flat buffers: first those that decay
    // (AdamW: matrices; Adam: all), matrices before vectors within each group, so
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
    DeviceBuffer params, grads, first_moment, second_moment;  // (total) each
    long long steps = 0;                                      // Adam steps taken (every parameter alike)

    DeviceBuffer stats;                   // 2 doubles: [loss, sum of squared gradients] of the last step
    DeviceBuffer partials;                // reduce_partials doubles of scratch
    std::vector<DeviceBuffer> sinusoids;  // (max_len, D): the fixed tables of positional = "sinusoidal"

    // The model over the flat buffers.
    std::optional<DeviceStack> encoder;  // encoder-decoder only
    DeviceStack decoder;
    DeviceLinear head;  // (V, D), no bias
    BlockShape shape;   // all but B, T, S, set per step
    MaskedRows masked_rows = MaskedRows::error;

    Impl(Context& c, Module& m, Adam& o, const ModelConfig& mc) : context(c), model(m), optimizer(o), config(mc) {}

    DeviceParam param(const Tensor& t) {
        if (!t.defined()) return {};
        const size_t offset = offset_of.at(&t.impl());
        return {params.floats() + offset, grads.floats() + offset};
    }
    std::optional<DeviceLayerNorm> layer_norm(const std::optional<LayerNorm>& ln) {
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
                               const BlockMasks& masks, const Memory& memory, StackPass& pass);
    void stack_backward(const DeviceStack& stack, const int32_t* tokens, const BlockShape& s, const BlockMasks& masks,
                        const Memory& memory, StackPass& pass, DeviceBuffer dout);
};

namespace {

const float* host_floats(const Tensor& t) { return values_of<float>(t).data(); }

// The Adam state of parameter `name`: step count, first and second moments.
struct AdamState {
    long long step = 0;
    Tensor m, v;
};
AdamState adam_state_of(const NamedTensors& state, const std::string& name) {
    AdamState s;
    for (const auto& [key, t] : state) {
        if (key == "step." + name) s.step = static_cast<long long>(t.item());
        if (key == "m." + name) s.m = t;
        if (key == "v." + name) s.v = t;
    }
    return s;
}

void check_ids(const char* op, const char* what, const Indices& ids, size_t limit) {
    for (int32_t id : ids.values)
        if (id < 0 || static_cast<size_t>(id) >= limit)
            fail(op, std::string(what) + " " + std::to_string(id) + " out of range for " + std::to_string(limit));
}

void check_tokens(const char* what, const Indices& tokens, const std::vector<size_t>& lengths, size_t max_len) {
    if (tokens.shape.size() != 2) fail(what, "tokens must be (B, T), got " + shape_str(tokens.shape));
    if (!lengths.empty() && lengths.size() != tokens.shape[0])
        fail(what, std::to_string(lengths.size()) + " lengths for batch " + std::to_string(tokens.shape[0]));
    if (tokens.shape[1] > max_len)
        fail("positional", "positions up to " + std::to_string(tokens.shape[1]) + " exceed the table of " +
                               std::to_string(max_len) + " (raise the maximum sequence length)");
}

}  // namespace

void DeviceTraining::Impl::lay_out() {
    const NamedTensors named = model.named_parameters();
    std::vector<bool> decays(named.size(), false);
    for (size_t i = 0; i < named.size(); ++i)
        for (size_t j = 0; j < optimizer.params().size(); ++j)
            if (optimizer.params()[j].second.same(named[i].second)) decays[i] = optimizer.decay[j];
    std::vector<size_t> order(named.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto rank = [&](size_t i) { return (decays[i] ? 0 : 2) + (named[i].second.dim() >= 2 ? 0 : 1); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank(a) < rank(b); });
    slots.resize(named.size());
    for (size_t i : order) {
        slots[i] = {named[i].first, named[i].second, total};
        offset_of[&named[i].second.impl()] = total;
        total += named[i].second.numel();
        if (decays[i]) decaying = total;
    }
}

void DeviceTraining::Impl::upload() {
    std::vector<float> values(total), m(total), v(total);
    const NamedTensors state = optimizer.state();
    bool first = true;
    for (const Slot& s : slots) {
        const size_t n = s.param.numel();
        std::memcpy(values.data() + s.offset, host_floats(s.param), n * sizeof(float));
        const AdamState a = adam_state_of(state, s.name);
        if (a.m.defined()) std::memcpy(m.data() + s.offset, host_floats(a.m), n * sizeof(float));
        if (a.v.defined()) std::memcpy(v.data() + s.offset, host_floats(a.v), n * sizeof(float));
        if (!first && a.step != steps)
            fail("cuda", "the device step needs one Adam step count for every parameter; " + s.name + " has " +
                             std::to_string(a.step) + ", others " + std::to_string(steps));
        steps = a.step;
        first = false;
    }
    params = to_device(context, values);
    first_moment = to_device(context, m);
    second_moment = to_device(context, v);
    grads = context.allocate_floats(total);
    fill_zero(context, grads.data(), total * sizeof(float));
    stats = context.allocate(2 * sizeof(double));
    partials = context.allocate(reduce_partials * sizeof(double));
}

DeviceLinear DeviceTraining::Impl::stacked(const std::vector<const Linear*>& parts) {
    DeviceLinear l = linear(*parts.front());
    for (size_t i = 1; i < parts.size(); ++i) {
        const auto follows = [&](const Tensor& before, const Tensor& after) {
            return !before.defined() || offset_of.at(&after.impl()) == offset_of.at(&before.impl()) + before.numel();
        };
        if (!follows(parts[i - 1]->weight, parts[i]->weight) || !follows(parts[i - 1]->bias, parts[i]->bias))
            fail("cuda", "device step: projections to stack are not adjacent in the parameter buffer");
        l.out += parts[i]->weight.size(0);
    }
    return l;
}

DeviceAttention DeviceTraining::Impl::attention(const MultiHeadAttention& a, bool cross) {
    shape.H = a.heads;
    shape.H_kv = a.kv_heads;
    shape.d = a.head_width;
    shape.scale = float(a.scale);
    shape.kernel = kernel_for_head_width(a.head_width);
    masked_rows = a.masked_rows;
    DeviceAttention d;
    d.cross = cross;
    d.q = cross ? linear(a.q_proj) : stacked({&a.q_proj, &a.k_proj, &a.v_proj});
    if (cross) d.kv = stacked({&a.k_proj, &a.v_proj});
    d.out = linear(a.out_proj);
    return d;
}

template <class Block>
DeviceBlockParams DeviceTraining::Impl::block(const Block& b) {
    DeviceBlockParams p;
    p.ln1 = layer_norm(b.res1.ln);
    p.attn = attention(b.attn, false);
    if (b.ffn) {
        p.fc1 = linear(b.ffn->fc1);
        p.fc2 = linear(b.ffn->fc2);
        p.ln2 = layer_norm(b.res2->ln);
    }
    return p;
}

DeviceParam DeviceTraining::Impl::positions(const PositionalEncoding& p) {
    if (p.kind == Positional::learned) return param(p.weight);
    if (p.kind == Positional::none) return {};
    sinusoids.push_back(to_device(context, host_floats(p.weight), p.weight.numel() * sizeof(float)));  // a constant
    return {sinusoids.back().floats(), nullptr};
}

void DeviceTraining::Impl::describe(const DecoderLM& m) {
    decoder.token_table = param(m.tok_emb.weight);
    decoder.position_table = positions(m.pos_emb);
    for (const auto& b : m.blocks) decoder.blocks.push_back(block(*b));
    decoder.final_norm = layer_norm(m.ln_f);
    head = linear(m.head);
}

void DeviceTraining::Impl::describe(const EncoderDecoder& m) {
    encoder.emplace();
    encoder->token_table = param(m.src_emb.weight);
    encoder->position_table = positions(m.src_pos_emb);
    for (const auto& b : m.encoder) encoder->blocks.push_back(block(*b));
    encoder->final_norm = layer_norm(m.enc_ln_f);
    decoder.token_table = param(m.tgt_emb.weight);
    decoder.position_table = positions(m.tgt_pos_emb);
    for (const auto& b : m.decoder) {
        DeviceBlockParams p = block(*b);
        p.cross_attn = attention(*b->cross_attn, true);
        p.ln_cross = layer_norm(b->res_cross->ln);
        decoder.blocks.push_back(p);
    }
    decoder.final_norm = layer_norm(m.dec_ln_f);
    head = linear(m.head);
}

static void set_shape_constants(BlockShape& shape, const ModelConfig& c) {
    shape.D = c.block.attention.width;
    shape.norm = c.block.norm;
    shape.activation = c.block.activation == Activation::gelu ? DeviceActivation::gelu : DeviceActivation::relu;
}

namespace {

template <class Model>
std::unique_ptr<DeviceTraining::Impl> on_device(Context& context, Model& model, Adam& optimizer) {
    const std::string unsupported = device_step_unsupported(model, optimizer);
    if (!unsupported.empty()) fail("cuda", "device step: " + unsupported);
    auto impl = std::make_unique<DeviceTraining::Impl>(context, model, optimizer, model.config);
    impl->lay_out();
    impl->upload();
    impl->describe(model);
    set_shape_constants(impl->shape, model.config);
    return impl;
}

}  // namespace

DeviceTraining::DeviceTraining(Context& context, DecoderLM& model, Adam& optimizer)
    : impl_(on_device(context, model, optimizer)) {}

DeviceTraining::DeviceTraining(Context& context, EncoderDecoder& model, Adam& optimizer)
    : impl_(on_device(context, model, optimizer)) {}

DeviceTraining::~DeviceTraining() = default;

// tokens (B, T) -> the stack's output (B T, D): embeddings + positions, the blocks, the final norm.
DeviceBuffer DeviceTraining::Impl::stack_forward(const DeviceStack& stack, const int32_t* tokens, const BlockShape& s,
                                                 const BlockMasks& masks, const Memory& memory, StackPass& pass) {
    const size_t M = s.B * s.T, D = s.D;
    DeviceBuffer x = context.allocate_floats(M * D);
    embedding_forward(context, s.B, s.T, D, tokens, stack.token_table.value, stack.position_table.value, x.floats());
    pass.blocks.resize(stack.blocks.size());
    for (size_t l = 0; l < stack.blocks.size(); ++l)
        x = device::block_forward(context, s, stack.blocks[l], masks, memory, std::move(x), pass.blocks[l]);
    if (!stack.final_norm) return x;
    pass.last = std::move(x);
    DeviceBuffer y = context.allocate_floats(M * D);
    pass.mean = context.allocate_floats(M);
    pass.rstd = context.allocate_floats(M);
    layer_norm_forward(context, M, D, pass.last.floats(), stack.final_norm->weight.value, stack.final_norm->bias.value,
                       stack.final_norm->eps, y.floats(), pass.mean.floats(), pass.rstd.floats());
    return y;
}

// dout (B T, D) at the stack's output -> every gradient of the stack, added into the buffers.
void DeviceTraining::Impl::stack_backward(const DeviceStack& stack, const int32_t* tokens, const BlockShape& s,
                                          const BlockMasks& masks, const Memory& memory, StackPass& pass,
                                          DeviceBuffer dout) {
    const size_t M = s.B * s.T, D = s.D;
    DeviceBuffer dx = std::move(dout);
    if (stack.final_norm) {
        DeviceBuffer dnormed = std::move(dx);
        dx = context.allocate_floats(M * D);
        const DeviceBuffer scratch = context.allocate_floats(M * D);
        layer_norm_backward(context, M, D, pass.last.floats(), stack.final_norm->weight.value, pass.mean.floats(),
                            pass.rstd.floats(), dnormed.floats(), dx.floats(), false, stack.final_norm->weight.grad,
                            stack.final_norm->bias.grad, scratch.floats());
    }
    for (size_t l = stack.blocks.size(); l-- > 0;) {
        dx = device::block_backward(context, s, stack.blocks[l], masks, memory, pass.blocks[l], std::move(dx));
        pass.blocks[l] = BlockSaved();  // its buffers go back to the cache for the layers below
    }
    embedding_backward(context, s.B, s.T, D, tokens, dx.floats(), stack.token_table.grad, stack.position_table.grad);
}

DeviceTraining::StepResult DeviceTraining::step(const Batch& batch, double lr, double max_norm) {
    Impl& s = *impl_;
    Context& ctx = s.context;
    const size_t V = s.config.vocab, D = s.shape.D;
    const Indices& tokens = batch.inputs;  // decoder inputs (B, T)
    check_tokens("decoder", tokens, batch.lengths, s.config.max_len);
    const size_t B = tokens.shape[0], T = tokens.shape[1], M = B * T;
    check_ids("embedding", "id", tokens, V);
    if (batch.targets.shape != tokens.shape)
        fail("cross_entropy", "targets " + shape_str(batch.targets.shape) + " do not match tokens " + shape_str(tokens.shape));
    check_ids("cross_entropy", "target", batch.targets, V);
    const bool masked = !batch.loss_mask.values.empty();
    if (masked && batch.loss_mask.shape != tokens.shape)
        fail("cross_entropy", "loss mask " + shape_str(batch.loss_mask.shape) + " does not match targets " + shape_str(tokens.shape));
    // The loss mask as weights 1/count: cross_entropy's mean over the counted positions.
    size_t counted = 0;
    for (size_t i = 0; i < M; ++i) counted += !masked || batch.loss_mask(i) ? 1 : 0;
    std::vector<float> weights(M, 0.0f);
    for (size_t i = 0; i < M; ++i)
        if (!masked || batch.loss_mask(i)) weights[i] = 1.0f / static_cast<float>(counted);

    // Shapes and masks, checked as the CPU op checks them (masked_rows = "error" refuses here).
    const size_t S = s.encoder ? batch.src.shape.at(1) : 0;
    if (s.encoder) {
        check_tokens("encoder", batch.src, batch.src_lengths, s.config.max_len);
        if (batch.src.shape[0] != B) fail("encoder", "source batch " + std::to_string(batch.src.shape[0]) + " for target batch " + std::to_string(B));
        check_ids("embedding", "id", batch.src, V);
    }
    AttentionOptions options;
    options.scale = s.shape.scale;
    options.masked_rows = s.masked_rows;
    const auto mask_of = [](bool causal, const std::vector<size_t>& lengths) {
        AttentionMask m;
        m.causal = causal;
        m.key_lengths = lengths;
        return m;
    };
    const AttentionMask self_mask = mask_of(true, batch.lengths), src_mask = mask_of(false, batch.src_lengths);
    const AttentionDims self_dims{B, s.shape.H, s.shape.H_kv, T, T, s.shape.d, s.shape.d};
    const AttentionDims enc_dims{B, s.shape.H, s.shape.H_kv, S, S, s.shape.d, s.shape.d};
    const AttentionDims cross_dims{B, s.shape.H, s.shape.H_kv, T, S, s.shape.d, s.shape.d};
    check_attention(self_dims, self_mask, options, s.shape.kernel);
    if (s.encoder) {
        check_attention(enc_dims, src_mask, options, s.shape.kernel);
        check_attention(cross_dims, src_mask, options, s.shape.kernel);
    }

    // ---- the batch in: one copy of 4-byte words ----
    // [tokens (M) | targets (M) | loss weights (M, float) | lengths (B) | source (B S) | source lengths (B)]
    std::vector<int32_t> words;
    const auto append = [&](const auto& values) {
        const size_t at = words.size();
        for (const auto& v : values) {
            int32_t word;
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, float>) std::memcpy(&word, &v, sizeof word);
            else word = static_cast<int32_t>(v);
            words.push_back(word);
        }
        return at;
    };
    const size_t at_tokens = append(tokens.values), at_targets = append(batch.targets.values),
                 at_weights = append(weights), at_lengths = append(batch.lengths), at_source = append(batch.src.values),
                 at_source_lengths = append(batch.src_lengths);
    const DeviceBuffer d_batch = to_device(ctx, words.data(), words.size() * sizeof(int32_t));
    const auto ids = [&](size_t at) { return static_cast<const int32_t*>(d_batch.data()) + at; };
    const auto key_lengths = [&](size_t at, const std::vector<size_t>& lengths) {
        return lengths.empty() ? nullptr : ids(at);  // none: every key of every item counts
    };
    MaskView self_view, src_view;
    self_view.causal = true;
    self_view.key_lengths = key_lengths(at_lengths, batch.lengths);
    src_view.key_lengths = key_lengths(at_source_lengths, batch.src_lengths);
    fill_zero(ctx, s.grads.data(), s.total * sizeof(float));
    double* stats = static_cast<double*>(s.stats.data());
    double* partials = static_cast<double*>(s.partials.data());

    BlockShape dec_shape = s.shape, enc_shape = s.shape;
    dec_shape.B = enc_shape.B = B;
    dec_shape.T = T;
    dec_shape.S = enc_shape.T = S;
    const BlockMasks dec_masks{self_view, src_view};
    const BlockMasks enc_masks{src_view, MaskView{}};

    // ---- forward ----
    StackPass enc_pass, dec_pass;
    DeviceBuffer memory, dmemory;  // (B S, D) the encoder's output and its gradient
    if (s.encoder) {
        memory = s.stack_forward(*s.encoder, ids(at_source), enc_shape, enc_masks, {}, enc_pass);
        dmemory = ctx.allocate_floats(B * S * D);
        fill_zero(ctx, dmemory.data(), B * S * D * sizeof(float));
    }
    const Memory mem{memory.empty() ? nullptr : memory.floats(), dmemory.empty() ? nullptr : dmemory.floats()};
    const DeviceBuffer out = s.stack_forward(s.decoder, ids(at_tokens), dec_shape, dec_masks, mem, dec_pass);
    const DeviceBuffer logits = ctx.allocate_floats(M * V);  // (M, V)
    linear_forward(ctx, M, V, D, out.floats(), s.head.weight.value, nullptr, logits.floats());
    const DeviceBuffer loss_rows = ctx.allocate_floats(M);
    const DeviceBuffer dlogits = ctx.allocate_floats(M * V);
    cross_entropy_forward_backward(ctx, M, V, logits.floats(), ids(at_targets), reinterpret_cast<const float*>(ids(at_weights)), loss_rows.floats(),
                                   dlogits.floats());
    sum_to_double(ctx, M, loss_rows.floats(), false, stats, partials);

    // ---- backward ----
    DeviceBuffer dout = ctx.allocate_floats(M * D);
    linear_backward(ctx, M, V, D, out.floats(), s.head.weight.value, dlogits.floats(), dout.floats(), false,
                    s.head.weight.grad, nullptr);
    s.stack_backward(s.decoder, ids(at_tokens), dec_shape, dec_masks, mem, dec_pass, std::move(dout));
    if (s.encoder) s.stack_backward(*s.encoder, ids(at_source), enc_shape, enc_masks, {}, enc_pass, std::move(dmemory));

    // ---- clip and update ----
    sum_to_double(ctx, s.total, s.grads.floats(), true, stats + 1, partials);
    const long long t = s.steps + 1;
    const Adam& o = s.optimizer;
    const double correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
    const double correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
    AdamScalars a{};
    a.beta1 = static_cast<float>(o.beta1);
    a.beta2 = static_cast<float>(o.beta2);
    a.one_minus_beta1 = static_cast<float>(1 - o.beta1);
    a.one_minus_beta2 = static_cast<float>(1 - o.beta2);
    a.step_size = static_cast<float>(lr / correction1);
    a.sqrt_c2 = static_cast<float>(std::sqrt(correction2));
    a.eps = static_cast<float>(o.eps);
    a.weight_decay = static_cast<float>(o.weight_decay);
    a.shrink = 1.0f - static_cast<float>(lr) * static_cast<float>(o.weight_decay);
    a.decoupled = o.decoupled;
    a.max_norm = max_norm;
    adam_update(ctx, s.total, s.decaying, s.params.floats(), s.grads.floats(), s.first_moment.floats(),
                s.second_moment.floats(), a, stats);

    // ---- two numbers out ----
    double result[2] = {0, 0};
    to_host(ctx, s.stats, result, sizeof result);
    const StepResult r{result[0], std::sqrt(result[1])};
    if (std::isfinite(r.loss) && std::isfinite(r.grad_norm)) s.steps = t;
    return r;
}

void DeviceTraining::download() const {
    const Impl& s = *impl_;
    std::vector<float> values(s.total), m(s.total), v(s.total);
    to_host(s.context, s.params, values.data(), s.total * sizeof(float));
    to_host(s.context, s.first_moment, m.data(), s.total * sizeof(float));
    to_host(s.context, s.second_moment, v.data(), s.total * sizeof(float));
    NamedTensors state;
    for (const Impl::Slot& slot : s.slots) {
        const size_t n = slot.param.numel();
        std::memcpy(slot.param.impl().array<float>().data(), values.data() + slot.offset, n * sizeof(float));
        const auto slice = [&](const std::vector<float>& all) {
            Array<float> part = make_array<float>(slot.param.shape());
            std::memcpy(part.data(), all.data() + slot.offset, n * sizeof(float));
            return wrap<float>(std::move(part));
        };
        state.emplace_back("step." + slot.name, Tensor::scalar(static_cast<double>(s.steps), DType::f64));
        state.emplace_back("m." + slot.name, slice(m));
        state.emplace_back("v." + slot.name, slice(v));
    }
    s.optimizer.load_state(state);
}

NamedTensors DeviceTraining::gradients() const {
    const Impl& s = *impl_;
    std::vector<float> all(s.total);
    to_host(s.context, s.grads, all.data(), s.total * sizeof(float));
    NamedTensors out;
    for (const Impl::Slot& slot : s.slots) {
        Array<float> g = make_array<float>(slot.param.shape());
        std::memcpy(g.data(), all.data() + slot.offset, slot.param.numel() * sizeof(float));
        out.emplace_back(slot.name, wrap<float>(std::move(g)));
    }
    return out;
}

}  // namespace attnlab
