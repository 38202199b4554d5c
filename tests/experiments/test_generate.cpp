// `attnlab generate` as a library (experiments/analysis/generate.h), on small randomly
// initialised models (nothing trained): greedy decoding with the KV cache equals
// argmax decoding with full forward passes, the cache check passes for both model
// kinds and catches a difference, top-k 1 is greedy, seeded sampling is
// reproducible and stays in the top-k set, the positional table caps decoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "autograd/ops.h"
#include "data/tasks.h"
#include "experiments/analysis/generate.h"
#include "tests/layers/layer_test_util.h"

namespace attnlab {
namespace {

using layer_testing::small_config;  // vocab 11, width 16, heads 2, 2 layers, ffn 32, max_len 16

Indices row_of(const std::vector<int32_t>& tokens) { return Indices({1, tokens.size()}, tokens); }

// The last position's logits of a (1, T, V) tensor.
std::vector<double> last_row(const Tensor& logits) {
    const std::vector<double> v = logits.values();
    const size_t V = logits.size(2);
    return std::vector<double>(v.end() - static_cast<std::ptrdiff_t>(V), v.end());
}

int32_t argmax(const std::vector<double>& row) {
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// The reference: no cache, a full forward pass over the whole sequence per token.
std::vector<int32_t> greedy_full(const DecoderLM& model, std::vector<int32_t> seq, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < n; ++i) {
        out.push_back(argmax(last_row(model.forward(row_of(seq)))));
        seq.push_back(out.back());
    }
    return out;
}

std::vector<int32_t> greedy_full(const EncoderDecoder& model, const std::vector<int32_t>& source, size_t n) {
    const Tensor memory = model.encode(row_of(source), {source.size()});
    std::vector<int32_t> tgt_in = {kBos}, out;
    for (size_t i = 0; i < n; ++i) {
        out.push_back(argmax(last_row(model.decode(memory, {source.size()}, row_of(tgt_in)))));
        tgt_in.push_back(out.back());
    }
    return out;
}

// The k ids with the largest logits.
std::vector<int32_t> top_k_ids(const std::vector<double>& row, size_t k) {
    std::vector<int32_t> ids(row.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    ids.resize(k);
    return ids;
}

struct Models {
    Rng init{7};
    DecoderLM decoder;
    EncoderDecoder enc_dec;
    explicit Models(const ModelConfig& c = small_config()) : decoder(c, init, nullptr), enc_dec(c, init, nullptr) {
        decoder.eval();
        enc_dec.eval();
    }
};

const std::vector<int32_t> kPrompt = {3, 7, 5, 1};

GenerateOptions greedy(size_t max_new, bool check_cache = false) {
    GenerateOptions o;
    o.max_new = max_new;
    o.check_cache = check_cache;
    return o;
}

GenerateOptions sampled(double temperature, size_t top_k, uint64_t seed, size_t max_new = 10) {
    GenerateOptions o;
    o.max_new = max_new;
    o.temperature = temperature;
    o.top_k = top_k;
    o.seed = seed;
    return o;
}

TEST(Generate, GreedyDecoderEqualsArgmaxOfFullPasses) {
    Models m;
    const Generation g = generate(m.decoder, kPrompt, greedy(10));
    EXPECT_EQ(g.prompt, kPrompt);
    EXPECT_EQ(g.generated, greedy_full(m.decoder, kPrompt, 10));
    EXPECT_EQ(g.stop, StopReason::max_new);
    EXPECT_TRUE(g.step_diffs.empty());  // no check asked for
}

TEST(Generate, GreedyEncoderDecoderEqualsArgmaxOfFullPasses) {
    Models m;
    const std::vector<int32_t> source = {4, 9, 3, 8, 6};
    const Generation g = generate(m.enc_dec, source, greedy(10));
    EXPECT_EQ(g.prompt, source);
    EXPECT_EQ(g.generated, greedy_full(m.enc_dec, source, 10));
}

TEST(Generate, CacheCheckPassesForBothKinds) {
    const std::pair<const char*, ModelConfig> configs[] = {
        {"pre-norm, learned", small_config()},
        {"grouped K/V (kv_heads 1)", small_config(Norm::pre, Positional::learned, 1)},
        {"post-norm, sinusoidal", small_config(Norm::post, Positional::sinusoidal)},
    };
    for (const auto& [what, config] : configs) {
        SCOPED_TRACE(what);
        Models m(config);
        for (const Generation& g : {generate(m.decoder, kPrompt, greedy(8, true)),
                                    generate(m.enc_dec, {4, 9, 3}, greedy(8, true)),
                                    generate(m.decoder, kPrompt, [] { auto o = sampled(1.0, 4, 3, 8); o.check_cache = true; return o; }())}) {
            EXPECT_EQ(g.stop, StopReason::max_new);
            EXPECT_FALSE(g.cache_check_failed());
            ASSERT_EQ(g.step_diffs.size(), 8u);  // one per generated token
            EXPECT_EQ(g.generated.size(), 8u);
            EXPECT_LE(g.max_diff(), kCacheCheckTolerance);
            for (double d : g.step_diffs) EXPECT_TRUE(std::isfinite(d));
        }
        // checking changes nothing about what is generated
        EXPECT_EQ(generate(m.decoder, kPrompt, greedy(8, true)).generated, generate(m.decoder, kPrompt, greedy(8)).generated);
    }
}

// The check compares what the cached call returned with the full pass: a cached
// step that is off by 1e-4 (or NaN) at step 3 stops decoding there.
TEST(Generate, CacheCheckStopsAtTheFirstDifferingStep) {
    Models m;
    for (double error : {1e-4, std::numeric_limits<double>::quiet_NaN()}) {
        SCOPED_TRACE(error);
        DecoderCache cache;
        size_t calls = 0;
        auto cached = [&](const std::vector<int32_t>& new_tokens) {
            Tensor logits = m.decoder.forward_cached(row_of(new_tokens), cache);
            if (calls++ != 3) return logits;
            std::vector<double> v = logits.values();
            v[2] += error;
            return Tensor::from_values(v, logits.shape());
        };
        auto full = [&](const std::vector<int32_t>& fed) { return m.decoder.forward(row_of(fed)); };
        const Generation g = decode_loop(kPrompt, 100, greedy(10, true), cached, full);
        EXPECT_TRUE(g.cache_check_failed());
        ASSERT_EQ(g.step_diffs.size(), 4u);
        EXPECT_EQ(g.generated.size(), 3u);  // the failing step's token is not taken
        if (std::isnan(error)) {
            EXPECT_TRUE(std::isnan(g.step_diffs[3]));
            EXPECT_TRUE(std::isnan(g.max_diff()));
        } else {
            EXPECT_NEAR(g.step_diffs[3], 1e-4, 1e-6);
            EXPECT_NEAR(g.max_diff(), 1e-4, 1e-6);
        }
        for (size_t s = 0; s < 3; ++s) EXPECT_LE(g.step_diffs[s], kCacheCheckTolerance);
    }
}

TEST(Generate, TopK1IsGreedy) {
    Models m;
    const std::vector<int32_t> want_dec = generate(m.decoder, kPrompt, greedy(10)).generated;
    const std::vector<int32_t> want_ed = generate(m.enc_dec, {4, 9, 3}, greedy(10)).generated;
    for (uint64_t seed : {0u, 1u, 2u})
        for (double temperature : {0.5, 1.0, 10.0}) {
            EXPECT_EQ(generate(m.decoder, kPrompt, sampled(temperature, 1, seed)).generated, want_dec);
            EXPECT_EQ(generate(m.enc_dec, {4, 9, 3}, sampled(temperature, 1, seed)).generated, want_ed);
        }
}

TEST(Generate, SamplingIsReproducibleAndStaysInTheTopK) {
    Models m;
    const size_t k = 3;
    bool left_the_argmax = false, seeds_differ = false;
    const std::vector<int32_t> first = generate(m.decoder, kPrompt, sampled(5.0, k, 1)).generated;
    for (uint64_t seed = 1; seed <= 5; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        const Generation a = generate(m.decoder, kPrompt, sampled(5.0, k, seed));
        const Generation b = generate(m.decoder, kPrompt, sampled(5.0, k, seed));
        EXPECT_EQ(a.generated, b.generated);  // same seed, same tokens
        seeds_differ = seeds_differ || a.generated != first;
        ASSERT_EQ(a.generated.size(), 10u);
        std::vector<int32_t> seq = kPrompt;
        for (size_t step = 0; step < a.generated.size(); ++step) {
            const std::vector<double> row = last_row(m.decoder.forward(row_of(seq)));
            const std::vector<int32_t> allowed = top_k_ids(row, k);
            EXPECT_NE(std::find(allowed.begin(), allowed.end(), a.generated[step]), allowed.end())
                << "step " << step << ": token " << a.generated[step] << " is not among the top " << k;
            left_the_argmax = left_the_argmax || a.generated[step] != argmax(row);
            seq.push_back(a.generated[step]);
        }
    }
    EXPECT_TRUE(left_the_argmax) << "temperature 5 never sampled anything but the argmax";
    EXPECT_TRUE(seeds_differ) << "five seeds gave the same 10 tokens";
    // the encoder-decoder samples the same way
    const std::vector<int32_t> source = {4, 9, 3};
    EXPECT_EQ(generate(m.enc_dec, source, sampled(5.0, k, 4)).generated, generate(m.enc_dec, source, sampled(5.0, k, 4)).generated);
}

TEST(ChooseToken, GreedyTakesTheFirstMaximum) {
    Rng rng(0);
    EXPECT_EQ(choose_token({0.5, 2.0, -1.0, 2.0}, 0.0, 0, rng), 1);
    EXPECT_EQ(choose_token({0.5, 2.0, -1.0, 2.0}, 0.0, 3, rng), 1);
    const Rng untouched(0);
    EXPECT_EQ(rng.state(), untouched.state());  // greedy draws nothing
}

TEST(ChooseToken, SamplesSoftmaxOverTemperature) {
    // softmax(log p) = p; at temperature 2, logits (0, ln 4) give (1/3, 2/3)
    const std::vector<double> logits = {std::log(0.1), std::log(0.2), std::log(0.3), std::log(0.4)};
    Rng rng(42);
    const int n = 20000;
    std::vector<int> counts(4);
    for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(choose_token(logits, 1.0, 0, rng))];
    for (size_t v = 0; v < 4; ++v) EXPECT_NEAR(counts[v] / double(n), 0.1 * double(v + 1), 0.015) << "id " << v;

    std::vector<int> hot(2);
    for (int i = 0; i < n; ++i) ++hot[static_cast<size_t>(choose_token({0.0, std::log(4.0)}, 2.0, 0, rng))];
    EXPECT_NEAR(hot[1] / double(n), 2.0 / 3.0, 0.015);
}

TEST(ChooseToken, TopKRenormalisesOverTheKLargest) {
    // top 2 of (0.1, 0.2, 0.3, 0.4) are ids 3 and 2: renormalised 4/7 and 3/7
    const std::vector<double> logits = {std::log(0.1), std::log(0.2), std::log(0.3), std::log(0.4)};
    Rng rng(5);
    const int n = 20000;
    std::vector<int> counts(4);
    for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(choose_token(logits, 1.0, 2, rng))];
    EXPECT_EQ(counts[0] + counts[1], 0);
    EXPECT_NEAR(counts[3] / double(n), 4.0 / 7.0, 0.015);
    // top_k >= vocab means all of them
    Rng a(9), b(9);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(choose_token(logits, 1.0, 4, a), choose_token(logits, 1.0, 0, b));
    // equal logits at the boundary: the smaller id is kept
    Rng c(1);
    for (int i = 0; i < 200; ++i) EXPECT_EQ(choose_token({1.0, 0.0, 1.0}, 1.0, 1, c), 0);
}

// Pre-norm: ln_f(x) = bias when its weight is 0, so logits = head.weight @ bias.
// A head that only scores <SEP> makes every step choose id 1.
void always_sep(DecoderLM& model) {
    const size_t V = model.config.vocab, D = model.config.block.attention.width;
    auto& ln_f = dynamic_cast<LayerNorm&>(*model.ln_f);  // the default norm type
    ln_f.weight.assign(Tensor::zeros({D}));
    ln_f.bias.assign(Tensor::ones({D}));
    std::vector<double> w(V * D, 0.0);
    for (size_t d = 0; d < D; ++d) w[kSep * D + d] = 1.0;
    model.head.weight.assign(Tensor::from_values(w, {V, D}));
}

TEST(Generate, StopAtSep) {
    Models m;
    always_sep(m.decoder);
    GenerateOptions o = greedy(5);
    EXPECT_EQ(generate(m.decoder, kPrompt, o).generated, std::vector<int32_t>(5, kSep));
    o.stop_at_sep = true;
    const Generation g = generate(m.decoder, kPrompt, o);
    EXPECT_EQ(g.generated, std::vector<int32_t>{kSep});
    EXPECT_EQ(g.stop, StopReason::sep);
}

TEST(Generate, ThePositionalTableCapsDecoding) {
    Models m;  // max_len 16
    // decoder: at most 16 inputs, so 14 prompt tokens leave 16 + 1 - 14 = 3 new tokens
    const std::vector<int32_t> long_prompt(14, 4);
    Generation g = generate(m.decoder, long_prompt, greedy(10, true));
    EXPECT_EQ(g.generated.size(), 3u);
    EXPECT_EQ(g.stop, StopReason::max_len);
    EXPECT_LE(g.max_diff(), kCacheCheckTolerance);
    EXPECT_EQ(generate(m.decoder, std::vector<int32_t>(16, 4), greedy(10)).generated.size(), 1u);
    EXPECT_EQ(generate(m.decoder, long_prompt, greedy(3)).stop, StopReason::max_new);  // exactly enough: not capped
    // encoder-decoder: the decoder input <BOS> + generated[..n-2] has at most 16 positions
    g = generate(m.enc_dec, {4, 9, 3}, greedy(40, true));
    EXPECT_EQ(g.generated.size(), 16u);
    EXPECT_EQ(g.stop, StopReason::max_len);
    EXPECT_EQ(g.generated, greedy_full(m.enc_dec, {4, 9, 3}, 16));
    // a prompt that alone does not fit is an error
    EXPECT_THROW(generate(m.decoder, std::vector<int32_t>(17, 4), greedy(1)), Error);
    EXPECT_THROW(generate(m.enc_dec, std::vector<int32_t>(17, 4), greedy(1)), Error);
}

// Rotary, ALiBi and no positions have no table: decoding goes past max_len (16)
// with the cache still agreeing with full passes.
TEST(Generate, PositionsWithoutATableDecodePastMaxLen) {
    for (const Positional kind : {Positional::rotary, Positional::alibi, Positional::none}) {
        SCOPED_TRACE(to_string(kind));
        Models m(small_config(Norm::pre, kind));
        const std::vector<int32_t> long_prompt(14, 4);
        Generation g = generate(m.decoder, long_prompt, greedy(10, true));
        EXPECT_EQ(g.stop, StopReason::max_new);
        EXPECT_EQ(g.generated.size(), 10u);  // 24 positions
        EXPECT_LE(g.max_diff(), kCacheCheckTolerance);
        EXPECT_EQ(g.generated, greedy_full(m.decoder, long_prompt, 10));
        EXPECT_EQ(generate(m.decoder, std::vector<int32_t>(20, 4), greedy(2)).generated.size(), 2u);  // a prompt past it too
        // an encoder-decoder's target ends at <SEP>: it stops there, or after 20 tokens
        g = generate(m.enc_dec, {4, 9, 3}, greedy(20, true));
        if (g.stop == StopReason::sep) {
            ASSERT_FALSE(g.generated.empty());
            EXPECT_EQ(g.generated.back(), kSep);
            EXPECT_EQ(std::count(g.generated.begin(), g.generated.end(), kSep), 1);
        } else {
            EXPECT_EQ(g.generated.size(), 20u);
        }
        for (size_t step = 0; step < g.step_diffs.size(); ++step) EXPECT_LE(g.step_diffs[step], g.step_limits[step]);
    }
}

TEST(Generate, MaxNewZeroGeneratesNothing) {
    Models m;
    const Generation g = generate(m.decoder, kPrompt, greedy(0, true));
    EXPECT_TRUE(g.generated.empty());
    EXPECT_TRUE(g.step_diffs.empty());
    EXPECT_EQ(g.max_diff(), 0.0);
}

TEST(Generate, RefusesBadInput) {
    Models m;
    EXPECT_THROW(generate(m.decoder, {}, greedy(1)), Error);
    EXPECT_THROW(generate(m.decoder, {3, 11}, greedy(1)), Error);  // vocab 11
    EXPECT_THROW(generate(m.enc_dec, {-1}, greedy(1)), Error);
    EXPECT_THROW(generate(m.decoder, kPrompt, sampled(-1.0, 0, 0)), Error);
    m.decoder.train();
    try {
        generate(m.decoder, kPrompt, greedy(1));
        ADD_FAILURE() << "a model in training mode was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("training mode"), std::string::npos) << e.what();
    }
}

TEST(ParseTokenIds, ValidAndInvalid) {
    EXPECT_EQ(parse_token_ids("3 7 5 1", 11), (std::vector<int32_t>{3, 7, 5, 1}));
    EXPECT_EQ(parse_token_ids("  0\t10\n2 ", 11), (std::vector<int32_t>{0, 10, 2}));
    auto message = [](const std::string& text) {
        try {
            parse_token_ids(text, 11);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("(accepted)");
    };
    EXPECT_EQ(message("3 x 5"), "--prompt: \"x\" at position 1 (counting from 0) is not an integer token id");
    EXPECT_EQ(message("3 7 3.0"), "--prompt: \"3.0\" at position 2 (counting from 0) is not an integer token id");
    EXPECT_EQ(message("3,7"), "--prompt: \"3,7\" at position 0 (counting from 0) is not an integer token id");
    EXPECT_EQ(message("3 11"), "--prompt: token id 11 at position 1 (counting from 0) is outside the vocabulary [0, 11)");
    EXPECT_EQ(message("-1"), "--prompt: token id -1 at position 0 (counting from 0) is outside the vocabulary [0, 11)");
    EXPECT_EQ(message("4 99999999999999999999999"),
              "--prompt: token id 99999999999999999999999 at position 1 (counting from 0) is outside the vocabulary [0, 11)");
    EXPECT_EQ(message("   "), "--prompt: no token ids given (expected e.g. \"3 7 5 1\")");
    for (const std::string& bad : {"3 x 5", "3 11", "", "1 2\n3 -4"}) EXPECT_EQ(message(bad).find('\n'), std::string::npos);
}

}  // namespace
}  // namespace attnlab
