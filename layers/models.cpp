#include "layers/models.h"

#include <cmath>
#include <cstdint>

namespace attnlab {

namespace {

// Keys of each batch item beyond its length are ineligible (right padding);
// `variant`: eligibility rules and score modifiers (autograd/variant.h), ALiBi's bias among them.
AttentionMask padding_mask(const std::vector<size_t>& lengths, bool causal, const AttentionVariant& variant) {
    AttentionMask mask;
    mask.causal = causal;
    mask.key_lengths = lengths;
    mask.variant = variant;
    return mask;
}

void check_tokens(const char* what, const Indices& tokens, const std::vector<size_t>& lengths) {
    if (tokens.shape.size() != 2) fail(what, "tokens must be (B, T), got " + shape_str(tokens.shape));
    if (!lengths.empty() && lengths.size() != tokens.shape[0])
        fail(what, std::to_string(lengths.size()) + " lengths for batch " + std::to_string(tokens.shape[0]));
}

ModelConfig checked(const ModelConfig& c_in) {
    if (c_in.vocab == 0) fail("model", "vocab must be at least 1");
    if (c_in.max_len == 0) fail("model", "max_len must be at least 1");
    ModelConfig c = c_in;
    // rotary positions act in self-attention (the blocks give cross-attention none)
    c.block.attention.rotary_base = c.positional == Positional::rotary ? c.rotary_base : 0.0;
    c.block.attention.rotary_dims = c.rotary_dims;
    if (c.tie_embeddings && c.head_bias) fail("model", "a head bias with tied embeddings (the bias would have no module)");
    c.block.attention.variant = c.variant;  // self-attention's; the blocks give cross-attention for_cross_attention()
    return c;
}

// Token embedding + positions (offset .. offset + T - 1), then embedding dropout: (B, T, D).
Tensor embed(const Embedding& tokens_table, const PositionalEncoding& positions, const Dropout& drop, const Indices& tokens,
             size_t offset) {
    return drop.forward(positions.forward(tokens_table.forward(tokens), offset));
}

// The tokens the cache has seen (B, P) followed by the new ones (B, Tn).
Indices seen_and_new(const DecoderCache& cache, const Indices& tokens) {
    const size_t B = tokens.shape[0], Tn = tokens.shape[1], P = cache.position;
    if (P > 0 && cache.tokens.shape != Shape{B, P})
        fail("kv cache", "the cache holds " + shape_str(cache.tokens.shape) + " tokens, the new ones are " +
                             shape_str(tokens.shape) + " after " + std::to_string(P) + " positions");
    Indices all({B, P + Tn}, std::vector<int32_t>(B * (P + Tn)));
    for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; t < P + Tn; ++t)
            all.values[b * (P + Tn) + t] = t < P ? cache.tokens.values[b * P + t] : tokens.values[b * Tn + t - P];
    return all;
}

// The first batch item whose prefix (prefix-LM) the new tokens end although it
// began in the cache, whose keys were computed without them; B if none.
size_t split_prefix(const TokenSpans& spans, size_t B, size_t P) {
    for (size_t b = 0; b < B; ++b)
        if (spans.splits_prefix(b, P)) return b;
    return B;
}

// Appends the new tokens (B, Tn) to those the cache has seen, when the variant's
// rules read them, and returns the self-attention mask over the cached keys. A
// prefix must reach the cache whole (DecoderLM::forward_cached rebuilds the cache
// when it would not).
AttentionMask cached_self_mask(const ModelConfig& config, const Indices& tokens, DecoderCache& cache) {
    if (!config.variant.reads_tokens()) return config.self_mask(tokens, {});
    const size_t B = tokens.shape[0], Tn = tokens.shape[1], P = cache.position;
    Indices all = seen_and_new(cache, tokens);
    AttentionMask mask = config.self_mask(all, {});
    if (const size_t b = split_prefix(mask.spans, B, P); b < B)
        fail("kv cache", "prefix-LM: batch item " + std::to_string(b) + "'s prefix (through its first <SEP>) ends at position " +
                             std::to_string(mask.spans.prefix_end_at(b, P) - 1) + ", after the " + std::to_string(P) +
                             " cached positions; give the cache each prefix whole in one call");
    const size_t kept = cache.layers.empty() ? 0 : cache.layers[0].self.length();  // a window's cache keeps fewer keys
    mask.spans = mask.spans.tail(kept + Tn);
    cache.tokens = std::move(all);
    return mask;
}

// The decoder stack both model kinds end with: x (B, T, D), the embedded
// `tokens`, through causal blocks (cross-attending to `memory` (B, S, D) when it
// is defined, keys beyond src_lengths ineligible), then the final norm. With
// `cache`, x holds only the next positions: the causal mask (and ALiBi's
// distances) are bottom-right aligned over every cached key.
Tensor decoder_stack(const std::vector<std::unique_ptr<DecoderBlock>>& blocks, const NormLayer* final_norm, Tensor x,
                     const Indices& tokens, const std::vector<size_t>& lengths, const Tensor& memory,
                     const std::vector<size_t>& src_lengths, DecoderCache* cache, const ModelConfig& config, size_t first = 0,
                     size_t last = SIZE_MAX) {
    const AttentionMask self_mask = cache ? cached_self_mask(config, tokens, *cache) : config.self_mask(tokens, lengths);
    const AttentionMask cross_mask = config.cross_mask(src_lengths);
    if (cache && cache->layers.empty()) cache->layers.resize(blocks.size());
    for (size_t l = first; l < std::min(last, blocks.size()); ++l)
        x = blocks[l]->forward(x, self_mask, memory, cross_mask, cache ? &cache->layers[l] : nullptr);
    if (cache) cache->position += x.size(1);
    return final_norm ? final_norm->forward(x) : x;
}

// Init::gpt2 or transformerlens over a model whose parameters are drawn (see
// Init): each drawn again in registration order, from the model's own init generator.
void redraw(Module& model, Rng& init, Init scheme, size_t layers, size_t width) {
    const double matrix_std = scheme == Init::gpt2 ? 0.02 : 0.8 / std::sqrt(static_cast<double>(width));
    const double residual_std = scheme == Init::gpt2 ? 0.02 / std::sqrt(2.0 * static_cast<double>(layers)) : matrix_std;
    for (auto& [name, p] : model.named_parameters()) {
        if (name.ends_with(".bias")) {
            p.assign(Tensor::zeros(p.shape()));
        } else if (p.dim() == 2 && !name.ends_with("rel_bias")) {  // T5's bias table stays as drawn (zeros)
            const bool residual = name.ends_with("out_proj.weight") || name.ends_with("fc2.weight");
            p.assign(init.normal(p.shape(), 0.0, residual ? residual_std : matrix_std));
        }
    }
}

}  // namespace

