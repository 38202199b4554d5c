// What an op's device branch needs: the process's device, tensors on it, and the
// device twins of record / send_grad (tensor_impl.h). Included only by op
// implementations. The kernels themselves are the device seam,
// autograd/device/kernels.h and autograd/device/attention.h.
//
// An op handles both devices in one function: its CPU branch as before, and
// when its inputs are on the device a branch whose forward and backward sit
// side by side, as on the CPU, calling the seam's kernels. Device tensors are
// float32 and contiguous; every kernel is queued on the one stream of the
// process's Context, so nothing here waits for the device.
#pragma once

#include <utility>

#include "autograd/attention.h"
#include "autograd/device/kernels.h"
#include "autograd/device/primitives.h"
#include "autograd/tensor_impl.h"

namespace attnlab {

class Rng;

// The process's device (device 0), made on first use; throws "[cuda] ..." when
// there is none (a CPU build, no GPU). Never destroyed: tensors may outlive main.
device::Context& device_context();

inline bool on_device(const Tensor& t) { return t.defined() && t.impl().device == Device::cuda; }

// Throws "[op] tensors are on different devices: cpu and cuda" unless every
// defined one is on the device of the first.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
// Throws "[op] <what> has no device kernel; move the tensors to the cpu (Tensor::to)".
[[noreturn]] void no_device_kernel(const char* op, const std::string& what);

// An uninitialised float32 tensor on the device, no graph.
Tensor device_tensor(const Shape& shape);
// A float32 tensor over `count` values of `block` from `data` on (a view), no graph.
Tensor device_view(const std::shared_ptr<device::DeviceBuffer>& block, float* data, const Shape& shape);
inline const float* device_in(const Tensor& t) { return t.defined() ? t.impl().device_data : nullptr; }
inline float* device_out(const Tensor& t) { return t.defined() ? t.impl().device_data : nullptr; }
// Host values to a new device buffer (token ids, targets, weights: one copy each).
device::DeviceBuffer upload(const void* values, size_t bytes);

// Tensor's methods on the device (tensor.cpp calls them for a device tensor).
std::vector<double> device_values(const TensorImpl& impl);  // a copy to the host
Tensor device_clone(const TensorImpl& impl);
void device_assign(TensorImpl& dst, const Tensor& src);     // src on either device
// set_member_values and add_member_grad (tensor.h) on the device, checked already
void device_set_member_values(const Tensor& stacked, size_t m, const Tensor& member);
void device_add_member_grad(const Tensor& stacked, size_t m, const Tensor& member);

// The device output of an op: joins the graph as record() does; backward(grad_out,
// out) receives the output's gradient (a device tensor) and its values.
template <class Backward>
Tensor record_device(const char* op, Tensor out, std::vector<Tensor> inputs, Backward&& backward) {
    if (joins_graph(op, out.impl(), inputs))
        out.impl().backward = [backward = std::forward<Backward>(backward)](TensorImpl& self) {
            backward(Tensor(self.grad), static_cast<const float*>(self.device_data));
        };
    return out;
}

// The gradient buffer of `input` to write into, and whether to add to it: its
// existing gradient (add), else its grad_home (a parameter's slot in the flat
// gradient block, zeroed by Optimizer::zero_grad: add), else a fresh buffer
// (overwrite). Null when the input wants no gradient.
struct GradTarget {
    float* data = nullptr;
    bool accumulate = false;
    explicit operator bool() const { return data != nullptr; }
};
GradTarget grad_target(const Tensor& input);
// The tensor's own gradient to change in place (a shared one copied first), or null.
float* writable_grad(const Tensor& t);
// For kernels that can only add: a fresh buffer is zeroed first.
float* grad_to_add(const Tensor& input);
// For kernels that always write a gradient: the input's (grad_target,
// grad_to_add), or `scratch`, made here, when it wants none.
GradTarget grad_or_scratch(const Tensor& input, Tensor& scratch);
float* grad_to_add_or_scratch(const Tensor& input, Tensor& scratch);
// Sends `grad` (the input's shape, on the device) to `input`: shared when the
// input has no gradient yet (no copy; a shared gradient is copied by the first
// write to it, grad_target), else added, or copied into a parameter's slot.
void send_device_grad(const Tensor& input, const Tensor& grad);
// For kernels that can only overwrite: write(dx) fills the input's gradient, or a
// scratch buffer that is then added to the gradient it already has.
template <class Write>
void write_device_grad(const Tensor& input, Write&& write) {
    const GradTarget target = grad_target(input);
    if (!target) return;
    if (!target.accumulate) return write(target.data);
    const Tensor scratch = device_tensor(input.shape());
    write(scratch.impl().device_data);
    device::add_into(device_context(), input.numel(), scratch.impl().device_data, target.data);
}

// ---- the device branches of the ops (autograd/device/ops_*.cpp) ----
// Each op of ops.h validates its inputs, then calls its branch here when they are
// on the device; the branch keeps the op's maths and error messages.
Tensor linear_device(const Tensor& x, const Tensor& weight, const Tensor& bias, const Shape& out_shape);
Tensor linear_members_device(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const std::vector<size_t>& member_rows, const Shape& out_shape);
std::vector<Tensor> linears_device(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases);
Tensor add_device(const Tensor& a, const Tensor& b, const Shape& out_shape);
Tensor activation_device(const char* op, device::DeviceActivation activation, const Tensor& x);
Tensor reshape_device(const Tensor& x, const Shape& shape);
Tensor slice_rows_device(const Tensor& x, size_t start, size_t stop, const Shape& out_shape);
Tensor concat_device(const std::vector<Tensor>& parts, size_t axis, const Shape& out_shape);
Tensor embedding_device(const Tensor& weight, const Indices& ids, const Shape& out_shape);
// members: the norms' stacked form, weight and bias (members, D) (1: one weight)
Tensor layer_norm_device(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, size_t members);
Tensor rms_norm_device(const Tensor& x, const Tensor& weight, double eps, size_t members);
Tensor dropout_device(const Tensor& x, double p, Rng& rng);
Tensor rotary_device(const Tensor& x, size_t heads, size_t offset, double base);
// counted: the positions the loss mask keeps (each target checked already)
Tensor cross_entropy_device(const Tensor& logits, const Indices& targets, const Mask& loss_mask, size_t counted);
Tensor cross_entropy_members_device(const Tensor& logits, const Indices& targets, const std::vector<size_t>& rows);
// On the primitives (autograd/device/ops_elementwise.cpp, ops_reduce.cpp, ops_layout.cpp):
Tensor binary_device(const char* op, device::BinaryOp kind, const Tensor& a, const Tensor& b, const Shape& out_shape);
Tensor unary_device(const char* op, device::UnaryOp kind, const Tensor& x, double param = 0.0);
Tensor pointwise_device(const char* op, size_t function, const Tensor& x, double param);
Tensor masked_fill_device(const Tensor& x, const std::vector<uint8_t>& fill, double value);  // fill: x's numel
Tensor sum_device(const char* op, const Tensor& x, const std::vector<size_t>& axes, double scale, const Shape& out_shape);
Tensor max_device(const Tensor& x, const std::vector<size_t>& axes, const Shape& out_shape);
Tensor softmax_device(const char* op, const Tensor& x, size_t axis, bool log);
Tensor permute_device(const Tensor& x, const std::vector<size_t>& order);
Tensor slice_device(const Tensor& x, size_t axis, size_t start, size_t stop, const Shape& out_shape);
Tensor matmul_device(const Tensor& a, const Tensor& b, size_t batch, size_t M, size_t N, size_t K, bool shared_b,
                     const Shape& out_shape);

// The views the primitives read inputs through (ops_layout.cpp); a rank above
// device::max_rank is refused naming `op`.
device::Strided broadcast_view(const char* op, const Shape& in, const Shape& out);  // in broadcast to out
device::Strided permute_view(const char* op, const Shape& in, const std::vector<size_t>& order);
// g summed over the axes `target` broadcasts along (g itself when the shapes agree),
// no graph (ops_reduce.cpp: the sum's own row reduction).
Tensor sum_to_shape_device(const char* op, const Tensor& g, const Shape& target);
// send_device_grad of g summed to the input's shape.
void send_summed_grad(const char* op, const Tensor& input, const Tensor& g);

AttentionResult attention_packed_device(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& dims,
                                        const AttentionMask& mask, const AttentionOptions& options);

}  // namespace attnlab
