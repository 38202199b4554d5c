// attnlab export: a checkpoint's model as other tools load it, in one folder.
//
//   safetensors  attnlab's own parameter names and layouts (the checkpoint's
//                /params), any model: DIR/model.safetensors, DIR/attnlab_config.toml
//   hf           Hugging Face's GPT-2 (GPT2LMHeadModel): DIR/model.safetensors
//                with its names and Conv1D layouts, DIR/config.json
//   tl           TransformerLens's HookedTransformer: DIR/model.safetensors with
//                its state-dict names and (head, d_model, d_head) layouts,
//                DIR/config.json holding HookedTransformerConfig's fields
//
// Every model.safetensors is F32 with metadata {"format": "pt", "attnlab_config":
// the checkpoint's resolved TOML config, "step": "N"}. What maps is exact:
// absent biases are written as zeros, attnlab's sinusoidal or absent positions
// as the table they add (docs/file_formats.md, "Exports", lists each mapping).
// An architecture a format cannot express is refused in one line naming the
// option and why, before anything is written.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/choices.h"
#include "experiments/files/safetensors.h"
#include "experiments/run/load_checkpoint.h"

namespace attnlab {

enum class ExportFormat { safetensors, hf, tl };
const Choices<ExportFormat>& export_format_choices();  // "safetensors" | "hf" | "tl"

// The files of one export: model.safetensors and the text files beside it.
struct ExportFiles {
    std::vector<SafeTensor> tensors;
    std::map<std::string, std::string> metadata;
    std::vector<std::pair<std::string, std::string>> texts;  // (file name, content): config.json, attnlab_config.toml
};

// The checkpoint's model (loaded on the CPU) in `format`. The parameters are read
// through the model (its named parameters, and the sinusoidal table it adds);
// the sizes from its configuration (attention_sites). Throws Error "--format F:
// <option> = <value> does not map onto <tool> (why)" for an architecture the
// format cannot express.
ExportFiles export_model(const LoadedCheckpoint& in, ExportFormat format);

// --out DIR, checked before any work: a new folder in an existing one, or an
// existing empty folder (a file, a folder with anything in it or a missing
// parent is refused, one line).
void check_export_folder(const std::string& dir);

// Writes the files into a temporary folder of this process's own beside `dir`,
// syncs them, then renames that folder onto `dir` (write_output_folder: an empty
// folder is replaced, one another export filled meanwhile refused), so that a
// failure or a signal at any point leaves no `dir` and no temporary folder.
void write_export(const ExportFiles& files, const std::string& dir);

}  // namespace attnlab
