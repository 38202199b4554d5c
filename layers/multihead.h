// MultiHeadAttention (Vaswani et al. 2017):
//   Q = x_q W_Q^T, K = x_kv W_K^T, V = x_kv W_V^T, split into heads (B, H, T, d_h),
//   C_h = softmax(scale Q_h K_h^T + mask) V_h   (the fused attention op),
//   out = Concat(C_1 .. C_H) W_O^T.
// Self-attention passes the same tensor as x_q and x_kv; cross-attention passes
// the decoder states and the encoder output. Grouped K/V: kv_heads divides heads.
#pragma once

#include <string>

#include "autograd/attention.h"
#include "layers/basic.h"

namespace attnlab {

// "sqrt" -> 1/sqrt(d_h), "none" -> 1, "linear" -> 1/d_h, or a positive number.
double resolve_scale(const std::string& spec, size_t head_width);

struct AttentionConfig {
    size_t width = 0;       // D of the queries' input and of the output
    size_t heads = 1;       // H
    size_t kv_heads = 0;    // H_kv; 0 = heads
    size_t head_width = 0;  // d_h; 0 = width / heads (must divide)
    size_t kv_width = 0;    // width of x_kv; 0 = width
    std::string scale = "sqrt";
    bool bias = true;
    double dropout = 0.0;   // on the attention weights
    MaskedRows masked_rows = MaskedRows::error;
    double rotary_base = 0.0;  // > 0: rotary positions on q and k (self-attention; the op rotary)
    size_t rotary_dims = 0;    // the first rotary_dims features of each head turn, the rest pass; 0 = all (even, <= d_h)
    // the variant the module's masks carry: its learned parts are the module's
    // parameters, `sink` (H) with sinks, `rel_bias` (buckets, H) with rel_buckets
    AttentionVariant variant;
    // heads whose output z is zero in every forward (model.ablate_heads): their
    // queries, keys and values then get no gradient through the output
    std::vector<size_t> ablated_heads;
};

// Rotary positions on the first `dims` features of each head (GPT-NeoX's partial
// rotary): t (B, T, heads d_h) -> the same, those features of the heads turned by
// the op rotary (pairs (c, c + dims/2), angle (offset + t) base^(-2c/dims)), the
// other d_h - dims passed unchanged. dims = d_h is the op rotary itself.
Tensor rotary_features(const Tensor& t, size_t heads, size_t head_width, size_t dims, size_t offset, double base);

// Keys and values of earlier positions, (B, T_cached, H_kv d_h) each: the
// projections as they come, heads side by side. With a sliding window of W
// (AttentionVariant::window), only the last W positions are kept.
struct KVCache {
    Tensor k, v;
    size_t position = 0;  // positions seen so far: the next new position (rotary's offset)
    size_t length() const { return k.defined() ? k.size(1) : 0; }
    size_t bytes() const;  // what the cache holds now
};

// Hook points (layers/hooks.h), relative to the module's name ("blocks.0.attn."):
//   in       (B, Tq, D)        the query-side input x_q
//   in_kv    (B, Tk, D_kv)     the key/value-side input (x_q itself for self-attention)
//   q        (B, Tq, H, d_h)   projected queries, per head (before the rotary rotation, if any)
//   k, v     (B, Tk, H_kv, d_h) projected keys and values (with a KV cache: the new positions;
//                              k before the rotation; the cache keeps rotated keys)
//   rot_q    (B, Tq, H, d_h)   rotary positions only: q after the rotation, what attention reads
//   rot_k    (B, Tk, H_kv, d_h) rotary positions only: k after the rotation (cached: the new positions)
//   scores   (B, H, Tq, Tk)    scale q.k, -inf at ineligible keys (0 in a row with none, policy "zero")
//   pattern  (B, H, Tq, Tk)    the attention weights, before dropout
//   z        (B, Tq, H, d_h)   each head's output, before the output projection (0 for an ablated head)
//   out      (B, Tq, D)        the module's output
// Recording scores or pattern forms them beside the fused op (whose result is
// unchanged); replacing either runs attention as separate ops so that the
// replacement flows on, gradients included.
class MultiHeadAttention : public Module {
public:
    MultiHeadAttention(const AttentionConfig& config, Rng& init, Rng* dropout_rng);

    struct Output {
        Tensor out;      // (B, Tq, D)
        Tensor weights;  // (B, H, Tq, Tk) when requested, else undefined
    };
    // x_q (B, Tq, D), x_kv (B, Tk, D_kv)
    Output forward(const Tensor& x_q, const Tensor& x_kv, const AttentionMask& mask, bool need_weights = false) const;
    // Self-attention over a KV cache: projects x_new (B, Tn, D), appends its keys and
    // values to `cache`, and attends from the new queries to every cached key
    // (the causal mask is bottom-right aligned, so this matches a full pass); with a
    // sliding window, the cache then drops the keys no later query can read.
    Output forward_cached(const Tensor& x_new, KVCache& cache, const AttentionMask& mask, bool need_weights = false) const;
    // Cross-attention with the source's keys and values computed once and kept in `cache`.
    Output forward_cross_cached(const Tensor& x_q, const Tensor& memory, KVCache& cache, const AttentionMask& mask,
                                bool need_weights = false) const;

    size_t heads, kv_heads, head_width;
    double scale;
    double rotary_base;  // 0: no rotary positions
    size_t rotary_dims;  // the features of a head that turn (d_h: all)
    double dropout;
    MaskedRows masked_rows;
    Rng* dropout_rng;
    Linear q_proj, k_proj, v_proj, out_proj;
    Tensor sink;      // (H) the sink logits, with config.variant.sinks; else undefined
    Tensor rel_bias;  // (buckets, H) T5's relative position bias, with config.variant.rel_buckets; else undefined
    std::vector<size_t> ablated_heads;  // AttentionConfig::ablated_heads, sorted

private:
    // t (B, T, n d_h) through hook point `point` as (B, T, n, d_h)
    Tensor hook_heads(const char* point, const Tensor& t, size_t n) const;
    // t (B, T, n d_h) at positions offset .. offset + T - 1, rotated when rotary_base > 0
    // and then passed through hook point `point` ("rot_q" or "rot_k")
    Tensor positioned(const char* point, const Tensor& t, size_t n, size_t offset) const;
    // Attention as separate ops, for hooks that replace scores or the pattern.
    AttentionResult attend_composed(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                    const AttentionOptions& options) const;
    Tensor scores_of(const Tensor& q, const Tensor& k, const AttentionMask& mask) const;
    // (B, H, Tq, 1): the rows a scores hook left without a key (every score -inf),
    // refused under masked_rows "error"; no values when there are none.
    Mask knocked_out_rows(const Tensor& scores) const;
    Tensor kept_heads(const Tensor& t) const;  // (H d_h) 1 or 0 per column, for ablated_heads
    Tensor out_of_results(const Tensor& z) const;  // the output projection by way of the hook point "result"
    Output attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, bool need_weights) const;
};

}  // namespace attnlab
