// Returned attention weights (DESIGN "Masks", "Attention metrics"): each row is a
// distribution over the eligible keys (sum 1 within 1e-6), the masked mass is
// exactly 0.0, and asking for weights never changes the maths: the output and
// every gradient are bitwise identical with and without need_weights.
#include <gtest/gtest.h>

#include "layer_test_util.h"

namespace attnlab {
namespace {

using namespace layer_testing;

struct WeightsCase {
    const char* what;
    size_t B, Tq, Tk, width, kv_width, heads, kv_heads;
    bool self, causal;
    std::vector<size_t> key_lengths;
};

std::vector<WeightsCase> cases() {
    return {
        {"causal self-attention", 2, 5, 5, 8, 8, 2, 2, true, true, {}},
        {"key padding, lengths 3 and 5", 2, 5, 5, 8, 8, 2, 2, true, false, {3, 5}},
        {"causal AND key padding", 2, 5, 5, 8, 8, 2, 2, true, true, {2, 5}},
        {"cross-attention Tq 3, Tk 5, kv width 6, padding", 2, 3, 5, 8, 6, 2, 2, false, false, {2, 5}},
        {"cross, causal bottom-right Tq 3 < Tk 5, padding", 2, 3, 5, 8, 8, 2, 2, false, true, {4, 5}},
        {"grouped K/V 4 over 2, causal and padding", 2, 5, 5, 8, 8, 4, 2, true, true, {3, 5}},
        {"grouped K/V 4 over 1, cross with padding", 2, 3, 4, 8, 8, 4, 1, false, false, {1, 4}},
    };
}

// The rule written out independently of AttentionMask::allows.
bool eligible(const WeightsCase& c, size_t b, size_t i, size_t j) {
    if (c.causal && static_cast<long>(j) > static_cast<long>(i) + static_cast<long>(c.Tk) - static_cast<long>(c.Tq))
        return false;
    return c.key_lengths.empty() || j < c.key_lengths[b];
}

struct Pass {
    std::vector<double> out, weights, grad_q, grad_kv;
    std::vector<std::vector<double>> param_grads;
};

// One forward + backward through `mha`, with fresh input gradients.
// x_q and x_kv are handles to the caller's leaves.
Pass run(MultiHeadAttention& mha, const WeightsCase& c, Tensor x_q, Tensor x_kv, const Tensor& seed, bool need_weights) {
    mha.zero_grad();
    x_q.zero_grad();
    x_kv.zero_grad();
    AttentionMask mask;
    mask.causal = c.causal;
    mask.key_lengths = c.key_lengths;
    MultiHeadAttention::Output o = mha.forward(x_q, c.self ? x_q : x_kv, mask, need_weights);
    o.out.backward(seed);
    Pass p;
    p.out = o.out.values();
    if (need_weights) p.weights = o.weights.values();
    p.grad_q = x_q.grad().values();
    if (!c.self) p.grad_kv = x_kv.grad().values();
    for (const Tensor& t : mha.parameters()) p.param_grads.push_back(t.grad().values());
    EXPECT_EQ(o.weights.defined(), need_weights);
    if (need_weights) {
        EXPECT_EQ(o.weights.shape(), (Shape{c.B, c.heads, c.Tq, c.Tk}));
        EXPECT_FALSE(o.weights.requires_grad());  // weights are a diagnostic, not in the graph
    }
    return p;
}

void check_case(const WeightsCase& c, bool training_with_dropout) {
    AttentionConfig config = attention_config(c.width, c.heads, c.kv_heads);
    config.kv_width = c.kv_width;
    if (training_with_dropout) config.dropout = 0.3;
    Rng init(51), data(52), dropout_rng(53);
    MultiHeadAttention mha(config, init, &dropout_rng);
    mha.train(training_with_dropout);
    const Tensor x_q = data.uniform({c.B, c.Tq, c.width}, -1, 1).set_requires_grad(true);
    const Tensor x_kv = data.uniform({c.B, c.Tk, c.kv_width}, -1, 1).set_requires_grad(true);
    const Tensor seed = data.uniform({c.B, c.Tq, c.width}, -1, 1);

    const Rng::State state = dropout_rng.state();  // both passes draw the same dropout masks
    const Pass without = run(mha, c, x_q, x_kv, seed, false);
    dropout_rng.set_state(state);
    const Pass with = run(mha, c, x_q, x_kv, seed, true);

    // asking for weights leaves the output and every gradient bitwise identical
    ASSERT_EQ(with.out.size(), without.out.size());
    for (size_t i = 0; i < with.out.size(); ++i) ASSERT_EQ(with.out[i], without.out[i]) << "output element " << i;
    EXPECT_EQ(with.grad_q, without.grad_q);
    EXPECT_EQ(with.grad_kv, without.grad_kv);
    EXPECT_EQ(with.param_grads, without.param_grads);

    // the weights (before dropout): distributions over eligible keys, zero elsewhere
    const std::vector<double>& w = with.weights;
    ASSERT_EQ(w.size(), c.B * c.heads * c.Tq * c.Tk);
    for (size_t b = 0; b < c.B; ++b)
        for (size_t h = 0; h < c.heads; ++h)
            for (size_t i = 0; i < c.Tq; ++i) {
                double eligible_mass = 0.0, masked_mass = 0.0;
                size_t eligible_keys = 0;
                for (size_t j = 0; j < c.Tk; ++j) {
                    const double a = w[((b * c.heads + h) * c.Tq + i) * c.Tk + j];
                    EXPECT_GE(a, 0.0);
                    if (eligible(c, b, i, j)) {
                        eligible_mass += a;
                        ++eligible_keys;
                    } else {
                        masked_mass += a;
                        EXPECT_EQ(a, 0.0) << "b " << b << " h " << h << " query " << i << " key " << j;
                    }
                }
                ASSERT_GT(eligible_keys, 0u);  // these cases have no all-masked rows
                EXPECT_NEAR(eligible_mass, 1.0, 1e-6) << "b " << b << " h " << h << " query " << i;
                EXPECT_EQ(masked_mass, 0.0);
            }
}

TEST(AttentionWeights, RowsSumToOneMaskedMassZeroOutputUnchanged) {
    for (const WeightsCase& c : cases()) {
        SCOPED_TRACE(c.what);
        check_case(c, false);
    }
}

// Also in training mode with attention dropout: the weights do not consume random
// numbers, so the same Rng state gives the same output with and without them.
TEST(AttentionWeights, SameWithAttentionDropoutInTraining) {
    for (const WeightsCase& c : cases()) {
        SCOPED_TRACE(c.what);
        check_case(c, true);
    }
}

// Grouped K/V: query heads of one group read the same keys, so with identical query
// projections they produce identical weights; heads of different groups do not.
TEST(AttentionWeights, GroupedHeadsShareTheirKeyHead) {
    Rng init(61), data(62);
    MultiHeadAttention mha(attention_config(8, 4, 2), init, nullptr);
    mha.eval();
    // make query head 1 a copy of head 0 and head 3 a copy of head 2 (d_h = 2 rows each)
    std::vector<double> wq = mha.q_proj.weight.values(), bq = mha.q_proj.bias.values();
    for (size_t r = 0; r < 2; ++r) {
        for (size_t col = 0; col < 8; ++col) {
            wq[(2 + r) * 8 + col] = wq[r * 8 + col];
            wq[(6 + r) * 8 + col] = wq[(4 + r) * 8 + col];
        }
        bq[2 + r] = bq[r];
        bq[6 + r] = bq[4 + r];
    }
    mha.q_proj.weight.assign(Tensor::from_values(wq, {8, 8}));
    mha.q_proj.bias.assign(Tensor::from_values(bq, {8}));
    const Tensor x = data.uniform({1, 4, 8}, -1, 1);
    AttentionMask causal;
    causal.causal = true;
    const Tensor w = mha.forward(x, x, causal, true).weights;  // (1, 4, 4, 4)
    double across_groups = 0.0;
    for (size_t i = 0; i < 4; ++i)
        for (size_t j = 0; j < 4; ++j) {
            EXPECT_EQ(w.at({0, 0, i, j}), w.at({0, 1, i, j})) << "query " << i << " key " << j;
            EXPECT_EQ(w.at({0, 2, i, j}), w.at({0, 3, i, j})) << "query " << i << " key " << j;
            across_groups = std::max(across_groups, std::abs(w.at({0, 0, i, j}) - w.at({0, 2, i, j})));
        }
    EXPECT_GT(across_groups, 1e-4);
}

}  // namespace
}  // namespace attnlab
