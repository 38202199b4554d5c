#include "experiments/run/device_block.h"

namespace attnlab::device {

namespace {

using namespace cuda;

DeviceBuffer floats(Context& context, size_t count) { return context.allocate_floats(count); }

// ---- layer norm ----

// LN(x) (M, D), with its statistics.
DeviceBuffer norm_forward(Context& context, const DeviceLayerNorm& ln, size_t M, size_t D, const float* x,
                          DeviceBuffer& mean, DeviceBuffer& rstd) {
    DeviceBuffer y = floats(context, M * D);
    mean = floats(context, M);
    rstd = floats(context, M);
    layer_norm_forward(context, M, D, x, ln.weight.value, ln.bias.value, ln.eps, y.floats(), mean.floats(),
                       rstd.floats());
    return y;
}

// dx (+)= LN's input gradient for dy; LN's parameter gradients added.
void norm_backward(Context& context, const DeviceLayerNorm& ln, size_t M, size_t D, const float* x,
                   const DeviceBuffer& mean, const DeviceBuffer& rstd, const float* dy, float* dx, bool accumulate) {
    const DeviceBuffer scratch = floats(context, M * D);  // dy xhat, summed into dgamma
    layer_norm_backward(context, M, D, x, ln.weight.value, mean.floats(), rstd.floats(), dy, dx, accumulate,
                        ln.weight.grad, ln.bias.grad, scratch.floats());
}

// ---- the residual wrapper (Residual::before / after) ----

// Dropout on one sublayer's output: probability and seed.
struct SublayerDropout {
    float p = 0.0f;
    uint64_t seed = 0;
};

SublayerDropout sublayer_dropout(const BlockShape& b, uint64_t sublayer) { return {b.dropout, mix_seed(b.seed, sublayer)}; }

// x (M, D) moved into s -> x + drop(f(LN(x))), LN(x + drop(f(x))) or x + drop(f(x)). f(h) returns (M, D).
template <class F>
DeviceBuffer residual_forward(Context& context, Norm norm, const std::optional<DeviceLayerNorm>& ln, size_t M,
                              size_t D, const SublayerDropout& drop, DeviceBuffer x, SublayerSaved& s, F&& f) {
    s.x = std::move(x);
    if (norm == Norm::pre) s.normed = norm_forward(context, *ln, M, D, s.x.floats(), s.mean, s.rstd);
    DeviceBuffer y = f(norm == Norm::pre ? s.normed.floats() : s.x.floats());
    if (drop.p > 0) dropout_forward(context, M * D, y.floats(), drop.p, drop.seed, y.floats());
    add_into(context, M * D, s.x.floats(), y.floats());  // x + drop(f(.))
    if (norm != Norm::post) return y;
    DeviceBuffer out = norm_forward(context, *ln, M, D, y.floats(), s.mean, s.rstd);
    s.sum = std::move(y);
    return out;
}

// dout (M, D) -> dx (M, D). f_backward(h, dy) returns the gradient (M, D) at f's input h.
template <class FBackward>
DeviceBuffer residual_backward(Context& context, Norm norm, const std::optional<DeviceLayerNorm>& ln, size_t M,
                               size_t D, const SublayerDropout& drop, const SublayerSaved& s, DeviceBuffer dout,
                               FBackward&& f_backward) {
    DeviceBuffer dsum;  // gradient at x + drop(f(.))
    if (norm == Norm::post) {
        dsum = floats(context, M * D);
        norm_backward(context, *ln, M, D, s.sum.floats(), s.mean, s.rstd, dout.floats(), dsum.floats(), false);
    } else {
        dsum = std::move(dout);
    }
    DeviceBuffer dropped;  // gradient at f's output: through the same mask
    if (drop.p > 0) {
        dropped = floats(context, M * D);
        dropout_backward(context, M * D, dsum.floats(), drop.p, drop.seed, dropped.floats());
    }
    const DeviceBuffer dh =
        f_backward(norm == Norm::pre ? s.normed.floats() : s.x.floats(), drop.p > 0 ? dropped.floats() : dsum.floats());
    DeviceBuffer dx = std::move(dsum);  // the residual path, plus the sublayer's input gradient:
    if (norm == Norm::pre)
        norm_backward(context, *ln, M, D, s.x.floats(), s.mean, s.rstd, dh.floats(), dx.floats(), true);
    else
        add_into(context, M * D, dh.floats(), dx.floats());
    return dx;
}

// ---- attention ----

struct AttentionShape {
    size_t B, Tq, Tk, H, H_kv, d, D;
    AttentionKernel kernel;
    float scale;
    float dropout;  // on the weights; > 0 runs the dense kernel
    uint64_t seed;
    AttentionDims dims() const { return {B, H, H_kv, Tq, Tk, d, d}; }
};

// h (B Tq, D), m (B Tk, D) (self-attention: m = h) -> Attn(h, m) (B Tq, D)
DeviceBuffer attention_forward(Context& context, const AttentionShape& a, const DeviceAttention& p,
                               const MaskView& mask, const float* h, const float* m, AttentionSaved& s) {
    const size_t Mq = a.B * a.Tq, Mk = a.B * a.Tk, Hd = a.H * a.d;
    s.q = floats(context, a.B * a.H * a.Tq * a.d);
    s.k = floats(context, a.B * a.H_kv * a.Tk * a.d);
    s.v = floats(context, a.B * a.H_kv * a.Tk * a.d);
    s.packed_q = floats(context, Mq * p.q.out);
    linear_forward(context, Mq, p.q.out, a.D, h, p.q.weight.value, p.q.bias.value, s.packed_q.floats());
    if (!p.cross) {
        split_qkv(context, a.B, a.Tq, a.H, a.H_kv, a.d, s.packed_q.floats(), s.q.floats(), s.k.floats(), s.v.floats());
    } else {
        split_heads(context, a.B, a.H, a.Tq, a.d, s.packed_q.floats(), s.q.floats());  // (B, Tq, H d) -> heads
        s.packed_kv = floats(context, Mk * p.kv.out);
        linear_forward(context, Mk, p.kv.out, a.D, m, p.kv.weight.value, p.kv.bias.value, s.packed_kv.floats());
        split_qkv(context, a.B, a.Tk, 0, a.H_kv, a.d, s.packed_kv.floats(), nullptr, s.k.floats(), s.v.floats());
    }
    s.context = floats(context, a.B * a.H * a.Tq * a.d);  // (B, H, Tq, d)
    if (a.kernel == AttentionKernel::flash && a.dropout == 0) {
        s.lse = floats(context, a.B * a.H * a.Tq);
        flash_attention_forward(context, a.dims(), s.q.floats(), s.k.floats(), s.v.floats(), mask, a.scale,
                                s.context.floats(), s.lse.floats());
    } else {
        s.weights = floats(context, a.B * a.H * a.Tq * a.Tk);
        WeightDropout dropout;
        if (a.dropout > 0) {
            s.dropped = floats(context, a.B * a.H * a.Tq * a.Tk);
            dropout = {a.dropout, a.seed, s.dropped.floats()};
        }
        dense_attention_forward(context, a.dims(), s.q.floats(), s.k.floats(), s.v.floats(), mask, a.scale,
                                s.context.floats(), s.weights.floats(), dropout);
    }
    s.merged = floats(context, Mq * Hd);
    merge_heads(context, a.B, a.H, a.Tq, a.d, s.context.floats(), s.merged.floats());  // (B Tq, H d)
    DeviceBuffer y = floats(context, Mq * a.D);
    linear_forward(context, Mq, a.D, Hd, s.merged.floats(), p.out.weight.value, p.out.bias.value, y.floats());
    return y;
}

// dy (B Tq, D) -> dh (B Tq, D); cross-attention adds m's gradient into dm.
DeviceBuffer attention_backward(Context& context, const AttentionShape& a, const DeviceAttention& p,
                                const MaskView& mask, const float* h, const float* m, float* dm,
                                const AttentionSaved& s, const float* dy) {
    const size_t Mq = a.B * a.Tq, Mk = a.B * a.Tk, Hd = a.H * a.d;
    const DeviceBuffer dmerged = floats(context, Mq * Hd);
    linear_backward(context, Mq, a.D, Hd, s.merged.floats(), p.out.weight.value, dy, dmerged.floats(), false,
                    p.out.weight.grad, p.out.bias.grad);
    const DeviceBuffer dcontext = floats(context, a.B * a.H * a.Tq * a.d);
    split_heads(context, a.B, a.H, a.Tq, a.d, dmerged.floats(), dcontext.floats());  // (B, H, Tq, d)
    const DeviceBuffer dq = floats(context, a.B * a.H * a.Tq * a.d);
    const DeviceBuffer dk = floats(context, a.B * a.H_kv * a.Tk * a.d);
    const DeviceBuffer dv = floats(context, a.B * a.H_kv * a.Tk * a.d);
    if (a.kernel == AttentionKernel::flash && a.dropout == 0) {
        const DeviceBuffer row_dot = floats(context, a.B * a.H * a.Tq);
        flash_attention_backward(context, a.dims(), s.q.floats(), s.k.floats(), s.v.floats(), s.context.floats(),
                                 s.lse.floats(), dcontext.floats(), mask, a.scale, dq.floats(), dk.floats(),
                                 dv.floats(), row_dot.floats());
    } else {
        const DeviceBuffer scratch = floats(context, a.B * a.H * a.Tq * a.Tk);
        const WeightDropout dropout{a.dropout, a.seed, a.dropout > 0 ? s.dropped.floats() : nullptr};
        dense_attention_backward(context, a.dims(), s.q.floats(), s.k.floats(), s.v.floats(), s.weights.floats(),
                                 dcontext.floats(), a.scale, dq.floats(), dk.floats(), dv.floats(), scratch.floats(),
                                 dropout, mask);  // with the mask, padded K/V rows are never read
    }
    DeviceBuffer dh = floats(context, Mq * a.D);
    const DeviceBuffer dpacked_q = floats(context, Mq * p.q.out);
    if (!p.cross) {
        merge_qkv(context, a.B, a.Tq, a.H, a.H_kv, a.d, dq.floats(), dk.floats(), dv.floats(), dpacked_q.floats());
    } else {
        merge_heads(context, a.B, a.H, a.Tq, a.d, dq.floats(), dpacked_q.floats());
        const DeviceBuffer dpacked_kv = floats(context, Mk * p.kv.out);
        merge_qkv(context, a.B, a.Tk, 0, a.H_kv, a.d, nullptr, dk.floats(), dv.floats(), dpacked_kv.floats());
        linear_backward(context, Mk, p.kv.out, a.D, m, p.kv.weight.value, dpacked_kv.floats(), dm, true,
                        p.kv.weight.grad, p.kv.bias.grad);
    }
    linear_backward(context, Mq, p.q.out, a.D, h, p.q.weight.value, dpacked_q.floats(), dh.floats(), false,
                    p.q.weight.grad, p.q.bias.grad);
    return dh;
}

// ---- feed-forward ----

DeviceBuffer ffn_forward(Context& context, const BlockShape& b, const DeviceBlockParams& p, const float* h,
                         FeedForwardSaved& s) {
    const size_t M = b.B * b.T, F = p.fc1->out;
    s.hidden = floats(context, M * F);
    linear_forward(context, M, F, b.D, h, p.fc1->weight.value, p.fc1->bias.value, s.hidden.floats());
    s.activated = floats(context, M * F);
    activation_forward(context, b.activation, M * F, s.hidden.floats(), s.activated.floats());
    DeviceBuffer y = floats(context, M * b.D);
    linear_forward(context, M, b.D, F, s.activated.floats(), p.fc2->weight.value, p.fc2->bias.value, y.floats());
    return y;
}

DeviceBuffer ffn_backward(Context& context, const BlockShape& b, const DeviceBlockParams& p, const float* h,
                          const FeedForwardSaved& s, const float* dy) {
    const size_t M = b.B * b.T, F = p.fc1->out;
    const DeviceBuffer dhidden = floats(context, M * F);
    linear_backward(context, M, b.D, F, s.activated.floats(), p.fc2->weight.value, dy, dhidden.floats(), false,
                    p.fc2->weight.grad, p.fc2->bias.grad);
    activation_backward(context, b.activation, M * F, s.hidden.floats(), dhidden.floats(), dhidden.floats());
    DeviceBuffer dh = floats(context, M * b.D);
    linear_backward(context, M, F, b.D, h, p.fc1->weight.value, dhidden.floats(), dh.floats(), false,
                    p.fc1->weight.grad, p.fc1->bias.grad);
    return dh;
}

// Sublayer k's attention (0: self, 1: cross); its weight dropout seeds apart from the residual ones.
AttentionShape self_shape(const BlockShape& b) {
    return {b.B, b.T, b.T, b.H, b.H_kv, b.d, b.D, b.kernel, b.scale, b.attention_dropout, mix_seed(b.seed, 10)};
}
AttentionShape cross_shape(const BlockShape& b) {
    return {b.B, b.T, b.S, b.H, b.H_kv, b.d, b.D, b.kernel, b.scale, b.attention_dropout, mix_seed(b.seed, 11)};
}

}  // namespace

DeviceBuffer block_forward(Context& context, const BlockShape& b, const DeviceBlockParams& p, const BlockMasks& masks,
                           const Memory& memory, DeviceBuffer x, BlockSaved& saved) {
    const size_t M = b.B * b.T, D = b.D;
    x = residual_forward(context, b.norm, p.ln1, M, D, sublayer_dropout(b, 0), std::move(x), saved.res1, [&](const float* h) {
        return attention_forward(context, self_shape(b), p.attn, masks.self, h, h, saved.attn);
    });
    if (p.cross_attn)
        x = residual_forward(context, b.norm, p.ln_cross, M, D, sublayer_dropout(b, 1), std::move(x), saved.res_cross, [&](const float* h) {
            return attention_forward(context, cross_shape(b), *p.cross_attn, masks.cross, h, memory.values,
                                     saved.cross_attn);
        });
    if (p.fc1)
        x = residual_forward(context, b.norm, p.ln2, M, D, sublayer_dropout(b, 2), std::move(x), saved.res2,
                             [&](const float* h) { return ffn_forward(context, b, p, h, saved.ffn); });
    return x;
}

DeviceBuffer block_backward(Context& context, const BlockShape& b, const DeviceBlockParams& p, const BlockMasks& masks,
                            const Memory& memory, const BlockSaved& saved, DeviceBuffer dout) {
    const size_t M = b.B * b.T, D = b.D;
    if (p.fc1)
        dout = residual_backward(context, b.norm, p.ln2, M, D, sublayer_dropout(b, 2), saved.res2, std::move(dout),
                                 [&](const float* h, const float* dy) {
                                     return ffn_backward(context, b, p, h, saved.ffn, dy);
                                 });
    if (p.cross_attn)
        dout = residual_backward(context, b.norm, p.ln_cross, M, D, sublayer_dropout(b, 1), saved.res_cross, std::move(dout),
                                 [&](const float* h, const float* dy) {
                                     return attention_backward(context, cross_shape(b), *p.cross_attn, masks.cross, h,
                                                               memory.values, memory.grad, saved.cross_attn, dy);
                                 });
    return residual_backward(context, b.norm, p.ln1, M, D, sublayer_dropout(b, 0), saved.res1, std::move(dout),
                             [&](const float* h, const float* dy) {
                                 return attention_backward(context, self_shape(b), p.attn, masks.self, h, h, nullptr,
                                                           saved.attn, dy);
                             });
}

}  // namespace attnlab::device
