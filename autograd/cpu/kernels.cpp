#include "autograd/cpu/kernels.h"

#include <cmath>
#include <numbers>

#include "autograd/cpu/layer_norm_rows.h"

namespace attnlab::kernels {

// One set of the float loops per instruction set (kernels_impl.h).
#define ATTNLAB_DECLARE_ISA(isa)                                              \
    namespace isa {                                                           \
    float sum(const float* x, size_t n);                                      \
    float dot(const float* a, const float* b, size_t n);                      \
    float max(const float* x, size_t n);                                      \
    float exp_shifted(const float* x, float shift, float* y, size_t n);       \
    void gelu_forward(const float* x, float* y, size_t n);                    \
    void gelu_backward(const float* g, const float* x, const float* y, float* gx, size_t n);  \
    void layer_norm_rows(const float* x, const float* w, const float* b, float eps, float* h, float* y, float* rstd, size_t rows, size_t n); \
    void layer_norm_rows_backward(const float* g, const float* w, const float* h, const float* rstd, float* dx, size_t rows, size_t n); \
    }
ATTNLAB_DECLARE_ISA(base)
ATTNLAB_DECLARE_ISA(avx2)
ATTNLAB_DECLARE_ISA(avx512)
#undef ATTNLAB_DECLARE_ISA

namespace {

struct FloatKernels {
    float (*sum)(const float*, size_t);
    float (*dot)(const float*, const float*, size_t);
    float (*max)(const float*, size_t);
    float (*exp_shifted)(const float*, float, float*, size_t);
    void (*gelu_forward)(const float*, float*, size_t);
    void (*gelu_backward)(const float*, const float*, const float*, float*, size_t);
    void (*layer_norm_rows)(const float*, const float*, const float*, float, float*, float*, float*, size_t, size_t);
    void (*layer_norm_rows_backward)(const float*, const float*, const float*, const float*, float*, size_t, size_t);
};

// The widest set this CPU runs, chosen once.
const FloatKernels& best() {
    static const FloatKernels chosen = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            return FloatKernels{avx512::sum, avx512::dot, avx512::max, avx512::exp_shifted, avx512::gelu_forward, avx512::gelu_backward,
                                avx512::layer_norm_rows, avx512::layer_norm_rows_backward};
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            return FloatKernels{avx2::sum, avx2::dot, avx2::max, avx2::exp_shifted, avx2::gelu_forward, avx2::gelu_backward,
                                avx2::layer_norm_rows, avx2::layer_norm_rows_backward};
        return FloatKernels{base::sum, base::dot, base::max, base::exp_shifted, base::gelu_forward, base::gelu_backward,
                                base::layer_norm_rows, base::layer_norm_rows_backward};
    }();
    return chosen;
}

// The float64 sum and dot (defined below), as callables for the row templates.
constexpr auto plain_sums = []<size_t R>(const double* x, size_t stride, size_t n, double (&out)[R]) {
    for (size_t r = 0; r < R; ++r) out[r] = sum(x + r * stride, n);
};
constexpr auto plain_dots = []<size_t R>(const double* a, const double* b, size_t stride, size_t n, double (&out)[R]) {
    for (size_t r = 0; r < R; ++r) out[r] = dot(a + r * stride, b + r * stride, n);
};

constexpr double kInvSqrt2Pi = 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2;

}  // namespace

float exp(float x) {
    float y;
    best().exp_shifted(&x, 0.0f, &y, 1);
    return y;
}

float sum(const float* x, size_t n) { return best().sum(x, n); }
float dot(const float* a, const float* b, size_t n) { return best().dot(a, b, n); }
float max(const float* x, size_t n) { return best().max(x, n); }
float exp_shifted(const float* x, float shift, float* y, size_t n) { return best().exp_shifted(x, shift, y, n); }
void gelu_forward(const float* x, float* y, size_t n) { best().gelu_forward(x, y, n); }
void gelu_backward(const float* g, const float* x, const float* y, float* gx, size_t n) {
    best().gelu_backward(g, x, y, gx, n);
}

void layer_norm_rows(const float* x, const float* w, const float* b, float eps, float* h, float* y, float* rstd, size_t rows, size_t n) {
    best().layer_norm_rows(x, w, b, eps, h, y, rstd, rows, n);
}
void layer_norm_rows_backward(const float* g, const float* w, const float* h, const float* rstd, float* dx, size_t rows, size_t n) {
    best().layer_norm_rows_backward(g, w, h, rstd, dx, rows, n);
}

// float64: the same row loops over the plain sum and dot below, a row at a time.
void layer_norm_rows(const double* x, const double* w, const double* b, double eps, double* h, double* y, double* rstd, size_t rows,
                     size_t n) {
    rows::layer_norm_block<1>(x, w, b, eps, h, y, rstd, rows, n, plain_sums, plain_dots);
}
void layer_norm_rows_backward(const double* g, const double* w, const double* h, const double* rstd, double* dx, size_t rows, size_t n) {
    rows::layer_norm_backward_block<1>(g, w, h, rstd, dx, rows, n, plain_sums, plain_dots);
}

double sum(const double* x, size_t n) {
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += x[i];
    return total;
}

double max(const double* x, size_t n) {
    double m = x[0];
    for (size_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

double dot(const double* a, const double* b, size_t n) {
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += a[i] * b[i];
    return total;
}

double exp_shifted(const double* x, double shift, double* y, size_t n) {
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += y[i] = std::exp(x[i] - shift);
    return total;
}

void gelu_forward(const double* x, double* y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] * 0.5 * std::erfc(-x[i] * (std::numbers::sqrt2 / 2));
}

// The float64 form recomputes Phi with libm (it is the reference the float one is tested against).
void gelu_backward(const double* g, const double* x, const double* /*y*/, double* gx, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const double cdf = 0.5 * std::erfc(-x[i] * (std::numbers::sqrt2 / 2));
        gx[i] = g[i] * (cdf + x[i] * kInvSqrt2Pi * std::exp(-0.5 * x[i] * x[i]));
    }
}

}  // namespace attnlab::kernels
