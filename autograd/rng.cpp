#include "autograd/rng.h"

#include <cmath>
#include <numbers>

#include "autograd/tensor_impl.h"

namespace attnlab {

namespace {
uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ULL);
    for (auto& word : state_) word = splitmix64(x);
}

uint64_t Rng::next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double low, double high) { return low + (high - low) * uniform(); }

double Rng::normal(double mean, double stddev) {
    // Box-Muller without caching the second value, so the state stays four words.
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

bool Rng::bernoulli(double p) { return uniform() < p; }

int64_t Rng::integer(int64_t low, int64_t high) {
    if (high <= low) fail("rng.integer", "empty range [" + std::to_string(low) + ", " + std::to_string(high) + ")");
    const uint64_t range = static_cast<uint64_t>(high - low);
    // Rejection sampling: drop the top partial block so every value is equally likely.
    const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t r;
    do r = next_u64(); while (r >= limit);
    return low + static_cast<int64_t>(r % range);
}

Tensor Rng::normal(const Shape& shape, double mean, double stddev, DType dtype) {
    return dispatch(dtype, [&]<class T>() {
        Array<T> a = make_array<T>(shape);
        for (T& v : a) v = static_cast<T>(normal(mean, stddev));
        return wrap<T>(std::move(a));
    });
}

Tensor Rng::uniform(const Shape& shape, double low, double high, DType dtype) {
    return dispatch(dtype, [&]<class T>() {
        Array<T> a = make_array<T>(shape);
        for (T& v : a) v = static_cast<T>(uniform(low, high));
        return wrap<T>(std::move(a));
    });
}

}  // namespace attnlab
