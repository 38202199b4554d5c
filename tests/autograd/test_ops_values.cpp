// Hand-computed forward values of the elementwise, reduction, shape and matmul
// ops, plus hand-computed gradients. Neural-network ops: test_nn_values.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"
#include "expect.h"

namespace attnlab {
namespace {

using testing::expect_values;
constexpr double e = 2.718281828459045;

Tensor t64(const std::vector<double>& v, const Shape& s) { return Tensor::from_values(v, s, DType::f64); }

// ---- elementwise ----

TEST(ElementwiseValues, AddBroadcastsARowOverEveryRow) {
    // (2,3) + (3) -> (2,3)
    Tensor y = add(t64({1, 2, 3, 4, 5, 6}, {2, 3}), t64({10, 20, 30}, {3}));
    EXPECT_EQ(y.shape(), (Shape{2, 3}));
    expect_values(y, {11, 22, 33, 14, 25, 36});
}

TEST(ElementwiseValues, SubBroadcastsColumnAgainstRow) {
    // (3,1) - (1,2) -> (3,2): y[i][j] = a[i] - b[j]
    Tensor y = sub(t64({1, 2, 3}, {3, 1}), t64({10, 20}, {1, 2}));
    EXPECT_EQ(y.shape(), (Shape{3, 2}));
    expect_values(y, {-9, -19, -8, -18, -7, -17});
}

TEST(ElementwiseValues, MulBroadcastsAColumnAndAScalar) {
    // (2,3) * (2,1) -> (2,3); () * (2,3) -> (2,3)
    expect_values(mul(t64({1, 2, 3, 4, 5, 6}, {2, 3}), t64({2, -1}, {2, 1})), {2, 4, 6, -4, -5, -6});
    expect_values(mul(Tensor::scalar(3, DType::f64), t64({1, 2, 3, 4, 5, 6}, {2, 3})), {3, 6, 9, 12, 15, 18});
}

TEST(ElementwiseValues, DivBroadcastsTheDenominator) {
    // (2,2) / (2) and (2,2) / scalar
    expect_values(div(t64({1, 2, 3, 4}, {2, 2}), t64({2, 4}, {2})), {0.5, 0.5, 1.5, 1.0});
    expect_values(t64({1, 2, 3, 4}, {2, 2}) / 4.0, {0.25, 0.5, 0.75, 1.0});
}

TEST(ElementwiseValues, OperatorsWithScalars) {
    Tensor x = t64({1, -2}, {2});
    expect_values(x + 1.0, {2, -1});
    expect_values(x - 1.0, {0, -3});
    expect_values(x * 3.0, {3, -6});
    expect_values(2.0 * x, {2, -4});
    expect_values(-x, {-1, 2});
    expect_values(x + x, {2, -4});
    expect_values(x - x, {0, 0});
    expect_values(x * x, {1, 4});
    expect_values(x / x, {1, 1});
}

TEST(ElementwiseValues, UnaryMaths) {
    expect_values(neg(t64({1, -2, 0}, {3})), {-1, 2, 0});
    expect_values(exp(t64({0, 1, -1}, {3})), {1, e, 1 / e}, 1e-12);
    expect_values(log(t64({1, e, 0.5}, {3})), {0, 1, -std::log(2.0)}, 1e-12);
    expect_values(sqrt(t64({4, 9, 2}, {3})), {2, 3, std::sqrt(2.0)}, 1e-12);
    expect_values(pow(t64({2, 3, -1}, {3}), 3.0), {8, 27, -1}, 1e-12);
    expect_values(pow(t64({4, 0.25}, {2}), -0.5), {0.5, 2.0}, 1e-12);
    expect_values(tanh(t64({0, 0.5, -1}, {3})), {0, 0.46211715726000974, -0.7615941559557649}, 1e-12);
    expect_values(relu(t64({-1, 0, 2.5}, {3})), {0, 0, 2.5});
}

TEST(ElementwiseValues, ReluKeepsNaN) {
    // One NaN policy: a NaN input stays NaN (torch.relu, the device ReLU), in float32 and float64.
    for (DType dtype : {DType::f32, DType::f64}) {
        const Tensor y = relu(Tensor::from_values({std::nan(""), -1.0, 3.0}, {3}, dtype));
        const std::vector<double> v = y.values();
        EXPECT_TRUE(std::isnan(v[0]));
        EXPECT_EQ(v[1], 0.0);
        EXPECT_EQ(v[2], 3.0);
    }
}

TEST(ElementwiseValues, GeluIsTheExactErfForm) {
    // x * Phi(x): gelu(1) = Phi(1), gelu(-0.5) = -0.5 Phi(-0.5), gelu(0) = 0
    expect_values(gelu(t64({1.0, -0.5, 0.0, 2.0}, {4})),
                  {0.8413447460685429, -0.15426876936299347, 0.0, 1.9544997361036416}, 1e-12);
}

// ---- reductions ----

TEST(ReduceValues, SumOverAxesWithAndWithoutKeepdim) {
    // x (2,3) = [[1,2,3],[4,5,6]]
    Tensor x = t64({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor all = sum(x);
    EXPECT_EQ(all.shape(), Shape{});
    EXPECT_DOUBLE_EQ(all.item(), 21);
    Tensor rows = sum(x, {1});
    EXPECT_EQ(rows.shape(), Shape{2});
    expect_values(rows, {6, 15});
    Tensor cols = sum(x, {0}, true);
    EXPECT_EQ(cols.shape(), (Shape{1, 3}));
    expect_values(cols, {5, 7, 9});
    Tensor last = sum(x, {-1}, true);
    EXPECT_EQ(last.shape(), (Shape{2, 1}));
    expect_values(last, {6, 15});
    // (2,3,4) of 0..23 over axes {0,2} keepdim -> (1,3,1): sum_b sum_k (12b + 4j + k) = 12 + 16j + 48
    std::vector<double> v(24);
    for (size_t i = 0; i < 24; ++i) v[i] = static_cast<double>(i);
    Tensor outer = sum(t64(v, {2, 3, 4}), {0, 2}, true);
    EXPECT_EQ(outer.shape(), (Shape{1, 3, 1}));
    expect_values(outer, {60, 92, 124});
}

TEST(ReduceValues, MeanOverAxes) {
    Tensor x = t64({1, 2, 3, 4, 5, 6}, {2, 3});
    EXPECT_DOUBLE_EQ(mean(x).item(), 3.5);
    Tensor rows = mean(x, {1}, true);
    EXPECT_EQ(rows.shape(), (Shape{2, 1}));
    expect_values(rows, {2, 5});
    Tensor cols = mean(x, {0});
    EXPECT_EQ(cols.shape(), Shape{3});
    expect_values(cols, {2.5, 3.5, 4.5});
}

TEST(ReduceValues, MaxOverAxes) {
    // x (2,3) = [[1,7,3],[9,2,4]]
    Tensor x = t64({1, 7, 3, 9, 2, 4}, {2, 3});
    EXPECT_DOUBLE_EQ(max(x).item(), 9);
    Tensor rows = max(x, {1});
    EXPECT_EQ(rows.shape(), Shape{2});
    expect_values(rows, {7, 9});
    Tensor cols = max(x, {0}, true);
    EXPECT_EQ(cols.shape(), (Shape{1, 3}));
    expect_values(cols, {9, 7, 4});
    // (2,2,2) over axes {0,2}: max over b and k of each middle slice
    Tensor y = max(t64({1, 8, 3, 4, 5, 6, 7, 2}, {2, 2, 2}), {0, 2});
    EXPECT_EQ(y.shape(), Shape{2});
    expect_values(y, {8, 7});
}

// ---- shape ----

TEST(ShapeValues, ReshapeKeepsRowMajorOrder) {
    Tensor y = reshape(t64({1, 2, 3, 4, 5, 6}, {2, 3}), {3, 1, 2});
    EXPECT_EQ(y.shape(), (Shape{3, 1, 2}));
    EXPECT_DOUBLE_EQ(y.at({2, 0, 1}), 6);
    expect_values(y, {1, 2, 3, 4, 5, 6});
}

TEST(ShapeValues, PermuteAndTranspose) {
    // x (2,3): transpose -> (3,2) = [[1,4],[2,5],[3,6]]
    Tensor x = t64({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor xt = transpose(x, 0, 1);
    EXPECT_EQ(xt.shape(), (Shape{3, 2}));
    expect_values(xt, {1, 4, 2, 5, 3, 6});
    expect_values(transpose(x, -1, -2), {1, 4, 2, 5, 3, 6});
    // z (2,3,4) of 0..23 permuted by (2,0,1) -> (4,2,3); out[k][b][j] = z[b][j][k] = 12b + 4j + k
    std::vector<double> v(24);
    for (size_t i = 0; i < 24; ++i) v[i] = static_cast<double>(i);
    Tensor p = permute(t64(v, {2, 3, 4}), {2, 0, 1});
    EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
    for (size_t k = 0; k < 4; ++k)
        for (size_t b = 0; b < 2; ++b)
            for (size_t j = 0; j < 3; ++j) EXPECT_DOUBLE_EQ(p.at({k, b, j}), 12.0 * b + 4.0 * j + k);
}

TEST(ShapeValues, SliceConcatSplit) {
    // x (2,4) = [[0,1,2,3],[4,5,6,7]]
    Tensor x = t64({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
    Tensor s = slice(x, 1, 1, 3);  // (2,2)
    EXPECT_EQ(s.shape(), (Shape{2, 2}));
    expect_values(s, {1, 2, 5, 6});
    expect_values(slice(x, 0, 1, 2), {4, 5, 6, 7});
    EXPECT_EQ(slice(x, -1, 2, 2).shape(), (Shape{2, 0}));

    Tensor c0 = concat({x, t64({8, 9, 10, 11}, {1, 4})}, 0);  // (3,4)
    EXPECT_EQ(c0.shape(), (Shape{3, 4}));
    expect_values(c0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    Tensor c1 = concat({t64({-1, -2}, {2, 1}), x}, 1);  // (2,5)
    EXPECT_EQ(c1.shape(), (Shape{2, 5}));
    expect_values(c1, {-1, 0, 1, 2, 3, -2, 4, 5, 6, 7});

    std::vector<Tensor> parts = split(x, {1, 3}, -1);  // (2,1), (2,3)
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0].shape(), (Shape{2, 1}));
    expect_values(parts[0], {0, 4});
    EXPECT_EQ(parts[1].shape(), (Shape{2, 3}));
    expect_values(parts[1], {1, 2, 3, 5, 6, 7});
}

// ---- matmul ----

TEST(MatmulValues, TwoDimensional) {
    // (2,3) @ (3,2) = [[58,64],[139,154]]
    Tensor y = matmul(t64({1, 2, 3, 4, 5, 6}, {2, 3}), t64({7, 8, 9, 10, 11, 12}, {3, 2}));
    EXPECT_EQ(y.shape(), (Shape{2, 2}));
    expect_values(y, {58, 64, 139, 154}, 1e-12);
}

TEST(MatmulValues, BatchedWithEqualBatchAxes) {
    // (2,2,2) @ (2,2,2): batch 0 is A @ I, batch 1 is I @ B
    Tensor a = t64({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2});
    Tensor b = t64({1, 0, 0, 1, 5, 6, 7, 8}, {2, 2, 2});
    Tensor y = matmul(a, b);
    EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
    expect_values(y, {1, 2, 3, 4, 5, 6, 7, 8}, 1e-12);
}

TEST(MatmulValues, LeadingAxesTimesASharedMatrix) {
    // (2,1,2,3) @ (3,2): the second batch item is the negated first
    Tensor a = t64({1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6}, {2, 1, 2, 3});
    Tensor y = matmul(a, t64({7, 8, 9, 10, 11, 12}, {3, 2}));
    EXPECT_EQ(y.shape(), (Shape{2, 1, 2, 2}));
    expect_values(y, {58, 64, 139, 154, -58, -64, -139, -154}, 1e-12);
}

TEST(LinearValues, InputTimesWeightTransposedPlusBias) {
    // x (2,1,3) = [[1,2,3]],[[4,5,6]]; W (2,3) = [[1,0,-1],[2,1,0]]; b = [10,20] -> (2,1,2)
    Tensor x = Tensor::from_values({1, 2, 3, 4, 5, 6}, {2, 1, 3}, DType::f64, true);
    Tensor w = Tensor::from_values({1, 0, -1, 2, 1, 0}, {2, 3}, DType::f64, true);
    Tensor b = Tensor::from_values({10, 20}, {2}, DType::f64, true);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.shape(), (Shape{2, 1, 2}));
    expect_values(y, {8, 24, 8, 33}, 1e-12);
    expect_values(linear(x, w, Tensor()), {-2, 4, -2, 13}, 1e-12);
    // L = sum(y): dx = column sums of W per row, dW = column sums of x per output, db = row count
    sum(y).backward();
    expect_values(x.grad(), {3, 1, -1, 3, 1, -1}, 1e-12);
    expect_values(w.grad(), {5, 7, 9, 5, 7, 9}, 1e-12);
    expect_values(b.grad(), {2, 2}, 1e-12);
}

// ---- dtypes ----

TEST(DtypeValues, Float32AndFloat64GiveTheSameResults) {
    for (DType dtype : {DType::f32, DType::f64}) {
        Tensor a = Tensor::from_values({1, 2, 3, 4, 5, 6}, {2, 3}, dtype);
        Tensor b = Tensor::from_values({7, 8, 9, 10, 11, 12}, {3, 2}, dtype);
        Tensor y = sum(exp(matmul(a, b) / 100.0) * 2.0 - 1.0, {1});  // (2)
        EXPECT_EQ(y.dtype(), dtype) << to_string(dtype);
        expect_values(y, {2 * (std::exp(0.58) + std::exp(0.64)) - 2, 2 * (std::exp(1.39) + std::exp(1.54)) - 2},
                      dtype == DType::f32 ? 1e-5 : 1e-12);
        EXPECT_EQ(gelu(a).dtype(), dtype);
        EXPECT_EQ(max(a, {0}).dtype(), dtype);
        EXPECT_EQ(transpose(a, 0, 1).dtype(), dtype);
    }
}

// ---- hand-computed gradients ----

TEST(BackwardValues, SumOfSquaresIsTwoX) {
    Tensor x = Tensor::from_values({1, -2, 3}, {3}, DType::f64, true);
    sum(x * x).backward();
    expect_values(x.grad(), {2, -4, 6});
}

TEST(BackwardValues, BroadcastGradientIsSummedBackToTheInputShape) {
    // y = sum((2,3) + (3)): each element of b is used twice
    Tensor a = Tensor::zeros({2, 3}, DType::f64, true);
    Tensor b = Tensor::zeros({3}, DType::f64, true);
    sum(a + b).backward();
    expect_values(a.grad(), {1, 1, 1, 1, 1, 1});
    EXPECT_EQ(b.grad().shape(), Shape{3});
    expect_values(b.grad(), {2, 2, 2});
}

TEST(BackwardValues, MatmulGradientOfSumIsRowAndColumnSums) {
    // L = sum(A B): dL/dA[i][k] = sum_j B[k][j] (row sums of B); dL/dB[k][j] = sum_i A[i][k] (column sums of A)
    Tensor a = Tensor::from_values({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64, true);
    Tensor b = Tensor::from_values({7, 8, 9, 10, 11, 12}, {3, 2}, DType::f64, true);
    sum(matmul(a, b)).backward();
    expect_values(a.grad(), {15, 19, 23, 15, 19, 23}, 1e-12);
    expect_values(b.grad(), {5, 5, 7, 7, 9, 9}, 1e-12);
}

TEST(BackwardValues, MaxSendsTheGradientToTheFirstMaximum) {
    Tensor x = Tensor::from_values({3, 1, 3, 0, 2, 2}, {2, 3}, DType::f64, true);
    sum(max(x, {1})).backward();
    expect_values(x.grad(), {1, 0, 0, 0, 1, 0});
}

TEST(BackwardValues, MeanSpreadsTheGradientEvenly) {
    Tensor x = Tensor::zeros({2, 2}, DType::f64, true);
    mean(x).backward();
    expect_values(x.grad(), {0.25, 0.25, 0.25, 0.25});
}

}  // namespace
}  // namespace attnlab
