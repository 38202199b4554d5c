// An explicit, seedable random number generator (no global state): xoshiro256**
// seeded through splitmix64, with distributions written out here so that the
// same seed gives the same numbers on every machine and standard library
// (std::normal_distribution and friends are implementation-defined).
#pragma once

#include <array>
#include <cstdint>

#include "autograd/tensor.h"

namespace attnlab {

class Rng {
public:
    // `stream` selects an independent sequence for the same seed (e.g. train vs eval data).
    explicit Rng(uint64_t seed = 0, uint64_t stream = 0);

    uint64_t next_u64();
    double uniform();                          // [0, 1), 53 random bits
    double uniform(double low, double high);   // [low, high)
    double normal(double mean = 0.0, double stddev = 1.0);  // Box-Muller
    bool bernoulli(double p);                  // true with probability p
    int64_t integer(int64_t low, int64_t high);  // uniform in [low, high), unbiased

    Tensor normal(const Shape& shape, double mean, double stddev, DType dtype = DType::f32);
    Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::f32);

    using State = std::array<uint64_t, 4>;
    State state() const { return state_; }
    void set_state(const State& state) { state_ = state; }

private:
    State state_{};
};

}  // namespace attnlab
