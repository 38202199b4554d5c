// attnlab heads CHECKPOINT [--checkpoints all] [--rows N] [--seed S] [--out F.h5]
// Olsson et al.'s head scores (experiments/run/head_scores.h) of one
// checkpoint, or of every checkpoint of its run, on one fixed repeated-token batch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "data/h5file.h"
#include "experiments/analysis/composition.h"
#include "experiments/run/head_scores.h"
#include "experiments/cli/command_line.h"
#include "experiments/config/memory_estimate.h"
#include "experiments/files/checkpoint.h"
#include "experiments/files/provenance.h"
#include "experiments/files/run_files.h"

namespace attnlab {

namespace {

namespace fs = std::filesystem;

constexpr const char* kHeadsHelp = R"(
Scores every head of a decoder on `--rows` sequences r r (r: n distinct random
tokens, n as long as the model's positions allow), the same batch for every
checkpoint (seeded by --seed):
  previous_token   attention from t to t-1
  duplicate_token  attention from t in the repeat to the same token earlier (t-n)
  induction        attention from t in the repeat to the token after it (t-n+1)
  copying          Olsson et al.'s copying score of the head's OV circuit (from the
                   weights: sum Re(eigenvalue) / sum |eigenvalue| of W_E W_V W_O W_U)
and the model's loss on the repeat (repeat_loss); from the weights, the Q-, K- and
V-composition scores of every pair of heads in different layers (Elhage et al.
2021: |OV_a QK_b| / (|OV_a| |QK_b|) and alike; experiments/analysis/composition.h).

--checkpoints all: every checkpoint of the run (CHECKPOINT's run folder), in
step order: the scores over training (keep them with train.keep_checkpoints = 0).

--out (default: CHECKPOINT with .heads.h5; with --checkpoints all, RUN/heads.h5;
NAME-2.h5, ... when that exists: nothing is replaced):
attrs format = "attnlab-head-scores", format_version, checkpoint, step (the
last), rows, half (n), seed, layers, heads; /step [K], /checkpoints [K] (paths),
/previous_token, /duplicate_token, /induction, /copying [K, layers, heads],
/repeat_loss [K]; /composition/q, /composition/k, /composition/v [K, layers * heads,
layers * heads]: sender (row) to receiver (column), head index layer * heads + head,
NaN unless the sender's layer is earlier.
--circuits: also /circuits/qk and /circuits/ov [layers * heads, vocab, vocab] (float32),
each head's W_E QK W_E^T [query token, key token] and W_E OV W_U^T [attended token,
logit token] at the last checkpoint (attr step), positions, norms and biases left out.
)";

// The checkpoints to score: CHECKPOINT (a file, or a run folder's newest), or
// with --checkpoints all every one of its run, oldest first.
std::vector<std::string> checkpoints_to_score(const std::string& given, bool all, std::string& run) {
    std::error_code ec;
    const bool folder = fs::is_directory(given, ec);
    if (!all) {
        run.clear();
        return {resolve_checkpoint(given)};
    }
    // a run folder, or the run a checkpoint file lies in (RUN/checkpoints/step_*.h5)
    run = folder ? given : fs::path(given).parent_path().parent_path().string();
    if (!folder && !fs::is_regular_file(given, ec)) throw UsageError(given + ": no such checkpoint file or run folder");
    std::vector<std::string> saved = list_checkpoints((fs::path(run.empty() ? "." : run) / "checkpoints").string());
    if (saved.empty()) throw UsageError(given + ": --checkpoints all found no checkpoints/step_*.h5 in its run folder");
    return saved;
}

void print_heads(const HeadScores& s) {
    std::printf("  head     prev-token  duplicate  induction    copying\n");
    for (size_t i = 0; i < s.layers * s.heads; ++i)
        std::printf("  L%zu.H%-4zu %10.3f %10.3f %10.3f %10.3f\n", i / s.heads, i % s.heads, s.previous_token[i], s.duplicate_token[i],
                    s.induction[i], s.copying[i]);
}

// The strongest K-compositions (an induction head reading a previous-token head), at most 5.
void print_composition(const CompositionScores& c) {
    const size_t n = c.layers * c.heads;
    std::vector<std::pair<double, size_t>> pairs;
    for (size_t i = 0; i < n * n; ++i)
        if (!std::isnan(c.k[i])) pairs.emplace_back(c.k[i], i);
    if (pairs.empty()) return;
    std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::printf("  strongest K-composition (sender -> receiver: K, Q, V):\n");
    for (size_t j = 0; j < std::min<size_t>(5, pairs.size()); ++j) {
        const size_t i = pairs[j].second, a = i / n, b = i % n;
        std::printf("    L%zu.H%zu -> L%zu.H%zu: %.3f, %.3f, %.3f\n", a / c.heads, a % c.heads, b / c.heads, b % c.heads, c.k[i], c.q[i], c.v[i]);
    }
}

// "L1.H2 0.93": the head with the largest value of `v`
std::string best_head(const std::vector<double>& v, size_t heads) {
    const size_t i = static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
    char text[48];
    std::snprintf(text, sizeof text, "L%zu.H%zu %.3f", i / heads, i % heads, v[i]);
    return text;
}

}  // namespace

int cmd_heads(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab heads", "Previous-token, duplicate-token, induction and copying scores of every head.");
    add_device_option(options);
    options.positional_help("CHECKPOINT");
    options.add_options()("checkpoints", "\"all\": every checkpoint of the run; \"newest\": CHECKPOINT only",
                          cxxopts::value<std::string>()->default_value("newest"))
                         ("rows", "sequences in the batch", cxxopts::value<std::string>()->default_value(std::to_string(kHeadScoreRows)))
                         ("seed", "the batch's seed", cxxopts::value<std::string>()->default_value("0"))
                         ("out", "HDF5 file (default: CHECKPOINT with .heads.h5; all: RUN/heads.h5)", cxxopts::value<std::string>())
                         ("circuits", "also write every head's token x token QK and OV circuits (of the last checkpoint)")
                         ("h,help", "this help")
                         ("checkpoint", "checkpoint file or run folder", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kHeadsHelp);
        return 0;
    }
    if (!parsed.count("checkpoint") || parsed["checkpoint"].as<std::vector<std::string>>().size() != 1)
        throw UsageError("give exactly one CHECKPOINT (see --help)");
    const std::string which = parsed["checkpoints"].as<std::string>();
    if (which != "all" && which != "newest") throw UsageError("--checkpoints: must be \"all\" or \"newest\", got '" + which + "'");
    const Device device = device_option(parsed);
    const auto rows = number_option<size_t>(parsed, "rows", 1, 1 << 16);
    const auto seed = number_option<uint64_t>(parsed, "seed", 0, std::numeric_limits<int64_t>::max());
    std::string run;
    const std::vector<std::string> paths = checkpoints_to_score(parsed["checkpoint"].as<std::vector<std::string>>()[0], which == "all", run);
    const OutputFile out = parsed.count("out") ? check_output("--out", parsed["out"].as<std::string>(), paths, "attnlab-head-scores")
                           : which == "all"    ? OutputFile{fs::path(run) / "heads.h5", Existing::number, {}}
                                               : default_output(paths[0], "heads");

