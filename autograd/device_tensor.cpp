// Tensors on the device: the process's Context, device storage and views, moving
// tensors between the devices, and the gradient plumbing of device_ops.h.
#include <algorithm>

#include "autograd/device_ops.h"

namespace attnlab {

device::Context& device_context() {
    static device::Context* context = new device::Context(0);  // leaked on purpose: see device_ops.h
    return *context;
}

void TensorImpl::refuse_device_values() const {
    fail("device", "a tensor of shape " + shape_str(shape) +
                       " is on the cuda device, and this op has no device kernel; move the tensors to the cpu (Tensor::to)");
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
    const Tensor* first = nullptr;
    for (const Tensor* t : tensors) {
        if (!t->defined()) continue;
        if (first == nullptr) first = t;
        else if (t->device() != first->device())
            fail(op, "tensors are on different devices: " + to_string(first->device()) + " and " + to_string(t->device()));
    }
}

void no_device_kernel(const char* op, const std::string& what) {
    fail(op, what + " has no device kernel; move the tensors to the cpu (Tensor::to)");
}

Tensor device_view(const std::shared_ptr<device::DeviceBuffer>& block, float* data, const Shape& shape) {
    auto impl = std::make_shared<TensorImpl>();
    impl->shape = shape;
    impl->device = Device::cuda;
    impl->device_block = block;
    impl->device_data = data;
    return Tensor(std::move(impl));
}

Tensor device_tensor(const Shape& shape) {
    auto block = std::make_shared<device::DeviceBuffer>(device_context().allocate_floats(std::max<size_t>(numel_of(shape), 1)));
    return device_view(block, block->floats(), shape);
}

device::DeviceBuffer upload(const void* values, size_t bytes) { return device::to_device(device_context(), values, bytes); }

// ---- gradients ----

namespace {

// A gradient is written in place only where no other tensor sees its memory:
// a buffer handed to several inputs (add's backward) or viewed by another
// (reshape's) is copied first, by whichever of them adds to it first. A
// parameter's slot in the flat gradient block is its own.
void make_writable(TensorImpl& impl) {
    const bool shared = impl.grad.use_count() > 1 || impl.grad->device_block.use_count() > 1;
    if (impl.grad == impl.grad_home || !shared) return;
    impl.grad = device_clone(*impl.grad).impl_ptr();
}

}  // namespace

float* writable_grad(const Tensor& t) {
    TensorImpl& impl = t.impl();
    if (!impl.grad) return nullptr;
    make_writable(impl);
    return impl.grad->device_data;
}

GradTarget grad_target(const Tensor& input) {
    if (!input.defined() || !input.requires_grad()) return {};
    TensorImpl& impl = input.impl();
    if (impl.grad) {
        make_writable(impl);
        return {impl.grad->device_data, true};
    }
    impl.grad = impl.grad_home ? impl.grad_home : device_tensor(impl.shape).impl_ptr();
    return {impl.grad->device_data, false};
}

float* grad_to_add(const Tensor& input) {
    const GradTarget target = grad_target(input);
    if (target && !target.accumulate) device::fill_zero(device_context(), target.data, input.numel() * sizeof(float));
    return target.data;
}

GradTarget grad_or_scratch(const Tensor& input, Tensor& scratch) {
    if (input.requires_grad()) return grad_target(input);
    scratch = device_tensor(input.shape());
    return {device_out(scratch), false};
}

float* grad_to_add_or_scratch(const Tensor& input, Tensor& scratch) {
    if (input.requires_grad()) return grad_to_add(input);
    scratch = device_tensor(input.shape());
    return device_out(scratch);
}

void send_device_grad(const Tensor& input, const Tensor& grad) {
    if (!input.defined() || !input.requires_grad()) return;
    TensorImpl& impl = input.impl();
    const size_t n = input.numel();
    if (!impl.grad && !impl.grad_home) {
        impl.grad = grad.impl_ptr();  // shared, no copy: the first to add to it copies it (make_writable)
        return;
    }
    const GradTarget target = grad_target(input);
    if (target.accumulate) device::add_into(device_context(), n, device_in(grad), target.data);
    else device::copy_device(device_context(), device_in(grad), target.data, n * sizeof(float));
}

// ---- Tensor on the device ----

namespace {

// The device values of impl, copied into `host` (numel floats).
void copy_out(const TensorImpl& impl, float* host) {
    const size_t n = numel_of(impl.shape);
    if (n > 0) device::copy_to_host(device_context(), impl.device_data, host, n * sizeof(float));
}

void check_float32(const Tensor& t) {
    if (t.dtype() != DType::f32) fail("to", "only float32 tensors go to the cuda device, this one is " + to_string(t.dtype()));
}

}  // namespace

std::vector<double> device_values(const TensorImpl& impl) {
    std::vector<float> values(numel_of(impl.shape));
    copy_out(impl, values.data());
    return std::vector<double>(values.begin(), values.end());
}

Tensor Tensor::to(Device device) const {
    const TensorImpl& self = impl();
    if (device == self.device) return *this;
    if (device == Device::cpu) {
        Array<float> a = make_array<float>(self.shape);
        copy_out(self, a.data());
        return wrap<float>(std::move(a));
    }
    check_float32(*this);
    Tensor out = device_tensor(self.shape);
    const Array<float>& a = self.array<float>();
    if (a.size() > 0) device::copy_to_device(device_context(), a.data(), out.impl().device_data, a.size() * sizeof(float));
    return out;
}

Tensor device_clone(const TensorImpl& impl) {
    Tensor out = device_tensor(impl.shape);
    const size_t n = numel_of(impl.shape);
    if (n > 0) device::copy_device(device_context(), impl.device_data, out.impl().device_data, n * sizeof(float));
    return out;
}

void device_assign(TensorImpl& dst, const Tensor& src) {
    const size_t n = numel_of(dst.shape);
    if (n == 0) return;
    if (on_device(src)) {
        device::copy_device(device_context(), src.impl().device_data, dst.device_data, n * sizeof(float));
        return;
    }
    const std::vector<double> values = src.values();
    const std::vector<float> floats(values.begin(), values.end());
    device::copy_to_device(device_context(), floats.data(), dst.device_data, n * sizeof(float));
}

void device_set_member_values(const Tensor& stacked, size_t m, const Tensor& member) {
    const size_t n = member.numel();
    if (n > 0) device::copy_device(device_context(), device_in(member), device_out(stacked) + m * n, n * sizeof(float));
}

void device_add_member_grad(const Tensor& stacked, size_t m, const Tensor& member) {
    const size_t n = member.numel();
    const GradTarget target = grad_target(member);  // a parameter's slot in its flat gradient block
    const float* row = stacked.impl().grad->device_data + m * n;
    if (n == 0 || !target) return;
    if (target.accumulate) device::add_into(device_context(), n, row, target.data);
    else device::copy_device(device_context(), row, target.data, n * sizeof(float));
}

namespace {

void move_to_device(const std::vector<Tensor>& leaves) {
    // Matrices first, then vectors: a decaying group then a non-decaying one for
    // AdamW, so that one update kernel covers the whole block (Optimizer::step).
    std::vector<size_t> order;
    size_t total = 0;
    for (int pass = 0; pass < 2; ++pass)
        for (size_t i = 0; i < leaves.size(); ++i) {
            const Tensor& t = leaves[i];
            if (t.device() == Device::cuda || (t.dim() >= 2) != (pass == 0)) continue;
            if (!t.is_leaf()) fail("to", "only leaf tensors move to the device in place");
            check_float32(t);  // every leaf checked before any moves
            order.push_back(i);
            total += t.numel();
        }
    if (order.empty()) return;
    auto values = std::make_shared<device::DeviceBuffer>(device_context().allocate_floats(total));
    auto grads = std::make_shared<device::DeviceBuffer>(device_context().allocate_floats(total));
    size_t offset = 0;
    for (size_t i : order) {
        TensorImpl& impl = leaves[i].impl();
        const Array<float>& host = impl.array<float>();
        if (host.size() > 0) device::copy_to_device(device_context(), host.data(), values->floats() + offset, host.size() * sizeof(float));
        impl.data = Array<float>();
        impl.device = Device::cuda;
        impl.device_block = values;
        impl.device_data = values->floats() + offset;
        impl.grad.reset();
        impl.grad_home = device_view(grads, grads->floats() + offset, impl.shape).impl_ptr();
        offset += leaves[i].numel();
    }
}

void move_to_cpu(const std::vector<Tensor>& leaves) {
    for (const Tensor& t : leaves) {
        if (t.device() == Device::cpu) continue;
        if (!t.is_leaf()) fail("to", "only leaf tensors move to the cpu in place");
        TensorImpl& impl = t.impl();
        impl.data = t.to(Device::cpu).impl().array<float>();
        impl.device = Device::cpu;
        impl.device_block.reset();
        impl.device_data = nullptr;
        impl.grad.reset();
        impl.grad_home.reset();
    }
}

}  // namespace

void move_to(const std::vector<Tensor>& leaves, Device device) {
    if (device == Device::cuda) move_to_device(leaves);
    else move_to_cpu(leaves);
}

}  // namespace attnlab
