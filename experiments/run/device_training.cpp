#include "experiments/run/device_training.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cuda/tensor_copy.h"
#include "data/tasks.h"
#include "experiments/run/device_state.h"

namespace attnlab {

using namespace cuda;

namespace {

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

// One step's scalars as Adam::step computes them, at step t (from 1).
AdamScalars adam_scalars(const Adam& o, long long t, double lr, double max_norm) {
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
    return a;
}

// The loss mask as per-position weights 1/count: cross_entropy's mean over the
// counted positions (all when the mask is empty; none counted: all 0).
std::vector<float> loss_weights(const Batch& batch) {
    const size_t M = batch.targets.values.size();
    const bool masked = !batch.loss_mask.values.empty();
    if (masked && batch.loss_mask.shape != batch.targets.shape)
        fail("cross_entropy", "loss mask " + shape_str(batch.loss_mask.shape) + " does not match targets " +
                                  shape_str(batch.targets.shape));
    size_t counted = 0;
    for (size_t i = 0; i < M; ++i) counted += !masked || batch.loss_mask(i) ? 1 : 0;
    std::vector<float> weights(M, 0.0f);
    for (size_t i = 0; i < M; ++i)
        if (!masked || batch.loss_mask(i)) weights[i] = 1.0f / static_cast<float>(counted);
    return weights;
}

}  // namespace

namespace {

constexpr uint64_t embedding_site = 1023;  // blocks are sites 0, 1, ... of their stack

// The block's shape with its dropout: probability and the seed of block l of this stack.
BlockShape with_dropout(BlockShape shape, const DeviceStack& stack, size_t l, const DropoutPlan& dropout) {
    shape.dropout = dropout.residual;
    shape.attention_dropout = dropout.attention;
    shape.seed = mix_seed(dropout.seed, stack.site * 1024 + l);
    return shape;
}

}  // namespace

// tokens (B, T) -> the stack's output (B T, D): drop(embeddings + positions), the blocks, the final norm.
DeviceBuffer DeviceTraining::Impl::stack_forward(const DeviceStack& stack, const int32_t* tokens, const BlockShape& s,
                                                 const BlockMasks& masks, const Memory& memory,
                                                 const DropoutPlan& dropout, StackPass& pass) {
    const size_t M = s.B * s.T, D = s.D;
    DeviceBuffer x = context.allocate_floats(M * D);
    embedding_forward(context, s.B, s.T, D, tokens, stack.token_table.value, stack.position_table.value, x.floats());
    if (dropout.embedding > 0)
        dropout_forward(context, M * D, x.floats(), dropout.embedding, mix_seed(dropout.seed, stack.site * 1024 + embedding_site),
                        x.floats());
    pass.blocks.resize(stack.blocks.size());
    for (size_t l = 0; l < stack.blocks.size(); ++l)
        x = device::block_forward(context, with_dropout(s, stack, l, dropout), stack.blocks[l], masks, memory,
                                  std::move(x), pass.blocks[l]);
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
                                          const BlockMasks& masks, const Memory& memory, const DropoutPlan& dropout,
                                          StackPass& pass, DeviceBuffer dout) {
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
        dx = device::block_backward(context, with_dropout(s, stack, l, dropout), stack.blocks[l], masks, memory,
                                    pass.blocks[l], std::move(dx));
        pass.blocks[l] = BlockSaved();  // its buffers go back to the cache for the layers below
    }
    if (dropout.embedding > 0)
        dropout_backward(context, M * D, dx.floats(), dropout.embedding,
                         mix_seed(dropout.seed, stack.site * 1024 + embedding_site), dx.floats());
    embedding_backward(context, s.B, s.T, D, tokens, dx.floats(), stack.token_table.grad, stack.position_table.grad);
}

