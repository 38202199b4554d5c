// The architecture options imported models need (README, "Parameter names"),
// each against its formula written here from the modules' own parts:
// gelu_tanh, model.norm_eps, model.parallel, model.rotary_dims, model.head_bias.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "layer_test_util.h"

namespace attnlab {
namespace {

using namespace layer_testing;

Tensor draw(Rng& rng, const Shape& shape, DType dtype = DType::f64) {
    std::vector<double> v(numel_of(shape));
    for (double& e : v) e = rng.normal();
    return Tensor::from_values(v, shape, dtype);
}

void expect_near(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    const std::vector<double> x = a.values(), y = b.values();
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], tol) << what << " at " << i;
}

TEST(GeluTanh, IsGpt2sFormulaAndCloseToTheExactGelu) {
    const std::vector<double> xs = {-3.0, -1.0, -0.25, 0.0, 0.5, 2.0};
    const std::vector<double> y = gelu_tanh(Tensor::from_values(xs, {6}, DType::f64)).values();
    const std::vector<double> exact = gelu(Tensor::from_values(xs, {6}, DType::f64)).values();
    for (size_t i = 0; i < xs.size(); ++i) {
        const double x = xs[i];
        EXPECT_NEAR(y[i], 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))), 1e-15) << x;
        EXPECT_NEAR(y[i], exact[i], 1e-3) << x;  // an approximation: within 1e-3 everywhere
    }
    EXPECT_EQ(activation_choices().parse("gelu_tanh"), Activation::gelu_tanh);
}

TEST(NormEps, EveryNormOfTheModelTakesIt) {
    ModelConfig c = small_config();
    c.block.norm_eps = 0.25;  // large enough to see
    for (NormType type : {NormType::layer, NormType::rms, NormType::scale}) {
        c.block.norm_type = type;
        Rng init(1);
        DecoderLM lm(c, init, nullptr);
        const std::vector<const NormLayer*> norms = {lm.blocks[0]->res1.ln.get(), lm.blocks[1]->res2->ln.get(), lm.final_norm()};
        for (const NormLayer* norm : norms) {
            if (const auto* ln = dynamic_cast<const LayerNorm*>(norm)) EXPECT_EQ(ln->eps, 0.25);
            else if (const auto* rms = dynamic_cast<const RMSNorm*>(norm)) EXPECT_EQ(rms->eps, 0.25);
            else EXPECT_EQ(dynamic_cast<const ScaleNorm*>(norm)->eps, 0.25);
        }
    }
}

// x (B, T, n d_h): the first `dims` features of each head turned by the op rotary
// (as a head of width dims), the others unchanged.
TEST(RotaryDims, TurnsTheFirstFeaturesOfEachHeadAndPassesTheRest) {
    Rng rng(3);
    const size_t B = 2, T = 5, heads = 3, d_h = 8, dims = 4;
    const Tensor x = draw(rng, {B, T, heads * d_h});
    expect_near(rotary_features(x, heads, d_h, d_h, 2, 100.0), rotary(x, heads, 2, 100.0), 0.0, "all features: the op itself");
    const Tensor y = reshape(rotary_features(x, heads, d_h, dims, 2, 100.0), {B, T, heads, d_h});
    const Tensor per_head = reshape(x, {B, T, heads, d_h});
    const Tensor turned = rotary(reshape(slice(per_head, 3, 0, dims), {B, T, heads * dims}), heads, 2, 100.0);
    expect_near(slice(y, 3, 0, dims), reshape(turned, {B, T, heads, dims}), 0.0, "the first features");
    expect_near(slice(y, 3, dims, d_h), slice(per_head, 3, dims, d_h), 0.0, "the rest");
    // pair (0, dims/2) of head 1 at position 2 + t turns by angle (2 + t) base^0
    const std::vector<double> xv = per_head.values(), yv = y.values();
    for (size_t t = 0; t < T; ++t) {
        const size_t at = ((0 * T + t) * heads + 1) * d_h;
        const double a = 2.0 + static_cast<double>(t);
        EXPECT_NEAR(yv[at], xv[at] * std::cos(a) - xv[at + dims / 2] * std::sin(a), 1e-12) << t;
    }
}

TEST(RotaryDims, OnlyAnEvenCountUpToTheHeadWidth) {
    ModelConfig c = small_config(Norm::pre, Positional::rotary);
    for (size_t dims : {3, 10}) {  // head width 8
        c.rotary_dims = dims;
        Rng init(1);
        EXPECT_THROW(DecoderLM(c, init, nullptr), Error) << dims;
    }
}

// model.parallel: x + attn(ln1(x)) + ffn(ln2(x)), the feed-forward reading the block's input.
TEST(ParallelBlock, AddsAttentionAndFeedForwardOfTheSameInput) {
    ModelConfig c = small_config();
    c.block.parallel = true;
    Rng init(4), rng(5);
    DecoderLM lm(c, init, nullptr);
    lm.to(DType::f64);
    lm.eval();
    const DecoderBlock& block = *lm.blocks[0];
    const Tensor x = draw(rng, {2, 6, 16});
    const AttentionMask mask = lm.config.self_mask(random_tokens(rng, 2, 6, 11), {});
    const Tensor h1 = block.res1.ln->forward(x), h2 = block.res2->ln->forward(x);
    const Tensor want = x + block.attn.forward(h1, h1, mask).out + block.ffn->forward(h2);
    expect_near(block.forward(x, mask, Tensor(), AttentionMask()), want, 1e-12, "parallel block");
    EXPECT_EQ(block.hook_point_axes("resid_mid"), "");  // no stream between the sublayers
    EXPECT_EQ(block.hook_point_axes("resid_pre"), "batch pos d_model");

    ModelConfig post = c;  // pre-norm with a feed-forward only
    post.block.norm = Norm::post;
    EXPECT_THROW(DecoderLM(post, init, nullptr), Error);
}

TEST(HeadBias, IsAddedToTheLogits) {
    ModelConfig c = small_config();
    c.head_bias = true;
    Rng init(6), rng(7);
    DecoderLM lm(c, init, nullptr);
    lm.to(DType::f64);
    const Indices tokens = random_tokens(rng, 1, 4, 11);
    const Tensor before = lm.forward(tokens);
    const std::vector<double> drawn = lm.head.bias.values();  // as nn.Linear's, U(+-1/sqrt(D))
    std::vector<double> bias(11);
    for (size_t v = 0; v < 11; ++v) bias[v] = 0.1 * static_cast<double>(v);
    lm.head.bias.assign(Tensor::from_values(bias, {11}, DType::f64));
    const std::vector<double> a = before.values(), b = lm.forward(tokens).values();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i] - a[i], bias[i % 11] - drawn[i % 11], 1e-12) << i;
    bool named = false;
    for (const auto& [name, p] : lm.named_parameters()) named |= name == "head.bias";
    EXPECT_TRUE(named);
    c.tie_embeddings = true;  // the tied head is the embedding, which has no bias
    EXPECT_THROW(DecoderLM(c, init, nullptr), Error);
}

}  // namespace
}  // namespace attnlab
