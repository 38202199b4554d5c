// Pointwise functions, each defined once as a scalar formula f(x; p) (p one
// constant: a cap, a threshold). From that one definition the engine makes
//   - the CPU float kernels, one pass forward and one backward, vectorised for
//     each instruction set (kernels_impl.h, with its exp and tanh polynomials,
//     so every set gives the same bits);
//   - the float64 loops of gradient checks (libm);
//   - the device kernels (cuda/primitives.cu, libm's CUDA functions);
//   - every derivative: f evaluated on a dual number (dual.h), never written.
// The op is `apply<F>` (ops.h); a function joins the engine by its struct
// below and its place in `All`.
//
// A definition is a struct with
//   name:  the op's name in messages and the tape;
//   f(m, x, p): the formula, generic in the scalar S (float, double, Dual) and
//          in the maths library m (exp, tanh); constants as T = value_t<S>.
// A select on x's value (x > p ? ...) is written with keep_if, which vectorises.
#pragma once

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "autograd/dual.h"

namespace attnlab::pointwise {

// GPT-2's activation (Hugging Face's "gelu_new"; torch's gelu(approximate="tanh")):
//   f(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
struct GeluTanh {
    static constexpr const char* name = "gelu_tanh";
    template <class M, class S, class T = value_t<S>>
    ATTNLAB_INLINE static S f(const M& m, S x, T /*unused*/) {
        const T sqrt_2_over_pi = T(0.79788456080286535588), cubic = T(0.044715), half = T(0.5), one = T(1);
        return half * x * (one + tanh(m, sqrt_2_over_pi * (x + cubic * (x * x * x))));
    }
};

// The soft-cap of attention scores and logits (Gemma 2): f(s; c) = c tanh(s / c), c > 0.
struct SoftCap {
    static constexpr const char* name = "softcap";
    template <class M, class S, class T = value_t<S>>
    ATTNLAB_INLINE static S f(const M& m, S s, T cap) {
        return cap * tanh(m, s / cap);
    }
};

// ReLU after a threshold: f(x; theta) = max(x - theta, 0).
struct ThresholdRelu {
    static constexpr const char* name = "threshold_relu";
    template <class M, class S, class T = value_t<S>>
    ATTNLAB_INLINE static S f(const M&, S x, T theta) {
        return keep_if(value(x) > theta, x - theta);
    }
};

// JumpReLU (Rajamanoharan et al. 2024): f(x; theta) = x where x > theta, else 0
// (torch.nn.Threshold(theta, 0)). Its derivative in x is 1 above theta, 0 below.
struct JumpRelu {
    static constexpr const char* name = "jump_relu";
    template <class M, class S, class T = value_t<S>>
    ATTNLAB_INLINE static S f(const M&, S x, T theta) {
        return keep_if(value(x) > theta, x);
    }
};

// ---- the engine's list, and what it derives --------------------------------------

template <class... F>
struct Functions {
    static constexpr size_t count = sizeof...(F);
};
// Every pointwise function the kernels are built for, in a fixed order (the
// index the CPU and device kernels are looked up by).
using All = Functions<GeluTanh, SoftCap, ThresholdRelu, JumpRelu>;

// F's place in All.
template <class F, class... G>
constexpr size_t index_in(Functions<G...>) {
    size_t i = 0, found = sizeof...(G);
    ((found = (found == sizeof...(G) && std::is_same_v<F, G>) ? i : found, ++i), ...);
    return found;
}
template <class F>
constexpr size_t index_of = index_in<F>(All{});

// Calls visit.template operator()<F>() for the F at `index` of All (nothing
// when index is out of range): how a kernel built for every function picks one.
template <class Visit, class... F>
ATTNLAB_HOST_DEVICE void visit_in(Functions<F...>, size_t index, Visit& visit) {
    size_t i = 0;
    (void)((i++ == index ? (visit.template operator()<F>(), true) : false) || ...);
}
template <class Visit>
ATTNLAB_HOST_DEVICE void visit(size_t index, Visit&& visit) {
    visit_in(All{}, index, visit);
}

// f(x; p) and f'(x; p), the latter as the dual part of f(Dual{x, 1}; p).
template <class F, class M, class T>
ATTNLAB_INLINE T value_at(const M& m, T x, T param) {
    return F::f(m, x, param);
}
template <class F, class M, class T>
ATTNLAB_INLINE T derivative_at(const M& m, T x, T param) {
    return F::f(m, Dual<T>{x, T(1)}, param).d;
}

// The maths library of the float64 loops, the device kernels and their host
// seam: libm (CUDA's on the device).
struct Libm {
    ATTNLAB_INLINE float exp(float x) const { return ::expf(x); }
    ATTNLAB_INLINE double exp(double x) const { return ::exp(x); }
    ATTNLAB_INLINE float tanh(float x) const { return ::tanhf(x); }
    ATTNLAB_INLINE double tanh(double x) const { return ::tanh(x); }
};

}  // namespace attnlab::pointwise
