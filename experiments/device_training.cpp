#include "experiments/device_training.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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
using device::DeviceBlockParams;
using device::DeviceLayerNorm;
using device::DeviceLinear;
using device::DeviceParam;

std::string device_step_unsupported(const DecoderLM* model, const Optimizer& optimizer) {
    if (model == nullptr) return "the encoder-decoder model has no device step yet";
    if (dynamic_cast<const Adam*>(&optimizer) == nullptr) return "optim.name = \"sgd\" has no device update yet";
    for (const auto& [name, p] : model->named_parameters())
        if (p.dtype() != DType::f32) return "parameter " + name + " is " + to_string(p.dtype()) + ", not float32";
    if (model->emb_drop.p > 0) return "embedding dropout (model.dropout) has no device kernel yet";
    for (const auto& block : model->blocks) {
        if (block->attn.dropout > 0) return "attention dropout (model.attn_dropout) has no device kernel yet";
        if (block->res1.drop.p > 0 || (block->res2 && block->res2->drop.p > 0))
            return "residual dropout (model.dropout) has no device kernel yet";
        if (!block->attn.head_edits.empty()) return "head edits (ablation) are not on the device step";
    }
    return "";
}

struct DeviceTraining::Impl {
    Context& context;
    DecoderLM& model;
    Adam& optimizer;

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

    DeviceBuffer stats;     // 2 doubles: [loss, sum of squared gradients] of the last step
    DeviceBuffer partials;  // reduce_partials doubles of scratch
    DeviceBuffer sinusoid;  // (max_len, D): the fixed table of positional = "sinusoidal"

    // The model over the flat buffers.
    size_t vocab = 0, width = 0, max_len = 0;
    DeviceParam token_table, position_table;  // (V, D), (max_len, D); positions may be absent
    std::vector<DeviceBlockParams> blocks;
    std::optional<DeviceLayerNorm> final_norm;
    DeviceLinear head;  // (V, D), no bias
    BlockShape shape;   // all but B, T, set per step
    MaskedRows masked_rows = MaskedRows::error;

    Impl(Context& c, DecoderLM& m, Adam& o) : context(c), model(m), optimizer(o) {}

    DeviceParam param(const Tensor& t) {
        if (!t.defined()) return {};
        const size_t offset = offset_of.at(&t.impl());
        return {params.floats() + offset, grads.floats() + offset};
    }
    DeviceLayerNorm layer_norm(const LayerNorm& ln) { return {param(ln.weight), param(ln.bias), float(ln.eps)}; }
    DeviceLinear linear(const Linear& l) { return {param(l.weight), param(l.bias), l.weight.size(1), l.weight.size(0)}; }

