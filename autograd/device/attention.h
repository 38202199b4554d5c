// The attention core on the device, float32, same semantics as the CPU op
// attnlab::attention (autograd/attention.h):
//
//     A = softmax_over_keys( scale * Q K^T  restricted to eligible keys ),   C = A V
//
// q (B, H, Tq, d), k (B, H_kv, Tk, d), v (B, H_kv, Tk, d_v), all contiguous;
// query head h reads K/V head h / (H / H_kv). The mask parts (causal
// bottom-right, key lengths, explicit eligibility) combine by AND. A row with no
// eligible key is refused by check_attention under masked_rows = "error"; the
// kernels themselves always give it zero weights, context and gradients.
//
// Two kernels:
//   dense  cuBLAS GEMMs around our masked-softmax kernels; materialises the
//          (B, H, Tq, Tk) weights, which the backward reads.
//   flash  one fused kernel, online softmax over 64-key tiles, no Tq x Tk
//          buffer; keeps the log-sum-exp (B, H, Tq) per row (-inf for a row
//          with no eligible key), from which the backward recomputes P per tile.
//
// Device-pointer functions below take pointers into DeviceBuffers of one Context
// and only launch work on its stream; validate first with check_attention.
// tests/cuda/attention_host.h wraps them for host Tensors (the tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/attention.h"
#include "autograd/device/context.h"

