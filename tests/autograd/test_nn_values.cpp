// Hand-computed values (and a few gradients) of the neural-network ops:
// softmax, log_softmax, masked_fill, embedding, layer_norm, dropout, cross_entropy.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/attention.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "expect.h"

namespace attnlab {
namespace {

using testing::expect_values;

Tensor t64(const std::vector<double>& v, const Shape& s, bool requires_grad = false) {
    return Tensor::from_values(v, s, DType::f64, requires_grad);
}

// softmax([1,2,3]) and log_softmax([1,2,3]), from Python's math module
const std::vector<double> softmax_123 = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
const std::vector<double> log_softmax_123 = {-2.40760596444438, -1.4076059644443801, -0.40760596444438013};

TEST(SoftmaxValues, KnownValuesAndShiftInvariance) {
    expect_values(softmax(t64({1, 2, 3}, {3})), softmax_123, 1e-12);
    // subtracting the max keeps huge logits finite
    expect_values(softmax(t64({1001, 1002, 1003}, {3})), softmax_123, 1e-12);
    // along axis 0 of (3,2): each column is [1,2,3]
    expect_values(softmax(t64({1, 5, 2, 6, 3, 7}, {3, 2}), 0),
                  {softmax_123[0], softmax_123[0], softmax_123[1], softmax_123[1], softmax_123[2], softmax_123[2]}, 1e-12);
}

TEST(SoftmaxValues, EveryRowSumsToOneAlongAnyAxis) {
    Rng rng(3);
    Tensor x = rng.normal({2, 3, 4}, 0.0, 3.0, DType::f64);
    for (int axis : {0, 1, 2, -1}) {
        Tensor s = sum(softmax(x, axis), {axis});
        for (double v : s.values()) EXPECT_NEAR(v, 1.0, 1e-12) << "axis " << axis;
        for (double v : softmax(x, axis).values()) EXPECT_GT(v, 0.0);
    }
}

TEST(LogSoftmaxValues, KnownValuesAndAgreementWithLogOfSoftmax) {
    expect_values(log_softmax(t64({1, 2, 3}, {3})), log_softmax_123, 1e-12);
    expect_values(log_softmax(t64({1001, 1002, 1003}, {3})), log_softmax_123, 1e-12);
    Rng rng(4);
    Tensor x = rng.normal({3, 4}, 0.0, 2.0, DType::f64);
    expect_values(log_softmax(x, 0), log(softmax(x, 0)).values(), 1e-12);
}

TEST(MaskedFillValues, BroadcastMaskFillsWholeColumns) {
    // x (2,3), mask (1,3) = [1,0,1] -> columns 0 and 2 become -5
    Tensor x = t64({1, 2, 3, 4, 5, 6}, {2, 3}, true);
    Tensor y = masked_fill(x, Mask({1, 3}, {1, 0, 1}), -5.0);
    EXPECT_EQ(y.shape(), (Shape{2, 3}));
    expect_values(y, {-5, 2, -5, -5, 5, -5});
    // filled positions get no gradient
    sum(y).backward();
    expect_values(x.grad(), {0, 1, 0, 0, 1, 0});
}

TEST(EmbeddingValues, LooksUpRowsAndScatterAddsGradients) {
    // weight (3,2) = [[0,1],[10,11],[20,21]], ids (2,2) -> (2,2,2)
    Tensor weight = t64({0, 1, 10, 11, 20, 21}, {3, 2}, true);
    Tensor y = embedding(weight, Indices({2, 2}, {2, 0, 1, 2}));
    EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
    expect_values(y, {20, 21, 0, 1, 10, 11, 20, 21});
    sum(y).backward();  // row 2 is used twice
    expect_values(weight.grad(), {1, 1, 1, 1, 2, 2});
}

TEST(LayerNormValues, NormalisesEachRow) {
    // x (2,3) = [[1,2,3],[2,2,5]]: means 2 and 3, variances 2/3 and 2
    Tensor x = t64({1, 2, 3, 2, 2, 5}, {2, 3});
    const double r0 = std::sqrt(1.5), r1 = 1.0 / std::sqrt(2.0);
    expect_values(layer_norm(x, Tensor(), Tensor(), 0.0), {-r0, 0, r0, -r1, -r1, 2 * r1}, 1e-12);
    // default eps = 1e-5 enters under the square root: 1 / sqrt(2/3 + 1e-5)
    Tensor y = layer_norm(x, Tensor(), Tensor());
    EXPECT_NEAR(y.at({0, 2}), 1.2247356859083902, 1e-12);
    // weight [1,2,3], bias [0,1,0]
    Tensor affine = layer_norm(x, t64({1, 2, 3}, {3}), t64({0, 1, 0}, {3}), 0.0);
    expect_values(affine, {-r0, 1, 3 * r0, -r1, 1 - 2 * r1, 6 * r1}, 1e-12);
    // the result has mean 0 and (biased) variance 1 per row
    Rng rng(5);
    Tensor z = layer_norm(rng.normal({4, 16}, 3.0, 2.0, DType::f64), Tensor(), Tensor(), 0.0);
    expect_values(mean(z, {-1}), {0, 0, 0, 0}, 1e-12);
    expect_values(mean(z * z, {-1}), {1, 1, 1, 1}, 1e-12);
}

TEST(DropoutValues, IdentityWhenPIsZeroOrInEvalMode) {
    Rng rng(1);
    Tensor x = rng.uniform({4, 5}, 1.0, 2.0, DType::f64);
    expect_values(dropout(x, 0.0, true, rng), x.values(), 0.0);
    expect_values(dropout(x, 0.5, false, rng), x.values(), 0.0);
    expect_values(dropout(x, 1.0, true, rng), std::vector<double>(20, 0.0), 0.0);
}

TEST(DropoutValues, KeptElementsAreScaledAndTheMaskFollowsTheSeed) {
    Rng data(2);
    Tensor x = data.uniform({50, 20}, 1.0, 2.0, DType::f64);  // never 0
    Rng a(9), b(9), c(10);
    const std::vector<double> ya = dropout(x, 0.5, true, a).values();
    const std::vector<double> yb = dropout(x, 0.5, true, b).values();
    const std::vector<double> yc = dropout(x, 0.5, true, c).values();
    const std::vector<double> xv = x.values();
    size_t differ = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
        EXPECT_TRUE(ya[i] == 0.0 || std::abs(ya[i] - 2 * xv[i]) < 1e-12) << "element " << i << ": " << ya[i];
        EXPECT_EQ(ya[i], yb[i]) << "same seed, element " << i;
        differ += (ya[i] == 0.0) != (yc[i] == 0.0);
    }
    EXPECT_GT(differ, 100u) << "another seed should give another mask";
}

TEST(DropoutValues, FractionDroppedIsNearP) {
    Tensor x = Tensor::ones({10000}, DType::f32);
    for (double p : {0.1, 0.5, 0.9}) {
        Rng rng(123);
        const std::vector<double> y = dropout(x, p, true, rng).values();
        size_t dropped = 0;
        for (double v : y) dropped += v == 0.0;
        // binomial std sqrt(p(1-p)/n) <= 0.005
        EXPECT_NEAR(static_cast<double>(dropped) / 10000.0, p, 0.02) << "p = " << p;
        EXPECT_EQ(dropout(x, p, true, rng).dtype(), DType::f32);
    }
}

TEST(CrossEntropyValues, UniformLogitsGiveLogC) {
    for (size_t C : {2u, 5u, 50u})
        EXPECT_NEAR(cross_entropy(Tensor::zeros({4, C}, DType::f64), Indices({4}, {0, 1, 1, 0})).item(),
                    std::log(static_cast<double>(C)), 1e-12) << "C = " << C;
}

TEST(CrossEntropyValues, HandComputedAndMasked) {
    // rows of (3,3) logits: [1,2,3] target 2, [1,2,3] target 0, [0,0,0] target 1
    Tensor logits = t64({1, 2, 3, 1, 2, 3, 0, 0, 0}, {3, 3});
    const Indices targets({3}, {2, 0, 1});
    const double l0 = -log_softmax_123[2], l1 = -log_softmax_123[0], l2 = std::log(3.0);
    EXPECT_NEAR(cross_entropy(logits, targets).item(), (l0 + l1 + l2) / 3, 1e-12);
    EXPECT_NEAR(cross_entropy(logits, targets, Mask({3}, {1, 1, 0})).item(), (l0 + l1) / 2, 1e-12);
    EXPECT_NEAR(cross_entropy(logits, targets, Mask({3}, {0, 0, 1})).item(), l2, 1e-12);
    // (2,2,3) logits, targets (2,2): same rows plus one more
    Tensor batched = t64({1, 2, 3, 1, 2, 3, 0, 0, 0, 3, 2, 1}, {2, 2, 3});
    EXPECT_NEAR(cross_entropy(batched, Indices({2, 2}, {2, 0, 1, 0})).item(), (l0 + l1 + l2 + l0) / 4, 1e-12);
}

TEST(CrossEntropyValues, AllPositionsMaskedGivesZeroLossAndZeroGradient) {
    Tensor logits = t64({1, 2, 3, 4, 5, 6}, {2, 3}, true);
    Tensor loss = cross_entropy(logits, Indices({2}, {0, 1}), Mask::filled({2}, false));
    EXPECT_EQ(loss.item(), 0.0);
    loss.backward();
    ASSERT_TRUE(logits.grad().defined());
    expect_values(logits.grad(), {0, 0, 0, 0, 0, 0}, 0.0);
}

TEST(CrossEntropyValues, LargeLogitsStayFinite) {
    for (DType dtype : {DType::f32, DType::f64}) {
        // [1000, 0] target 1 -> 1000; [1000, 1000] target 0 -> log 2; [-1000, 1000] target 1 -> 0
        Tensor logits = Tensor::from_values({1000, 0, 1000, 1000, -1000, 1000}, {3, 2}, dtype, true);
        Tensor loss = cross_entropy(logits, Indices({3}, {1, 0, 1}));
        EXPECT_NEAR(loss.item(), (1000 + std::log(2.0) + 0) / 3, 1e-3) << to_string(dtype);
        loss.backward();
        for (double g : logits.grad().values()) EXPECT_TRUE(std::isfinite(g)) << to_string(dtype);
    }
}

TEST(CrossEntropyValues, GradientIsSoftmaxMinusOnehotOverCount) {
    // rows [1,2,3] target 2 (counted), [1,2,3] target 0 (counted), [0,0,0] target 1 (masked out)
    Tensor logits = t64({1, 2, 3, 1, 2, 3, 0, 0, 0}, {3, 3}, true);
    cross_entropy(logits, Indices({3}, {2, 0, 1}), Mask({3}, {1, 1, 0})).backward();
    const std::vector<double>& s = softmax_123;
    expect_values(logits.grad(), {s[0] / 2, s[1] / 2, (s[2] - 1) / 2,  //
                                  (s[0] - 1) / 2, s[1] / 2, s[2] / 2,  //
                                  0, 0, 0},
                  1e-12);
}

// Stacked members' losses: each member's mean and its rows' gradient are those
// of cross_entropy on its rows alone, bit for bit, in both dtypes; a member with
// no rows gives 0 and sends nothing.
TEST(CrossEntropyValues, MembersEachAsTheirRowsAlone) {
    Rng rng(4);
    const std::vector<size_t> rows = {3, 0, 2, 1};
    const Indices targets({6}, {4, 0, 2, 1, 3, 0});
    for (DType dtype : {DType::f32, DType::f64}) {
        const Tensor logits = rng.normal({6, 5}, 0.0, 2.0, dtype);
        Tensor together = logits.clone();
        together.set_requires_grad(true);
        const Tensor losses = cross_entropy_members(together, targets, rows);
        ASSERT_EQ(losses.shape(), Shape{4});
        sum(losses).backward();
        const std::vector<double> loss = losses.values(), grad = together.grad().values();
        EXPECT_EQ(loss[1], 0.0);
        for (size_t m = 0, first = 0; m < rows.size(); first += rows[m], ++m) {
            if (rows[m] == 0) continue;
            Tensor alone = slice(logits, 0, first, first + rows[m]).clone();
            alone.set_requires_grad(true);
            const Tensor l = cross_entropy(alone, Indices({rows[m]}, std::vector<int32_t>(targets.values.begin() + first,
                                                                                          targets.values.begin() + first + rows[m])));
            l.backward();
            EXPECT_EQ(loss[m], l.item()) << to_string(dtype) << " member " << m;
            const std::vector<double> own = alone.grad().values();
            for (size_t e = 0; e < own.size(); ++e) EXPECT_EQ(grad[first * 5 + e], own[e]) << to_string(dtype) << " member " << m;
        }
    }
    EXPECT_THROW(cross_entropy_members(rng.normal({6, 5}, 0.0, 1.0), targets, {3, 2}), Error);  // rows add up to 5
}

// Rotary positions: a pair rotated by its angle keeps its norm, and the score
// q_i . k_j depends only on i - j: shifting both positions changes nothing.
TEST(NnValues, RotaryScoresDependOnRelativePositionOnly) {
    Rng rng(8);
    const Tensor q = rng.normal({1, 1, 8}, 0.0, 1.0, DType::f64), k = rng.normal({1, 1, 8}, 0.0, 1.0, DType::f64);
    const auto score = [&](size_t qi, size_t kj) {
        const std::vector<double> a = rotary(q, 2, qi, 100.0).values(), b = rotary(k, 2, kj, 100.0).values();
        double s = 0;
        for (size_t c = 0; c < 4; ++c) s += a[c] * b[c];  // head 0
        return s;
    };
    EXPECT_NEAR(score(5, 2), score(8, 5), 1e-12);
    EXPECT_NEAR(score(0, 0), score(7, 7), 1e-12);
    EXPECT_GT(std::abs(score(5, 2) - score(5, 3)), 1e-6) << "the position must matter";
    double before = 0, after = 0;
    const std::vector<double> x = q.values(), y = rotary(q, 2, 9, 100.0).values();
    for (size_t c = 0; c < 8; ++c) {
        before += x[c] * x[c];
        after += y[c] * y[c];
    }
    EXPECT_NEAR(before, after, 1e-12);
    // position 0 is the identity; split halves: at position 1, c = 0 pairs features 0 and 2 of head 0 (d = 4)
    expect_values(rotary(q, 2, 0, 100.0), x, 1e-15);
    const std::vector<double> one = rotary(q, 2, 1, 100.0).values();
    EXPECT_NEAR(one[0], x[0] * std::cos(1.0) - x[2] * std::sin(1.0), 1e-12);
    EXPECT_NEAR(one[2], x[2] * std::cos(1.0) + x[0] * std::sin(1.0), 1e-12);
    EXPECT_THROW(rotary(rng.normal({1, 1, 6}, 0.0, 1.0), 2, 0, 100.0), Error);  // head width 3 is odd
}

// The slopes of Press et al. 2022: 2^(-8(h+1)/H) for H a power of two; for 6
// heads those of 4, then every other one of 8 (their reference get_slopes).
TEST(NnValues, AlibiSlopesArePressEtAls) {
    for (size_t h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(alibi_slope(h, 8), std::pow(2.0, -double(h + 1)));
    const std::vector<double> six = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
    for (size_t h = 0; h < 6; ++h) EXPECT_DOUBLE_EQ(alibi_slope(h, 6), six[h]) << h;
    EXPECT_DOUBLE_EQ(alibi_slope(0, 1), std::pow(2.0, -8.0));
    // bottom-right aligned: the last of 2 queries over 5 keys sits at position 4
    EXPECT_DOUBLE_EQ(alibi_bias(0, 8, 1, 1, 2, 5), -0.5 * 3);
    EXPECT_DOUBLE_EQ(alibi_bias(0, 8, 1, 4, 2, 5), 0.0);
    EXPECT_DOUBLE_EQ(alibi_bias(0, 8, 0, 4, 5, 5), -0.5 * 4);  // an encoder's later key, by the same distance
}

TEST(NnValues, Float32MatchesFloat64) {
    Rng rng(6);
    Tensor x64 = rng.normal({3, 4}, 0.0, 1.0, DType::f64);
    Tensor x32 = x64.to(DType::f32);
    const Indices targets({3}, {0, 3, 2});
    for (auto op : std::vector<Tensor (*)(const Tensor&)>{
             [](const Tensor& x) { return softmax(x); }, [](const Tensor& x) { return log_softmax(x, 0); },
             [](const Tensor& x) { return layer_norm(x, Tensor(), Tensor()); }}) {
        Tensor y32 = op(x32);
        EXPECT_EQ(y32.dtype(), DType::f32);
        expect_values(y32, op(x64).values(), 1e-5);
    }
    Tensor ce32 = cross_entropy(x32, targets);
    EXPECT_EQ(ce32.dtype(), DType::f32);
    EXPECT_NEAR(ce32.item(), cross_entropy(x64, targets).item(), 1e-5);
}

}  // namespace
}  // namespace attnlab
