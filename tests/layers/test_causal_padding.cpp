// The seed's information-boundary tests on whole models, on every code path.
//
// Causal perturbation: changing the token at position t never changes logits at
// positions < t. Padding invariance: whatever sits after a sequence's length
// never changes outputs at its valid positions.
//
// Comparisons between two runs of the SAME shapes are bitwise (EXPECT_EQ): every
// op computes row by row with a value-independent order (GEMM blocking depends
// on shapes only), masked keys get weight exactly 0, and 0 * finite = 0, so a
// changed ineligible input cannot reach an eligible output, not even by one ulp.
// Comparisons between runs of DIFFERENT shapes (a padded batch against a
// sequence run alone) use 1e-5: GEMMs of other sizes may sum in another order.
#include <optional>
#include <gtest/gtest.h>

#include "layer_test_util.h"

namespace attnlab {
namespace {

using namespace layer_testing;

enum class Path { eval, eval_maps, train, train_maps, cached_tokens, cached_chunks, cached_chunks_maps };
const char* name(Path p) {
    const char* names[] = {"eval", "eval+maps", "train(dropout 0)", "train(dropout 0)+maps", "cache, token by token",
                           "cache, chunks 3/2/3", "cache, chunks 3/2/3 + maps"};
    return names[static_cast<int>(p)];
}
constexpr Path kPaths[] = {Path::eval,          Path::eval_maps,     Path::train,           Path::train_maps,
                           Path::cached_tokens, Path::cached_chunks, Path::cached_chunks_maps};

// Logits (B, T, V) of `tokens` through the given code path, as row-major values.
std::vector<double> logits(DecoderLM& model, Path path, const Indices& tokens) {
    const bool training = path == Path::train || path == Path::train_maps;
    model.train(training);
    Hooks maps;  // the "+ maps" paths record every attention pattern through the hook points
    const bool want_maps = path == Path::eval_maps || path == Path::train_maps || path == Path::cached_chunks_maps;
    if (want_maps) maps.record("*attn.pattern");
    std::optional<HookScope> scope;
    if (want_maps) scope.emplace(model, maps);
    if (path == Path::eval || path == Path::eval_maps || training) {
        Tensor out = model.forward(tokens, {});
        if (want_maps) {
            for (size_t l = 0; l < model.blocks.size(); ++l)
                EXPECT_EQ(maps.recorded("blocks." + std::to_string(l) + ".attn.pattern").size(), 1u);
        }
        return out.values();
    }
    const size_t T = tokens.shape[1];
    std::vector<size_t> chunks = path == Path::cached_tokens ? std::vector<size_t>(T, 1) : std::vector<size_t>{3, 2, 3};
    DecoderCache cache;
    std::vector<Tensor> outs;
    size_t t0 = 0;
    for (size_t n : chunks) {
        outs.push_back(model.forward_cached(token_columns(tokens, t0, t0 + n), cache));
        t0 += n;
    }
    EXPECT_EQ(t0, T);
    EXPECT_EQ(cache.position, T);
    return concat_time(outs);
}

struct Variant {
    const char* what;
    ModelConfig config;
};

std::vector<Variant> causal_variants() {
    return {{"pre-norm, learned positions", small_config(Norm::pre, Positional::learned)},
            {"post-norm, learned positions", small_config(Norm::post, Positional::learned)},
            {"pre-norm, sinusoidal positions", small_config(Norm::pre, Positional::sinusoidal)},
            {"pre-norm, rotary positions", small_config(Norm::pre, Positional::rotary)},
            {"pre-norm, ALiBi", small_config(Norm::pre, Positional::alibi)}};
}

TEST(CausalPerturbation, DecoderLMEveryPathEveryPosition) {
    const size_t B = 2, T = 8, V = 11;
    for (const Variant& variant : causal_variants()) {
        Rng init(7), dropout_rng(8), data(9);
        DecoderLM model(variant.config, init, &dropout_rng);
        const Indices base = random_tokens(data, B, T, V);
        for (Path path : kPaths) {
            SCOPED_TRACE(std::string(variant.what) + ", " + name(path));
            const std::vector<double> before = logits(model, path, base);
            ASSERT_EQ(before.size(), B * T * V);
            for (size_t t = 0; t < T; ++t) {
                Indices changed = base;
                for (size_t b = 0; b < B; ++b)
                    changed.values[b * T + t] = static_cast<int32_t>((base.values[b * T + t] + 1 + t) % V);
                const std::vector<double> after = logits(model, path, changed);
                size_t differing_at_t = 0;
                for (size_t b = 0; b < B; ++b)
                    for (size_t s = 0; s <= t; ++s)
                        for (size_t v = 0; v < V; ++v) {
                            const size_t k = (b * T + s) * V + v;
                            if (s < t) {
                                ASSERT_EQ(before[k], after[k]) << "changed position " << t << ", logit at b=" << b << " s=" << s;
                            } else if (before[k] != after[k]) {
                                ++differing_at_t;
                            }
                        }
                // not vacuous: the changed position itself does see its new token
                EXPECT_GT(differing_at_t, 0u) << "changing position " << t << " changed nothing at " << t;
            }
        }
    }
}

// The cached path and the full path agree on the unperturbed batch too (not bitwise:
// different GEMM shapes), so the perturbation test above covers one model, not two.
TEST(CausalPerturbation, PathsAgreeOnTheSameTokens) {
    Rng init(7), dropout_rng(8), data(9);
    DecoderLM model(small_config(), init, &dropout_rng);
    const Indices tokens = random_tokens(data, 2, 8, 11);
    const std::vector<double> reference = logits(model, Path::eval, tokens);
    for (Path path : kPaths) {
        SCOPED_TRACE(name(path));
        EXPECT_LE(max_abs_diff(logits(model, path, tokens), reference), 1e-5);
    }
}

// ---- padding invariance ----

// Row b of `tokens` with every position >= lengths[b] replaced by (seed + position) % vocab.
Indices with_padding(const Indices& tokens, const std::vector<size_t>& lengths, int32_t seed, size_t vocab) {
    Indices out = tokens;
    const size_t T = tokens.shape[1];
    for (size_t b = 0; b < lengths.size(); ++b)
        for (size_t t = lengths[b]; t < T; ++t) out.values[b * T + t] = static_cast<int32_t>((seed + 3 * t + b) % vocab);
    return out;
}

// Values (B, T, W) at positions t < lengths[b]: bitwise equal.
void expect_valid_positions_equal(const Tensor& a, const Tensor& b, const std::vector<size_t>& lengths) {
    ASSERT_EQ(a.shape(), b.shape());
    const size_t T = a.size(1), W = a.size(2);
    const std::vector<double> va = a.values(), vb = b.values();
    EXPECT_TRUE(all_finite(va) && all_finite(vb));
    for (size_t batch = 0; batch < lengths.size(); ++batch)
        for (size_t t = 0; t < lengths[batch]; ++t)
            for (size_t w = 0; w < W; ++w) {
                const size_t k = (batch * T + t) * W + w;
                ASSERT_EQ(va[k], vb[k]) << "batch item " << batch << ", position " << t << ", feature " << w;
            }
}

// Valid positions of batch item b of `padded` (B, T, W) against `alone` (1, lengths[b], W).
void expect_matches_alone(const Tensor& padded, size_t b, const Tensor& alone, size_t length) {
    const size_t T = padded.size(1), W = padded.size(2);
    ASSERT_EQ(alone.shape(), (Shape{1, length, W}));
    const std::vector<double> vp = padded.values(), va = alone.values();
    double worst = 0.0;
    for (size_t t = 0; t < length; ++t)
        for (size_t w = 0; w < W; ++w) worst = std::max(worst, std::abs(vp[(b * T + t) * W + w] - va[t * W + w]));
    EXPECT_LE(worst, 1e-5) << "batch item " << b;
}

// The self-attention tests run for each kind of positions: rotary positions and
// ALiBi depend on the absolute index too, and right padding moves no valid position.
class SelfAttentionPadding : public ::testing::TestWithParam<Positional> {};
INSTANTIATE_TEST_SUITE_P(Positions, SelfAttentionPadding,
                         ::testing::Values(Positional::learned, Positional::rotary, Positional::alibi),
                         [](const auto& info) { return to_string(info.param); });

TEST_P(SelfAttentionPadding, DecoderLMSelfAttention) {
    Rng init(3), dropout_rng(4), data(5);
    DecoderLM model(small_config(Norm::pre, GetParam()), init, &dropout_rng);
    model.eval();
    const std::vector<size_t> lengths = {5, 8};
    const Indices tokens = random_tokens(data, 2, 8, 11);
    const Tensor a = model.forward(with_padding(tokens, lengths, 1, 11), lengths);
    const Tensor b = model.forward(with_padding(tokens, lengths, 6, 11), lengths);
    expect_valid_positions_equal(a, b, lengths);
    Hooks maps;
    maps.record("*attn.pattern");
    expect_valid_positions_equal(a, recorded_forward(model, maps, [&] { return model.forward(with_padding(tokens, lengths, 9, 11), lengths); }), lengths);
    for (size_t b_item = 0; b_item < 2; ++b_item)
        expect_matches_alone(a, b_item, model.forward(token_row(tokens, b_item, lengths[b_item])), lengths[b_item]);
}

struct Seq2SeqBatch {
    std::vector<size_t> src_lengths = {4, 7}, tgt_lengths = {3, 6};
    Indices src, tgt;
    explicit Seq2SeqBatch(Rng& data) : src(random_tokens(data, 2, 7, 11)), tgt(random_tokens(data, 2, 6, 11)) {}
};

TEST_P(SelfAttentionPadding, EncoderSelfAttention) {
    Rng init(3), dropout_rng(4), data(5);
    EncoderDecoder model(small_config(Norm::pre, GetParam()), init, &dropout_rng);
    model.eval();
    Seq2SeqBatch batch(data);
    const Tensor a = model.encode(with_padding(batch.src, batch.src_lengths, 2, 11), batch.src_lengths);
    const Tensor b = model.encode(with_padding(batch.src, batch.src_lengths, 7, 11), batch.src_lengths);
    ASSERT_EQ(a.shape(), (Shape{2, 7, 16}));
    expect_valid_positions_equal(a, b, batch.src_lengths);
    for (size_t i = 0; i < 2; ++i) {
        const size_t n = batch.src_lengths[i];
        expect_matches_alone(a, i, model.encode(token_row(batch.src, i, n), {n}), n);
    }
}

TEST_P(SelfAttentionPadding, DecoderSelfAttentionWithTargetLengths) {
    Rng init(3), dropout_rng(4), data(5);
    EncoderDecoder model(small_config(Norm::pre, GetParam()), init, &dropout_rng);
    model.eval();
    Seq2SeqBatch batch(data);
    const Tensor memory = model.encode(batch.src, batch.src_lengths);
    const Tensor a = model.decode(memory, batch.src_lengths, with_padding(batch.tgt, batch.tgt_lengths, 1, 11), batch.tgt_lengths);
    const Tensor b = model.decode(memory, batch.src_lengths, with_padding(batch.tgt, batch.tgt_lengths, 5, 11), batch.tgt_lengths);
    ASSERT_EQ(a.shape(), (Shape{2, 6, 11}));
    expect_valid_positions_equal(a, b, batch.tgt_lengths);
    Hooks maps;
    maps.record("*attn.pattern");
    const Tensor c = recorded_forward(model, maps, [&] {
        return model.decode(memory, batch.src_lengths, with_padding(batch.tgt, batch.tgt_lengths, 8, 11), batch.tgt_lengths);
    });
    expect_valid_positions_equal(a, c, batch.tgt_lengths);
}

TEST(PaddingInvariance, CrossAttentionIgnoresPaddedSource) {
    Rng init(3), dropout_rng(4), data(5);
    EncoderDecoder model(small_config(), init, &dropout_rng);
    model.eval();
    Seq2SeqBatch batch(data);
    const Indices src_a = with_padding(batch.src, batch.src_lengths, 2, 11);
    const Indices src_b = with_padding(batch.src, batch.src_lengths, 9, 11);
    // The encoder output at padded positions does change (the padded queries see new
    // tokens), so the test is not vacuous: only the cross mask keeps it out.
    const std::vector<double> mem_a = model.encode(src_a, batch.src_lengths).values();
    const std::vector<double> mem_b = model.encode(src_b, batch.src_lengths).values();
    EXPECT_GT(max_abs_diff(mem_a, mem_b), 1e-3);
    const std::vector<size_t> all_positions = {6, 6};
    const Tensor a = model.forward(src_a, batch.src_lengths, batch.tgt);
    const Tensor b = model.forward(src_b, batch.src_lengths, batch.tgt);
    expect_valid_positions_equal(a, b, all_positions);
    Hooks maps;
    maps.record("*attn.pattern");
    expect_valid_positions_equal(a, recorded_forward(model, maps, [&] { return model.forward(src_b, batch.src_lengths, batch.tgt, {}); }),
                                 all_positions);
    ASSERT_TRUE(maps.has_recorded("decoder.0.cross_attn.pattern") && maps.has_recorded("decoder.1.cross_attn.pattern"));
    for (size_t i = 0; i < 2; ++i) {
        const size_t n = batch.src_lengths[i];
        expect_matches_alone(a, i, model.forward(token_row(batch.src, i, n), {n}, token_row(batch.tgt, i, 6)), 6);
    }
}

}  // namespace
}  // namespace attnlab
