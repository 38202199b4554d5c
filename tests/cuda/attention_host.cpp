// Host Tensors in and out of the device attention. Plain C++ over the device
// interface, compiled in both builds.
#include "attention_host.h"

#include "tensor_copy.h"

namespace attnlab::device {

namespace {

// dcontext must be float32 (B, H, Tq, d_v); refused before any device work.
void check_dcontext(const AttentionDims& dims, const Tensor& dcontext) {
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    if (!dcontext.defined() || dcontext.dtype() != DType::f32 || dcontext.shape() != Shape{B, H, Tq, d_v})
        fail("attention", "dcontext must be float32 " + shape_str({B, H, Tq, d_v}) + ", got " +
                              (dcontext.defined() ? to_string(dcontext.dtype()) + " " + shape_str(dcontext.shape())
                                                  : std::string("an undefined tensor")));
}

}  // namespace

// The forward's device inputs and outputs, kept for the backward.
struct DeviceAttentionPass::Buffers {
    DeviceMask mask;
    DeviceBuffer q, k, v, context, weights, lse;  // weights: dense only; lse: flash only
};

DeviceAttentionPass::DeviceAttentionPass(Context& context, AttentionKernel kernel, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const AttentionMask& mask, const AttentionOptions& options)
    : context_(context), kernel_(kernel), dims_(attention_dims(q, k, v)), scale_(float(options.scale)),
      q_shape_(q.shape()), k_shape_(k.shape()), v_shape_(v.shape()) {
    check_attention(dims_, mask, options, kernel);
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims_;
    buffers_.reset(new Buffers{DeviceMask(context, mask, dims_), upload(context, q), upload(context, k),
                               upload(context, v), context.allocate_floats(B * H * Tq * d_v), {}, {}});
    Buffers& f = *buffers_;
    if (kernel == AttentionKernel::dense) {
        f.weights = context.allocate_floats(B * H * Tq * Tk);
        dense_attention_forward(context, dims_, f.q.floats(), f.k.floats(), f.v.floats(), f.mask.view(), scale_,
                                f.context.floats(), f.weights.floats());
    } else {
        f.lse = context.allocate_floats(B * H * Tq);
        flash_attention_forward(context, dims_, f.q.floats(), f.k.floats(), f.v.floats(), f.mask.view(), scale_,
                                f.context.floats(), f.lse.floats());
    }
    // A fault inside a kernel is reported by the next synchronising call: here,
    // naming the forward, rather than at the first download ("to_host").
    context.synchronize(kernel == AttentionKernel::dense ? "dense_attention_forward" : "flash_attention_forward");
}

DeviceAttentionPass::~DeviceAttentionPass() = default;

HostAttention DeviceAttentionPass::result(bool need_weights) const {
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims_;
    const Buffers& f = *buffers_;
    HostAttention result;
    result.context = download(context_, f.context, {B, H, Tq, d_v});
    if (kernel_ == AttentionKernel::dense && need_weights) result.weights = download(context_, f.weights, {B, H, Tq, Tk});
    if (kernel_ == AttentionKernel::flash) result.lse = download(context_, f.lse, {B, H, Tq});
    return result;
}

HostAttentionGrads DeviceAttentionPass::backward(const Tensor& dcontext) const {
    check_dcontext(dims_, dcontext);
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims_;
    const Buffers& f = *buffers_;
    const DeviceBuffer dC = upload(context_, dcontext);
    DeviceBuffer dq = context_.allocate_floats(numel_of(q_shape_));
    DeviceBuffer dk = context_.allocate_floats(numel_of(k_shape_));
    DeviceBuffer dv = context_.allocate_floats(numel_of(v_shape_));
    if (kernel_ == AttentionKernel::dense) {
        const DeviceBuffer scratch = context_.allocate_floats(B * H * Tq * Tk);
        dense_attention_backward(context_, dims_, f.q.floats(), f.k.floats(), f.v.floats(), f.weights.floats(),
                                 dC.floats(), scale_, dq.floats(), dk.floats(), dv.floats(), scratch.floats(), {},
                                 f.mask.view());
        context_.synchronize("dense_attention_backward");  // a kernel fault is reported here, naming us
    } else {
        const DeviceBuffer row_dot = context_.allocate_floats(B * H * Tq);
        flash_attention_backward(context_, dims_, f.q.floats(), f.k.floats(), f.v.floats(), f.context.floats(),
                                 f.lse.floats(), dC.floats(), f.mask.view(), scale_, dq.floats(), dk.floats(),
                                 dv.floats(), row_dot.floats());
        context_.synchronize("flash_attention_backward");
    }
    return {download(context_, dq, q_shape_), download(context_, dk, k_shape_), download(context_, dv, v_shape_)};
}

HostAttention attention_host(Context& context, AttentionKernel kernel, const Tensor& q, const Tensor& k,
                             const Tensor& v, const AttentionMask& mask, const AttentionOptions& options) {
    return DeviceAttentionPass(context, kernel, q, k, v, mask, options).result(options.need_weights);
}

HostAttentionGrads attention_backward_host(Context& context, AttentionKernel kernel, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const AttentionMask& mask, const AttentionOptions& options,
                                           const Tensor& dcontext) {
    check_dcontext(attention_dims(q, k, v), dcontext);  // the pass checks the rest before its forward
    return DeviceAttentionPass(context, kernel, q, k, v, mask, options).backward(dcontext);
}

}  // namespace attnlab::device
