// Whole models. Parameter names (PyTorch style; the README lists them all):
//   DecoderLM:      tok_emb, pos_emb, blocks.N.{attn,ln1,ffn,ln2}, ln_f, head
//   EncoderDecoder: src_emb, tgt_emb, src_pos_emb, tgt_pos_emb, encoder.N.*,
//                   decoder.N.{attn,ln1,cross_attn,ln_cross,ffn,ln2}, enc_ln_f, dec_ln_f, head
#pragma once

#include <memory>

#include "layers/blocks.h"

namespace attnlab {

// How the parameters start. torch: each layer as its PyTorch default (Linear
// U(+-1/sqrt(in)), Embedding and learned positions N(0, 1), norms ones and zeros).
// gpt2: GPT-2's and nanoGPT's scheme: every matrix (embeddings, positions and
// Linear weights) N(0, 0.02), the residual stream's output projections
// (attn.out_proj, ffn.fc2) N(0, 0.02 / sqrt(2 L)), biases 0, norms as torch.
// transformerlens: TransformerLens's default (as Nanda et al.'s grokking
// models): every matrix N(0, 0.8 / sqrt(D)), biases 0, norms as torch.
enum class Init { torch, gpt2, transformerlens };
const Choices<Init>& init_choices();  // "torch" | "gpt2" | "transformerlens"

struct ModelConfig {
    size_t vocab = 0;
    size_t layers = 1;
    size_t max_len = 0;             // longest sequence the positional table covers
    Positional positional = Positional::learned;
    double rotary_base = 10000.0;   // positional = rotary: the frequencies' base
    size_t rotary_dims = 0;         // positional = rotary: the features of a head that turn (the first ones); 0 = all
    BlockConfig block;              // width, heads, ffn, norm, ...
    double embedding_dropout = 0.0;
    // Decoder-only: the output head's matrix is the token embedding's (Press & Wolf
    // 2017, GPT-2, nanoGPT): one parameter, tok_emb.weight, and no head.weight.
    bool tie_embeddings = false;
    bool head_bias = false;         // the output head has a bias, head.bias (V) (TransformerLens's b_U)
    Init init = Init::torch;
    // (layer, head) pairs whose self-attention output is zero (model.ablate_heads; decoder only)
    std::vector<std::pair<size_t, size_t>> ablated_heads;
    AttentionVariant variant;           // every attention's rules and score modifiers (autograd/variant.h)
    bool alibi() const { return positional == Positional::alibi; }  // the self-attention masks' variant.alibi
    // The masks the model runs each attention under, the one definition that
    // analyses read too: decoder self-attention (causal, keys beyond `lengths`
    // ineligible, ALiBi's bias), encoder self-attention (source padding, ALiBi)
    // and cross-attention (source padding). The decoder's carries the spans of
    // its tokens (B, T) when the variant's rules read them (prefix-LM, documents).
    AttentionMask self_mask(const Indices& tokens, const std::vector<size_t>& lengths) const;
    AttentionMask encoder_mask(const std::vector<size_t>& src_lengths) const;
    AttentionMask cross_mask(const std::vector<size_t>& src_lengths) const;
    // learned and sinusoidal positions are a table of max_len rows; rotary, ALiBi and none reach any length
    bool position_table() const { return positional == Positional::learned || positional == Positional::sinusoidal; }
};

// Hook points (layers/hooks.h) of the models themselves, besides their blocks':
//   DecoderLM:      embed (B, T, D) token embedding + positions (after dropout),
//                   ln_f.out, logits (B, T, V)
//   EncoderDecoder: src_embed (B, S, D), memory (B, S, D) the encoder's output
//                   (after enc_ln_f), tgt_embed (B, T, D), dec_ln_f.out, logits (B, T, V)
// Per-layer KV caches and the number of positions already decoded.
struct DecoderCache {
    std::vector<DecoderBlock::Caches> layers;
    size_t position = 0;
    Indices tokens;  // (B, position) the tokens seen, kept when the variant's rules read them
    size_t bytes() const;
};

// Token embedding + positions, N causal decoder blocks, final norm, output head.
class DecoderLM : public Module {
public:
    DecoderLM(const ModelConfig& config, Rng& init, Rng* dropout_rng);
    // tokens (B, T) right-padded to lengths (empty: all T) -> logits (B, T, V)
    Tensor forward(const Indices& tokens, const std::vector<size_t>& lengths = {}) const;
    // The same from block `first` on (TransformerLens's start_at_layer): `resid` (B, T, D)
    // is the residual stream entering it (its resid_pre), the tokens only set the masks;
    // first = layers runs the final norm and the head alone. The earlier blocks do not run.
    Tensor forward_from(size_t first, const Tensor& resid, const Indices& tokens, const std::vector<size_t>& lengths = {}) const;
    // Blocks [first, last) alone (TransformerLens's start_at_layer and stop_at_layer): the
    // residual stream leaving block last - 1 (its resid_post), no final norm, no head.
    Tensor forward_blocks(size_t first, size_t last, const Tensor& resid, const Indices& tokens,
                          const std::vector<size_t>& lengths = {}) const;
    // The logits only at `rows` (N), flat positions b T + t of tokens (B, T): (N, V), the
    // output head run on those positions' final stream alone (what a loss that counts
    // few positions needs; the hook point "logits" is not passed). Stacked members
    // (Module::stack_members): the rows member by member, each member's through its own head.
    Tensor forward_at(const Indices& tokens, const std::vector<size_t>& lengths, const Indices& rows) const;
    // Incremental decoding: tokens (B, Tn) are the next positions; returns their logits (B, Tn, V).
    // Prefix-LM: new tokens that end a prefix begun in earlier calls rebuild the cache from every
    // token seen (the prefix's cached keys read the later prefix tokens), once per such prefix.
    Tensor forward_cached(const Indices& tokens, DecoderCache& cache) const;
    // The norm before the output head (pre-norm blocks), or null.
    const NormLayer* final_norm() const { return ln_f.get(); }
    // The parameter that holds the unembedding W_U (V, D): head.weight, or tok_emb.weight when tied.
    std::string unembedding_name() const { return config.tie_embeddings ? "tok_emb.weight" : "head.weight"; }

