// All-masked query rows (seed exercise 13; DESIGN "Masks"): policy "error" names
// the batch item and query position; policy "zero" gives a zero context, zero
// weights and zero gradient, and never a NaN, with or without returned weights.
#include <gtest/gtest.h>

#include "autograd/attention.h"
#include "layer_test_util.h"

namespace attnlab {
namespace {

using namespace layer_testing;

struct AttentionRun {
    Tensor q, k, v, context, weights;
};

// attention() on fresh leaves of the given shapes; backward with a random seed.
AttentionRun run_attention(const Shape& q_shape, const Shape& kv_shape, const AttentionMask& mask, MaskedRows policy,
                  bool need_weights, DType dtype = DType::f32) {
    Rng rng(31);
    AttentionRun r;
    r.q = rng.uniform(q_shape, -1, 1, dtype).set_requires_grad(true);
    r.k = rng.uniform(kv_shape, -1, 1, dtype).set_requires_grad(true);
    r.v = rng.uniform(kv_shape, -1, 1, dtype).set_requires_grad(true);
    AttentionOptions options;
    options.scale = 0.5;
    options.masked_rows = policy;
    options.need_weights = need_weights;
    AttentionResult out = attention(r.q, r.k, r.v, mask, options);
    r.context = out.context;
    r.weights = out.weights;
    out.context.backward(rng.uniform(out.context.shape(), -1, 1, dtype));
    return r;
}

// Values of (B, H, T, W) tensor `t` at batch item b and position i (every head), or all of b when i < 0.
std::vector<double> select(const Tensor& t, size_t b, long i = -1) {
    std::vector<double> out;
    for (size_t h = 0; h < t.size(1); ++h)
        for (size_t s = 0; s < t.size(2); ++s)
            if (i < 0 || s == static_cast<size_t>(i))
                for (size_t w = 0; w < t.size(3); ++w) out.push_back(t.at({b, h, s, w}));
    return out;
}

bool all_zero(const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; });
}

AttentionMask lengths_mask(std::vector<size_t> lengths) {
    AttentionMask m;
    m.key_lengths = std::move(lengths);
    return m;
}

TEST(MaskedRows, ErrorPolicyNamesBatchItemAndQueryForKeyLengthZero) {
    for (bool need_weights : {false, true}) {
        const std::string message = error_message(
            [&] { run_attention({2, 2, 3, 4}, {2, 2, 4, 4}, lengths_mask({4, 0}), MaskedRows::error, need_weights); });
        EXPECT_TRUE(starts_with(message, "[attention]")) << message;
        EXPECT_TRUE(contains(message, "batch item 1")) << message;
        EXPECT_TRUE(contains(message, "query position 0")) << message;
    }
}

TEST(MaskedRows, ErrorPolicyNamesTheAllFalseRowOfAnExplicitMask) {
    AttentionMask batched;
    std::vector<uint8_t> values(2 * 3 * 4, 1);
    for (size_t j = 0; j < 4; ++j) values[(1 * 3 + 2) * 4 + j] = 0;  // batch item 1, query 2: no key
    batched.eligible = Mask({2, 3, 4}, values);
    std::string message = error_message([&] { run_attention({2, 1, 3, 2}, {2, 1, 4, 2}, batched, MaskedRows::error, true); });
    EXPECT_TRUE(contains(message, "batch item 1") && contains(message, "query position 2")) << message;

    AttentionMask shared;  // (Tq, Tk), row 1 empty: every batch item fails, item 0 first
    shared.eligible = Mask({3, 4}, {1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1});
    message = error_message([&] { run_attention({2, 1, 3, 2}, {2, 1, 4, 2}, shared, MaskedRows::error, false); });
    EXPECT_TRUE(contains(message, "batch item 0") && contains(message, "query position 1")) << message;
}