    void lay_out();
    void upload();
    void describe_model();
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

void DeviceTraining::Impl::describe_model() {
    const ModelConfig& c = model.config;
    vocab = c.vocab;
    width = c.block.attention.width;
    max_len = c.max_len;
    token_table = param(model.tok_emb.weight);
    if (model.pos_emb.kind == Positional::learned) {
        position_table = param(model.pos_emb.weight);
    } else if (model.pos_emb.kind == Positional::sinusoidal) {
        const Tensor& table = model.pos_emb.weight;  // a constant, not a parameter
        sinusoid = to_device(context, host_floats(table), table.numel() * sizeof(float));
        position_table = {sinusoid.floats(), nullptr};
    }
    for (const auto& block : model.blocks) {
        const MultiHeadAttention& a = block->attn;
        // the stacked projection [W_Q; W_K; W_V] is one matrix only if the three are adjacent
        const auto follows = [&](const Tensor& first, const Tensor& second) {
            return !first.defined() || offset_of.at(&second.impl()) == offset_of.at(&first.impl()) + first.numel();
        };
        if (!follows(a.q_proj.weight, a.k_proj.weight) || !follows(a.k_proj.weight, a.v_proj.weight) ||
            !follows(a.q_proj.bias, a.k_proj.bias) || !follows(a.k_proj.bias, a.v_proj.bias))
            fail("cuda", "device step: q_proj, k_proj and v_proj are not adjacent in the parameter buffer");
        DeviceBlockParams p;
        if (block->res1.ln) p.ln1 = layer_norm(*block->res1.ln);
        p.qkv = linear(a.q_proj);
        p.qkv.out = a.q_proj.weight.size(0) + a.k_proj.weight.size(0) + a.v_proj.weight.size(0);
        p.out = linear(a.out_proj);
        if (block->ffn) {
            p.fc1 = linear(block->ffn->fc1);
            p.fc2 = linear(block->ffn->fc2);
            if (block->res2->ln) p.ln2 = layer_norm(*block->res2->ln);
        }
        blocks.push_back(p);
        shape.H = a.heads;
        shape.H_kv = a.kv_heads;
        shape.d = a.head_width;
        shape.scale = float(a.scale);
        shape.kernel = kernel_for_head_width(a.head_width);
        masked_rows = a.masked_rows;
    }
    shape.D = width;
    shape.norm = c.block.norm;
    shape.activation = c.block.activation == Activation::gelu ? DeviceActivation::gelu : DeviceActivation::relu;
    if (model.ln_f) final_norm = layer_norm(*model.ln_f);
    head = linear(model.head);
}

DeviceTraining::DeviceTraining(Context& context, DecoderLM& model, Adam& optimizer)
    : impl_(std::make_unique<Impl>(context, model, optimizer)) {
    const std::string unsupported = device_step_unsupported(&model, optimizer);
    if (!unsupported.empty()) fail("cuda", "device step: " + unsupported);
    impl_->lay_out();
    impl_->upload();
    impl_->describe_model();
}

DeviceTraining::~DeviceTraining() = default;

DeviceTraining::StepResult DeviceTraining::step(const Batch& batch, double lr, double max_norm) {
    Impl& s = *impl_;
    Context& ctx = s.context;
    const Indices& tokens = batch.inputs;
    if (tokens.shape.size() != 2) fail("decoder", "tokens must be (B, T), got " + shape_str(tokens.shape));
    const size_t B = tokens.shape[0], T = tokens.shape[1], M = B * T, D = s.width, V = s.vocab;
    if (T > s.max_len)
        fail("positional", "positions up to " + std::to_string(T) + " exceed the table of " +
                               std::to_string(s.max_len) + " (raise the maximum sequence length)");
    if (batch.targets.shape != tokens.shape)
        fail("cross_entropy", "targets " + shape_str(batch.targets.shape) + " do not match tokens " + shape_str(tokens.shape));
    for (size_t i = 0; i < M; ++i) {
        if (tokens.values[i] < 0 || static_cast<size_t>(tokens.values[i]) >= V)
            fail("embedding", "id " + std::to_string(tokens.values[i]) + " out of range for " + std::to_string(V) + " rows");
        if (batch.targets.values[i] < 0 || static_cast<size_t>(batch.targets.values[i]) >= V)
            fail("cross_entropy", "target " + std::to_string(batch.targets.values[i]) + " out of range for " +
                                      std::to_string(V) + " classes");
    }
    // The loss mask as weights 1/count (cross_entropy's mean over counted positions).
    const bool masked = !batch.loss_mask.values.empty();
    size_t counted = 0;
    for (size_t i = 0; i < M; ++i) counted += !masked || batch.loss_mask(i) ? 1 : 0;
    std::vector<float> weights(M, 0.0f);
    for (size_t i = 0; i < M; ++i)
        if (!masked || batch.loss_mask(i)) weights[i] = 1.0f / static_cast<float>(counted);

    BlockShape shape = s.shape;
    shape.B = B;
    shape.T = T;
    AttentionMask mask;
    mask.causal = true;
    mask.key_lengths = batch.lengths;
    AttentionOptions options;
    options.scale = shape.scale;
    options.masked_rows = s.masked_rows;
    const AttentionDims dims{B, shape.H, shape.H_kv, T, T, shape.d, shape.d};
    check_attention(dims, mask, options, shape.kernel);  // masked_rows = "error": refused here, as on the CPU

    // ---- the batch in ----
    const DeviceBuffer d_tokens = to_device(ctx, tokens.values.data(), M * sizeof(int32_t));
    const DeviceBuffer d_targets = to_device(ctx, batch.targets.values.data(), M * sizeof(int32_t));
    const DeviceBuffer d_weights = to_device(ctx, weights);
    const DeviceMask d_mask(ctx, mask, dims);
    const int32_t* tok = static_cast<const int32_t*>(d_tokens.data());
    fill_zero(ctx, s.grads.data(), s.total * sizeof(float));
    double* stats = static_cast<double*>(s.stats.data());
    double* partials = static_cast<double*>(s.partials.data());

    // ---- forward ----
    DeviceBuffer x = ctx.allocate_floats(M * D);  // (M, D) token embeddings + positions
    embedding_forward(ctx, B, T, D, tok, s.token_table.value, s.position_table.value, x.floats());
    std::vector<BlockSaved> saved(s.blocks.size());
    for (size_t l = 0; l < s.blocks.size(); ++l)
        x = device::block_forward(ctx, shape, s.blocks[l], d_mask.view(), std::move(x), saved[l]);
    DeviceBuffer final_mean, final_rstd, normed;
    if (s.final_norm) {
        normed = ctx.allocate_floats(M * D);
        final_mean = ctx.allocate_floats(M);
        final_rstd = ctx.allocate_floats(M);
        layer_norm_forward(ctx, M, D, x.floats(), s.final_norm->weight.value, s.final_norm->bias.value,
                           s.final_norm->eps, normed.floats(), final_mean.floats(), final_rstd.floats());
    }
    const float* head_in = s.final_norm ? normed.floats() : x.floats();  // (M, D)
    const DeviceBuffer logits = ctx.allocate_floats(M * V);               // (M, V)
    linear_forward(ctx, M, V, D, head_in, s.head.weight.value, nullptr, logits.floats());
    const DeviceBuffer loss_rows = ctx.allocate_floats(M);
    const DeviceBuffer dlogits = ctx.allocate_floats(M * V);
    cross_entropy_forward_backward(ctx, M, V, logits.floats(), static_cast<const int32_t*>(d_targets.data()),
                                   d_weights.floats(), loss_rows.floats(), dlogits.floats());
    sum_to_double(ctx, M, loss_rows.floats(), false, stats, partials);

    // ---- backward ----
    DeviceBuffer dx = ctx.allocate_floats(M * D);
    linear_backward(ctx, M, V, D, head_in, s.head.weight.value, dlogits.floats(), dx.floats(), false,
                    s.head.weight.grad, nullptr);
    if (s.final_norm) {
        DeviceBuffer dnormed = std::move(dx);
        dx = ctx.allocate_floats(M * D);
        const DeviceBuffer scratch = ctx.allocate_floats(M * D);
        layer_norm_backward(ctx, M, D, x.floats(), s.final_norm->weight.value, final_mean.floats(), final_rstd.floats(),
                            dnormed.floats(), dx.floats(), false, s.final_norm->weight.grad, s.final_norm->bias.grad,
                            scratch.floats());
    }
    for (size_t l = s.blocks.size(); l-- > 0;) {
        dx = device::block_backward(ctx, shape, s.blocks[l], d_mask.view(), saved[l], std::move(dx));
        saved[l] = BlockSaved();  // its buffers go back to the cache for the layers below
    }
    embedding_backward(ctx, B, T, D, tok, dx.floats(), s.token_table.grad, s.position_table.grad);

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
    double out[2] = {0, 0};
    to_host(ctx, s.stats, out, sizeof out);
    StepResult result{out[0], std::sqrt(out[1])};
    if (std::isfinite(result.loss) && std::isfinite(result.grad_norm)) s.steps = t;
    return result;
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