    const bool circuits = parsed.count("circuits") > 0;
    std::optional<TokenCircuits> tables;  // --circuits: the last checkpoint's
    std::vector<int64_t> steps;
    std::vector<HeadScores> scores;
    std::vector<CompositionScores> compositions;
    std::optional<HeadScoreBatch> input;  // from the first checkpoint's config; every later one must fit it
    std::string shape;                    // the first model's "L layers x H heads"
    for (const std::string& path : paths) {
        const LoadedCheckpoint in = load_checkpoint(path, device);
        if (in.loaded.model->encoder_decoder())
            throw UsageError(path + ": head scores need a decoder model (this is an encoder-decoder)");
        if (circuits && path == paths.front()) check_table_fits("--circuits", token_circuits_size(*in.loaded.model));
        if (!input) input = head_score_batch(in.config, in.loaded.max_len, rows, seed);
        const std::string this_shape = std::to_string(in.loaded.model->layers()) + " layers x " + std::to_string(in.loaded.model->heads()) + " heads";
        if (shape.empty()) shape = this_shape;
        if (this_shape != shape) throw UsageError(path + ": " + this_shape + ", the run's first checkpoint has " + shape);
        if (2 * input->half - 1 > in.loaded.max_len)
            throw UsageError(path + ": covers " + std::to_string(in.loaded.max_len) + " positions, the batch has " + std::to_string(2 * input->half - 1));
        // the scores' forward records every layer's pattern
        check_table_fits("--rows", forward_tables(*in.loaded.model, {.rows = rows, .positions = 2 * input->half - 1,
                                                                     .tables = in.loaded.model->layers()}));
        check_table_fits(path + " (model.layers x model.heads)", composition_size(*in.loaded.model));
        scores.push_back(head_scores(*in.loaded.model, *input));
        compositions.push_back(composition_scores(*in.loaded.model));
        if (circuits && path == paths.back()) tables = token_circuits(*in.loaded.model);
        steps.push_back(in.checkpoint.step);
    }

