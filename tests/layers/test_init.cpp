// model.init: torch's layer defaults, or GPT-2's (nanoGPT's) scheme, checked by
// the statistics of the drawn parameters (thousands of values each).
#include <gtest/gtest.h>

#include <cmath>

#include "layer_test_util.h"

namespace attnlab {
namespace {

struct Moments {
    double mean = 0, std = 0, max_abs = 0;
};

Moments moments(const Tensor& t) {
    const std::vector<double> v = t.values();
    Moments m;
    for (double x : v) m.mean += x, m.max_abs = std::max(m.max_abs, std::fabs(x));
    m.mean /= static_cast<double>(v.size());
    for (double x : v) m.std += (x - m.mean) * (x - m.mean);
    m.std = std::sqrt(m.std / static_cast<double>(v.size()));
    return m;
}

ModelConfig config(Init init) {
    ModelConfig c;
    c.vocab = 65;
    c.layers = 4;
    c.max_len = 64;
    c.block.attention = layer_testing::attention_config(128, 4);
    c.block.ffn = 512;
    c.init = init;
    return c;
}

TEST(Init, Gpt2DrawsMatricesFromNormal002AndScalesResidualOutputs) {
    Rng init(3);
    DecoderLM model(config(Init::gpt2), init, nullptr);
    const double residual = 0.02 / std::sqrt(2.0 * 4);
    size_t matrices = 0;
    for (const auto& [name, p] : model.named_parameters()) {
        const Moments m = moments(p);
        if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
            EXPECT_EQ(m.max_abs, 0.0) << name;
        } else if (p.dim() == 2) {
            ++matrices;
            const bool is_residual = name.find("out_proj.weight") != std::string::npos || name.find("fc2.weight") != std::string::npos;
            const double expected = is_residual ? residual : 0.02;
            EXPECT_NEAR(m.std, expected, 0.05 * expected) << name;  // >= 8192 values: within 5%
            EXPECT_NEAR(m.mean, 0.0, 0.05 * expected) << name;
        } else {  // the norms' weights
            EXPECT_EQ(m.mean, 1.0) << name;
        }
    }
    EXPECT_EQ(matrices, 2u + 4u * 6u + 1u);  // tok_emb, pos_emb; q, k, v, out, fc1, fc2 per block; head
}

TEST(Init, TransformerLensDrawsEveryMatrixFromNormal08OverSqrtWidth) {
    Rng init(4);
    DecoderLM model(config(Init::transformerlens), init, nullptr);
    const double expected = 0.8 / std::sqrt(128.0);
    for (const auto& [name, p] : model.named_parameters()) {
        const Moments m = moments(p);
        if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) EXPECT_EQ(m.max_abs, 0.0) << name;
        else if (p.dim() == 2) EXPECT_NEAR(m.std, expected, 0.05 * expected) << name;  // residual outputs too
    }
}

TEST(Init, TorchIsEachLayersDefault) {
    Rng init(3);
    DecoderLM model(config(Init::torch), init, nullptr);
    for (const auto& [name, p] : model.named_parameters()) {
        const Moments m = moments(p);
        if (name == "tok_emb.weight" || name == "pos_emb.weight") EXPECT_NEAR(m.std, 1.0, 0.05) << name;  // N(0, 1)
        if (name == "blocks.0.ffn.fc1.weight") EXPECT_NEAR(m.std, 1.0 / std::sqrt(3.0 * 128), 0.002) << name;  // U(+-1/sqrt(in))
    }
}

}  // namespace
}  // namespace attnlab
