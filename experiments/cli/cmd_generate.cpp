// attnlab generate CHECKPOINT --prompt "3 7 5 1" [--max-new N] [--stop-at-sep]
//   [--temperature T] [--top-k K] [--seed S] [--check-cache]
// Decodes one sequence with the KV cache (experiments/analysis/generate.h); prints
// "prompt | generated" on one line, and with --check-cache one line per step and
// a final "cache check: N steps, max |cached - full| = X" (exit 1 on a failure).
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "experiments/files/checkpoint.h"
#include "experiments/cli/command_line.h"
#include "experiments/config/config.h"
#include "experiments/analysis/generate.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

std::string join(const std::vector<int32_t>& ids) {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
    return out;
}

constexpr const char* description =
    "Decode one sequence from a checkpoint with the KV cache: greedy (--temperature 0,\n"
    "the default), or sampled from softmax(logits / T) among the --top-k largest logits.\n"
    "\n"
    "--prompt holds space-separated token ids in [0, vocab) (0 PAD, 1 SEP, 2 BOS,\n"
    "content 3 .. vocab-1). For a decoder model it is the start of the sequence; for\n"
    "an encoder-decoder model it is the SOURCE, and decoding starts from <BOS> (id 2).\n"
    "Output: one line `PROMPT | GENERATED` (for an encoder-decoder: SOURCE | TARGET).\n"
    "\n"
    "Decoding never goes past a learned or sinusoidal positional table (max_len): a decoder\n"
    "model takes at most max_len inputs (prompt + generated reaches at most max_len + 1\n"
    "tokens), an encoder-decoder generates at most max_len tokens. A longer --max-new is\n"
    "capped there, with a note on stderr; a prompt longer than max_len is an error.\n"
    "Rotary, ALiBi and no positions have no table: they decode to any length.\n"
    "\n"
    "--check-cache recomputes every step with a full forward pass (DecoderLM::forward\n"
    "over the sequence so far / EncoderDecoder::decode) and compares its logits with the\n"
    "cached step's, printing the max |cached - full| per step and its limit, 1e-5 times\n"
    "max(1, the step's largest |logit|) (the audit's rule for float32 computed in another\n"
    "order): a step above its limit prints the step and exits with status 1.\n"
    "\n"
    "An encoder-decoder stops after generating <SEP>, which ends its targets; a decoder\n"
    "stops there only with --stop-at-sep. --max-new is at most 65536.";

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab generate", description);
    options.positional_help("CHECKPOINT --prompt \"3 7 5 1\"");
    add_device_option(options);
    options.add_options()("prompt", "token ids, space-separated (the source for an encoder-decoder)", cxxopts::value<std::string>())
                         ("max-new", "tokens to generate at most", cxxopts::value<std::string>()->default_value("16"))
                         ("stop-at-sep", "stop after generating <SEP> (id 1)")
                         ("temperature", "0 = greedy; > 0 samples from softmax(logits / T)", cxxopts::value<std::string>()->default_value("0"))
                         ("top-k", "sample among the K largest logits only (0 = all)", cxxopts::value<std::string>()->default_value("0"))
                         ("seed", "sampling seed (default: the run's seed)", cxxopts::value<std::string>())
                         ("check-cache", "compare every cached step with a full recomputation (limit 1e-5 max(1, |logit|); exit 1 above it)")
                         ("h,help", "this help")
                         ("checkpoint", "checkpoint file", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s", options.help().c_str());
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    const Device device = device_option(parsed);
    if (!parsed.count("prompt")) throw UsageError("--prompt is required (token ids, e.g. --prompt \"3 7 5 1\")");
    GenerateOptions opts;
    constexpr int64_t most = int64_t{1} << 40;
    opts.max_new = static_cast<size_t>(number_option<int64_t>(parsed, "max-new", 0, static_cast<int64_t>(kMaxNewTokens)));
    opts.temperature = number_option<double>(parsed, "temperature", 0.0, 1e30);
    opts.top_k = static_cast<size_t>(number_option<int64_t>(parsed, "top-k", 0, most));
    opts.stop_at_sep = parsed.count("stop-at-sep") > 0;
    opts.check_cache = parsed.count("check-cache") > 0;
    const bool seed_given = parsed.count("seed") > 0;
    const int64_t seed = seed_given ? number_option<int64_t>(parsed, "seed", 0, std::numeric_limits<int64_t>::max()) : 0;

    const LoadedCheckpoint in = load_checkpoint(path, device);
    const Config& config = in.config;
    const LoadedModel& loaded = in.loaded;
    const TokenText text(in);
    const std::vector<int32_t> prompt = text.tokens(parsed["prompt"].as<std::string>(), "--prompt");
    opts.seed = static_cast<uint64_t>(seed_given ? seed : config.run.seed);

    check_table_fits("--prompt", decoding_size(*loaded.model, prompt.size()));
    if (opts.check_cache)
        check_table_fits("--check-cache --max-new " + std::to_string(opts.max_new), decoding_size(*loaded.model, prompt.size(), opts.max_new));
    const Generation g = generate(*loaded.model, prompt, opts);
    for (size_t step = 0; step < g.step_diffs.size(); ++step)
        std::printf("step %zu: max |cached - full| = %.3g (limit %.3g)\n", step, g.step_diffs[step], g.step_limits[step]);
    if (g.cache_check_failed()) {
        std::fflush(stdout);
        std::fprintf(stderr, "attnlab generate: cache check FAILED at step %zu: max |cached - full| = %.3g > %.3g\n",
                     g.step_diffs.size() - 1, g.step_diffs.back(), g.step_limits.back());
        return 1;
    }
    if (text.reads_text()) {  // the text itself: the prompt, then what the model wrote
        std::printf("%s%s\n", text.text(g.prompt).c_str(), text.text(g.generated).c_str());
    } else {
        const std::string generated = join(g.generated);
        std::printf("%s |%s%s\n", join(g.prompt).c_str(), generated.empty() ? "" : " ", generated.c_str());
    }
    if (opts.check_cache)
        std::printf("cache check: %zu steps, max |cached - full| = %.3g\n", g.step_diffs.size(), g.max_diff());
    if (g.stop == StopReason::max_len) {
        std::fflush(stdout);
        std::fprintf(stderr, "attnlab generate: stopped after %zu of %zu new tokens: the model's positional table holds max_len = %zu positions\n",
                     g.generated.size(), opts.max_new, model_config(config, loaded.max_len).max_len);
    }
    return 0;
}

}  // namespace attnlab