    const size_t K = scores.size(), L = scores[0].layers, H = scores[0].heads;
    const fs::path written = write_output(out, "[heads]", [&](const std::string& tmp) {
        h5::File f = h5::File::create(tmp, "heads");
        write_output_attrs(f, "attnlab-head-scores", which == "all" ? run : paths[0], steps.back());
        f.write_attr_int("rows", static_cast<int64_t>(rows));
        f.write_attr_int("half", static_cast<int64_t>(input->half));
        f.write_attr_int("seed", static_cast<int64_t>(seed));
        f.write_attr_int("layers", static_cast<int64_t>(L));
        f.write_attr_int("heads", static_cast<int64_t>(H));
        f.write<int64_t>("step", Shape{K}, steps.data());
        f.write_strings("checkpoints", paths);
        const std::vector<std::string>& names = head_score_names();
        for (size_t i = 0; i < names.size(); ++i) {
            std::vector<double> all;
            for (const HeadScores& s : scores) all.insert(all.end(), head_score_values(s, i).begin(), head_score_values(s, i).end());
            f.write<double>(names[i], Shape{K, L, H}, all.data());
        }
        std::vector<double> repeat_loss;
        for (const HeadScores& s : scores) repeat_loss.push_back(s.repeat_loss);
        f.write<double>("repeat_loss", Shape{K}, repeat_loss.data());
        const h5::Group composition = f.create_group("composition");
        for (const char* kind : {"q", "k", "v"}) {
            std::vector<double> all;
            for (const CompositionScores& c : compositions) {
                const std::vector<double>& values = *kind == 'q' ? c.q : *kind == 'k' ? c.k : c.v;
                all.insert(all.end(), values.begin(), values.end());
            }
            composition.write<double>(kind, Shape{K, L * H, L * H}, all.data());
        }
        if (tables) {
            const h5::Group group = f.create_group("circuits");
            group.write_attr_int("step", steps.back());
            const Shape shape{L * H, tables->vocab, tables->vocab};
            group.write<float>("qk", shape, tables->qk.data());
            group.write<float>("ov", shape, tables->ov.data());
        }
        f.close();
    });
    // printed once every checkpoint is scored and the file written: a later checkpoint refused prints nothing
    for (size_t k = 0; k < K; ++k) {
        const HeadScores& s = scores[k];
        if (K == 1) {
            std::printf("heads %s (step %lld): %zu sequences r r, |r| = %zu; repeat loss %.4f\n", paths[k].c_str(),
                        static_cast<long long>(steps[k]), rows, input->half, s.repeat_loss);
            print_heads(s);
            print_composition(compositions[k]);
        } else {
            std::printf("step %8lld  repeat loss %7.4f  induction %s  prev-token %s\n", static_cast<long long>(steps[k]),
                        s.repeat_loss, best_head(s.induction, s.heads).c_str(), best_head(s.previous_token, s.heads).c_str());
        }
    }
    std::printf("wrote %s\n", wrote_text(out, written).c_str());
    return 0;
}

}  // namespace attnlab
