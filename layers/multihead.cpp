#include "layers/multihead.h"

#include <algorithm>
#include <cmath>
#include <optional>

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
      rotary_base(config_in.rotary_base),
      rotary_dims(config_in.rotary_dims == 0 ? head_width : config_in.rotary_dims),
      dropout(config_in.dropout),
      masked_rows(config_in.masked_rows),
      dropout_rng(dropout_rng_),
      q_proj(config_in.width, heads * head_width, config_in.bias, init),
      k_proj(resolved(config_in).kv_width, kv_heads * head_width, config_in.bias, init),
      v_proj(resolved(config_in).kv_width, kv_heads * head_width, config_in.bias, init),
      out_proj(heads * head_width, config_in.width, config_in.bias, init) {
    if (rotary_base > 0.0 && (rotary_dims % 2 != 0 || rotary_dims > head_width))
        fail("attention", "rotary on " + std::to_string(rotary_dims) + " features of a head of " + std::to_string(head_width) +
                              " (an even number, at most the head width)");
    register_module("q_proj", q_proj);
    register_module("k_proj", k_proj);
    register_module("v_proj", v_proj);
    register_module("out_proj", out_proj);
    ablated_heads = config_in.ablated_heads;
    std::sort(ablated_heads.begin(), ablated_heads.end());
    for (size_t h : ablated_heads)
        if (h >= heads) fail("attention", "ablated head " + std::to_string(h) + " of a module with " + std::to_string(heads) + " heads");
    const AttentionVariant& variant = config_in.variant;
    if (variant.sinks) sink = register_parameter("sink", Tensor::zeros({heads}));  // no weight on the sink's side at first: e^0
    if (variant.rel_buckets > 0)  // no bias at first
        rel_bias = register_parameter("rel_bias", Tensor::zeros({variant.rel_buckets, heads}));
    declare_hook_points({{"in", "batch query_pos d_model"},
                         {"in_kv", "batch key_pos d_model"},
                         {"q", "batch query_pos head d_head"},
                         {"k", "batch key_pos kv_head d_head"},
                         {"v", "batch key_pos kv_head d_head"},
                         {"scores", "batch head query_pos key_pos", HookValues::finite_or_minus_inf},  // -inf: a key not attended to
                         {"pattern", "batch head query_pos key_pos"},
                         {"z", "batch query_pos head d_head"},
                         {"result", "batch query_pos head d_model"},
                         {"out", "batch query_pos d_model"}});
    if (rotary_base > 0.0)  // what attention reads, after the rotation
        declare_hook_points({{"rot_q", "batch query_pos head d_head"}, {"rot_k", "batch key_pos kv_head d_head"}});
}

Tensor rotary_features(const Tensor& t, size_t heads, size_t head_width, size_t dims, size_t offset, double base) {
    if (dims == head_width) return rotary(t, heads, offset, base);
    const Shape packed = t.shape();  // (B, T, n d_h)
    const size_t B = packed[0], T = packed[1];
    const Tensor per_head = reshape(t, {B, T, heads, head_width});
    const Tensor turned = rotary(reshape(slice(per_head, 3, 0, dims), {B, T, heads * dims}), heads, offset, base);
    const Tensor kept = slice(per_head, 3, dims, head_width);  // (B, T, n, d_h - dims)
    return reshape(concat({reshape(turned, {B, T, heads, dims}), kept}, 3), packed);
}

Tensor MultiHeadAttention::positioned(const char* point, const Tensor& t, size_t n, size_t offset) const {
    return rotary_base > 0.0 ? hook_heads(point, rotary_features(t, n, head_width, rotary_dims, offset, rotary_base), n) : t;
}

Tensor MultiHeadAttention::hook_heads(const char* point, const Tensor& t, size_t n) const {
    if (!hooked(point)) return t;
    const Shape packed = t.shape();  // (B, T, n d_h)
    return reshape(hook(point, reshape(t, {packed[0], packed[1], n, head_width})), packed);
}

MultiHeadAttention::Output MultiHeadAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                                      const AttentionMask& mask, bool need_weights) const {
    AttentionOptions options;
    options.scale = scale;
    options.masked_rows = masked_rows;
    options.dropout = dropout;
    options.training = is_training();
    options.rng = dropout_rng;
    options.need_weights = need_weights || hooked("pattern");
    // q (B, Tq, H d_h), k and v (B, Tk, H_kv d_h): heads side by side, no split copies
    if (mask.variant.sinks != sink.defined())
        fail("attention", std::string("the mask ") + (sink.defined() ? "has no sinks for a module with a sink parameter"
                                                                     : "asks for sinks of a module without a sink parameter"));
    if (mask.variant.rel_buckets != (rel_bias.defined() ? rel_bias.size(0) : 0))
        fail("attention", "the mask's relative bias has " + std::to_string(mask.variant.rel_buckets) +
                              " buckets, the module's parameter " + std::to_string(rel_bias.defined() ? rel_bias.size(0) : 0));
    AttentionResult r;
    if (hook_replaces("scores") || hook_replaces("pattern") || mask.variant.runs_composed(q.device() == Device::cuda)) {
        r = attend_composed(q, k, v, mask, options);
    } else {
        r = attention_packed(q, k, v, heads, kv_heads, mask, options);
        if (hooked("scores")) {
            NoGradGuard no_grad;
            hook("scores", scores_of(q, k, mask));  // recorded only
        }
        if (hooked("pattern")) hook("pattern", r.weights);
    }
    const Tensor z = hook_heads("z", ablated_heads.empty() ? r.context : r.context * kept_heads(r.context), heads);  // Concat(heads) (B, Tq, H d_h)
    return {hook("out", hooked("result") ? out_of_results(z) : out_proj.forward(z)), need_weights ? r.weights : Tensor()};
}

