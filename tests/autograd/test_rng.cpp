// Rng: xoshiro256** seeded through splitmix64, checked against an independent
// Python implementation, plus the statistics of every distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/rng.h"
#include "expect.h"

namespace attnlab {
namespace {

TEST(Rng, MatchesAnIndependentReference) {
    // Produced once with python3 (no packages) from the algorithm rng.cpp documents:
    //
    //   M = (1 << 64) - 1
    //   def splitmix64(x):
    //       x = (x + 0x9E3779B97F4A7C15) & M
    //       z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    //       z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    //       return x, z ^ (z >> 31)
    //   def rotl(x, k): return ((x << k) | (x >> (64 - k))) & M
    //   def xoshiro(seed, stream=0):
    //       x = seed ^ ((stream * 0xD1B54A32D192ED03) & M)
    //       s = []
    //       for _ in range(4):
    //           x, w = splitmix64(x); s.append(w)
    //       while True:
    //           r = (rotl((s[1] * 5) & M, 7) * 9) & M
    //           t = (s[1] << 17) & M
    //           s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45)
    //           yield r
    //   for seed in (0, 42):
    //       g = xoshiro(seed)
    //       print(seed, ", ".join("0x%016XULL" % next(g) for _ in range(3)))
    Rng zero(0);
    EXPECT_EQ(zero.next_u64(), 0x99EC5F36CB75F2B4ULL);
    EXPECT_EQ(zero.next_u64(), 0xBF6E1F784956452AULL);
    EXPECT_EQ(zero.next_u64(), 0x1A5F849D4933E6E0ULL);
    Rng forty_two(42);
    EXPECT_EQ(forty_two.next_u64(), 0x15780B2E0C2EC716ULL);
    EXPECT_EQ(forty_two.next_u64(), 0x6104D9866D113A7EULL);
    EXPECT_EQ(forty_two.next_u64(), 0xAE17533239E499A1ULL);
}

TEST(Rng, SameSeedAndStreamGiveTheSameSequence) {
    Rng a(1234, 7), b(1234, 7);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.next_u64(), b.next_u64()) << "draw " << i;
    Rng c(5), d(5);
    EXPECT_EQ(c.normal({3, 4}, 0.0, 1.0).values(), d.normal({3, 4}, 0.0, 1.0).values());
}

TEST(Rng, DifferentStreamsAndSeedsDiffer) {
    Rng s0(1234, 0), s1(1234, 1), other(1235, 0);
    size_t same_stream = 0, same_seed = 0;
    for (int i = 0; i < 1000; ++i) {
        const uint64_t v = s0.next_u64();
        same_stream += v == s1.next_u64();
        same_seed += v == other.next_u64();
    }
    EXPECT_EQ(same_stream, 0u);
    EXPECT_EQ(same_seed, 0u);
}

TEST(Rng, UniformStaysInTheUnitInterval) {
    Rng rng(3);
    double total = 0, low = 1, high = 0;
    const int n = 100000;
    for (int i = 0; i < n; ++i) {
        const double u = rng.uniform();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        total += u;
        low = std::min(low, u);
        high = std::max(high, u);
    }
    EXPECT_NEAR(total / n, 0.5, 0.01);
    EXPECT_LT(low, 1e-3);
    EXPECT_GT(high, 1 - 1e-3);
    for (int i = 0; i < 1000; ++i) {
        const double v = rng.uniform(-3.0, -1.0);
        ASSERT_GE(v, -3.0);
        ASSERT_LT(v, -1.0);
    }
    for (double v : rng.uniform({1000}, 2.0, 4.0, DType::f64).values()) {
        ASSERT_GE(v, 2.0);
        ASSERT_LT(v, 4.0);
    }
}

TEST(Rng, IntegerStaysInRangeAndHitsEveryValue) {
    Rng rng(4);
    std::vector<int> counts(7, 0);  // [-3, 4)
    for (int i = 0; i < 7000; ++i) {
        const int64_t v = rng.integer(-3, 4);
        ASSERT_GE(v, -3);
        ASSERT_LT(v, 4);
        ++counts[static_cast<size_t>(v + 3)];
    }
    for (size_t k = 0; k < counts.size(); ++k) {
        EXPECT_GT(counts[k], 0) << "value " << static_cast<int>(k) - 3 << " never drawn";
        EXPECT_NEAR(counts[k], 1000, 150) << "value " << static_cast<int>(k) - 3;
    }
    for (int i = 0; i < 100; ++i) EXPECT_EQ(rng.integer(5, 6), 5);
}

TEST(Rng, IntegerWithAnEmptyRangeThrows) {
    Rng rng(0);
    testing::expect_error([&] { rng.integer(3, 3); }, "[rng.integer]", {"[3, 3)"});
    testing::expect_error([&] { rng.integer(5, 2); }, "[rng.integer]", {"[5, 2)"});
}

TEST(Rng, NormalHasMeanZeroAndStdOne) {
    Rng rng(5);
    const int n = 100000;
    double total = 0, squares = 0;
    for (int i = 0; i < n; ++i) {
        const double v = rng.normal();
        ASSERT_TRUE(std::isfinite(v));
        total += v;
        squares += v * v;
    }
    const double mean = total / n;
    EXPECT_NEAR(mean, 0.0, 0.02);
    EXPECT_NEAR(std::sqrt(squares / n - mean * mean), 1.0, 0.02);
    // shifted and scaled, through the tensor overload
    const std::vector<double> v = rng.normal({n}, 3.0, 2.0, DType::f64).values();
    double shifted = 0;
    for (double x : v) shifted += x;
    EXPECT_NEAR(shifted / n, 3.0, 0.04);
}

TEST(Rng, BernoulliFrequency) {
    Rng rng(6);
    const int n = 100000;
    int hits = 0;
    for (int i = 0; i < n; ++i) hits += rng.bernoulli(0.3);
    // std of the frequency is sqrt(0.3 * 0.7 / n) ~ 0.0014
    EXPECT_NEAR(static_cast<double>(hits) / n, 0.3, 0.01);
    EXPECT_FALSE(rng.bernoulli(0.0));
    EXPECT_TRUE(rng.bernoulli(1.0));
}

TEST(Rng, StateRoundTripReproducesTheSequence) {
    Rng rng(7);
    for (int i = 0; i < 10; ++i) rng.next_u64();
    const Rng::State saved = rng.state();
    std::vector<uint64_t> first;
    for (int i = 0; i < 20; ++i) first.push_back(rng.next_u64());
    const double normal_after = rng.normal();

    Rng restored(999);
    restored.set_state(saved);
    EXPECT_EQ(restored.state(), saved);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(restored.next_u64(), first[static_cast<size_t>(i)]) << "draw " << i;
    EXPECT_EQ(restored.normal(), normal_after);
}

}  // namespace
}  // namespace attnlab
