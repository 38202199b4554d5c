// The device branches of permute, slice (any axis) and matmul, and the
// strided views the primitives read their inputs through (primitives.h):
// broadcasting and permuting.
// Forward beside backward.
#include "autograd/device/primitives.h"
#include "autograd/device_ops.h"
#include "autograd/shape.h"

namespace attnlab {

namespace {

// Row-major strides of a contiguous tensor of `shape`.
std::vector<size_t> strides_of(const Shape& shape) {
    std::vector<size_t> strides(shape.size(), 1);
    for (size_t axis = shape.size(); axis-- > 1;) strides[axis - 1] = strides[axis] * shape[axis];
    return strides;
}

void check_rank(const char* op, const Shape& shape) {
    if (shape.size() > device::max_rank)
        no_device_kernel(op, "a tensor of " + std::to_string(shape.size()) + " axes (the device takes at most " +
                                 std::to_string(device::max_rank) + ")");
}

}  // namespace

device::Strided broadcast_view(const char* op, const Shape& in, const Shape& out) {
    check_rank(op, out);
    device::Strided at;
    at.rank = unsigned(out.size());
    const std::vector<size_t> strides = strides_of(in);
    const size_t lead = out.size() - in.size();  // in's axes align with out's last ones
    for (size_t axis = 0; axis < out.size(); ++axis) {
        at.sizes[axis] = out[axis];
        at.strides[axis] = axis < lead || in[axis - lead] == 1 ? 0 : strides[axis - lead];
    }
    return at;
}

device::Strided permute_view(const char* op, const Shape& in, const std::vector<size_t>& order) {
    check_rank(op, in);
    device::Strided at;
    at.rank = unsigned(in.size());
    const std::vector<size_t> strides = strides_of(in);
    for (size_t axis = 0; axis < order.size(); ++axis) {
        at.sizes[axis] = in[order[axis]];
        at.strides[axis] = strides[order[axis]];
    }
    return at;
}

// y = x with its axes in `order`: a strided copy; the backward copies back with
// the inverse order, adding into x's gradient.
Tensor permute_device(const Tensor& x, const std::vector<size_t>& order) {
    constexpr const char* op = "permute";
    const device::Strided at = permute_view(op, x.shape(), order);
    Shape out_shape;
    for (size_t axis : order) out_shape.push_back(x.shape()[axis]);
    Tensor out = device_tensor(out_shape);
    device::copy_strided(device_context(), x.numel(), device_in(x), at, device_out(out), false);
    return record_device(op, out, {x}, [x, order, out_shape](const Tensor& g, const float*) {
        std::vector<size_t> inverse(order.size());
        for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = i;
        const GradTarget target = grad_target(x);
        if (target)
            device::copy_strided(device_context(), x.numel(), device_in(g), permute_view(op, out_shape, inverse),
                               target.data, target.accumulate);
    });
}

// [start, stop) along `axis`: rows of (outer, width inner) out of (outer, n inner).
Tensor slice_device(const Tensor& x, size_t axis, size_t start, size_t stop, const Shape& out_shape) {
    const AxisSplit split = split_at_axis(x.shape(), axis);
    const size_t width = (stop - start) * split.inner, row = split.n * split.inner;
    Tensor out = device_tensor(out_shape);
    device::copy_rows(device_context(), split.outer, width, device_in(x) + start * split.inner, row, device_out(out), width,
                    false);
    return record_device("slice", out, {x}, [x, split, start, width, row](const Tensor& g, const float*) {
        float* gx = grad_to_add(x);
        if (gx != nullptr)
            device::copy_rows(device_context(), split.outer, width, device_in(g), width, gx + start * split.inner, row, true);
    });
}

// C (batch, M, N) = A (batch, M, K) B (batch or shared, K, N), one batched GEMM
// each way; a shared B's gradient sums over the batch as one (K, batch M) product.
Tensor matmul_device(const Tensor& a, const Tensor& b, size_t batch, size_t M, size_t N, size_t K, bool shared_b,
                     const Shape& out_shape) {
    Tensor out = device_tensor(out_shape);
    const size_t stride_b = shared_b ? 0 : K * N;
    device::gemm(device_context(), batch, M, N, K, 1.0f, {device_in(a), K, M * K, false}, {device_in(b), N, stride_b, false},
               0.0f, device_out(out));
    return record_device("matmul", out, {a, b}, [a, b, batch, M, N, K, shared_b, stride_b](const Tensor& g, const float*) {
        device::Context& context = device_context();
        // dA (batch, M, K) (+)= dC B^T
        const GradTarget ga = grad_target(a);
        if (ga)
            device::gemm(context, batch, M, K, N, 1.0f, {device_in(g), N, M * N, false}, {device_in(b), N, stride_b, true},
                       ga.accumulate ? 1.0f : 0.0f, ga.data);
        // dB (+)= A^T dC per item, or for a shared B, (K, batch M) (batch M, N) at once
        const GradTarget gb = grad_target(b);
        if (!gb) return;
        const float beta = gb.accumulate ? 1.0f : 0.0f;
        if (shared_b)
            device::gemm(context, 1, K, N, batch * M, 1.0f, {device_in(a), K, 0, true}, {device_in(g), N, 0, false}, beta,
                       gb.data);
        else
            device::gemm(context, batch, K, N, M, 1.0f, {device_in(a), K, M * K, true}, {device_in(g), N, M * N, false}, beta,
                       gb.data);
    });
}

}  // namespace attnlab
