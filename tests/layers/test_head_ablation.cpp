// model.ablate_heads (AttentionConfig::ablated_heads): an ablated head's output z
// is exactly zero, so its queries, keys and values get no gradient through the
// output; the other heads' are untouched, and the gradients stay exact (float64
// finite differences).
#include <gtest/gtest.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "layers/hooks.h"
#include "layers/models.h"
#include "layer_test_util.h"

namespace attnlab {
namespace {

ModelConfig two_layers(std::vector<std::pair<size_t, size_t>> ablated) {
    ModelConfig c;
    c.vocab = 11;
    c.layers = 2;
    c.max_len = 6;
    c.block.attention.width = 8;
    c.block.attention.heads = 2;
    c.block.ffn = 0;
    c.ablated_heads = std::move(ablated);
    return c;
}

TEST(HeadAblation, TheHeadsOutputIsZeroAndItsProjectionsGetNoGradient) {
    Rng init(5);
    DecoderLM lm(two_layers({{1, 0}}), init, nullptr);
    const Indices tokens({2, 5}, {3, 4, 5, 6, 7, 8, 9, 10, 3, 4});
    Hooks hooks;
    hooks.record("blocks.*.attn.z");
    Tensor logits;
    {
        HookScope scope(lm, hooks);
        logits = lm.forward(tokens, {5, 3});
    }
    const std::vector<double> z1 = hooks.last("blocks.1.attn.z").values();  // (B, T, H, d_h): head 0 first in each row
    const size_t d_h = 4;
    double kept = 0;
    for (size_t row = 0; row < z1.size() / (2 * d_h); ++row)
        for (size_t j = 0; j < d_h; ++j) {
            EXPECT_EQ(z1[row * 2 * d_h + j], 0.0) << "row " << row;
            kept += std::abs(z1[row * 2 * d_h + d_h + j]);
        }
    EXPECT_GT(kept, 0.0) << "head 1 of layer 1 still works";

    sum(logits * logits).backward();
    const std::vector<double> gq = lm.blocks[1]->attn.q_proj.weight.grad().values();  // (H d_h, D): head 0's rows first
    const size_t D = 8;
    double other = 0;
    for (size_t r = 0; r < 2 * d_h; ++r)
        for (size_t c = 0; c < D; ++c) {
            if (r < d_h) EXPECT_EQ(gq[r * D + c], 0.0);
            else other += std::abs(gq[r * D + c]);
        }
    EXPECT_GT(other, 0.0);
    EXPECT_GT(std::abs(lm.blocks[0]->attn.q_proj.weight.grad().values()[0]) + 1.0, 1.0);  // layer 0 untouched by the ablation
}

TEST(HeadAblation, GradientsStayExact) {
    Rng init(6), data(7);
    AttentionConfig c = layer_testing::attention_config(4, 2);
    c.ablated_heads = {1};
    MultiHeadAttention mha(c, init, nullptr);
    mha.to(DType::f64);
    mha.eval();
    std::vector<Tensor> inputs{gradcheck_input(data, {1, 3, 4})};
    for (const Tensor& p : mha.parameters()) inputs.push_back(p);
    AttentionMask causal;
    causal.causal = true;
    const GradcheckResult r = gradcheck({"MultiHeadAttention", "self, causal, head 1 ablated", inputs,
                                         [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], causal).out; }});
    EXPECT_TRUE(r.passed) << r.failure;
}

TEST(HeadAblation, OutOfRangeHeadsAreRefused) {
    Rng init(7);
    EXPECT_THROW(DecoderLM(two_layers({{2, 0}}), init, nullptr), Error);
    EXPECT_THROW(DecoderLM(two_layers({{0, 2}}), init, nullptr), Error);
    ModelConfig enc = two_layers({{0, 0}});
    EXPECT_THROW(EncoderDecoder(enc, init, nullptr), Error);
}

}  // namespace
}  // namespace attnlab
