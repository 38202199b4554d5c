// One decoder block's forward and backward on the device, the layers of
// layers/blocks.h written over the device ops (cuda/train_ops.h) and the
// attention kernels (cuda/attention.h). Used by device_training.cpp only.
//
//   norm = pre:   x1 = x + Attn(LN1(x)),   x2 = x1 + FFN(LN2(x1))
//   norm = post:  x1 = LN1(x + Attn(x)),   x2 = LN2(x1 + FFN(x1))
//   norm = none:  x1 = x + Attn(x),        x2 = x1 + FFN(x1)
//   Attn(h) = Concat_h(softmax(scale Q_h K_h^T + causal and padding mask) V_h) W_O^T + b_O,
//             [Q K V] = h [W_Q; W_K; W_V]^T + [b_Q; b_K; b_V]   (one GEMM: the three are adjacent)
//   FFN(h)  = act(h W_1^T + b_1) W_2^T + b_2
#pragma once

#include <optional>

#include "cuda/attention.h"
#include "cuda/train_ops.h"
#include "layers/blocks.h"

namespace attnlab::device {

using cuda::Context;
using cuda::DeviceBuffer;

// A parameter in the flat device buffers: its values and its gradient (both
// null for an undefined Tensor, e.g. a disabled bias).
struct DeviceParam {
    const float* value = nullptr;
    float* grad = nullptr;
};

struct DeviceLayerNorm {
    DeviceParam weight, bias;  // (D)
    float eps = 1e-5f;
};

struct DeviceLinear {
    DeviceParam weight, bias;  // (out, in), (out)
    size_t in = 0, out = 0;
};

struct DeviceBlockParams {
    std::optional<DeviceLayerNorm> ln1, ln2;  // none when norm = none; ln2 only with a feed-forward sublayer
    DeviceLinear qkv;                          // weight ((H + 2 H_kv) d, D): q_proj, k_proj, v_proj stacked
    DeviceLinear out;                          // (D, H d)
    std::optional<DeviceLinear> fc1, fc2;      // (F, D), (D, F); none when ffn = 0
};

struct BlockShape {
    size_t B = 0, T = 0, D = 0, H = 0, H_kv = 0, d = 0;  // d: head width
    Norm norm = Norm::pre;
    cuda::DeviceActivation activation = cuda::DeviceActivation::gelu;
    cuda::AttentionKernel kernel = cuda::AttentionKernel::flash;
    float scale = 1.0f;
    size_t rows() const { return B * T; }
    size_t qkv_width() const { return (H + 2 * H_kv) * d; }
};

// What a block's forward keeps for its backward (M = B T rows).
struct BlockSaved {
    DeviceBuffer x;                    // (M, D) the block's input
    DeviceBuffer ln1_mean, ln1_rstd;   // (M) LN1's statistics (over x for pre, over sum1 for post)
    DeviceBuffer attn_in;              // (M, D) pre only: LN1(x), what the projections read (else they read x)
    DeviceBuffer qkv;                  // (M, (H + 2 H_kv) d)
    DeviceBuffer q, k, v;              // (B, H, T, d), (B, H_kv, T, d) x 2
    DeviceBuffer context, lse, weights;  // (B, H, T, d); flash: lse (B, H, T); dense: weights (B, H, T, T)
    DeviceBuffer merged;               // (M, H d) Concat(heads)
    DeviceBuffer sum1;                 // (M, D) post only: x + Attn(x), LN1's input
    DeviceBuffer x1;                   // (M, D) the attention sublayer's output (with a feed-forward sublayer)
    DeviceBuffer ln2_mean, ln2_rstd;   // (M) as LN1's, for the feed-forward sublayer
    DeviceBuffer ffn_in;               // (M, D) pre only: LN2(x1), what fc1 reads (else it reads x1)
    DeviceBuffer hidden, activated;    // (M, F) fc1's output and act of it
    DeviceBuffer sum2;                 // (M, D) post only: x1 + FFN(x1), LN2's input
};

// x (M, D), moved into saved -> the block's output (M, D).
DeviceBuffer block_forward(Context& context, const BlockShape& shape, const DeviceBlockParams& params,
                           const cuda::MaskView& mask, DeviceBuffer x, BlockSaved& saved);

// dout (M, D) -> dx (M, D); parameter gradients are added into their buffers.
DeviceBuffer block_backward(Context& context, const BlockShape& shape, const DeviceBlockParams& params,
                            const cuda::MaskView& mask, const BlockSaved& saved, DeviceBuffer dout);

}  // namespace attnlab::device
