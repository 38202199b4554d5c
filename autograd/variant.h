// An attention's variant, written once here and read by every path: which keys a
// query may read beyond the causal and padding parts (eligibility rules), and how
// its scores are formed beyond scale q.k (score modifiers). Each is one field of
// AttentionVariant (a config key `model.<field>`, config_schema.cpp) with its maths
// below: the rules on one (query, key) pair, which AttentionMask::allows and
// key_end read (so do the CPU kernels, the composed scores, the device's copy of
// the mask, the audit's reference and the metrics); the modifiers on tensors (the
// scores composed of ops, which every device runs and differentiates) and on one
// score (the audit's dense reference). The fused attention kernels take
// eligibility rules (key by key) but plain scores only; with a score modifier,
// MultiHeadAttention composes attention of ops (compose by default, fuse by
// exception) and the fused ops refuse it. ALiBi's bias, added after the
// modifiers, is AttentionMask::alibi.
//
// No ops.h here: attention.h (and through it the CUDA kernels) includes this
// file, and the ops' names (max, pow, exp) would hide the maths functions there.
// modify_scores is a template whose ops are found, by argument, where it is used.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace attnlab {

struct AttentionVariant {
    // ---- eligibility rules (self-attention; ANDed with the causal and padding parts)
    // Sliding window of W keys: key j is eligible for the query at position p iff
    // p - W < j, and, without the causal mask (an encoder), j < p + W; with it,
    // i - W < j <= i. 0 = off. A KV cache then keeps only the last W keys.
    size_t window = 0;

    // ---- score modifiers
    // Logit soft-capping (Gemma 2): a scaled score s becomes C tanh(s / C), C > 0; 0 = off.
    double softcap = 0.0;
    // Attention sinks (self-attention; as gpt-oss): a learned logit s_h per head, the
    // parameter `sink` (H) of the module, joins every row's softmax as one more key
    // whose value is zero: w_j = e^(x_j) / (e^(s_h) + sum_k e^(x_k)), so the weights
    // over the keys sum to less than 1 (with_sink, without_sink below).
    bool sinks = false;

    // Whether a rule beyond causal and padding decides eligibility, key by key.
    bool restricts_keys() const { return window > 0; }
    // Whether the scores or their softmax are other than plain (what the fused kernels compute).
    bool modifies_scores() const { return softcap != 0.0 || sinks; }
    // The variant cross-attention takes: the score modifiers but sinks; the
    // eligibility rules and the sinks are self-attention's.
    AttentionVariant for_cross_attention() const {
        AttentionVariant cross = *this;
        cross.window = 0;
        cross.sinks = false;
        return cross;
    }
    bool operator==(const AttentionVariant&) const = default;
};

// Whether the rules let the query at position p read key j (positions along the
// keys; the query positions of a call are bottom-right aligned, as causal's).
inline bool variant_allows(const AttentionVariant& variant, bool causal, size_t p, size_t j) {
    if (variant.window > 0 && (j + variant.window <= p || (!causal && j >= p + variant.window))) return false;
    return true;
}
// Keys j >= the result are ineligible by the rules for the query at position p (end: the bound so far).
inline size_t variant_key_end(const AttentionVariant& variant, bool causal, size_t p, size_t end) {
    if (variant.window > 0 && !causal) end = std::min(end, p + variant.window);
    return end;
}

// Keys j < the result are ineligible by the rules for the query at position p:
// the first key of its window. Lets the blockwise path skip whole key blocks.
inline size_t variant_key_begin(const AttentionVariant& variant, size_t p) {
    return variant.window > 0 && p + 1 > variant.window ? p + 1 - variant.window : 0;
}

// scores (B, H, Tq, Tk) (a Tensor), already scaled -> modified, before the mask and ALiBi's bias.
template <class Scores>
Scores modify_scores(const Scores& scores, const AttentionVariant& variant) {
    return variant.softcap > 0.0 ? tanh(scores / variant.softcap) * variant.softcap : scores;
}

// Attention sinks: scores (B, H, Tq, Tk) -> (B, H, Tq, Tk + 1), the sink logit of
// each head (sink (H)) as a last column; softmax over the last axis, then
// without_sink drops that column: weights (B, H, Tq, Tk). sink undefined: as they are.
template <class T>
T with_sink(const T& scores, const T& sink) {
    if (!sink.defined()) return scores;
    const auto s = scores.shape();
    const T column = T::zeros({s[0], s[1], s[2], 1}, scores.dtype()).to(scores.device()) + reshape(sink, {1, s[1], 1, 1});
    return concat(std::vector<T>{scores, column}, 3);  // a typed vector: concat is found by argument
}
template <class T>
T without_sink(const T& weights, const T& sink) {
    return sink.defined() ? slice(weights, 3, 0, weights.shape()[3] - 1) : weights;
}

// One scaled score, as modify_scores does it (the dense reference's float64 loop).
inline double modify_score(double score, const AttentionVariant& variant) {
    return variant.softcap > 0.0 ? variant.softcap * std::tanh(score / variant.softcap) : score;
}

}  // namespace attnlab
