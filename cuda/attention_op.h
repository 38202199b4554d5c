// The attention core as an autograd op whose work runs on the GPU: the first
// step of train.device = "cuda". Its inputs and its output are host tensors,
// like every other op's: the op copies q, k and v to the device, runs a kernel
// of cuda/attention.h there and copies the context back, keeping its device
// buffers (DeviceAttentionPass) for the backward, which copies the gradient in,
// runs the kernel's backward and copies dq, dk, dv out. So each attention moves
// its inputs and outputs across the bus once each way per pass; the other ops
// of a step stay on the CPU until they have device versions. A graph that is
// never run backward frees the buffers with the graph.
//
// Plain C++ over attention_host.h, compiled in both builds; without CUDA (or a
// GPU) no Context can be made, so nothing reaches the device.
#pragma once

#include "autograd/attention.h"
#include "cuda/attention.h"

namespace attnlab::cuda {

// Where the attention layers run: on the CPU while `context` is null.
struct AttentionDevice {
    Context* context = nullptr;
    AttentionKernel kernel = AttentionKernel::flash;
    bool on_device() const { return context != nullptr; }
};

// The kernel a model's attention uses: flash (no Tq x Tk buffer) when the head
// width fits its tiles (flash_max_head_width), else dense.
AttentionKernel kernel_for_head_width(size_t head_width);

// q (B, H, Tq, d), k (B, H_kv, Tk, d), v (B, H_kv, Tk, d_v), float32 ->
// context (B, H, Tq, d_v), in the graph, with the CPU op's semantics (grouped
// K/V, masks, masked_rows). No weights and no dropout: check_attention refuses
// what the kernels cannot do, before any copy.
Tensor attention_on_device(const AttentionDevice& device, const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionMask& mask, const AttentionOptions& options);

}  // namespace attnlab::cuda
