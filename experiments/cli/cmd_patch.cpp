// attnlab patch CHECKPOINT (--clean "..." --corrupt "..." | --pairs FILE.h5) [--hooks z,pattern,...]
//   [--per-position] [--metric M] [--noising] [--positions "..."] [--answers "C:W ..."] [--out F.h5] [--png DIR]
// attnlab path-patch CHECKPOINT (--clean ... --corrupt ... | --pairs F.h5) --sender L.H[,...] --receiver L.H:q|k|v
// Activation and path patching on the hook points (experiments/analysis/patching.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "data/h5_probe.h"
#include "data/h5file.h"
#include "experiments/analysis/generate.h"
#include "experiments/analysis/patching.h"
#include "experiments/cli/command_line.h"
#include "experiments/cli/patch_options.h"
#include "experiments/cli/tools_path.h"
#include "experiments/config/config.h"
#include "experiments/files/checkpoint.h"
#include "experiments/files/run_files.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {
std::vector<std::vector<int32_t>> read_rows(const h5::File& file, const std::string& name, const std::string& shape, size_t rows_wanted) {
    using h5::Expect;
    if (!file.has(name)) h5::Where{file.where().tag, file.where().file, "/" + name}.fail("missing dataset", false);
    const h5::Dataset d = file.dataset(name);
    const std::vector<int64_t> values = d.read<int64_t>(Expect::array(Expect::Type::integers, {Expect::kAny, Expect::kAny}, shape));
    const Shape s = d.shape();
    if (s[0] == 0 || s[1] == 0 || (rows_wanted > 0 && s[0] != rows_wanted))
        d.where().fail("must be a non-empty " + shape + " array" + (rows_wanted ? " with " + std::to_string(rows_wanted) + " rows" : "") +
                           ", got shape " + shape_str(s), false);
    std::vector<std::vector<int32_t>> out(s[0]);
    for (size_t r = 0; r < s[0]; ++r)
        for (size_t c = 0; c < s[1]; ++c) {
            const int64_t v = values[r * s[1] + c];
            if (v < 0 || v > (int64_t{1} << 30)) d.where().fail("value " + std::to_string(v) + " at [" + std::to_string(r) + ", " + std::to_string(c) + "] is out of range", false);
            out[r].push_back(static_cast<int32_t>(v));
        }
    return out;
}

PromptPairs read_pairs_unprobed(const std::string& path) {
    const h5::File f = h5::File::open(path, "pairs", h5::File::Access::read);
    PromptPairs p;
    p.source = path;
    p.clean = read_rows(f, "clean", "[N, T]", 0);
    p.corrupt = read_rows(f, "corrupt", "[N, T] (as /clean)", p.clean.size());
    if (f.has("positions")) {
        for (const auto& row : read_rows(f, "positions", "[N, P]", p.clean.size())) p.positions.emplace_back(row.begin(), row.end());
        p.clean_answers = read_rows(f, "clean_answers", "[N, P] (as /positions)", p.clean.size());
        p.corrupt_answers = read_rows(f, "corrupt_answers", "[N, P] (as /positions)", p.clean.size());
    }
    return p;
}

// First in a child (data/h5_probe.h): libhdf5 may crash on a crafted file.
PromptPairs read_pairs(const std::string& path) {
    return h5::read_probed(path, "pairs", [&] { return read_pairs_unprobed(path); });
}

}  // namespace