TEST(MaskedRows, ZeroPolicyKeyLengthZero) {
    for (DType dtype : {DType::f32, DType::f64})
        for (bool need_weights : {false, true}) {
            SCOPED_TRACE(to_string(dtype) + (need_weights ? ", weights" : ", no weights"));
            AttentionRun r = run_attention({2, 2, 3, 4}, {2, 2, 4, 4}, lengths_mask({4, 0}), MaskedRows::zero, need_weights, dtype);
            EXPECT_TRUE(all_zero(select(r.context, 1)));   // zero context for the empty item
            EXPECT_FALSE(all_zero(select(r.context, 0)));  // the other item is untouched
            for (const Tensor* t : {&r.context, &r.q, &r.k, &r.v}) EXPECT_TRUE(all_finite(t->values()));
            for (const Tensor* t : {&r.q, &r.k, &r.v}) {
                ASSERT_TRUE(t->grad().defined());
                EXPECT_TRUE(all_finite(t->grad().values()));
                EXPECT_TRUE(all_zero(select(t->grad(), 1)));  // nothing of item 1 was used
                EXPECT_FALSE(all_zero(select(t->grad(), 0)));
            }
            EXPECT_EQ(r.weights.defined(), need_weights);
            if (need_weights) {
                EXPECT_TRUE(all_finite(r.weights.values()));
                EXPECT_TRUE(all_zero(select(r.weights, 1)));
            }
        }
}

TEST(MaskedRows, ZeroPolicyExplicitRowZeroesOnlyThatQuery) {
    AttentionMask mask;
    mask.eligible = Mask({3, 3}, {1, 0, 1, 0, 0, 0, 1, 1, 0});  // query 1 has no key
    const AttentionRun without = run_attention({2, 2, 3, 2}, {2, 2, 3, 2}, mask, MaskedRows::zero, false);
    const AttentionRun with = run_attention({2, 2, 3, 2}, {2, 2, 3, 2}, mask, MaskedRows::zero, true);
    for (size_t b = 0; b < 2; ++b) {
        EXPECT_TRUE(all_zero(select(with.context, b, 1)));
        EXPECT_TRUE(all_zero(select(with.q.grad(), b, 1)));  // exactly zero gradient to that query
        EXPECT_TRUE(all_zero(select(with.weights, b, 1)));
        EXPECT_FALSE(all_zero(select(with.q.grad(), b, 0)));
        EXPECT_FALSE(all_zero(select(with.q.grad(), b, 2)));
    }
    // asking for weights changes nothing, forward or backward
    EXPECT_EQ(with.context.values(), without.context.values());
    EXPECT_EQ(with.q.grad().values(), without.q.grad().values());
    EXPECT_EQ(with.k.grad().values(), without.k.grad().values());
    EXPECT_EQ(with.v.grad().values(), without.v.grad().values());
}

// Causal with Tq = 4 > Tk = 2: query i sees j <= i - 2, so queries 0 and 1 see nothing.
TEST(MaskedRows, CausalWithMoreQueriesThanKeys) {
    AttentionMask causal;
    causal.causal = true;
    const std::string message =
        error_message([&] { run_attention({1, 1, 4, 3}, {1, 1, 2, 3}, causal, MaskedRows::error, false); });
    EXPECT_TRUE(contains(message, "batch item 0") && contains(message, "query position 0")) << message;

    const AttentionRun r = run_attention({1, 1, 4, 3}, {1, 1, 2, 3}, causal, MaskedRows::zero, true, DType::f64);
    for (long i : {0L, 1L}) {
        EXPECT_TRUE(all_zero(select(r.context, 0, i))) << "query " << i;
        EXPECT_TRUE(all_zero(select(r.weights, 0, i))) << "query " << i;
        EXPECT_TRUE(all_zero(select(r.q.grad(), 0, i))) << "query " << i;
    }
    // query 2 sees key 0 only: weight exactly 1 and its context is v_0
    EXPECT_EQ(r.weights.at({0, 0, 2, 0}), 1.0);
    EXPECT_EQ(r.weights.at({0, 0, 2, 1}), 0.0);
    for (size_t w = 0; w < 3; ++w) EXPECT_EQ(r.context.at({0, 0, 2, w}), r.v.at({0, 0, 0, w}));
    EXPECT_NEAR(r.weights.at({0, 0, 3, 0}) + r.weights.at({0, 0, 3, 1}), 1.0, 1e-12);
    EXPECT_TRUE(all_zero(select(r.q.grad(), 0, 2)));  // a single eligible key: softmax has zero gradient
    EXPECT_FALSE(all_zero(select(r.q.grad(), 0, 3)));
    for (const Tensor* t : {&r.q, &r.k, &r.v}) EXPECT_TRUE(all_finite(t->grad().values()));
}

