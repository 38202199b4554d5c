// Autoregressive decoding of one sequence with the KV cache (`attnlab generate`):
// greedy, temperature and top-k sampling, for both model kinds, with an optional
// check of every cached step against a full recomputation.
//
//   DecoderLM:      the prompt starts the sequence. Step 0 feeds the whole prompt
//                   through forward_cached in one chunk; every later step feeds
//                   the token chosen last (one position).
//   EncoderDecoder: the prompt is the SOURCE. It is encoded once; the decoder
//                   starts from <BOS> (id 2) and decode_cached feeds one target
//                   token per step.
//
// Step k chooses generated token k from the last position's logits.
//
// Positions: the model never sees a position beyond its table (ModelConfig::max_len).
// A decoder-only model takes at most max_len inputs, so prompt + generated can
// reach max_len + 1 tokens (the last generated token is never fed back, as the
// last token of a training sequence); an encoder-decoder's decoder input is
// <BOS> + generated[0 .. n-2], so at most max_len tokens are generated. Decoding
// stops there (StopReason::max_len): the request is capped, not refused. A prompt
// that alone does not fit (a source longer than max_len, a decoder prompt longer
// than max_len) is an error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/rng.h"
#include "experiments/config/memory_estimate.h"
#include "layers/models.h"

namespace attnlab {

class TaskModel;

// The cache check's relative tolerance: a step fails when |cached - full| exceeds
// it times max(1, the step's largest |full logit|) (f32_tolerance, the audit's
// KV-cache test's rule: the cached path sums float32 products in another order).
constexpr double kCacheCheckTolerance = 1e-5;
// The most new tokens one call generates: a bound for models without a
// positional table (rotary, ALiBi, none), whose decoding has no end of its own.
constexpr size_t kMaxNewTokens = size_t{1} << 16;

struct GenerateOptions {
    size_t max_new = 16;        // tokens to generate at most
    bool stop_at_sep = false;   // stop after generating <SEP> (id 1); an encoder-decoder always
                                // stops there (its targets end with <SEP>)
    double temperature = 0.0;   // 0 = greedy (argmax); > 0: sample from softmax(logits / T)
    size_t top_k = 0;           // sample among the k largest logits only; 0 (or >= vocab) = all
    uint64_t seed = 0;          // sampling draws from Rng(seed)
    bool check_cache = false;   // recompute every step in full and compare
    double tolerance = kCacheCheckTolerance;  // relative, see kCacheCheckTolerance
};

enum class StopReason {
    max_new,      // generated max_new tokens
    sep,          // generated <SEP> with stop_at_sep, or an encoder-decoder's end of target
    max_len,      // the positional table is full (see above)
    cache_check,  // a step's cached logits differ from the full pass by more than the tolerance
};
const char* to_string(StopReason reason);

struct Generation {
    std::vector<int32_t> prompt;     // as given (the source for an encoder-decoder)
    std::vector<int32_t> generated;  // the new tokens, in order
    StopReason stop = StopReason::max_new;
    // With check_cache: per step, max |cached - full| over the logits of every
    // position the cached call returned (the whole prompt at a decoder's step 0,
    // else the one new position). On a failure the failing step is the last entry
    // and its token is not generated.
    std::vector<double> step_diffs;
    std::vector<double> step_limits;  // each step's allowed difference (tolerance * max(1, max |full|))
    double max_diff() const;         // 0 without steps
    bool cache_check_failed() const { return stop == StopReason::cache_check; }
};

// The model must be in eval mode (dropout would make decoding random); every
// prompt token must be in [0, vocab); the prompt must not be empty.
Generation generate(const DecoderLM& model, const std::vector<int32_t>& prompt, const GenerateOptions& options);
Generation generate(const EncoderDecoder& model, const std::vector<int32_t>& source, const GenerateOptions& options);
Generation generate(const TaskModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& options);

// The largest forward decoding runs, to refuse it before it starts
// (memory_estimate.h): its first step over a prompt (a decoder's start, an
// encoder-decoder's source) of `prompt` tokens, or with `generated` > 0 the
// full forward --check-cache recomputes at the last of that many steps (a
// decoder: over the prompt and them; an encoder-decoder: them over the source),
// no longer than a positional table allows. Its tables (model_factory.h).
TableSize decoding_size(const TaskModel& model, size_t prompt, size_t generated = 0);

// The loop both model kinds share (the overloads above set it up; tests drive it
// directly to see a failing check). `fed` is what the decoder has been given so
// far (the prompt, or <BOS>); cached(new_tokens) runs the cached model on the new
// positions -> logits (1, Tn, V); full(fed) recomputes every position -> (1, T, V),
// called only with check_cache. `limit` is the most tokens the positional table
// allows (StopReason::max_len). Step 0 feeds all of `fed`; later steps one token.
using LogitsFn = std::function<Tensor(const std::vector<int32_t>&)>;
Generation decode_loop(std::vector<int32_t> fed, size_t limit, const GenerateOptions& options, const LogitsFn& cached,
                       const LogitsFn& full);

// One token from a row of logits: argmax (the first of equal maxima) for
// temperature 0; otherwise a draw from softmax(logits / temperature) restricted
// to the top_k largest logits (ties broken towards the smaller id), one
// rng.uniform() per call.
int32_t choose_token(const std::vector<double>& logits, double temperature, size_t top_k, Rng& rng);

// "3 7 5 1" -> {3, 7, 5, 1}: whitespace-separated integers in [0, vocab). Throws
// attnlab::Error, one line naming the offending token and its position (counting
// from 0), for a token that is not an integer or not in the vocabulary, and for no tokens.
std::vector<int32_t> parse_token_ids(const std::string& text, size_t vocab, const std::string& what = "--prompt");

}  // namespace attnlab
