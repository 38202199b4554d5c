// attnlab lens CHECKPOINT --tokens "3 7 5 1" [--target "..."] [--out F.h5] [--png DIR]
// The logit lens per layer and direct logit attribution per head and layer
// (experiments/analysis/lens.h), to HDF5 and, with --png, heatmaps.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "experiments/analysis/generate.h"
#include "experiments/analysis/lens.h"
#include "experiments/cli/command_line.h"
#include "experiments/cli/tools_path.h"
#include "experiments/config/config.h"
#include "experiments/files/checkpoint.h"
#include "experiments/files/run_files.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

constexpr const char* kLensHelp = R"(
--tokens: one sequence of token ids (a decoder model). --target: the token whose
logit each position is read at (one per position; default: the model's own
prediction there).

--out (default: CHECKPOINT with .lens.h5, or .lens-2.h5, ... when that exists:
nothing is replaced): attrs format = "attnlab-lens",
format_version, checkpoint, step, attribution (1, or 0 for post-norm with a note);
/tokens [1, T]; /targets [1, T]; /streams (names: embed, blocks.<l>.resid_post);
/lens/logits [L+1, 1, T, V], /lens/target_logprob [L+1, 1, T], /lens/top_token [L+1, 1, T];
/dla/head [L, H, 1, T], /dla/layer [L+1, 1, T] (embeddings, then each block),
/dla/norm_bias [1, T], /dla/target_logit [1, T]: the parts sum to the target logit.
--png DIR: the lens (log p(target) per layer and position) and the heads'
attributions at the last position (tools/plot_lens.py, matplotlib).
)";

}  // namespace

int cmd_lens(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab lens", "The logit lens per layer and direct logit attribution per head.");
    add_device_option(options);
    options.add_options()("tokens", "token ids of one sequence", cxxopts::value<std::string>())
                         ("target", "the token to read at each position (default: the prediction)", cxxopts::value<std::string>())
                         ("out", "HDF5 file (default: CHECKPOINT with .lens.h5)", cxxopts::value<std::string>())
                         ("png", "also draw heatmaps into DIR", cxxopts::value<std::string>())
                         ("h,help", "this help")
                         ("checkpoint", "checkpoint file or run folder", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kLensHelp);
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    const Device device = device_option(parsed);
    if (!parsed.count("tokens")) throw UsageError("--tokens is required (token ids, e.g. --tokens \"3 7 5 1\")");
    const OutputFile out = parsed.count("out") ? check_output("--out", parsed["out"].as<std::string>(), {path}, "attnlab-lens")
                                               : default_output(path, "lens");
    std::string png_dir, python, plot_script;
    if (parsed.count("png")) {
        png_dir = png_dir_option(parsed);
        python = python_interpreter("--png", "matplotlib");
        plot_script = find_tool("plot_lens.py", "--png").string();
    }
    const LoadedCheckpoint in = load_checkpoint(path, device);
    const CheckpointData& checkpoint = in.checkpoint;
    const Config& config = in.config;
    const LoadedModel& loaded = in.loaded;
    const TokenText text(in);
    const std::vector<int32_t> tokens = text.tokens(parsed["tokens"].as<std::string>(), "--tokens");
    const std::vector<int32_t> target = parsed.count("target") ? text.tokens(parsed["target"].as<std::string>(), "--target")
                                                               : std::vector<int32_t>();
    if (!target.empty() && target.size() != tokens.size())
        throw UsageError("--target has " + std::to_string(target.size()) + " tokens for " + std::to_string(tokens.size()) + " positions");
    const ModelConfig shape = model_config(config, loaded.max_len);
    const size_t max_len = shape.max_len;
    if (shape.position_table() && tokens.size() > max_len)
        throw UsageError("--tokens: " + std::to_string(tokens.size()) + " tokens exceed the model's " + std::to_string(max_len) + " positions");
    check_table_fits("--tokens", lens_size(*loaded.model, 1, tokens.size()));
    const LensResult r = logit_lens(*loaded.model, Indices({1, tokens.size()}, tokens), target);

    const std::string written = write_lens_file(out, path, checkpoint.step, tokens, r);
    const size_t L = r.layers, H = r.heads, T = r.positions;
    std::printf("lens %s (step %lld): %zu tokens, %zu layers; at the last position (target %s):\n", path.c_str(),
                static_cast<long long>(checkpoint.step), T, L, text.label(r.targets[T - 1]).c_str());
    for (size_t s = 0; s <= L; ++s)
        std::printf("  %-22s top token %4s  log p(target) %8.4f\n", r.streams[s].c_str(),
                    text.label(r.top_token[s * T + T - 1]).c_str(), r.target_logprob[s * T + T - 1]);
    if (r.attribution) {
        std::vector<std::pair<double, std::string>> heads;
        for (size_t l = 0; l < L; ++l)
            for (size_t h = 0; h < H; ++h)
                heads.emplace_back(r.head_logit[(l * H + h) * T + T - 1], "L" + std::to_string(l) + ".H" + std::to_string(h));
        std::stable_sort(heads.begin(), heads.end(), [](const auto& a, const auto& b) { return std::abs(a.first) > std::abs(b.first); });
        std::printf("direct logit attribution at the last position (target logit %.4f):\n", r.target_logit[T - 1]);
        for (size_t i = 0; i < std::min<size_t>(5, heads.size()); ++i)
            std::printf("  head %-8s %+9.4f\n", heads[i].second.c_str(), heads[i].first);
    } else {
        std::printf("no direct logit attribution: %s\n", r.note.c_str());
    }
    std::printf("wrote %s\n", wrote_text(out, written).c_str());
    if (!png_dir.empty()) {
        const int status = run_program({python, plot_script, written, "--out-dir", png_dir});
        if (status != 0) fail("lens", "--png: " + plot_script + " failed (" + written + " is written)");
    }
    return 0;
}

}  // namespace attnlab
