// An attention's variant, written once here and read by every path: which keys a
// query may read beyond the causal and padding parts (eligibility rules), and how
// its scores are formed beyond scale q.k (score modifiers). Each is one field of
// AttentionVariant (a config key `model.<field>`, config_schema.cpp) with its maths
// below: the rules on one (query, key) pair, which AttentionMask::allows and
// key_end read (so do the CPU kernels, the composed scores, the device's copy of
// the mask, the audit's reference and the metrics); the modifiers on tensors (the
// scores composed of ops, which every device runs and differentiates) and on one
// score (the audit's dense reference). The fused attention kernels take
// eligibility rules (key by key) but plain scores only, and ALiBi's bias (the
// exception); with another score modifier, MultiHeadAttention composes attention
// of ops (compose by default, fuse by exception) and the fused ops refuse it.
//
// No ops.h here: attention.h (and through it the CUDA kernels) includes this
// file, and the ops' names (max, pow, exp) would hide the maths functions there.
// modify_scores is a template whose ops are found, by argument, where it is used.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/host_device.h"
#include "autograd/tensor.h"  // Indices (no ops: see above)

namespace attnlab {

struct AttentionVariant {
    // ---- eligibility rules (self-attention; ANDed with the causal and padding parts)
    // Sliding window of W keys: key j is eligible for the query at position p iff
    // p - W < j, and, without the causal mask (an encoder), j < p + W; with it,
    // i - W < j <= i. 0 = off. A KV cache then keeps only the last W keys.
    size_t window = 0;
    // Rules read from the tokens (decoder self-attention; TokenSpans below):
    // prefix-LM: the prefix of each document, its tokens through its first <SEP>
    // (sep_token), reads itself both ways; a position after it reads the prefix and
    // the positions up to itself. A document without a <SEP> has no prefix (causal).
    bool prefix_lm = false;
    // Packed documents: a <BOS> (bos_token) starts a document; a query reads only
    // the keys of its own document (the positions from its <BOS> to the next one).
    bool documents = false;
    int32_t sep_token = 1, bos_token = 2;  // the tasks' <SEP> and <BOS> (data/tasks.h checks they agree)

    // ---- score modifiers
    // ALiBi (Press et al. 2022; model.positional = "alibi", self-attention): query
    // head h adds alibi_bias(...) below, -m_h times the distance between the query's
    // and the key's positions, to its scaled score of every eligible key, after the
    // other modifiers. The one modifier the fused kernels take (fuse by exception).
    bool alibi = false;
    // Logit soft-capping (Gemma 2): a scaled score s becomes C tanh(s / C), C > 0; 0 = off.
    double softcap = 0.0;
    // Attention sinks (self-attention; as gpt-oss): a learned logit s_h per head, the
    // parameter `sink` (H) of the module, joins every row's softmax as one more key
    // whose value is zero: w_j = e^(x_j) / (e^(s_h) + sum_k e^(x_k)), so the weights
    // over the keys sum to less than 1 (with_sink, without_sink below).
    bool sinks = false;
    // T5's learned relative position bias (self-attention): each head adds
    // b[bucket(j - p), h] to its scaled score, b the module's parameter `rel_bias`
    // (buckets, H); bucket (relative_bucket below) is exact for small distances and
    // logarithmic up to max_distance, signed in an encoder, one-sided under causal. 0 = off.
    size_t rel_buckets = 0;
    size_t rel_max_distance = 128;

