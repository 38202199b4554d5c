// The primitives of autograd/device/primitives.h carried out on the host with
// plain loops, for test_device_host (see host_device.cpp): the ops' device
// branches then run, and are compared with the CPU ops, on a machine without a
// GPU. The kernels themselves (cuda/primitives.cu) meet the same tests on the
// emulator and on the GPU.
#include <cmath>
#include <cstdint>
#include <vector>

#include "autograd/device/primitives.h"
#include "autograd/pointwise.h"

namespace attnlab::device {

namespace {

// The input offset of element i of a contiguous result read through `at`.
size_t offset_of(const Strided& at, size_t i) {
    size_t offset = at.offset;
    for (unsigned axis = at.rank; axis-- > 0;) {
        offset += (i % at.sizes[axis]) * at.strides[axis];
        i /= at.sizes[axis];
    }
    return offset;
}

void put(float* out, size_t i, float value, bool accumulate) { out[i] = accumulate ? out[i] + value : value; }

float max_or_nan(float a, float b) { return a > b || a != a ? a : b; }  // as cuda/warp.cuh

}  // namespace

void binary(Context&, BinaryOp op, size_t n, const float* a, const Strided& at_a, const float* b, const Strided& at_b,
            float* out, bool accumulate) {
    for (size_t i = 0; i < n; ++i) put(out, i, binary_value(op, a[offset_of(at_a, i)], b[offset_of(at_b, i)]), accumulate);
}

void unary(Context&, UnaryOp op, size_t n, const float* x, float param, float* y) {
    for (size_t i = 0; i < n; ++i) y[i] = unary_value(op, x[i], param);
}

void unary_backward(Context&, UnaryOp op, size_t n, const float* x, const float* y, const float* dy, float param,
                    float* dx, bool accumulate) {
    for (size_t i = 0; i < n; ++i) put(dx, i, unary_grad(op, x, y, i, dy[i], param), accumulate);
}

void pointwise(Context&, size_t function, size_t n, const float* x, float param, float* y) {
    pointwise::visit(function, [&]<class F>() {
        for (size_t i = 0; i < n; ++i) y[i] = pointwise::value_at<F>(pointwise::Libm{}, x[i], param);
    });
}

void pointwise_backward(Context&, size_t function, size_t n, const float* x, const float* dy, float param, float* dx,
                        bool accumulate) {
    pointwise::visit(function, [&]<class F>() {
        for (size_t i = 0; i < n; ++i) put(dx, i, dy[i] * pointwise::derivative_at<F>(pointwise::Libm{}, x[i], param), accumulate);
    });
}

void masked_fill(Context&, size_t n, const float* x, const uint8_t* mask, float value, float* out, bool accumulate) {
    for (size_t i = 0; i < n; ++i) put(out, i, mask[i] ? value : x[i], accumulate);
}

void copy_strided(Context&, size_t n, const float* x, const Strided& at, float* out, bool accumulate) {
    for (size_t i = 0; i < n; ++i) put(out, i, x[offset_of(at, i)], accumulate);
}

void sum_rows(Context&, size_t rows, size_t cols, const float* x, float scale, float* out, bool accumulate) {
    for (size_t r = 0; r < rows; ++r) {
        float total = 0.0f;
        for (size_t c = 0; c < cols; ++c) total += x[r * cols + c];
        put(out, r, scale * total, accumulate);
    }
}

void max_rows(Context&, size_t rows, size_t cols, const float* x, float* out, int32_t* index) {
    for (size_t r = 0; r < rows; ++r) {
        size_t best = 0;  // the first maximum, or the first NaN
        for (size_t c = 1; c < cols && !std::isnan(x[r * cols + best]); ++c)
            if (x[r * cols + c] > x[r * cols + best] || std::isnan(x[r * cols + c])) best = c;
        out[r] = x[r * cols + best];
        index[r] = int32_t(best);
    }
}

void scatter_rows(Context&, size_t rows, size_t cols, const int32_t* index, const float* dy, float* dx) {
    for (size_t r = 0; r < rows; ++r) dx[r * cols + size_t(index[r])] += dy[r];
}

void softmax_rows(Context&, size_t rows, size_t cols, const float* x, bool log, float* y) {
    for (size_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (size_t c = 0; c < cols; ++c) m = max_or_nan(xr[c], m);
        for (size_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
        for (size_t c = 0; c < cols; ++c) y[r * cols + c] = log ? xr[c] - m - std::log(s) : std::exp(xr[c] - m) / s;
    }
}

void softmax_rows_backward(Context&, size_t rows, size_t cols, const float* y, const float* dy, bool log, float* dx,
                           bool accumulate) {
    for (size_t r = 0; r < rows; ++r) {
        const float* yr = y + r * cols;
        const float* gr = dy + r * cols;
        float s = 0.0f;
        for (size_t c = 0; c < cols; ++c) s += log ? gr[c] : gr[c] * yr[c];
        for (size_t c = 0; c < cols; ++c)
            put(dx, r * cols + c, log ? gr[c] - std::exp(yr[c]) * s : yr[c] * (gr[c] - s), accumulate);
    }
}

void gemm(Context&, size_t batch, size_t M, size_t N, size_t K, float alpha, const MatrixArg& A, const MatrixArg& B,
          float beta, float* C) {
    const auto at = [](const MatrixArg& m, size_t b, size_t i, size_t j) {
        return m.data[b * m.stride + (m.transposed ? j * m.ld + i : i * m.ld + j)];
    };
    for (size_t b = 0; b < batch; ++b)
        for (size_t i = 0; i < M; ++i)
            for (size_t j = 0; j < N; ++j) {
                double total = 0.0;
                for (size_t k = 0; k < K; ++k) total += double(at(A, b, i, k)) * double(at(B, b, k, j));
                float& c = C[b * M * N + i * N + j];
                c = alpha * float(total) + (beta == 0.0f ? 0.0f : beta * c);  // beta 0 never reads C (cuBLAS)
            }
}

}  // namespace attnlab::device
