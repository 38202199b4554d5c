// KV-cache equivalence (seed, Level 4): decoding with cached keys and values gives
// the logits of a full forward pass, and the cache holds exactly
// 2 (K and V) * layers * B * H_kv * T * d_h * 4 bytes (float32) after T steps.
#include <gtest/gtest.h>

#include "layer_test_util.h"

namespace attnlab {
namespace {

using namespace layer_testing;

// 1e-5: the cached path multiplies (Tn, d) by (d, T_cached) instead of (T, d) by
// (d, T), so float32 sums may be ordered differently; the maths is the same.
constexpr double kTol = 1e-5;

struct DecoderCase {
    const char* what;
    ModelConfig config;
    size_t kv_heads;  // H_kv as resolved
};

std::vector<DecoderCase> decoder_cases() {
    return {{"heads 2, pre-norm", small_config(), 2},
            {"grouped K/V: kv_heads 1 of heads 2", small_config(Norm::pre, Positional::learned, 1), 1},
            {"post-norm, sinusoidal", small_config(Norm::post, Positional::sinusoidal), 2}};
}

TEST(KVCache, DecoderLMTokenByTokenMatchesFullPass) {
    const size_t B = 2, T = 12, V = 11, layers = 2, d_h = 8;
    for (const DecoderCase& c : decoder_cases()) {
        SCOPED_TRACE(c.what);
        Rng init(11), dropout_rng(12), data(13);
        DecoderLM model(c.config, init, &dropout_rng);
        model.eval();
        const Indices tokens = random_tokens(data, B, T, V);
        for (const Tensor& p : model.parameters()) ASSERT_EQ(p.dtype(), DType::f32);
        const std::vector<double> full = model.forward(tokens).values();

        DecoderCache cache;
        std::vector<Tensor> steps;
        for (size_t t = 0; t < T; ++t) {
            Tensor step = model.forward_cached(token_columns(tokens, t, t + 1), cache);
            ASSERT_EQ(step.shape(), (Shape{B, 1, V}));
            steps.push_back(step);
            // the cache grows by one position per step, in every layer
            EXPECT_EQ(cache.position, t + 1);
            for (const auto& layer : cache.layers) EXPECT_EQ(layer.self.length(), t + 1);
            EXPECT_EQ(cache.bytes(), 2 * layers * B * c.kv_heads * (t + 1) * d_h * 4);
        }
        const std::vector<double> cached = concat_time(steps);
        EXPECT_LE(max_abs_diff(cached, full), kTol);

        ASSERT_EQ(cache.layers.size(), layers);
        const Tensor& k = cache.layers[0].self.k;
        EXPECT_EQ(k.shape(), (Shape{B, T, c.kv_heads * d_h}));  // heads side by side
        EXPECT_EQ(k.dtype(), DType::f32);
        EXPECT_FALSE(cache.layers[0].cross.k.defined());  // a decoder-only model has no cross cache
        EXPECT_EQ(cache.layers[0].cross.bytes(), 0u);
        EXPECT_EQ(cache.bytes(), 2 * layers * B * c.kv_heads * T * d_h * 4);
    }
}

TEST(KVCache, DecoderLMChunksMatchFullPass) {
    Rng init(11), dropout_rng(12), data(13);
    DecoderLM model(small_config(Norm::pre, Positional::learned, 1), init, &dropout_rng);
    model.eval();
    const Indices tokens = random_tokens(data, 2, 12, 11);
    const std::vector<double> full = model.forward(tokens).values();
    DecoderCache cache;  // Tq < Tk after the first chunk: bottom-right causal mask
    EXPECT_LE(max_abs_diff(decode_in_chunks(model, tokens, {5, 1, 4, 2}, cache), full), kTol);
    EXPECT_EQ(cache.bytes(), 2u * 2 * 2 * 1 * 12 * 8 * 4);
}

// The weights a cached step returns are the full pass's rows for those queries.
TEST(KVCache, CachedWeightsAreTheFullPassRows) {
    const size_t B = 2, T = 6, H = 2;
    Rng init(11), dropout_rng(12), data(13);
    DecoderLM model(small_config(), init, &dropout_rng);
    model.eval();
    const Indices tokens = random_tokens(data, B, T, 11);
    Hooks full;  // every attention pattern, through the hook points
    full.record("*attn.pattern");
    recorded_forward(model, full, [&] { return model.forward(tokens, {}); });
    DecoderCache cache;
    for (size_t t = 0; t < T; ++t) {
        Hooks step;
        step.record("*attn.pattern");
        recorded_forward(model, step, [&] { return model.forward_cached(token_columns(tokens, t, t + 1), cache); });
        for (size_t l = 0; l < 2; ++l) {
            const std::string point = "blocks." + std::to_string(l) + ".attn.pattern";
            ASSERT_EQ(step.recorded(point).size(), 1u);
            const Tensor& got = step.last(point);
            const Tensor& want = full.last(point);
            ASSERT_EQ(got.shape(), (Shape{B, H, 1, t + 1}));
            for (size_t b = 0; b < B; ++b)
                for (size_t h = 0; h < H; ++h)
                    for (size_t j = 0; j <= t; ++j)
                        EXPECT_NEAR(got.at({b, h, 0, j}), want.at({b, h, t, j}), 1e-6)
                            << "layer " << l << " step " << t << " key " << j;
        }
    }
}

TEST(KVCache, EncoderDecoderDecodeCachedMatchesDecode) {
    const size_t B = 2, S = 7, T = 6, V = 11, layers = 2, d_h = 8;
    for (size_t kv_heads : {2u, 1u}) {
        SCOPED_TRACE("kv_heads " + std::to_string(kv_heads));
        Rng init(21), dropout_rng(22), data(23);
        EncoderDecoder model(small_config(Norm::pre, Positional::learned, kv_heads), init, &dropout_rng);
        model.eval();
        const std::vector<size_t> src_lengths = {4, 7};
        const Indices src = random_tokens(data, B, S, V);
        const Indices tgt = random_tokens(data, B, T, V);
        const Tensor memory = model.encode(src, src_lengths);
        const std::vector<double> full = model.decode(memory, src_lengths, tgt).values();

        DecoderCache cache;
        std::vector<Tensor> steps;
        for (size_t t = 0; t < T; ++t) {
            steps.push_back(model.decode_cached(memory, src_lengths, token_columns(tgt, t, t + 1), cache));
            const size_t self_bytes = 2 * layers * B * kv_heads * (t + 1) * d_h * 4;
            const size_t cross_bytes = 2 * layers * B * kv_heads * S * d_h * 4;  // projected once, kept
            EXPECT_EQ(cache.bytes(), self_bytes + cross_bytes);
        }
        EXPECT_LE(max_abs_diff(concat_time(steps), full), kTol);
        size_t self_only = 0;
        for (const auto& layer : cache.layers) {
            EXPECT_EQ(layer.self.length(), T);
            EXPECT_EQ(layer.cross.length(), S);
            self_only += layer.self.bytes();
        }
        EXPECT_EQ(self_only, 2 * layers * B * kv_heads * T * d_h * 4);
    }
}

TEST(KVCache, KVCacheBytesFormula) {
    KVCache empty;
    EXPECT_EQ(empty.bytes(), 0u);
    EXPECT_EQ(empty.length(), 0u);
    KVCache c;
    c.k = Tensor::zeros({3, 5, 2 * 4});  // (B, T, H_kv d_h)
    c.v = Tensor::zeros({3, 5, 2 * 4});
    EXPECT_EQ(c.length(), 5u);
    EXPECT_EQ(c.bytes(), 2u * 3 * 2 * 5 * 4 * 4);
    c.k = Tensor::zeros({3, 5, 2 * 4}, DType::f64);
    c.v = Tensor::zeros({3, 5, 2 * 4}, DType::f64);
    EXPECT_EQ(c.bytes(), 2u * 3 * 2 * 5 * 4 * 8);
}

// Past max_len the cached path fails like the full one, naming the positions.
TEST(KVCache, DecodingPastMaxLenIsAnError) {
    Rng init(1), dropout_rng(2), data(3);
    DecoderLM model(small_config(), init, &dropout_rng);
    model.eval();
    DecoderCache cache;
    model.forward_cached(random_tokens(data, 1, 16, 11), cache);
    const std::string message = error_message([&] { model.forward_cached(random_tokens(data, 1, 1, 11), cache); });
    EXPECT_TRUE(starts_with(message, "[positional]")) << message;
    EXPECT_TRUE(contains(message, "17") && contains(message, "16")) << message;
    EXPECT_EQ(cache.position, 16u);  // the failed step left the cache as it was
    for (const auto& layer : cache.layers) EXPECT_EQ(layer.self.length(), 16u);
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

using namespace layer_testing;

// A sliding window of W (AttentionVariant::window): the cache keeps only the last
// W keys and values of each layer, and decoding token by token or in chunks still
// gives the full pass's logits, with every positional encoding (rotary's offset
// and ALiBi's distances count positions seen, not positions kept).
TEST(KVCache, SlidingWindowKeepsWKeysAndMatchesFullPass) {
    const size_t B = 2, T = 12, W = 3;
    for (const Positional positional : {Positional::learned, Positional::rotary, Positional::alibi}) {
        SCOPED_TRACE(static_cast<int>(positional));
        ModelConfig config = small_config(Norm::pre, positional, 1);
        config.variant.window = W;
        Rng init(11), dropout_rng(12), data(13);
        DecoderLM model(config, init, &dropout_rng);
        model.eval();
        const Indices tokens = random_tokens(data, B, T, 11);
        const std::vector<double> full = model.forward(tokens).values();
        DecoderCache cache;
        std::vector<Tensor> steps;
        for (size_t t = 0; t < T; ++t) {
            steps.push_back(model.forward_cached(token_columns(tokens, t, t + 1), cache));
            for (const auto& layer : cache.layers) EXPECT_EQ(layer.self.length(), std::min(t + 1, W));
        }
        EXPECT_LE(max_abs_diff(concat_time(steps), full), kTol);
        EXPECT_EQ(cache.bytes(), 2u * 2 * B * 1 * W * 8 * 4);
        DecoderCache chunked;
        EXPECT_LE(max_abs_diff(decode_in_chunks(model, tokens, {5, 1, 4, 2}, chunked), full), kTol);
        // without the window's rule, the full pass differs: the test sees the window
        ModelConfig plain = config;
        plain.variant.window = 0;
        Rng init2(11), dropout2(12);
        DecoderLM unwindowed(plain, init2, &dropout2);
        unwindowed.eval();
        EXPECT_GT(max_abs_diff(unwindowed.forward(tokens).values(), full), 1e-4);
    }
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

using namespace layer_testing;

// Attention sinks: every self-attention holds `sink` (H), initialised to 0; the KV
// cache gives the full pass's logits with it; and the sink acts (a large sink
// logit takes the weight, changing the output).
TEST(KVCache, SinksAreAParameterPerHeadAndTheCacheMatchesFullPass) {
    ModelConfig config = small_config(Norm::pre, Positional::rotary, 1);
    config.variant.sinks = true;
    Rng init(11), dropout_rng(12), data(13);
    DecoderLM model(config, init, &dropout_rng);
    model.eval();
    size_t sinks = 0;
    for (const auto& [name, p] : model.named_parameters())
        if (name.size() > 5 && name.substr(name.size() - 5) == ".sink") {
            EXPECT_EQ(p.shape(), (Shape{2})) << name;
            EXPECT_EQ(p.values(), (std::vector<double>{0.0, 0.0})) << name;
            ++sinks;
        }
    EXPECT_EQ(sinks, 2u);  // one per block
    const Indices tokens = random_tokens(data, 2, 10, 11);
    const std::vector<double> full = model.forward(tokens).values();
    DecoderCache cache;  // token by token
    EXPECT_LE(max_abs_diff(decode_in_chunks(model, tokens, std::vector<size_t>(10, 1), cache), full), kTol);
    for (auto& [name, p] : model.named_parameters())
        if (name == "blocks.0.attn.sink") p.assign(Tensor::from_values({8.0, 8.0}, {2}));
    EXPECT_GT(max_abs_diff(model.forward(tokens).values(), full), 1e-3);
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

using namespace layer_testing;

// T5's relative bias: `rel_bias` (buckets, H) per self-attention; the KV cache
// (queries bottom-right aligned over the cached keys) gives the full pass's logits
// with a nonzero table, token by token and in chunks.
TEST(KVCache, RelativeBiasIsATablePerLayerAndTheCacheMatchesFullPass) {
    ModelConfig config = small_config(Norm::pre, Positional::none, 1);
    config.variant.rel_buckets = 8;
    config.variant.rel_max_distance = 6;
    Rng init(11), dropout_rng(12), data(13), values(14);
    DecoderLM model(config, init, &dropout_rng);
    model.eval();
    size_t tables = 0;
    for (auto& [name, p] : model.named_parameters())
        if (name.size() > 9 && name.substr(name.size() - 9) == ".rel_bias") {
            EXPECT_EQ(p.shape(), (Shape{8, 2})) << name;
            p.assign(values.normal({8, 2}, 0.0, 1.0));
            ++tables;
        }
    EXPECT_EQ(tables, 2u);
    const Indices tokens = random_tokens(data, 2, 12, 11);
    const std::vector<double> full = model.forward(tokens).values();
    for (const std::vector<size_t>& chunks : {std::vector<size_t>(12, 1), std::vector<size_t>{5, 1, 4, 2}}) {
        DecoderCache cache;
        EXPECT_LE(max_abs_diff(decode_in_chunks(model, tokens, chunks, cache), full), kTol);
    }
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

using namespace layer_testing;

// The token rules (prefix-LM and packed documents, autograd/variant.h): the cache
// keeps the tokens it has seen and reads their spans, so decoding in chunks gives
// the full pass's logits (with a sliding window too, whose cache keeps W keys);
// a chunk that would end a prefix begun in earlier chunks is refused in one line.
TEST(KVCache, TokenRulesReadTheCachedTokensAndMatchFullPass) {
    const size_t B = 2, T = 14;
    // row 0: <BOS> a b <SEP> c d <BOS> e <SEP> f g h i j; row 1: a b c <SEP> d e f <BOS> g h <SEP> i j k
    std::vector<int32_t> ids = {2, 3, 4, 1, 5, 6, 2, 7, 1, 8, 9, 3, 4, 5, 3, 4, 5, 1, 6, 7, 8, 2, 9, 3, 1, 4, 5, 6};
    const Indices tokens({B, T}, ids);
    for (const size_t window : {size_t{0}, size_t{5}})
        for (const int rules : {1, 2, 3}) {  // prefix-LM, documents, both
            SCOPED_TRACE("rules " + std::to_string(rules) + ", window " + std::to_string(window));
            ModelConfig config = small_config(Norm::pre, Positional::rotary, 1);
            config.variant.prefix_lm = rules & 1;
            config.variant.documents = rules & 2;
            config.variant.window = window;
            Rng init(11), dropout_rng(12);
            DecoderLM model(config, init, &dropout_rng);
            model.eval();
            const std::vector<double> full = model.forward(tokens).values();
            // chunks: every document's prefix whole in one call (row 0: 0-3 and 6-8; row 1: 0-3 and 7-10)
            DecoderCache cache;
            EXPECT_LE(max_abs_diff(decode_in_chunks(model, tokens, {4, 2, 5, 3}, cache), full), kTol);
            // the rule is seen: the plain model differs
            ModelConfig plain = small_config(Norm::pre, Positional::rotary, 1);
            plain.variant.window = window;
            Rng init2(11), dropout2(12);
            DecoderLM causal(plain, init2, &dropout2);
            causal.eval();
            EXPECT_GT(max_abs_diff(causal.forward(tokens).values(), full), 1e-4);
        }
    // Token by token, every prefix is split across calls: the decoder rebuilds its
    // cache from the tokens seen when a <SEP> ends one, so that each step's logits are
    // the full pass's over the tokens so far (the rows of a prefix before its <SEP> is
    // seen differ from the whole sequence's: they could not read what came later).
    ModelConfig config = small_config(Norm::pre, Positional::learned, 1);
    config.variant.prefix_lm = true;
    config.variant.documents = true;
    Rng init(11), dropout_rng(12);
    DecoderLM model(config, init, &dropout_rng);
    model.eval();
    DecoderCache cache;
    for (size_t t = 0; t < T; ++t) {
        const std::vector<double> step = model.forward_cached(token_columns(tokens, t, t + 1), cache).values();  // (B, 1, V)
        const std::vector<double> so_far = model.forward(token_columns(tokens, 0, t + 1)).values();  // (B, t + 1, V)
        std::vector<double> last;
        for (size_t b = 0; b < B; ++b)
            last.insert(last.end(), so_far.begin() + static_cast<std::ptrdiff_t>((b * (t + 1) + t) * 11),
                        so_far.begin() + static_cast<std::ptrdiff_t>((b * (t + 1) + t + 1) * 11));
        EXPECT_LE(max_abs_diff(step, last), kTol) << "step " << t;
    }
    EXPECT_EQ(cache.position, T);
    // The encoder-decoder's decoder (no config gives it these rules) refuses a split prefix in one line.
    Rng init2(11), dropout2(12);
    EncoderDecoder translator(config, init2, &dropout2);
    translator.eval();
    const Indices src({B, 3}, std::vector<int32_t>{3, 4, 5, 6, 7, 8});
    const Tensor memory = translator.encode(src, {3, 3});
    DecoderCache split;
    (void)translator.decode_cached(memory, {3, 3}, token_columns(tokens, 0, 2), split);  // row 0's prefix ends at 3
    try {
        (void)translator.decode_cached(memory, {3, 3}, token_columns(tokens, 2, 5), split);
        FAIL() << "a prefix split across cached calls was taken";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "[kv cache] prefix-LM: batch item 0's prefix (through its first <SEP>) ends at position 3"))
            << e.what();
    }
}

}  // namespace
}  // namespace attnlab
