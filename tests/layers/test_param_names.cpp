// Parameter names of the models (DESIGN "Parameter names"): PyTorch-style dotted
// names and PyTorch layouts ([out, in] for Linear), in registration order. These
// lists are the ones the README documents.
#include <gtest/gtest.h>

#include <algorithm>

#include "layer_test_util.h"

namespace attnlab {
namespace {

using namespace layer_testing;

using NameShapes = std::vector<std::pair<std::string, Shape>>;

NameShapes names_and_shapes(const Module& m) {
    NameShapes out;
    for (const auto& [name, p] : m.named_parameters()) out.emplace_back(name, p.shape());
    return out;
}

NameShapes sorted(NameShapes v) {
    std::sort(v.begin(), v.end());
    return v;
}

// DecoderLM: vocab 11, width 16, heads 2, 2 layers, ffn 32, max_len 16, pre-norm, learned positions.
// Order as layers/models.h documents it: tok_emb, pos_emb, blocks.N.{attn,ln1,ffn,ln2}, ln_f, head.
const NameShapes kDecoderLM = {
    {"tok_emb.weight", {11, 16}},
    {"pos_emb.weight", {16, 16}},
    {"blocks.0.attn.q_proj.weight", {16, 16}}, {"blocks.0.attn.q_proj.bias", {16}},
    {"blocks.0.attn.k_proj.weight", {16, 16}}, {"blocks.0.attn.k_proj.bias", {16}},
    {"blocks.0.attn.v_proj.weight", {16, 16}}, {"blocks.0.attn.v_proj.bias", {16}},
    {"blocks.0.attn.out_proj.weight", {16, 16}}, {"blocks.0.attn.out_proj.bias", {16}},
    {"blocks.0.ln1.weight", {16}}, {"blocks.0.ln1.bias", {16}},
    {"blocks.0.ffn.fc1.weight", {32, 16}}, {"blocks.0.ffn.fc1.bias", {32}},
    {"blocks.0.ffn.fc2.weight", {16, 32}}, {"blocks.0.ffn.fc2.bias", {16}},
    {"blocks.0.ln2.weight", {16}}, {"blocks.0.ln2.bias", {16}},
    {"blocks.1.attn.q_proj.weight", {16, 16}}, {"blocks.1.attn.q_proj.bias", {16}},
    {"blocks.1.attn.k_proj.weight", {16, 16}}, {"blocks.1.attn.k_proj.bias", {16}},
    {"blocks.1.attn.v_proj.weight", {16, 16}}, {"blocks.1.attn.v_proj.bias", {16}},
    {"blocks.1.attn.out_proj.weight", {16, 16}}, {"blocks.1.attn.out_proj.bias", {16}},
    {"blocks.1.ln1.weight", {16}}, {"blocks.1.ln1.bias", {16}},
    {"blocks.1.ffn.fc1.weight", {32, 16}}, {"blocks.1.ffn.fc1.bias", {32}},
    {"blocks.1.ffn.fc2.weight", {16, 32}}, {"blocks.1.ffn.fc2.bias", {16}},
    {"blocks.1.ln2.weight", {16}}, {"blocks.1.ln2.bias", {16}},
    {"ln_f.weight", {16}}, {"ln_f.bias", {16}},
    {"head.weight", {11, 16}},
};

// EncoderDecoder: the same sizes with 1 layer. Order as layers/models.h documents it:
// src_emb, tgt_emb, src_pos_emb, tgt_pos_emb, encoder.N.*, decoder.N.{attn,ln1,cross_attn,
// ln_cross,ffn,ln2}, enc_ln_f, dec_ln_f, head.
const NameShapes kEncoderDecoder = {
    {"src_emb.weight", {11, 16}}, {"tgt_emb.weight", {11, 16}},
    {"src_pos_emb.weight", {16, 16}}, {"tgt_pos_emb.weight", {16, 16}},
    {"encoder.0.attn.q_proj.weight", {16, 16}}, {"encoder.0.attn.q_proj.bias", {16}},
    {"encoder.0.attn.k_proj.weight", {16, 16}}, {"encoder.0.attn.k_proj.bias", {16}},
    {"encoder.0.attn.v_proj.weight", {16, 16}}, {"encoder.0.attn.v_proj.bias", {16}},
    {"encoder.0.attn.out_proj.weight", {16, 16}}, {"encoder.0.attn.out_proj.bias", {16}},
    {"encoder.0.ln1.weight", {16}}, {"encoder.0.ln1.bias", {16}},
    {"encoder.0.ffn.fc1.weight", {32, 16}}, {"encoder.0.ffn.fc1.bias", {32}},
    {"encoder.0.ffn.fc2.weight", {16, 32}}, {"encoder.0.ffn.fc2.bias", {16}},
    {"encoder.0.ln2.weight", {16}}, {"encoder.0.ln2.bias", {16}},
    {"decoder.0.attn.q_proj.weight", {16, 16}}, {"decoder.0.attn.q_proj.bias", {16}},
    {"decoder.0.attn.k_proj.weight", {16, 16}}, {"decoder.0.attn.k_proj.bias", {16}},
    {"decoder.0.attn.v_proj.weight", {16, 16}}, {"decoder.0.attn.v_proj.bias", {16}},
    {"decoder.0.attn.out_proj.weight", {16, 16}}, {"decoder.0.attn.out_proj.bias", {16}},
    {"decoder.0.ln1.weight", {16}}, {"decoder.0.ln1.bias", {16}},
    {"decoder.0.cross_attn.q_proj.weight", {16, 16}}, {"decoder.0.cross_attn.q_proj.bias", {16}},
    {"decoder.0.cross_attn.k_proj.weight", {16, 16}}, {"decoder.0.cross_attn.k_proj.bias", {16}},
    {"decoder.0.cross_attn.v_proj.weight", {16, 16}}, {"decoder.0.cross_attn.v_proj.bias", {16}},
    {"decoder.0.cross_attn.out_proj.weight", {16, 16}}, {"decoder.0.cross_attn.out_proj.bias", {16}},
    {"decoder.0.ln_cross.weight", {16}}, {"decoder.0.ln_cross.bias", {16}},
    {"decoder.0.ffn.fc1.weight", {32, 16}}, {"decoder.0.ffn.fc1.bias", {32}},
    {"decoder.0.ffn.fc2.weight", {16, 32}}, {"decoder.0.ffn.fc2.bias", {16}},
    {"decoder.0.ln2.weight", {16}}, {"decoder.0.ln2.bias", {16}},
    {"enc_ln_f.weight", {16}}, {"enc_ln_f.bias", {16}},
    {"dec_ln_f.weight", {16}}, {"dec_ln_f.bias", {16}},
    {"head.weight", {11, 16}},
};

ModelConfig one_layer() {
    ModelConfig c = small_config();
    c.layers = 1;
    return c;
}

// The same names and PyTorch layouts, whatever the order.
TEST(ParameterNames, DecoderLMNamesAndShapes) {
    Rng init(1);
    DecoderLM model(small_config(), init, nullptr);
    EXPECT_EQ(sorted(names_and_shapes(model)), sorted(kDecoderLM));
    EXPECT_EQ(model.parameter_count(), 11u * 16 + 16 * 16 + 2 * (4 * (16 * 16 + 16) + 4 * 16 + 32 * 16 + 32 + 16 * 32 + 16) +
                                           2 * 16 + 11 * 16);
}

TEST(ParameterNames, EncoderDecoderNamesAndShapes) {
    Rng init(1);
    EncoderDecoder model(one_layer(), init, nullptr);
    EXPECT_EQ(sorted(names_and_shapes(model)), sorted(kEncoderDecoder));
}

// Registration order is what named_parameters(), state_dict() and the README list.
TEST(ParameterNames, DecoderLMRegistrationOrderAsDocumented) {
    Rng init(1);
    DecoderLM model(small_config(), init, nullptr);
    EXPECT_EQ(names_and_shapes(model), kDecoderLM);
}

TEST(ParameterNames, EncoderDecoderRegistrationOrderAsDocumented) {
    Rng init(1);
    EncoderDecoder model(one_layer(), init, nullptr);
    EXPECT_EQ(names_and_shapes(model), kEncoderDecoder);
}

// Variants drop exactly the parameters they do not have.
TEST(ParameterNames, VariantsDropWhatTheyDoNotHave) {
    Rng init(1);
    ModelConfig c = one_layer();
    c.positional = Positional::sinusoidal;  // a fixed table, not a parameter
    c.block.norm = Norm::post;              // blocks end normalised: no ln_f
    c.block.ffn = 0;                        // attention-only: no ffn, no ln2
    c.block.attention.bias = false;
    DecoderLM model(c, init, nullptr);
    const NameShapes expected = {
        {"tok_emb.weight", {11, 16}},
        {"blocks.0.attn.q_proj.weight", {16, 16}}, {"blocks.0.attn.k_proj.weight", {16, 16}},
        {"blocks.0.attn.v_proj.weight", {16, 16}}, {"blocks.0.attn.out_proj.weight", {16, 16}},
        {"blocks.0.ln1.weight", {16}}, {"blocks.0.ln1.bias", {16}},
        {"head.weight", {11, 16}},
    };
    EXPECT_EQ(names_and_shapes(model), expected);

    c.block.norm = Norm::none;  // no LayerNorm at all
    c.block.attention.kv_heads = 1;
    DecoderLM bare(c, init, nullptr);
    const NameShapes expected_bare = {
        {"tok_emb.weight", {11, 16}},
        {"blocks.0.attn.q_proj.weight", {16, 16}}, {"blocks.0.attn.k_proj.weight", {8, 16}},
        {"blocks.0.attn.v_proj.weight", {8, 16}}, {"blocks.0.attn.out_proj.weight", {16, 16}},
        {"head.weight", {11, 16}},
    };
    EXPECT_EQ(names_and_shapes(bare), expected_bare);
}

}  // namespace
}  // namespace attnlab
