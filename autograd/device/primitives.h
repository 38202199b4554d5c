// The device seam, part three: the primitives. About ten generic kernels give
// every autograd op a device path, so that an op or an option written as a
// composition of ops (autograd/composed.h) runs on the device without a kernel
// of its own; the fused kernels of kernels.h and attention.h stay as fast paths.
//
// float32, on pointers into DeviceBuffers of one Context; every call only queues
// work on the context's stream. Results are contiguous and row-major. An input
// is read through a Strided view (its sizes are the result's, its strides the
// input's, 0 on an axis it broadcasts along), so one kernel serves broadcasting,
// permutes, slices and expands. `accumulate`: out += result, else out = result.
// An output never overlaps an input read through another view (in place only
// where stated).
//
// The CPU reference of each is the autograd op of the same name (ops.h); the
// device op tests (tests/cuda/test_device_primitives.cpp) compare every op's
// device branch, values and gradients, with it: on the host seam
// (tests/device_host/host_primitives.cpp) and on the emulated kernels in CI,
// on the GPU with test_cuda.
//
// Plain C++; cuda/primitives.cu with -DATTNLAB_CUDA=ON, cuda/primitives_stub.cpp
// (which refuses) otherwise.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "autograd/device/context.h"
#include "autograd/host_device.h"

namespace attnlab::device {

constexpr unsigned max_rank = 8;  // axes of a Strided view (an op with more is refused before the kernel)

// Where element i of a contiguous result of shape `sizes` reads its input:
// at offset + sum over axes of index[axis] * strides[axis] (elements).
struct Strided {
    unsigned rank = 0;
    size_t sizes[max_rank] = {};
    size_t strides[max_rank] = {};
    size_t offset = 0;
};

// ---- elementwise ---------------------------------------------------------------

enum class BinaryOp { add, sub, mul, div };
// out[i] (+)= a[at_a(i)] op b[at_b(i)] over the n = prod(sizes) elements of the
// result (at_a and at_b have the same sizes).
void binary(Context& context, BinaryOp op, size_t n, const float* a, const Strided& at_a, const float* b,
            const Strided& at_b, float* out, bool accumulate);

// y = f(x); `param` is pow's exponent (the others ignore it). gelu and relu
// have their fused kernels (activation_forward, kernels.h).
enum class UnaryOp { neg, exp, log, sqrt, tanh, pow };

void unary(Context& context, UnaryOp op, size_t n, const float* x, float param, float* y);
// dx (+)= dy f'(x), from x or y = f(x), whichever the derivative reads.
void unary_backward(Context& context, UnaryOp op, size_t n, const float* x, const float* y, const float* dy,
                    float param, float* dx, bool accumulate);

// The pointwise functions of autograd/pointwise.h, by their index in
// pointwise::All, on CUDA's libm: y = f(x; param), and dx (+)= dy f'(x; param)
// with f' from f's one definition (dual numbers).
void pointwise(Context& context, size_t function, size_t n, const float* x, float param, float* y);
void pointwise_backward(Context& context, size_t function, size_t n, const float* x, const float* dy, float param,
                        float* dx, bool accumulate);

// out[i] (+)= mask[i] ? value : x[i]; mask (n), one byte per element. The
// forward of masked_fill, and with value 0 on dy its backward.
void masked_fill(Context& context, size_t n, const float* x, const uint8_t* mask, float value, float* out,
                 bool accumulate);

// The maths of one element, which cuda/primitives.cu and the host loops
// (tests/device_host/host_primitives.cpp) both run.
ATTNLAB_HOST_DEVICE inline float binary_value(BinaryOp op, float x, float y) {
    switch (op) {
        case BinaryOp::add: return x + y;
        case BinaryOp::sub: return x - y;
        case BinaryOp::mul: return x * y;
        case BinaryOp::div: return x / y;
    }
    return 0.0f;
}
ATTNLAB_HOST_DEVICE inline float unary_value(UnaryOp op, float v, float param) {
    switch (op) {
        case UnaryOp::neg: return -v;
        case UnaryOp::exp: return expf(v);
        case UnaryOp::log: return logf(v);
        case UnaryOp::sqrt: return sqrtf(v);
        case UnaryOp::tanh: return tanhf(v);
        case UnaryOp::pow: return powf(v, param);
    }
    return 0.0f;
}
// g f'(x) at element e, written as the CPU ops write it (autograd/ops_elementwise.cpp);
// each reads x or y = f(x), and the other may be null.
ATTNLAB_HOST_DEVICE inline float unary_grad(UnaryOp op, const float* x, const float* y, size_t e, float g, float param) {
    switch (op) {
        case UnaryOp::neg: return -g;
        case UnaryOp::exp: return g * y[e];                               // e^x
        case UnaryOp::log: return g / x[e];                               // 1 / x
        case UnaryOp::sqrt: return g / (y[e] + y[e]);                     // 1 / (2 sqrt x)
        case UnaryOp::tanh: return g * (1.0f - y[e] * y[e]);              // 1 - tanh^2
        case UnaryOp::pow: return g * param * powf(x[e], param - 1.0f);  // p x^(p-1)
    }
    return 0.0f;
}

// ---- layout --------------------------------------------------------------------

// out[i] (+)= x[at(i)]: permute, slice, broadcast (expand) and their backward.
void copy_strided(Context& context, size_t n, const float* x, const Strided& at, float* out, bool accumulate);

// ---- reductions over the last axis of x (rows, cols) -----------------------------

// out[r] (+)= scale * sum over c of x[r, c], summed in a fixed order.
void sum_rows(Context& context, size_t rows, size_t cols, const float* x, float scale, float* out, bool accumulate);
// out[r] = max over c of x[r, c] (NaN when any is NaN); index[r] = the first c
// where it is. cols > 0 (refused otherwise, as the op refuses an empty axis).
void max_rows(Context& context, size_t rows, size_t cols, const float* x, float* out, int32_t* index);
// dx[r, index[r]] += dy[r]: the max's backward, index from max_rows with the same cols.
void scatter_rows(Context& context, size_t rows, size_t cols, const int32_t* index, const float* dy, float* dx);

// y[r] = softmax(x[r]) or, with `log`, log_softmax(x[r]), over rows of cols.
void softmax_rows(Context& context, size_t rows, size_t cols, const float* x, bool log, float* y);
// dx (+)= y (dy - sum(dy y)) for softmax; dx (+)= dy - exp(y) sum(dy) for log_softmax (y its output).
void softmax_rows_backward(Context& context, size_t rows, size_t cols, const float* y, const float* dy, bool log,
                           float* dx, bool accumulate);

// ---- matrix products (cuBLAS) ---------------------------------------------------

// One row-major operand of a batched product: element (i, j) of matrix b at
// data[b stride + i ld + j], or of its transpose when `transposed`.
struct MatrixArg {
    const float* data;
    size_t ld;
    size_t stride;  // between the matrices of the batch (0: one matrix for all)
    bool transposed;
};
// C_b (M, N) = alpha op(A_b) (M, K) op(B_b) (K, N) + beta C_b, b < batch;
// C row-major with leading dimension N and stride M N. Each ld is at least the
// stored matrix's row length (cuBLAS's rule): a broadcast operand is expanded first.
void gemm(Context& context, size_t batch, size_t M, size_t N, size_t K, float alpha, const MatrixArg& A,
          const MatrixArg& B, float beta, float* C);

}  // namespace attnlab::device
