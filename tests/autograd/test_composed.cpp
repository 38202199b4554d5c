// Every fused op against its composition of elementary ops (autograd/composed.h),
// in float64: the same values and the same gradients for every input, on
// several shapes, so each fast path is checked against the maths it stands for.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/composed.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "expect.h"

namespace attnlab {
namespace {

using testing::expect_rule_on_fused_paths;
using testing::expect_same;
using testing::Op;

using V = const std::vector<Tensor>&;

TEST(Composed, LinearIsXWTransposedPlusB) {
    Rng rng(1);
    for (const Shape& x : {Shape{3, 4}, Shape{2, 5, 4}}) {
        const std::vector<Tensor> in = {gradcheck_input(rng, x), gradcheck_input(rng, {6, 4}), gradcheck_input(rng, {6})};
        expect_same("linear " + shape_str(x), [](V t) { return linear(t[0], t[1], t[2]); },
                    [](V t) { return composed::linear(t[0], t[1], t[2]); }, in);
        expect_same("linear without bias " + shape_str(x), [](V t) { return linear(t[0], t[1], Tensor()); },
                    [](V t) { return composed::linear(t[0], t[1], Tensor()); }, {in[0], in[1]});
    }
}

TEST(Composed, SoftmaxIsExpOverItsSum) {
    Rng rng(2);
    const Tensor x = gradcheck_input(rng, {2, 3, 7}, -5, 5);
    for (int axis : {-1, 1})
        expect_same("softmax axis " + std::to_string(axis), [axis](V t) { return softmax(t[0], axis); },
                    [axis](V t) { return composed::softmax(t[0], axis); }, {x});
}

TEST(Composed, LayerNormAndRmsNormAreTheirFormulas) {
    Rng rng(3);
    for (const Shape& x : {Shape{4, 8}, Shape{2, 3, 5}, Shape{1, 1, 1}}) {
        const size_t D = x.back();
        const std::vector<Tensor> in = {gradcheck_input(rng, x, -3, 3), gradcheck_input(rng, {D}), gradcheck_input(rng, {D})};
        for (double eps : {1e-5, 0.1}) {
            const std::string at = shape_str(x) + " eps " + std::to_string(eps);
            expect_same("layer_norm " + at, [eps](V t) { return layer_norm(t[0], t[1], t[2], eps); },
                        [eps](V t) { return composed::layer_norm(t[0], t[1], t[2], eps); }, in);
            expect_same("rms_norm " + at, [eps](V t) { return rms_norm(t[0], t[1], eps); },
                        [eps](V t) { return composed::rms_norm(t[0], t[1], eps); }, {in[0], in[1]});
            expect_same("layer_norm without weight or bias " + at, [eps](V t) { return layer_norm(t[0], Tensor(), Tensor(), eps); },
                        [eps](V t) { return composed::layer_norm(t[0], Tensor(), Tensor(), eps); }, {in[0]});
        }
    }
}

TEST(Composed, RotaryTurnsEachHeadsHalves) {
    Rng rng(4);
    struct Case {
        Shape x;
        size_t heads, offset;
        double base;
    };
    for (const Case& c : {Case{{2, 3, 8}, 2, 0, 10000.0}, Case{{1, 5, 6}, 1, 7, 100.0}, Case{{2, 1, 12}, 3, 129, 10000.0}})
        expect_same("rotary " + shape_str(c.x) + " offset " + std::to_string(c.offset),
                    [c](V t) { return rotary(t[0], c.heads, c.offset, c.base); },
                    [c](V t) { return composed::rotary(t[0], c.heads, c.offset, c.base); }, {gradcheck_input(rng, c.x)});
}

TEST(Composed, CrossEntropyIsTheMaskedMeanOfMinusLogSoftmax) {
    Rng rng(5);
    const Tensor logits = gradcheck_input(rng, {2, 3, 5}, -4, 4);
    const Indices targets({2, 3}, {0, 4, 2, 1, 1, 3});
    const Mask some({2, 3}, {1, 0, 1, 1, 0, 0}), none({2, 3}, {0, 0, 0, 0, 0, 0});
    for (const auto& [name, mask] : {std::pair<std::string, Mask>{"all positions", Mask()}, {"a mask", some}, {"nothing counted", none}})
        expect_same("cross_entropy, " + name, [&](V t) { return cross_entropy(t[0], targets, mask); },
                    [&](V t) { return composed::cross_entropy(t[0], targets, mask); }, {logits});
}

TEST(Composed, AttentionIsSoftmaxOfTheScoresTimesV) {
    Rng rng(6);
    struct Case {
        const char* what;
        size_t B, H, H_kv, Tq, Tk, d, d_v;
        AttentionMask mask;
        MaskedRows rows = MaskedRows::error;
    };
    AttentionMask none, causal, padding, both, alibi, empty_row;
    causal.causal = true;
    padding.key_lengths = {5, 2};
    both = padding;
    both.causal = true;
    alibi = both;
    alibi.variant.alibi = true;
    empty_row.key_lengths = {5, 0};  // item 1 has no eligible key at all
    for (const Case& c : {Case{"no mask", 2, 2, 2, 5, 5, 4, 4, none}, Case{"causal", 2, 2, 2, 5, 5, 4, 4, causal},
                          Case{"causal and padding, grouped K/V", 2, 4, 2, 5, 5, 4, 4, both},
                          Case{"cached decoding, Tq 2 < Tk 6", 2, 2, 2, 2, 6, 4, 3, causal},
                          Case{"cross shapes", 2, 2, 1, 3, 7, 4, 3, padding}, Case{"ALiBi", 2, 4, 2, 5, 5, 4, 4, alibi},
                          Case{"rows with no key, policy zero", 2, 2, 2, 5, 5, 4, 4, empty_row, MaskedRows::zero}}) {
        const std::vector<Tensor> in = {gradcheck_input(rng, {c.B, c.Tq, c.H * c.d}), gradcheck_input(rng, {c.B, c.Tk, c.H_kv * c.d}),
                                        gradcheck_input(rng, {c.B, c.Tk, c.H_kv * c.d_v})};
        const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
        expect_same(std::string("attention, ") + c.what,
                    [&](V t) {
                        AttentionOptions options;
                        options.scale = scale;
                        options.masked_rows = c.rows;
                        return attention_packed(t[0], t[1], t[2], c.H, c.H_kv, c.mask, options).context;
                    },
                    [&](V t) { return composed::attention(t[0], t[1], t[2], c.H, c.H_kv, c.mask, scale, c.rows); }, in);
    }
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// Logit soft-capping (AttentionVariant::softcap, autograd/variant.h): the scores
// composed of ops are C tanh(s / C) of the scaled scores, -inf where masked;
// its gradients pass float64 central differences at several lengths; the
// fused attention op computes the same in its kernels.
TEST(AttentionVariant, SoftcapCapsTheScaledScoresAndItsGradientsCheck) {
    constexpr size_t kKeyBlockForTests = 128;  // attention_kernels.h's kKeyBlock: T = 129 spans two blocks
    Rng rng(41);
    AttentionMask mask;
    mask.causal = true;
    mask.variant.softcap = 2.0;
    const Tensor q = rng.normal({1, 3, 4}, 0.0, 2.0, DType::f64), k = rng.normal({1, 3, 4}, 0.0, 2.0, DType::f64);
    const std::vector<double> s = attention_scores(q, k, 2, 2, mask, 0.5).values();  // (1, 2, 3, 3)
    const std::vector<double> Q = q.values(), K = k.values();
    for (size_t h = 0; h < 2; ++h)
        for (size_t i = 0; i < 3; ++i)
            for (size_t j = 0; j < 3; ++j) {
                const double got = s[(h * 3 + i) * 3 + j];
                if (j > i) {
                    EXPECT_TRUE(std::isinf(got) && got < 0) << h << i << j;
                    continue;
                }
                double dot = 0;
                for (size_t c = 0; c < 2; ++c) dot += Q[i * 4 + h * 2 + c] * K[j * 4 + h * 2 + c];
                EXPECT_NEAR(got, 2.0 * std::tanh(0.5 * dot / 2.0), 1e-12) << h << i << j;
                EXPECT_LT(std::abs(got), 2.0);
            }
    for (const size_t T : {1, 7}) {
        AttentionMask padded = mask;
        padded.key_lengths = {T, (T + 1) / 2};
        const GradcheckCase c{"softcap", "attention composed of ops, T = " + std::to_string(T),
                              {gradcheck_input(rng, {2, T, 4}, -3, 3), gradcheck_input(rng, {2, T, 2}, -3, 3),
                               gradcheck_input(rng, {2, T, 2})},
                              [padded](const std::vector<Tensor>& t) {
                                  return composed::attention(t[0], t[1], t[2], 2, 1, padded, 0.7, MaskedRows::error);
                              }};
        const GradcheckResult r = gradcheck(c);
        EXPECT_TRUE(r.passed) << c.name << ": " << r.failure;
    }
    // The fused op computes the cap inside its kernels (dense and blockwise), from
    // SoftCap's one definition: the composition's values and gradients, and its own
    // gradients check, at lengths within one key block and across two (129).
    for (const size_t T : {1, 7, 129})
        for (AttentionPath path : {AttentionPath::dense, AttentionPath::blockwise}) {
            const size_t B = T > kKeyBlockForTests ? 1 : 2;  // one item across two key blocks keeps the check short
            AttentionMask padded = mask;
            padded.key_lengths = B == 1 ? std::vector<size_t>{T} : std::vector<size_t>{T, (T + 1) / 2};
            AttentionOptions options;
            options.scale = 0.7;
            options.path = path;
            const std::string at = "T = " + std::to_string(T) + (path == AttentionPath::dense ? " (dense)" : " (blockwise)");
            const std::vector<Tensor> in = {gradcheck_input(rng, {B, T, 4}, -3, 3), gradcheck_input(rng, {B, T, 2}, -3, 3),
                                            gradcheck_input(rng, {B, T, 2})};
            const auto fused = [padded, options](V t) { return attention_packed(t[0], t[1], t[2], 2, 1, padded, options).context; };
            expect_same("softcap, fused against composed, " + at, fused,
                        [padded](V t) { return composed::attention(t[0], t[1], t[2], 2, 1, padded, 0.7, MaskedRows::error); }, in);
            const GradcheckResult r = gradcheck({"softcap", "the fused op, " + at, in, fused});
            EXPECT_TRUE(r.passed) << at << ": " << r.failure;
        }
    // sinks and T5's bias stay composed of ops: the fused op refuses them in one line
    AttentionMask sinks = mask;
    sinks.variant.sinks = true;
    try {
        AttentionOptions options;
        (void)attention_packed(q, k, k, 2, 2, sinks, options);
        FAIL() << "the fused op took sinks";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("sinks and T5's relative bias have no fused kernel"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// The sliding window (AttentionVariant::window, autograd/variant.h), by hand:
// causal, i - W < j <= i; an encoder's, |i - j| < W; queries bottom-right aligned
// over a KV cache; a padding query reads the last W keys of its item.
TEST(AttentionVariant, WindowKeepsTheLastWKeysOfEachQuery) {
    AttentionMask causal;
    causal.causal = true;
    causal.variant.window = 3;
    AttentionMask encoder;
    encoder.variant.window = 2;
    for (size_t i = 0; i < 6; ++i)
        for (size_t j = 0; j < 6; ++j) {
            EXPECT_EQ(causal.allows(0, i, j, 6, 6), i < j + 3 && j <= i) << i << " " << j;
            EXPECT_EQ(encoder.allows(0, i, j, 6, 6), i < j + 2 && j < i + 2) << i << " " << j;
        }
    for (size_t i = 0; i < 2; ++i)  // 2 new queries over 6 keys: positions 4 and 5
        for (size_t j = 0; j < 6; ++j) EXPECT_EQ(causal.allows(0, i, j, 2, 6), i + 4 < j + 3 && j <= i + 4) << i << j;
    AttentionMask padded = causal;
    padded.key_lengths = {4};
    for (size_t i = 4; i < 6; ++i)  // padding queries: as the last real one, position 3
        for (size_t j = 0; j < 6; ++j) EXPECT_EQ(padded.allows(0, i, j, 6, 6), j == 1 || j == 2 || j == 3) << i << j;
    EXPECT_EQ(encoder.key_end(0, 1, 6, 6), 3u);  // keys >= 3 are past query 1's window
    EXPECT_EQ(causal.key_end(0, 1, 6, 6), 2u);
    EXPECT_TRUE(causal.checks_each_key());
    EXPECT_FALSE(causal.variant.modifies_scores());
}

// The fused op applies the window on its dense and blockwise paths: values and
// every gradient equal attention composed of ops, and its gradients pass float64
// central differences, at lengths 1, 7 and 129 (no multiple of a tile), causal
// and an encoder's, with padding (an empty item under policy "zero": no NaN) and
// grouped K/V.
TEST(AttentionVariant, WindowOnTheFusedPathsMatchesComposedAndGradchecks) {
    Rng rng(43);
    for (const size_t T : {1, 7, 129})
        for (const bool causal : {true, false})
            for (const size_t W : {1, 4}) {
                AttentionMask mask;
                mask.causal = causal;
                mask.variant.window = W;
                mask.key_lengths = {T, (T + 1) / 2, 0};
                const std::vector<Tensor> in = {gradcheck_input(rng, {3, T, 4}, -2, 2), gradcheck_input(rng, {3, T, 2}, -2, 2),
                                                gradcheck_input(rng, {3, T, 2})};
                const std::string what = "window " + std::to_string(W) + (causal ? " causal" : " encoder") +
                                         ", T = " + std::to_string(T);
                // at T = 129 (slow: one backward per output element), one gradcheck: causal, W = 4, blockwise
                const bool all = T < 129, one = causal && W == 4;
                expect_rule_on_fused_paths(what, mask, in,
                                           all   ? std::vector<AttentionPath>{AttentionPath::dense, AttentionPath::blockwise}
                                           : one ? std::vector<AttentionPath>{AttentionPath::blockwise}
                                                 : std::vector<AttentionPath>{});
            }
    // Past the first key block (128 keys), the blockwise path skips the blocks before
    // every row's window: still the composed values and gradients.
    for (const size_t W : {4, 130}) {
        AttentionMask mask;
        mask.causal = true;
        mask.variant.window = W;
        mask.key_lengths = {300, 200};
        const std::vector<Tensor> in = {gradcheck_input(rng, {2, 300, 4}, -2, 2), gradcheck_input(rng, {2, 300, 2}, -2, 2),
                                        gradcheck_input(rng, {2, 300, 2})};
        AttentionOptions options;
        options.scale = 0.7;
        options.path = AttentionPath::blockwise;
        expect_same("window " + std::to_string(W) + ", T = 300, blockwise",
                    [&](V t) { return attention_packed(t[0], t[1], t[2], 2, 1, mask, options).context; },
                    [&](V t) { return composed::attention(t[0], t[1], t[2], 2, 1, mask, 0.7, MaskedRows::error); }, in);
    }
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// Attention sinks (AttentionVariant::sinks): each head's sink logit joins its rows'
// softmax as a key of value zero. By hand on one row; float64 gradcheck of
// attention composed of ops with the sink logits as an input, at lengths 1, 7 and
// 129, with padding and an empty item (policy "zero": finite, zero context).
TEST(AttentionVariant, SinksTakeTheirShareOfEveryRowAndGradcheck) {
    Rng rng(47);
    const Tensor scores = Tensor::from_values({0.5, -1.0, 2.0, 0.0, 1.0, -0.5}, {1, 2, 1, 3}, DType::f64);
    const Tensor sink = Tensor::from_values({1.5, -2.0}, {2}, DType::f64);
    const std::vector<double> w = without_sink(softmax(with_sink(scores, sink), -1), sink).values();
    const double x[2][3] = {{0.5, -1.0, 2.0}, {0.0, 1.0, -0.5}}, s[2] = {1.5, -2.0};
    for (size_t h = 0; h < 2; ++h) {
        const double z = std::exp(s[h]) + std::exp(x[h][0]) + std::exp(x[h][1]) + std::exp(x[h][2]);
        for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(w[h * 3 + j], std::exp(x[h][j]) / z, 1e-15) << h << j;
    }
    for (const size_t T : {1, 7, 129}) {
        AttentionMask mask;
        mask.causal = true;
        mask.variant.sinks = true;
        mask.key_lengths = {T, (T + 1) / 2, 0};
        const std::vector<Tensor> in = {gradcheck_input(rng, {3, T, 4}, -2, 2), gradcheck_input(rng, {3, T, 2}, -2, 2),
                                        gradcheck_input(rng, {3, T, 2}), gradcheck_input(rng, {2}, -2, 2)};
        auto fn = [mask](const std::vector<Tensor>& t) {
            return composed::attention(t[0], t[1], t[2], 2, 1, mask, 0.7, MaskedRows::zero, t[3]);
        };
        const std::vector<double> context = fn(in).values();
        for (const double c : context) ASSERT_TRUE(std::isfinite(c)) << T;
        for (size_t e = 2 * T * 4; e < 3 * T * 4; ++e) EXPECT_EQ(context[e], 0.0) << "the empty item, T = " << T;
        if (T == 129) {  // slow at full size: one batch item, both heads
            AttentionMask one = mask;
            one.key_lengths = {100};
            const std::vector<Tensor> small = {gradcheck_input(rng, {1, T, 4}, -2, 2), gradcheck_input(rng, {1, T, 2}, -2, 2),
                                               gradcheck_input(rng, {1, T, 2}), gradcheck_input(rng, {2}, -2, 2)};
            const GradcheckResult r = gradcheck({"attention", "sinks, T = 129", small, [one](const std::vector<Tensor>& t) {
                return composed::attention(t[0], t[1], t[2], 2, 1, one, 0.7, MaskedRows::zero, t[3]);
            }});
            EXPECT_TRUE(r.passed) << r.failure;
            continue;
        }
        const GradcheckResult r = gradcheck({"attention", "sinks, T = " + std::to_string(T), in, fn});
        EXPECT_TRUE(r.passed) << T << ": " << r.failure;
    }
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// T5's relative bias (AttentionVariant::rel_buckets): the buckets by hand, from the
// formula (decoder: 8 buckets, 4 exact, log up to 16; encoder: 8 halved by sign, 2
// exact, log up to 16), and float64 gradcheck of attention composed of ops with the
// bias table as an input, causal and an encoder's, at lengths 1, 7 and 129.
TEST(AttentionVariant, RelativeBiasBucketsAndGradcheck) {
    AttentionVariant v;
    v.rel_buckets = 8;
    v.rel_max_distance = 16;
    const std::vector<std::pair<long long, size_t>> decoder = {{0, 0}, {-1, 1}, {-3, 3}, {-4, 4}, {-8, 6},
                                                               {-15, 7}, {-100, 7}, {5, 0}};
    for (const auto& [relative, bucket] : decoder) EXPECT_EQ(relative_bucket(v, true, relative), bucket) << relative;
    // encoder: keys before the query in buckets 0..3, after it in 4..7
    const std::vector<std::pair<long long, size_t>> encoder = {{0, 0}, {-1, 1}, {1, 5}, {-3, 2}, {-7, 3}, {20, 7}, {2, 6}};
    for (const auto& [relative, bucket] : encoder) EXPECT_EQ(relative_bucket(v, false, relative), bucket) << relative;

    Rng rng(53);
    for (const size_t T : {1, 7, 129})
        for (const bool causal : {true, false}) {
            if (T == 129 && !causal) continue;  // slow at full size: one case
            AttentionMask mask;
            mask.causal = causal;
            mask.variant = v;
            const size_t B = T == 129 ? 1 : 2;
            mask.key_lengths = T == 129 ? std::vector<size_t>{100} : std::vector<size_t>{T, (T + 1) / 2};
            const std::vector<Tensor> in = {gradcheck_input(rng, {B, T, 4}, -2, 2), gradcheck_input(rng, {B, T, 2}, -2, 2),
                                            gradcheck_input(rng, {B, T, 2}), gradcheck_input(rng, {8, 2}, -2, 2)};
            auto fn = [mask](const std::vector<Tensor>& t) {
                return composed::attention(t[0], t[1], t[2], 2, 1, mask, 0.7, MaskedRows::zero, Tensor(), t[3]);
            };
            const GradcheckResult r = gradcheck({"attention", "relative bias, T = " + std::to_string(T), in, fn});
            EXPECT_TRUE(r.passed) << T << (causal ? " causal: " : " encoder: ") << r.failure;
            if (T == 7) {  // the table acts: another table, another output
                std::vector<Tensor> other = in;
                other[3] = gradcheck_input(rng, {8, 2}, -2, 2);
                double most = 0;
                const std::vector<double> a = fn(in).values(), b = fn(other).values();
                for (size_t e = 0; e < a.size(); ++e) most = std::max(most, std::abs(a[e] - b[e]));
                EXPECT_GT(most, 1e-3);
            }
        }
}

}  // namespace
}  // namespace attnlab
