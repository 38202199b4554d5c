// The pointwise functions of pointwise.h as one op: y = f(x; param), one pass
// forward and one backward (dx = g f'(x; param), f' from f's definition on dual
// numbers), on the CPU kernels (kernels.h) or the device primitives.
#include "autograd/device_ops.h"
#include "autograd/gradcheck.h"
#include "autograd/cpu/kernels.h"
#include "autograd/cpu/threads.h"
#include "autograd/ops.h"
#include "autograd/rng.h"

namespace attnlab {

Tensor pointwise_op(const char* op, size_t function, const Tensor& x, double param) {
    check_defined(op, x, "input");
    if (on_device(x)) return pointwise_device(op, function, x, param);
    return dispatch(x.dtype(), [&]<class T>() {
        const Array<T>& X = values_of<T>(x);
        Array<T> Y = make_array<T>(x.shape());  // y = f(x; param), x's shape
        parallel_for(X.size(), [&](size_t i0, size_t i1) {
            kernels::pointwise_forward(function, X.data() + i0, T(param), Y.data() + i0, i1 - i0);
        }, kElementGrain);
        return record<T>(op, std::move(Y), {x}, [x, function, param](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] {
                const Array<T>& X = values_of<T>(x);
                Array<T> gx = make_array<T>(x.shape());  // g f'(x; param)
                parallel_for(X.size(), [&](size_t i0, size_t i1) {
                    kernels::pointwise_backward(function, g.data() + i0, X.data() + i0, T(param), gx.data() + i0, i1 - i0);
                }, kElementGrain);
                return gx;
            });
        });
    });
}

Tensor gelu_tanh(const Tensor& x) { return apply<pointwise::GeluTanh>(x); }

Tensor softcap(const Tensor& x, double cap) {
    if (!(cap > 0.0)) throw Error("[softcap] the cap must be positive, got " + std::to_string(cap));
    return apply<pointwise::SoftCap>(x, cap);
}

void add_pointwise_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(13);
    auto in = [&](const Shape& s, double lo, double hi) { return gradcheck_input(rng, s, lo, hi); };
    using V = const std::vector<Tensor>&;
    cases.push_back({"gelu_tanh", "(2,3) in [-3,3)", {in({2, 3}, -3.0, 3.0)}, [](V t) { return gelu_tanh(t[0]); }});
    cases.push_back({"softcap", "(2,3) in [-8,8), cap 3", {in({2, 3}, -8.0, 8.0)}, [](V t) { return softcap(t[0], 3.0); }});
    // not differentiable at the threshold: keep inputs away from it
    const auto around_half = [] {
        return Tensor::from_values({-1.5, -0.5, 0.25, 0.75, 1.0, 1.5}, {2, 3}, DType::f64, true);
    };
    cases.push_back({"threshold_relu", "(2,3) away from 0.5, theta 0.5", {around_half()},
                     [](V t) { return apply<pointwise::ThresholdRelu>(t[0], 0.5); }});
    cases.push_back({"jump_relu", "(2,3) away from 0.5, theta 0.5", {around_half()},
                     [](V t) { return apply<pointwise::JumpRelu>(t[0], 0.5); }});
}

}  // namespace attnlab