    // Whether a rule beyond causal and padding decides eligibility, key by key.
    bool restricts_keys() const { return window > 0 || reads_tokens(); }
    // Whether eligibility depends on the tokens: the mask then carries their TokenSpans.
    bool reads_tokens() const { return prefix_lm || documents; }
    // Whether the scores or their softmax are other than plain (what the fused kernels compute).
    // ALiBi's bias is not counted: the fused kernels add it.
    bool modifies_scores() const { return softcap != 0.0 || sinks || rel_buckets > 0; }
    // Whether MultiHeadAttention runs attention composed of ops, forming the
    // (B, H, Tq, Tk) scores and weights: sinks and T5's bias on either device; the
    // soft-cap on the device, whose kernels do not take it (the CPU's do).
    bool runs_composed(bool on_device) const { return sinks || rel_buckets > 0 || (softcap > 0.0 && on_device); }
    // The variant cross-attention takes: the score modifiers but sinks and the
    // relative bias; the eligibility rules, sinks and relative bias are self-attention's.
    AttentionVariant for_cross_attention() const {
        AttentionVariant cross = *this;
        cross.window = 0;
        cross.alibi = false;
        cross.prefix_lm = false;
        cross.documents = false;
        cross.sinks = false;
        cross.rel_buckets = 0;
        return cross;
    }
    bool operator==(const AttentionVariant&) const = default;
};

// ALiBi's slope of query head h of H, as Press et al. 2022 give them: for H a
// power of two m_h = 2^(-8 (h + 1) / H); otherwise the slopes of the largest
// power of two n0 < H, then every other slope of 2 n0 heads for the rest,
// 2^(-4 (2 t + 1) / n0) for t = h - n0.
ATTNLAB_HOST_DEVICE inline double alibi_slope(size_t h, size_t H) {
    size_t n0 = 1;
    while (n0 * 2 <= H) n0 *= 2;
    const double n = static_cast<double>(n0);
    return exp2(h < n0 ? -8.0 * static_cast<double>(h + 1) / n : -4.0 * static_cast<double>(2 * (h - n0) + 1) / n);
}
// The bias of query i and key j of Tq and Tk (queries at positions i + Tk - Tq,
// bottom-right aligned as the causal mask): -m_h |p_q - p_k|, symmetric, so that
// an encoder's keys after the query are penalised as those before it.
ATTNLAB_HOST_DEVICE inline double alibi_bias(size_t h, size_t H, size_t i, size_t j, size_t Tq, size_t Tk) {
    const double distance = static_cast<double>(i + Tk - Tq) - static_cast<double>(j);
    return -alibi_slope(h, H) * (distance < 0 ? -distance : distance);
}

// The eligibility rules in words ("" without any), for the audit's mask rows:
// what is ANDed with the causal and padding parts (prefix-LM relaxes the causal one).
std::string rules_text(const AttentionVariant& variant, bool causal);

// What the token rules read of a batch of tokens (B, T), T positions along the
// keys: for item b and position t, its document's first position and one past its
// last, and one past the end of its document's prefix (0: no prefix). Without a
// rule a field is empty. token_spans (variant.cpp) computes them.
struct TokenSpans {
    size_t T = 0;
    std::vector<uint32_t> doc_begin, doc_end, prefix_end;  // (B, T) each, or empty
    bool empty() const { return T == 0; }
    size_t doc_begin_at(size_t b, size_t t) const { return doc_begin.empty() ? 0 : doc_begin[b * T + t]; }
    size_t doc_end_at(size_t b, size_t t) const { return doc_end.empty() ? T : doc_end[b * T + t]; }
    size_t prefix_end_at(size_t b, size_t t) const { return prefix_end.empty() ? 0 : prefix_end[b * T + t]; }
    // The first cut c >= t of item b that no query at or before c reads past: t, or
    // the end of the prefix t is in, less one (what a causal perturbation may cut at).
    size_t cut_after_prefix(size_t b, size_t t) const {
        const size_t end = prefix_end_at(b, t);
        return end > t + 1 ? end - 1 : t;
    }
    // Whether a boundary before position t (0 < t < T) of item b splits a prefix:
    // t is in a prefix that began before it (a KV cache must take a prefix whole).
    bool splits_prefix(size_t b, size_t t) const {
        return t > 0 && prefix_end_at(b, t) > t && doc_begin_at(b, t) < t;
    }
    // The spans of the last n positions, positions counted from the first of them
    // (a KV cache that keeps only a window's keys); n <= T.
    TokenSpans tail(size_t n) const;
    // The spans with n more padding positions after each row's T, which join its last document.
    TokenSpans padded(size_t n) const;
};
// tokens (B, T), each row's first lengths[b] real (empty: all T); positions past a
// row's length belong to its last document.
TokenSpans token_spans(const AttentionVariant& variant, const Indices& tokens, const std::vector<size_t>& lengths);

// The rules on one (query, key) pair: whether they let the query at position p of
// item b read key j, given the causal part and the tokens' spans.
inline bool variant_allows(const AttentionVariant& variant, const TokenSpans& spans, bool causal, size_t b, size_t p,
                           size_t j) {
    if (causal && j > p && !(variant.prefix_lm && j < spans.prefix_end_at(b, p))) return false;
    if (variant.window > 0 && (j + variant.window <= p || (!causal && j >= p + variant.window))) return false;
    if (variant.documents && (j < spans.doc_begin_at(b, p) || j >= spans.doc_end_at(b, p))) return false;
    return true;
}
// Keys j >= the result are ineligible for the query at position p (end: the bound
// from the key padding; the causal part is this function's).
inline size_t variant_key_end(const AttentionVariant& variant, const TokenSpans& spans, bool causal, size_t b, size_t p,
                              size_t end) {
    if (causal) end = std::min(end, std::max(p + 1, variant.prefix_lm ? spans.prefix_end_at(b, p) : size_t{0}));
    if (variant.window > 0 && !causal) end = std::min(end, p + variant.window);
    if (variant.documents) end = std::min(end, spans.doc_end_at(b, p));
    return end;
}
// Keys j < the result are ineligible for the query at position p: the first key
// of its window or of its document. Lets the blockwise path skip whole key blocks.
inline size_t variant_key_begin(const AttentionVariant& variant, const TokenSpans& spans, size_t b, size_t p) {
    size_t begin = variant.window > 0 && p + 1 > variant.window ? p + 1 - variant.window : 0;
    if (variant.documents) begin = std::max(begin, spans.doc_begin_at(b, p));
    return begin;
}

// T5's bucket of a key at `relative` = j - p positions from its query (Raffel et
// al. 2020): in an encoder (not causal) half the buckets for keys after the query;
// distances below half of the (remaining) buckets each have their own, the rest
// share buckets spaced logarithmically up to max_distance, beyond which the last holds.
inline size_t relative_bucket(const AttentionVariant& variant, bool causal, long long relative) {
    size_t buckets = variant.rel_buckets, base = 0;
    unsigned long long distance = 0;
    if (causal) {
        distance = relative < 0 ? static_cast<unsigned long long>(-relative) : 0;  // keys after the query: masked
    } else {
        buckets /= 2;
        if (relative > 0) base = buckets;
        distance = static_cast<unsigned long long>(relative < 0 ? -relative : relative);
    }
    const size_t exact = buckets / 2;
    if (distance < exact) return base + distance;
    const double far = static_cast<double>(exact) + std::log(static_cast<double>(distance) / exact) /
                                                     std::log(static_cast<double>(variant.rel_max_distance) / exact) *
                                                     static_cast<double>(buckets - exact);
    return base + std::min(static_cast<size_t>(far), buckets - 1);
}

// scores (B, H, Tq, Tk) + each head's relative bias, from `table` (buckets, H), the
// module's rel_bias (undefined: scores as they are); queries bottom-right aligned.
// The bias is gathered by the embedding op, so the table takes its gradient.
template <class T>
T with_relative_bias(const T& scores, const T& table, const AttentionVariant& variant, bool causal) {
    if (!table.defined()) return scores;
    const auto s = scores.shape();
    const size_t H = s[1], Tq = s[2], Tk = s[3];
    std::vector<int32_t> ids(Tq * Tk);
    for (size_t i = 0; i < Tq; ++i)
        for (size_t j = 0; j < Tk; ++j)
            ids[i * Tk + j] = static_cast<int32_t>(relative_bucket(
                variant, causal, static_cast<long long>(j) - static_cast<long long>(i + Tk - Tq)));
    const T bias = embedding(table, Indices({Tq * Tk}, std::move(ids)));  // (Tq Tk, H)
    return scores + reshape(permute(bias, {1, 0}), {1, H, Tq, Tk});
}

// scores (B, H, Tq, Tk) (a Tensor), already scaled -> modified, before the mask and ALiBi's bias.
template <class Scores>
Scores modify_scores(const Scores& scores, const AttentionVariant& variant) {
    return variant.softcap > 0.0 ? softcap(scores, variant.softcap) : scores;
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