// The prompts and answers from --clean/--corrupt/--positions/--answers or --pairs.
PromptPairs prompts_from(const cxxopts::ParseResult& parsed, const LoadedCheckpoint& checkpoint) {
    const bool inline_prompts = parsed.count("clean") || parsed.count("corrupt");
    if (parsed.count("pairs") && inline_prompts) throw UsageError("give --pairs or --clean and --corrupt, not both");
    if (parsed.count("pairs")) {
        if (parsed.count("positions") || parsed.count("answers")) throw UsageError("--positions and --answers go with --clean, not --pairs");
        return read_pairs(parsed["pairs"].as<std::string>());
    }
    if (!parsed.count("clean") || !parsed.count("corrupt"))
        throw UsageError("give --clean and --corrupt token ids (or --pairs FILE.h5)");
    const TokenText text(checkpoint);
    PromptPairs p;
    p.clean = {text.tokens(parsed["clean"].as<std::string>(), "--clean")};
    p.corrupt = {text.tokens(parsed["corrupt"].as<std::string>(), "--corrupt")};
    p.positions.resize(1);
    p.clean_answers.resize(1);
    p.corrupt_answers.resize(1);
    if (parsed.count("positions"))
        for (int32_t t : parse_token_ids(parsed["positions"].as<std::string>(), size_t{1} << 30, "--positions")) p.positions[0].push_back(static_cast<size_t>(t));
    if (parsed.count("answers")) {
        // each side one token: a character of a text model, a BPE token (task.tokenizer), else one token id
        const auto one_answer = [&](const std::string& side, const std::string& which, const std::string& word) {
            const std::vector<int32_t> tokens = text.tokens(side, "--answers");
            if (tokens.size() != 1)
                throw UsageError("--answers: '" + word + "': the " + which + " answer is " + std::to_string(tokens.size()) +
                                 (text.bpe()           ? " tokens of the model's tokenizer; an answer is one token"
                                  : text.reads_text() ? " characters; an answer is one character"
                                                      : " token ids; an answer is one token id"));
            return tokens.front();
        };
        for (const std::string& word : split(parsed["answers"].as<std::string>(), ' ')) {
            if (word.empty()) continue;
            const std::vector<std::string> pair = split(word, ':');
            if (pair.size() != 2) throw UsageError("--answers: '" + word + "' is not CLEAN:CORRUPT");
            p.clean_answers[0].push_back(one_answer(pair[0], "clean", word));
            p.corrupt_answers[0].push_back(one_answer(pair[1], "corrupt", word));
        }
        if (p.positions[0].empty()) p.positions[0] = {p.clean[0].size() - 1};
    }
    return p;
}

void add_prompt_options(cxxopts::Options& options) {
    add_device_option(options);
    options.add_options()("clean", "clean prompt: token ids", cxxopts::value<std::string>())
                         ("corrupt", "corrupted prompt: token ids, as many", cxxopts::value<std::string>())
                         ("pairs", "HDF5 file of prompt pairs (/clean, /corrupt [N, T])", cxxopts::value<std::string>())
                         ("positions", "answer positions (default: the last)", cxxopts::value<std::string>())
                         ("answers", "CLEAN:CORRUPT answer tokens per position (default: each run's prediction)", cxxopts::value<std::string>())
                         ("metric", "norm_logit_diff | logit_diff | prob | loss", cxxopts::value<std::string>()->default_value("norm_logit_diff"))
                         ("h,help", "this help")
                         ("checkpoint", "checkpoint file or run folder", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
}

LoadedCheckpoint load_checkpoint_argument(const cxxopts::ParseResult& parsed) {
    const std::string path = checkpoint_argument(parsed);
    return load_checkpoint(path, device_option(parsed));
}

namespace {


constexpr const char* kPatchHelp = R"(
Prompts: --clean and --corrupt hold token ids of one length (a decoder model);
--pairs FILE.h5 holds many: /clean and /corrupt [N, T] integers, optionally
/positions [N, P] (answer positions) with /clean_answers and /corrupt_answers [N, P].
Answers: by default the last position, and there the clean run's and the
corrupted run's own predictions; --positions "t ..." and --answers "C:W ..."
(one clean:corrupted token pair per position) set them.

Metric (--metric): norm_logit_diff (default) = (LD - LD_corrupt) / (LD_clean - LD_corrupt)
with LD = logit[clean answer] - logit[corrupted answer]: 0 = corrupted, 1 = clean;
logit_diff (LD itself), prob (of the clean answer), loss (-log of it).
Denoising (default): the corrupted prompt with one clean activation patched in.
--noising: the clean prompt with one corrupted activation patched in.

--hooks (default z): a block's points, per head for those with a head axis (q, k,
v, z, pattern, scores, and rot_q, rot_k with rotary positions; k and v have the
K/V heads), per layer for the others (resid_pre, resid_mid, resid_post, attn.out,
ffn.out, ffn.hidden, ln1.out, ln2.out); --per-position: per position too.

--out (default: CHECKPOINT with .patch.PAIRS.HOOKS.METRIC[.noising][.per-position].h5,
PAIRS the --pairs file's stem (none for --clean/--corrupt), HOOKS joined by '+':
"step_0003000.patch.key.z+k.prob.per-position.h5"; NAME-2.h5, ... when that
exists: nothing is replaced): attrs format = "attnlab-patch",
format_version, checkpoint, step, metric, direction, clean_metric, corrupt_metric;
/clean, /corrupt [N, T]; /positions, /clean_answers, /corrupt_answers [N, P];
/grid/<hook>/values (float64; the group's attr axes = "layer,head[,position]" or
"layer[,position]").
--png DIR: one heatmap per hook (tools/plot_patch.py, matplotlib).
)";

