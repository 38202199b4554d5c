// Device attention on host Tensors: copy in, run, copy out. For tests and
// benchmarks; real use keeps its tensors on the device (cuda/attention.h).
#pragma once

#include "cuda/attention.h"

namespace attnlab::cuda {

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

}  // namespace attnlab::cuda
