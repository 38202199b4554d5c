// The device branches of the elementwise ops (sub, mul, div, add where it
// broadcasts both ways, neg, exp, log, sqrt, pow, tanh, masked_fill) on the
// primitives of primitives.h. Forward beside backward; a gradient is formed in
// the output's shape and summed back to each input's (sum_to_shape_device).
#include "autograd/device/primitives.h"
#include "autograd/device_ops.h"

namespace attnlab {

namespace {

device::Strided whole(const char* op, const Tensor& t) { return broadcast_view(op, t.shape(), t.shape()); }

// out (shape of g) = g op' v, v read through its broadcast view.
Tensor combine(const char* op, device::BinaryOp kind, const Tensor& g, const Tensor& v) {
    Tensor out = device_tensor(g.shape());
    device::binary(device_context(), kind, g.numel(), device_in(g), whole(op, g), device_in(v),
                 broadcast_view(op, v.shape(), g.shape()), device_out(out), false);
    return out;
}

}  // namespace

Tensor binary_device(const char* op, device::BinaryOp kind, const Tensor& a, const Tensor& b, const Shape& out_shape) {
    Tensor out = device_tensor(out_shape);
    device::binary(device_context(), kind, out.numel(), device_in(a), broadcast_view(op, a.shape(), out_shape), device_in(b),
                 broadcast_view(op, b.shape(), out_shape), device_out(out), false);
    return record_device(op, out, {a, b}, [op, kind, a, b, out_shape](const Tensor& g, const float* y) {
        using device::BinaryOp;
        const bool want_a = a.requires_grad(), want_b = b.requires_grad();
        // d(a + b) = g, g;  d(a - b) = g, -g;  d(a b) = g b, g a;  d(a / b) = g / b, -g out / b
        if (want_a)  // g, or g b and g / b: the op itself between g and b
            send_summed_grad(op, a, kind == BinaryOp::add || kind == BinaryOp::sub ? g : combine(op, kind, g, b));
        if (!want_b) return;
        if (kind == BinaryOp::add) return send_summed_grad(op, b, g);
        if (kind == BinaryOp::mul) return send_summed_grad(op, b, combine(op, BinaryOp::mul, g, a));
        Tensor negated = device_tensor(g.shape());  // -g, then for div -g out / b
        device::unary(device_context(), device::UnaryOp::neg, g.numel(), device_in(g), 0.0f, device_out(negated));
        if (kind == BinaryOp::div) {  // out seen through its values: the closure must not own its own output
            const Tensor quotient = device_view(nullptr, const_cast<float*>(y), out_shape);
            negated = combine(op, BinaryOp::div, combine(op, BinaryOp::mul, negated, quotient), b);
        }
        send_summed_grad(op, b, negated);
    });
}

Tensor unary_device(const char* op, device::UnaryOp kind, const Tensor& x, double param) {
    Tensor out = device_tensor(x.shape());
    device::unary(device_context(), kind, x.numel(), device_in(x), float(param), device_out(out));
    return record_device(op, out, {x}, [kind, x, param](const Tensor& g, const float* y) {
        const GradTarget target = grad_target(x);  // dx (+)= g f'(x)
        if (target)
            device::unary_backward(device_context(), kind, x.numel(), device_in(x), y, device_in(g), float(param),
                                 target.data, target.accumulate);
    });
}

Tensor pointwise_device(const char* op, size_t function, const Tensor& x, double param) {
    Tensor out = device_tensor(x.shape());
    device::pointwise(device_context(), function, x.numel(), device_in(x), float(param), device_out(out));
    return record_device(op, out, {x}, [function, x, param](const Tensor& g, const float*) {
        const GradTarget target = grad_target(x);  // dx (+)= g f'(x; param)
        if (target)
            device::pointwise_backward(device_context(), function, x.numel(), device_in(x), device_in(g), float(param),
                                       target.data, target.accumulate);
    });
}

Tensor masked_fill_device(const Tensor& x, const std::vector<uint8_t>& fill, double value) {
    const auto mask = std::make_shared<device::DeviceBuffer>(upload(fill.data(), fill.size()));
    Tensor out = device_tensor(x.shape());
    const uint8_t* m = static_cast<const uint8_t*>(mask->data());
    device::masked_fill(device_context(), x.numel(), device_in(x), m, float(value), device_out(out), false);
    return record_device("masked_fill", out, {x}, [x, mask, m](const Tensor& g, const float*) {
        const GradTarget target = grad_target(x);  // dx (+)= g, 0 where filled
        if (target) device::masked_fill(device_context(), x.numel(), device_in(g), m, 0.0f, target.data, target.accumulate);
    });
}

}  // namespace attnlab
