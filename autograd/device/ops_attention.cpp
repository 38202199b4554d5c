// The device branch of attention_packed (autograd/attention.h has the contract;
// the op validates shapes and the mask first).
//
// Kernel: flash (no Tq x Tk buffer), which reads q, k, v and writes the context
// in the packed layout itself; unless the weights are asked for, dropout on them
// is on (training), or the head width is over the flash tiles: then dense, which
// takes heads first, so q, k and v are laid out (B, H, T, d) on the way in and
// the context back to (B, T, H d) on the way out, the reverse in the backward.
#include <cmath>

#include "autograd/device/attention.h"
#include "autograd/device_ops.h"
#include "autograd/rng.h"

namespace attnlab {

namespace {

// The mask on the device, uploaded once per AttentionMask and sizes: every
// layer of a forward shares its stack's mask.
struct MaskOnDevice {
    size_t B = 0, Tq = 0, Tk = 0;
    device::DeviceMask mask;
};

std::shared_ptr<MaskOnDevice> mask_on_device(const AttentionMask& mask, const AttentionDims& dims) {
    auto cached = std::static_pointer_cast<MaskOnDevice>(mask.device_copy.data);
    if (cached && cached->B == dims.B && cached->Tq == dims.Tq && cached->Tk == dims.Tk) return cached;
    cached = std::make_shared<MaskOnDevice>(MaskOnDevice{dims.B, dims.Tq, dims.Tk, device::DeviceMask(device_context(), mask, dims)});
    mask.device_copy.data = cached;
    return cached;
}

// Per query head, the std of the scaled scores over eligible pairs (the weights' companion).
std::vector<double> score_std_on_device(const AttentionDims& dims, const Tensor& q, const Tensor& k,
                                        const device::MaskView& mask, float scale) {
    device::Context& context = device_context();
    const device::DeviceBuffer moments = context.allocate(dims.H * 3 * sizeof(double));
    device::fill_zero(context, moments.data(), moments.bytes());
    device::score_moments(context, dims, device_in(q), device_in(k), mask, scale, static_cast<double*>(moments.data()));
    std::vector<double> m(dims.H * 3), out(dims.H);
    device::copy_to_host(context, moments.data(), m.data(), moments.bytes());
    for (size_t h = 0; h < dims.H; ++h) out[h] = std_from_moments(m[h * 3], m[h * 3 + 1], m[h * 3 + 2]);
    return out;
}

}  // namespace

namespace {

// The flash kernel on the packed layout itself: no split or merge copies.
Tensor flash_packed(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& dims,
                    const std::shared_ptr<MaskOnDevice>& on_device, float scale) {
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    const Tensor lse = device_tensor({B, H, Tq});
    Tensor out = device_tensor({B, Tq, H * d_v});
    device::flash_attention_forward(device_context(), dims, device_in(q), device_in(k), device_in(v), on_device->mask.view(),
                                  scale, device_out(out), device_out(lse), device::AttentionLayout::packed);
    return record_device("attention_packed", out, {q, k, v}, [q, k, v, lse, dims, on_device, scale](const Tensor& g, const float* context) {
        const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
        const GradTarget gq = grad_target(q), gk = grad_target(k), gv = grad_target(v);
        // the kernels overwrite: a gradient that must be added to goes to scratch first
        const auto into = [](const Tensor& t, const GradTarget& target, Tensor& scratch) {
            if (target && !target.accumulate) return target.data;
            scratch = device_tensor(t.shape());
            return device_out(scratch);
        };
        Tensor sq, sk, sv;
        float* dq = into(q, gq, sq);
        float* dk = into(k, gk, sk);
        float* dv = into(v, gv, sv);
        const Tensor row_dot = device_tensor({B, H, Tq});
        device::flash_attention_backward(device_context(), dims, device_in(q), device_in(k), device_in(v), context,
                                       device_in(lse), device_in(g), on_device->mask.view(), scale, dq, dk, dv,
                                       device_out(row_dot), device::AttentionLayout::packed);
        for (const auto& [scratch, target] : {std::pair{&sq, gq}, std::pair{&sk, gk}, std::pair{&sv, gv}})
            if (target && target.accumulate)
                device::add_into(device_context(), scratch->numel(), device_in(*scratch), target.data);
    });
}

}  // namespace

AttentionResult attention_packed_device(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& dims,
                                        const AttentionMask& mask, const AttentionOptions& options) {
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    const bool use_dropout = options.training && options.dropout > 0.0;
    const bool dense = options.need_weights || use_dropout || device::kernel_for_head_width(std::max(d, d_v)) == device::AttentionKernel::dense;
    device::check_attention(dims, mask, options, dense ? device::AttentionKernel::dense : device::AttentionKernel::flash);
    const std::shared_ptr<MaskOnDevice> on_device = mask_on_device(mask, dims);
    device::Context& context = device_context();
    const float scale = float(options.scale);
    if (!dense) {
        AttentionResult result;
        result.context = flash_packed(q, k, v, dims, on_device, scale);
        return result;
    }

    // the dense kernel takes heads first: (B, T, n w) -> (B, n, T, w)
    const Tensor qh = device_tensor({B, H, Tq, d}), kh = device_tensor({B, H_kv, Tk, d}), vh = device_tensor({B, H_kv, Tk, d_v});
    device::split_heads(context, B, H, Tq, d, device_in(q), device_out(qh));
    device::split_heads(context, B, H_kv, Tk, d, device_in(k), device_out(kh));
    device::split_heads(context, B, H_kv, Tk, d_v, device_in(v), device_out(vh));
    const Tensor context_h = device_tensor({B, H, Tq, d_v}), weights = device_tensor({B, H, Tq, Tk});
    Tensor dropped;
    device::WeightDropout drop;
    if (use_dropout) {
        if (options.rng == nullptr) fail("attention", "dropout in training needs an Rng");
        dropped = device_tensor({B, H, Tq, Tk});
        drop = {float(options.dropout), options.rng->next_u64(), device_out(dropped)};
    }
    device::dense_attention_forward(context, dims, device_in(qh), device_in(kh), device_in(vh), on_device->mask.view(), scale,
                                  device_out(context_h), device_out(weights), drop);
    Tensor out = device_tensor({B, Tq, H * d_v});
    device::merge_heads(context, B, H, Tq, d_v, device_in(context_h), device_out(out));

    AttentionResult result;
    if (options.need_weights) {
        result.weights = weights.clone();
        if (options.need_score_std) result.score_std = score_std_on_device(dims, qh, kh, on_device->mask.view(), scale);
    }
    result.context = record_device("attention_packed", out, {q, k, v},
        [q, k, v, qh, kh, vh, weights, dropped, drop, dims, on_device, scale](const Tensor& g, const float*) {
            // plain names, not a structured binding: the lambdas below capture them (clang 14)
            const size_t B = dims.B, H = dims.H, H_kv = dims.H_kv, Tq = dims.Tq, Tk = dims.Tk, d = dims.d, d_v = dims.d_v;
            device::Context& context = device_context();
            const Tensor dcontext = device_tensor({B, H, Tq, d_v});
            device::split_heads(context, B, H, Tq, d_v, device_in(g), device_out(dcontext));
            const Tensor dq = device_tensor(qh.shape()), dk = device_tensor(kh.shape()), dv = device_tensor(vh.shape());
            const Tensor scratch = device_tensor({B, H, Tq, Tk});
            device::dense_attention_backward(context, dims, device_in(qh), device_in(kh), device_in(vh), device_in(weights),
                                           device_in(dcontext), scale, device_out(dq), device_out(dk), device_out(dv),
                                           device_out(scratch), drop, on_device->mask.view());
            // (B, n, T, w) -> (B, T, n w)
            write_device_grad(q, [&](float* to) { device::merge_heads(context, B, H, Tq, d, device_in(dq), to); });
            write_device_grad(k, [&](float* to) { device::merge_heads(context, B, H_kv, Tk, d, device_in(dk), to); });
            write_device_grad(v, [&](float* to) { device::merge_heads(context, B, H_kv, Tk, d_v, device_in(dv), to); });
        });
    return result;
}

}  // namespace attnlab
