// The seed chapter's worked example (Level 2): five positions, four features,
// one head of width 2, with its X, W_Q, W_K, W_V. Causal AND key padding
// (position 5 is padding) applied through attnlab's attention op.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "autograd/attention.h"
#include "autograd/ops.h"

namespace attnlab {
namespace {

struct SeedExample {
    Tensor X = Tensor::from_values({1., 0., .2, .1, .8, .2, .1, .3, .1, .9, .3, .2, .3, .4, .8, .2, .2, .1, .6, .9}, {5, 4}, DType::f64);
    Tensor Wq = Tensor::from_values({.7, 0., .1, .6, .2, .4, .4, .1}, {4, 2}, DType::f64);
    Tensor Wk = Tensor::from_values({.5, .2, .2, .7, .6, .1, .1, .5}, {4, 2}, DType::f64);
    Tensor Wv = Tensor::from_values({.4, .1, .2, .2, .5, .1, .1, .3, .6, .5, .2, .2}, {4, 3}, DType::f64);

    // Q, K, V as (B=1, H=1, T=5, d) for the attention op
    Tensor heads(const Tensor& W) const { return reshape(matmul(X, W), {1, 1, 5, W.size(1)}); }

    AttentionResult run(const AttentionMask& mask) const {
        AttentionOptions options;
        options.scale = 1.0 / std::sqrt(2.0);  // sqrt(D_k), D_k = 2
        options.need_weights = true;
        options.need_score_std = true;
        return attention(heads(Wq), heads(Wk), heads(Wv), mask, options);
    }
};

TEST(SeedExample, WeightRowsSumToOne) {
    SeedExample ex;
    Tensor w = ex.run({}).weights;  // (1,1,5,5)
    ASSERT_EQ(w.shape(), (Shape{1, 1, 5, 5}));
    for (size_t i = 0; i < 5; ++i) {
        double total = 0;
        for (size_t j = 0; j < 5; ++j) total += w.at({0, 0, i, j});
        EXPECT_NEAR(total, 1.0, 1e-12) << "row " << i;
    }
}

TEST(SeedExample, MaskedWeightsAtQueryFour) {
    SeedExample ex;
    AttentionMask mask;
    mask.causal = true;
    mask.key_lengths = {4};  // valid_keys = [T, T, T, T, F]
    Tensor w = ex.run(mask).weights;
    const double expected[5] = {0.23, 0.241, 0.265, 0.264, 0.0};  // the chapter's printout, 3 decimals
    for (size_t j = 0; j < 5; ++j) EXPECT_NEAR(w.at({0, 0, 3, j}), expected[j], 5e-4) << "key " << j;
    EXPECT_EQ(w.at({0, 0, 3, 4}), 0.0);
}

TEST(SeedExample, FutureMassAtQueryTwoIsExactlyZero) {
    SeedExample ex;
    AttentionMask mask;
    mask.causal = true;
    mask.key_lengths = {4};
    Tensor w = ex.run(mask).weights;
    double future = 0;
    for (size_t j = 2; j < 5; ++j) future += w.at({0, 0, 1, j});
    EXPECT_EQ(future, 0.0);
}

TEST(SeedExample, ContextIsWeightsTimesValues) {
    SeedExample ex;
    AttentionMask mask;
    mask.causal = true;
    AttentionResult r = ex.run(mask);
    Tensor V = matmul(ex.X, ex.Wv);  // (5,3)
    Tensor expected = matmul(reshape(r.weights, {5, 5}), V);
    std::vector<double> got = r.context.values(), want = expected.values();
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-12);
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// The score statistic of Figure 21.5: std of scale * q.k over eligible pairs.
TEST(SeedExample, ScoreStdOverEligiblePairs) {
    SeedExample ex;
    AttentionMask mask;
    mask.causal = true;
    AttentionResult r = ex.run(mask);
    ASSERT_EQ(r.score_std.size(), 1u);
    Tensor scores = matmul(matmul(ex.X, ex.Wq), transpose(matmul(ex.X, ex.Wk), 0, 1)) * (1.0 / std::sqrt(2.0));
    double sum = 0, sumsq = 0, n = 0;
    for (size_t i = 0; i < 5; ++i)
        for (size_t j = 0; j <= i; ++j) {  // the 15 causal pairs
            const double s = scores.at({i, j});
            sum += s;
            sumsq += s * s;
            n += 1;
        }
    const double mean = sum / n;
    EXPECT_NEAR(r.score_std[0], std::sqrt(sumsq / n - mean * mean), 1e-12);
}

// An overflowed score is a numerical failure, not a masking one: the row turns
// NaN (which the loss reports) instead of raising the all-masked-row error.
TEST(SeedExample, NonFiniteScoresAreNotReportedAsMaskedRows) {
    Tensor q = Tensor::from_values({std::numeric_limits<double>::infinity(), 1.0}, {1, 1, 1, 2}, DType::f64);
    Tensor k = Tensor::from_values({-1.0, 0.0, 1.0, 0.0}, {1, 1, 2, 2}, DType::f64);
    Tensor v = Tensor::from_values({1.0, 2.0}, {1, 1, 2, 1}, DType::f64);
    AttentionOptions options;  // masked_rows = error
    AttentionResult r;
    ASSERT_NO_THROW(r = attention(q, k, v, {}, options));
    EXPECT_TRUE(std::isnan(r.context.item()));
}

}  // namespace
}  // namespace attnlab
