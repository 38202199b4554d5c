// Storage and graph node of a Tensor, plus the helpers every op uses to build
// its output and send gradients back. Included only by op implementations.
#pragma once

#include <functional>
#include <variant>

#include "autograd/device/context.h"
#include "autograd/tensor.h"
#include "autograd/xt.h"

namespace attnlab {

struct TensorImpl {
    std::variant<Array<float>, Array<double>> data;  // on the CPU
    Shape shape;  // mirrors data's shape as size_t (xtensor's shape type differs)
    Device device = Device::cpu;
    // On the device (Device::cuda; float32 only): the values at device_data,
    // inside device_block, which views share (a reshape, a slice of rows, the
    // parameters of a model moved as one flat block: Module::to). `data` is then empty.
    std::shared_ptr<device::DeviceBuffer> device_block;
    float* device_data = nullptr;
    bool requires_grad = false;

    std::shared_ptr<TensorImpl> grad;  // same dtype, shape and device; no graph of its own
    // A parameter on the device: the view of the model's flat gradient block
    // that its gradient lives in (Module::to, Optimizer::zero_grad).
    std::shared_ptr<TensorImpl> grad_home;

    // Graph: set only on tensors produced by an op while grad mode is on.
    const char* op = nullptr;
    std::vector<Tensor> parents;
    // Receives this tensor (its grad and its value) and accumulates into parents.
    std::function<void(TensorImpl& self)> backward;

    TensorImpl() = default;
    TensorImpl(const TensorImpl&) = delete;
    TensorImpl& operator=(const TensorImpl&) = delete;
    ~TensorImpl();  // unlinks the graph iteratively: a deep chain must not recurse

    DType dtype() const { return data.index() == 0 ? DType::f32 : DType::f64; }
    // The CPU values. A CPU op reaching a tensor on the device stops here.
    template <class T> Array<T>& array() {
        if (device_data != nullptr) refuse_device_values();
        return std::get<Array<T>>(data);
    }
    template <class T> const Array<T>& array() const {
        if (device_data != nullptr) refuse_device_values();
        return std::get<Array<T>>(data);
    }
    [[noreturn]] void refuse_device_values() const;
};

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }

// Calls f.template operator()<T>() with T = float or double, per dtype.
template <class F>
decltype(auto) dispatch(DType dtype, F&& f) {
    if (dtype == DType::f32) return f.template operator()<float>();
    return f.template operator()<double>();
}

template <class T> const Array<T>& values_of(const Tensor& t) { return t.impl().array<T>(); }

// xtensor's shape type is the same for every value type
Shape to_shape(const Array<float>::shape_type& shape);
template <class T> Array<T> make_array(const Shape& shape) {
    return Array<T>::from_shape(typename Array<T>::shape_type(shape.begin(), shape.end()));
}

// A fresh tensor holding `value` with no graph.
template <class T> Tensor wrap(Array<T>&& value, bool requires_grad = false) {
    auto impl = std::make_shared<TensorImpl>();
    impl->shape = to_shape(value.shape());
    impl->data = std::move(value);
    impl->requires_grad = requires_grad;
    return Tensor(std::move(impl));
}

// Whether an op on these inputs records a backward (grad mode on, an input needing a gradient).
inline bool needs_graph(const std::vector<Tensor>& inputs) {
    if (!grad_enabled()) return false;
    for (const Tensor& in : inputs)
        if (in.defined() && in.requires_grad()) return true;
    return false;
}

// Whether `out` joins the graph as the result of `op` (needs_graph); if so it is
// marked and takes the inputs as its parents, and the caller sets its backward
// (record on the CPU, record_device on the device). Nothing is built when it does not.
inline bool joins_graph(const char* op, TensorImpl& out, std::vector<Tensor>& inputs) {
    if (!needs_graph(inputs)) return false;
    out.requires_grad = true;
    out.op = op;
    out.parents = std::move(inputs);
    return true;
}

// The output of an op. If grad mode is on and any input needs a gradient, the
// output joins the graph: `backward(grad_out, out)` must send each input its
// gradient with send_grad. grad_out and out are Array<T> of the output's shape.
template <class T, class Backward>
Tensor record(const char* op, Array<T>&& value, std::vector<Tensor> inputs, Backward&& backward) {
    Tensor out = wrap<T>(std::move(value));
    if (joins_graph(op, out.impl(), inputs))
        out.impl().backward = [backward = std::forward<Backward>(backward)](TensorImpl& self) {
            backward(static_cast<const Array<T>&>(self.grad->array<T>()), static_cast<const Array<T>&>(self.array<T>()));
        };
    return out;
}

// Adds `grad` (already in the input's shape) to input.grad.
template <class T> void accumulate_grad(const Tensor& input, Array<T>&& grad) {
    TensorImpl& impl = input.impl();
    if (!impl.grad) {
        impl.grad = wrap<T>(std::move(grad)).impl_ptr();
        return;
    }
    Array<T>& sum = impl.grad->array<T>();
    if (sum.shape() != grad.shape()) {  // not expected (send_grad's contract); xtensor's rules then
        sum += grad;
        return;
    }
    T* __restrict a = sum.data();  // a plain loop the vectoriser takes, not an xtensor expression
    const T* __restrict b = grad.data();
    for (size_t i = 0, n = sum.size(); i < n; ++i) a[i] += b[i];
}

// Sends a gradient to `input` if it wants one; `make_grad()` is only evaluated then.
template <class T, class MakeGrad>
void send_grad(const Tensor& input, MakeGrad&& make_grad) {
    if (!input.defined() || !input.requires_grad()) return;
    accumulate_grad<T>(input, Array<T>(make_grad()));
}

// Checks that all tensors share a dtype; throws "[op] dtypes differ: float32 vs float64".
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_defined(const char* op, const Tensor& t, const char* what);

}  // namespace attnlab
