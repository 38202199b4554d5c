// attnlab decompose CHECKPOINT --tokens "..." --head L.H --query I --key J [--top N] [--out F.h5]
// One attention score split into the contributions of the upstream components
// (experiments/analysis/score_parts.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "experiments/analysis/score_parts.h"
#include "experiments/cli/command_line.h"
#include "experiments/cli/commands.h"
#include "experiments/run/load_checkpoint.h"

namespace attnlab {

namespace {

constexpr const char* kDecomposeHelp = R"(
Why head L.H at query position I attends to key position J: its score
scale * q_I . k_J split exactly into one part per (query-side component,
key-side component). The components of the stream entering the head's block:
tok_emb (the token embedding), pos_emb (learned or sinusoidal positions), each
earlier head's output in the stream (L.H), each earlier feed-forward (mlp.L),
attn_bias (the earlier output projections' biases), and bias (the projection's
and the norm's biases). The norm is held at its statistics on the whole stream
(as the lens's direct logit attribution); with rotary positions each part is
rotated. The parts add up to scale * q.k; "modifier" is what the score adds
beyond that (ALiBi's penalty, T5's relative bias; 0 otherwise).

--out (default: CHECKPOINT with .parts.L<l>H<h>.q<query>.k<key>.h5, NAME-2.h5, ...
when that exists: nothing is replaced): attrs format = "attnlab-score-parts",
format_version, checkpoint, step, layer, head, query, key, score, modifier;
/tokens [T] int64; /components [C] string; /parts [C, C] float64 (row: the
query-side component, column: the key-side one).
Pre-norm and norm-free decoders.
)";

}  // namespace

int cmd_decompose(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab decompose", "One attention score split into the contributions of the upstream components.");
    options.add_options()("tokens", "token ids of one sequence", cxxopts::value<std::string>())
                         ("head", "L.H: the head", cxxopts::value<std::string>())
                         ("query", "the query position", cxxopts::value<std::string>())
                         ("key", "the key position", cxxopts::value<std::string>())
                         ("top", "parts to print", cxxopts::value<std::string>()->default_value("10"))
                         ("out", "HDF5 file (default: CHECKPOINT with .parts.L<l>H<h>.q<query>.k<key>.h5)", cxxopts::value<std::string>())
                         ("h,help", "this help")
                         ("checkpoint", "checkpoint file or run folder", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kDecomposeHelp);
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    for (const char* required : {"tokens", "head", "query", "key"})
        if (!parsed.count(required)) throw UsageError(std::string("--") + required + " is required");
    const std::string head = parsed["head"].as<std::string>();
    const size_t dot = head.find('.');
    const std::optional<long long> layer = dot == std::string::npos ? std::nullopt : parse_whole<long long>(head.substr(0, dot));
    const std::optional<long long> index = dot == std::string::npos ? std::nullopt : parse_whole<long long>(head.substr(dot + 1));
    if (!layer || !index || *layer < 0 || *index < 0 || *layer > (1 << 20) || *index > (1 << 20))
        throw UsageError("--head '" + head + "': expected L.H (layer and head, e.g. 1.0)");
    const size_t query = static_cast<size_t>(number_option<int64_t>(parsed, "query", 0, 1 << 30));
    const size_t key = static_cast<size_t>(number_option<int64_t>(parsed, "key", 0, 1 << 30));
    const size_t top = static_cast<size_t>(number_option<int64_t>(parsed, "top", 0, 1 << 20));
    const OutputFile out =
        parsed.count("out") ? check_output("--out", parsed["out"].as<std::string>(), {path}, "attnlab-score-parts")
                            : default_output(path, "parts", {"L" + std::to_string(*layer) + "H" + std::to_string(*index),
                                                             "q" + std::to_string(query), "k" + std::to_string(key)});

    const LoadedCheckpoint l = load_checkpoint(path, Device::cpu);
    const TokenText text(l);
    const std::vector<int32_t> tokens = text.tokens(parsed["tokens"].as<std::string>(), "--tokens");
    const ModelConfig shape = model_config(l.config, l.loaded.max_len);
    if (shape.position_table() && tokens.size() > shape.max_len)
        throw UsageError("--tokens: " + std::to_string(tokens.size()) + " tokens exceed the model's " + std::to_string(shape.max_len) + " positions");
    check_table_fits("--tokens", score_parts_size(*l.loaded.model, tokens.size()));
    const ScoreParts r = score_parts(*l.loaded.model, tokens, static_cast<size_t>(*layer), static_cast<size_t>(*index), query, key);
    const std::string written = write_score_parts_file(out, l.path, l.checkpoint.step, tokens, r);

    const size_t C = r.components.size();
    std::printf("decompose %s (step %lld): head %zu.%zu, query %zu (%s), key %zu (%s): score %.4f = parts %.4f + modifier %.4f\n",
                l.path.c_str(), static_cast<long long>(l.checkpoint.step), r.layer, r.head, query,
                text.label(tokens[query]).c_str(), key, text.label(tokens[key]).c_str(), r.score,
                r.score - r.modifier, r.modifier);
    std::vector<size_t> order(C * C);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::abs(r.parts[a]) > std::abs(r.parts[b]); });
    std::printf("largest parts (query side x key side):\n");
    for (size_t i = 0; i < std::min(top, order.size()); ++i)
        std::printf("  %-10s x %-10s %+9.4f\n", r.components[order[i] / C].c_str(), r.components[order[i] % C].c_str(), r.parts[order[i]]);
    std::printf("wrote %s\n", wrote_text(out, written).c_str());
    return 0;
}

}  // namespace attnlab
