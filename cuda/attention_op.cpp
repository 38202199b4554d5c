#include "cuda/attention_op.h"

#include "autograd/tensor_impl.h"
#include "cuda/attention_host.h"

namespace attnlab::cuda {

AttentionKernel kernel_for_head_width(size_t head_width) {
    return head_width <= flash_max_head_width ? AttentionKernel::flash : AttentionKernel::dense;
}

Tensor attention_on_device(const AttentionDevice& device, const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionMask& mask, const AttentionOptions& options) {
    if (!device.on_device()) fail("attention", "attention_on_device needs a CUDA context");
    if (options.need_weights) fail("attention", "attention_on_device returns no weights; use the CPU op to get them");
    // context (B, H, Tq, d_v) computed on the device, copied back
    Tensor context = attention_host(*device.context, device.kernel, q, k, v, mask, options).context;
    Array<float> value = std::move(context.impl().array<float>());
    return record<float>("attention", std::move(value), {q, k, v},
                         [device, q, k, v, mask, options](const Array<float>& g, const Array<float>&) {
        // dcontext (B, H, Tq, d_v) -> dq, dk, dv on the device
        const HostAttentionGrads grads =
            attention_backward_host(*device.context, device.kernel, q, k, v, mask, options, wrap<float>(Array<float>(g)));
        send_grad<float>(q, [&] { return grads.dq.impl().array<float>(); });
        send_grad<float>(k, [&] { return grads.dk.impl().array<float>(); });
        send_grad<float>(v, [&] { return grads.dv.impl().array<float>(); });
    });
}

}  // namespace attnlab::cuda
