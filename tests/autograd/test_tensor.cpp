// Tensor construction, accessors and the backward pass: accumulation, graph
// freeing, retain_graph, seeds, NoGradGuard, detach, deep graphs.
#include <gtest/gtest.h>

#include <cstdlib>

#include "autograd/ops.h"
#include "expect.h"

namespace attnlab {
namespace {

using testing::error_message;
using testing::expect_error;
using testing::expect_values;
using testing::starts_with;

Tensor leaf(const std::vector<double>& v, const Shape& s) { return Tensor::from_values(v, s, DType::f64, true); }

TEST(Construction, FactoriesShapesAndValues) {
    Tensor z = Tensor::zeros({2, 3});
    EXPECT_EQ(z.shape(), (Shape{2, 3}));
    EXPECT_EQ(z.dim(), 2u);
    EXPECT_EQ(z.numel(), 6u);
    EXPECT_EQ(z.size(-1), 3u);
    EXPECT_EQ(z.dtype(), DType::f32);
    EXPECT_EQ(z.device(), Device::cpu);
    EXPECT_FALSE(z.requires_grad());
    expect_values(z, std::vector<double>(6, 0.0), 0.0);
    expect_values(Tensor::ones({2}, DType::f64), {1, 1}, 0.0);
    expect_values(Tensor::full({3}, 2.5), {2.5, 2.5, 2.5}, 0.0);
    Tensor s = Tensor::scalar(4.0, DType::f64);
    EXPECT_EQ(s.shape(), Shape{});
    EXPECT_EQ(s.item(), 4.0);
    Tensor m = Tensor::from_values({1, 2, 3, 4, 5, 6}, {2, 3});
    EXPECT_EQ(m.at({1, 0}), 4.0);
    EXPECT_EQ(m.at({0, 2}), 3.0);
    EXPECT_EQ(shape_str({2, 3}), "(2,3)");
    EXPECT_EQ(shape_str({}), "()");
    EXPECT_FALSE(Tensor().defined());
}

TEST(Construction, FromValuesWithTheWrongCountThrows) {
    expect_error([] { Tensor::from_values({1, 2, 3}, {2, 2}); }, "[from_values]", {"3", "(2,2)"});
}

TEST(Construction, AtOutOfRangeThrows) {
    Tensor m = Tensor::zeros({2, 3});
    expect_error([&] { m.at({2, 0}); }, "[at]", {"(2,3)"});
    expect_error([&] { m.at({0, 3}); }, "[at]", {"(2,3)"});
    expect_error([&] { m.at({0}); }, "[at]", {"(2,3)"});
    expect_error([&] { m.item(); }, "[item]", {"(2,3)"});
}

TEST(Construction, ToConvertsDtypeWithoutGraph) {
    Tensor x = Tensor::from_values({1.5, -2.25}, {2}, DType::f64, true);
    Tensor y = x.to(DType::f32);
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_FALSE(y.requires_grad());
    expect_values(y, {1.5, -2.25}, 0.0);
    Tensor back = y.to(DType::f64);
    EXPECT_EQ(back.dtype(), DType::f64);
    expect_values(back, {1.5, -2.25}, 0.0);
    // 0.1 is not a float32: the conversion rounds
    EXPECT_NE(Tensor::scalar(0.1, DType::f64).to(DType::f32).item(), 0.1);
}

TEST(Construction, DetachAndCloneHaveNoGraph) {
    Tensor x = leaf({1, 2}, {2});
    Tensor y = x * x;
    Tensor d = y.detach();
    EXPECT_FALSE(d.requires_grad());
    EXPECT_TRUE(d.is_leaf());
    EXPECT_EQ(d.op_name(), nullptr);
    EXPECT_FALSE(d.same(y));
    expect_values(d, {1, 4}, 0.0);
    EXPECT_FALSE(y.clone().requires_grad());
    EXPECT_STREQ(y.op_name(), "mul");
    EXPECT_FALSE(y.is_leaf());
}

TEST(Backward, TensorUsedTwiceAccumulates) {
    // y = x*x + x -> dy/dx = 2x + 1
    Tensor x = leaf({1, -2, 0.5}, {3});
    sum(x * x + x).backward();
    expect_values(x.grad(), {3, -3, 2});
}

TEST(Backward, GradientsAccumulateAcrossCallsUntilZeroGrad) {
    Tensor x = leaf({1, 2}, {2});
    sum(x * 3.0).backward();
    sum(x * x).backward();  // a separate graph
    expect_values(x.grad(), {3 + 2, 3 + 4});
    x.zero_grad();
    EXPECT_FALSE(x.grad().defined());
    sum(x).backward();
    expect_values(x.grad(), {1, 1});
}

TEST(Backward, NoGradGuardStopsRecording) {
    Tensor x = leaf({1, 2}, {2});
    {
        NoGradGuard guard;
        EXPECT_FALSE(grad_enabled());
        Tensor y = x * x;
        EXPECT_FALSE(y.requires_grad());
        EXPECT_TRUE(y.is_leaf());
        {
            NoGradGuard nested;
        }
        EXPECT_FALSE(grad_enabled()) << "a nested guard must restore the outer state";
    }
    EXPECT_TRUE(grad_enabled());
    EXPECT_TRUE((x * x).requires_grad());
}

TEST(Backward, GraphIsFreedAfterBackward) {
    Tensor x = leaf({1, 2}, {2});
    Tensor loss = sum(x * x);
    loss.backward();
    const std::string message = error_message([&] { loss.backward(); });
    EXPECT_TRUE(starts_with(message, "[backward]")) << message;
    EXPECT_NE(message.find("retain_graph"), std::string::npos) << message;
}

TEST(Backward, RetainGraphAllowsASecondPass) {
    Tensor x = leaf({1, 2}, {2});
    Tensor loss = sum(x * x);
    loss.backward(Tensor(), /*retain_graph=*/true);
    expect_values(x.grad(), {2, 4});
    loss.backward();
    expect_values(x.grad(), {4, 8});
}

TEST(Backward, NonScalarNeedsASeedOfTheSameShape) {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor y = x * 2.0;
    expect_error([&] { y.backward(); }, "[backward]", {"(2,3)"});
    expect_error([&] { y.backward(Tensor::ones({3, 2}, DType::f64)); }, "[backward]", {"(3,2)", "(2,3)"});
    expect_error([&] { y.backward(Tensor::ones({2, 3}, DType::f32)); }, "[backward]", {"float32", "float64"});
    // a seed of the right shape weights each output
    y.backward(Tensor::from_values({1, 0, 0, 0, 0, -1}, {2, 3}, DType::f64));
    expect_values(x.grad(), {2, 0, 0, 0, 0, -2});
}

TEST(Backward, FromATensorWithoutGradThrows) {
    expect_error([] { sum(Tensor::ones({2})).backward(); }, "[backward]", {"does not require grad"});
}

TEST(Backward, IntermediateTensorsDoNotKeepGrad) {
    Tensor x = leaf({1, 2}, {2});
    Tensor h = x * x;
    Tensor loss = sum(h * 3.0);
    loss.backward();
    EXPECT_FALSE(h.grad().defined());
    EXPECT_FALSE(loss.grad().defined());
    expect_values(x.grad(), {6, 12});
}

TEST(Backward, LeavesWithoutRequiresGradGetNoGrad) {
    Tensor x = leaf({1, 2}, {2});
    Tensor c = Tensor::from_values({5, 7}, {2}, DType::f64);
    sum(x * c).backward();
    expect_values(x.grad(), {5, 7});
    EXPECT_FALSE(c.grad().defined());
}

TEST(Backward, DeepChainDoesNotOverflowTheStack) {
    // 20000 nested adds: a recursive topological sort or a recursive free would crash
    Tensor x = leaf({1}, {1});
    Tensor one = Tensor::ones({1}, DType::f64);
    Tensor y = x;
    for (int i = 0; i < 20000; ++i) y = y + one;
    EXPECT_DOUBLE_EQ(y.item(), 20001.0);
    sum(y).backward();
    expect_values(x.grad(), {1});
}

// KNOWN ENGINE BUG (reported, not yet fixed): a graph that is dropped without a
// (non-retaining) backward is freed recursively, TensorImpl -> parents -> ...,
// one stack frame chain per node; about 110k nodes overflow an 8 MiB stack.
// Run in a child process so that the crash fails only this test.
TEST(BackwardDeathTest, DroppingADeepGraphWithoutBackwardDoesNotOverflowTheStack) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenBLAS has started threads
    EXPECT_EXIT(
        {
            Tensor x = leaf({1}, {1});
            Tensor one = Tensor::ones({1}, DType::f64);
            Tensor y = x;
            for (int i = 0; i < 200000; ++i) y = y + one;
            y = Tensor();  // frees the 200000-node graph
            std::exit(0);
        },
        ::testing::ExitedWithCode(0), "");
}

TEST(Backward, SetRequiresGradOffOnANonLeafThrows) {
    Tensor x = leaf({1}, {1});
    Tensor y = x * x;
    expect_error([&] { y.set_requires_grad(false); }, "[set_requires_grad]");
    Tensor c = Tensor::ones({1});
    c.set_requires_grad(true);
    EXPECT_TRUE(c.requires_grad());
}

TEST(ValueTypes, IndicesAndMaskCheckTheirCounts) {
    expect_error([] { Indices({2, 2}, {1, 2, 3}); }, "[indices]", {"(2,2)"});
    expect_error([] { Mask({3}, {1, 0}); }, "[mask]", {"(3)"});
    Mask m = Mask::filled({2, 2}, true);
    EXPECT_EQ(m.values.size(), 4u);
    EXPECT_TRUE(m(3));
}

}  // namespace
}  // namespace attnlab
