#include "experiments/analysis/generate.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <numeric>
#include <sstream>

#include "data/quoted.h"
#include "data/tasks.h"
#include "experiments/analysis/tolerance.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

constexpr const char* op = "generate";

Indices row_of(const std::vector<int32_t>& tokens) { return Indices({1, tokens.size()}, tokens); }

void check_prompt(const std::vector<int32_t>& prompt, const ModelConfig& config, const Module& model, const char* what) {
    if (model.is_training()) fail(op, "the model is in training mode (call eval() first: dropout would make decoding random)");
    if (prompt.empty()) fail(op, std::string("the ") + what + " is empty");
    for (size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] < 0 || static_cast<size_t>(prompt[i]) >= config.vocab)
            fail(op, std::string(what) + " token id " + std::to_string(prompt[i]) + " at position " + std::to_string(i) +
                         " is outside the vocabulary [0, " + std::to_string(config.vocab) + ")");
    if (config.position_table() && prompt.size() > config.max_len)
        fail(op, std::string("the ") + what + " has " + std::to_string(prompt.size()) + " tokens; the model's positional table holds " +
                     std::to_string(config.max_len) + " (max_len)");
}

void check_options(const GenerateOptions& options) {
    if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature))
        fail(op, "temperature must be a finite number >= 0, got " + std::to_string(options.temperature));
    if (!(options.tolerance >= 0.0)) fail(op, "the cache-check tolerance must be >= 0");
    if (options.max_new > kMaxNewTokens)
        fail(op, "max_new " + std::to_string(options.max_new) + " is above the bound of " + std::to_string(kMaxNewTokens) + " new tokens");
}

// max |a - b| over the last `rows` rows of two (1, T, V) logit tensors; NaN if
// any value is NaN. `magnitude`: the largest |full| of those rows.
double max_abs_diff_last_rows(const Tensor& cached, const Tensor& full, size_t rows, double& magnitude) {
    const size_t V = cached.size(2);
    if (full.size(2) != V || cached.size(1) != rows || full.size(1) < rows)
        fail(op, "cache check: cached logits " + shape_str(cached.shape()) + " do not line up with full logits " +
                     shape_str(full.shape()));
    const std::vector<double> a = cached.values(), b = full.values();
    const size_t offset = (full.size(1) - rows) * V;
    double m = 0.0;
    magnitude = 0.0;
    for (size_t i = 0; i < rows * V; ++i) {
        magnitude = std::max(magnitude, std::abs(b[offset + i]));
        const double d = std::abs(a[i] - b[offset + i]);
        if (std::isnan(d)) return d;
        m = std::max(m, d);
    }
    return m;
}

}  // namespace

Generation decode_loop(std::vector<int32_t> fed, size_t limit, const GenerateOptions& options, const LogitsFn& cached,
                       const LogitsFn& full) {
    check_options(options);
    NoGradGuard no_grad;
    Rng rng(options.seed);
    Generation g;
    std::vector<int32_t> new_tokens = fed;
    for (size_t step = 0;; ++step) {
        if (g.generated.size() >= options.max_new) {
            g.stop = StopReason::max_new;
            break;
        }
        if (g.generated.size() >= limit) {
            g.stop = StopReason::max_len;
            break;
        }
        const Tensor logits = cached(new_tokens);  // (1, Tn, V)
        if (options.check_cache) {
            double magnitude = 0.0;
            const double diff = max_abs_diff_last_rows(logits, full(fed), new_tokens.size(), magnitude);
            g.step_diffs.push_back(diff);
            g.step_limits.push_back(f32_tolerance(magnitude, options.tolerance));
            if (!(diff <= g.step_limits.back())) {  // NaN fails too
                g.stop = StopReason::cache_check;
                break;
            }
        }
        const size_t V = logits.size(2);
        const std::vector<double> all = logits.values();
        const std::vector<double> last(all.end() - static_cast<std::ptrdiff_t>(V), all.end());
        if (!std::all_of(last.begin(), last.end(), [](double z) { return std::isfinite(z); }))
            fail(op, "step " + std::to_string(step) + ": the model's logits are not finite");
        const int32_t token = choose_token(last, options.temperature, options.top_k, rng);
        g.generated.push_back(token);
        if (options.stop_at_sep && token == kSep) {
            g.stop = StopReason::sep;
            break;
        }
        new_tokens = {token};
        fed.push_back(token);
    }
    return g;
}

const char* to_string(StopReason reason) {
    switch (reason) {
        case StopReason::max_new: return "max_new";
        case StopReason::sep: return "sep";
        case StopReason::max_len: return "max_len";
        case StopReason::cache_check: return "cache_check";
    }
    return "?";
}

double Generation::max_diff() const {
    double m = 0.0;
    for (double d : step_diffs) {
        if (std::isnan(d)) return d;
        m = std::max(m, d);
    }
    return m;
}

