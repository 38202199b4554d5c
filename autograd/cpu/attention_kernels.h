// The attention core's loops, shared by the two attention ops (ops_attention.cpp)
// and independent of how the heads are laid out in memory. Internal to autograd.
//
// Both compute the variant's soft-cap, if any, on the scaled scores (before the
// mask and ALiBi), from its one definition (autograd/pointwise.h); the other
// score modifiers (sinks, T5's bias) are composed of ops (MultiHeadAttention).
//
//   dense:     S = scale Q K^T per (batch, head) into a (Tq, Tk) weight buffer,
//              masked softmax in place, C = A V; backward from the kept A.
//   blockwise: online softmax over key blocks (FlashAttention's recurrence):
//              no (Tq, Tk) buffer, O(block^2) scratch per thread; keeps the
//              per-row log-sum-exp L = m + log l, and the backward recomputes
//              P = exp(S - L) block by block.
//
// Work is split over (batch item, K/V head) pairs on the thread pool: one task
// owns the query heads of its group, so K/V gradients are never shared and the
// results do not depend on the thread count.
#pragma once

#include <cstddef>
#include <vector>

#include "autograd/attention.h"

namespace attnlab::attention_kernels {

constexpr size_t kKeyBlock = 128;  // blockwise: keys per block

// Where one head's (T, width) matrix lives: row t, column c of head h in batch
// item b is data[b * batch + h * head + t * row + c].
//   (B, H, T, w) contiguous:          batch = H T w, head = T w, row = w
//   (B, T, H w) heads side by side:   batch = T H w, head = w,   row = H w
template <class T>
struct HeadView {
    T* data;
    size_t batch, head, row;
    T* at(size_t b, size_t h) const { return data + b * batch + h * head; }
};

using Dims = AttentionDims;  // autograd/attention.h

// Throws the masked-row error for the first (batch item, query) in order with
// no eligible key, so that the message never depends on thread timing.
void check_masked_rows(const Dims& dims, const AttentionMask& mask, const AttentionOptions& options);

// Dense forward. weights (B, H, Tq, Tk) receives A; dropped (same shape, or
// null) receives A after dropout from `keep` (1/(1-p) or 0 per element, or
// empty when no dropout). score_moments (B*H*3, or null): per (b, h) the count,
// sum and sum of squares of the eligible scaled scores. out.data null: the
// weights only, no context.
template <class T>
void dense_forward(const Dims& dims, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v,
                   const AttentionMask& mask, T scale, T* weights, T* dropped, const std::vector<T>& keep,
                   HeadView<T> out, double* score_moments);

// Dense backward: dq, dk, dv must be zero-filled; they are accumulated into.
// softcap: the variant's cap (0: none), whose derivative needs the raw scores
// (recomputed here).
template <class T>
void dense_backward(const Dims& dims, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v, T scale,
                    double softcap, const T* weights, const T* dropped, const std::vector<T>& keep, HeadView<const T> grad_out,
                    HeadView<T> dq, HeadView<T> dk, HeadView<T> dv);

// Blockwise forward: out as dense; lse (B, H, Tq) receives L (-inf for a row with no eligible key).
template <class T>
void blockwise_forward(const Dims& dims, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v,
                       const AttentionMask& mask, T scale, HeadView<T> out, T* lse);

// Blockwise backward from the forward's out and lse; dq, dk, dv zero-filled.
template <class T>
void blockwise_backward(const Dims& dims, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v,
                        const AttentionMask& mask, T scale, HeadView<const T> out, const T* lse,
                        HeadView<const T> grad_out, HeadView<T> dq, HeadView<T> dk, HeadView<T> dv);

}  // namespace attnlab::attention_kernels
