// The seed chapter's self-attention audit (Level 4), for a trained model:
//
//   what it is   width, heads, head width, K/V heads, every projection shape,
//                scale, softmax axis, masks, all-masked-row policy, dropout, dtype
//   what it does score ranges per layer, entropy and masked mass per head, on
//                fresh task data (the `attnlab eval` stream)
//   what it costs sequence lengths, KV-cache policy and bytes, score-matrix
//                elements, peak memory and valid-token throughput of a forward pass
//   live tests   causal perturbation, padding invariance, KV cache against full
//                recomputation, the fused attention op against a dense
//                triple-loop reference, the all-masked-row policy, shape contracts
//
// Each live test is a function of its own, so a test suite can hand it a broken
// mask and watch it FAIL. `attnlab audit` (cmd_audit.cpp) prints the record.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tasks.h"
#include "experiments/run/model_factory.h"
#include "layers/models.h"

namespace attnlab {

struct Config;
class TaskModel;

// The model's attention sites (kind, layer, module): AttentionSite and
// attention_sites in experiments/run/model_factory.h, beside the kinds' masks.

// One forward pass (eval mode, no graph) recording every attention module's hook
// points ("*attn.*": in, in_kv, q, k, v, scores, pattern, z, out).
struct AttentionPass {
    Hooks hooks;
    Tensor logits;
    std::vector<AttentionKind> kinds;
    const Tensor& at(const AttentionSite& site, const std::string& point) const { return hooks.last(site.name + "." + point); }
    const AttentionKind& kind_of(const AttentionSite& site) const;
};
AttentionPass attention_pass(const TaskModel& model, const Batch& batch);

// A live test's verdict with the figure it rests on.
struct LiveTest {
    std::string name;          // "causal perturbation (self, model)"
    bool pass = false;
    std::string figure_name;   // "max |change| of logits at or before the cut"
    double figure = 0.0;
    double tolerance = 0.0;    // pass needs figure <= tolerance ...
    std::string rule;          // ... unless this says otherwise ("> 0")
    std::string detail;        // what else was checked, or why it failed
};

// --- live tests on one attention module (they take the mask, so a broken one can be given) ---

// Perturbs x (B, T, D) at every position after a cut in each item (cut <
// lengths[b] - 1) and compares the module's self-attention outputs at and before
// the cut (tolerance 0: they depend on exactly the same numbers). The
// perturbation must move some later output, or the test proves nothing.
LiveTest causal_perturbation(const MultiHeadAttention& attn, const Tensor& x, const std::vector<size_t>& lengths,
                             const AttentionMask& mask, Rng& rng, const std::string& name);
// Perturbs the key/value input at the positions >= key_lengths[b] (and, for
// self-attention, where x_q is x_kv, the query input there too) and compares
// the outputs at the query positions < query_lengths[b] (tolerance 0).
LiveTest padding_invariance(const MultiHeadAttention& attn, const Tensor& x_q, const Tensor& x_kv,
                            const std::vector<size_t>& query_lengths, const std::vector<size_t>& key_lengths,
                            const AttentionMask& mask, Rng& rng, const std::string& name);
// An encoder's self-attention must NOT be causal: perturbing later positions
// moves earlier outputs (figure: the smallest such change over items).
LiveTest bidirectional(const MultiHeadAttention& attn, const Tensor& x, const std::vector<size_t>& lengths,
                       const AttentionMask& mask, Rng& rng, const std::string& name);

// --- live tests on a whole model (eval mode) ---

// Future decoder tokens replaced by other tokens: logits at and before the cut unchanged.
LiveTest causal_perturbation(const TaskModel& model, const Batch& batch, Rng& rng);
// Padding tokens (decoder and source) replaced by content tokens, and every
// sequence run alone without padding: the logits at valid positions unchanged.
LiveTest padding_invariance(const TaskModel& model, const Batch& batch, Rng& rng);
// Up to `sequences` sequences decoded with the KV cache (token by token, and in
// chunks) against a full forward pass; the cache must hold kv_cache_bytes_per_token
// * length bytes, length at most `window` when the model has a sliding window
// (model.window; 0 = none), plus the cross-attention cache per source token.
LiveTest kv_cache_agreement(const TaskModel& model, const Batch& batch, size_t window = 0, size_t sequences = 4);
// The model's attention op outputs (traced context and weights) against the
// dense reference run on the same q, k, v, for every kind and layer (an ablated
// head's context zero, as model.ablate_heads makes the module's).
LiveTest reference_agreement(const TaskModel& model, const Batch& batch);
// A batch with one empty sequence (length 0; an empty source too) under the
// model's masked_rows policy: "error" must name the batch item and query
// position; "zero" must leave the other items' logits unchanged and finite.
LiveTest masked_row_policy(const TaskModel& model, const Batch& batch);

// --- live tests of the fused attention op itself ---

// The op against dense_reference_attention on random q, k, v with each mask
// kind (none, causal, key padding, both, explicit (Tq,Tk) and (B,Tq,Tk), causal
// with Tq < Tk, grouped K/V, cross shapes, ALiBi), in `dtype`: max abs difference of
// contexts and weights.
LiveTest reference_agreement_random(DType dtype, uint64_t seed = 7);
// Both policies on an all-masked row: "error" throws naming the batch item and
// query position; "zero" gives zero weights, context and gradient, never NaN.
LiveTest masked_row_policy_op();

// The seed's formula as plain loops in double, sharing no kernel code with the op:
// scores = scale q.k (+ ALiBi's bias when the mask has it), ineligible keys
// removed, softmax over keys, context = weights v. Which keys are eligible and
// the bias come from the mask's one definition (AttentionMask::allows,
// alibi_bias), as the model's op reads them. q (B,H,Tq,d), k (B,H_kv,Tk,d),
// v (B,H_kv,Tk,d_v). An all-masked row throws under "error", is zero under "zero".
struct DenseAttention {
    std::vector<double> context;  // (B, H, Tq, d_v)
    std::vector<double> weights;  // (B, H, Tq, Tk)
};
// With `sink` (H values, attention sinks): each head's sink logit joins its rows'
// softmax as a key of value zero. With `rel_bias` ((buckets, H) values, T5's
// relative bias): rel_bias[relative_bucket(j - p), h] joins each eligible score.
DenseAttention dense_reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                         double scale, MaskedRows masked_rows, const std::vector<double>& sink = {},
                                         const std::vector<double>& rel_bias = {});

