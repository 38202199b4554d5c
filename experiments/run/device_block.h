// Encoder and decoder blocks' forward and backward on the device: the layers of
// layers/blocks.h written over the device ops (autograd/device/kernels.h) and the
// attention kernels (autograd/device/attention.h). Used by device_training.cpp only.
//
// A block is a chain of residual sublayers f, each as Residual in blocks.h:
//   norm = pre:   y = x + drop(f(LN(x)))   norm = post:  y = LN(x + drop(f(x)))   norm = none:  y = x + drop(f(x))
// with f = self-attention, then (decoder blocks of an encoder-decoder)
// cross-attention to the encoder's output, then the feed-forward network (ffn > 0):
//   Attn(h, m) = Concat_h(softmax(scale Q_h K_h^T + mask) V_h) W_O^T + b_O,
//                Q = h W_Q^T + b_Q, K = m W_K^T + b_K, V = m W_V^T + b_V
//   (self-attention: m = h, and [Q K V] is one GEMM over the stacked [W_Q; W_K; W_V];
//    cross-attention: Q one GEMM, [K V] one over [W_K; W_V])
//   FFN(h) = act(h W_1^T + b_1) W_2^T + b_2
#pragma once

#include <optional>

#include "autograd/device/attention.h"
#include "autograd/device/kernels.h"
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

struct DeviceAttention {
    bool cross = false;
    DeviceLinear q;    // self: [W_Q; W_K; W_V] ((H + 2 H_kv) d, D); cross: W_Q (H d, D)
    DeviceLinear kv;   // cross only: [W_K; W_V] (2 H_kv d, D)
    DeviceLinear out;  // W_O (D, H d)
};

struct DeviceBlockParams {
    std::optional<DeviceLayerNorm> ln1, ln_cross, ln2;  // none when norm = none
    DeviceAttention attn;
    std::optional<DeviceAttention> cross_attn;  // decoder blocks of an encoder-decoder
    std::optional<DeviceLinear> fc1, fc2;       // (F, D), (D, F); none when ffn = 0
};

struct BlockShape {
    size_t B = 0, T = 0, D = 0, H = 0, H_kv = 0, d = 0;  // d: head width
    size_t S = 0;                                         // cross-attention: the memory's length
    Norm norm = Norm::pre;
    cuda::DeviceActivation activation = cuda::DeviceActivation::gelu;
    cuda::AttentionKernel kernel = cuda::AttentionKernel::flash;
    float scale = 1.0f;
    float dropout = 0.0f;            // residual dropout on each sublayer's output (0: none, as in eval)
    float attention_dropout = 0.0f;  // on the attention weights (> 0: the dense kernel, which has them)
    uint64_t seed = 0;     // this block's dropout seed; sublayer k uses cuda::mix_seed(seed, k)
};

struct BlockMasks {
    cuda::MaskView self;   // decoder: causal + lengths; encoder: lengths
    cuda::MaskView cross;  // the memory's lengths
};

// The encoder's output a decoder block's cross-attention reads, (B, S, D), and
// where its gradient is added (every decoder block adds to it).
struct Memory {
    const float* values = nullptr;
    float* grad = nullptr;
};

// What each part of a block's forward keeps for its backward (M = B T rows).
struct SublayerSaved {
    DeviceBuffer x;           // (M, D) the sublayer's input
    DeviceBuffer normed;      // (M, D) pre only: LN(x), what f reads (else f reads x)
    DeviceBuffer sum;         // (M, D) post only: x + f(x), LN's input
    DeviceBuffer mean, rstd;  // (M) LN's statistics
};
struct AttentionSaved {
    DeviceBuffer packed_q;   // self: (M, (H + 2 H_kv) d); cross: (M, H d)
    DeviceBuffer packed_kv;  // cross: (B S, 2 H_kv d)
    DeviceBuffer q, k, v;    // (B, H, Tq, d), (B, H_kv, Tk, d) x 2
    DeviceBuffer context, lse, weights;  // (B, H, Tq, d); flash: lse (B, H, Tq); dense: weights (B, H, Tq, Tk)
    DeviceBuffer dropped;    // dense with attention dropout: the weights after it (B, H, Tq, Tk)
    DeviceBuffer merged;     // (M, H d) Concat(heads)
};
struct FeedForwardSaved {
    DeviceBuffer hidden, activated;  // (M, F) fc1's output and act of it
};
struct BlockSaved {
    SublayerSaved res1, res_cross, res2;
    AttentionSaved attn, cross_attn;
    FeedForwardSaved ffn;
};

// x (M, D), moved into saved -> the block's output (M, D).
DeviceBuffer block_forward(Context& context, const BlockShape& shape, const DeviceBlockParams& params,
                           const BlockMasks& masks, const Memory& memory, DeviceBuffer x, BlockSaved& saved);

// dout (M, D) -> dx (M, D); parameter gradients, and with cross-attention the
// memory's gradient, are added into their buffers.
DeviceBuffer block_backward(Context& context, const BlockShape& shape, const DeviceBlockParams& params,
                            const BlockMasks& masks, const Memory& memory, const BlockSaved& saved, DeviceBuffer dout);

}  // namespace attnlab::device
