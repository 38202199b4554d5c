// One attention score split into its upstream components (experiments/analysis/
// score_parts.h): the parts add up to the score the model computes, on every
// norm, position scheme and grouped K/V; ALiBi's penalty is the modifier, to the
// digit; the components add up to the stream; bad heads, positions, keys the
// query cannot see and models without a residual sum are refused.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/variant.h"
#include "experiments/analysis/score_parts.h"
#include "experiments/config/config.h"
#include "experiments/run/model_factory.h"

namespace attnlab {
namespace {

std::unique_ptr<TaskModel> random_model(const std::vector<std::string>& overrides) {
    Config config = default_config();
    for (const std::string o : {"model.layers=3", "model.width=16", "model.heads=4", "model.ffn=32", "model.max_len=20"})
        apply_override(config, o);
    for (const std::string& o : overrides) apply_override(config, o);
    validate(config);
    Rng init(11);
    auto model = std::make_unique<TaskModel>(config, 20, init, nullptr);
    model->module().to(DType::f64);  // the sum checked to float64 rounding
    return model;
}

const std::vector<int32_t> kTokens = {5, 9, 3, 12, 5, 9, 3, 7, 11, 4};

TEST(ScoreParts, ThePartsAddUpToTheScoreOnEveryArchitecture) {
    const std::vector<std::vector<std::string>> cases = {
        {},
        {"model.positional=rotary"},
        {"model.norm_type=rmsnorm", "model.kv_heads=2"},
        {"model.norm=none", "model.positional=sinusoidal"},
        {"model.bias=false", "model.ffn=0", "model.norm_bias=false"},
        {"model.norm_type=scalenorm", "model.positional=none"},
    };
    for (const auto& overrides : cases) {
        std::string name;
        for (const std::string& o : overrides) name += o + " ";
        const auto model = random_model(overrides);
        for (const auto& [layer, head, query, key] : {std::array<size_t, 4>{0, 1, 9, 2}, {2, 3, 9, 9}, {1, 0, 6, 0}, {2, 2, 7, 3}}) {
            const ScoreParts r = score_parts(*model, kTokens, layer, head, query, key);
            double sum = 0;
            for (double p : r.parts) sum += p;
            EXPECT_NEAR(sum, r.score, 1e-9 * std::max(1.0, std::abs(r.score))) << name << layer << "." << head;
            EXPECT_NEAR(r.modifier, 0.0, 1e-9 * std::max(1.0, std::abs(r.score))) << name;
            EXPECT_LT(r.stream_error, 1e-12) << name;
            EXPECT_EQ(r.parts.size(), r.components.size() * r.components.size());
            EXPECT_EQ(r.components.back(), "bias");
            // earlier heads only: layer 2 sees 8 heads and 2 feed-forwards (when there are any)
            const size_t heads = static_cast<size_t>(std::count_if(r.components.begin(), r.components.end(),
                                                                   [](const std::string& c) { return c.find('.') != std::string::npos && c.rfind("mlp", 0) != 0; }));
            EXPECT_EQ(heads, layer * 4) << name;
        }
    }
}

TEST(ScoreParts, AlibisPenaltyIsTheModifier) {
    const auto model = random_model({"model.positional=alibi"});
    const ScoreParts r = score_parts(*model, kTokens, 1, 2, 8, 3);
    EXPECT_NEAR(r.modifier, -alibi_slope(2, 4) * 5.0, 1e-9);
}

TEST(ScoreParts, BadRequestsAreRefused) {
    const auto model = random_model({});
    auto refused = [&](size_t layer, size_t head, size_t query, size_t key, const std::string& says) {
        try {
            score_parts(*model, kTokens, layer, head, query, key);
            ADD_FAILURE() << "not refused: " << says;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
        }
    };
    refused(3, 0, 1, 0, "3 layers");
    refused(0, 4, 1, 0, "4 heads");
    refused(0, 0, 10, 0, "10 positions");
    refused(0, 0, 2, 5, "not eligible");  // a later key: causal
    const auto post = random_model({"model.norm=post"});
    EXPECT_THROW(score_parts(*post, kTokens, 0, 0, 1, 0), Error);
}

}  // namespace
}  // namespace attnlab
