// LayerNorm's row loops, written once for both value types: kernels_impl.h
// instantiates them per instruction set with that set's float sums and dots,
// kernels.cpp with the float64 ones (kernels.h declares the results).
//
// A row's arithmetic is a chain: its sum, then its mean, then the centred
// values' dot, then rstd. Rows are taken R at a time, R consecutive rows side
// by side in every phase, so that the CPU runs R independent chains at once;
// each row's values are those of the row taken alone (R = 1), bit for bit.
// `sums(x, stride, n, out)` and `dots(a, b, stride, n, out)` give the R rows'
// sums and dots (row r at x + r stride; out a T[R], whose size says R).
#pragma once

#include <cmath>
#include <cstddef>

namespace attnlab::kernels::rows {

// h = (x - mean) rstd, y = h w + b (w, b may be null; the same for the R rows);
// rstd[r] = 1 / sqrt(var + eps). Row r at x + r n, h + r n, y + r n.
template <size_t R, class T, class Sums, class Dots>
void layer_norm(const T* x, const T* w, const T* b, T eps, T* h, T* y, T* rstd, size_t n, Sums sums, Dots dots) {
    T mu[R], sq[R];
    sums(x, n, n, mu);
    for (size_t r = 0; r < R; ++r) {
        mu[r] /= static_cast<T>(n);
        for (size_t i = 0; i < n; ++i) h[r * n + i] = x[r * n + i] - mu[r];
    }
    dots(h, h, n, n, sq);
    for (size_t r = 0; r < R; ++r) {
        rstd[r] = T(1) / std::sqrt(sq[r] / static_cast<T>(n) + eps);
        for (size_t i = 0; i < n; ++i) {
            T& hi = h[r * n + i];
            hi *= rstd[r];
            y[r * n + i] = (w ? hi * w[i] : hi) + (b ? b[i] : T(0));
        }
    }
}

// dx = rstd (dh - mean(dh) - h mean(dh h)), dh = g w (w may be null), row r at
// g + r n, h + r n, dx + r n with rstd[r].
template <size_t R, class T, class Sums, class Dots>
void layer_norm_backward(const T* g, const T* w, const T* h, const T* rstd, T* dx, size_t n, Sums sums, Dots dots) {
    for (size_t r = 0; r < R; ++r)
        for (size_t i = 0; i < n; ++i) dx[r * n + i] = w ? g[r * n + i] * w[i] : g[r * n + i];
    T mean_dh[R], mean_dh_h[R];
    sums(dx, n, n, mean_dh);
    dots(dx, h, n, n, mean_dh_h);
    for (size_t r = 0; r < R; ++r) {
        mean_dh[r] /= static_cast<T>(n);
        mean_dh_h[r] /= static_cast<T>(n);
        for (size_t i = 0; i < n; ++i) dx[r * n + i] = rstd[r] * (dx[r * n + i] - mean_dh[r] - h[r * n + i] * mean_dh_h[r]);
    }
}

// Every row of a block of `rows` rows: R at a time, then the rest one by one.
template <size_t R, class T, class Sums, class Dots>
void layer_norm_block(const T* x, const T* w, const T* b, T eps, T* h, T* y, T* rstd, size_t rows, size_t n, Sums sums, Dots dots) {
    size_t r = 0;
    for (; r + R <= rows; r += R) layer_norm<R>(x + r * n, w, b, eps, h + r * n, y + r * n, rstd + r, n, sums, dots);
    for (; r < rows; ++r) layer_norm<1>(x + r * n, w, b, eps, h + r * n, y + r * n, rstd + r, n, sums, dots);
}

template <size_t R, class T, class Sums, class Dots>
void layer_norm_backward_block(const T* g, const T* w, const T* h, const T* rstd, T* dx, size_t rows, size_t n, Sums sums, Dots dots) {
    size_t r = 0;
    for (; r + R <= rows; r += R) layer_norm_backward<R>(g + r * n, w, h + r * n, rstd + r, dx + r * n, n, sums, dots);
    for (; r < rows; ++r) layer_norm_backward<1>(g + r * n, w, h + r * n, rstd + r, dx + r * n, n, sums, dots);
}

}  // namespace attnlab::kernels::rows