namespace attnlab::device {

enum class AttentionKernel { dense, flash };
std::string to_string(AttentionKernel kernel);    // "dense" | "flash"
AttentionKernel parse_attention_kernel(const std::string& name);

// The call's sizes (B, H, H_kv, Tq, Tk, d, d_v): autograd/attention.h's, shared with the CPU op.
using attnlab::AttentionDims;

// The flash kernel keeps tiles of width up to this in shared memory.
constexpr size_t flash_max_head_width = 128;

// The kernel a model's attention uses: flash (no Tq x Tk buffer) when the head
// width fits its tiles (flash_max_head_width), else dense.
AttentionKernel kernel_for_head_width(size_t head_width);

// Shapes of host tensors, checked as the CPU op checks them ("[attention] ..."),
// and float32 only.
AttentionDims attention_dims(const Tensor& q, const Tensor& k, const Tensor& v);

// Everything a device call would refuse, as attnlab::Error, before any work:
// mask sizes, a dropout rate outside [0, 1), head widths above
// flash_max_head_width, need_weights or dropout in training for flash (the
// dense kernel applies dropout to its weights), shapes over the launch limits
// (flash: B and H at most 65535, gridDim.z and y), and under masked_rows = "error"
// the first row with no eligible key, named as the CPU op names it.
void check_attention(const AttentionDims& dims, const AttentionMask& mask, const AttentionOptions& options,
                     AttentionKernel kernel);

// The mask as the kernels read it: device pointers, nullptr for an absent part.
struct MaskView {
    const int32_t* key_lengths = nullptr;  // (B)
    const uint8_t* eligible = nullptr;     // (Tq, Tk) or (B, Tq, Tk), 1 = eligible
    bool eligible_per_batch = false;       // eligible is (B, Tq, Tk)
    bool causal = false;
    bool alibi = false;                    // ALiBi's bias on the eligible scores (AttentionVariant::alibi)
};

// An AttentionMask copied to the device (key lengths as int32, eligibility as bytes).
class DeviceMask {
public:
    DeviceMask(Context& context, const AttentionMask& mask, const AttentionDims& dims);
    const MaskView& view() const { return view_; }

private:
    DeviceBuffer key_lengths_;
    DeviceBuffer eligible_;
    MaskView view_;
};

// ---- dense -----------------------------------------------------------------

// Dropout on the weights in training (p > 0): element e of the (B, H, Tq, Tk)
// weights is dropped as autograd/device/kernels.h's dropout_forward drops element e of a
// call with `seed`. `dropped` (B, H, Tq, Tk) receives the weights after dropout,
// from which the forward computes the context and the backward dV.
struct WeightDropout {
    float p = 0.0f;
    uint64_t seed = 0;
    float* dropped = nullptr;
};

// context (B, H, Tq, d_v); weights (B, H, Tq, Tk), always written (the backward
// needs them), before dropout. K/V rows past a batch item's key length are never
// mixed into the context (they may hold anything).
void dense_attention_forward(Context& context, const AttentionDims& dims, const float* q, const float* k,
                             const float* v, const MaskView& mask, float scale, float* out_context, float* weights,
                             const WeightDropout& dropout = {});

// dcontext (B, H, Tq, d_v) -> dq, dk, dv (shapes of q, k, v; overwritten).
// scratch (B, H, Tq, Tk) holds dA and then dS. Ineligible keys have A = 0; the
// mask is needed only for its key lengths, so that padding rows of K and V are
// not read (pass the forward's: without it, inf or NaN there gives NaN in dq).
// With dropout, the forward's (its `dropped` is read).
void dense_attention_backward(Context& context, const AttentionDims& dims, const float* q, const float* k,
                              const float* v, const float* weights, const float* dcontext, float scale, float* dq,
                              float* dk, float* dv, float* scratch, const WeightDropout& dropout = {},
                              const MaskView& mask = {});

// The scaled scores the metrics and the hook point "scores" read: scores (B, H,
// Tq, Tk) = scale q_i . k_j, -inf at ineligible keys except in a row with no
// eligible key, which keeps its raw scores (as the CPU op attention_scores).
void attention_scores(Context& context, const AttentionDims& dims, const float* q, const float* k,
                      const MaskView& mask, float scale, float* scores);

// ---- flash -----------------------------------------------------------------

// How q, k, v, the context and their gradients lie in memory: heads first
// (B, H, T, d), or packed as Linear projections make them, the heads side by
// side in the last axis (B, T, H d), which then needs no split or merge copies.
// lse and row_dot are (B, H, Tq) either way.
enum class AttentionLayout { heads_first, packed };

// context (B, H, Tq, d_v); lse (B, H, Tq) = log sum_j exp(scale q.k_j) over eligible j, -inf if none.
void flash_attention_forward(Context& context, const AttentionDims& dims, const float* q, const float* k,
                             const float* v, const MaskView& mask, float scale, float* out_context, float* lse,
                             AttentionLayout layout = AttentionLayout::heads_first);

// The FlashAttention-2 backward from the forward's context and lse. row_dot
// (B, H, Tq) is scratch for D_i = sum_c dcontext_ic context_ic. dq, dk, dv overwritten.
void flash_attention_backward(Context& context, const AttentionDims& dims, const float* q, const float* k,
                              const float* v, const float* out_context, const float* lse, const float* dcontext,
                              const MaskView& mask, float scale, float* dq, float* dk, float* dv, float* row_dot,
                              AttentionLayout layout = AttentionLayout::heads_first);

// ---- resources ---------------------------------------------------------------

// What a kernel takes of a multiprocessor as compiled for the current device
// (cudaFuncGetAttributes) and how many of its blocks fit on one at its launch's
// block size and dynamic shared memory (cudaOccupancyMaxActiveBlocksPerMultiprocessor;
// 0 means it cannot launch): the GPU check's resource probe.
struct KernelResources {
    std::string name;
    int registers = 0;               // per thread
    size_t local_bytes = 0;          // per thread: register spills, local arrays
    size_t static_shared_bytes = 0;  // __shared__ arrays
    size_t dynamic_shared_bytes = 0; // at its launch
    int threads = 0;                 // per block
    int blocks_per_multiprocessor = 0;
};
std::vector<KernelResources> flash_kernel_resources(Context& context);  // the six flash instantiations, row_dot
std::vector<KernelResources> dense_kernel_resources(Context& context);  // the softmax kernels, live_keys

}  // namespace attnlab::device
