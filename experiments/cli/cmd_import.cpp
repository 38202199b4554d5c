// attnlab import DIR --out CHECKPOINT.h5
// A model other tools saved (Hugging Face GPT-2 or GPT-NeoX, TransformerLens,
// attnlab's own export) as an attnlab checkpoint (experiments/interop/import.h).
#include <cstdio>
#include <filesystem>

#include "experiments/cli/command_line.h"
#include "experiments/files/output_file.h"
#include "experiments/interop/import.h"

namespace attnlab {

namespace {

constexpr const char* kImportHelp = R"(
DIR holds model.safetensors (F32, F16, BF16 or F64; one file, not shards) and
  config.json  Hugging Face GPT-2 ("model_type": "gpt2"), GPT-NeoX / Pythia
               ("model_type": "gpt_neox"), or TransformerLens's
               HookedTransformerConfig fields (n_layers, d_model, ...), or
  attnlab_config.toml  attnlab's own export (attnlab export --format safetensors).
A Hugging Face download (huggingface-cli download gpt2 --include
"*.safetensors" "config.json") is such a folder.

CHECKPOINT.h5 is an attnlab checkpoint (docs/file_formats.md): its config says
task.name = "none" (give tokens: --tokens, --input, --prompt, --clean/--corrupt, or a token file: --data) and the
architecture in attnlab's keys (model.activation = "gelu_tanh", model.norm_eps,
model.parallel, model.rotary_dims, model.head_bias, ...). Every analysis
command takes it. What maps and what is refused: docs/file_formats.md, "Imports".

--out must not exist (nothing is replaced, not even a file another process
creates meanwhile: of two imports to one --out the second is refused); the file
is written under a temporary name of this process's own and renamed, so a
failure or a signal leaves nothing.
)";

}  // namespace

int cmd_import(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab import", "A Hugging Face GPT-2/GPT-NeoX or TransformerLens model as an attnlab checkpoint.");
    options.positional_help("DIR");
    options.add_options()("out", "the checkpoint file to write (new)", cxxopts::value<std::string>())
                         ("h,help", "this help")
                         ("dir", "the folder holding model.safetensors and its config", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"dir"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kImportHelp);
        return 0;
    }
    if (!parsed.count("dir")) throw UsageError("give the folder to import (see --help)");
    const std::vector<std::string> dirs = parsed["dir"].as<std::vector<std::string>>();
    if (dirs.size() != 1) throw UsageError("give one folder to import, got " + std::to_string(dirs.size()));
    if (!parsed.count("out")) throw UsageError("give --out CHECKPOINT.h5, a new file (see --help)");
    const std::string out = parsed["out"].as<std::string>();
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(out, ec))) throw UsageError("--out " + out + " exists; give a new file (nothing is replaced)");
    const fs::path parent = fs::path(out).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec)) throw UsageError("--out " + out + ": folder " + parent.string() + " does not exist");

    const ImportedModel model = import_model(dirs[0]);
    write_checkpoint(OutputFile{out, Existing::refuse, {}}, model.checkpoint);
    std::printf("wrote %s: %s model from %s, %zu parameters (%zu tensors read)\n", out.c_str(), model.format.c_str(), dirs[0].c_str(),
                model.checkpoint.params.size(), model.tensors_read);
    return 0;
}

}  // namespace attnlab
