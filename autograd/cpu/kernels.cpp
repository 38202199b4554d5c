#include "autograd/cpu/kernels.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/cpu/layer_norm_rows.h"
#include "autograd/pointwise.h"

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
    void gemm(bool trans_a, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B, size_t ldb, \
              float beta, float* C, size_t ldc, float* row);                  \
    extern const std::array<PointwiseKernel, pointwise::All::count> pointwise_kernels; \
    }
ATTNLAB_DECLARE_ISA(generic)
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
    void (*gemm)(bool, size_t, size_t, size_t, float, const float*, size_t, const float*, size_t, float, float*, size_t, float*);
    const std::array<PointwiseKernel, pointwise::All::count>* pointwise;
};

#define ATTNLAB_KERNELS_OF(isa)                                                                                      \
    FloatKernels{isa::sum, isa::dot, isa::max, isa::exp_shifted, isa::gelu_forward, isa::gelu_backward,             \
                 isa::layer_norm_rows, isa::layer_norm_rows_backward, isa::gemm, &isa::pointwise_kernels}
const FloatKernels kGeneric = ATTNLAB_KERNELS_OF(generic), kAvx2 = ATTNLAB_KERNELS_OF(avx2), kAvx512 = ATTNLAB_KERNELS_OF(avx512);
#undef ATTNLAB_KERNELS_OF

const FloatKernels& kernels_of(Isa isa) {
    return isa == Isa::avx512 ? kAvx512 : isa == Isa::avx2 ? kAvx2 : kGeneric;
}

Isa isa_from_environment() {
    const Isa widest = widest_isa();
    const char* named = std::getenv("ATTNLAB_ISA");
    if (named == nullptr || *named == '\0') return widest;
    for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512})
        if (std::string(named) == isa_name(isa)) {
            if (isa > widest)
                throw std::invalid_argument(std::string("ATTNLAB_ISA=") + named + ": this CPU runs " + isa_name(widest) +
                                            " at widest");
            return isa;
        }
    throw std::invalid_argument("ATTNLAB_ISA: expected generic, avx2 or avx512, got '" + std::string(named).substr(0, 40) + "'");
}

// The set in use, chosen at the first call (isa_from_environment).
std::atomic<Isa>& chosen() {
    static std::atomic<Isa> in_use{isa_from_environment()};
    return in_use;
}

const FloatKernels& current() { return kernels_of(chosen().load(std::memory_order_relaxed)); }

// The float64 sum and dot (defined below), as callables for the row templates.
constexpr auto plain_sums = []<size_t R>(const double* x, size_t stride, size_t n, double (&out)[R]) {
    for (size_t r = 0; r < R; ++r) out[r] = sum(x + r * stride, n);
};
constexpr auto plain_dots = []<size_t R>(const double* a, const double* b, size_t stride, size_t n, double (&out)[R]) {
    for (size_t r = 0; r < R; ++r) out[r] = dot(a + r * stride, b + r * stride, n);
};

constexpr double kInvSqrt2Pi = 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2;

}  // namespace

const char* isa_name(Isa isa) { return isa == Isa::avx512 ? "avx512" : isa == Isa::avx2 ? "avx2" : "generic"; }

Isa widest_isa() {
    static const Isa widest = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            return Isa::avx512;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
        return Isa::generic;
    }();
    return widest;
}

Isa isa() { return chosen().load(std::memory_order_relaxed); }

void set_isa(Isa isa) {
    if (isa > widest_isa())
        throw std::invalid_argument(std::string("set_isa: this CPU runs ") + isa_name(widest_isa()) + " at widest, not " + isa_name(isa));
    chosen().store(isa);
}

void gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
          size_t ldb, float beta, float* C, size_t ldc) {
    thread_local std::vector<float> transposed, row;  // op(B) (K,N) when B is stored (N,K); one row of C
    if (trans_b) {
        transposed.resize(K * N);
        for (size_t j = 0; j < N; ++j)
            for (size_t k = 0; k < K; ++k) transposed[k * N + j] = B[j * ldb + k];
        B = transposed.data();
        ldb = N;
    }
    row.resize(N);
    current().gemm(trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, row.data());
}

float exp(float x) {
    float y;
    current().exp_shifted(&x, 0.0f, &y, 1);
    return y;
}

float sum(const float* x, size_t n) { return current().sum(x, n); }
float dot(const float* a, const float* b, size_t n) { return current().dot(a, b, n); }
float max(const float* x, size_t n) { return current().max(x, n); }
float exp_shifted(const float* x, float shift, float* y, size_t n) { return current().exp_shifted(x, shift, y, n); }
void gelu_forward(const float* x, float* y, size_t n) { current().gelu_forward(x, y, n); }
void gelu_backward(const float* g, const float* x, const float* y, float* gx, size_t n) {
    current().gelu_backward(g, x, y, gx, n);
}

void pointwise_forward(size_t function, const float* x, float param, float* y, size_t n) {
    current().pointwise->at(function).forward(x, param, y, n);
}
void pointwise_backward(size_t function, const float* g, const float* x, float param, float* gx, size_t n) {
    current().pointwise->at(function).backward(g, x, param, gx, n);
}

void layer_norm_rows(const float* x, const float* w, const float* b, float eps, float* h, float* y, float* rstd, size_t rows, size_t n) {
    current().layer_norm_rows(x, w, b, eps, h, y, rstd, rows, n);
}
void layer_norm_rows_backward(const float* g, const float* w, const float* h, const float* rstd, float* dx, size_t rows, size_t n) {
    current().layer_norm_rows_backward(g, w, h, rstd, dx, rows, n);
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

// float64: the same definitions on libm.
void pointwise_forward(size_t function, const double* x, double param, double* y, size_t n) {
    pointwise::visit(function, [&]<class F>() {
        for (size_t i = 0; i < n; ++i) y[i] = pointwise::value_at<F>(pointwise::Libm{}, x[i], param);
    });
}
void pointwise_backward(size_t function, const double* g, const double* x, double param, double* gx, size_t n) {
    pointwise::visit(function, [&]<class F>() {
        for (size_t i = 0; i < n; ++i) gx[i] = g[i] * pointwise::derivative_at<F>(pointwise::Libm{}, x[i], param);
    });
}

}  // namespace attnlab::kernels