// Each head's output in the stream, result[b, t, h] = W_O[:, h] z[b, t, h] (B, Tq, H, D)
// (TransformerLens's hook_result): formed only when hooked. Recorded only, the
// output is the fused projection's as always; replaced, the output is the sum of
// the results plus the output bias, gradients included.
Tensor MultiHeadAttention::out_of_results(const Tensor& z) const {
    const Shape packed = z.shape();  // (B, Tq, H d_h)
    std::vector<Tensor> results;
    {
        std::optional<NoGradGuard> no_grad;
        if (!hook_replaces("result")) no_grad.emplace();  // a record needs no graph
        for (size_t h = 0; h < heads; ++h) {
            const Tensor w = slice(out_proj.weight, 1, h * head_width, (h + 1) * head_width);  // (D, d_h)
            const Tensor one = linear(slice(z, 2, h * head_width, (h + 1) * head_width), w, Tensor());  // (B, Tq, D)
            results.push_back(reshape(one, {packed[0], packed[1], 1, one.size(2)}));
        }
    }
    const Tensor result = hook("result", concat(results, 2));  // (B, Tq, H, D)
    if (!hook_replaces("result")) return out_proj.forward(z);
    const Tensor out = sum(result, {2});
    return out_proj.bias.defined() ? out + out_proj.bias : out;
}

// (H d_h): 1 for each kept head's columns, 0 for an ablated head's, in t's dtype and on its device
Tensor MultiHeadAttention::kept_heads(const Tensor& t) const {
    std::vector<double> keep(heads * head_width, 1.0);
    for (size_t h : ablated_heads) std::fill(keep.begin() + static_cast<std::ptrdiff_t>(h * head_width),
                                             keep.begin() + static_cast<std::ptrdiff_t>((h + 1) * head_width), 0.0);
    return Tensor::from_values(keep, {heads * head_width}, t.dtype()).to(t.device());
}

// scale Q K^T per head (B, H, Tq, Tk), -inf at ineligible keys
Tensor MultiHeadAttention::scores_of(const Tensor& q, const Tensor& k, const AttentionMask& mask) const {
    check_masked_rows(mask, masked_rows, q.size(0), q.size(1), k.size(1));
    return attention_scores(q, k, heads, kv_heads, mask, scale);
}

Mask MultiHeadAttention::knocked_out_rows(const Tensor& scores) const {
    const size_t B = scores.size(0), H = scores.size(1), Tq = scores.size(2), Tk = scores.size(3);
    const std::vector<double> values = scores.values();  // a host copy, read row by row
    Mask rows({B, H, Tq, 1}, std::vector<uint8_t>(B * H * Tq, 0));
    bool any = false;
    for (size_t row = 0; row < B * H * Tq; ++row) {
        const double* s = values.data() + row * Tk;
        if (std::any_of(s, s + Tk, [](double x) { return x != -INFINITY; })) continue;
        if (masked_rows == MaskedRows::error)
            fail("attention", hook_point_name("scores") + ": batch item " + std::to_string(row / (H * Tq)) + ", head " +
                                  std::to_string(row / Tq % H) + ", query position " + std::to_string(row % Tq) +
                                  " has no key left after the hook (every score -inf; masked_rows = \"error\"; use \"zero\" "
                                  "for zero weights there)");
        rows.values[row] = 1;
        any = true;
    }
    return any ? rows : Mask();
}

