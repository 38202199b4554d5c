// Float64 finite-difference checks of whole layers: every input AND every
// parameter of MultiHeadAttention, EncoderBlock and DecoderBlock (with
// cross-attention), for norm pre / post / none and ffn 0 / 8.
//
// Modules are built in float32; Module::to(DType::f64) converts every registered
// parameter's storage in place (load_state_dict and Tensor::assign, by contrast,
// convert INTO the parameter's dtype, tested below). The layers then run fully
// in float64 and gradcheck perturbs the very parameters the module reads.
#include <gtest/gtest.h>

#include "autograd/gradcheck.h"
#include "layer_test_util.h"

namespace attnlab {
namespace {

using namespace layer_testing;

// Every parameter of `m` becomes float64 in place (values kept, grads dropped).
std::vector<Tensor> to_float64(Module& m) {
    m.to(DType::f64);
    m.eval();
    return m.parameters();
}

std::vector<Tensor> concat(std::vector<Tensor> a, const std::vector<Tensor>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

void expect_passes(const GradcheckCase& c) {
    SCOPED_TRACE(c.op + ": " + c.name);
    const Tensor y = c.fn(c.inputs);
    ASSERT_EQ(y.dtype(), DType::f64);
    const GradcheckResult r = gradcheck(c);
    EXPECT_TRUE(r.passed) << r.failure << " (max abs error " << r.max_abs_error << ")";
    EXPECT_LT(r.max_abs_error, 1e-6);
}

AttentionMask make_mask(bool causal, std::vector<size_t> lengths = {}) {
    AttentionMask m;
    m.causal = causal;
    m.key_lengths = std::move(lengths);
    return m;
}

// What the issue asked to check first: the float32 parameters stay float32.
TEST(LayerGradcheck, LoadStateDictKeepsFloat32) {
    Rng init(1);
    MultiHeadAttention mha(attention_config(4, 2), init, nullptr);
    NamedTensors f64_state;
    for (const auto& [name, p] : mha.state_dict()) f64_state.emplace_back(name, p.to(DType::f64));
    mha.load_state_dict(f64_state);
    for (const auto& [name, p] : mha.named_parameters()) EXPECT_EQ(p.dtype(), DType::f32) << name;
    // and a float32 layer refuses float64 input rather than converting silently
    const Tensor x = Tensor::zeros({1, 2, 4}, DType::f64);
    const std::string message = error_message([&] { mha.forward(x, x, {}); });
    EXPECT_TRUE(starts_with(message, "[linear]") && contains(message, "float32") && contains(message, "float64")) << message;
}

TEST(LayerGradcheck, MultiHeadSelfAttentionCausal) {
    Rng init(2), data(3);
    MultiHeadAttention mha(attention_config(4, 2), init, nullptr);
    const std::vector<Tensor> params = to_float64(mha);
    expect_passes({"MultiHeadAttention", "self, causal, B=1 T=3 D=4 H=2", concat({gradcheck_input(data, {1, 3, 4})}, params),
                   [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], make_mask(true)).out; }});
}

TEST(LayerGradcheck, MultiHeadCrossAttentionKeyPadding) {
    Rng init(4), data(5);
    AttentionConfig c = attention_config(4, 2);
    c.kv_width = 3;
    MultiHeadAttention mha(c, init, nullptr);
    const std::vector<Tensor> params = to_float64(mha);
    expect_passes({"MultiHeadAttention", "cross, Tq=2 Tk=3, key lengths 2 and 3",
                   concat({gradcheck_input(data, {2, 2, 4}), gradcheck_input(data, {2, 3, 3})}, params),
                   [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[1], make_mask(false, {2, 3})).out; }});
}

TEST(LayerGradcheck, MultiHeadGroupedKV) {
    Rng init(6), data(7);
    MultiHeadAttention mha(attention_config(4, 2, 1), init, nullptr);
    const std::vector<Tensor> params = to_float64(mha);
    expect_passes({"MultiHeadAttention", "grouped K/V 2 over 1, causal and padding",
                   concat({gradcheck_input(data, {2, 3, 4})}, params),
                   [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], make_mask(true, {3, 2})).out; }});
}

TEST(LayerGradcheck, MultiHeadZeroPolicyEmptyItem) {
    Rng init(8), data(9);
    AttentionConfig c = attention_config(4, 2);
    c.masked_rows = MaskedRows::zero;
    MultiHeadAttention mha(c, init, nullptr);
    const std::vector<Tensor> params = to_float64(mha);
    expect_passes({"MultiHeadAttention", "masked_rows zero, key lengths 3 and 0",
                   concat({gradcheck_input(data, {2, 3, 4})}, params),
                   [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], make_mask(false, {3, 0})).out; }});
}