constexpr const char* kPathPatchHelp = R"(
Prompts, answers and --metric as `attnlab patch`. The edge from the senders to one
input of the receiver head: the corrupted prompt is run with the senders'
outputs clean and every other component upstream of the receiver (embeddings,
heads, feed-forward outputs) frozen at its corrupted value; the receiver head's
q, k or v from that run is then patched alone into the corrupted prompt, and
the metric read. Senders: L.H (a head), mlp.L (a feed-forward output), embed,
or all (every upstream component: the same as patching the receiver's input).
)";

// What tells two default patch files of one checkpoint apart: the pairs file's
// stem (--pairs key.h5: "key"), the hooks, the metric, the direction and
// --per-position ("key", "z+k", "prob", "per-position").
std::vector<std::string> default_name_parts(const cxxopts::ParseResult& parsed, const PatchOptions& o) {
    std::vector<std::string> parts;
    if (parsed.count("pairs")) parts.push_back(std::filesystem::path(parsed["pairs"].as<std::string>()).stem().string());
    std::string hooks;
    for (const std::string& hook : list_option(parsed, "hooks")) hooks += (hooks.empty() ? "" : "+") + hook;
    parts.push_back(hooks);
    parts.push_back(to_string(o.metric));
    if (o.noising) parts.push_back("noising");
    if (o.per_position) parts.push_back("per-position");
    return parts;
}

// The cells of every grid, best first ("z 1.0 pos 3: 0.93").
void print_top(const PatchResult& r, PatchMetric metric, size_t count) {
    struct Cell {
        std::string name;
        double value;
    };
    std::vector<Cell> cells;
    for (const PatchGrid& g : r.grids)
        for (size_t i = 0; i < g.values.size(); ++i) {
            std::string name = g.hook + " ";
            size_t rest = i;
            std::vector<size_t> index(g.shape.size());
            for (size_t a = g.shape.size(); a-- > 0;) index[a] = rest % g.shape[a], rest /= g.shape[a];
            name += "L" + std::to_string(index[0]);
            for (size_t a = 1; a < index.size(); ++a) name += (g.axes[a] == "head" ? ".H" : " pos ") + std::to_string(index[a]);
            cells.push_back({name, g.values[i]});
        }
    const bool lower_better = metric == PatchMetric::loss;
    std::stable_sort(cells.begin(), cells.end(), [&](const Cell& a, const Cell& b) { return lower_better ? a.value < b.value : a.value > b.value; });
    std::printf("top %zu of %zu patched activations (%s):\n", std::min(count, cells.size()), cells.size(), to_string(metric).c_str());
    for (size_t i = 0; i < std::min(count, cells.size()); ++i) std::printf("  %-28s %9.4f\n", cells[i].name.c_str(), cells[i].value);
}

}  // namespace

