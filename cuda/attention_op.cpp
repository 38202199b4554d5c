#include "cuda/attention_op.h"

#include <memory>

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
    // The forward on the device; its buffers stay there until the backward has run.
    auto pass = std::make_shared<const DeviceAttentionPass>(*device.context, device.kernel, q, k, v, mask, options);
    Array<float> context = std::move(pass->result(false).context.impl().array<float>());  // (B, H, Tq, d_v)
    return record<float>("attention", std::move(context), {q, k, v}, [q, k, v, pass](const Array<float>& g, const Array<float>&) {
        const HostAttentionGrads grads = pass->backward(wrap<float>(Array<float>(g)));  // dcontext (B, H, Tq, d_v)
        send_grad<float>(q, [&] { return grads.dq.impl().array<float>(); });
        send_grad<float>(k, [&] { return grads.dk.impl().array<float>(); });
        send_grad<float>(v, [&] { return grads.dv.impl().array<float>(); });
    });
}

}  // namespace attnlab::cuda
