// Transformer blocks. norm = pre:  x = x + f(LN(x))   (for each sublayer f)
//                     norm = post: x = LN(x + f(x))
//                     norm = none: x = x + f(x)
// ffn = 0 gives attention-only blocks (no feed-forward sublayer, no ln2).
// parallel (decoder blocks, pre-norm, with a feed-forward sublayer; GPT-J,
// GPT-NeoX): x = x + attn(LN1(x)) + ffn(LN2(x)), both sublayers reading the block's input.
#pragma once

#include <memory>
#include <optional>

#include "layers/multihead.h"

namespace attnlab {

enum class Norm { pre, post, none };
const Choices<Norm>& norm_choices();  // "pre" | "post" | "none"
Norm parse_norm(const std::string& name);
std::string to_string(Norm norm);

struct BlockConfig {
    AttentionConfig attention;  // width, heads, kv_heads, head_width, scale, bias, dropout, masked_rows
    size_t ffn = 0;             // hidden width F; 0 = no feed-forward sublayer
    Activation activation = Activation::gelu;
    Norm norm = Norm::pre;
    NormType norm_type = NormType::layer;  // LayerNorm or RMSNorm, wherever `norm` puts one
    double dropout = 0.0;       // on each sublayer's output (residual dropout)
    bool ffn_bias = true;       // fc1's and fc2's biases
    bool norm_bias = true;      // LayerNorm's bias (every norm of the model)
    double norm_eps = 1e-5;     // every norm's epsilon
    bool parallel = false;      // decoder blocks: attention and feed-forward side by side (see above)
};

// One sublayer with its residual path and optional norm.
class Residual : public Module {
public:
    // `c`: the norm's placement, type, bias and epsilon, and the dropout
    Residual(const BlockConfig& c, Rng* dropout_rng);
    Tensor before(const Tensor& x) const;               // the sublayer's input
    Tensor after(const Tensor& x, const Tensor& y) const;  // combine input and sublayer output
    Norm norm;
    std::unique_ptr<NormLayer> ln;  // none when norm = none
    Dropout drop;
};

// Hook points of both block kinds (layers/hooks.h), each (B, T, D):
//   resid_pre    the block's input (the residual stream before it)
//   resid_mid    after the self-attention sublayer (not in a parallel block)
//   resid_cross  after the cross-attention sublayer (decoder blocks with one)
//   resid_post   the block's output
// and those of their modules: attn.*, cross_attn.*, ln1.out, ln_cross.out, ln2.out, ffn.*.

// Self-attention (padding mask from the source lengths) + FFN.
class EncoderBlock : public Module {
public:
    EncoderBlock(const BlockConfig& config, Rng& init, Rng* dropout_rng);
    // x (B, S, D) -> (B, S, D)
    Tensor forward(const Tensor& x, const AttentionMask& mask) const;
    MultiHeadAttention attn;
    Residual res1;
    std::unique_ptr<FeedForward> ffn;
    std::unique_ptr<Residual> res2;
};

struct BlockCaches {
    KVCache self, cross;
};

// Causal self-attention, optional cross-attention to an encoder's output, FFN.
class DecoderBlock : public Module {
public:
    DecoderBlock(const BlockConfig& config, bool cross_attention, Rng& init, Rng* dropout_rng);
    using Caches = BlockCaches;
    // x (B, T, D); memory (B, S, D) or undefined when there is no cross-attention.
    // With `caches`, x holds only new positions and keys/values are cached.
    Tensor forward(const Tensor& x, const AttentionMask& self_mask, const Tensor& memory,
                   const AttentionMask& cross_mask, Caches* caches = nullptr) const;
    // The norm the self-attention reads the stream through (pre-norm: ln1), or null.
    const NormLayer* attention_norm() const { return res1.norm == Norm::pre ? res1.ln.get() : nullptr; }
    bool parallel;  // attention and feed-forward both read the block's input (BlockConfig::parallel)
    MultiHeadAttention attn;
    Residual res1;
    std::unique_ptr<MultiHeadAttention> cross_attn;
    std::unique_ptr<Residual> res_cross;
    std::unique_ptr<FeedForward> ffn;
    std::unique_ptr<Residual> res2;
};

}  // namespace attnlab