const Choices<Init>& init_choices() {
    static const Choices<Init> choices{"init", "", {{Init::torch, "torch"}, {Init::gpt2, "gpt2"}, {Init::transformerlens, "transformerlens"}}};
    return choices;
}

AttentionMask ModelConfig::self_mask(const Indices& tokens, const std::vector<size_t>& lengths) const {
    AttentionVariant self = variant;
    self.alibi = alibi();
    AttentionMask mask = padding_mask(lengths, true, self);
    mask.spans = token_spans(variant, tokens, lengths);
    return mask;
}
AttentionMask ModelConfig::encoder_mask(const std::vector<size_t>& src_lengths) const {
    AttentionVariant encoder = variant;  // the token rules are the decoder's
    encoder.prefix_lm = encoder.documents = false;
    encoder.alibi = alibi();
    return padding_mask(src_lengths, false, encoder);
}
AttentionMask ModelConfig::cross_mask(const std::vector<size_t>& src_lengths) const {
    return padding_mask(src_lengths, false, variant.for_cross_attention());
}

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
      head(c.block.attention.width, c.vocab, c.head_bias, init) {
    register_module("tok_emb", tok_emb);
    register_module("pos_emb", pos_emb);
    register_module("emb_drop", emb_drop);
    for (const auto& [layer, head] : c.ablated_heads)
        if (layer >= c.layers) fail("model", "ablated head " + std::to_string(layer) + "." + std::to_string(head) + " of a model with " +
                                                 std::to_string(c.layers) + " layers");
    for (size_t l = 0; l < c.layers; ++l) {
        BlockConfig block = config.block;  // this layer's, with its ablated heads
        for (const auto& [layer, head] : c.ablated_heads)
            if (layer == l) block.attention.ablated_heads.push_back(head);
        blocks.push_back(std::make_unique<DecoderBlock>(block, false, init, dropout_rng));
        register_module("blocks." + std::to_string(l), *blocks.back());
    }
    if (c.block.norm == Norm::pre) {  // post-norm blocks already end normalised
        ln_f = make_norm(c.block.norm_type, c.block.attention.width, c.block.norm_bias, c.block.norm_eps);
        register_module("ln_f", *ln_f);
    }
    if (c.tie_embeddings) {
        // One tensor for both uses, whose gradients add: tok_emb.weight, starting from
        // the head's draw U(+-1/sqrt(D)) (an N(0, 1) table would start the logits at std sqrt(D)).
        tok_emb.weight.assign(head.weight);
        head.weight = tok_emb.weight;
    } else {
        register_module("head", head);
    }
    if (c.init != Init::torch) redraw(*this, init, c.init, c.layers, c.block.attention.width);
    declare_hook_points({{"embed", "batch pos d_model"}, {"logits", "batch pos vocab"}});
}

