// attnlab ablate CHECKPOINT [--out FILE.h5] [--maps FILE.h5] [--together L.H+L.H] [--batches N] [--seed S]:
// zero- and mean-ablate every head of every attention module, one at a time, and
// report the change in eval loss and accuracy, sorted by effect (experiments/analysis/ablate.h
// has the method and both file layouts).

#include <cstdio>
#include <filesystem>

#include "autograd/cpu/blas.h"
#include "experiments/analysis/ablate.h"
#include "experiments/files/checkpoint.h"
#include "experiments/cli/command_line.h"
#include "experiments/config/config.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

constexpr const char* kHelpTail = R"(
Eval data: --batches batches of train.batch sequences from the fresh data stream
`attnlab eval` uses (neither training nor the run's held-out set saw it).

For every attention module (self; or enc_self, dec_self, cross) and head, the
head's output before the output projection is replaced by zero, then by its mean
over the eval data's valid positions, and the eval is run again. The table gives
the change of loss, token and sequence accuracy; rows are sorted by effect, the
larger of the two loss increases.

--out FILE.h5 (default: beside the checkpoint, step_NNNNNNN.ablation.h5, or
  step_NNNNNNN.ablation-2.h5, ... when that exists: nothing is replaced):
  /  attrs: format = "attnlab-ablation", format_version = 1, checkpoint, step, config,
            seed, batches, sequences, counted, baseline_loss, baseline_token_acc, baseline_seq_acc
  /ranked/{kind, layer, head, zero_loss, zero_token_acc, zero_seq_acc,
           mean_loss, mean_token_acc, mean_seq_acc, effect} [N]   sorted as the table
  /<kind>/{zero_loss, ..., mean_seq_acc} [layers, heads];  /<kind>/mean_output [layers, heads, d_h]
  /together/{name, zero_loss, ..., effect} [G]                   with --together
--together 1.0+1.1: those heads ablated at once as well (heads that duplicate
  each other each look harmless alone); KIND defaults to self (dec_self).
--maps FILE.h5: the first eval batch's tokens and per-head attention weights
  (format "attnlab-maps": /tokens [B,T], /lengths [B], /targets, /loss_mask,
  /attention/<kind>/layer_<l> [B,H,Tq,Tk]) for tools/plot_heads.py.
)";

}  // namespace

int cmd_ablate(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab ablate", "Zero- and mean-ablate every attention head of a checkpoint, one at a time.");
    add_checkpoint_options(options, "16");
    options.add_options()("out", "HDF5 table (default: CHECKPOINT with .ablation.h5)", cxxopts::value<std::string>())
                         ("maps", "also write the first eval batch's attention maps here", cxxopts::value<std::string>())
                         ("together", "also ablate these heads at once: [KIND:]L.H joined by '+' (1.0+1.1); "
                                      "commas or repeats give more groups", cxxopts::value<std::vector<std::string>>())
                         ("h,help", "this help");
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kHelpTail);
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    checkpoint_batches(parsed);  // a bad --batches before the output paths are looked at
    const OutputFile out = parsed.count("out") ? check_output("--out", parsed["out"].as<std::string>(), {path}, "attnlab-ablation")
                                               : default_output(path, "ablation");
    std::optional<OutputFile> maps;
    if (parsed.count("maps")) {
        maps = check_output("--maps", parsed["maps"].as<std::string>(), {path}, "attnlab-maps");
        if (std::filesystem::absolute(maps->path).lexically_normal() == std::filesystem::absolute(out.path).lexically_normal())
            throw UsageError("--maps and --out name the same file " + out.path.string());
    }

    const CheckpointInput in = load_checkpoint_input(parsed);  // after the output paths are checked
    const CheckpointData& checkpoint = in.checkpoint;
    const Config& config = in.config;
    const LoadedModel& loaded = in.loaded;
    const int batches = in.batches;
    std::vector<std::vector<HeadRef>> groups;
    if (parsed.count("together"))
        for (const std::string& option : parsed["together"].as<std::vector<std::string>>())
            for (const std::string& spec : split(option, ',')) {
                std::vector<HeadRef> group;
                for (const std::string& head : split(spec, '+')) group.push_back(parse_head_ref(head, *loaded.model));
                groups.push_back(group);
            }
    AblationSource source;
    source.checkpoint = path;
    source.step = checkpoint.step;
    source.config_toml = checkpoint.config_toml;
    source.seed = in.seed;
    source.batches = static_cast<size_t>(batches);
    check_held_batches_fit(in);
    check_batch_forward_fits(in, maps ? attention_sites(*loaded.model).size() : 0);  // --maps records every attention's pattern
    const std::vector<Batch> data = fresh_batches(in);  // the `attnlab eval` stream

    const Ablation ablation = ablate(*loaded.model, data, groups);
    const std::string written = write_ablation_h5(out, ablation, source);
    try {
        if (maps) write_maps_h5(*maps, *loaded.model, data.front(), source);
    } catch (...) {  // both files or neither
        std::error_code ignored;
        std::filesystem::remove(written, ignored);
        throw;
    }
    std::printf("ablate %s (step %lld): %zu heads, %d batches x %lld sequences\n", path.c_str(),
                static_cast<long long>(checkpoint.step), ablation.rows.size(), batches, static_cast<long long>(batch_size(config)));
    std::fputs(ablation_table(ablation).c_str(), stdout);
    std::printf("wrote %s%s%s\n", wrote_text(out, written).c_str(), maps ? " and " : "", maps ? maps->path.c_str() : "");
    return 0;
}

}  // namespace attnlab
