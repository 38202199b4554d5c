// Attention metrics on hand-made weights: entropy in nats, its normalised form,
// and the mass on ineligible keys (which must be exactly 0 for real weights).
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"
#include "experiments/run/attention_metrics.h"

namespace attnlab {
namespace {

TEST(AttentionMetrics, UniformAndOneHotRows) {
    // one layer, B=1, H=2, Tq=2, Tk=2, no mask: head 0 uniform rows, head 1 one-hot rows
    Tensor w = Tensor::from_values({0.5, 0.5, 0.5, 0.5, 1.0, 0.0, 0.0, 1.0}, {1, 2, 2, 2}, DType::f64);
    HeadStats s = attention_stats({w}, {}, {});
    ASSERT_EQ(s.entropy.size(), 2u);
    EXPECT_NEAR(s.entropy[0], std::log(2.0), 1e-12);
    EXPECT_NEAR(s.entropy_norm[0], 1.0, 1e-12);
    EXPECT_EQ(s.entropy[1], 0.0);
    EXPECT_EQ(s.entropy_norm[1], 0.0);
    EXPECT_EQ(s.masked_mass[0], 0.0);
}

TEST(AttentionMetrics, CausalRowsNormaliseByEligibleKeys) {
    // Tq = Tk = 3, causal: row 0 has 1 eligible key, row 1 has 2, row 2 has 3; uniform over eligible
    const double t = 1.0 / 3.0;
    Tensor w = Tensor::from_values({1, 0, 0, 0.5, 0.5, 0, t, t, t}, {1, 1, 3, 3}, DType::f64);
    AttentionMask causal;
    causal.causal = true;
    HeadStats s = attention_stats({w}, causal, {});
    EXPECT_NEAR(s.entropy[0], (0.0 + std::log(2.0) + std::log(3.0)) / 3.0, 1e-12);
    EXPECT_NEAR(s.entropy_norm[0], (0.0 + 1.0 + 1.0) / 3.0, 1e-12);  // a one-key row counts as 0
    EXPECT_EQ(s.masked_mass_max[0], 0.0);
}

TEST(AttentionMetrics, MassOnIneligibleKeysIsReported) {
    // a "leaky" causal row: 0.25 of row 0's weight sits on the future key 1
    Tensor w = Tensor::from_values({0.75, 0.25, 0.5, 0.5}, {1, 1, 2, 2}, DType::f64);
    AttentionMask causal;
    causal.causal = true;
    HeadStats s = attention_stats({w}, causal, {});
    EXPECT_NEAR(s.masked_mass[0], 0.125, 1e-12);  // mean over the 2 rows of (0.25, 0)
    EXPECT_NEAR(s.masked_mass_max[0], 0.25, 1e-12);
}

TEST(AttentionMetrics, PaddedQueryRowsAreNotCounted) {
    // B = 2, query lengths 1 and 2; padded rows carry weights that must be ignored
    Tensor w = Tensor::from_values({1, 0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, {2, 1, 2, 2}, DType::f64);
    AttentionMask padding;
    padding.key_lengths = {1, 2};
    HeadStats s = attention_stats({w}, padding, {1, 2});
    // rows counted: (b0,i0) entropy 0; (b1,i0), (b1,i1) entropy log 2
    EXPECT_NEAR(s.entropy[0], 2.0 * std::log(2.0) / 3.0, 1e-12);
    EXPECT_EQ(s.masked_mass_max[0], 0.0);
}

}  // namespace
}  // namespace attnlab
