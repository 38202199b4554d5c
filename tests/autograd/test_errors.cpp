// Every misuse throws attnlab::Error whose message starts with "[op]" and names
// the shapes (or values) involved.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "expect.h"

namespace attnlab {
namespace {

using testing::error_message;
using testing::expect_error;

Tensor zeros(const Shape& s, DType dtype = DType::f32) { return Tensor::zeros(s, dtype); }

TEST(Errors, MatmulInnerSizes) {
    EXPECT_EQ(error_message([] { matmul(zeros({2, 3}), zeros({4, 5})); }), "[matmul] (2,3) @ (4,5): inner sizes differ");
    expect_error([] { matmul(zeros({2, 2, 3}), zeros({3, 3, 4})); }, "[matmul]", {"(2,2,3)", "(3,3,4)", "batch"});
    expect_error([] { matmul(zeros({3}), zeros({3, 2})); }, "[matmul]", {"(3)", "(3,2)"});
    expect_error([] { matmul(zeros({2, 3}), zeros({3, 2}, DType::f64)); }, "[matmul]", {"float32", "float64"});
}

TEST(Errors, LinearWeightAndBiasSizes) {
    expect_error([] { linear(zeros({2, 3}), zeros({2, 4}), Tensor()); }, "[linear]", {"(2,3)", "(2,4)"});
    expect_error([] { linear(zeros({2, 3}), zeros({2, 3}), zeros({3})); }, "[linear]", {"(3)", "(2,3)"});
    expect_error([] { linear(zeros({2, 3}), zeros({2, 3}, DType::f64), Tensor()); }, "[linear]", {"float32", "float64"});
}

TEST(Errors, BinaryOpsThatDoNotBroadcast) {
    const std::string add_message = error_message([] { add(zeros({2, 3}), zeros({4, 3})); });
    EXPECT_EQ(add_message.rfind("[add]", 0), 0u) << add_message;
    EXPECT_NE(add_message.find("(2,3)"), std::string::npos) << add_message;
    EXPECT_NE(add_message.find("(4,3)"), std::string::npos) << add_message;
    expect_error([] { sub(zeros({2, 3}), zeros({2})); }, "[sub]", {"(2,3)", "(2)"});
    expect_error([] { mul(zeros({3, 1, 2}), zeros({4, 3})); }, "[mul]", {"(3,1,2)", "(4,3)"});
    expect_error([] { div(zeros({5}), zeros({4})); }, "[div]", {"(5)", "(4)"});
    expect_error([] { zeros({2, 3}) + zeros({3, 2}); }, "[add]", {"(2,3)", "(3,2)"});
}

TEST(Errors, BinaryOpsWithDifferentDtypes) {
    EXPECT_EQ(error_message([] { add(zeros({2}), zeros({2}, DType::f64)); }), "[add] dtypes differ: float32 vs float64");
    EXPECT_EQ(error_message([] { mul(zeros({2}, DType::f64), zeros({2})); }), "[mul] dtypes differ: float64 vs float32");
}

TEST(Errors, UndefinedOperand) {
    expect_error([] { add(zeros({2}), Tensor()); }, "[add]", {"undefined"});
    expect_error([] { exp(Tensor()); }, "[exp]", {"undefined"});
}

TEST(Errors, ReshapeWithTheWrongCount) {
    expect_error([] { reshape(zeros({2, 3}), {4, 2}); }, "[reshape]", {"(2,3)", "(4,2)"});
}

TEST(Errors, PermuteWithARepeatedOrMissingAxis) {
    expect_error([] { permute(zeros({2, 3, 4}), {0, 1, 1}); }, "[permute]", {"repeated", "(2,3,4)"});
    expect_error([] { permute(zeros({2, 3, 4}), {0, 1}); }, "[permute]", {"(2,3,4)"});
    expect_error([] { permute(zeros({2, 3}), {0, 2}); }, "[permute]", {"(2,3)"});
    expect_error([] { transpose(zeros({2, 3}), 0, 2); }, "[transpose]", {"(2,3)"});
}

TEST(Errors, SliceOutOfRange) {
    expect_error([] { slice(zeros({2, 4}), 1, 1, 5); }, "[slice]", {"(2,4)"});
    expect_error([] { slice(zeros({2, 4}), 1, 3, 2); }, "[slice]", {"(2,4)"});
    expect_error([] { slice(zeros({2, 4}), 2, 0, 1); }, "[slice]", {"(2,4)"});
}

TEST(Errors, ConcatAndSplitWithMismatchedShapes) {
    expect_error([] { concat({zeros({2, 3}), zeros({3, 4})}, 0); }, "[concat]", {"(2,3)", "(3,4)"});
    expect_error([] { concat({zeros({2, 3}), zeros({2, 3, 1})}, 0); }, "[concat]", {"(2,3)", "(2,3,1)"});
    expect_error([] { concat({zeros({2, 3}), zeros({2, 3}, DType::f64)}, 0); }, "[concat]", {"float32", "float64"});
    expect_error([] { concat({}, 0); }, "[concat]");
    expect_error([] { split(zeros({5, 2}), {2, 2}, 0); }, "[split]", {"(5,2)", "4"});
}

TEST(Errors, ReductionAxes) {
    expect_error([] { sum(zeros({2, 3}), {2}); }, "[sum]", {"(2,3)"});
    expect_error([] { mean(zeros({2, 3}), {0, -2}); }, "[mean]", {"repeated", "(2,3)"});
    expect_error([] { max(zeros({2, 3}), {-3}); }, "[max]", {"(2,3)"});
}

TEST(Errors, EmbeddingIndexOutOfRange) {
    expect_error([] { embedding(zeros({5, 3}), Indices({2}, {1, 5})); }, "[embedding]", {"5", "(5,3)"});
    expect_error([] { embedding(zeros({5, 3}), Indices({1}, {-1})); }, "[embedding]", {"-1", "(5,3)"});
    expect_error([] { embedding(zeros({5}), Indices({1}, {0})); }, "[embedding]", {"(5)"});
}

TEST(Errors, CrossEntropyTargets) {
    expect_error([] { cross_entropy(zeros({2, 4}), Indices({2}, {0, 4})); }, "[cross_entropy]", {"4", "classes"});
    expect_error([] { cross_entropy(zeros({2, 4}), Indices({2}, {-1, 0})); }, "[cross_entropy]", {"-1"});
    expect_error([] { cross_entropy(zeros({2, 4}), Indices({3}, {0, 0, 0})); }, "[cross_entropy]", {"(3)", "(2,4)"});
    expect_error([] { cross_entropy(zeros({2, 4}), Indices({2}, {0, 0}), Mask({3}, {1, 1, 1})); }, "[cross_entropy]",
                 {"(3)", "(2)"});
}

TEST(Errors, LayerNormAffineOfTheWrongSize) {
    expect_error([] { layer_norm(zeros({2, 4}), zeros({3}), Tensor()); }, "[layer_norm]", {"(2,4)", "(3)"});
    expect_error([] { layer_norm(zeros({2, 4}), Tensor(), zeros({4, 1})); }, "[layer_norm]", {"(2,4)", "(4,1)"});
    expect_error([] { layer_norm(zeros({2, 4}), zeros({4}, DType::f64), Tensor()); }, "[layer_norm]",
                 {"float32", "float64"});
}

TEST(Errors, MaskedFillWithAMaskThatDoesNotBroadcast) {
    expect_error([] { masked_fill(zeros({2, 4}), Mask::filled({3}, true), 0.0); }, "[masked_fill]", {"(3)", "(2,4)"});
    // broadcasts with x, but to a larger shape than x
    expect_error([] { masked_fill(zeros({4}), Mask::filled({2, 4}, true), 0.0); }, "[masked_fill]", {"(2,4)", "(4)"});
}

TEST(Errors, SoftmaxAxisOutOfRange) {
    expect_error([] { softmax(zeros({2, 3}), 2); }, "[softmax]", {"2", "(2,3)"});
    expect_error([] { softmax(zeros({2, 3}), -3); }, "[softmax]", {"-3", "(2,3)"});
    expect_error([] { log_softmax(zeros({2, 3}), 5); }, "[log_softmax]", {"5", "(2,3)"});
}

TEST(Errors, DropoutProbabilityOutsideTheUnitInterval) {
    Rng rng(0);
    for (double p : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()})
        expect_error([&] { dropout(zeros({2}), p, true, rng); }, "[dropout]", {"[0, 1]"});
    // checked even when the op would be the identity
    expect_error([&] { dropout(zeros({2}), 2.0, false, rng); }, "[dropout]");
}

}  // namespace
}  // namespace attnlab
