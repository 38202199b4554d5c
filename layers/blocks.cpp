#include "layers/blocks.h"

namespace attnlab {

const Choices<Norm>& norm_choices() {
    static const Choices<Norm> choices{"norm", "", {{Norm::pre, "pre"}, {Norm::post, "post"}, {Norm::none, "none"}}};
    return choices;
}

Norm parse_norm(const std::string& name) { return norm_choices().parse(name); }

std::string to_string(Norm norm) { return norm_choices().name(norm); }

Residual::Residual(const BlockConfig& c, Rng* dropout_rng) : norm(c.norm), drop(c.dropout, dropout_rng) {
    if (norm != Norm::none) ln = make_norm(c.norm_type, c.attention.width, c.norm_bias, c.norm_eps);
    register_module("drop", drop);  // no parameters; follows train/eval
    // ln is registered by the owning block under its PyTorch-style name (ln1, ln2, ...)
}

Tensor Residual::before(const Tensor& x) const { return norm == Norm::pre ? ln->forward(x) : x; }

Tensor Residual::after(const Tensor& x, const Tensor& y) const {
    Tensor sum = x + drop.forward(y);
    return norm == Norm::post ? ln->forward(sum) : sum;
}


namespace {

// The feed-forward sublayer both block kinds end with (none when ffn = 0).
void add_feed_forward(Module& block, const BlockConfig& c, Rng& init, Rng* dropout_rng, std::unique_ptr<FeedForward>& ffn,
                      std::unique_ptr<Residual>& res2) {
    if (c.ffn == 0) return;
    ffn = std::make_unique<FeedForward>(c.attention.width, c.ffn, c.activation, 0.0, init, dropout_rng, c.ffn_bias);
    res2 = std::make_unique<Residual>(c, dropout_rng);
    block.register_module("ffn", *ffn);
    if (res2->ln) block.register_module("ln2", *res2->ln);  // after its sublayer, as ln1 after attn
    block.register_module("res2", *res2);
}

}  // namespace

EncoderBlock::EncoderBlock(const BlockConfig& c, Rng& init, Rng* dropout_rng)
    : attn(c.attention, init, dropout_rng), res1(c, dropout_rng) {
    register_module("attn", attn);
    if (res1.ln) register_module("ln1", *res1.ln);
    register_module("res1", res1);
    add_feed_forward(*this, c, init, dropout_rng, ffn, res2);
    declare_hook_points({{"resid_pre", "batch pos d_model"}, {"resid_mid", "batch pos d_model"}, {"resid_post", "batch pos d_model"}});
}

Tensor EncoderBlock::forward(const Tensor& x_in, const AttentionMask& mask) const {
    const Tensor x = hook("resid_pre", x_in);
    const Tensor h = res1.before(x);
    Tensor y = hook("resid_mid", res1.after(x, attn.forward(h, h, mask).out));
    if (ffn) y = res2->after(y, ffn->forward(res2->before(y)));
    return hook("resid_post", y);
}

DecoderBlock::DecoderBlock(const BlockConfig& c, bool cross_attention, Rng& init, Rng* dropout_rng)
    : parallel(c.parallel), attn(c.attention, init, dropout_rng), res1(c, dropout_rng) {
    if (parallel && (c.norm != Norm::pre || c.ffn == 0 || cross_attention))
        fail("decoder block", "parallel attention and feed-forward need pre-norm, a feed-forward layer and no cross-attention");
    register_module("attn", attn);
    if (res1.ln) register_module("ln1", *res1.ln);
    register_module("res1", res1);
    if (cross_attention) {
        AttentionConfig cross = c.attention;
        cross.rotary_base = 0.0;  // positions of the target and the source are not comparable
        cross.variant = c.attention.variant.for_cross_attention();  // as ModelConfig::cross_mask
        cross_attn = std::make_unique<MultiHeadAttention>(cross, init, dropout_rng);
        res_cross = std::make_unique<Residual>(c, dropout_rng);
        register_module("cross_attn", *cross_attn);
        if (res_cross->ln) register_module("ln_cross", *res_cross->ln);
        register_module("res_cross", *res_cross);
    }
    add_feed_forward(*this, c, init, dropout_rng, ffn, res2);
    declare_hook_points({{"resid_pre", "batch pos d_model"}});
    if (!parallel) declare_hook_points({{"resid_mid", "batch pos d_model"}});
    if (cross_attention) declare_hook_points({{"resid_cross", "batch pos d_model"}});
    declare_hook_points({{"resid_post", "batch pos d_model"}});
}

Tensor DecoderBlock::forward(const Tensor& x_in, const AttentionMask& self_mask, const Tensor& memory,
                             const AttentionMask& cross_mask, Caches* caches) const {
    const Tensor x = hook("resid_pre", x_in);
    const Tensor h = res1.before(x);
    const Tensor a = caches ? attn.forward_cached(h, caches->self, self_mask).out : attn.forward(h, h, self_mask).out;
    if (parallel)  // x + attn(LN1(x)) + ffn(LN2(x))
        return hook("resid_post", res2->after(res1.after(x, a), ffn->forward(res2->before(x))));
    Tensor y = hook("resid_mid", res1.after(x, a));
    if (cross_attn) {
        if (!memory.defined()) fail("decoder", "cross-attention needs the encoder output");
        const Tensor hq = res_cross->before(y);
        const Tensor c = caches ? cross_attn->forward_cross_cached(hq, memory, caches->cross, cross_mask).out
                                : cross_attn->forward(hq, memory, cross_mask).out;
        y = hook("resid_cross", res_cross->after(y, c));
    }
    if (ffn) y = res2->after(y, ffn->forward(res2->before(y)));
    return hook("resid_post", y);
}

}  // namespace attnlab
