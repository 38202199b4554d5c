// RMSNorm (model.norm_type = "rmsnorm") and ScaleNorm ("scalenorm"): each
// against its formula by hand, RMSNorm's place in both model kinds (the same
// slots as LayerNorm, a weight and no bias) and its hook point; every norm's
// frozen linear part; ScaleNorm's gradients in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "autograd/gradcheck.h"
#include "layer_test_util.h"
#include "layers/hooks.h"

namespace attnlab {
namespace {

using namespace layer_testing;

TEST(RMSNorm, MatchesTheFormulaByHand) {
    // rows (3, 4) and (1, -1); weight (2, 0.5)
    const Tensor x = Tensor::from_values({3, 4, 1, -1}, {2, 2}, DType::f64);
    const Tensor w = Tensor::from_values({2, 0.5}, {2}, DType::f64);
    const double eps = 1e-5;
    const double r0 = 1 / std::sqrt((9.0 + 16.0) / 2 + eps), r1 = 1 / std::sqrt((1.0 + 1.0) / 2 + eps);
    const std::vector<double> y = rms_norm(x, w, eps).values();
    const std::vector<double> want = {3 * r0 * 2, 4 * r0 * 0.5, 1 * r1 * 2, -1 * r1 * 0.5};
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], want[i], 1e-12) << i;
    // unlike LayerNorm it does not centre: a constant row stays at +-1 times the weight
    EXPECT_NEAR(rms_norm(Tensor::full({1, 3}, 5.0, DType::f64), Tensor(), eps).values()[0], 5 / std::sqrt(25 + eps), 1e-12);
    EXPECT_THROW(rms_norm(x, Tensor::ones({3}, DType::f64)), Error);
}

// NormLayer::frozen, the norm's linear part at a stream's statistics (what the
// direct logit attribution uses): frozen(x, x) plus the bias is the norm's
// output, and it is linear in the component.
TEST(NormFrozen, IsTheNormLessItsBiasAtTheStreamsStatisticsAndLinear) {
    Rng rng(5);
    for (NormType type : {NormType::layer, NormType::rms, NormType::scale}) {
        std::unique_ptr<NormLayer> norm = make_norm(type, 6);
        norm->to(DType::f64);
        if (type == NormType::scale) norm->weight.assign(Tensor::from_values({1.75}, {1}, DType::f64));
        else norm->weight.assign(Tensor::from_values({0.5, -1.0, 2.0, 1.5, 0.25, 3.0}, {6}, DType::f64));
        if (auto* ln = dynamic_cast<LayerNorm*>(norm.get()))
            ln->bias.assign(Tensor::from_values({0.1, 0.2, -0.3, 0.4, 0.0, -0.5}, {6}, DType::f64));
        auto draw = [&] {
            std::vector<double> v(2 * 3 * 6);
            for (double& e : v) e = rng.normal();
            return Tensor::from_values(v, {2, 3, 6}, DType::f64);
        };
        const Tensor x = draw(), a = draw();
        const Tensor bias_part = norm->forward(x) - norm->frozen(x, x);  // the bias at every position, or zeros
        const std::vector<double> b = bias_part.values();
        for (size_t i = 0; i < b.size(); ++i) {
            const double want = type != NormType::layer ? 0.0 : std::vector<double>{0.1, 0.2, -0.3, 0.4, 0.0, -0.5}[i % 6];
            EXPECT_NEAR(b[i], want, 1e-12) << to_string(type) << " " << i;
        }
        const std::vector<double> whole = norm->frozen(a + x, x).values();
        const std::vector<double> parts = (norm->frozen(a, x) + norm->frozen(x, x)).values();
        for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(whole[i], parts[i], 1e-12) << to_string(type) << " " << i;
    }
}

