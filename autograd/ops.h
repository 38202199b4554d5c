// Every differentiable op of attnlab. Each is one function (in the .cpp named
// beside its group) that computes its forward value and attaches its backward
// closure in the same place, plus one gradient-check case in that file.
//
// Conventions: batch-first shapes; negative axes count from the end; binary
// elementwise ops broadcast as NumPy does; errors start with "[op]".
#pragma once

#include <vector>

#include "autograd/pointwise.h"
#include "autograd/tensor.h"

namespace attnlab {

class Rng;

// ---- elementwise (ops_elementwise.cpp) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact form: x * Phi(x), as torch's default

// ---- pointwise functions (ops_pointwise.cpp; their formulas in pointwise.h) ----
// apply<F>(x, param) = F(x; param), F a function of pointwise.h: one pass each way on either
// device, its derivative taken from its one definition (dual numbers).
Tensor pointwise_op(const char* op, size_t function, const Tensor& x, double param);
template <class F>
Tensor apply(const Tensor& x, double param = 0.0) {
    return pointwise_op(F::name, pointwise::index_of<F>, x, param);
}
// GPT-2's "gelu_new", torch's gelu(approximate="tanh"): pointwise::GeluTanh
Tensor gelu_tanh(const Tensor& x);
// cap tanh(x / cap), cap > 0 (refused otherwise): pointwise::SoftCap
Tensor softcap(const Tensor& x, double cap);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
// With a scalar: the scalar becomes a 0-d tensor of x's dtype and broadcasts.
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);

// ---- reductions (ops_reduce.cpp); empty axes = all axes ----
Tensor sum(const Tensor& x, std::vector<int> axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int> axes = {}, bool keepdim = false);
// The gradient goes to the first maximal element along the reduced axes.
Tensor max(const Tensor& x, std::vector<int> axes = {}, bool keepdim = false);

// ---- shape (ops_shape.cpp); results are contiguous copies ----
Tensor reshape(const Tensor& x, const Shape& shape);  // same element count
Tensor permute(const Tensor& x, const std::vector<int>& order);
Tensor transpose(const Tensor& x, int axis_a, int axis_b);  // a permute swapping two axes
Tensor slice(const Tensor& x, int axis, size_t start, size_t stop);  // [start, stop)
Tensor concat(const std::vector<Tensor>& parts, int axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<size_t>& sizes, int axis);  // slices

// ---- linear algebra (ops_matmul.cpp) ----
// (M,K)@(K,N); (...,M,K)@(K,N) as one GEMM; (...,M,K)@(...,K,N) with equal batch axes.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in), weight (out, in), bias (out) or undefined -> (..., out): x W^T + b, one GEMM.
// Stacked members (train.seeds): weight (K, out, in) and bias (K, out) are K models'
// parameters, and x's rows (its leading axes flattened) are K equal blocks, block m
// through weight m: linear_members with equal blocks.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// The same with member m's rows the m-th block of member_rows[m] rows (blocks may be
// empty): each block computes exactly what linear(x_m, weight[m], bias[m]) would alone,
// the same GEMMs at the same sizes. On the device, equal blocks are one batched GEMM
// each way for every member (unequal ones a GEMM each).
Tensor linear_members(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::vector<size_t>& member_rows);
// The projections of one input, y_i = x W_i^T + b_i (biases[i] may be undefined):
// linear for each. On the device, weights of one shape that lie side by side
// (Module::to keeps a module's parameters in order), with their biases likewise,
// are one batched GEMM each way: attention's q, k and v in one launch.
std::vector<Tensor> linears(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases);

// ---- neural-network ops (ops_nn.cpp) ----
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);
// Where mask is true, the result is `value`; elsewhere x. Mask broadcasts to x.
Tensor masked_fill(const Tensor& x, const Mask& mask, double value);
// weight (V,D), ids (...) -> (..., D). Backward scatter-adds into the rows used.
// Stacked members (K, V, D): ids' leading axis in K equal blocks, block m reading table m
// (on the device: the (K V, D) table, each id offset by its member's m V).
Tensor embedding(const Tensor& weight, const Indices& ids);
// Over the last axis; weight and bias (D) may be undefined. Both norms take stacked
// members' (K, D) too: the rows (leading axes flattened) in K equal blocks, block m
// scaled by row m.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// x / sqrt(mean(x^2) + eps) * weight over the last axis; weight (D) may be undefined.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5);
// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when !training.
Tensor dropout(const Tensor& x, double p, bool training, Rng& rng);
// ---- positions inside attention (ops_position.cpp) ----
// Rotary embeddings on x (B, T, H d) (heads side by side, d even), positions
// offset .. offset + T - 1, frequencies base^(-2c/d); split halves: the pairs are
// (c, c + d/2) of each head. Differentiable on both devices.
Tensor rotary(const Tensor& x, size_t heads, size_t offset, double base);

// logits (..., C), targets (...). Mean over positions whose loss_mask is true
// (all positions when loss_mask is empty); 0 with zero gradient when none count.
Tensor cross_entropy(const Tensor& logits, const Indices& targets, const Mask& loss_mask = Mask());
// Stacked members (train.seeds): logits (N, C), targets (N), member m's positions
// the next rows[m] rows (they add up to N). Out (K): each member's mean over its
// rows, computed as cross_entropy of those rows alone computes it (its bits and
// its gradient's); 0 with zero gradient for a member with no rows.
Tensor cross_entropy_members(const Tensor& logits, const Indices& targets, const std::vector<size_t>& rows);

}  // namespace attnlab