TEST(MaskedRows, MultiHeadAttentionZeroPolicyThroughConfig) {
    const size_t B = 2, T = 3, D = 8;
    for (bool need_weights : {false, true}) {
        SCOPED_TRACE(need_weights ? "with weights" : "without weights");
        AttentionConfig config = attention_config(D, 2);
        config.masked_rows = MaskedRows::zero;
        Rng init(41), data(42);
        MultiHeadAttention mha(config, init, nullptr);
        EXPECT_EQ(mha.masked_rows, MaskedRows::zero);
        Tensor x = data.uniform({B, T, D}, -1, 1).set_requires_grad(true);
        MultiHeadAttention::Output out = mha.forward(x, x, lengths_mask({3, 0}), need_weights);
        // zero context: the output of item 1 is the output projection's bias, exactly
        const std::vector<double> bias = mha.out_proj.bias.values();
        for (size_t t = 0; t < T; ++t)
            for (size_t d = 0; d < D; ++d) EXPECT_EQ(out.out.at({1, t, d}), bias[d]) << "position " << t;
        out.out.backward(data.uniform(out.out.shape(), -1, 1));
        EXPECT_TRUE(all_finite(out.out.values()));
        EXPECT_TRUE(all_finite(x.grad().values()));
        for (const auto& [name, p] : mha.named_parameters()) {
            ASSERT_TRUE(p.grad().defined()) << name;
            EXPECT_TRUE(all_finite(p.grad().values())) << name;
        }
        // item 1's input reaches the output through nothing: zero gradient
        for (size_t t = 0; t < T; ++t)
            for (size_t d = 0; d < D; ++d) EXPECT_EQ(x.grad().at({1, t, d}), 0.0);
        if (need_weights) {
            EXPECT_TRUE(all_zero(select(out.weights, 1)));
        }
    }
}

TEST(MaskedRows, MultiHeadAttentionDefaultPolicyIsError) {
    Rng init(41), data(42);
    MultiHeadAttention mha(attention_config(8, 2), init, nullptr);
    EXPECT_EQ(mha.masked_rows, MaskedRows::error);
    Tensor x = data.uniform({2, 3, 8}, -1, 1);
    const std::string message = error_message([&] { mha.forward(x, x, lengths_mask({3, 0}), true); });
    EXPECT_TRUE(starts_with(message, "[attention]") && contains(message, "batch item 1") &&
                contains(message, "query position 0"))
        << message;
}

// A model with an empty sequence in the batch: error by default, finite logits with "zero".
TEST(MaskedRows, DecoderLMWithAnEmptySequence) {
    Rng init(1), dropout_rng(2), data(3);
    const Indices tokens = random_tokens(data, 2, 4, 11);
    DecoderLM strict_model(small_config(), init, &dropout_rng);
    const std::string message = error_message([&] { strict_model.forward(tokens, {4, 0}); });
    EXPECT_TRUE(contains(message, "batch item 1") && contains(message, "query position 0")) << message;

    ModelConfig config = small_config();
    config.block.attention.masked_rows = MaskedRows::zero;
    DecoderLM model(config, init, &dropout_rng);
    Tensor logits = model.forward(tokens, {4, 0});
    EXPECT_TRUE(all_finite(logits.values()));
    cross_entropy(logits, tokens).backward();
    for (const auto& [name, p] : model.named_parameters()) EXPECT_TRUE(all_finite(p.grad().values())) << name;
}

}  // namespace
}  // namespace attnlab