    ModelConfig config;
    Embedding tok_emb;
    PositionalEncoding pos_emb;
    Dropout emb_drop;
    std::vector<std::unique_ptr<DecoderBlock>> blocks;
    std::unique_ptr<NormLayer> ln_f;  // pre-norm only
    Linear head;

private:
    // The stream the output head reads (B, T, D): embedding, every block, the final norm.
    Tensor final_stream(const Indices& tokens, const std::vector<size_t>& lengths) const;
};

// Encoder stack over the source; decoder stack with cross-attention over the target
// shifted right behind <BOS> (teacher forcing).
class EncoderDecoder : public Module {
public:
    EncoderDecoder(const ModelConfig& config, Rng& init, Rng* dropout_rng);
    // src (B, S) with src_lengths -> memory (B, S, D)
    Tensor encode(const Indices& src, const std::vector<size_t>& src_lengths) const;
    // tgt_in (B, T): the decoder input (target shifted right) -> logits (B, T, V)
    Tensor decode(const Tensor& memory, const std::vector<size_t>& src_lengths, const Indices& tgt_in,
                  const std::vector<size_t>& tgt_lengths = {}) const;
    Tensor forward(const Indices& src, const std::vector<size_t>& src_lengths, const Indices& tgt_in,
                   const std::vector<size_t>& tgt_lengths = {}) const;
    // Incremental decoding of the next target positions against a fixed memory.
    Tensor decode_cached(const Tensor& memory, const std::vector<size_t>& src_lengths, const Indices& tgt_new,
                         DecoderCache& cache) const;

    ModelConfig config;
    Embedding src_emb, tgt_emb;
    PositionalEncoding src_pos_emb, tgt_pos_emb;
    Dropout emb_drop;
    std::vector<std::unique_ptr<EncoderBlock>> encoder;
    std::vector<std::unique_ptr<DecoderBlock>> decoder;
    std::unique_ptr<NormLayer> enc_ln_f, dec_ln_f;  // pre-norm only
    Linear head;
};

// [bos, t_0, ..., t_{T-2}] for each row of target (B, T): the teacher-forcing input.
Indices shift_right(const Indices& target, int32_t bos);

}  // namespace attnlab
