// The device branches of linear, add, gelu and relu, reshape and slice
// (autograd/ops.h has each op's contract; the op itself validates its inputs
// and calls the branch here when they are on the device). Forward beside backward.
#include "autograd/device_ops.h"
#include "autograd/shape.h"

namespace attnlab {

// y (rows, out) = x (rows, in) W^T + b: the bias starts y, one GEMM adds onto it.
Tensor linear_device(const Tensor& x, const Tensor& weight, const Tensor& bias, const Shape& out_shape) {
    const size_t in = weight.size(1), out_features = weight.size(0), rows = x.numel() / std::max<size_t>(in, 1);
    Tensor out = device_tensor(out_shape);
    cuda::linear_forward(device_context(), rows, out_features, in, device_in(x), device_in(weight), device_in(bias),
                         device_out(out));
    return record_device("linear", out, {x, weight, bias}, [x, weight, bias, rows, in, out_features](const Tensor& g, const float*) {
        // dX (+)= g W; dW += g^T X; db += column sums of g (the kernel adds into both)
        const GradTarget gx = grad_target(x);
        Tensor unwanted;
        float* gw = grad_to_add_or_scratch(weight, unwanted);
        cuda::linear_backward(device_context(), rows, out_features, in, device_in(x), device_in(weight), device_in(g),
                              gx.data, gx.accumulate, gw, grad_to_add(bias));
    });
}

// a + b where one operand's shape ends the other's (same shapes, a row of a table, a scalar).
Tensor add_device(const Tensor& a, const Tensor& b) {
    const bool b_repeats = is_trailing(b.shape(), a.shape());
    if (!b_repeats && !is_trailing(a.shape(), b.shape()))
        no_device_kernel("add", "broadcasting " + shape_str(a.shape()) + " with " + shape_str(b.shape()));
    const Tensor& whole = b_repeats ? a : b;
    const Tensor& part = b_repeats ? b : a;
    Tensor out = device_tensor(whole.shape());
    cuda::add_broadcast(device_context(), whole.numel(), part.numel(), device_in(whole), device_in(part), device_out(out));
    return record_device("add", out, {whole, part}, [whole, part](const Tensor& g, const float*) {
        send_device_grad(whole, g);
        if (part.numel() == whole.numel()) return send_device_grad(part, g);
        // the repeated operand receives the sum over its repeats
        const GradTarget target = grad_target(part);
        if (target)
            cuda::column_sums(device_context(), whole.numel() / std::max<size_t>(part.numel(), 1), part.numel(),
                              device_in(g), target.data, target.accumulate);
    });
}

// gelu (exact) or relu, elementwise.
Tensor activation_device(const char* op, cuda::DeviceActivation activation, const Tensor& x) {
    Tensor out = device_tensor(x.shape());
    cuda::activation_forward(device_context(), activation, x.numel(), device_in(x), device_out(out));
    return record_device(op, out, {x}, [x, activation](const Tensor& g, const float*) {
        write_device_grad(x, [&](float* dx) {  // dx = g f'(x)
            cuda::activation_backward(device_context(), activation, x.numel(), device_in(x), device_in(g), dx);
        });
    });
}

// The same values under another shape: a view, no copy either way.
Tensor reshape_device(const Tensor& x, const Shape& shape) {
    Tensor out = device_view(x.impl().device_block, x.impl().device_data, shape);
    const Shape in_shape = x.shape();
    return record_device("reshape", out, {x}, [x, in_shape](const Tensor& g, const float*) {
        send_device_grad(x, device_view(g.impl().device_block, g.impl().device_data, in_shape));
    });
}

// Rows [start, stop) of the first axis: a view; the backward adds into those rows.
Tensor slice_rows_device(const Tensor& x, size_t start, size_t stop, const Shape& out_shape) {
    const size_t row = x.numel() / std::max<size_t>(x.size(0), 1);
    Tensor out = device_view(x.impl().device_block, x.impl().device_data + start * row, out_shape);
    return record_device("slice", out, {x}, [x, start, stop, row](const Tensor& g, const float*) {
        float* gx = grad_to_add(x);
        if (gx != nullptr) cuda::add_into(device_context(), (stop - start) * row, device_in(g), gx + start * row);
    });
}

}  // namespace attnlab
