// Reductions over axes, with keepdim. Backward broadcasts the gradient back
// over the reduced axes (re-inserting them as size-1 axes first).
#include <algorithm>
#include <cmath>

#include "autograd/device_ops.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/shape.h"

namespace attnlab {

namespace {

Shape reduced_shape(const Shape& in, const std::vector<size_t>& axes, bool keepdim) {
    Shape out;
    for (size_t i = 0; i < in.size(); ++i) {
        const bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
        if (!reduced) out.push_back(in[i]);
        else if (keepdim) out.push_back(1);
    }
    return out;
}

Shape keepdim_shape(const Shape& in, const std::vector<size_t>& axes) { return reduced_shape(in, axes, true); }

// g (reduced shape) -> x's shape, every reduced position receiving g * scale.
template <class T> Array<T> expand_grad(const Array<T>& g, const Shape& in, const std::vector<size_t>& axes, T scale) {
    if (g.size() == 1) {  // every axis reduced (a loss): one value everywhere
        Array<T> out = make_array<T>(in);
        out.fill(g.data()[0] * scale);
        return out;
    }
    Array<T> g_keep = g;
    g_keep.reshape(keepdim_shape(in, axes));
    return Array<T>(xt::broadcast(g_keep * scale, in));
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int> axes_in, bool keepdim) {
    constexpr const char* op = "sum";
    check_defined(op, x, "input");
    const std::vector<size_t> axes = normalize_axes(op, axes_in, x.shape());
    const Shape in_shape = x.shape();
    if (on_device(x)) return sum_device(op, x, axes, 1.0, reduced_shape(in_shape, axes, keepdim));
    return dispatch(x.dtype(), [&]<class T>() {
        Array<T> out = xt::sum(values_of<T>(x), axes);
        out.reshape(reduced_shape(in_shape, axes, keepdim));
        return record<T>(op, std::move(out), {x}, [x, axes, in_shape](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] { return expand_grad<T>(g, in_shape, axes, T(1)); });
        });
    });
}

Tensor mean(const Tensor& x, std::vector<int> axes_in, bool keepdim) {
    constexpr const char* op = "mean";
    check_defined(op, x, "input");
    const std::vector<size_t> axes = normalize_axes(op, axes_in, x.shape());
    const Shape in_shape = x.shape();
    size_t count = 1;
    for (size_t a : axes) count *= in_shape[a];
    if (count == 0) fail(op, "mean over an empty axis of " + shape_str(in_shape));
    if (on_device(x)) return sum_device(op, x, axes, 1.0 / double(count), reduced_shape(in_shape, axes, keepdim));
    return dispatch(x.dtype(), [&]<class T>() {
        const T scale = T(1) / static_cast<T>(count);
        Array<T> out = xt::sum(values_of<T>(x), axes);
        out *= scale;
        out.reshape(reduced_shape(in_shape, axes, keepdim));
        return record<T>(op, std::move(out), {x}, [x, axes, in_shape, scale](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] { return expand_grad<T>(g, in_shape, axes, scale); });
        });
    });
}

Tensor max(const Tensor& x, std::vector<int> axes_in, bool keepdim) {
    constexpr const char* op = "max";
    check_defined(op, x, "input");
    const std::vector<size_t> axes = normalize_axes(op, axes_in, x.shape());
    const Shape in_shape = x.shape();
    for (size_t a : axes)
        if (in_shape[a] == 0) fail(op, "max over an empty axis of " + shape_str(in_shape));
    if (on_device(x)) return max_device(x, axes, reduced_shape(in_shape, axes, keepdim));
    // Move reduced axes last: each output element then owns one contiguous run.
    std::vector<size_t> order;
    for (size_t i = 0; i < in_shape.size(); ++i)
        if (std::find(axes.begin(), axes.end(), i) == axes.end()) order.push_back(i);
    size_t run = 1;
    for (size_t a : axes) { order.push_back(a); run *= in_shape[a]; }
    return dispatch(x.dtype(), [&]<class T>() {
        Array<T> moved = xt::transpose(values_of<T>(x), order);
        const size_t outputs = moved.size() / run;
        Array<T> out = make_array<T>(reduced_shape(in_shape, axes, keepdim));
        std::vector<size_t> argmax(outputs);  // flat index into `moved`
        for (size_t o = 0; o < outputs; ++o) {
            const T* row = moved.data() + o * run;
            size_t best = 0;  // the first maximum; a NaN is the maximum (as torch.max)
            for (size_t j = 1; j < run && !std::isnan(row[best]); ++j)
                if (row[j] > row[best] || std::isnan(row[j])) best = j;
            argmax[o] = o * run + best;
            out.data()[o] = row[best];
        }
        return record<T>(op, std::move(out), {x}, [x, order, argmax = std::move(argmax), in_shape](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] {
                Shape moved_shape;
                for (size_t i : order) moved_shape.push_back(in_shape[i]);
                Array<T> moved_grad = make_array<T>(moved_shape);
                moved_grad.fill(T(0));
                for (size_t o = 0; o < argmax.size(); ++o) moved_grad.data()[argmax[o]] = g.data()[o];
                std::vector<size_t> inverse(order.size());
                for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = i;
                return Array<T>(xt::transpose(moved_grad, inverse));
            });
        });
    });
}

void add_reduce_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(12);
    auto in = [&](const Shape& s) { return gradcheck_input(rng, s); };
    using V = const std::vector<Tensor>&;
    cases.push_back({"sum", "all axes (2,3)", {in({2, 3})}, [](V t) { return sum(t[0]); }});
    cases.push_back({"sum", "axis 1 of (2,3,4)", {in({2, 3, 4})}, [](V t) { return sum(t[0], {1}); }});
    cases.push_back({"sum", "axes {0,2} keepdim of (2,3,4)", {in({2, 3, 4})}, [](V t) { return sum(t[0], {0, 2}, true); }});
    cases.push_back({"sum", "size-1 axis of (2,1,3)", {in({2, 1, 3})}, [](V t) { return sum(t[0], {1}); }});
    cases.push_back({"mean", "axis -1 keepdim of (2,3)", {in({2, 3})}, [](V t) { return mean(t[0], {-1}, true); }});
    cases.push_back({"mean", "all axes (3,2)", {in({3, 2})}, [](V t) { return mean(t[0]); }});
    cases.push_back({"max", "axis 1 of (2,3,4)", {in({2, 3, 4})}, [](V t) { return max(t[0], {1}); }});
    cases.push_back({"max", "axes {0,2} keepdim of (2,3,4)", {in({2, 3, 4})}, [](V t) { return max(t[0], {0, 2}, true); }});
    cases.push_back({"max", "all axes (3,3)", {in({3, 3})}, [](V t) { return max(t[0]); }});
}

}  // namespace attnlab
