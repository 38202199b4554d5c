// attnlab export CHECKPOINT --format safetensors|hf|tl --out DIR
// A checkpoint's model as Hugging Face's GPT-2, TransformerLens or plain
// safetensors load it (experiments/interop/export.h), written into a new folder.
#include <cstdio>

#include "experiments/cli/command_line.h"
#include "experiments/interop/export.h"

namespace attnlab {

namespace {

constexpr const char* kExportHelp = R"(
Formats (each writes DIR/model.safetensors, F32, metadata format "pt",
attnlab_config (the checkpoint's TOML config) and step):
  safetensors  attnlab's own parameter names and layouts (README, "Parameter
               names"), any model, bit for bit the checkpoint's /params; also
               DIR/attnlab_config.toml.
  hf           Hugging Face's GPT-2 (GPT2LMHeadModel.from_pretrained(DIR)) and
               DIR/config.json. Decoder, norm "pre", layernorm, positions
               learned (or sinusoidal or none, written as the table they add),
               kv_heads = heads, heads x head_width = width, scale sqrt or none,
               ffn > 0, gelu or relu; absent biases are written as zeros.
  tl           TransformerLens's HookedTransformer state dict and DIR/config.json
               (HookedTransformerConfig(**json)): also RMSNorm, no norm,
               attention-only blocks, grouped K/V (attn._W_K, _W_V), rotary,
               ALiBi (a power-of-two head count), any head width and scale,
               window (local attention), softcap. W_U is the unembedding
               (transposed; tied embeddings become two copies), b_U zeros.
Neither hf nor tl takes an encoder-decoder, post-norm, prefix_lm, documents,
sinks, rel_buckets or ablate_heads (one line naming the option, exit 2).

DIR must be new (in an existing folder) or empty; the files are written into
DIR.tmp-<pid> and renamed onto it, so a failure leaves nothing. The layouts:
docs/file_formats.md, "Exports".
)";

}  // namespace

int cmd_export(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab export", "A checkpoint's model in Hugging Face GPT-2, TransformerLens or safetensors files.");
    options.positional_help("CHECKPOINT");
    options.add_options()("format", "safetensors, hf or tl", cxxopts::value<std::string>())
                         ("out", "the folder to write (new, or empty)", cxxopts::value<std::string>())
                         ("h,help", "this help")
                         ("checkpoint", "checkpoint file or run folder", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kExportHelp);
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    const Choices<ExportFormat>& formats = export_format_choices();
    if (!parsed.count("format")) throw UsageError("give --format " + formats.listed() + " (see --help)");
    const std::string name = parsed["format"].as<std::string>();
    const std::vector<std::string> names = formats.names();
    if (std::find(names.begin(), names.end(), name) == names.end())
        throw UsageError("--format: must be " + formats.listed() + ", got \"" + name + "\"");
    if (!parsed.count("out")) throw UsageError("give --out DIR, a new or empty folder (see --help)");
    const std::string out = parsed["out"].as<std::string>();
    check_export_folder(out);

    const LoadedCheckpoint in = load_checkpoint(path, Device::cpu);
    const ExportFiles files = export_model(in, formats.parse(name));
    write_export(files, out);
    std::printf("wrote %s: %s export of %s (step %lld), %zu tensors\n", out.c_str(), name.c_str(), path.c_str(),
                static_cast<long long>(in.checkpoint.step), files.tensors.size());
    return 0;
}

}  // namespace attnlab
