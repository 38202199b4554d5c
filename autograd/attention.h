// The attention core as ONE op with a fused backward:
//
//     A = softmax_over_keys( scale * Q K^T  restricted to eligible keys ),   C = A V
//
// The loops (a dense and a blockwise path) are in attention_kernels.cpp.
// Scores are computed once, straight into the weight buffer that the backward
// keeps; they are never materialised a second time.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/choices.h"
#include "autograd/variant.h"
#include "autograd/tensor.h"

namespace attnlab {

class Rng;

// A query row with no eligible key: "error" (default) names the batch item and
// query position; "zero" gives zero weights, a zero context and zero gradient.
enum class MaskedRows { error, zero };
const Choices<MaskedRows>& masked_rows_choices();        // "error" | "zero"
MaskedRows parse_masked_rows(const std::string& name);
std::string to_string(MaskedRows policy);

// Which keys each query may attend to. Boolean eligibility (true = may attend),
// the SDPA / FlashAttention convention. PyTorch's nn.MultiheadAttention uses the
// opposite polarity (true = blocked); convert explicitly when moving masks.
// The parts combine by AND.
struct AttentionMask {
    // query i of Tq may see key j of Tk iff j <= i + (Tk - Tq): bottom-right
    // aligned, so Tq < Tk (new queries over a KV cache) is correct.
    bool causal = false;
    // per batch item: keys at positions >= key_lengths[b] are ineligible (right padding)
    std::vector<size_t> key_lengths;
    // optional explicit eligibility, shape (Tq, Tk) or (B, Tq, Tk), broadcast over heads
    Mask eligible;

    // Keys j >= key_end(b, i, ...) are ineligible; below it only an explicit mask
    // or a variant's rule can exclude more (checks_each_key). Lets the op skip whole runs.
    size_t key_end(size_t b, size_t i, size_t Tq, size_t Tk) const {
        const size_t end = key_lengths.empty() ? Tk : std::min(Tk, key_lengths[b]);
        if (!causal && !variant.restricts_keys()) return end;
        if (i + Tk < Tq) return 0;  // a query before every key (Tq > Tk)
        return variant_key_end(variant, spans, causal, b, rule_position(b, i, Tq, Tk), end);
    }
    // Keys j < key_begin(b, i, ...) are ineligible by a variant's rule (a window's or a document's start).
    size_t key_begin(size_t b, size_t i, size_t Tq, size_t Tk) const {
        return variant.restricts_keys() && i + Tk >= Tq ? variant_key_begin(variant, spans, b, rule_position(b, i, Tq, Tk)) : 0;
    }
    bool has_explicit() const { return !eligible.values.empty(); }
    // Whether keys below key_end need allows() one by one: an explicit mask or a variant's rule.
    bool checks_each_key() const { return has_explicit() || variant.restricts_keys(); }
    // The variant (autograd/variant.h): eligibility rules, read by allows() and
    // key_end(), and score modifiers, applied to the scaled score before ALiBi's
    // bias and the mask (only attention composed of ops applies them, but ALiBi's,
    // which the fused kernels add too).
    AttentionVariant variant;
    // What the variant's token rules read (prefix-LM, documents): the spans of the
    // tokens at the Tk key positions; empty unless variant.reads_tokens().
    TokenSpans spans;

    // The mask as the device kernels read it, uploaded by the first device
    // attention call that uses it and shared by the later ones
    // (autograd/device/ops_attention.cpp). A copy of the mask starts without one.
    struct DeviceCopy {
        std::shared_ptr<void> data;
        DeviceCopy() = default;
        DeviceCopy(const DeviceCopy&) {}
        DeviceCopy& operator=(const DeviceCopy&) { data.reset(); return *this; }
    };
    mutable DeviceCopy device_copy;

