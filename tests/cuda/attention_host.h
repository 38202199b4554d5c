// Device attention on host Tensors: copy in, run, copy out. For the tests
// (compiled into test_cuda and the emulated suite); real use keeps its tensors
// on the device (autograd/device/attention.h).
#pragma once

#include <memory>

#include "autograd/device/attention.h"

namespace attnlab::device {

struct HostAttention {
    Tensor context;  // (B, H, Tq, d_v)
    Tensor weights;  // (B, H, Tq, Tk), dense with need_weights only
    Tensor lse;      // (B, H, Tq), flash only; -inf for a row with no eligible key
};

// float32 q (B, H, Tq, d), k (B, H_kv, Tk, d), v (B, H_kv, Tk, d_v); no graph.
// Refuses (attnlab::Error) what check_attention refuses.
HostAttention attention_host(Context& context, AttentionKernel kernel, const Tensor& q, const Tensor& k,
                             const Tensor& v, const AttentionMask& mask, const AttentionOptions& options);

struct HostAttentionGrads {
    Tensor dq, dk, dv;  // shapes of q, k, v
};

// Runs the forward, then the backward for dcontext (B, H, Tq, d_v).
HostAttentionGrads attention_backward_host(Context& context, AttentionKernel kernel, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const AttentionMask& mask, const AttentionOptions& options,
                                           const Tensor& dcontext);

// One forward on the device whose buffers (Q, K, V, the mask, the context and
// the weights or log-sum-exp) stay there for its backward (the kernel tests and
// benchmarks run both passes through it). Must not outlive `context`.
class DeviceAttentionPass {
public:
    DeviceAttentionPass(Context& context, AttentionKernel kernel, const Tensor& q, const Tensor& k, const Tensor& v,
                        const AttentionMask& mask, const AttentionOptions& options);
    ~DeviceAttentionPass();
    DeviceAttentionPass(const DeviceAttentionPass&) = delete;
    DeviceAttentionPass& operator=(const DeviceAttentionPass&) = delete;

    HostAttention result(bool need_weights) const;               // copied to the host
    HostAttentionGrads backward(const Tensor& dcontext) const;   // dcontext (B, H, Tq, d_v)

private:
    struct Buffers;
    Context& context_;
    AttentionKernel kernel_;
    AttentionDims dims_;
    float scale_;
    Shape q_shape_, k_shape_, v_shape_;
    std::unique_ptr<Buffers> buffers_;
};

}  // namespace attnlab::device
