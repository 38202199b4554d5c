// Elementwise and row kernels behind the ops' hot loops, on raw pointers.
//
// The float versions are compiled for AVX-512, AVX2+FMA and plain x86-64
// (kernels_impl.h; the widest the CPU runs is picked at first use, or a
// narrower one by ATTNLAB_ISA) and vectorise because exp and erfc are written
// as polynomials instead of calls into libm. Every set gives the same bits for
// the same inputs: a run's numbers do not depend on the CPU it ran on
// (tests/autograd/test_isa.cpp, tests/cli/test_isa.py). Their error, checked in tests/autograd against std::exp / std::erfc:
//   exp: relative error below 4e-7 on [-86.5, 88.7]; exactly 0 below -86.5
//        (true values under 3e-38) and for -inf; +inf above 88.7; NaN stays NaN
//   erfc (inside gelu): relative error below 5e-7 (Numerical Recipes' Chebyshev fit, 1.2e-7,
//        plus our exp)
// The float64 versions call std::exp and std::erfc: gradient checks run in
// float64 and see libm's values.
#pragma once

#include <cstddef>

namespace attnlab::kernels {

// The instruction sets the float kernels are compiled for, narrowest first.
enum class Isa { generic, avx2, avx512 };
const char* isa_name(Isa isa);  // "generic", "avx2", "avx512"
Isa widest_isa();               // the widest this CPU runs
// The set in use: the widest, or the one the environment variable ATTNLAB_ISA
// names (generic, avx2 or avx512; none wider than the CPU runs), read at the
// first call. A bad ATTNLAB_ISA throws std::invalid_argument naming it.
Isa isa();
// Switches the set (tests; not while kernels run). A set wider than the CPU
// runs throws std::invalid_argument.
void set_isa(Isa isa);

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

// The pointwise functions of pointwise.h, by their index in pointwise::All:
// y = f(x; param) and gx = g f'(x; param), one pass each. The float versions
// compute exp and tanh by this file's polynomials (tanh: relative error below
// 1e-6, checked in tests/autograd against std::tanh); float64 calls libm.
void pointwise_forward(size_t function, const float* x, float param, float* y, size_t n);
void pointwise_forward(size_t function, const double* x, double param, double* y, size_t n);
void pointwise_backward(size_t function, const float* g, const float* x, float param, float* gx, size_t n);
void pointwise_backward(size_t function, const double* g, const double* x, double param, double* gx, size_t n);
// One function's float loops in one instruction set (kernels_impl.h builds a table of them).
struct PointwiseKernel {
    void (*forward)(const float* x, float param, float* y, size_t n);
    void (*backward)(const float* g, const float* x, float param, float* gx, size_t n);
};

// Row-major C (M,N) = alpha op(A) op(B) + beta C, op(A) (M,K), op(B) (K,N),
// lda, ldb, ldc the stored row strides, in attnlab's one order for float32
// products: each element of C is one chain of fused multiply-adds over k = 0,
// 1, ..., K-1, started from C itself when alpha = beta = 1 and from 0
// otherwise (then times alpha when beta = 0, else alpha acc + beta C with
// beta C rounded first). libxsmm's kernels compute the same chains (jit_gemm.h
// uses them where they exist; tests/autograd/test_isa.cpp checks the bits).
void gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
          size_t ldb, float beta, float* C, size_t ldc);

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
