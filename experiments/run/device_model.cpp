#include <algorithm>
#include <cstring>

#include "autograd/tensor_impl.h"
#include "experiments/run/device_state.h"

namespace attnlab {

using namespace cuda;

namespace {

std::string attention_unsupported(const MultiHeadAttention& a) {
    if (a.dropout > 0 && a.dropout_rng == nullptr) return "attention dropout without an Rng";
    return "";
}

std::string residual_unsupported(const Residual* r) {
    if (r != nullptr && r->ln && dynamic_cast<const LayerNorm*>(r->ln.get()) == nullptr)
        return "RMSNorm has no device kernel (the device step takes LayerNorm)";
    return r != nullptr && r->drop.p > 0 && r->drop.rng == nullptr ? "residual dropout without an Rng" : "";
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
    if (dynamic_cast<const Adam*>(&optimizer) == nullptr && dynamic_cast<const SGD*>(&optimizer) == nullptr)
        return "this optimiser has no device update";
    for (const auto& [name, p] : model.named_parameters())
        if (p.dtype() != DType::f32) return "parameter " + name + " is " + to_string(p.dtype()) + ", not float32";
    if (embedding_dropout.p > 0 && embedding_dropout.rng == nullptr) return "embedding dropout without an Rng";
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


namespace {

const float* host_floats(const Tensor& t) { return values_of<float>(t).data(); }

// state[prefix + name], or an undefined Tensor.
Tensor state_entry(const NamedTensors& state, const std::string& prefix, const std::string& name) {
    for (const auto& [key, t] : state)
        if (key == prefix + name) return t;
    return Tensor();
}

}  // namespace

void DeviceTraining::Impl::lay_out() {
    const NamedTensors named = model.named_parameters();
    std::vector<bool> decays(named.size(), false);
    for (size_t i = 0; i < named.size(); ++i)
        for (size_t j = 0; j < optimizer.params().size(); ++j)
            if (adam && optimizer.params()[j].second.same(named[i].second)) decays[i] = adam->decay[j];
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
    std::vector<float> values(total);
    const std::vector<std::string> names = moment_names();
    std::vector<std::vector<float>> host_moments(names.size(), std::vector<float>(total, 0.0f));
    const NamedTensors state = optimizer.state();
    bool first = true;
    for (const Slot& s : slots) {
        const size_t n = s.param.numel();
        std::memcpy(values.data() + s.offset, host_floats(s.param), n * sizeof(float));
        for (size_t k = 0; k < names.size(); ++k) {
            const Tensor t = state_entry(state, names[k], s.name);
            if (t.defined()) std::memcpy(host_moments[k].data() + s.offset, host_floats(t), n * sizeof(float));
        }
        const Tensor counter = state_entry(state, counter_name(), s.name);
        const long long count = counter.defined() ? static_cast<long long>(counter.item()) : 0;
        if (!first && count != steps)
            fail("cuda", "the device step needs one optimiser counter (" + counter_name() + ") for every parameter; " +
                             s.name + " has " + std::to_string(count) + ", others " + std::to_string(steps));
        steps = count;
        first = false;
    }
    params = to_device(context, values);
    for (const std::vector<float>& m : host_moments) moments.push_back(to_device(context, m));
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

namespace {

// model.dropout: on the embeddings and on every sublayer's output, from the model's Rng.
template <class Block>
void describe_dropout(DeviceTraining::Impl& impl, const Dropout& embedding, const Block& first_block) {
    impl.embedding_dropout = float(embedding.p);
    impl.residual_dropout = float(first_block.res1.drop.p);
    impl.attention_dropout = float(first_block.attn.dropout);
    impl.dropout_rng = embedding.rng != nullptr      ? embedding.rng
                       : first_block.res1.drop.rng   ? first_block.res1.drop.rng
                                                     : first_block.attn.dropout_rng;
}

}  // namespace

DropoutPlan DeviceTraining::Impl::training_dropout(bool consume) {
    DropoutPlan plan{embedding_dropout, residual_dropout, attention_dropout, 0};
    if (plan.embedding == 0 && plan.residual == 0 && plan.attention == 0) return plan;
    if (!next_seed) next_seed = dropout_rng->next_u64();
    plan.seed = *next_seed;
    if (consume) next_seed.reset();
    return plan;
}

void DeviceTraining::Impl::describe(const DecoderLM& m) {
    if (!m.blocks.empty()) describe_dropout(*this, m.emb_drop, *m.blocks.front());
    decoder.token_table = param(m.tok_emb.weight);
    decoder.position_table = positions(m.pos_emb);
    for (const auto& b : m.blocks) decoder.blocks.push_back(block(*b));
    decoder.final_norm = layer_norm(m.ln_f);
    head = linear(m.head);
}

void DeviceTraining::Impl::describe(const EncoderDecoder& m) {
    if (!m.decoder.empty()) describe_dropout(*this, m.emb_drop, *m.decoder.front());
    encoder.emplace();
    encoder->site = 1;
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
std::unique_ptr<DeviceTraining::Impl> on_device(Context& context, Model& model, Optimizer& optimizer) {
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

DeviceTraining::DeviceTraining(Context& context, DecoderLM& model, Optimizer& optimizer)
    : impl_(on_device(context, model, optimizer)) {}

DeviceTraining::DeviceTraining(Context& context, EncoderDecoder& model, Optimizer& optimizer)
    : impl_(on_device(context, model, optimizer)) {}

DeviceTraining::~DeviceTraining() = default;

void DeviceTraining::download() const {
    const Impl& s = *impl_;
    std::vector<float> values(s.total);
    to_host(s.context, s.params, values.data(), s.total * sizeof(float));
    const std::vector<std::string> names = s.moment_names();
    std::vector<std::vector<float>> moments(names.size(), std::vector<float>(s.total));
    for (size_t k = 0; k < names.size(); ++k)
        to_host(s.context, s.moments[k], moments[k].data(), s.total * sizeof(float));
    // SGD, as torch: "started" once a step has filled the velocity, which only momentum does
    const double counter = s.adam ? static_cast<double>(s.steps) : (s.steps > 0 && s.sgd->momentum != 0 ? 1.0 : 0.0);
    NamedTensors state;
    for (const Impl::Slot& slot : s.slots) {
        const size_t n = slot.param.numel();
        std::memcpy(slot.param.impl().array<float>().data(), values.data() + slot.offset, n * sizeof(float));
        state.emplace_back(s.counter_name() + slot.name, Tensor::scalar(counter, DType::f64));
        for (size_t k = 0; k < names.size(); ++k) {
            Array<float> part = make_array<float>(slot.param.shape());
            std::memcpy(part.data(), moments[k].data() + slot.offset, n * sizeof(float));
            state.emplace_back(names[k] + slot.name, wrap<float>(std::move(part)));
        }
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