int cmd_patch(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab patch", "Activation patching: each hook, layer and head of one prompt patched into the other.");
    add_prompt_options(options);
    options.add_options()("hooks", "comma-separated block points (default z)", cxxopts::value<std::string>()->default_value("z"))
                         ("per-position", "one cell per position as well")
                         ("noising", "patch corrupted activations into the clean run instead")
                         ("top", "entries to print", cxxopts::value<std::string>()->default_value("10"))
                         ("out", "HDF5 grid (default: CHECKPOINT with .patch.PAIRS.HOOKS.METRIC.h5, see below)", cxxopts::value<std::string>())
                         ("png", "also draw one heatmap per hook into DIR", cxxopts::value<std::string>());
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kPatchHelp);
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    PatchOptions o;
    o.metric = parse_patch_metric(parsed["metric"].as<std::string>());
    o.noising = parsed.count("noising") > 0;
    o.per_position = parsed.count("per-position") > 0;
    std::vector<std::string> inputs = {path};
    if (parsed.count("pairs")) inputs.push_back(parsed["pairs"].as<std::string>());
    const OutputFile out = parsed.count("out") ? check_output("--out", parsed["out"].as<std::string>(), inputs, "attnlab-patch")
                                               : default_output(path, "patch", default_name_parts(parsed, o));
    const size_t top = static_cast<size_t>(number_option<int64_t>(parsed, "top", 0, 1 << 20));
    std::string png_dir, python, plot_script;
    if (parsed.count("png")) {
        png_dir = png_dir_option(parsed);
        python = python_interpreter("--png", "matplotlib");
        plot_script = find_tool("plot_patch.py", "--png").string();
    }

    const LoadedCheckpoint l = load_checkpoint_argument(parsed);
    PromptPairs pairs = prompts_from(parsed, l);
    for (const std::string& name : list_option(parsed, "hooks"))
        o.hooks.push_back(parse_patch_hook(*l.loaded.model, name));
    check_pairs(*l.loaded.model, pairs);
    const size_t N = pairs.clean.size(), T = pairs.clean.front().size();
    check_table_fits(prompts_option(parsed), patching_size(*l.loaded.model, N, T));
    check_table_fits("--hooks", patching_size(*l.loaded.model, N, T, o.hooks));  // every layer's scores or pattern recorded
    resolve_answers(*l.loaded.model, pairs, o.metric);
    const PatchResult r = activation_patching(*l.loaded.model, pairs, o);
    const std::string written = write_patch_file(out, l.path, l.checkpoint.step, pairs, o, r);
    std::printf("patch %s (step %lld): %zu pair(s) of %zu tokens, %s, cells in %s; unpatched %s: clean %.4f, corrupted %.4f\n",
                l.path.c_str(), static_cast<long long>(l.checkpoint.step), pairs.clean.size(), pairs.clean.front().size(),
                o.noising ? "noising" : "denoising", to_string(o.metric).c_str(), baseline_name(o.metric).c_str(), r.clean, r.corrupt);
    print_top(r, o.metric, top);
    std::printf("wrote %s\n", wrote_text(out, written).c_str());
    if (!png_dir.empty()) {
        const int status = run_program({python, plot_script, written, "--out-dir", png_dir});
        if (status != 0) fail("patch", "--png: " + plot_script + " failed (" + written + " is written)");
    }
    return 0;
}

int cmd_path_patch(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab path-patch", "Path patching: the effect of one edge, senders -> a receiver head's q, k or v.");
    add_prompt_options(options);
    options.add_options()("sender", "L.H, mlp.L, embed or all; comma-separated", cxxopts::value<std::string>())
                         ("receiver", "L.H:q, L.H:k or L.H:v", cxxopts::value<std::string>());
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kPathPatchHelp);
        return 0;
    }
    checkpoint_argument(parsed);
    if (!parsed.count("sender")) throw UsageError("--sender is required (L.H, mlp.L, embed or all)");
    if (!parsed.count("receiver")) throw UsageError("--receiver is required (L.H:q, L.H:k or L.H:v)");
    PathPatch edge;
    edge.senders = list_option(parsed, "sender");
    const std::string receiver = parsed["receiver"].as<std::string>();
    const size_t dot = receiver.find('.'), colon = receiver.find(':');
    auto whole = [&](const std::string& part) {
        const std::optional<long long> n = parse_whole<long long>(part);
        if (!n || *n < 0 || *n > (1 << 20)) throw UsageError("--receiver '" + receiver + "': expected L.H:q, L.H:k or L.H:v");
        return static_cast<size_t>(*n);
    };
    if (dot == std::string::npos || colon == std::string::npos || colon < dot) whole("");
    edge.receiver_layer = whole(receiver.substr(0, dot));
    edge.receiver_head = whole(receiver.substr(dot + 1, colon - dot - 1));
    edge.receiver_input = receiver.substr(colon + 1);
    const PatchMetric metric = parse_patch_metric(parsed["metric"].as<std::string>());

    const LoadedCheckpoint l = load_checkpoint_argument(parsed);
    PromptPairs pairs = prompts_from(parsed, l);
    check_pairs(*l.loaded.model, pairs);
    check_table_fits(prompts_option(parsed), patching_size(*l.loaded.model, pairs.clean.size(), pairs.clean.front().size()));
    resolve_answers(*l.loaded.model, pairs, metric);
    const PathPatchResult r = path_patching(*l.loaded.model, pairs, edge, metric);
    std::printf("path-patch %s (step %lld): %s -> %s: unpatched %s clean %.4f, corrupted %.4f; patched %s %.4f\n", l.path.c_str(),
                static_cast<long long>(l.checkpoint.step), parsed["sender"].as<std::string>().c_str(), receiver.c_str(),
                baseline_name(metric).c_str(), r.clean, r.corrupt, to_string(metric).c_str(), r.patched);
    return 0;
}

}  // namespace attnlab
