// The device branches of the reductions (sum, mean, max over any axes) and of
// softmax and log_softmax over any axis, on the primitives of primitives.h:
// the reduced axes are moved last (a strided copy, skipped when they already
// are), then each row of the kept axes is reduced. Forward beside backward.
// Also the sum that brings a broadcast operand's gradient back to its shape.
#include <algorithm>

#include "autograd/device/primitives.h"
#include "autograd/device_ops.h"
#include "autograd/shape.h"

namespace attnlab {

namespace {

// x's axes in the order kept-then-reduced: the rows (kept) and cols (reduced)
// that makes, x's shape in that order, and the order back.
struct Moved {
    std::vector<size_t> order, inverse;
    Shape shape;
    size_t rows = 1, cols = 1;
    bool in_place() const { return std::is_sorted(order.begin(), order.end()); }
};

Moved move_last(const Shape& shape, const std::vector<size_t>& axes) {
    Moved m;
    for (const bool reduced : {false, true})
        for (size_t axis = 0; axis < shape.size(); ++axis)
            if ((std::find(axes.begin(), axes.end(), axis) != axes.end()) == reduced) {
                m.order.push_back(axis);
                m.shape.push_back(shape[axis]);
                (reduced ? m.cols : m.rows) *= shape[axis];
            }
    m.inverse.resize(m.order.size());
    for (size_t i = 0; i < m.order.size(); ++i) m.inverse[m.order[i]] = i;
    return m;
}

// x with its axes in m.order, contiguous (x itself when they already are).
Tensor moved_copy(const char* op, const Tensor& x, const Moved& m) {
    if (m.in_place()) return x;
    Tensor out = device_tensor(m.shape);
    device::copy_strided(device_context(), x.numel(), device_in(x), permute_view(op, x.shape(), m.order), device_out(out),
                         false);
    return out;
}

// to (+)= `moved` (values in m.order) in the original order.
void copy_back(const char* op, const Tensor& moved, const Moved& m, float* to, bool accumulate) {
    device::copy_strided(device_context(), moved.numel(), device_in(moved), permute_view(op, m.shape, m.inverse), to,
                         accumulate);
}

// Adds `moved` (x's gradient in m.order) into x's gradient.
void send_moved_grad(const char* op, const Tensor& x, const Moved& m, const Tensor& moved) {
    if (m.in_place()) return send_device_grad(x, device_view(moved.impl().device_block, device_out(moved), x.shape()));
    const GradTarget target = grad_target(x);
    if (target) copy_back(op, moved, m, target.data, target.accumulate);
}

// out_shape's values = scale * the sum of each row of x's moved values (0 for empty rows); no graph.
Tensor row_sums(const char* op, const Tensor& x, const Moved& m, double scale, const Shape& out_shape) {
    Tensor out = device_tensor(out_shape);
    if (m.cols == 0) device::fill_zero(device_context(), device_out(out), out.numel() * sizeof(float));
    else device::sum_rows(device_context(), m.rows, m.cols, device_in(moved_copy(op, x, m)), float(scale), device_out(out), false);
    return out;
}

}  // namespace

Tensor sum_to_shape_device(const char* op, const Tensor& g, const Shape& target) {
    if (g.shape() == target) return g;
    // the axes target broadcasts along: missing, or of size 1 where g's is not
    const Shape& full = g.shape();
    const size_t lead = full.size() - target.size();
    std::vector<size_t> summed;
    for (size_t axis = 0; axis < full.size(); ++axis)
        if (axis < lead || (target[axis - lead] == 1 && full[axis] != 1)) summed.push_back(axis);
    return row_sums(op, g, move_last(full, summed), 1.0, target);
}

void send_summed_grad(const char* op, const Tensor& input, const Tensor& g) {
    if (input.defined() && input.requires_grad()) send_device_grad(input, sum_to_shape_device(op, g, input.shape()));
}

// sum (scale 1) or mean (scale 1 / count) over `axes` into out_shape.
Tensor sum_device(const char* op, const Tensor& x, const std::vector<size_t>& axes, double scale, const Shape& out_shape) {
    const Moved m = move_last(x.shape(), axes);
    Tensor out = row_sums(op, x, m, scale, out_shape);
    return record_device(op, out, {x}, [op, x, m, scale](const Tensor& g, const float*) {
        // every reduced position receives its row's gradient times scale
        Tensor spread = device_tensor(m.shape);
        device::copy_strided(device_context(), spread.numel(), device_in(g),
                             broadcast_view(op, {m.rows, 1}, {m.rows, m.cols}), device_out(spread), false);
        if (scale != 1.0)
            device::scale(device_context(), spread.numel(), device_in(spread), float(scale), nullptr, device_out(spread), false);
        send_moved_grad(op, x, m, spread);
    });
}

// The maximum over `axes`; its gradient goes to the first maximal element.
Tensor max_device(const Tensor& x, const std::vector<size_t>& axes, const Shape& out_shape) {
    constexpr const char* op = "max";
    const Moved m = move_last(x.shape(), axes);
    Tensor out = device_tensor(out_shape);
    const auto index = std::make_shared<device::DeviceBuffer>(device_context().allocate(m.rows * sizeof(int32_t)));
    int32_t* at = static_cast<int32_t*>(index->data());
    device::max_rows(device_context(), m.rows, m.cols, device_in(moved_copy(op, x, m)), device_out(out), at);
    return record_device(op, out, {x}, [x, m, index, at](const Tensor& g, const float*) {
        if (!x.requires_grad()) return;
        Tensor spread = device_tensor(m.shape);
        device::fill_zero(device_context(), device_out(spread), spread.numel() * sizeof(float));
        device::scatter_rows(device_context(), m.rows, m.cols, at, device_in(g), device_out(spread));
        send_moved_grad(op, x, m, spread);
    });
}

// softmax (or log_softmax) along `axis`: rows of the axis's values, the axis moved last when it is not.
Tensor softmax_device(const char* op, const Tensor& x, size_t axis, bool log) {
    const Moved m = move_last(x.shape(), {axis});
    Tensor moved_out = device_tensor(m.shape);
    device::softmax_rows(device_context(), m.rows, m.cols, device_in(moved_copy(op, x, m)), log, device_out(moved_out));
    Tensor out = moved_out;
    if (!m.in_place()) {
        out = device_tensor(x.shape());
        copy_back(op, moved_out, m, device_out(out), false);
    }
    // the backward reads the values in m.order: the output's own (y) when that is x's
    // order (the closure must not own its output), else the moved copy
    const Tensor moved_values = m.in_place() ? Tensor() : moved_out;
    return record_device(op, out, {x}, [op, x, m, log, moved_values](const Tensor& g, const float* y) {
        if (!x.requires_grad()) return;
        const Tensor moved_g = moved_copy(op, g, m);
        Tensor dx = device_tensor(m.shape);
        device::softmax_rows_backward(device_context(), m.rows, m.cols, m.in_place() ? y : device_in(moved_values),
                                      device_in(moved_g), log, device_out(dx), false);
        send_moved_grad(op, x, m, dx);
    });
}

}  // namespace attnlab