// A = softmax(scores), C = dropout(A) V, as separate ops (the fused op's maths)
AttentionResult MultiHeadAttention::attend_composed(const Tensor& q, const Tensor& k, const Tensor& v,
                                                    const AttentionMask& mask, const AttentionOptions& options) const {
    const size_t B = q.size(0), Tq = q.size(1), Tk = k.size(1);
    Tensor scores = hook("scores", with_relative_bias(scores_of(q, k, mask), rel_bias, mask.variant, mask.causal));  // (B, H, Tq, Tk)
    Mask empty_rows;
    ineligible_keys(mask, B, Tq, Tk, empty_rows);
    // a row the hook set to -inf throughout (every key knocked out) has no eligible
    // key, as a row the mask empties: the same policy, and 0 in place of its scores
    // so that its softmax (then zeroed) has no NaN to send back
    const Mask knocked_out = hook_replaces("scores") ? knocked_out_rows(scores) : Mask();
    if (!knocked_out.values.empty()) scores = masked_fill(scores, knocked_out, 0.0);
    Tensor pattern = without_sink(softmax(with_sink(scores, sink), -1), sink);  // (B, H, Tq, Tk)
    if (std::any_of(empty_rows.values.begin(), empty_rows.values.end(), [](uint8_t e) { return e != 0; }))
        pattern = masked_fill(pattern, empty_rows, 0.0);  // policy "zero": no weight, no context
    if (!knocked_out.values.empty()) pattern = masked_fill(pattern, knocked_out, 0.0);
    pattern = hook("pattern", pattern);
    const bool use_dropout = options.training && options.dropout > 0.0;
    if (use_dropout && options.rng == nullptr) fail("attention", "dropout in training needs an Rng");
    const Tensor attended = use_dropout ? attnlab::dropout(pattern, options.dropout, true, *options.rng) : pattern;
    const Tensor z = matmul(attended, heads_first(v, kv_heads, head_width, heads));  // (B, H, Tq, d_h)
    AttentionResult r;
    r.context = reshape(permute(z, {0, 2, 1, 3}), {B, Tq, heads * head_width});
    if (options.need_weights) r.weights = pattern.detach();
    return r;
}

MultiHeadAttention::Output MultiHeadAttention::forward(const Tensor& x_q, const Tensor& x_kv, const AttentionMask& mask,
                                                       bool need_weights) const {
    if (x_q.dim() != 3 || x_kv.dim() != 3 || x_q.size(0) != x_kv.size(0))
        fail("attention", "inputs must be (B, T, D) with one batch size, got " + shape_str(x_q.shape()) + " and " +
                              shape_str(x_kv.shape()));
    const Tensor in = hook("in", x_q);
    const Tensor in_kv = hook("in_kv", x_kv.same(x_q) ? in : x_kv);  // self-attention: the same tensor
    // Q = X W_q^T + b_q, K = X_kv W_k^T + b_k, V = X_kv W_v^T + b_v (self-attention: X projected once)
    std::vector<Tensor> qkv;
    if (in_kv.same(in)) {
        qkv = forward_each({&q_proj, &k_proj, &v_proj}, in);
    } else {
        qkv = {q_proj.forward(in)};
        for (const Tensor& t : forward_each({&k_proj, &v_proj}, in_kv)) qkv.push_back(t);
    }
    const Tensor q = positioned("rot_q", hook_heads("q", qkv[0], heads), heads, 0);
    const Tensor k = positioned("rot_k", hook_heads("k", qkv[1], kv_heads), kv_heads, 0);
    return attend(q, k, hook_heads("v", qkv[2], kv_heads), mask, need_weights);
}

MultiHeadAttention::Output MultiHeadAttention::forward_cached(const Tensor& x_new, KVCache& cache,
                                                              const AttentionMask& mask, bool need_weights) const {
    const Tensor in = hook("in", x_new);
    const Tensor in_kv = hook("in_kv", in);
    const size_t offset = cache.position;  // the new positions start after the ones seen
    const Tensor k_new = positioned("rot_k", hook_heads("k", k_proj.forward(in_kv), kv_heads), kv_heads, offset);  // (B, Tn, H_kv d_h)
    const Tensor v_new = hook_heads("v", v_proj.forward(in_kv), kv_heads);
    cache.k = cache.k.defined() ? concat({cache.k, k_new}, 1) : k_new;
    cache.v = cache.v.defined() ? concat({cache.v, v_new}, 1) : v_new;
    cache.position += x_new.size(1);
    Output out = attend(positioned("rot_q", hook_heads("q", q_proj.forward(in), heads), heads, offset), cache.k, cache.v,
                        mask, need_weights);
    // Every rule and bias reads positions relative to the last key (bottom-right
    // aligned), so the window's W last keys are all the later queries need.
    const size_t window = mask.variant.window, kept = cache.length();
    if (window > 0 && kept > window) {
        cache.k = slice(cache.k, 1, kept - window, kept);
        cache.v = slice(cache.v, 1, kept - window, kept);
    }
    return out;
}

MultiHeadAttention::Output MultiHeadAttention::forward_cross_cached(const Tensor& x_q, const Tensor& memory, KVCache& cache,
                                                                   const AttentionMask& mask, bool need_weights) const {
    const Tensor in = hook("in", x_q);
    if (!cache.k.defined()) {  // the source's keys and values, once
        const Tensor in_kv = hook("in_kv", memory);
        cache.k = hook_heads("k", k_proj.forward(in_kv), kv_heads);  // (B, S, H_kv d_h)
        cache.v = hook_heads("v", v_proj.forward(in_kv), kv_heads);
    }
    return attend(hook_heads("q", q_proj.forward(in), heads), cache.k, cache.v, mask, need_weights);
}

}  // namespace attnlab
