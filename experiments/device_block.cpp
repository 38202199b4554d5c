#include "experiments/device_block.h"

namespace attnlab::device {

namespace {

using namespace cuda;

DeviceBuffer floats(Context& context, size_t count) { return context.allocate_floats(count); }

AttentionDims attention_dims(const BlockShape& s) { return {s.B, s.H, s.H_kv, s.T, s.T, s.d, s.d}; }

// y = LN(x) (M, D), with its statistics.
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

}  // namespace

DeviceBuffer block_forward(Context& context, const BlockShape& s, const DeviceBlockParams& p, const MaskView& mask,
                           DeviceBuffer x_in, BlockSaved& saved) {
    const size_t M = s.rows(), D = s.D, W = s.qkv_width(), Hd = s.H * s.d;
    saved.x = std::move(x_in);
    const float* x = saved.x.floats();  // (M, D)

    // ---- attention sublayer ----
    if (s.norm == Norm::pre) saved.attn_in = norm_forward(context, *p.ln1, M, D, x, saved.ln1_mean, saved.ln1_rstd);
    const float* h = s.norm == Norm::pre ? saved.attn_in.floats() : x;  // (M, D)
    saved.qkv = floats(context, M * W);
    linear_forward(context, M, W, D, h, p.qkv.weight.value, p.qkv.bias.value, saved.qkv.floats());  // (M, W)
    saved.q = floats(context, s.B * s.H * s.T * s.d);
    saved.k = floats(context, s.B * s.H_kv * s.T * s.d);
    saved.v = floats(context, s.B * s.H_kv * s.T * s.d);
    split_qkv(context, s.B, s.T, s.H, s.H_kv, s.d, saved.qkv.floats(), saved.q.floats(), saved.k.floats(),
              saved.v.floats());
    saved.context = floats(context, s.B * s.H * s.T * s.d);  // (B, H, T, d)
    const AttentionDims dims = attention_dims(s);
    if (s.kernel == AttentionKernel::flash) {
        saved.lse = floats(context, s.B * s.H * s.T);
        flash_attention_forward(context, dims, saved.q.floats(), saved.k.floats(), saved.v.floats(), mask, s.scale,
                                saved.context.floats(), saved.lse.floats());
    } else {
        saved.weights = floats(context, s.B * s.H * s.T * s.T);
        dense_attention_forward(context, dims, saved.q.floats(), saved.k.floats(), saved.v.floats(), mask, s.scale,
                                saved.context.floats(), saved.weights.floats());
    }
    saved.merged = floats(context, M * Hd);
    merge_heads(context, s.B, s.H, s.T, s.d, saved.context.floats(), saved.merged.floats());  // (M, H d)
    DeviceBuffer sum = floats(context, M * D);
    linear_forward(context, M, D, Hd, saved.merged.floats(), p.out.weight.value, p.out.bias.value, sum.floats());
    add_into(context, M * D, x, sum.floats());  // x + Attn(h)
    if (s.norm == Norm::post) {
        saved.x1 = norm_forward(context, *p.ln1, M, D, sum.floats(), saved.ln1_mean, saved.ln1_rstd);
        saved.sum1 = std::move(sum);
    } else {
        saved.x1 = std::move(sum);
    }
    if (!p.fc1) return std::move(saved.x1);  // attention-only: x1 is the output (its backward never reads it)

    // ---- feed-forward sublayer ----
    const float* x1 = saved.x1.floats();
    if (s.norm == Norm::pre) saved.ffn_in = norm_forward(context, *p.ln2, M, D, x1, saved.ln2_mean, saved.ln2_rstd);
    const float* f_in = s.norm == Norm::pre ? saved.ffn_in.floats() : x1;
    const size_t F = p.fc1->out;
    saved.hidden = floats(context, M * F);
    linear_forward(context, M, F, D, f_in, p.fc1->weight.value, p.fc1->bias.value, saved.hidden.floats());
    saved.activated = floats(context, M * F);
    activation_forward(context, s.activation, M * F, saved.hidden.floats(), saved.activated.floats());
    DeviceBuffer sum2 = floats(context, M * D);
    linear_forward(context, M, D, F, saved.activated.floats(), p.fc2->weight.value, p.fc2->bias.value, sum2.floats());
    add_into(context, M * D, x1, sum2.floats());  // x1 + FFN(...)
    if (s.norm != Norm::post) return sum2;
    DeviceBuffer out = norm_forward(context, *p.ln2, M, D, sum2.floats(), saved.ln2_mean, saved.ln2_rstd);
    saved.sum2 = std::move(sum2);
    return out;
}

DeviceBuffer block_backward(Context& context, const BlockShape& s, const DeviceBlockParams& p, const MaskView& mask,
                            const BlockSaved& saved, DeviceBuffer dout) {
    const size_t M = s.rows(), D = s.D, W = s.qkv_width(), Hd = s.H * s.d;

    // ---- feed-forward sublayer: dout -> dx1 ----
    DeviceBuffer dx1;
    if (!p.fc1) {
        dx1 = std::move(dout);
    } else {
        DeviceBuffer dsum2;  // gradient at x1 + FFN(...)
        if (s.norm == Norm::post) {
            dsum2 = floats(context, M * D);
            norm_backward(context, *p.ln2, M, D, saved.sum2.floats(), saved.ln2_mean, saved.ln2_rstd, dout.floats(),
                          dsum2.floats(), false);
        } else {
            dsum2 = std::move(dout);
        }
        const size_t F = p.fc1->out;
        const DeviceBuffer dactivated = floats(context, M * F);
        linear_backward(context, M, D, F, saved.activated.floats(), p.fc2->weight.value, dsum2.floats(),
                        dactivated.floats(), false, p.fc2->weight.grad, p.fc2->bias.grad);
        activation_backward(context, s.activation, M * F, saved.hidden.floats(), dactivated.floats(),
                            dactivated.floats());  // now d hidden
        const float* f_in = s.norm == Norm::pre ? saved.ffn_in.floats() : saved.x1.floats();
        const DeviceBuffer df_in = floats(context, M * D);
        linear_backward(context, M, F, D, f_in, p.fc1->weight.value, dactivated.floats(), df_in.floats(), false,
                        p.fc1->weight.grad, p.fc1->bias.grad);
        dx1 = std::move(dsum2);  // the residual path, plus the sublayer's input gradient:
        if (s.norm == Norm::pre)
            norm_backward(context, *p.ln2, M, D, saved.x1.floats(), saved.ln2_mean, saved.ln2_rstd, df_in.floats(),
                          dx1.floats(), true);
        else
            add_into(context, M * D, df_in.floats(), dx1.floats());
    }

    // ---- attention sublayer: dx1 -> dx ----
    DeviceBuffer dsum;  // gradient at x + Attn(h)
    if (s.norm == Norm::post) {
        dsum = floats(context, M * D);
        norm_backward(context, *p.ln1, M, D, saved.sum1.floats(), saved.ln1_mean, saved.ln1_rstd, dx1.floats(),
                      dsum.floats(), false);
    } else {
        dsum = std::move(dx1);
    }
    const DeviceBuffer dmerged = floats(context, M * Hd);
    linear_backward(context, M, D, Hd, saved.merged.floats(), p.out.weight.value, dsum.floats(), dmerged.floats(),
                    false, p.out.weight.grad, p.out.bias.grad);
    const DeviceBuffer dcontext = floats(context, s.B * s.H * s.T * s.d);
    split_heads(context, s.B, s.H, s.T, s.d, dmerged.floats(), dcontext.floats());  // (B, H, T, d)
    const DeviceBuffer dq = floats(context, s.B * s.H * s.T * s.d);
    const DeviceBuffer dk = floats(context, s.B * s.H_kv * s.T * s.d);
    const DeviceBuffer dv = floats(context, s.B * s.H_kv * s.T * s.d);
    const AttentionDims dims = attention_dims(s);
    if (s.kernel == AttentionKernel::flash) {
        const DeviceBuffer row_dot = floats(context, s.B * s.H * s.T);
        flash_attention_backward(context, dims, saved.q.floats(), saved.k.floats(), saved.v.floats(),
                                 saved.context.floats(), saved.lse.floats(), dcontext.floats(), mask, s.scale,
                                 dq.floats(), dk.floats(), dv.floats(), row_dot.floats());
    } else {
        const DeviceBuffer scratch = floats(context, s.B * s.H * s.T * s.T);
        dense_attention_backward(context, dims, saved.q.floats(), saved.k.floats(), saved.v.floats(),
                                 saved.weights.floats(), dcontext.floats(), s.scale, dq.floats(), dk.floats(),
                                 dv.floats(), scratch.floats());
    }
    const DeviceBuffer dqkv = floats(context, M * W);
    merge_qkv(context, s.B, s.T, s.H, s.H_kv, s.d, dq.floats(), dk.floats(), dv.floats(), dqkv.floats());
    const float* h = s.norm == Norm::pre ? saved.attn_in.floats() : saved.x.floats();
    const DeviceBuffer dh = floats(context, M * D);
    linear_backward(context, M, W, D, h, p.qkv.weight.value, dqkv.floats(), dh.floats(), false, p.qkv.weight.grad,
                    p.qkv.bias.grad);
    DeviceBuffer dx = std::move(dsum);  // the residual path, plus the projections' input gradient:
    if (s.norm == Norm::pre)
        norm_backward(context, *p.ln1, M, D, saved.x.floats(), saved.ln1_mean, saved.ln1_rstd, dh.floats(),
                      dx.floats(), true);
    else
        add_into(context, M * D, dh.floats(), dx.floats());
    return dx;
}

}  // namespace attnlab::device
