// Builds the model a config describes and runs it on a task batch, so the
// training loop, evaluation and analysis treat both model kinds alike.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/tasks.h"
#include "experiments/config/memory_estimate.h"
#include "experiments/run/attention_metrics.h"
#include "layers/hooks.h"
#include "layers/models.h"

namespace attnlab {

struct Config;

// The attention kinds a model has, the mask each ran under for a batch, and the
// hook-point prefix of each layer's attention module.
struct AttentionKind {
    std::string name;          // "self" | "enc_self" | "dec_self" | "cross"
    AttentionMask mask;
    std::vector<size_t> query_lengths;
    std::vector<std::string> layers;  // "blocks.0.attn", ...: "<layer>.pattern" is a hook point
};

class TaskModel {
public:
    TaskModel(const Config& config, size_t max_len, Rng& init, Rng* dropout_rng);
    // logits (B, T, V) for the batch's decoder inputs
    Tensor forward(const Batch& batch) const;
    // The same with `hooks` attached (layers/hooks.h) for this pass only.
    Tensor forward(const Batch& batch, Hooks& hooks) const;
    // The logits at the positions the batch's loss counts, (N, V) in counted_rows'
    // order: a decoder runs its head on those positions alone (DecoderLM::forward_at).
    Tensor forward_counted(const Batch& batch, Hooks* hooks) const;
    // A decoder's logits from block `first` on, `resid` (B, T, D) entering it
    // (DecoderLM::forward_from), with `hooks` attached when given.
    Tensor forward_from(const Batch& batch, size_t first, const Tensor& resid, Hooks* hooks) const;
    // A decoder's blocks [first, last) alone: the stream leaving them (DecoderLM::forward_blocks).
    Tensor forward_blocks(const Batch& batch, size_t first, size_t last, const Tensor& resid, Hooks* hooks) const;
    std::vector<std::string> kinds() const;
    // Each kind with its mask for this batch and its modules' hook-point prefixes.
    std::vector<AttentionKind> kinds_for(const Batch& batch) const;
    // The residual stream's hook points of the decoder stack (or, with `encoder`,
    // the encoder's): the embeddings, then each block's output.
    std::vector<std::string> hidden_points(bool encoder = false) const;
    Module& module() const;
    // The model itself: exactly one of these is non-null.
    DecoderLM* decoder_lm() const { return decoder_.get(); }
    EncoderDecoder* enc_dec() const { return enc_dec_.get(); }
    bool encoder_decoder() const { return enc_dec_ != nullptr; }
    size_t layers() const;
    size_t heads() const;

private:
    std::unique_ptr<DecoderLM> decoder_;
    std::unique_ptr<EncoderDecoder> enc_dec_;
};

// One attention module of a model, in the order of TaskModel::kinds() then layers:
//   decoder:          self     = blocks.<l>.attn
//   encoder-decoder:  enc_self = encoder.<l>.attn, dec_self = decoder.<l>.attn,
//                     cross    = decoder.<l>.cross_attn
struct AttentionSite {
    std::string kind;
    size_t layer = 0;
    std::string name;  // parameter and hook-point prefix: "blocks.0.attn"
    const MultiHeadAttention* attn = nullptr;  // the module, for the live tests that run it
    // its configuration
    size_t heads = 0, kv_heads = 0, head_width = 0;
    double scale = 0;
    MaskedRows masked_rows = MaskedRows::error;
    std::vector<double> sink;      // the parameter `<name>.sink` (H) with attention sinks, else empty
    std::vector<double> rel_bias;  // the parameter `<name>.rel_bias` (buckets, H) with T5's relative bias, else empty
    std::vector<size_t> ablated_heads;  // heads whose output z is zero (model.ablate_heads), sorted
};
// The model's attention modules with their kinds, layers and hook-point
// prefixes (kinds_for gives each kind's mask for a batch): what the audit and
// ablation iterate over.
std::vector<AttentionSite> attention_sites(const TaskModel& model);

// A forward's input, and what of it the caller keeps, for forward_tables.
struct ForwardInput {
    size_t rows = 0, positions = 0;
    size_t sources = 0;  // an encoder-decoder's source tokens
    size_t tables = 0;   // attention tables (rows, H, T, S) the caller keeps: each recorded scores or pattern
    bool graph = false;  // the forward keeps its graph for a backward
};
// What one forward builds that grows with its input rather than with the model,
// for refusing an input before it runs (memory_estimate.h): the logits (B, T, V)
// float32 with the float64 copy an analysis reads them in, and the attention
// tables (B, H, T, S) float32 (an encoder-decoder's at most max(T, S)^2 per row
// and head) that are made at all. The fused attention streams over key blocks
// and makes none (autograd/attention.h); a table is made when the caller records
// scores or a pattern (`tables`, and the scores and weights of the attention
// computing it beside them), and by a model whose scores carry a modifier only
// the composed ops apply (softcap, sinks, T5's relative bias): one attention's at
// a time, every attention's with their gradients when the graph is kept.
TableSize forward_tables(const TaskModel& model, const ForwardInput& input);
// The attention tables (hook points with a query_pos and a key_pos axis: each
// attention's scores and pattern) that `hooks` records or replaces in this model.
size_t recorded_attention_tables(const TaskModel& model, const Hooks& hooks);

// Whether the model has this hook point ("blocks.0.ffn.out": attention-only blocks have none).
bool has_hook_point(const TaskModel& model, const std::string& point);

// hooks.last("<layer>.<point>") for each layer of `kind`, e.g. every layer's pattern.
std::vector<Tensor> recorded_per_layer(const Hooks& hooks, const AttentionKind& kind, const std::string& point);

ModelConfig model_config(const Config& config, size_t max_len);

// The task's batches for a data stream: 0 trains, 1 is the run's held-out
// evaluation set, 2 is fresh data for `attnlab eval`. With task.train_size,
// stream 0 is the finite training set and every other stream skips its examples.
std::unique_ptr<BatchSource> make_batch_source(const Config& config, uint64_t seed, uint64_t stream);
// A text task's alphabet (read from task.path when the config has none) and its
// size as task.vocab, so that the run's config and every checkpoint describe the
// model without the file. Other tasks: nothing.
void resolve_text_task(Config& config);
// The BPE tokenizer of task.tokenizer (BpeTokenizer::for_model: at most
// task.vocab tokens), or a ConfigError naming the key and the folder:
// "task.tokenizer FOLDER: no such folder". Train calls it before the run's
// folder is made, and each command that reads or shows a checkpoint's tokens
// as text before it writes anything.
BpeTokenizer model_tokenizer(const Config& config);

struct CheckpointData;
struct LoadedModel {
    std::unique_ptr<TaskModel> model;
    size_t max_len = 0;  // of the task it was trained on
};
// The model a checkpoint's config describes, with the checkpoint's parameters
// (strict: a missing, unexpected or mis-shaped parameter is an error naming `source`).
LoadedModel load_model(const Config& config, const CheckpointData& checkpoint, const std::string& source);

}  // namespace attnlab