Tensor DecoderLM::final_stream(const Indices& tokens, const std::vector<size_t>& lengths) const {
    check_tokens("decoder", tokens, lengths);
    const Tensor x = hook("embed", embed(tok_emb, pos_emb, emb_drop, tokens, 0));  // (B, T, D)
    return decoder_stack(blocks, ln_f.get(), x, tokens, lengths, Tensor(), {}, nullptr, config);
}

Tensor DecoderLM::forward(const Indices& tokens, const std::vector<size_t>& lengths) const {
    return hook("logits", head.forward(final_stream(tokens, lengths)));  // (B, T, V)
}

Tensor DecoderLM::forward_at(const Indices& tokens, const std::vector<size_t>& lengths, const Indices& rows) const {
    const Tensor stream = final_stream(tokens, lengths);  // (B, T, D), the tokens checked
    const size_t B = tokens.shape[0], T = tokens.shape[1], D = config.block.attention.width;
    const Tensor at = embedding(reshape(stream, {B * T, D}), rows);  // (N, D)
    if (members() == 1) return head.forward(at);  // (N, V)
    // stacked members: member m's rows are those in its block of the batch (rows ascending)
    std::vector<size_t> member_rows(members(), 0);
    const size_t per_member = B * T / members();
    for (size_t i = 0; i < rows.values.size(); ++i) {
        const size_t m = static_cast<size_t>(rows.values[i]) / per_member;
        if (i > 0 && m < static_cast<size_t>(rows.values[i - 1]) / per_member)
            fail("decoder", "stacked members: the rows must come member by member (row " + std::to_string(rows.values[i]) + " after " +
                                std::to_string(rows.values[i - 1]) + ")");
        ++member_rows[m];
    }
    return linear_members(at, head.weight, head.bias, member_rows);  // (N, V)
}

namespace {

// forward_from's and forward_blocks' checks: blocks from `first` exist, the stream entering them has the batch's shape.
void check_entering(const DecoderLM& lm, size_t first, size_t last, const Tensor& resid, const Indices& tokens) {
    if (first > last || last > lm.blocks.size())
        fail("decoder", "blocks [" + std::to_string(first) + ", " + std::to_string(last) + ") of a model with " +
                            std::to_string(lm.blocks.size()) + " blocks");
    const Shape want{tokens.shape[0], tokens.shape[1], lm.config.block.attention.width};
    if (resid.shape() != want)
        fail("decoder", "the residual stream entering block " + std::to_string(first) + " is " + shape_str(resid.shape()) +
                            ", expected " + shape_str(want));
}

}  // namespace

Tensor DecoderLM::forward_from(size_t first, const Tensor& resid, const Indices& tokens, const std::vector<size_t>& lengths) const {
    check_tokens("decoder", tokens, lengths);
    check_entering(*this, first, blocks.size(), resid, tokens);
    return hook("logits", head.forward(decoder_stack(blocks, ln_f.get(), resid, tokens, lengths, Tensor(), {}, nullptr, config, first)));
}

Tensor DecoderLM::forward_blocks(size_t first, size_t last, const Tensor& resid, const Indices& tokens,
                                 const std::vector<size_t>& lengths) const {
    check_tokens("decoder", tokens, lengths);
    check_entering(*this, first, last, resid, tokens);
    return decoder_stack(blocks, nullptr, resid, tokens, lengths, Tensor(), {}, nullptr, config, first, last);
}

Tensor DecoderLM::forward_cached(const Indices& tokens, DecoderCache& cache) const {
    check_tokens("decoder", tokens, {});
    if (config.variant.prefix_lm && cache.position > 0) {
        // New tokens that end a prefix begun in the cache: its cached keys were computed
        // without them, which they now read. Rebuild the cache from every token seen.
        const Indices all = seen_and_new(cache, tokens);
        if (split_prefix(token_spans(config.variant, all, {}), tokens.shape[0], cache.position) < tokens.shape[0]) {
            const size_t P = cache.position;
            cache = DecoderCache();
            return slice(forward_cached(all, cache), 1, P, all.shape[1]);
        }
    }
    const Tensor x = hook("embed", embed(tok_emb, pos_emb, emb_drop, tokens, cache.position));
    return hook("logits", head.forward(decoder_stack(blocks, ln_f.get(), x, tokens, {}, Tensor(), {}, &cache, config)));
}

