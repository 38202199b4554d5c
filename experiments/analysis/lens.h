// The logit lens and direct logit attribution of a decoder LM, on the hook points.
//
// Logit lens (nostalgebraist 2020): the residual stream after the embeddings and
// after each block, run through the model's own final norm (recomputed on that
// stream, not the final stream's statistics) and output head, as if the model
// ended there. Done by replacing the last block's output (hook point
// blocks.<L-1>.resid_post) with the stream of layer l: at l = L it is the
// model's logits, exactly.
//
// Direct logit attribution: the final stream is a sum of components, the
// embeddings, every head's output z_h W_O,h^T, each output projection's bias and
// each feed-forward output. With the final norm's scale frozen at its value on
// the final stream, a component c adds
//     LayerNorm:  ((c - mean(c)) / sqrt(var(x) + eps)) * w . W_U[target]
//     RMSNorm:    (c / sqrt(mean(x^2) + eps)) * w . W_U[target]
//     no norm:    c . W_U[target]
// to the target's logit, and the final norm's bias adds b . W_U[target]: the
// parts sum to the logit. Post-norm blocks end in a norm of their own, so the
// stream is no sum there and the attribution is left out (with a note).
#pragma once

#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "experiments/config/memory_estimate.h"

namespace attnlab {

class TaskModel;
struct OutputFile;  // experiments/files/output_file.h

struct LensResult {
    size_t layers = 0, heads = 0, batch = 0, positions = 0, vocab = 0;
    std::vector<std::string> streams;      // "embed", "blocks.0.resid_post", ...: L + 1 of them
    Tensor lens_logits;                    // (L + 1, B, T, V)
    std::vector<int32_t> targets;          // (B, T): the model's own prediction, or the given target
    std::vector<double> target_logprob;    // (L + 1, B, T): log p(target) at each stream
    std::vector<int32_t> top_token;        // (L + 1, B, T)
    bool attribution = false;              // false for post-norm models (see note)
    std::string note;
    std::vector<double> head_logit;        // (L, H, B, T): each head's direct effect on the target logit
    std::vector<double> layer_logit;       // (L + 1, B, T): the embeddings, then each block (heads, bias, FFN)
    std::vector<double> norm_bias_logit;   // (B, T): the final norm's bias, and the head's (model.head_bias)
    std::vector<double> target_logit;      // (B, T): the model's logit of the target
};

// What logit_lens holds at once for B sequences of T tokens, to refuse them
// before it runs (memory_estimate.h): the lens logits (L + 1, B, T, V), float32
// per stream and again concatenated, and their float64 values; and one forward's
// tables (model_factory.h), whose logits it keeps read.
TableSize lens_size(const TaskModel& model, size_t B, size_t T);

// tokens (B, T); targets (B, T) or empty (the model's argmax at each position).
LensResult logit_lens(const TaskModel& model, const Indices& tokens, const std::vector<int32_t>& targets = {});

// The lens file (format "attnlab-lens", docs/file_formats.md), written whole
// (atomically) to `out`: `checkpoint` and `step` name what it read. Returns the
// name it was given (output_file.h).
std::string write_lens_file(const OutputFile& out, const std::string& checkpoint, int64_t step, const std::vector<int32_t>& tokens,
                     const LensResult& r);

}  // namespace attnlab
