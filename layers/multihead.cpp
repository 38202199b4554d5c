#include "layers/multihead.h"

#include <cmath>

namespace attnlab {

double resolve_scale(const std::string& spec, size_t head_width) {
    const double d = static_cast<double>(head_width);
    if (spec == "sqrt") return 1.0 / std::sqrt(d);
    if (spec == "none") return 1.0;
    if (spec == "linear") return 1.0 / d;
    size_t used = 0;
    double value = 0.0;
    try {
        value = std::stod(spec, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != spec.size() || !(value > 0.0) || !std::isfinite(value))
        fail("attention", "scale must be \"sqrt\", \"none\", \"linear\" or a positive number, got \"" + spec + "\"");
    return value;
}

size_t KVCache::bytes() const {
    if (!k.defined()) return 0;
    const size_t element = k.dtype() == DType::f32 ? 4 : 8;
    return (k.numel() + v.numel()) * element;
}

namespace {

AttentionConfig resolved(AttentionConfig c) {
    if (c.heads == 0) fail("attention", "heads must be at least 1");
    if (c.kv_heads == 0) c.kv_heads = c.heads;
    if (c.kv_width == 0) c.kv_width = c.width;
    if (c.head_width == 0) {
        if (c.width % c.heads != 0)
            fail("attention", "width " + std::to_string(c.width) + " is not divisible by heads " + std::to_string(c.heads) +
                                  " (set head_width or change one of them)");
        c.head_width = c.width / c.heads;
    }
    if (c.heads % c.kv_heads != 0)
        fail("attention", "kv_heads " + std::to_string(c.kv_heads) + " does not divide heads " + std::to_string(c.heads));
    return c;
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(const AttentionConfig& config_in, Rng& init, Rng* dropout_rng_)
    : heads(resolved(config_in).heads),
      kv_heads(resolved(config_in).kv_heads),
      head_width(resolved(config_in).head_width),
      scale(resolve_scale(config_in.scale, head_width)),
      dropout(config_in.dropout),
      masked_rows(config_in.masked_rows),
      dropout_rng(dropout_rng_),
      q_proj(config_in.width, heads * head_width, config_in.bias, init),
      k_proj(resolved(config_in).kv_width, kv_heads * head_width, config_in.bias, init),
      v_proj(resolved(config_in).kv_width, kv_heads * head_width, config_in.bias, init),
      out_proj(heads * head_width, config_in.width, config_in.bias, init) {
    register_module("q_proj", q_proj);
    register_module("k_proj", k_proj);
    register_module("v_proj", v_proj);
    register_module("out_proj", out_proj);
}

MultiHeadAttention::Output MultiHeadAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                                      const AttentionMask& mask, bool need_weights) const {
    AttentionOptions options;
    options.scale = scale;
    options.masked_rows = masked_rows;
    options.dropout = dropout;
    options.training = is_training();
    options.rng = dropout_rng;
    options.need_weights = need_weights;
    // q (B, Tq, H d_h), k and v (B, Tk, H_kv d_h): heads side by side, no split copies
    AttentionResult r = attend_core(q, k, v, mask, options);
    Tensor merged = head_edits.empty() ? r.context : edit_heads(r.context);  // Concat(heads) (B, Tq, H d_h)
    Tensor per_head;  // (B, H, Tq, d_h), for traces only
    if (need_weights)
        per_head = permute(reshape(merged, {q.size(0), q.size(1), heads, head_width}), {0, 2, 1, 3});
    return {out_proj.forward(merged), r.weights, r.score_std, per_head};
}

// The attention core on the CPU (packed layout) or on the device, whose kernels
// take (B, H, T, d_h): heads are split before and merged after, as copies.
AttentionResult MultiHeadAttention::attend_core(const Tensor& q, const Tensor& k, const Tensor& v,
                                               const AttentionMask& mask, const AttentionOptions& options) const {
    const bool dropout_active = options.training && options.dropout > 0.0;
    if (!device.on_device() || options.need_weights || dropout_active)
        return attention_packed(q, k, v, heads, kv_heads, mask, options);
    const size_t B = q.size(0), Tq = q.size(1), Tk = k.size(1);
    auto heads_first = [&](const Tensor& t, size_t T, size_t n) {  // (B, T, n d_h) -> (B, n, T, d_h)
        return permute(reshape(t, {B, T, n, head_width}), {0, 2, 1, 3});
    };
    const Tensor context = cuda::attention_on_device(device, heads_first(q, Tq, heads), heads_first(k, Tk, kv_heads),
                                                     heads_first(v, Tk, kv_heads), mask, options);  // (B, H, Tq, d_h)
    AttentionResult r;
    r.context = reshape(permute(context, {0, 2, 1, 3}), {B, Tq, heads * head_width});  // (B, Tq, H d_h)
    return r;
}

// context (B, Tq, H d_h) -> context * keep + replacement per head, as
// (B, Tq, H, d_h) * keep (1, 1, H, 1) + replacement (1, 1, H, d_h)
Tensor MultiHeadAttention::edit_heads(const Tensor& context) const {
    if (head_edits.size() != heads)
        fail("attention", std::to_string(head_edits.size()) + " head edits for " + std::to_string(heads) + " heads");
    std::vector<double> keep(heads, 1.0), replacement(heads * head_width, 0.0);
    for (size_t h = 0; h < heads; ++h) {
        const HeadEdit& e = head_edits[h];
        if (e.kind == HeadEdit::Kind::keep) continue;
        keep[h] = 0.0;
        if (e.kind == HeadEdit::Kind::replace) {
            if (e.value.size() != head_width)
                fail("attention", "replacement for head " + std::to_string(h) + " has " + std::to_string(e.value.size()) +
                                      " values, head width is " + std::to_string(head_width));
            std::copy(e.value.begin(), e.value.end(), replacement.begin() + static_cast<std::ptrdiff_t>(h * head_width));
        }
    }
    const Shape split{context.size(0), context.size(1), heads, head_width};
    const Tensor edited = reshape(context, split) * Tensor::from_values(keep, {1, 1, heads, 1}, context.dtype()) +
                          Tensor::from_values(replacement, {1, 1, heads, head_width}, context.dtype());
    return reshape(edited, context.shape());
}

MultiHeadAttention::Output MultiHeadAttention::forward(const Tensor& x_q, const Tensor& x_kv, const AttentionMask& mask,
                                                       bool need_weights) const {
    if (x_q.dim() != 3 || x_kv.dim() != 3 || x_q.size(0) != x_kv.size(0))
        fail("attention", "inputs must be (B, T, D) with one batch size, got " + shape_str(x_q.shape()) + " and " +
                              shape_str(x_kv.shape()));
    return attend(q_proj.forward(x_q), k_proj.forward(x_kv), v_proj.forward(x_kv), mask, need_weights);
}

MultiHeadAttention::Output MultiHeadAttention::forward_cached(const Tensor& x_new, KVCache& cache,
                                                              const AttentionMask& mask, bool need_weights) const {
    Tensor k_new = k_proj.forward(x_new);  // (B, Tn, H_kv d_h)
    Tensor v_new = v_proj.forward(x_new);
    cache.k = cache.k.defined() ? concat({cache.k, k_new}, 1) : k_new;
    cache.v = cache.v.defined() ? concat({cache.v, v_new}, 1) : v_new;
    return attend(q_proj.forward(x_new), cache.k, cache.v, mask, need_weights);
}

MultiHeadAttention::Output MultiHeadAttention::forward_cross_cached(const Tensor& x_q, const Tensor& memory, KVCache& cache,
                                                                   const AttentionMask& mask, bool need_weights) const {
    if (!cache.k.defined()) {
        cache.k = k_proj.forward(memory);  // (B, S, H_kv d_h)
        cache.v = v_proj.forward(memory);
    }
    return attend(q_proj.forward(x_q), cache.k, cache.v, mask, need_weights);
}

}  // namespace attnlab
