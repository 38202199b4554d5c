// The device branches of embedding, layer_norm, rms_norm, dropout and
// cross_entropy (autograd/ops.h has each op's contract; the op validates its
// inputs first). Forward beside backward.
#include <memory>

#include "autograd/composed.h"
#include "autograd/device_ops.h"
#include "autograd/rng.h"

namespace attnlab {

namespace {

std::shared_ptr<device::DeviceBuffer> upload_shared(const void* values, size_t bytes) {
    return std::make_shared<device::DeviceBuffer>(upload(values, bytes));
}

}  // namespace

// out (..., D) = weight[ids]; the backward scatter-adds into the rows used. Stacked
// members' (K, V, D) weight is read as the (K V, D) table, ids offset already.
Tensor embedding_device(const Tensor& weight, const Indices& ids, const Shape& out_shape) {
    const size_t n = ids.values.size(), D = weight.shape().back();
    const auto tokens = upload_shared(ids.values.data(), n * sizeof(int32_t));
    Tensor out = device_tensor(out_shape);
    device::embedding_forward(device_context(), 1, n, D, static_cast<const int32_t*>(tokens->data()), device_in(weight),
                            nullptr, device_out(out));
    return record_device("embedding", out, {weight}, [weight, tokens, n, D](const Tensor& g, const float*) {
        float* gw = grad_to_add(weight);
        if (gw != nullptr)
            device::embedding_backward(device_context(), 1, n, D, static_cast<const int32_t*>(tokens->data()),
                                     device_in(g), gw, nullptr);
    });
}

// Over the last axis: (x - mean) rstd weight + bias; the kernel keeps mean and rstd per row.
// Stacked members: `members` equal blocks of rows, block m through row m of weight and bias.
Tensor layer_norm_device(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, size_t members) {
    if (members > 1 && weight.defined() && !bias.defined()) {  // the kernel takes a bias: zeros, wanting no gradient
        const Tensor zeros = device_tensor(weight.shape());
        device::fill_zero(device_context(), device_out(zeros), zeros.numel() * sizeof(float));
        return layer_norm_device(x, weight, zeros, eps, members);
    }
    if (!weight.defined() || !bias.defined()) return composed::layer_norm(x, weight, bias, eps);  // the kernel takes both
    const size_t D = x.shape().back(), rows = x.numel() / std::max<size_t>(D, 1);
    Tensor out = device_tensor(x.shape()), mean = device_tensor({rows}), rstd = device_tensor({rows});
    device::layer_norm_forward(device_context(), rows, D, device_in(x), device_in(weight), device_in(bias), float(eps),
                             device_out(out), device_out(mean), device_out(rstd), members);
    return record_device("layer_norm", out, {x, weight, bias}, [x, weight, bias, mean, rstd, rows, D, members](const Tensor& g, const float*) {
        Tensor unwanted_w, unwanted_b, unwanted_x;
        float* gw = grad_to_add_or_scratch(weight, unwanted_w);
        float* gb = grad_to_add_or_scratch(bias, unwanted_b);
        const GradTarget gx = grad_or_scratch(x, unwanted_x);
        const Tensor scratch = device_tensor(x.shape());
        device::layer_norm_backward(device_context(), rows, D, device_in(x), device_in(weight), device_in(mean),
                                  device_in(rstd), device_in(g), gx.data, gx.accumulate, gw, gb, device_out(scratch), members);
    });
}

// Over the last axis: x rstd weight, rstd = 1 / sqrt(mean(x^2) + eps) kept per row.
// Stacked members: `members` equal blocks of rows, block m scaled by row m of the weight.
Tensor rms_norm_device(const Tensor& x, const Tensor& weight, double eps, size_t members) {
    if (!weight.defined()) return composed::rms_norm(x, weight, eps);  // the kernel takes a weight (stacked: always)
    const size_t D = x.shape().back(), rows = x.numel() / std::max<size_t>(D, 1);
    Tensor out = device_tensor(x.shape()), rstd = device_tensor({rows});
    device::rms_norm_forward(device_context(), rows, D, device_in(x), device_in(weight), float(eps), device_out(out),
                           device_out(rstd), members);
    return record_device("rms_norm", out, {x, weight}, [x, weight, rstd, rows, D, members](const Tensor& g, const float*) {
        Tensor unwanted_w, unwanted_x;
        float* gw = grad_to_add_or_scratch(weight, unwanted_w);
        const GradTarget gx = grad_or_scratch(x, unwanted_x);
        const Tensor scratch = device_tensor(x.shape());
        device::rms_norm_backward(device_context(), rows, D, device_in(x), device_in(weight), device_in(rstd), device_in(g),
                                gx.data, gx.accumulate, gw, device_out(scratch), members);
    });
}

// Element e is dropped when a counter-based hash of (seed, e) falls below p
// (autograd/device/kernels.h): one draw of the Rng per call gives the seed, and
// the backward recomputes the same mask from it. The masks are not the CPU
// op's, as torch's CUDA masks are not its CPU ones.
Tensor dropout_device(const Tensor& x, double p, Rng& rng) {
    const uint64_t seed = rng.next_u64();
    Tensor out = device_tensor(x.shape());
    device::dropout_forward(device_context(), x.numel(), device_in(x), float(p), seed, device_out(out));
    return record_device("dropout", out, {x}, [x, p, seed](const Tensor& g, const float*) {
        write_device_grad(x, [&](float* dx) { device::dropout_backward(device_context(), x.numel(), device_in(g), float(p), seed, dx); });
    });
}

// Rotary positions: the rotation forward, its transpose (the angle negated) backward.
Tensor rotary_device(const Tensor& x, size_t heads, size_t offset, double base) {
    const size_t B = x.size(0), T = x.size(1), d = x.size(2) / heads;
    Tensor out = device_tensor(x.shape());
    device::rotary(device_context(), B, T, heads, d, offset, base, 1.0, device_in(x), device_out(out));
    return record_device("rotary", out, {x}, [x, B, T, heads, d, offset, base](const Tensor& g, const float*) {
        write_device_grad(x, [&](float* dx) { device::rotary(device_context(), B, T, heads, d, offset, base, -1.0, device_in(g), dx); });
    });
}

// Mean over the counted positions of logsumexp(z) - z_target. One kernel gives
// every row's weighted loss and the gradient of the mean (kept for the backward,
// which scales it by the incoming gradient); the loss is their column sum.
Tensor cross_entropy_device(const Tensor& logits, const Indices& targets, const Mask& loss_mask, size_t counted) {
    const size_t C = logits.shape().back(), M = targets.values.size();
    const bool masked = !loss_mask.values.empty();
    std::vector<int32_t> ids(M, 0);  // positions left out read class 0 with weight 0
    std::vector<float> weight(M, 0.0f);
    for (size_t k = 0; k < M; ++k)
        if (!masked || loss_mask(k)) {
            ids[k] = targets.values[k];
            weight[k] = 1.0f / float(counted);
        }
    const device::DeviceBuffer ids_on_device = upload(ids.data(), M * sizeof(int32_t));
    const device::DeviceBuffer weight_on_device = upload(weight.data(), M * sizeof(float));
    const Tensor rows = device_tensor({M}), dlogits = device_tensor({M, C});
    Tensor loss = device_tensor({});
    device::Context& context = device_context();
    device::cross_entropy_forward_backward(context, M, C, device_in(logits), static_cast<const int32_t*>(ids_on_device.data()),
                                         weight_on_device.floats(), device_out(rows), device_out(dlogits));
    if (M == 0) device::fill_zero(context, device_out(loss), sizeof(float));
    else device::column_sums(context, M, 1, device_in(rows), device_out(loss), false);
    return record_device("cross_entropy", loss, {logits}, [logits, dlogits](const Tensor& g, const float*) {
        const GradTarget target = grad_target(logits);  // d logits = g (softmax - onehot) weight
        if (target)
            device::scale(device_context(), logits.numel(), device_in(dlogits), 1.0f, device_in(g), target.data, target.accumulate);
    });
}

// Every member's mean in one kernel: each row weighted by 1 over its member's
// count, as cross_entropy_device weights a member alone; a member's loss is the
// column sum of its rows, and its rows' gradient scaled by its incoming gradient.
Tensor cross_entropy_members_device(const Tensor& logits, const Indices& targets, const std::vector<size_t>& rows) {
    const size_t C = logits.shape().back(), M = targets.values.size(), K = rows.size();
    std::vector<float> weight(M);
    for (size_t m = 0, first = 0; m < K; first += rows[m], ++m)
        std::fill(weight.begin() + std::ptrdiff_t(first), weight.begin() + std::ptrdiff_t(first + rows[m]), 1.0f / float(rows[m]));
    const device::DeviceBuffer ids_on_device = upload(targets.values.data(), M * sizeof(int32_t));
    const device::DeviceBuffer weight_on_device = upload(weight.data(), M * sizeof(float));
    const Tensor row_losses = device_tensor({M}), dlogits = device_tensor({M, C});
    Tensor losses = device_tensor({K});
    device::Context& context = device_context();
    device::cross_entropy_forward_backward(context, M, C, device_in(logits), static_cast<const int32_t*>(ids_on_device.data()),
                                         weight_on_device.floats(), device_out(row_losses), device_out(dlogits));
    for (size_t m = 0, first = 0; m < K; first += rows[m], ++m) {
        if (rows[m] == 0) device::fill_zero(context, device_out(losses) + m, sizeof(float));
        else device::column_sums(context, rows[m], 1, device_in(row_losses) + first, device_out(losses) + m, false);
    }
    return record_device("cross_entropy_members", losses, {logits}, [logits, dlogits, rows, C](const Tensor& g, const float*) {
        const GradTarget target = grad_target(logits);  // d logits = g[m] (softmax - onehot) weight on member m's rows
        if (!target) return;
        for (size_t m = 0, first = 0; m < rows.size(); first += rows[m], ++m)
            if (rows[m])
                device::scale(device_context(), rows[m] * C, device_in(dlogits) + first * C, 1.0f, device_in(g) + m,
                              target.data + first * C, target.accumulate);
    });
}

}  // namespace attnlab
