#include "autograd/composed.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/ops.h"

namespace attnlab::composed {

namespace {
// A constant of `values` in `shape`, with like's dtype, on like's device.
Tensor constant(const std::vector<double>& values, const Shape& shape, const Tensor& like) {
    return Tensor::from_values(values, shape, like.dtype()).to(like.device());
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    const Tensor y = matmul(x, transpose(weight, 0, 1));  // (..., in) @ (in, out)
    return bias.defined() ? y + bias : y;
}

Tensor softmax(const Tensor& x, int axis) {
    const Tensor shifted = x - max(x, {axis}, true).detach();  // the shift changes no value and carries no gradient
    const Tensor e = exp(shifted);
    return e / sum(e, {axis}, true);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
    const Tensor centred = x - mean(x, {-1}, true);                                // (..., D)
    const Tensor inv_sigma = pow(mean(centred * centred, {-1}, true) + eps, -0.5);  // (..., 1)
    Tensor y = centred * inv_sigma;
    if (weight.defined()) y = y * weight;
    return bias.defined() ? y + bias : y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
    const Tensor y = x * pow(mean(x * x, {-1}, true) + eps, -0.5);  // (..., D) * (..., 1)
    return weight.defined() ? y * weight : y;
}

Tensor rotary(const Tensor& x, size_t heads, size_t offset, double base) {
    const size_t B = x.size(0), T = x.size(1), d = x.size(2) / heads, half = d / 2;
    std::vector<double> cos_values(T * half), sin_values(T * half);
    for (size_t t = 0; t < T; ++t)
        for (size_t c = 0; c < half; ++c) {
            const double angle = static_cast<double>(offset + t) * std::pow(base, -2.0 * static_cast<double>(c) / static_cast<double>(d));
            cos_values[t * half + c] = std::cos(angle);
            sin_values[t * half + c] = std::sin(angle);
        }
    const Tensor cos = constant(cos_values, {T, 1, half}, x);  // broadcasts over (B, T, H, d/2)
    const Tensor sin = constant(sin_values, {T, 1, half}, x);
    const Tensor per_head = reshape(x, {B, T, heads, d});
    const Tensor lo = slice(per_head, 3, 0, half), hi = slice(per_head, 3, half, d);
    const Tensor turned = concat({lo * cos - hi * sin, hi * cos + lo * sin}, 3);  // (B, T, H, d)
    return reshape(turned, {B, T, heads * d});
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, size_t heads, size_t kv_heads, const AttentionMask& mask,
                 double scale, MaskedRows masked_rows, const Tensor& sink, const Tensor& rel_bias) {
    const size_t B = q.size(0), Tq = q.size(1), Tk = k.size(1), d_v = v.size(2) / kv_heads;
    check_masked_rows(mask, masked_rows, B, Tq, Tk);
    Mask empty_rows;
    ineligible_keys(mask, B, Tq, Tk, empty_rows);
    const Tensor scores = with_relative_bias(attention_scores(q, k, heads, kv_heads, mask, scale), rel_bias, mask.variant,
                                             mask.causal);  // (B, H, Tq, Tk)
    Tensor pattern = without_sink(composed::softmax(with_sink(scores, sink), -1), sink);
    pattern = masked_fill(pattern, empty_rows, 0.0);                                     // policy "zero"
    const Tensor z = matmul(pattern, heads_first(v, kv_heads, d_v, heads));              // (B, H, Tq, d_v)
    return reshape(permute(z, {0, 2, 1, 3}), {B, Tq, heads * d_v});
}

Tensor cross_entropy(const Tensor& logits, const Indices& targets, const Mask& loss_mask) {
    const size_t C = logits.shape().back(), N = targets.values.size();
    std::vector<double> one_hot(N * C, 0.0), counted(N, 1.0);
    for (size_t i = 0; i < N; ++i) one_hot[i * C + static_cast<size_t>(targets.values[i])] = 1.0;
    if (!loss_mask.values.empty())
        for (size_t i = 0; i < N; ++i) counted[i] = loss_mask.values[i] ? 1.0 : 0.0;
    const double count = std::max(1.0, static_cast<double>(std::count(counted.begin(), counted.end(), 1.0)));
    const Tensor picked = sum(log_softmax(logits, -1) * constant(one_hot, logits.shape(), logits), {-1});  // (...)
    return -sum(picked * constant(counted, picked.shape(), logits)) / count;
}

}  // namespace attnlab::composed