    // The position the causal part and a variant's rules place query i of item b
    // at (needs i + Tk >= Tq): its own, bottom-right aligned, i + Tk - Tq; a padding
    // query (past its item's key length) takes the item's last key's, so that it
    // reads keys as the last real query does and no padding row is left without a key.
    size_t rule_position(size_t b, size_t i, size_t Tq, size_t Tk) const {
        const size_t p = i + Tk - Tq;
        return !key_lengths.empty() && key_lengths[b] > 0 ? std::min(p, key_lengths[b] - 1) : p;
    }
    bool allows(size_t b, size_t i, size_t j, size_t Tq, size_t Tk) const {
        if (!key_lengths.empty() && j >= key_lengths[b]) return false;
        if (!eligible.values.empty()) {
            const size_t offset = eligible.shape.size() == 3 ? b * Tq * Tk : 0;
            if (!eligible.values[offset + i * Tk + j]) return false;
        }
        if (!causal && !variant.restricts_keys()) return true;
        return i + Tk >= Tq && variant_allows(variant, spans, causal, b, rule_position(b, i, Tq, Tk), j);
    }
};


// The sizes of one attention call, on either device: q (B, H, Tq, d), k (B, H_kv,
// Tk, d), v (B, H_kv, Tk, d_v) (or the packed layout of the same sizes).
struct AttentionDims {
    size_t B = 0, H = 0, H_kv = 0, Tq = 0, Tk = 0, d = 0, d_v = 0;
    size_t group() const { return H / H_kv; }  // query heads per K/V head
};

// The mask against a call's sizes: one key length per batch item, none above Tk;
// an explicit mask (Tq, Tk) or (B, Tq, Tk) holding as many values; no score
// modifiers (the fused kernels' scores are plain). Throws "[op] ...";
// the CPU op and the device path both run it, so their messages are the same.
void check_attention_mask(const char* op, const AttentionDims& dims, const AttentionMask& mask);
// A variant's token rules need the spans of every key position: with
// variant.reads_tokens(), spans over Tk positions of B items. Throws "[op] ...";
// check_attention_mask and attention composed of ops (ineligible_keys) run it.
void check_token_spans(const char* op, const AttentionMask& mask, size_t B, size_t Tk);

// The population standard deviation of a statistic from its count, sum and sum of
// squares (0 when nothing was counted): the score std of the op, the metrics and the audit.
inline double std_from_moments(double count, double sum, double squares) {
    if (!(count > 0)) return 0.0;
    const double mean = sum / count;
    const double variance = squares / count - mean * mean;
    return variance > 0 ? std::sqrt(variance) : 0.0;
}

// With policy "error", throws "[attention] batch item b, query position i has no
// eligible key ..." for the first such row in order; does nothing for "zero".
// The attention ops run it; so does attention composed of separate ops.
void check_masked_rows(const AttentionMask& mask, MaskedRows policy, size_t B, size_t Tq, size_t Tk);

// dense: scores and weights as (Tq, Tk) per head, kept for the backward.
// blockwise: online softmax over key blocks; memory linear in Tk; no weights,
//   no dropout. automatic: blockwise unless dropout needs the weights or the
//   keys fit in one block of 128 (then dense, whose memory is then linear too).
enum class AttentionPath { automatic, dense, blockwise };

struct AttentionOptions {
    double scale = 1.0;                 // multiplies Q K^T (1/sqrt(d_h) for "sqrt")
    MaskedRows masked_rows = MaskedRows::error;
    double dropout = 0.0;               // on the weights, when training
    bool training = false;
    Rng* rng = nullptr;                 // required when training with dropout > 0
    bool need_weights = false;
    // With need_weights: also score_std, one more pass over the scores (the
    // seed example reads it; the layers and the metrics do not).
    bool need_score_std = false;
    AttentionPath path = AttentionPath::automatic;
};

struct AttentionResult {
    Tensor context;  // (B, H, Tq, d_v), in the graph
    Tensor weights;  // (B, H, Tq, Tk) before dropout, no graph; undefined unless need_weights
    // With need_weights and need_score_std: per head, the standard deviation of the
    // scaled scores scale * q.k over eligible (query, key) pairs of the whole batch.
    std::vector<double> score_std;
};

// q (B, H, Tq, d), k (B, H_kv, Tk, d), v (B, H_kv, Tk, d_v); H_kv divides H and
// query head h reads K/V head h / (H / H_kv) (grouped K/V, no copies).
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                          const AttentionOptions& options);

// The same op on the layout Linear projections produce, heads side by side in
// the last axis: q (B, Tq, H d), k (B, Tk, H_kv d), v (B, Tk, H_kv d_v) ->
// context (B, Tq, H d_v), heads concatenated as out_proj wants them. No head
// split or merge copies; the weights are (B, H, Tq, Tk) as above.
AttentionResult attention_packed(const Tensor& q, const Tensor& k, const Tensor& v, size_t heads, size_t kv_heads,
                                 const AttentionMask& mask, const AttentionOptions& options);

// scale Q K^T per head, (B, H, Tq, Tk), from the packed layout q (B, Tq, H d),
// k (B, Tk, H_kv d): -inf at ineligible keys, except in a row with no eligible
// key, which keeps its scores. What the hook point "scores" shows. On the CPU
// composed of ops (differentiable: attention written out, for hooks that replace
// the scores or the pattern); on the device one kernel, without a gradient.
Tensor attention_scores(const Tensor& q, const Tensor& k, size_t heads, size_t kv_heads, const AttentionMask& mask,
                        double scale);
// (B, T, n d) -> (B, H, T, d), each of the n heads repeated for H / n query heads (grouped K/V).
Tensor heads_first(const Tensor& t, size_t n, size_t d, size_t H);
// true where key j is ineligible for query i of item b, (B, 1, Tq, Tk), except in
// rows with no eligible key, which `empty_rows` (B, 1, Tq, 1) marks instead.
Mask ineligible_keys(const AttentionMask& mask, size_t B, size_t Tq, size_t Tk, Mask& empty_rows);

}  // namespace attnlab
