#include "layers/models.h"

namespace attnlab {

namespace {

void check_tokens(const char* what, const Indices& tokens, const std::vector<size_t>& lengths) {
    if (tokens.shape.size() != 2) fail(what, "tokens must be (B, T), got " + shape_str(tokens.shape));
    if (!lengths.empty() && lengths.size() != tokens.shape[0])
        fail(what, std::to_string(lengths.size()) + " lengths for batch " + std::to_string(tokens.shape[0]));
}

// Keys of each batch item beyond its length are ineligible (right padding).
AttentionMask padding_mask(const std::vector<size_t>& lengths, bool causal) {
    AttentionMask mask;
    mask.causal = causal;
    mask.key_lengths = lengths;
    return mask;
}

ModelConfig checked(const ModelConfig& c) {
    if (c.vocab == 0) fail("model", "vocab must be at least 1");
    if (c.max_len == 0) fail("model", "max_len must be at least 1");
    return c;
}

}  // namespace

size_t DecoderCache::bytes() const {
    size_t n = 0;
    for (const auto& l : layers) n += l.self.bytes() + l.cross.bytes();
    return n;
}

DecoderLM::DecoderLM(const ModelConfig& c, Rng& init, Rng* dropout_rng)
    : config(checked(c)),
      tok_emb(c.vocab, c.block.attention.width, init),
      pos_emb(c.positional, c.max_len, c.block.attention.width, init),
      emb_drop(c.embedding_dropout, dropout_rng),
      head(c.block.attention.width, c.vocab, false, init) {
    register_module("tok_emb", tok_emb);
    register_module("pos_emb", pos_emb);
    register_module("emb_drop", emb_drop);
    for (size_t l = 0; l < c.layers; ++l) {
        blocks.push_back(std::make_unique<DecoderBlock>(c.block, false, init, dropout_rng));
        register_module("blocks." + std::to_string(l), *blocks.back());
    }
    if (c.block.norm == Norm::pre) {  // post-norm blocks already end normalised
        ln_f = make_norm(c.block.norm_type, c.block.attention.width);
        register_module("ln_f", *ln_f);
    }
    register_module("head", head);
    declare_hook_points({"embed", "logits"});
}

Tensor DecoderLM::forward(const Indices& tokens, const std::vector<size_t>& lengths) const {
    check_tokens("decoder", tokens, lengths);
    Tensor x = hook("embed", emb_drop.forward(pos_emb.forward(tok_emb.forward(tokens))));  // (B, T, D)
    const AttentionMask mask = padding_mask(lengths, true);
    for (const auto& block : blocks) x = block->forward(x, mask, Tensor(), {});
    if (ln_f) x = ln_f->forward(x);
    return hook("logits", head.forward(x));  // (B, T, V)
}

Tensor DecoderLM::forward_cached(const Indices& tokens, DecoderCache& cache) const {
    check_tokens("decoder", tokens, {});
    if (cache.layers.empty()) cache.layers.resize(blocks.size());
    Tensor x = hook("embed", emb_drop.forward(pos_emb.forward(tok_emb.forward(tokens), cache.position)));
    AttentionMask mask;
    mask.causal = true;  // bottom-right aligned: the new queries see every cached key
    for (size_t l = 0; l < blocks.size(); ++l) x = blocks[l]->forward(x, mask, Tensor(), {}, &cache.layers[l]);
    cache.position += tokens.shape[1];
    if (ln_f) x = ln_f->forward(x);
    return hook("logits", head.forward(x));
}

EncoderDecoder::EncoderDecoder(const ModelConfig& c, Rng& init, Rng* dropout_rng)
    : config(checked(c)),
      src_emb(c.vocab, c.block.attention.width, init),
      tgt_emb(c.vocab, c.block.attention.width, init),
      src_pos_emb(c.positional, c.max_len, c.block.attention.width, init),
      tgt_pos_emb(c.positional, c.max_len, c.block.attention.width, init),
      emb_drop(c.embedding_dropout, dropout_rng),
      head(c.block.attention.width, c.vocab, false, init) {
    register_module("src_emb", src_emb);
    register_module("tgt_emb", tgt_emb);
    register_module("src_pos_emb", src_pos_emb);
    register_module("tgt_pos_emb", tgt_pos_emb);
    register_module("emb_drop", emb_drop);
    for (size_t l = 0; l < c.layers; ++l) {
        encoder.push_back(std::make_unique<EncoderBlock>(c.block, init, dropout_rng));
        register_module("encoder." + std::to_string(l), *encoder.back());
    }
    for (size_t l = 0; l < c.layers; ++l) {
        decoder.push_back(std::make_unique<DecoderBlock>(c.block, true, init, dropout_rng));
        register_module("decoder." + std::to_string(l), *decoder.back());
    }
    if (c.block.norm == Norm::pre) {
        enc_ln_f = make_norm(c.block.norm_type, c.block.attention.width);
        dec_ln_f = make_norm(c.block.norm_type, c.block.attention.width);
        register_module("enc_ln_f", *enc_ln_f);
        register_module("dec_ln_f", *dec_ln_f);
    }
    register_module("head", head);
    declare_hook_points({"src_embed", "memory", "tgt_embed", "logits"});
}

Tensor EncoderDecoder::encode(const Indices& src, const std::vector<size_t>& src_lengths) const {
    check_tokens("encoder", src, src_lengths);
    Tensor x = hook("src_embed", emb_drop.forward(src_pos_emb.forward(src_emb.forward(src))));  // (B, S, D)
    const AttentionMask mask = padding_mask(src_lengths, false);
    for (const auto& block : encoder) x = block->forward(x, mask);
    return hook("memory", enc_ln_f ? enc_ln_f->forward(x) : x);
}

Tensor EncoderDecoder::decode(const Tensor& memory, const std::vector<size_t>& src_lengths, const Indices& tgt_in,
                              const std::vector<size_t>& tgt_lengths) const {
    check_tokens("decoder", tgt_in, tgt_lengths);
    Tensor x = hook("tgt_embed", emb_drop.forward(tgt_pos_emb.forward(tgt_emb.forward(tgt_in))));  // (B, T, D)
    const AttentionMask self_mask = padding_mask(tgt_lengths, true);
    const AttentionMask cross_mask = padding_mask(src_lengths, false);
    for (const auto& block : decoder) x = block->forward(x, self_mask, memory, cross_mask);
    if (dec_ln_f) x = dec_ln_f->forward(x);
    return hook("logits", head.forward(x));  // (B, T, V)
}

Tensor EncoderDecoder::forward(const Indices& src, const std::vector<size_t>& src_lengths, const Indices& tgt_in,
                               const std::vector<size_t>& tgt_lengths) const {
    return decode(encode(src, src_lengths), src_lengths, tgt_in, tgt_lengths);
}

Tensor EncoderDecoder::decode_cached(const Tensor& memory, const std::vector<size_t>& src_lengths, const Indices& tgt_new,
                                     DecoderCache& cache) const {
    check_tokens("decoder", tgt_new, {});
    if (cache.layers.empty()) cache.layers.resize(decoder.size());
    Tensor x = hook("tgt_embed", emb_drop.forward(tgt_pos_emb.forward(tgt_emb.forward(tgt_new), cache.position)));
    AttentionMask self_mask;
    self_mask.causal = true;
    const AttentionMask cross_mask = padding_mask(src_lengths, false);
    for (size_t l = 0; l < decoder.size(); ++l) x = decoder[l]->forward(x, self_mask, memory, cross_mask, &cache.layers[l]);
    cache.position += tgt_new.shape[1];
    if (dec_ln_f) x = dec_ln_f->forward(x);
    return hook("logits", head.forward(x));
}

void DecoderLM::set_attention_device(cuda::Context* context) {
    for (auto& block : blocks) block->attn.set_device(context);
}

void EncoderDecoder::set_attention_device(cuda::Context* context) {
    for (auto& block : encoder) block->attn.set_device(context);
    for (auto& block : decoder) {
        block->attn.set_device(context);
        if (block->cross_attn) block->cross_attn->set_device(context);
    }
}

Indices shift_right(const Indices& target, int32_t bos) {
    if (target.shape.size() != 2) fail("shift_right", "target must be (B, T), got " + shape_str(target.shape));
    const size_t B = target.shape[0], T = target.shape[1];
    Indices out(target.shape, std::vector<int32_t>(B * T));
    for (size_t b = 0; b < B; ++b) {
        if (T > 0) out.values[b * T] = bos;
        for (size_t t = 1; t < T; ++t) out.values[b * T + t] = target.values[b * T + t - 1];
    }
    return out;
}

}  // namespace attnlab
