// The pointwise functions of autograd/pointwise.h: the float kernels against
// the float64 loops (libm) for every function, forward and derivative; the
// derivative from dual numbers against each formula's hand derivative; the
// tanh polynomial against libm; and the op against its composition of ops.
// (Bits across instruction sets: test_isa.cpp; gradients against finite
// differences: the gradcheck registry; the device: test_device_primitives.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/cpu/kernels.h"
#include "autograd/ops.h"
#include "autograd/pointwise.h"

namespace attnlab {
namespace {

constexpr double kParam = 0.7;  // every function's cap or threshold here

std::vector<float> sweep(double from, double to, double step) {
    std::vector<float> x;
    for (double v = from; v <= to; v += step) x.push_back(static_cast<float>(v));
    return x;
}

TEST(Pointwise, FloatKernelsFollowTheFloat64FormOfEveryFunction) {
    const std::vector<float> x = sweep(-12.0, 12.0, 0.0031);
    const size_t n = x.size();
    const std::vector<double> xd(x.begin(), x.end());
    for (size_t function = 0; function < pointwise::All::count; ++function)
        pointwise::visit(function, [&]<class F>() {
            std::vector<float> y(n), ones(n, 1.0f), dy(n);
            std::vector<double> yd(n), onesd(n, 1.0), dyd(n);
            kernels::pointwise_forward(function, x.data(), float(kParam), y.data(), n);
            kernels::pointwise_backward(function, ones.data(), x.data(), float(kParam), dy.data(), n);
            kernels::pointwise_forward(function, xd.data(), kParam, yd.data(), n);
            kernels::pointwise_backward(function, onesd.data(), xd.data(), kParam, dyd.data(), n);
            double worst_y = 0, worst_dy = 0;
            for (size_t i = 0; i < n; ++i) {
                if (std::abs(xd[i] - float(kParam)) < 1e-6) continue;  // a threshold's jump
                worst_y = std::max(worst_y, std::abs(y[i] - yd[i]) / std::max(1.0, std::abs(yd[i])));
                worst_dy = std::max(worst_dy, std::abs(dy[i] - dyd[i]) / std::max(1.0, std::abs(dyd[i])));
            }
            EXPECT_LT(worst_y, 2e-6) << F::name;
            EXPECT_LT(worst_dy, 2e-6) << F::name;
        });
}

// The dual numbers give each formula's derivative, written out by hand here.
TEST(Pointwise, DerivativesFromDualNumbersAreTheHandDerivatives) {
    const pointwise::Libm m;
    for (double x = -6.0; x <= 6.0; x += 0.01) {
        const double c = 0.79788456080286535588, u = c * (x + 0.044715 * x * x * x), t = std::tanh(u);
        const double gelu_tanh = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
        EXPECT_NEAR(pointwise::derivative_at<pointwise::GeluTanh>(m, x, 0.0), gelu_tanh, 1e-14) << x;
        const double cap = 2.5, s = std::tanh(x / cap);
        EXPECT_NEAR(pointwise::derivative_at<pointwise::SoftCap>(m, x, cap), 1 - s * s, 1e-14) << x;
        EXPECT_EQ(pointwise::derivative_at<pointwise::ThresholdRelu>(m, x, 0.5), x > 0.5 ? 1.0 : 0.0) << x;
        EXPECT_EQ(pointwise::derivative_at<pointwise::JumpRelu>(m, x, 0.5), x > 0.5 ? 1.0 : 0.0) << x;
        EXPECT_EQ(pointwise::value_at<pointwise::JumpRelu>(m, x, 0.5), x > 0.5 ? x : 0.0) << x;
        EXPECT_EQ(pointwise::value_at<pointwise::ThresholdRelu>(m, x, 0.5), x > 0.5 ? x - 0.5 : 0.0) << x;
    }
}

// softcap with cap 1 is tanh itself (x / 1 is exact): the polynomial's error.
TEST(Pointwise, TanhMatchesLibmWithinAMillionthRelative) {
    std::vector<float> x = sweep(-20.0, 20.0, 0.00137);
    for (float tiny = 1e-30f; tiny < 1.0f; tiny *= 3.7f) x.insert(x.end(), {tiny, -tiny});
    std::vector<float> y(x.size());
    const size_t softcap = pointwise::index_of<pointwise::SoftCap>;
    kernels::pointwise_forward(softcap, x.data(), 1.0f, y.data(), x.size());
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = std::tanh(static_cast<double>(x[i]));
        if (want != 0) worst = std::max(worst, std::abs(y[i] - want) / std::abs(want));
    }
    EXPECT_LT(worst, 1e-6);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> edges = {inf, -inf, nan, 0.0f, -0.0f, 9.5f, -9.5f}, out(edges.size());
    kernels::pointwise_forward(softcap, edges.data(), 1.0f, out.data(), edges.size());
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], -1.0f);
    EXPECT_TRUE(std::isnan(out[2]));
    EXPECT_EQ(out[3], 0.0f);
    EXPECT_TRUE(std::signbit(out[4]));
    EXPECT_EQ(out[5], 1.0f);
    EXPECT_EQ(out[6], -1.0f);
}

// The one-pass op computes what its composition of elementwise ops computes.
TEST(Pointwise, OpsAgreeWithTheirCompositions) {
    const Tensor x = Tensor::from_values({-3.0, -1.2, -0.1, 0.0, 0.4, 0.7, 1.9, 5.0}, {2, 4}, DType::f64, true);
    const auto expect_close = [](const Tensor& a, const Tensor& b) {
        const std::vector<double> va = a.values(), vb = b.values();
        ASSERT_EQ(va.size(), vb.size());
        for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-14) << i;
    };
    const double c = std::sqrt(2.0 / M_PI);
    expect_close(gelu_tanh(x), 0.5 * x * (tanh(c * (x + 0.044715 * pow(x, 3.0))) + 1.0));
    expect_close(softcap(x, 1.5), tanh(x / 1.5) * 1.5);
    EXPECT_THROW(softcap(x, 0.0), Error);
}

}  // namespace
}  // namespace attnlab
