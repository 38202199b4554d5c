// LayerNorm's row loops, written once for both value types: kernels_impl.h
// instantiates them per instruction set with that set's float sum and dot,
// kernels.cpp with the float64 ones (kernels.h declares the results).
#pragma once

#include <cmath>
#include <cstddef>

namespace attnlab::kernels::rows {

// h = (x - mean) rstd, y = h w + b (w, b may be null); returns rstd = 1 / sqrt(var + eps).
template <class T, class Sum, class Dot>
T layer_norm(const T* x, const T* w, const T* b, T eps, T* h, T* y, size_t n, Sum sum, Dot dot) {
    const T mu = sum(x, n) / static_cast<T>(n);
    for (size_t i = 0; i < n; ++i) h[i] = x[i] - mu;
    const T rstd = T(1) / std::sqrt(dot(h, h, n) / static_cast<T>(n) + eps);
    for (size_t i = 0; i < n; ++i) {
        h[i] *= rstd;
        y[i] = (w ? h[i] * w[i] : h[i]) + (b ? b[i] : T(0));
    }
    return rstd;
}

// dx = rstd (dh - mean(dh) - h mean(dh h)), dh = g w (w may be null).
template <class T, class Sum, class Dot>
void layer_norm_backward(const T* g, const T* w, const T* h, T rstd, T* dx, size_t n, Sum sum, Dot dot) {
    for (size_t i = 0; i < n; ++i) dx[i] = w ? g[i] * w[i] : g[i];
    const T mean_dh = sum(dx, n) / static_cast<T>(n);
    const T mean_dh_h = dot(dx, h, n) / static_cast<T>(n);
    for (size_t i = 0; i < n; ++i) dx[i] = rstd * (dx[i] - mean_dh - h[i] * mean_dh_h);
}

}  // namespace attnlab::kernels::rows
