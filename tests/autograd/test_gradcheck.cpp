// Every registered gradient-check case passes, every op has one, and gradcheck
// itself notices a wrong gradient.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"

namespace attnlab {
namespace {

const std::vector<GradcheckCase>& registry() {
    static const std::vector<GradcheckCase> cases = gradcheck_registry();
    return cases;
}

std::vector<size_t> registry_indices() {
    std::vector<size_t> indices(registry().size());
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = i;
    return indices;
}

// "softmax_1": the op and the case's position among that op's cases.
std::string case_label(const ::testing::TestParamInfo<size_t>& info) {
    const std::string& op = registry()[info.param].op;
    size_t same_op_before = 0;
    for (size_t i = 0; i < info.param; ++i) same_op_before += registry()[i].op == op;
    return op + "_" + std::to_string(same_op_before);
}

class RegistryCase : public ::testing::TestWithParam<size_t> {};

TEST_P(RegistryCase, PassesGradcheck) {
    const GradcheckCase& c = registry()[GetParam()];
    const GradcheckResult result = gradcheck(c);
    EXPECT_TRUE(result.passed) << "[" << c.op << "] " << c.name << ": " << result.failure
                               << " (max abs error " << result.max_abs_error << ")";
}

INSTANTIATE_TEST_SUITE_P(Registry, RegistryCase, ::testing::ValuesIn(registry_indices()), case_label);

// Names from every `constexpr const char* op = "name";` line of autograd/*.cpp.
std::set<std::string> ops_in_source() {
    const std::regex pattern(R"re(constexpr const char\* op = "(\w+)";)re");
    std::set<std::string> ops;
    for (const auto& entry : std::filesystem::directory_iterator(ATTNLAB_SOURCE_DIR "/autograd")) {
        if (entry.path().extension() != ".cpp") continue;
        std::ifstream file(entry.path());
        std::stringstream text;
        text << file.rdbuf();
        const std::string source = text.str();
        for (auto it = std::sregex_iterator(source.begin(), source.end(), pattern); it != std::sregex_iterator(); ++it)
            ops.insert((*it)[1].str());
    }
    return ops;
}

TEST(GradcheckRegistry, EveryOpInTheSourceHasACase) {
    const std::set<std::string> ops = ops_in_source();
    // 27 today; the floor stops this test passing vacuously if the pattern stops matching.
    ASSERT_GE(ops.size(), 25u) << "the op-name pattern matched only " << ops.size() << " ops";
    std::set<std::string> covered;
    for (const GradcheckCase& c : registry()) covered.insert(c.op);
    std::string missing;
    for (const std::string& op : ops)
        if (!covered.count(op)) missing += (missing.empty() ? "" : ", ") + op;
    EXPECT_TRUE(missing.empty()) << "ops without a gradcheck case: " << missing;
}

TEST(GradcheckRegistry, CasesAreFloat64AndNamed) {
    for (const GradcheckCase& c : registry()) {
        EXPECT_FALSE(c.name.empty()) << c.op;
        for (const Tensor& in : c.inputs) EXPECT_EQ(in.dtype(), DType::f64) << c.op << ": " << c.name;
    }
}

// x in [0.5, 1.5): far enough from 0 that a missing term is well above tolerance.
Tensor positive_input(const Shape& shape) {
    Rng rng(7);
    return gradcheck_input(rng, shape, 0.5, 1.5);
}

TEST(Gradcheck, AcceptsACorrectComposition) {
    // y = sum(x*x, axis 1) / (1 + exp(x))  broadcast over (2,3)
    GradcheckCase c{"composition", "x*x summed, over 1+exp(x)", {positive_input({2, 3})},
                    [](const std::vector<Tensor>& t) {
                        return div(sum(mul(t[0], t[0]), {1}, true), exp(t[0]) + 1.0);
                    }};
    const GradcheckResult result = gradcheck(c);
    EXPECT_TRUE(result.passed) << result.failure;
    EXPECT_LT(result.max_abs_error, 1e-7);
    EXPECT_TRUE(result.failure.empty());
}

TEST(Gradcheck, DetectsAGradientMissingATerm) {
    // y = x * detach(x): the value is x^2 (numeric slope 2x) but the graph only
    // sees the first factor, so the analytic gradient is x: off by x >= 0.5.
    const Tensor x = positive_input({2, 3});
    GradcheckCase c{"mul", "x * detach(x)", {x},
                    [](const std::vector<Tensor>& t) { return mul(t[0], t[0].detach()); }};
    const GradcheckResult result = gradcheck(c);
    EXPECT_FALSE(result.passed);
    EXPECT_NE(result.failure.find("analytic"), std::string::npos) << result.failure;
    // the largest error is the missing term itself, max |x|
    double max_x = 0;
    for (double v : x.values()) max_x = std::max(max_x, v);
    EXPECT_NEAR(result.max_abs_error, max_x, 1e-6);
}

TEST(Gradcheck, DetectsAGradientWithTheWrongScale) {
    // y = 2x computed as x + detach(x): analytic slope 1, numeric slope 2.
    GradcheckCase c{"add", "x + detach(x)", {positive_input({3})},
                    [](const std::vector<Tensor>& t) { return add(t[0], t[0].detach()); }};
    const GradcheckResult result = gradcheck(c);
    EXPECT_FALSE(result.passed);
    EXPECT_NEAR(result.max_abs_error, 1.0, 1e-6);
}

TEST(Gradcheck, RejectsFloat32Inputs) {
    GradcheckCase c{"neg", "float32", {Tensor::ones({2}, DType::f32, true)},
                    [](const std::vector<Tensor>& t) { return neg(t[0]); }};
    EXPECT_THROW(gradcheck(c), Error);
}

}  // namespace
}  // namespace attnlab
