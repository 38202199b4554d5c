// The fused ops' maths written in the engine's elementary ops (broadcasting
// arithmetic, reductions, pow, exp, matmul, slices): compose by default, fuse
// by exception. Each function is the reference its fused op in ops.h is
// checked against, values and gradients, in float64
// (tests/autograd/test_composed.cpp), and the fused op stays the fast path.
// They read like the formulas; shapes are those of the fused ops.
#pragma once

#include <cstddef>

#include "autograd/attention.h"
#include "autograd/tensor.h"

namespace attnlab::composed {

// x (..., in), weight (out, in), bias (out) or undefined -> x W^T + b (..., out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// exp(x - max x) / sum exp(x - max x) over `axis`
Tensor softmax(const Tensor& x, int axis = -1);

// (x - mean) / sqrt(mean((x - mean)^2) + eps) * weight + bias over the last axis;
// weight and bias (D) may be undefined
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// x / sqrt(mean(x^2) + eps) * weight over the last axis; weight (D) may be undefined
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5);

// x (B, T, H d): each head's pairs (c, c + d/2) turned by (offset + t) base^(-2c/d),
//   y_lo = x_lo cos - x_hi sin,   y_hi = x_hi cos + x_lo sin
Tensor rotary(const Tensor& x, size_t heads, size_t offset, double base);

// logits (..., C), targets (...): -log softmax(logits)[target], averaged over the
// positions loss_mask selects (all when it is empty); 0 when none does
Tensor cross_entropy(const Tensor& logits, const Indices& targets, const Mask& loss_mask = Mask());

// Attention on the packed layout, q (B, Tq, H d), k (B, Tk, H_kv d), v (B, Tk,
// H_kv d_v) -> context (B, Tq, H d_v):
//   A = softmax(scale Q K^T + bias, ineligible keys -inf)   (attention_scores)
//   C = A V per head, a row with no eligible key 0 under masked_rows = "zero"
// (no dropout: the fused op's maths in evaluation). With `sink` (H), the
// attention sinks' logits join each row's softmax (autograd/variant.h, with_sink);
// with `rel_bias` (buckets, H), T5's relative bias joins the scores (with_relative_bias).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, size_t heads, size_t kv_heads, const AttentionMask& mask,
                 double scale, MaskedRows masked_rows, const Tensor& sink = Tensor(), const Tensor& rel_bias = Tensor());

}  // namespace attnlab::composed
