// Elementwise ops. Binary ops broadcast; their backward reduces each gradient
// to its input's shape with unbroadcast (shape.h).
#include <cmath>
#include <numbers>

#include "autograd/device_ops.h"
#include "autograd/gradcheck.h"
#include "autograd/cpu/kernels.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/shape.h"
#include "autograd/cpu/threads.h"

namespace attnlab {

namespace {

// forward(A, B) on arrays, broadcasting as NumPy does. When one operand's shape
// is the other's with leading axes removed (same shapes, a row vector, a
// scalar: nearly every use) it runs as one flat loop of forward on elements,
// split over the pool; other broadcasts go through xtensor.
template <class T, class Forward>
Array<T> elementwise(const Array<T>& A, const Shape& sa, const Array<T>& B, const Shape& sb, Forward forward) {
    const bool b_repeats = is_trailing(sb, sa), a_repeats = !b_repeats && is_trailing(sa, sb);
    if (!b_repeats && !a_repeats) return forward(A, B);
    Array<T> out = make_array<T>(b_repeats ? sa : sb);
    const T* pa = A.data();
    const T* pb = B.data();
    T* po = out.data();
    if (sa == sb) {
        parallel_for(out.size(), [&](size_t i0, size_t i1) {
            for (size_t i = i0; i < i1; ++i) po[i] = forward(pa[i], pb[i]);
        }, kElementGrain);
        return out;
    }
    // The repeating operand has `inner` elements; out is `rows` copies of its shape.
    const size_t inner = b_repeats ? B.size() : A.size(), rows = inner ? out.size() / inner : 0;
    parallel_for(rows, [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) {
            const size_t o = r * inner;
            if (inner == 1)  // a scalar operand
                po[o] = b_repeats ? forward(pa[o], pb[0]) : forward(pa[0], pb[o]);
            else if (b_repeats)
                for (size_t i = 0; i < inner; ++i) po[o + i] = forward(pa[o + i], pb[i]);
            else
                for (size_t i = 0; i < inner; ++i) po[o + i] = forward(pa[i], pb[o + i]);
        }
    }, std::max<size_t>(1, kElementGrain / std::max<size_t>(inner, 1)));
    return out;
}

// forward(A, B) -> out; grad_a/grad_b(g, A, B, out) -> gradient in out's shape.
// kind: the op on the device's binary primitive.
template <class Forward, class GradA, class GradB>
Tensor binary_op(const char* op, device::BinaryOp kind, const Tensor& a, const Tensor& b, Forward forward, GradA grad_a,
                 GradB grad_b) {
    check_defined(op, a, "first operand");
    check_defined(op, b, "second operand");
    check_same_dtype(op, a, b);
    const Shape out_shape = broadcast_shapes(op, a.shape(), b.shape());  // throws with both shapes when they do not broadcast
    check_same_device(op, {&a, &b});
    if (on_device(a))  // add has a fused path where one operand repeats the other
        return kind == device::BinaryOp::add ? add_device(a, b, out_shape) : binary_device(op, kind, a, b, out_shape);
    return dispatch(a.dtype(), [&]<class T>() {
        const Array<T>& A = values_of<T>(a);
        const Array<T>& B = values_of<T>(b);
        Array<T> out = elementwise<T>(A, a.shape(), B, b.shape(), forward);
        return record<T>(op, std::move(out), {a, b}, [a, b, grad_a, grad_b](const Array<T>& g, const Array<T>& y) {
            const Array<T>& A = values_of<T>(a);
            const Array<T>& B = values_of<T>(b);
            send_grad<T>(a, [&] { return unbroadcast<T>(Array<T>(grad_a(g, A, B, y)), a.shape()); });
            send_grad<T>(b, [&] { return unbroadcast<T>(Array<T>(grad_b(g, A, B, y)), b.shape()); });
        });
    });
}

// forward(X) -> out; grad(g, X, out) -> gradient. On the device, `on_device(x)`
// gives the device branch.
template <class Forward, class Grad, class OnDevice>
Tensor unary_op(const char* op, const Tensor& x, Forward forward, Grad grad, OnDevice device_branch) {
    check_defined(op, x, "input");
    if (on_device(x)) return device_branch(x);
    return dispatch(x.dtype(), [&]<class T>() {
        Array<T> out = forward(values_of<T>(x));
        return record<T>(op, std::move(out), {x}, [x, grad](const Array<T>& g, const Array<T>& y) {
            send_grad<T>(x, [&] { return grad(g, values_of<T>(x), y); });
        });
    });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
    constexpr const char* op = "add";
    return binary_op(op, device::BinaryOp::add, a, b,
        [](const auto& A, const auto& B) { return A + B; },
        [](const auto& g, const auto&, const auto&, const auto&) { return g; },
        [](const auto& g, const auto&, const auto&, const auto&) { return g; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
    constexpr const char* op = "sub";
    return binary_op(op, device::BinaryOp::sub, a, b,
        [](const auto& A, const auto& B) { return A - B; },
        [](const auto& g, const auto&, const auto&, const auto&) { return g; },
        [](const auto& g, const auto&, const auto&, const auto&) { return -g; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
    constexpr const char* op = "mul";
    return binary_op(op, device::BinaryOp::mul, a, b,
        [](const auto& A, const auto& B) { return A * B; },
        [](const auto& g, const auto&, const auto& B, const auto&) { return g * B; },
        [](const auto& g, const auto& A, const auto&, const auto&) { return g * A; });
}

Tensor div(const Tensor& a, const Tensor& b) {
    constexpr const char* op = "div";
    // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 = -out/b
    return binary_op(op, device::BinaryOp::div, a, b,
        [](const auto& A, const auto& B) { return A / B; },
        [](const auto& g, const auto&, const auto& B, const auto&) { return g / B; },
        [](const auto& g, const auto&, const auto& B, const auto& out) { return -g * out / B; });
}

Tensor neg(const Tensor& x) {
    constexpr const char* op = "neg";
    return unary_op(op, x,
        [](const auto& X) { return -X; },
        [](const auto& g, const auto&, const auto&) { return -g; },
        [](const Tensor& t) { return unary_device(op, device::UnaryOp::neg, t); });
}

Tensor exp(const Tensor& x) {
    constexpr const char* op = "exp";
    return unary_op(op, x,
        [](const auto& X) { return xt::exp(X); },
        [](const auto& g, const auto&, const auto& out) { return g * out; },
        [](const Tensor& t) { return unary_device(op, device::UnaryOp::exp, t); });
}

Tensor log(const Tensor& x) {
    constexpr const char* op = "log";
    return unary_op(op, x,
        [](const auto& X) { return xt::log(X); },
        [](const auto& g, const auto& X, const auto&) { return g / X; },
        [](const Tensor& t) { return unary_device(op, device::UnaryOp::log, t); });
}

Tensor sqrt(const Tensor& x) {
    constexpr const char* op = "sqrt";
    // d sqrt(x) = 1 / (2 sqrt(x))
    return unary_op(op, x,
        [](const auto& X) { return xt::sqrt(X); },
        [](const auto& g, const auto&, const auto& out) { return g / (out + out); },
        [](const Tensor& t) { return unary_device(op, device::UnaryOp::sqrt, t); });
}

Tensor pow(const Tensor& x, double exponent) {
    constexpr const char* op = "pow";
    // d x^p = p x^(p-1)
    return unary_op(op, x,
        [exponent]<class T>(const Array<T>& X) { return Array<T>(xt::pow(X, static_cast<T>(exponent))); },
        [exponent]<class T>(const Array<T>& g, const Array<T>& X, const Array<T>&) {
            return Array<T>(g * static_cast<T>(exponent) * xt::pow(X, static_cast<T>(exponent - 1.0)));
        },
        [exponent](const Tensor& t) { return unary_device(op, device::UnaryOp::pow, t, exponent); });
}

Tensor tanh(const Tensor& x) {
    constexpr const char* op = "tanh";
    // d tanh = 1 - tanh^2
    return unary_op(op, x,
        [](const auto& X) { return xt::tanh(X); },
        [](const auto& g, const auto&, const auto& out) { return g * (1 - out * out); },
        [](const Tensor& t) { return unary_device(op, device::UnaryOp::tanh, t); });
}

Tensor relu(const Tensor& x) {
    constexpr const char* op = "relu";
    return unary_op(op, x,
        // NaN stays NaN (as in torch and the device ReLU): NaN < 0 is false
        []<class T>(const Array<T>& X) { return Array<T>(xt::where(X < T(0), T(0), X)); },
        []<class T>(const Array<T>& g, const Array<T>& X, const Array<T>&) {
            return Array<T>(xt::where(X > T(0), g, T(0)));
        },
        [](const Tensor& t) { return activation_device(op, device::DeviceActivation::relu, t); });
}

Tensor gelu(const Tensor& x) {
    constexpr const char* op = "gelu";
    // gelu(x) = x Phi(x), Phi the standard normal CDF; d gelu = Phi(x) + x phi(x).
    return unary_op(op, x,
        []<class T>(const Array<T>& X) {
            Array<T> Y = make_array<T>(to_shape(X.shape()));
            parallel_for(X.size(), [&](size_t i0, size_t i1) { kernels::gelu_forward(X.data() + i0, Y.data() + i0, i1 - i0); },
                         kElementGrain);
            return Y;
        },
        []<class T>(const Array<T>& g, const Array<T>& X, const Array<T>& Y) {
            Array<T> gx = make_array<T>(to_shape(X.shape()));
            parallel_for(X.size(), [&](size_t i0, size_t i1) {
                kernels::gelu_backward(g.data() + i0, X.data() + i0, Y.data() + i0, gx.data() + i0, i1 - i0);
            }, kElementGrain);
            return gx;
        },
        [](const Tensor& t) { return activation_device(op, device::DeviceActivation::gelu, t); });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
namespace {
// A 0-d tensor of `value` with t's dtype, on t's device.
Tensor scalar_like(double value, const Tensor& t) {
    if (!t.defined()) return Tensor::scalar(value, DType::f32);  // the op names the undefined operand
    return Tensor::scalar(value, t.dtype()).to(t.device());
}
}  // namespace

Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(b, a)); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(a, b), b); }

void add_elementwise_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(11);
    auto in = [&](const Shape& s, double lo = -1.0, double hi = 1.0) { return gradcheck_input(rng, s, lo, hi); };
    using V = const std::vector<Tensor>&;
    cases.push_back({"add", "same shape (2,3)", {in({2, 3}), in({2, 3})}, [](V t) { return add(t[0], t[1]); }});
    cases.push_back({"add", "broadcast (2,3) + (3)", {in({2, 3}), in({3})}, [](V t) { return add(t[0], t[1]); }});
    cases.push_back({"add", "broadcast (2,1,3) + (4,1)", {in({2, 1, 3}), in({4, 1})}, [](V t) { return add(t[0], t[1]); }});
    cases.push_back({"sub", "broadcast (3,1) - (1,4)", {in({3, 1}), in({1, 4})}, [](V t) { return sub(t[0], t[1]); }});
    cases.push_back({"mul", "broadcast (2,3) * (2,1)", {in({2, 3}), in({2, 1})}, [](V t) { return mul(t[0], t[1]); }});
    cases.push_back({"mul", "scalar () * (2,2)", {in({}), in({2, 2})}, [](V t) { return mul(t[0], t[1]); }});
    cases.push_back({"div", "broadcast (2,3) / (3), denominator in [0.5,2)", {in({2, 3}), in({3}, 0.5, 2.0)},
                     [](V t) { return div(t[0], t[1]); }});
    cases.push_back({"neg", "(2,3)", {in({2, 3})}, [](V t) { return neg(t[0]); }});
    cases.push_back({"exp", "(2,3)", {in({2, 3})}, [](V t) { return exp(t[0]); }});
    cases.push_back({"log", "(2,3) in [0.5,2)", {in({2, 3}, 0.5, 2.0)}, [](V t) { return log(t[0]); }});
    cases.push_back({"sqrt", "(2,3) in [0.5,2)", {in({2, 3}, 0.5, 2.0)}, [](V t) { return sqrt(t[0]); }});
    cases.push_back({"pow", "(2,3)^3", {in({2, 3})}, [](V t) { return pow(t[0], 3.0); }});
    cases.push_back({"pow", "(4)^-0.5 in [0.5,2)", {in({4}, 0.5, 2.0)}, [](V t) { return pow(t[0], -0.5); }});
    cases.push_back({"tanh", "(2,3)", {in({2, 3}, -2.0, 2.0)}, [](V t) { return tanh(t[0]); }});
    // relu is not differentiable at 0: keep inputs away from it
    cases.push_back({"relu", "(2,3) away from 0",
                     {Tensor::from_values({-1.5, -0.5, -0.25, 0.25, 0.75, 1.5}, {2, 3}, DType::f64, true)},
                     [](V t) { return relu(t[0]); }});
    cases.push_back({"gelu", "(2,3) in [-3,3)", {in({2, 3}, -3.0, 3.0)}, [](V t) { return gelu(t[0]); }});
}

}  // namespace attnlab
