// The attention scores written out of ops (autograd/attention.h,
// attention_scores), and the layout helpers attention composed of separate ops
// shares with it. On the device: one kernel (autograd/device/attention.h) where
// no gradient is taken, else the same composition as on the CPU.
#include <cmath>

#include "autograd/attention.h"
#include "autograd/device/attention.h"
#include "autograd/device_ops.h"
#include "autograd/ops.h"

namespace attnlab {

// (B, T, n d) -> (B, H, T, d), each of the n heads repeated for H / n query heads (grouped K/V)
Tensor heads_first(const Tensor& t, size_t n, size_t d, size_t H) {
    const size_t B = t.size(0), T = t.size(1);
    Tensor split = permute(reshape(t, {B, T, n, d}), {0, 2, 1, 3});  // (B, n, T, d)
    if (n == H) return split;
    const Tensor one = reshape(split, {B, n, 1, T, d});
    return reshape(concat(std::vector<Tensor>(H / n, one), 2), {B, H, T, d});
}

// true where key j is ineligible for query i of item b, (B, 1, Tq, Tk), except in
// rows with no eligible key, which `empty_rows` (B, 1, Tq, 1) marks instead.
Mask ineligible_keys(const AttentionMask& mask, size_t B, size_t Tq, size_t Tk, Mask& empty_rows) {
    check_token_spans("attention", mask, B, Tk);
    Mask out({B, 1, Tq, Tk}, std::vector<uint8_t>(B * Tq * Tk, 0));
    empty_rows = Mask({B, 1, Tq, 1}, std::vector<uint8_t>(B * Tq, 0));
    for (size_t b = 0; b < B; ++b)
        for (size_t i = 0; i < Tq; ++i) {
            uint8_t* row = out.values.data() + (b * Tq + i) * Tk;
            bool any = false;
            for (size_t j = 0; j < Tk; ++j) {
                row[j] = !mask.allows(b, i, j, Tq, Tk);
                any = any || !row[j];
            }
            if (!any) {
                std::fill(row, row + Tk, uint8_t(0));
                empty_rows.values[b * Tq + i] = 1;
            }
        }
    return out;
}

Tensor attention_scores(const Tensor& q, const Tensor& k, size_t heads, size_t kv_heads, const AttentionMask& mask,
                        double scale) {
    constexpr const char* op = "attention_scores";
    if (q.dim() != 3 || k.dim() != 3 || q.size(0) != k.size(0) || heads == 0 || kv_heads == 0 ||
        q.size(2) % heads != 0 || k.size(2) != q.size(2) / heads * kv_heads)
        fail(op, "q " + shape_str(q.shape()) + " and k " + shape_str(k.shape()) + " are not (B, Tq, " +
                     std::to_string(heads) + " d) and (B, Tk, " + std::to_string(kv_heads) + " d)");
    const size_t B = q.size(0), Tq = q.size(1), Tk = k.size(1), d = q.size(2) / heads;
    check_same_device(op, {&q, &k});
    // On the device without a gradient to take, one kernel; otherwise the
    // composition below, on either device.
    if (on_device(q) && !mask.variant.modifies_scores() && !(grad_enabled() && (q.requires_grad() || k.requires_grad()))) {
        const AttentionDims dims{B, heads, kv_heads, Tq, Tk, d, d};
        check_attention_mask(op, dims, mask);
        const device::DeviceMask on_device(device_context(), mask, dims);
        const Tensor q_h = device_tensor({B, heads, Tq, d}), k_h = device_tensor({B, kv_heads, Tk, d});
        device::split_heads(device_context(), B, heads, Tq, d, device_in(q), device_out(q_h));
        device::split_heads(device_context(), B, kv_heads, Tk, d, device_in(k), device_out(k_h));
        Tensor scores = device_tensor({B, heads, Tq, Tk});
        device::attention_scores(device_context(), dims, device_in(q_h), device_in(k_h), on_device.view(), float(scale),
                               device_out(scores));
        return scores;
    }
    const Tensor q_h = heads_first(q, heads, d, heads), k_h = heads_first(k, kv_heads, d, heads);
    Mask empty_rows;
    const Mask ineligible = ineligible_keys(mask, B, Tq, Tk, empty_rows);
    const Tensor scores = masked_fill(modify_scores(matmul(q_h, transpose(k_h, 2, 3)) * scale, mask.variant), ineligible, -INFINITY);
    if (!mask.variant.alibi) return scores;
    // (B, H, Tq, Tk): ALiBi's bias, except in a row with no eligible key, which keeps its raw scores
    std::vector<double> bias(B * heads * Tq * Tk, 0.0);
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < heads; ++h)
            for (size_t i = 0; i < Tq; ++i) {
                if (empty_rows.values[b * Tq + i]) continue;
                for (size_t j = 0; j < Tk; ++j) bias[((b * heads + h) * Tq + i) * Tk + j] = alibi_bias(h, heads, i, j, Tq, Tk);
            }
    return scores + Tensor::from_values(bias, {B, heads, Tq, Tk}, q.dtype()).to(q.device());
}

}  // namespace attnlab
