// Activation patching and path patching on the hook points (layers/hooks.h),
// the interventions of the seed chapter's exercise 15: vary one activation or
// one edge between a clean and a corrupted prompt, hold the rest of the model
// fixed, and measure how much of the clean behaviour comes back.
//
//   denoising (the default): run the corrupted prompt with one clean activation
//       patched in; 1 = the clean behaviour restored, 0 = still corrupted.
//   noising: run the clean prompt with one corrupted activation patched in;
//       1 = unaffected, 0 = as corrupted.
//
// The metric is read at answer positions, each with a clean and a corrupted
// answer token (by default the last position and each run's own prediction):
//   logit_diff       mean over positions of logit[clean answer] - logit[corrupted answer]
//   norm_logit_diff  (LD(patched) - LD(corrupted)) / (LD(clean) - LD(corrupted))
//   prob             mean probability of the clean answer
//   loss             mean -log p(clean answer)
// Decoder LMs only (an encoder-decoder is refused).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "experiments/config/memory_estimate.h"

namespace attnlab {

class TaskModel;
struct OutputFile;  // experiments/files/output_file.h
class Hooks;
struct Batch;
namespace h5 {
class File;
}

enum class PatchMetric { norm_logit_diff, logit_diff, prob, loss };
PatchMetric parse_patch_metric(const std::string& name);  // Error naming the choices
std::string to_string(PatchMetric metric);

// Prompt pairs of one length T, one row each.
struct PromptPairs {
    std::vector<std::vector<int32_t>> clean, corrupt;
    // per row: the answer positions and, per position, the clean and corrupted answer
    // token; empty: the last position, each run's argmax there
    std::vector<std::vector<size_t>> positions;
    std::vector<std::vector<int32_t>> clean_answers, corrupt_answers;
    // where the pairs came from, for messages: a pairs file's path ("" = the command line)
    std::string source;
};

// Checks the pairs against the model (lengths, token range, answers) and fills in
// default positions and answers from the clean and corrupted runs. Error naming
// the row and what is wrong; for the logit differences, both runs' answers being
// the same token is an error (prob and loss read the clean answer only).
void resolve_answers(const TaskModel& model, PromptPairs& pairs, PatchMetric metric = PatchMetric::norm_logit_diff);
// Its checks alone (the lengths and token range), before anything runs: what a
// caller checks the pairs with before it estimates their size (patching_size).
void check_pairs(const TaskModel& model, const PromptPairs& pairs);

// A block-relative hook given to --hooks: "z" (= attn.z), "q", "k", "v", "pattern",
// "scores", "attn.out", "ffn.out", "resid_pre", "resid_mid", "resid_post", ...;
// per_head for q, k, v, z, pattern and scores.
struct PatchHook {
    std::string name;   // as given
    std::string point;  // block-relative: "attn.z"
    bool per_head = false;  // the point has a head axis (head, or kv_head for k and v)
    // Axes of the activation, from the model's own description of the point
    // (Module::described_hook_points): its heads, and the positions patched.
    int head_axis = -1, position_axis = 1;
};
// Error listing the choices for a name that is no point of this model's blocks.
PatchHook parse_patch_hook(const TaskModel& model, const std::string& name);

struct PatchGrid {
    std::string hook;                // "z"
    std::vector<std::string> axes;   // "layer", "head", "position"
    Shape shape;
    std::vector<double> values;      // row-major over the axes
};

struct PatchOptions {
    std::vector<PatchHook> hooks;
    PatchMetric metric = PatchMetric::norm_logit_diff;
    bool noising = false;       // corrupted into clean instead of clean into corrupted
    bool per_position = false;  // one cell per position too
};

struct PatchResult {
    double clean = 0, corrupt = 0;  // the metric of the unpatched runs
    std::vector<PatchGrid> grids;   // one per hook
};

// What patching N prompt pairs of T tokens holds at once, to refuse them before
// anything runs (memory_estimate.h): one forward's tables (model_factory.h), the
// clean and the corrupted run's logits read together (resolve_answers), and for
// a hook on an attention's scores or pattern every layer's table recorded on the
// source prompt, with the three float64 copies patching one of them takes.
// path_patching records no attention table: `hooks` empty.
TableSize patching_size(const TaskModel& model, size_t N, size_t T, const std::vector<PatchHook>& hooks = {});

PatchResult activation_patching(const TaskModel& model, const PromptPairs& pairs, const PatchOptions& options);

// The patch file (format "attnlab-patch", docs/file_formats.md), written whole
// (atomically) to `out`: `checkpoint` and `step` name what it read. Returns the
// name it was given (output_file.h).
std::string write_patch_file(const OutputFile& out, const std::string& checkpoint, int64_t step, const PromptPairs& pairs,
                      const PatchOptions& options, const PatchResult& result);

// The pairs as a patch file holds them: /clean, /corrupt [N, T], /positions,
// /clean_answers, /corrupt_answers [N, P] (int64); the circuit file too.
void write_prompt_pairs(const h5::File& file, const PromptPairs& pairs);

// One edge: the sender heads' outputs (clean) reaching the receiver head's query,
// key or value input only, every other component frozen at its value on the
// corrupted prompt (Wang et al. 2022). Senders are "L.H" heads, "mlp L" feed-
// forward outputs, "embed", or "all" (every component upstream of the receiver,
// which makes the result that of patching the receiver's input itself).
struct PathPatch {
    std::vector<std::string> senders;  // as given
    size_t receiver_layer = 0, receiver_head = 0;
    std::string receiver_input;  // "q" | "k" | "v"
};
// The patched metric and the unpatched ones.
struct PathPatchResult {
    double clean = 0, corrupt = 0, patched = 0;
};
PathPatchResult path_patching(const TaskModel& model, const PromptPairs& pairs, const PathPatch& edge, PatchMetric metric);

// Prompts of one length as one batch, every position valid; and the model's logits
// (N, T, V) for them in eval mode, with `hooks` attached when given. Without a
// graph unless `with_graph` (the gradient methods of circuit.h).
Batch prompt_batch(const std::vector<std::vector<int32_t>>& rows);
Tensor run_prompts(const TaskModel& model, const std::vector<std::vector<int32_t>>& rows, Hooks* hooks, bool with_graph = false);
// The same from block `first` on, `resid` (N, T, D) entering it (no graph).
Tensor run_prompts_from(const TaskModel& model, const std::vector<std::vector<int32_t>>& rows, size_t first, const Tensor& resid,
                        Hooks* hooks);
// Blocks [first, last) alone on `resid` entering block first: the stream leaving them (no graph).
Tensor run_prompts_blocks(const TaskModel& model, const std::vector<std::vector<int32_t>>& rows, size_t first, size_t last,
                          const Tensor& resid, Hooks* hooks);

// The metric of logits (B, T, V) against the pairs' answers, and its normalisation.
double patch_metric(const Tensor& logits, const PromptPairs& pairs, PatchMetric metric);
// Its gradient with respect to the logits (B, T, V; the logits' dtype), unnormalised:
// the seed of a backward pass that differentiates the metric.
Tensor patch_metric_gradient(const Tensor& logits, const PromptPairs& pairs, PatchMetric metric);
double normalised(double value, double clean, double corrupt, PatchMetric metric);
// norm_logit_diff is undefined when the clean and corrupted logit differences
// agree to float32 precision (clean into clean): an Error "[what] ..." saying so.
void check_normalisable(double clean, double corrupt, PatchMetric metric, const char* what);
// The metric the unpatched runs are reported in: norm_logit_diff's runs are
// plain logit differences (normalised they are 1 and 0 by definition).
std::string baseline_name(PatchMetric metric);

}  // namespace attnlab