EncoderDecoder::EncoderDecoder(const ModelConfig& c, Rng& init, Rng* dropout_rng)
    : config(checked(c)),
      src_emb(c.vocab, c.block.attention.width, init),
      tgt_emb(c.vocab, c.block.attention.width, init),
      src_pos_emb(c.positional, c.max_len, c.block.attention.width, init),
      tgt_pos_emb(c.positional, c.max_len, c.block.attention.width, init),
      emb_drop(c.embedding_dropout, dropout_rng),
      head(c.block.attention.width, c.vocab, c.head_bias, init) {
    if (c.tie_embeddings) fail("model", "tied embeddings are for decoder-only models");
    if (!c.ablated_heads.empty()) fail("model", "ablated heads are for decoder-only models");
    register_module("src_emb", src_emb);
    register_module("tgt_emb", tgt_emb);
    register_module("src_pos_emb", src_pos_emb);
    register_module("tgt_pos_emb", tgt_pos_emb);
    register_module("emb_drop", emb_drop);
    for (size_t l = 0; l < c.layers; ++l) {
        encoder.push_back(std::make_unique<EncoderBlock>(config.block, init, dropout_rng));
        register_module("encoder." + std::to_string(l), *encoder.back());
    }
    for (size_t l = 0; l < c.layers; ++l) {
        decoder.push_back(std::make_unique<DecoderBlock>(config.block, true, init, dropout_rng));
        register_module("decoder." + std::to_string(l), *decoder.back());
    }
    if (c.block.norm == Norm::pre) {
        enc_ln_f = make_norm(c.block.norm_type, c.block.attention.width, c.block.norm_bias, c.block.norm_eps);
        dec_ln_f = make_norm(c.block.norm_type, c.block.attention.width, c.block.norm_bias, c.block.norm_eps);
        register_module("enc_ln_f", *enc_ln_f);
        register_module("dec_ln_f", *dec_ln_f);
    }
    register_module("head", head);
    if (c.init != Init::torch) redraw(*this, init, c.init, 2 * c.layers, c.block.attention.width);  // gpt2: both stacks' residuals
    declare_hook_points({{"src_embed", "batch pos d_model"}, {"memory", "batch pos d_model"}, {"tgt_embed", "batch pos d_model"},
                         {"logits", "batch pos vocab"}});
}

Tensor EncoderDecoder::encode(const Indices& src, const std::vector<size_t>& src_lengths) const {
    check_tokens("encoder", src, src_lengths);
    Tensor x = hook("src_embed", embed(src_emb, src_pos_emb, emb_drop, src, 0));  // (B, S, D)
    const AttentionMask mask = config.encoder_mask(src_lengths);
    for (const auto& block : encoder) x = block->forward(x, mask);
    return hook("memory", enc_ln_f ? enc_ln_f->forward(x) : x);
}

Tensor EncoderDecoder::decode(const Tensor& memory, const std::vector<size_t>& src_lengths, const Indices& tgt_in,
                              const std::vector<size_t>& tgt_lengths) const {
    check_tokens("decoder", tgt_in, tgt_lengths);
    const Tensor x = hook("tgt_embed", embed(tgt_emb, tgt_pos_emb, emb_drop, tgt_in, 0));  // (B, T, D)
    return hook("logits", head.forward(decoder_stack(decoder, dec_ln_f.get(), x, tgt_in, tgt_lengths, memory, src_lengths, nullptr, config)));
}

Tensor EncoderDecoder::forward(const Indices& src, const std::vector<size_t>& src_lengths, const Indices& tgt_in,
                               const std::vector<size_t>& tgt_lengths) const {
    return decode(encode(src, src_lengths), src_lengths, tgt_in, tgt_lengths);
}

Tensor EncoderDecoder::decode_cached(const Tensor& memory, const std::vector<size_t>& src_lengths, const Indices& tgt_new,
                                     DecoderCache& cache) const {
    check_tokens("decoder", tgt_new, {});
    const Tensor x = hook("tgt_embed", embed(tgt_emb, tgt_pos_emb, emb_drop, tgt_new, cache.position));
    return hook("logits", head.forward(decoder_stack(decoder, dec_ln_f.get(), x, tgt_new, {}, memory, src_lengths, &cache, config)));
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