TEST(ScaleNorm, MatchesTheFormulaByHandAndItsGradients) {
    // rows (3, 4) and (1, -1): norms 5 and sqrt 2; one scale g, initially sqrt(D)
    std::unique_ptr<NormLayer> norm = make_norm(NormType::scale, 2);
    norm->to(DType::f64);
    EXPECT_EQ(norm->weight.shape(), (Shape{1}));
    EXPECT_NEAR(norm->weight.values()[0], std::sqrt(2.0), 1e-7);
    norm->weight.assign(Tensor::from_values({1.5}, {1}, DType::f64));
    const Tensor x = Tensor::from_values({3, 4, 1, -1}, {2, 2}, DType::f64);
    const double r0 = 1.5 / std::sqrt(25 + 1e-5), r1 = 1.5 / std::sqrt(2 + 1e-5);
    const std::vector<double> y = norm->forward(x).values();
    const std::vector<double> want = {3 * r0, 4 * r0, 1 * r1, -1 * r1};
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], want[i], 1e-12) << i;
    EXPECT_EQ(parse_norm_type("scalenorm"), NormType::scale);
    // float64 gradients of input and scale against central differences (the
    // case's scale tensor stands in the layer's weight slot, so the graph runs through it)
    Rng rng(9);
    std::unique_ptr<NormLayer> layer = make_norm(NormType::scale, 5);
    layer->to(DType::f64);
    const GradcheckCase c{"scalenorm", "(2,3,5) with scale 1.3",
                          {gradcheck_input(rng, {2, 3, 5}), Tensor::from_values({1.3}, {1}, DType::f64).set_requires_grad(true)},
                          [&](const std::vector<Tensor>& t) {
                              layer->weight = t[1];
                              return layer->forward(t[0]);
                          }};
    const GradcheckResult r = gradcheck(c);
    EXPECT_TRUE(r.passed) << r.failure;
}

TEST(RMSNorm, TakesEveryNormSlotWithAWeightAndNoBias) {
    Rng init(1);
    ModelConfig c = small_config();
    c.block.norm_type = NormType::rms;
    DecoderLM decoder(c, init, nullptr);
    std::vector<std::string> norms;
    for (const auto& [name, p] : decoder.named_parameters())
        if (name.find("ln") != std::string::npos) norms.push_back(name);
    EXPECT_EQ(norms, (std::vector<std::string>{"blocks.0.ln1.weight", "blocks.0.ln2.weight", "blocks.1.ln1.weight",
                                               "blocks.1.ln2.weight", "ln_f.weight"}));
    EncoderDecoder enc_dec(c, init, nullptr);
    size_t rms = 0;
    for (const auto& [name, p] : enc_dec.named_parameters()) {
        EXPECT_EQ(name.find("ln") != std::string::npos && name.find(".bias") != std::string::npos, false) << name;
        rms += name.find("ln") != std::string::npos;
    }
    EXPECT_EQ(rms, 2u * 2 + 2u * 3 + 2);  // encoder blocks ln1, ln2; decoder blocks ln1, ln_cross, ln2; the two final norms
    EXPECT_EQ(parse_norm_type("rmsnorm"), NormType::rms);
    EXPECT_EQ(to_string(NormType::layer), "layernorm");
    EXPECT_THROW(parse_norm_type("rms"), Error);
}

TEST(RMSNorm, ItsOutputIsAHookPointAndFeedsTheSublayer) {
    Rng init(2), data(3);
    ModelConfig c = small_config();
    c.block.norm_type = NormType::rms;
    DecoderLM model(c, init, nullptr);
    model.eval();
    Hooks hooks;
    hooks.record("blocks.0.ln1.out").record("blocks.0.resid_pre").record("blocks.0.attn.in");
    recorded_forward(model, hooks, [&] { return model.forward(random_tokens(data, 2, 5, 11)); });
    const std::vector<double> normed = hooks.last("blocks.0.ln1.out").values();
    EXPECT_EQ(normed, hooks.last("blocks.0.attn.in").values());  // pre-norm: the attention reads the norm's output
    const std::vector<double> x = hooks.last("blocks.0.resid_pre").values();
    for (size_t row = 0; row < 10; ++row) {  // weight ones at initialisation: mean square 1 per row
        double squares = 0, ratio = 0;
        for (size_t d = 0; d < 16; ++d) squares += normed[row * 16 + d] * normed[row * 16 + d];
        EXPECT_NEAR(squares / 16, 1.0, 1e-4) << row;
        for (size_t d = 0; d < 16; ++d) ratio += normed[row * 16 + d] / x[row * 16 + d];
        EXPECT_GT(ratio, 0.0);  // a positive rescaling of the row, no shift
    }
}

}  // namespace
}  // namespace attnlab