BlockConfig block_config(Norm norm, size_t ffn) {
    BlockConfig c;
    c.attention = attention_config(4, 2);
    c.norm = norm;
    c.ffn = ffn;
    return c;
}

struct BlockVariant {
    Norm norm;
    size_t ffn;
};
constexpr BlockVariant kBlockVariants[] = {{Norm::pre, 8}, {Norm::pre, 0}, {Norm::post, 8},
                                           {Norm::post, 0}, {Norm::none, 8}, {Norm::none, 0}};

std::string describe(const BlockVariant& v) { return "norm " + to_string(v.norm) + ", ffn " + std::to_string(v.ffn); }

TEST(LayerGradcheck, EncoderBlock) {
    for (const BlockVariant& v : kBlockVariants) {
        Rng init(10), data(11);
        EncoderBlock block(block_config(v.norm, v.ffn), init, nullptr);
        const std::vector<Tensor> params = to_float64(block);
        EXPECT_EQ(params.size(), 8u + (v.norm != Norm::none ? 2 : 0) + (v.ffn ? 4u + (v.norm != Norm::none ? 2 : 0) : 0));
        expect_passes({"EncoderBlock", describe(v) + ", key lengths 2 and 3",
                       concat({gradcheck_input(data, {2, 3, 4})}, params),
                       [&](const std::vector<Tensor>& in) { return block.forward(in[0], make_mask(false, {2, 3})); }});
    }
}

TEST(LayerGradcheck, DecoderBlockWithCrossAttention) {
    for (const BlockVariant& v : kBlockVariants) {
        Rng init(12), data(13);
        DecoderBlock block(block_config(v.norm, v.ffn), true, init, nullptr);
        const std::vector<Tensor> params = to_float64(block);
        // x (2, 2, 4) over memory (2, 3, 4): the memory's gradient is what trains the encoder
        expect_passes({"DecoderBlock", describe(v) + ", causal self, cross with source lengths 2 and 3",
                       concat({gradcheck_input(data, {2, 2, 4}), gradcheck_input(data, {2, 3, 4})}, params),
                       [&](const std::vector<Tensor>& in) {
                           return block.forward(in[0], make_mask(true), in[1], make_mask(false, {2, 3}));
                       }});
    }
}

// The cached decoder path has the same gradient as the full one (a fresh cache per call).
TEST(LayerGradcheck, DecoderBlockCachedPath) {
    Rng init(14), data(15);
    DecoderBlock block(block_config(Norm::pre, 8), true, init, nullptr);
    const std::vector<Tensor> params = to_float64(block);
    expect_passes({"DecoderBlock", "KV cache, two new positions over a fresh cache",
                   concat({gradcheck_input(data, {1, 2, 4}), gradcheck_input(data, {1, 3, 4})}, params),
                   [&](const std::vector<Tensor>& in) {
                       DecoderBlock::Caches caches;
                       return block.forward(in[0], make_mask(true), in[1], make_mask(false, {3}), &caches);
                   }});
}


// nanoGPT's choices: no bias anywhere and the output head tied to the token
// embedding. The one tensor's gradient is the sum of its two uses (the lookup
// and the logits), checked by perturbing it; no head.weight and no bias exists.
TEST(LayerGradcheck, DecoderLMTiedEmbeddingsWithoutBiases) {
    for (const Norm norm : {Norm::pre, Norm::post}) {
        ModelConfig c;
        c.vocab = 7;
        c.layers = 1;
        c.max_len = 4;
        c.block = block_config(norm, 8);
        c.block.attention.bias = c.block.ffn_bias = c.block.norm_bias = false;
        c.tie_embeddings = true;
        Rng init(16);
        DecoderLM model(c, init, nullptr);
        model.to(DType::f64);
        model.eval();
        NamedTensors named = model.named_parameters();
        std::vector<Tensor> params;
        for (const auto& [name, p] : named) {
            EXPECT_NE(name, "head.weight");
            EXPECT_EQ(name.find(".bias"), std::string::npos) << name;
            params.push_back(p);
        }
        EXPECT_EQ(named.front().first, "tok_emb.weight");
        const Indices tokens({2, 3}, {3, 1, 6, 2, 5, 5});
        expect_passes({"DecoderLM", std::string("tied, no biases, norm ") + to_string(norm), params,
                                                [&](const std::vector<Tensor>&) { return model.forward(tokens, {3, 2}); }});
    }
}

}  // namespace
}  // namespace attnlab
