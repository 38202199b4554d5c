// The float kernels' loops, compiled once per instruction set: kernels_base.cpp
// (x86-64), kernels_avx2.cpp (-march=haswell), kernels_avx512.cpp
// (-march=skylake-avx512) each include this file inside their own namespace
// (ATTNLAB_KERNEL_ISA); kernels.cpp picks one at run time from the CPU's flags.
// No #pragma once: included once per instruction set.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>

namespace attnlab::kernels::ATTNLAB_KERNEL_ISA {

// exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln(2)/2; exp(r) by its
// Taylor series to r^7 (truncation error below 6e-9 relative). ln 2 is split
// into a high part exact in float and a low part (Cody and Waite).
inline float exp_poly(float x) {
    float clamped = x < -86.5f ? -86.5f : x;  // not fmin/fmax, whose NaN rules block vectorising
    clamped = clamped > 88.7f ? 88.7f : clamped;  // 2^n below stays a normal float
    const float n = (clamped * std::numbers::log2e_v<float> + 12582912.0f) - 12582912.0f;  // round to nearest
    const float r = (clamped - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^n as 2^(n-1) times 2, applied in that order, so that n = 128 (x near
    // 88.7) neither overflows the exponent field nor the intermediate product
    const float half_scale = std::bit_cast<float>(static_cast<int32_t>(n + 126.0f) << 23);  // 2^(n-1)
    float y = (p * half_scale) * 2.0f;
    y = x < -86.5f ? 0.0f : y;
    y = x > 88.7f ? HUGE_VALF : y;
    return x != x ? x : y;
}

// erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), for z >= 0 (Numerical
// Recipes, 2nd ed., 6.2: fractional error below 1.2e-7 everywhere).
inline float erfc_nonnegative(float z) {
    const float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * exp_poly(-z * z + p);
}

// Phi(x) = erfc(-x / sqrt 2) / 2, computed from |x| so that the tail keeps its precision.
inline float normal_cdf(float x) {
    const float half_tail = 0.5f * erfc_nonnegative(std::fabs(x) * (std::numbers::sqrt2_v<float> / 2));
    return x >= 0.0f ? 1.0f - half_tail : half_tail;
}

constexpr float kInvSqrt2Pi = static_cast<float>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);

float exp_shifted(const float* x, float shift, float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = exp_poly(x[i] - shift);
    // The sum in 16 fixed lanes, added in a fixed order: vectorisable and deterministic.
    constexpr size_t kLanes = 16;
    float lanes[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (size_t l = 0; l < kLanes; ++l) lanes[l] += y[i + l];
    float total = 0.0f;
    for (; i < n; ++i) total += y[i];
    for (size_t l = 0; l < kLanes; ++l) total += lanes[l];
    return total;
}

void gelu_forward(const float* x, float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] * normal_cdf(x[i]);
}

void gelu_backward(const float* g, const float* x, float* gx, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const float pdf = kInvSqrt2Pi * exp_poly(-0.5f * x[i] * x[i]);
        gx[i] = g[i] * (normal_cdf(x[i]) + x[i] * pdf);
    }
}

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_ISA
