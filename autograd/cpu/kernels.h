// Elementwise and row kernels behind the ops' hot loops, on raw pointers.
//
// The float versions are compiled for AVX-512, AVX2+FMA and plain x86-64
// (kernels_impl.h; the widest the CPU runs is picked at first use) and
// vectorise because exp and erfc are written as polynomials instead of calls
// into libm. Their error, checked in tests/autograd against std::exp / std::erfc:
//   exp: relative error below 4e-7 on [-86.5, 88.7]; exactly 0 below -86.5
//        (true values under 3e-38) and for -inf; +inf above 88.7; NaN stays NaN
//   erfc (inside gelu): relative error below 5e-7 (Numerical Recipes' Chebyshev fit, 1.2e-7,
//        plus our exp)
// The float64 versions call std::exp and std::erfc: gradient checks run in
// float64 and see libm's values.
#pragma once

#include <cstddef>

namespace attnlab::kernels {

float exp(float x);  // the scalar form of the vectorised exp

// Row reductions. The float versions add in 8 fixed lanes, then the lanes
// pairwise: vectorised, and the same result for the same inputs every run
// (not the same as a left-to-right sum). float64: plain left-to-right loops.
float sum(const float* x, size_t n);
double sum(const double* x, size_t n);
float dot(const float* a, const float* b, size_t n);
double dot(const double* a, const double* b, size_t n);

// The largest of x[0], ..., x[n-1], n >= 1 (exact in any order). A NaN may or
// may not be returned: callers feed the maximum to exp_shifted, whose sum is
// NaN for a row holding one either way.
float max(const float* x, size_t n);
double max(const double* x, size_t n);

// y[i] = exp(x[i] - shift); returns the sum of y (accumulated in the input type).
float exp_shifted(const float* x, float shift, float* y, size_t n);
double exp_shifted(const double* x, double shift, double* y, size_t n);

// gelu(x) = x Phi(x);  d gelu / dx = Phi(x) + x phi(x)   (exact form, as torch's default)
void gelu_forward(const float* x, float* y, size_t n);
void gelu_forward(const double* x, double* y, size_t n);
// y = gelu_forward(x): the float version reads Phi(x) back as y / x.
void gelu_backward(const float* g, const float* x, const float* y, float* gx, size_t n);
void gelu_backward(const double* g, const double* x, const double* y, double* gx, size_t n);

// LayerNorm over `rows` consecutive rows of n values (row r at x + r n, h + r n,
// y + r n): h = (x - mean) rstd, y = h w + b (w, b may be null; one w and b
// for every row), rstd[r] = 1 / sqrt(var + eps), var the biased variance.
void layer_norm_rows(const float* x, const float* w, const float* b, float eps, float* h, float* y, float* rstd, size_t rows, size_t n);
void layer_norm_rows(const double* x, const double* w, const double* b, double eps, double* h, double* y, double* rstd, size_t rows,
                     size_t n);
// Its backward from h and rstd: dx = rstd (dh - mean(dh) - h mean(dh h)), dh = g w.
void layer_norm_rows_backward(const float* g, const float* w, const float* h, const float* rstd, float* dx, size_t rows, size_t n);
void layer_norm_rows_backward(const double* g, const double* w, const double* h, const double* rstd, double* dx, size_t rows, size_t n);

}  // namespace attnlab::kernels