Generation generate(const DecoderLM& model, const std::vector<int32_t>& prompt, const GenerateOptions& options) {
    check_prompt(prompt, model.config, model, "prompt");
    DecoderCache cache;
    // With a position table, max_len inputs at most (the token chosen from the last
    // of them is never fed); rotary, ALiBi and no positions reach any length.
    const size_t limit = model.config.position_table() ? model.config.max_len + 1 - prompt.size() : SIZE_MAX;
    Generation g = decode_loop(
        prompt, limit, options,
        [&](const std::vector<int32_t>& new_tokens) { return model.forward_cached(row_of(new_tokens), cache); },
        [&](const std::vector<int32_t>& fed) { return model.forward(row_of(fed)); });
    g.prompt = prompt;
    return g;
}

Generation generate(const EncoderDecoder& model, const std::vector<int32_t>& source, const GenerateOptions& options) {
    check_prompt(source, model.config, model, "source");
    const std::vector<size_t> src_lengths = {source.size()};
    Tensor memory;
    {
        NoGradGuard no_grad;
        memory = model.encode(row_of(source), src_lengths);  // (1, S, D), once
    }
    DecoderCache cache;
    GenerateOptions until_sep = options;  // a target ends with <SEP>: nothing after it is the model's answer
    until_sep.stop_at_sep = true;
    // The decoder input is <BOS> + generated[0 .. n-2]: n <= max_len.
    Generation g = decode_loop(
        {kBos}, model.config.position_table() ? model.config.max_len : SIZE_MAX, until_sep,
        [&](const std::vector<int32_t>& new_tokens) {
            return model.decode_cached(memory, src_lengths, row_of(new_tokens), cache);
        },
        [&](const std::vector<int32_t>& fed) { return model.decode(memory, src_lengths, row_of(fed)); });
    g.prompt = source;
    return g;
}

Generation generate(const TaskModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& options) {
    if (model.enc_dec()) return generate(*model.enc_dec(), prompt, options);
    return generate(*model.decoder_lm(), prompt, options);
}

TableSize decoding_size(const TaskModel& model, size_t prompt, size_t generated) {
    const ModelConfig& c = model.encoder_decoder() ? model.enc_dec()->config : model.decoder_lm()->config;
    const size_t most = c.position_table() ? c.max_len : SIZE_MAX;
    if (model.encoder_decoder())
        return forward_tables(model, {.rows = 1, .positions = std::min(std::max<size_t>(generated, 1), most), .sources = prompt});
    return forward_tables(model, {.rows = 1, .positions = std::min(prompt + generated, most)});
}

int32_t choose_token(const std::vector<double>& logits, double temperature, size_t top_k, Rng& rng) {
    const size_t V = logits.size();
    if (V == 0) fail(op, "no logits to choose from");
    if (temperature == 0.0)
        return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (!(temperature > 0.0) || !std::isfinite(temperature))
        fail(op, "temperature must be a finite number >= 0, got " + std::to_string(temperature));
    const size_t k = (top_k == 0 || top_k >= V) ? V : top_k;
    std::vector<size_t> order(V);
    std::iota(order.begin(), order.end(), size_t{0});
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](size_t a, size_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    // softmax(logits / T) over the k kept ids, shifted by the largest for stability
    const double top = logits[order[0]];
    std::vector<double> weight(k);
    double total = 0.0;
    for (size_t i = 0; i < k; ++i) total += weight[i] = std::exp((logits[order[i]] - top) / temperature);
    const double u = rng.uniform() * total;
    double cumulative = 0.0;
    for (size_t i = 0; i < k; ++i) {
        cumulative += weight[i];
        if (u < cumulative) return static_cast<int32_t>(order[i]);
    }
    return static_cast<int32_t>(order[k - 1]);  // u within rounding of total
}

std::vector<int32_t> parse_token_ids(const std::string& text, size_t vocab, const std::string& what) {
    std::istringstream in(text);
    std::vector<int32_t> ids;
    std::string word;
    for (size_t position = 0; in >> word; ++position) {
        int64_t value = 0;
        const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
        const std::string where = " at position " + std::to_string(position) + " (counting from 0)";
        if (ec == std::errc::invalid_argument || end != word.data() + word.size())
            throw Error(what + ": " + quoted_bytes(word) + where + " is not an integer token id");
        if (ec == std::errc::result_out_of_range || value < 0 || static_cast<uint64_t>(value) >= vocab)
            throw Error(what + ": token id " + word + where + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
        ids.push_back(static_cast<int32_t>(value));
    }
    if (ids.empty()) throw Error(what + ": no token ids given (expected e.g. \"3 7 5 1\")");
    return ids;
}

}  // namespace attnlab
