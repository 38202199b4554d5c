// The float kernels' loops, compiled once per instruction set: kernels_generic.cpp
// (x86-64), kernels_avx2.cpp (-march=haswell), kernels_avx512.cpp
// (-march=skylake-avx512) each include this file inside their own namespace
// (ATTNLAB_KERNEL_ISA); kernels.cpp picks one at run time from the CPU's flags.
// No #pragma once: included once per instruction set.
//
// Every set gives the same bits (kernels.h; tests/autograd/test_isa.cpp): sums
// add in 8 fixed lanes whatever the vector width, multiply-adds are fused in
// every set (a vfmadd where the set has FMA, libm's exact fmaf in the generic
// one), and nothing else is left to the compiler (-ffp-contract=off).
//
// Speed: these loops are bound by the latency of their dependency chains, not by
// the number of operations, so the polynomials are evaluated by Estrin's scheme
// (depth log2 of the degree instead of the degree). The fusing is written out
// (madd), never left to the compiler, so that the vectoriser's scalar remainder
// and its vector body round alike: a value never depends on where it sits in
// its buffer.
#include <immintrin.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>

#include "autograd/cpu/layer_norm_rows.h"
#include "autograd/cpu/kernels.h"
#include "autograd/pointwise.h"

namespace attnlab::kernels::ATTNLAB_KERNEL_ISA {

// a * b + c, rounded once: a vfmadd (vectorised) where the set has FMA, else
// a call of libm's fmaf (exact, slow: the generic set is for CPUs without AVX2).
inline float madd(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln(2)/2; exp(r) by its
// Taylor series to r^7 (truncation error below 6e-9 relative). ln 2 is split
// into a high part exact in float and a low part (Cody and Waite).
inline float exp_poly(float x) {
    float clamped = x < -86.5f ? -86.5f : x;  // not fmin/fmax, whose NaN rules block vectorising
    clamped = clamped > 88.7f ? 88.7f : clamped;  // 2^n below stays a normal float
    const float n = madd(clamped, std::numbers::log2e_v<float>, 12582912.0f) - 12582912.0f;  // round to nearest
    const float r = madd(n, 2.12194440e-4f, madd(n, -0.693359375f, clamped));
    // p = sum_k r^k / k!, k = 0..7, by Estrin: pairs (c0 + c1 r), then r^2, then r^4
    const float r2 = r * r, r4 = r2 * r2;
    const float p01 = madd(r, 1.0f, 1.0f), p23 = madd(r, 1.0f / 6.0f, 0.5f);
    const float p45 = madd(r, 1.0f / 120.0f, 1.0f / 24.0f), p67 = madd(r, 1.0f / 5040.0f, 1.0f / 720.0f);
    const float p = madd(r4, madd(r2, p67, p45), madd(r2, p23, p01));
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
    // P(t) = c0 + c1 t + ... + c9 t^9 by Estrin (pairs, then t^2, t^4, t^8)
    const float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
    const float c01 = madd(t, 1.00002368f, -1.26551223f), c23 = madd(t, 0.09678418f, 0.37409196f);
    const float c45 = madd(t, 0.27886807f, -0.18628806f), c67 = madd(t, 1.48851587f, -1.13520398f);
    const float c89 = madd(t, 0.17087277f, -0.82215223f);
    const float low = madd(t4, madd(t2, c67, c45), madd(t2, c23, c01));
    const float p = madd(t8, c89, low);
    return t * exp_poly(madd(-z, z, p));
}

// Phi(x) = erfc(-x / sqrt 2) / 2, computed from |x| so that the tail keeps its precision.
inline float normal_cdf(float x) {
    const float half_tail = 0.5f * erfc_nonnegative(std::fabs(x) * (std::numbers::sqrt2_v<float> / 2));
    return x >= 0.0f ? 1.0f - half_tail : half_tail;
}

// tanh(x). For |x| < 0.625: x + x z P(z), z = x^2 (the minimax fit of Cephes'
// tanhf, relative error about 2 ulp), P by Estrin; above: 1 - 2 / (exp(2|x|) + 1)
// with x's sign (our exp; exactly 1 from |x| = 9.01 on). Both are computed and
// one selected, so the loop vectorises. NaN stays NaN, -0 stays -0.
inline float tanh_poly(float x) {
    const float a = std::fabs(x), z = x * x, z2 = z * z;
    const float p01 = madd(z, 1.33314422036e-1f, -3.33332819422e-1f), p23 = madd(z, 2.06390887954e-2f, -5.37397155531e-2f);
    const float p = madd(z2, madd(z2, -5.70498872745e-3f, p23), p01);
    const float small = madd(x * z, p, x);
    const float magnitude = 1.0f - 2.0f / (exp_poly(2.0f * a) + 1.0f);
    const float large = x < 0.0f ? -magnitude : magnitude;
    const float y = a < 0.625f ? small : large;
    return x != x || x == 0.0f ? x : y;  // NaN, and zero with its sign
}

constexpr float kInvSqrt2Pi = static_cast<float>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);

// Sums in 8 fixed lanes (one AVX register), the lanes then added pairwise and
// the remainder last: vectorisable, short dependency chains, deterministic.
// The lanes are one vector of GCC's vector extension (an AVX register; two SSE
// registers in the x86-64 build), so the pairwise adds stay in registers, and
// the loops are inline: the row kernels below run them without a call.
constexpr size_t kLanes = 8;
// (GCC notes that the x86-64 build passes such a vector differently from an AVX
// build; these functions are inline and never cross between the two builds.)
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
typedef float Half __attribute__((vector_size(kLanes / 2 * sizeof(float))));

inline Lanes load_lanes(const float* x) {
    Lanes v;
    __builtin_memcpy(&v, x, sizeof v);  // unaligned
    return v;
}

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
inline float add_lanes(Lanes v) {
    const Half low = __builtin_shufflevector(v, v, 0, 1, 2, 3), high = __builtin_shufflevector(v, v, 4, 5, 6, 7);
    const Half quarter = low + high;
    return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

// The sums of R rows side by side (row r at x + r stride): R independent chains.
template <size_t R>
[[gnu::always_inline]] inline void sums_inline(const float* x, size_t stride, size_t n, float (&out)[R]) {
    Lanes lanes[R] = {};
    size_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (size_t r = 0; r < R; ++r) lanes[r] += load_lanes(x + r * stride + i);
    float rest[R] = {};
    for (; i < n; ++i)
        for (size_t r = 0; r < R; ++r) rest[r] += x[r * stride + i];
    for (size_t r = 0; r < R; ++r) out[r] = add_lanes(lanes[r]) + rest[r];
}

// The dots of R pairs of rows side by side (rows r at a + r stride, b + r stride).
template <size_t R>
[[gnu::always_inline]] inline void dots_inline(const float* a, const float* b, size_t stride, size_t n, float (&out)[R]) {
    Lanes lanes[R] = {};
    size_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (size_t r = 0; r < R; ++r) {
#if defined(__FMA__)
            lanes[r] = _mm256_fmadd_ps(load_lanes(a + r * stride + i), load_lanes(b + r * stride + i), lanes[r]);
#else
            for (size_t l = 0; l < kLanes; ++l) lanes[r][l] = madd(a[r * stride + i + l], b[r * stride + i + l], lanes[r][l]);
#endif
        }
    float rest[R] = {};
    for (; i < n; ++i)
        for (size_t r = 0; r < R; ++r) rest[r] = madd(a[r * stride + i], b[r * stride + i], rest[r]);
    for (size_t r = 0; r < R; ++r) out[r] = add_lanes(lanes[r]) + rest[r];
}

inline float sum_inline(const float* x, size_t n) {
    float out[1];
    sums_inline(x, 0, n, out);
    return out[0];
}

float sum(const float* x, size_t n) { return sum_inline(x, n); }

float dot(const float* a, const float* b, size_t n) {
    float out[1];
    dots_inline(a, b, 0, n, out);
    return out[0];
}

float max(const float* x, size_t n) {
    float lanes[kLanes];
    for (size_t l = 0; l < kLanes; ++l) lanes[l] = x[0];
    size_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (size_t l = 0; l < kLanes; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
    float m = lanes[0];
    for (size_t l = 1; l < kLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

// In blocks of 16 (the widest vector's floats), the tail of a row of 16 or more
// as one more block: its last 16 inputs, of which only the tail's outputs are
// kept (x may be y, softmax rows being done in place: the block's first inputs
// may already be outputs, and their results are dropped). Per value the same
// operations as the vectoriser's scalar tail, which took longer than the vector
// (a softmax row of 20 keys: 26 ns, now 21).
float exp_shifted(const float* x, float shift, float* y, size_t n) {
    constexpr size_t kBlock = 16;
    const size_t whole = n < kBlock ? n : n - n % kBlock;
    for (size_t i = 0; i < whole; ++i) y[i] = exp_poly(x[i] - shift);
    if (whole < n) {
        float block[kBlock];
        for (size_t i = 0; i < kBlock; ++i) block[i] = exp_poly(x[n - kBlock + i] - shift);
        for (size_t i = whole; i < n; ++i) y[i] = block[i - (n - kBlock)];
    }
    return sum_inline(y, n);
}

void gelu_forward(const float* x, float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] * normal_cdf(x[i]);
}

// Phi(x) is read back from the forward's y = x Phi(x) (one division, no second
// erfc); near 0, where y / x loses its digits, Phi(x) = 1/2 + x phi(0) to 1e-19.
void gelu_backward(const float* g, const float* x, const float* y, float* gx, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const float pdf = kInvSqrt2Pi * exp_poly(-0.5f * x[i] * x[i]);
        const float cdf = std::fabs(x[i]) < 1e-6f ? madd(x[i], kInvSqrt2Pi, 0.5f) : y[i] / x[i];
        gx[i] = g[i] * madd(x[i], pdf, cdf);
    }
}

// LayerNorm four rows at a time (layer_norm_rows.h): four chains for the CPU to overlap.
constexpr size_t kRowsAtOnce = 4;
constexpr auto row_sums = []<size_t R>(const float* x, size_t stride, size_t n, float (&out)[R]) { sums_inline(x, stride, n, out); };
constexpr auto row_dots = []<size_t R>(const float* a, const float* b, size_t stride, size_t n, float (&out)[R]) {
    dots_inline(a, b, stride, n, out);
};

void layer_norm_rows(const float* x, const float* w, const float* b, float eps, float* h, float* y, float* rstd, size_t count, size_t n) {
    rows::layer_norm_block<kRowsAtOnce>(x, w, b, eps, h, y, rstd, count, n, row_sums, row_dots);
}

void layer_norm_rows_backward(const float* g, const float* w, const float* h, const float* rstd, float* dx, size_t count, size_t n) {
    rows::layer_norm_backward_block<kRowsAtOnce>(g, w, h, rstd, dx, count, n, row_sums, row_dots);
}

// C (M,N) = alpha op(A) B + beta C in kernels.h's order: each element one chain
// of fused multiply-adds over k = 0, 1, ..., K-1, from C itself when alpha = beta
// = 1, else from 0 (then times alpha, or alpha acc + beta C with one rounding
// after beta C). B is (K,N) here (kernels.cpp transposes a transposed B first);
// `row` is N floats of scratch. The chain runs along a row of C, one k at a
// time, so the vectoriser takes 8 or 16 columns per instruction and the order
// of each element's chain stays the same whatever the width.
void gemm(bool trans_a, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B, size_t ldb,
          float beta, float* C, size_t ldc, float* row) {
    const bool from_c = alpha == 1.0f && beta == 1.0f, into_c = beta == 0.0f;
    for (size_t i = 0; i < M; ++i) {
        float* c = C + i * ldc;
        float* __restrict acc = from_c || into_c ? c : row;
        if (!from_c)
            for (size_t j = 0; j < N; ++j) acc[j] = 0.0f;
        for (size_t k = 0; k < K; ++k) {
            const float a = trans_a ? A[k * lda + i] : A[i * lda + k];
            const float* __restrict b = B + k * ldb;
            for (size_t j = 0; j < N; ++j) acc[j] = madd(a, b[j], acc[j]);
        }
        if (into_c && alpha != 1.0f)
            for (size_t j = 0; j < N; ++j) c[j] *= alpha;
        if (!from_c && !into_c)
            for (size_t j = 0; j < N; ++j) c[j] = madd(alpha, acc[j], beta * c[j]);
    }
}

// The pointwise functions of pointwise.h on this set's polynomials: one pass
// each way, f(x; p) forward and g f'(x; p) backward, f' from f on dual numbers.
struct Polynomials {
    float exp(float x) const { return exp_poly(x); }
    float tanh(float x) const { return tanh_poly(x); }
};

template <class F>
void pointwise_forward(const float* x, float param, float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = pointwise::value_at<F>(Polynomials{}, x[i], param);
}

template <class F>
void pointwise_backward(const float* g, const float* x, float param, float* gx, size_t n) {
    for (size_t i = 0; i < n; ++i) gx[i] = g[i] * pointwise::derivative_at<F>(Polynomials{}, x[i], param);
}

// One entry per function of pointwise::All, in its order.
template <class... F>
constexpr std::array<PointwiseKernel, sizeof...(F)> kernels_for(pointwise::Functions<F...>) {
    return {PointwiseKernel{&pointwise_forward<F>, &pointwise_backward<F>}...};
}
extern const std::array<PointwiseKernel, pointwise::All::count> pointwise_kernels = kernels_for(pointwise::All{});

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_ISA