// --- the record ---

struct ProjectionShape {
    std::string name;  // "blocks.0.attn.q_proj.weight"
    Shape shape;
};

struct MaskRecord {
    std::string kind;     // "self", "enc_self", "dec_self", "cross"
    bool causal = false;  // bottom-right aligned: key j eligible for query i iff j <= i + (Tk - Tq)
    std::string key_padding;  // whose lengths mask the keys: "decoder lengths", "source lengths"
    std::string queries, keys;  // which sequence each axis runs over
    std::string rules;          // the variant's eligibility rules in words (rules_text), "" without any
};

struct ScoreRange {  // scale * q.k over eligible (valid query, key) pairs, all heads of one layer
    std::string kind;
    size_t layer = 0;
    double min = 0, max = 0, mean = 0, std = 0;
    size_t pairs = 0;
};

struct HeadRecord {
    std::string kind;
    size_t layer = 0, head = 0;
    double score_std = 0;                // as in ScoreRange, this head only
    double entropy = 0, entropy_norm = 0;  // nats; / log(eligible keys)
    double masked_mass = 0, masked_mass_max = 0;
};

struct KindCost {  // per attention kind, at the longest sequences
    std::string kind;
    size_t queries = 0, keys = 0;       // Tq, Tk at the longest sequences
    size_t score_elements = 0;          // H * Tq * Tk, one layer, one sequence
    size_t score_elements_batch = 0;    // B * H * Tq * Tk * layers, one training batch
};

struct AuditRecord {
    std::string checkpoint;
    int64_t step = 0;
    std::string model_kind;  // "decoder" | "encoder-decoder"
    std::string task;
    size_t vocab = 0, layers = 0, width = 0, heads = 0, kv_heads = 0, head_width = 0, ffn = 0;
    std::string norm, positional;
    size_t parameters = 0;
    std::vector<ProjectionShape> projections;
    std::string scale_spec;
    double scale = 0;
    std::string softmax_axis;
    std::vector<MaskRecord> masks;
    std::string masked_rows;
    double dropout = 0, attn_dropout = 0;  // residual and embedding dropout; on the attention weights
    std::string dtype, cache_dtype;

    // data the statistics and costs were measured on
    size_t batches = 0, sequences = 0, batch_size = 0;
    uint64_t seed = 0;
    size_t min_length = 0, max_length = 0;  // decoder inputs seen
    double mean_length = 0;
    size_t min_source_length = 0, max_source_length = 0;  // encoder-decoder
    double mean_source_length = 0;
    size_t longest = 0;         // the task's longest decoder input (the cost figures use it)
    size_t longest_source = 0;  // encoder-decoder: the task's longest source
    size_t positional_max_len = 0;

    std::vector<ScoreRange> scores;
    std::vector<HeadRecord> head_stats;

    std::string cache_policy;
    size_t kv_bytes_per_token = 0;        // decoder self-attention, one sequence
    size_t cross_kv_bytes_per_token = 0;  // per source token (encoder-decoder)
    size_t kv_bytes_at_longest = 0;       // one sequence at `longest` (and `longest_source`)
    size_t kv_bytes_measured = 0;         // a real cache after decoding one longest sequence
    std::vector<KindCost> costs;

    double forward_seconds = 0;     // one forward pass over one eval batch (median of repeats)
    double tokens_per_s = 0;        // valid decoder tokens / s, forward only (eval mode, no graph)
    double peak_rss_mb = 0;         // process high-water mark during the timed forward passes
    double rss_before_mb = 0;       // resident memory before them
    bool peak_is_process_peak = false;  // the high-water mark could not be reset
    int threads = 1;

    std::vector<LiveTest> tests;
    bool passed() const;
};

struct AuditOptions {
    size_t batches = 4;       // eval batches of train.batch sequences
    uint64_t seed = 0;        // data seed (the run's, by default)
    bool timing = true;       // measure throughput and peak memory (off in unit tests: no need to wait)
};

// Everything above, measured and tested on fresh data (make_batch_source(config, seed, 2)).
// Refuses (an Error naming it) a model option the reference and live tests do not
// model (audit.cpp, keys_audited): no PASS for a model whose option it ignores.
AuditRecord audit(const TaskModel& model, const Config& config, const AuditOptions& options);

}  // namespace attnlab