namespace {

// A batch on the device: one copy of 4-byte words
//   [tokens (M) | targets (M) | loss weights (M, float) | lengths (B) | source (B S) | source lengths (B)]
// and the shapes and masks both stacks run under.
struct DeviceBatch {
    DeviceBuffer words;
    size_t B = 0, T = 0, S = 0, M = 0;
    size_t at_tokens = 0, at_targets = 0, at_weights = 0, at_source = 0;
    BlockShape dec_shape, enc_shape;
    BlockMasks dec_masks, enc_masks;
    const int32_t* ids(size_t at) const { return static_cast<const int32_t*>(words.data()) + at; }
    const float* weights() const { return reinterpret_cast<const float*>(ids(at_weights)); }
};

// Checks the batch as the CPU model and loss check it (masked_rows = "error"
// refuses here), then copies it in.
DeviceBatch upload_batch(DeviceTraining::Impl& s, const Batch& batch) {
    const size_t V = s.config.vocab;
    const Indices& tokens = batch.inputs;  // decoder inputs (B, T)
    check_tokens("decoder", tokens, batch.lengths, s.config.max_len);
    DeviceBatch d;
    d.B = tokens.shape[0];
    d.T = tokens.shape[1];
    d.M = d.B * d.T;
    check_ids("embedding", "id", tokens, V);
    if (batch.targets.shape != tokens.shape)
        fail("cross_entropy", "targets " + shape_str(batch.targets.shape) + " do not match tokens " + shape_str(tokens.shape));
    check_ids("cross_entropy", "target", batch.targets, V);
    const std::vector<float> weights = loss_weights(batch);
    if (s.encoder) {
        check_tokens("encoder", batch.src, batch.src_lengths, s.config.max_len);
        if (batch.src.shape[0] != d.B)
            fail("encoder", "source batch " + std::to_string(batch.src.shape[0]) + " for target batch " + std::to_string(d.B));
        check_ids("embedding", "id", batch.src, V);
        d.S = batch.src.shape[1];
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
    const auto dims = [&](size_t Tq, size_t Tk) { return AttentionDims{d.B, s.shape.H, s.shape.H_kv, Tq, Tk, s.shape.d, s.shape.d}; };
    check_attention(dims(d.T, d.T), mask_of(true, batch.lengths), options, s.shape.kernel);
    if (s.encoder) {
        check_attention(dims(d.S, d.S), mask_of(false, batch.src_lengths), options, s.shape.kernel);
        check_attention(dims(d.T, d.S), mask_of(false, batch.src_lengths), options, s.shape.kernel);
    }

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
    d.at_tokens = append(tokens.values);
    d.at_targets = append(batch.targets.values);
    d.at_weights = append(weights);
    const size_t at_lengths = append(batch.lengths);
    d.at_source = append(batch.src.values);
    const size_t at_source_lengths = append(batch.src_lengths);
    d.words = to_device(s.context, words.data(), words.size() * sizeof(int32_t));
    const auto key_lengths = [&](size_t at, const std::vector<size_t>& lengths) {
        return lengths.empty() ? nullptr : d.ids(at);  // none: every key of every item counts
    };
    MaskView self_view, src_view;
    self_view.causal = true;
    self_view.key_lengths = key_lengths(at_lengths, batch.lengths);
    src_view.key_lengths = key_lengths(at_source_lengths, batch.src_lengths);
    d.dec_masks = {self_view, src_view};
    d.enc_masks = {src_view, MaskView{}};
    d.dec_shape = d.enc_shape = s.shape;
    d.dec_shape.B = d.enc_shape.B = d.B;
    d.dec_shape.T = d.T;
    d.dec_shape.S = d.enc_shape.T = d.S;
    return d;
}

// The forward to the logits, keeping what the backward needs.
struct ForwardPass {
    StackPass enc, dec;
    DeviceBuffer memory, dmemory;  // (B S, D) the encoder's output and its gradient (zeroed)
    DeviceBuffer out;              // (M, D) the decoder stack's output, the head's input
    DeviceBuffer logits;           // (M, V)
    Memory memory_view() const {   // what the decoder blocks' cross-attention reads and adds to
        return {memory.empty() ? nullptr : memory.floats(), dmemory.empty() ? nullptr : dmemory.floats()};
    }
};

void forward(DeviceTraining::Impl& s, const DeviceBatch& b, const DropoutPlan& dropout, ForwardPass& f) {
    Context& ctx = s.context;
    const size_t D = s.shape.D, V = s.config.vocab;
    if (s.encoder) {
        f.memory = s.stack_forward(*s.encoder, b.ids(b.at_source), b.enc_shape, b.enc_masks, {}, dropout, f.enc);
        f.dmemory = ctx.allocate_floats(b.B * b.S * D);
        fill_zero(ctx, f.dmemory.data(), b.B * b.S * D * sizeof(float));
    }
    f.out = s.stack_forward(s.decoder, b.ids(b.at_tokens), b.dec_shape, b.dec_masks, f.memory_view(), dropout, f.dec);
    f.logits = ctx.allocate_floats(b.M * V);
    linear_forward(ctx, b.M, V, D, f.out.floats(), s.head.weight.value, nullptr, f.logits.floats());
}

}  // namespace

DeviceTraining::StepResult DeviceTraining::step(const Batch& batch, double lr, double max_norm) {
    Impl& s = *impl_;
    Context& ctx = s.context;
    const size_t V = s.config.vocab, D = s.shape.D;
    const DeviceBatch b = upload_batch(s, batch);
    const size_t M = b.M;
    fill_zero(ctx, s.grads.data(), s.total * sizeof(float));
    double* stats = static_cast<double*>(s.stats.data());
    double* partials = static_cast<double*>(s.partials.data());

    // ---- forward and loss ----
    const DropoutPlan dropout = s.training_dropout(true);
    ForwardPass f;
    forward(s, b, dropout, f);
    const DeviceBuffer loss_rows = ctx.allocate_floats(M);
    const DeviceBuffer dlogits = ctx.allocate_floats(M * V);
    cross_entropy_forward_backward(ctx, M, V, f.logits.floats(), b.ids(b.at_targets), b.weights(), loss_rows.floats(),
                                   dlogits.floats());
    sum_to_double(ctx, M, loss_rows.floats(), false, stats, partials);

    // ---- backward ----
    DeviceBuffer dout = ctx.allocate_floats(M * D);
    linear_backward(ctx, M, V, D, f.out.floats(), s.head.weight.value, dlogits.floats(), dout.floats(), false,
                    s.head.weight.grad, nullptr);
    s.stack_backward(s.decoder, b.ids(b.at_tokens), b.dec_shape, b.dec_masks, f.memory_view(), dropout, f.dec,
                     std::move(dout));
    if (s.encoder)
        s.stack_backward(*s.encoder, b.ids(b.at_source), b.enc_shape, b.enc_masks, {}, dropout, f.enc,
                         std::move(f.dmemory));

    // ---- clip and update ----
    sum_to_double(ctx, s.total, s.grads.floats(), true, stats + 1, partials);
    const long long t = s.steps + 1;
    if (s.adam) {
        adam_update(ctx, s.total, s.decaying, s.params.floats(), s.grads.floats(), s.moments[0].floats(),
                    s.moments[1].floats(), adam_scalars(*s.adam, t, lr, max_norm), stats);
    } else {
        const SgdScalars scalars{static_cast<float>(lr), static_cast<float>(s.sgd->momentum),
                                 static_cast<float>(s.sgd->weight_decay), s.sgd->nesterov, s.steps > 0, max_norm};
        sgd_update(ctx, s.total, s.params.floats(), s.grads.floats(), s.moments[0].floats(), scalars, stats);
    }

    // ---- two numbers out ----
    double result[2] = {0, 0};
    to_host(ctx, s.stats, result, sizeof result);
    const StepResult r{result[0], std::sqrt(result[1])};
    if (std::isfinite(r.loss) && std::isfinite(r.grad_norm)) s.steps = t;
    return r;
}

Tensor DeviceTraining::logits(const Batch& batch) const {
    Impl& s = *impl_;
    const DeviceBatch b = upload_batch(s, batch);
    ForwardPass f;
    forward(s, b, DropoutPlan{}, f);  // eval mode: no dropout
    return cuda::download(s.context, f.logits, {b.B, b.T, s.config.vocab});
}

Tensor DeviceTraining::trace(const Batch& batch, AttentionMaps& maps) const {
    Impl& s = *impl_;
    Context& ctx = s.context;
    DeviceBatch b = upload_batch(s, batch);
    b.dec_shape.kernel = b.enc_shape.kernel = AttentionKernel::dense;  // the weights themselves, kept
    ForwardPass f;
    forward(s, b, s.training_dropout(false), f);  // the next step's forward, its dropout masks included
    const size_t B = b.B, H = s.shape.H, d = s.shape.d;
    const DeviceBuffer moments = ctx.allocate(H * 3 * sizeof(double));  // per head: count, sum, sum of squares
    const auto add = [&](AttentionTrace& trace, const device::AttentionSaved& a, size_t Tq, size_t Tk,
                         const MaskView& mask) {
        trace.weights.push_back(cuda::download(ctx, a.weights, {B, H, Tq, Tk}));
        trace.context.push_back(cuda::download(ctx, a.context, {B, H, Tq, d}));
        fill_zero(ctx, moments.data(), H * 3 * sizeof(double));
        score_moments(ctx, {B, H, s.shape.H_kv, Tq, Tk, d, d}, a.q.floats(), a.k.floats(), mask, s.shape.scale,
                      static_cast<double*>(moments.data()));
        std::vector<double> m(H * 3);
        to_host(ctx, moments, m.data(), m.size() * sizeof(double));
        std::vector<double> score_std;
        for (size_t h = 0; h < H; ++h)  // as the CPU op: population std over the eligible pairs
            score_std.push_back(std_from_moments(m[h * 3], m[h * 3 + 1], m[h * 3 + 2]));
        trace.score_std.push_back(score_std);
    };
    if (s.encoder)
        for (const BlockSaved& block : f.enc.blocks) add(maps.enc_self, block.attn, b.S, b.S, b.enc_masks.self);
    for (size_t l = 0; l < f.dec.blocks.size(); ++l) {
        add(maps.self, f.dec.blocks[l].attn, b.T, b.T, b.dec_masks.self);
        if (s.decoder.blocks[l].cross_attn) add(maps.cross, f.dec.blocks[l].cross_attn, b.T, b.S, b.dec_masks.cross);
    }
    return cuda::download(ctx, f.logits, {B, b.T, s.config.vocab});
}

}  // namespace attnlab
