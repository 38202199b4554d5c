// Forward-mode dual numbers: a + b eps with eps^2 = 0, so that evaluating a
// function f at Dual{x, 1} gives Dual{f(x), f'(x)}. The pointwise functions of
// pointwise.h take their derivative this way, from the one definition of f.
//
// Plain C++ that nvcc compiles too (ATTNLAB_HOST_DEVICE). The maths library is
// a parameter M (pointwise.h): the CPU's vectorised polynomials, libm's double
// functions or CUDA's, so that the same definition runs in every kernel, and
// each instantiation (one per instruction set) is a distinct function.
#pragma once

#include "autograd/host_device.h"

namespace attnlab::pointwise {

template <class T>
struct Dual {
    T v;  // the value
    T d;  // its derivative
};

// The scalar type under S: T for T and for Dual<T>.
template <class S> struct value_of { using type = S; };
template <class T> struct value_of<Dual<T>> { using type = T; };
template <class S> using value_t = typename value_of<S>::type;

template <class T> ATTNLAB_INLINE T value(T x) { return x; }
template <class T> ATTNLAB_INLINE T value(Dual<T> x) { return x.v; }

// ---- arithmetic: the derivative rules -----------------------------------------

template <class T> ATTNLAB_INLINE Dual<T> operator+(Dual<T> a, Dual<T> b) { return {a.v + b.v, a.d + b.d}; }
template <class T> ATTNLAB_INLINE Dual<T> operator-(Dual<T> a, Dual<T> b) { return {a.v - b.v, a.d - b.d}; }
template <class T> ATTNLAB_INLINE Dual<T> operator-(Dual<T> a) { return {-a.v, -a.d}; }
// (a b)' = a' b + a b'
template <class T> ATTNLAB_INLINE Dual<T> operator*(Dual<T> a, Dual<T> b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
// (a / b)' = (a' - (a / b) b') / b
template <class T> ATTNLAB_INLINE Dual<T> operator/(Dual<T> a, Dual<T> b) {
    const T q = a.v / b.v;
    return {q, (a.d - q * b.d) / b.v};
}

// With a constant (derivative 0) on either side.
template <class T> ATTNLAB_INLINE Dual<T> operator+(Dual<T> a, T c) { return {a.v + c, a.d}; }
template <class T> ATTNLAB_INLINE Dual<T> operator+(T c, Dual<T> a) { return {c + a.v, a.d}; }
template <class T> ATTNLAB_INLINE Dual<T> operator-(Dual<T> a, T c) { return {a.v - c, a.d}; }
template <class T> ATTNLAB_INLINE Dual<T> operator-(T c, Dual<T> a) { return {c - a.v, -a.d}; }
template <class T> ATTNLAB_INLINE Dual<T> operator*(Dual<T> a, T c) { return {a.v * c, a.d * c}; }
template <class T> ATTNLAB_INLINE Dual<T> operator*(T c, Dual<T> a) { return {c * a.v, c * a.d}; }
template <class T> ATTNLAB_INLINE Dual<T> operator/(Dual<T> a, T c) { return {a.v / c, a.d / c}; }
template <class T> ATTNLAB_INLINE Dual<T> operator/(T c, Dual<T> a) {
    const T q = c / a.v;  // (c / a)' = -(c / a) a' / a
    return {q, -q * a.d / a.v};
}

// ---- the maths library M's functions, and their derivatives -------------------

template <class M, class T> ATTNLAB_INLINE T exp(const M& m, T x) { return m.exp(x); }
template <class M, class T> ATTNLAB_INLINE Dual<T> exp(const M& m, Dual<T> x) {
    const T e = m.exp(x.v);  // exp' = exp
    return {e, e * x.d};
}
template <class M, class T> ATTNLAB_INLINE T tanh(const M& m, T x) { return m.tanh(x); }
template <class M, class T> ATTNLAB_INLINE Dual<T> tanh(const M& m, Dual<T> x) {
    const T t = m.tanh(x.v);  // tanh' = 1 - tanh^2
    return {t, (T(1) - t * t) * x.d};
}

// `keep ? x : 0` by x's value, as a select (no branch: it vectorises). Where it
// drops x, the derivative is 0 too.
template <class T> ATTNLAB_INLINE T keep_if(bool keep, T x) { return keep ? x : T(0); }
template <class T> ATTNLAB_INLINE Dual<T> keep_if(bool keep, Dual<T> x) {
    return {keep ? x.v : T(0), keep ? x.d : T(0)};
}

}  // namespace attnlab::pointwise
