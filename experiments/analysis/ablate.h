// Head ablation (the seed's Level 4 intervention: vary one head's output while
// holding the rest of the model fixed, then measure the change in the output).
//
// For every attention module and head, the head's output (its context, before
// the output projection) is replaced
//   zero: by 0
//   mean: by the head's mean output over the valid query positions of the eval
//         data (mean ablation keeps the output's typical offset, so it measures
//         the information the head routes rather than its bias)
// and the eval loss and accuracy are measured again. Rows are sorted by effect,
// the larger of the two loss increases, largest first.
#pragma once

#include <string>
#include <vector>

#include "data/tasks.h"
#include "experiments/run/evaluate.h"

namespace attnlab {

class TaskModel;
struct Config;
struct OutputFile;  // experiments/files/output_file.h

struct AblationRow {
    std::string kind;  // "self" | "enc_self" | "dec_self" | "cross"
    size_t layer = 0, head = 0;
    Score zero, mean;  // eval with the head zeroed / replaced by its mean output
    double effect = 0; // max(zero.loss, mean.loss) - baseline.loss
};

// A head named by its attention kind, layer and head index.
struct HeadRef {
    std::string kind;
    size_t layer = 0, head = 0;
};
// "[KIND:]L.H" ("1.0", "cross:0.1"; KIND defaults to self, or dec_self for an
// encoder-decoder), checked against the model: Error naming the spec if not a head.
HeadRef parse_head_ref(const std::string& spec, const TaskModel& model);

// Several heads ablated at once (redundant heads can each compensate for the other).
struct GroupRow {
    std::vector<HeadRef> heads;
    std::string name;  // "self 1.0 + self 1.1"
    Score zero, mean;
    double effect = 0;
};

struct Ablation {
    Score baseline;
    std::vector<AblationRow> rows;  // sorted by effect, largest first (ties: kind order, layer, head)
    std::vector<GroupRow> groups;   // as requested, in order
    // per attention kind (in TaskModel::kinds() order), its mean head outputs [layers][heads][d_h]
    std::vector<std::string> kinds;
    std::vector<std::vector<std::vector<std::vector<double>>>> mean_outputs;
};

// Each head's mean output over the valid query positions of `data` (eval mode),
// per kind, layer and head: [kinds][layers][heads][d_h].
std::vector<std::vector<std::vector<std::vector<double>>>> mean_head_outputs(const TaskModel& model,
                                                                            const std::vector<Batch>& data);

// Every (kind, layer, head) zero- and mean-ablated on `data`, then each group of
// heads together. The model's head edits are cleared again afterwards (also when
// an exception leaves).
Ablation ablate(const TaskModel& model, const std::vector<Batch>& data,
                const std::vector<std::vector<HeadRef>>& groups = {});

// The table printed by `attnlab ablate`.
std::string ablation_table(const Ablation& ablation);

// The HDF5 file `attnlab ablate` writes (format "attnlab-ablation", version 1),
// whole to `out` (a temporary, then a rename: output_file.h; returns the name it
// was given):
//
//   /  attrs: format, format_version, checkpoint, step, config (TOML), seed, batches,
//             sequences, counted (positions scored), baseline_loss, baseline_token_acc,
//             baseline_seq_acc, sort = "effect = max(zero_loss, mean_loss) - baseline_loss, descending"
//   /ranked/kind [N] string, layer [N] int64, head [N] int64,
//          zero_loss, zero_token_acc, zero_seq_acc, mean_loss, mean_token_acc,
//          mean_seq_acc, effect [N] float64                  one row per head, sorted
//   /<kind>/zero_loss, zero_token_acc, zero_seq_acc,
//           mean_loss, mean_token_acc, mean_seq_acc [layers, heads] float64
//   /<kind>/mean_output [layers, heads, d_h] float64       the mean-ablation values
//   /together/name [G] string, zero_loss, ..., mean_seq_acc, effect [G] float64
//                                                        (only with groups, in their order)
struct AblationSource {
    std::string checkpoint;
    int64_t step = 0;
    std::string config_toml;
    uint64_t seed = 0;
    size_t batches = 0;
};
std::string write_ablation_h5(const OutputFile& out, const Ablation& ablation, const AblationSource& source);

// The attention maps of one batch, readable by tools/plot_heads.py (and laid out
// as `attnlab inspect` writes them), format "attnlab-maps", version 1:
//
//   /  attrs: format, format_version, checkpoint, step, config (TOML), kind, layers, heads
//   decoder:          /tokens [B,T] int32, /lengths [B] int64
//   encoder-decoder:  /src [B,S] int32, /src_lengths [B] int64, /tgt [B,T] int32, /tgt_lengths [B] int64
//   /targets [B,T] int32, /loss_mask [B,T] uint8
//   /attention/<kind>/layer_<l> [B,H,Tq,Tk] float32   (ineligible keys weigh exactly 0)
std::string write_maps_h5(const OutputFile& out, const TaskModel& model, const Batch& batch, const AblationSource& source);

}  // namespace attnlab
