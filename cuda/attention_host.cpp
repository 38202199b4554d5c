// Host Tensors in and out of the device attention. Plain C++ over the device
// interface, compiled in both builds.
#include "cuda/attention_host.h"

#include "autograd/tensor_impl.h"

namespace attnlab::cuda {

namespace {

DeviceBuffer upload(Context& context, const Tensor& t) {
    return to_device(context, values_of<float>(t).data(), t.numel() * sizeof(float));
}

Tensor download(Context& context, const DeviceBuffer& buffer, const Shape& shape) {
    Array<float> values = make_array<float>(shape);
    to_host(context, buffer, values.data(), values.size() * sizeof(float));
    return wrap<float>(std::move(values));
}

// The forward's device outputs, kept for the backward.
struct DeviceForward {
    DeviceBuffer q, k, v, context, weights, lse;
};

DeviceForward run_forward(Context& context, AttentionKernel kernel, const AttentionDims& dims, const Tensor& q,
                          const Tensor& k, const Tensor& v, const DeviceMask& mask, float scale) {
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    DeviceForward f{upload(context, q), upload(context, k), upload(context, v),
                    context.allocate_floats(B * H * Tq * d_v), {}, {}};
    if (kernel == AttentionKernel::dense) {
        f.weights = context.allocate_floats(B * H * Tq * Tk);
        dense_attention_forward(context, dims, f.q.floats(), f.k.floats(), f.v.floats(), mask.view(), scale,
                                f.context.floats(), f.weights.floats());
    } else {
        f.lse = context.allocate_floats(B * H * Tq);
        flash_attention_forward(context, dims, f.q.floats(), f.k.floats(), f.v.floats(), mask.view(), scale,
                                f.context.floats(), f.lse.floats());
    }
    return f;
}

}  // namespace

HostAttention attention_host(Context& context, AttentionKernel kernel, const Tensor& q, const Tensor& k,
                             const Tensor& v, const AttentionMask& mask, const AttentionOptions& options) {
    const AttentionDims dims = attention_dims(q, k, v);
    check_attention(dims, mask, options, kernel);
    const DeviceMask device_mask(context, mask, dims);
    const DeviceForward f = run_forward(context, kernel, dims, q, k, v, device_mask, float(options.scale));
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    HostAttention result;
    result.context = download(context, f.context, {B, H, Tq, d_v});
    if (kernel == AttentionKernel::dense && options.need_weights)
        result.weights = download(context, f.weights, {B, H, Tq, Tk});
    if (kernel == AttentionKernel::flash) result.lse = download(context, f.lse, {B, H, Tq});
    return result;
}

HostAttentionGrads attention_backward_host(Context& context, AttentionKernel kernel, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const AttentionMask& mask, const AttentionOptions& options,
                                           const Tensor& dcontext) {
    const AttentionDims dims = attention_dims(q, k, v);
    check_attention(dims, mask, options, kernel);
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    if (!dcontext.defined() || dcontext.dtype() != DType::f32 || dcontext.shape() != Shape{B, H, Tq, d_v})
        fail("attention", "dcontext must be float32 " + shape_str({B, H, Tq, d_v}) + ", got " +
                              (dcontext.defined() ? to_string(dcontext.dtype()) + " " + shape_str(dcontext.shape())
                                                  : std::string("an undefined tensor")));
    const DeviceMask device_mask(context, mask, dims);
    const float scale = float(options.scale);
    const DeviceForward f = run_forward(context, kernel, dims, q, k, v, device_mask, scale);
    const DeviceBuffer dC = upload(context, dcontext);
    DeviceBuffer dq = context.allocate_floats(q.numel());
    DeviceBuffer dk = context.allocate_floats(k.numel());
    DeviceBuffer dv = context.allocate_floats(v.numel());
    if (kernel == AttentionKernel::dense) {
        const DeviceBuffer scratch = context.allocate_floats(B * H * Tq * Tk);
        dense_attention_backward(context, dims, f.q.floats(), f.k.floats(), f.v.floats(), f.weights.floats(),
                                 dC.floats(), scale, dq.floats(), dk.floats(), dv.floats(), scratch.floats());
        context.synchronize("attention_backward_host");  // a kernel fault is reported here, naming us
    } else {
        const DeviceBuffer row_dot = context.allocate_floats(B * H * Tq);
        flash_attention_backward(context, dims, f.q.floats(), f.k.floats(), f.v.floats(), f.context.floats(),
                                 f.lse.floats(), dC.floats(), device_mask.view(), scale, dq.floats(), dk.floats(),
                                 dv.floats(), row_dot.floats());
        context.synchronize("attention_backward_host");
    }
    return {download(context, dq, q.shape()), download(context, dk, k.shape()), download(context, dv, v.shape())};
}

}  // namespace attnlab::cuda
