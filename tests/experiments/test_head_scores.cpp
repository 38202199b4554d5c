// Head scores (experiments/run/head_scores.h) on hand-made attention patterns
// with known answers, the repeated-token batch's layout, and a real model: the
// scores read from its patterns, the batch fixed by its seed.
#include <gtest/gtest.h>

#include <set>

#include "autograd/ops.h"
#include "experiments/config/config.h"
#include "experiments/run/head_scores.h"
#include "experiments/run/model_factory.h"

namespace attnlab {
namespace {

// (1, 3, T, T) causal patterns for T = 2n - 1: head 0 attends to t - 1 (row 0 to
// itself), head 1 to t - n + 1 in the repeat and to 0 before it, head 2 uniformly.
Tensor made_patterns(size_t n) {
    const size_t T = 2 * n - 1;
    std::vector<double> a(3 * T * T, 0.0);
    for (size_t t = 0; t < T; ++t) {
        a[(0 * T + t) * T + (t == 0 ? 0 : t - 1)] = 1.0;
        a[(1 * T + t) * T + (t >= n ? t - n + 1 : 0)] = 1.0;
        for (size_t j = 0; j <= t; ++j) a[(2 * T + t) * T + j] = 1.0 / static_cast<double>(t + 1);
    }
    return Tensor::from_values(a, {1, 3, T, T}, DType::f64);
}

TEST(HeadScores, KnownPatternsScoreExactly) {
    const size_t n = 4, T = 7;
    const HeadScores s = attention_scores({made_patterns(n)}, n);
    ASSERT_EQ(s.layers, 1u);
    ASSERT_EQ(s.heads, 3u);
    EXPECT_DOUBLE_EQ(s.previous_token[0], 1.0);
    EXPECT_DOUBLE_EQ(s.induction[0], 0.0);   // t-1 = t-n+1 only when n = 2
    EXPECT_DOUBLE_EQ(s.duplicate_token[0], 0.0);
    EXPECT_DOUBLE_EQ(s.induction[1], 1.0);
    EXPECT_DOUBLE_EQ(s.duplicate_token[1], 0.0);
    // head 1's previous-token weight: rows 1 .. n-1 attend to 0 (row 1 is t - 1 = 0); the repeat rows to t - n + 1 != t - 1
    EXPECT_DOUBLE_EQ(s.previous_token[1], 1.0 / static_cast<double>(T - 1));
    // uniform: a[t, j] = 1/(t+1) wherever the score looks
    double previous = 0, repeat = 0;
    for (size_t t = 1; t < T; ++t) previous += 1.0 / static_cast<double>(t + 1);
    for (size_t t = n; t < T; ++t) repeat += 1.0 / static_cast<double>(t + 1);
    EXPECT_NEAR(s.previous_token[2], previous / (T - 1), 1e-15);
    EXPECT_NEAR(s.induction[2], repeat / (T - n), 1e-15);
    EXPECT_NEAR(s.duplicate_token[2], repeat / (T - n), 1e-15);
}

TEST(HeadScores, WrongShapesAreRefused) {
    EXPECT_THROW(attention_scores({made_patterns(4)}, 5), Error);
    EXPECT_THROW(attention_scores({made_patterns(4), made_patterns(3)}, 4), Error);
}

TEST(HeadScores, RepeatedTokenBatchLayout) {
    const size_t n = 6, T = 11;
    const HeadScoreBatch input = repeated_token_batch(5, n, 3, 20, 7);
    ASSERT_EQ(input.batch.inputs.shape, (Shape{5, T}));
    for (size_t b = 0; b < 5; ++b) {
        const int32_t* x = input.batch.inputs.values.data() + b * T;
        const int32_t* y = input.batch.targets.values.data() + b * T;
        std::set<int32_t> distinct(x, x + n);
        EXPECT_EQ(distinct.size(), n) << "r's tokens are distinct";
        for (size_t t = 0; t < T; ++t) {
            EXPECT_GE(x[t], 3);
            EXPECT_LE(x[t], 20);
            if (t >= n) EXPECT_EQ(x[t], x[t - n]);
            EXPECT_EQ(y[t], t + 1 < T ? x[t + 1] : x[t + 1 - n]);  // the next token of r r
            EXPECT_EQ(input.batch.loss_mask.values[b * T + t], t >= n ? 1 : 0);
        }
    }
    // the seed fixes the batch; another seed gives another one
    EXPECT_EQ(repeated_token_batch(5, n, 3, 20, 7).batch.inputs.values, input.batch.inputs.values);
    EXPECT_NE(repeated_token_batch(5, n, 3, 20, 8).batch.inputs.values, input.batch.inputs.values);
    EXPECT_THROW(repeated_token_batch(5, 19, 3, 20, 7), Error);  // 18 distinct tokens only
    EXPECT_THROW(repeated_token_batch(5, 1, 3, 20, 7), Error);
}

// An attention-only decoder on task "induction".
Config attention_only(size_t vocab, size_t layers, size_t width, size_t heads) {
    Config c;
    c.task.name = "induction";
    c.task.vocab = static_cast<int64_t>(vocab);
    c.model.layers = static_cast<int64_t>(layers);
    c.model.width = static_cast<int64_t>(width);
    c.model.heads = static_cast<int64_t>(heads);
    c.model.ffn = 0;
    return c;
}

TEST(HeadScores, ARealModelIsScoredFromItsOwnPatterns) {
    Config c = attention_only(16, 2, 16, 2);
    c.task.min_len = 3;
    c.task.max_len = 5;
    c.model.positional = "rotary";
    c.model.kv_heads = 1;  // grouped K/V: every query head reads the one K/V head
    Rng init(3, 10);
    TaskModel model(c, 9, init, nullptr);
    const HeadScoreBatch input = head_score_batch(c, 9, 4, 0);
    EXPECT_EQ(input.half, 5u);  // (9 + 1) / 2 positions' worth, 13 content tokens
    const HeadScores s = head_scores(model, input);
    EXPECT_TRUE(model.module().is_training()) << "the model's mode is restored";
    // the same scores from the pattern hook points of an ordinary forward
    Hooks hooks;
    hooks.record("blocks.*.attn.pattern");
    model.module().eval();
    const Tensor logits = model.forward(input.batch, hooks);
    const HeadScores again = attention_scores({hooks.last("blocks.0.attn.pattern"), hooks.last("blocks.1.attn.pattern")}, 5);
    EXPECT_EQ(s.induction, again.induction);
    EXPECT_EQ(s.previous_token, again.previous_token);
    EXPECT_EQ(s.duplicate_token, again.duplicate_token);
    EXPECT_DOUBLE_EQ(s.repeat_loss, cross_entropy(logits, input.batch.targets, input.batch.loss_mask).item());
    for (double v : s.induction) {
        EXPECT_GE(v, 0.0);
        EXPECT_LE(v, 1.0);
    }
    ASSERT_EQ(s.copying.size(), 4u);
    for (double v : s.copying) {
        EXPECT_GE(v, -1.0);
        EXPECT_LE(v, 1.0);
    }
    // an encoder-decoder has no decoder self-attention of its own to score
    Config translate = c;
    translate.model.kind = "encoder-decoder";
    EXPECT_THROW(head_score_batch(translate, 9, 4, 0), Error);
}

// The copying score from the weights: with W_U = W_E and an OV map of +I, the
// circuit W_E W_E^T is positive semi-definite (score 1); with -I it is -1.
TEST(HeadScores, CopyingScoreOfKnownOVCircuits) {
    const Config c = attention_only(9, 1, 4, 1);
    Rng init(4, 10), values(5);
    TaskModel model(c, 9, init, nullptr);
    const Tensor e = values.normal({9, 4}, 0.0, 1.0);
    std::vector<double> eye(16, 0.0);
    for (size_t i = 0; i < 4; ++i) eye[i * 4 + i] = 1.0;
    for (const auto& [name, p] : model.module().named_parameters()) {
        Tensor param = p;
        if (name == "tok_emb.weight" || name == "head.weight") param.assign(e);
        if (name == "blocks.0.attn.v_proj.weight" || name == "blocks.0.attn.out_proj.weight") param.assign(Tensor::from_values(eye, {4, 4}));
    }
    EXPECT_NEAR(copying_scores(model)[0], 1.0, 1e-6);
    for (const auto& [name, p] : model.module().named_parameters())
        if (name == "blocks.0.attn.out_proj.weight") {
            std::vector<double> minus(eye);
            for (double& v : minus) v = -v;
            Tensor(p).assign(Tensor::from_values(minus, {4, 4}));
        }
    EXPECT_NEAR(copying_scores(model)[0], -1.0, 1e-6);
}

}  // namespace
}  // namespace attnlab
