// The seed chapter's audit tests on the CUDA path, for both kernels:
// causal perturbation (changing future keys and values leaves earlier outputs
// and their query gradients bitwise unchanged), padding invariance (changing
// padded keys and values changes nothing), and returning weights never changing
// the context. Skipped without a device.
#include "attention_reference.h"

namespace attnlab::cuda_test {
namespace {

// A copy of t (B, H_kv, Tk, w) with key positions j where change(b, j) replaced by new random values.
template <class Change>
Tensor perturb_keys(const Tensor& t, uint64_t seed, Change change) {
    Rng rng(seed);
    const Shape& s = t.shape();
    std::vector<double> values = t.values();
    for (size_t b = 0; b < s[0]; ++b)
        for (size_t h = 0; h < s[1]; ++h)
            for (size_t j = 0; j < s[2]; ++j)
                if (change(b, j))
                    for (size_t c = 0; c < s[3]; ++c) values[((b * s[1] + h) * s[2] + j) * s[3] + c] = rng.normal(0, 3);
    return Tensor::from_values(values, s, DType::f32);
}

// Bitwise equality of rows i < rows_upto(b) of (B, H, T, w) tensors.
template <class Rows>
void expect_rows_identical(const Tensor& a, const Tensor& b, Rows rows_upto, const std::string& what) {
    const Shape& s = a.shape();
    ASSERT_EQ(s, b.shape());
    const std::vector<double> x = a.values(), y = b.values();
    size_t differing = 0;
    for (size_t n = 0; n < s[0]; ++n)
        for (size_t h = 0; h < s[1]; ++h)
            for (size_t i = 0; i < rows_upto(n); ++i)
                for (size_t c = 0; c < s[3]; ++c) {
                    const size_t e = ((n * s[1] + h) * s[2] + i) * s[3] + c;
                    if (x[e] != y[e]) ++differing;
                }
    EXPECT_EQ(differing, 0u) << what << ": elements that changed";
}

class CudaAttentionInvariance : public DeviceTest, public ::testing::WithParamInterface<AttentionKernel> {};

TEST_P(CudaAttentionInvariance, CausalPerturbationLeavesEarlierOutputsBitwiseUnchanged) {
    const AttentionDims dims{2, 2, 2, 150, 150, 16, 16};
    const size_t t = 70;  // keys and values after position t change
    const Inputs in = random_inputs(dims, 21);
    AttentionMask mask;
    mask.causal = true;
    AttentionOptions options;
    options.scale = 0.25;
    const auto future = [&](size_t, size_t j) { return j > t; };
    const Tensor k2 = perturb_keys(in.k, 1, future), v2 = perturb_keys(in.v, 2, future);
    const auto before = device::attention_host(*context, GetParam(), in.q, in.k, in.v, mask, options);
    const auto after = device::attention_host(*context, GetParam(), in.q, k2, v2, mask, options);
    expect_rows_identical(before.context, after.context, [&](size_t) { return t + 1; }, "context rows 0..t");
    const auto grads_before = device::attention_backward_host(*context, GetParam(), in.q, in.k, in.v, mask, options, in.dcontext);
    const auto grads_after = device::attention_backward_host(*context, GetParam(), in.q, k2, v2, mask, options, in.dcontext);
    expect_rows_identical(grads_before.dq, grads_after.dq, [&](size_t) { return t + 1; }, "dq rows 0..t");
    // and the later rows do change (the perturbation is real)
    EXPECT_NE(before.context.at({0, 0, 149, 0}), after.context.at({0, 0, 149, 0}));
}

TEST_P(CudaAttentionInvariance, ChangingPaddedKeysChangesNothing) {
    const AttentionDims dims{2, 2, 2, 100, 100, 16, 12};
    const std::vector<size_t> lengths{90, 41};
    const Inputs in = random_inputs(dims, 22);
    for (bool is_causal : {false, true}) {
        AttentionMask mask;
        mask.key_lengths = lengths;
        mask.causal = is_causal;
        AttentionOptions options;
        options.scale = 0.25;
        const auto padding = [&](size_t b, size_t j) { return j >= lengths[b]; };
        const Tensor k2 = perturb_keys(in.k, 3, padding), v2 = perturb_keys(in.v, 4, padding);
        const auto before = device::attention_host(*context, GetParam(), in.q, in.k, in.v, mask, options);
        const auto after = device::attention_host(*context, GetParam(), in.q, k2, v2, mask, options);
        const auto all_rows = [&](size_t) { return dims.Tq; };
        expect_rows_identical(before.context, after.context, all_rows, is_causal ? "causal context" : "context");
        const auto g1 = device::attention_backward_host(*context, GetParam(), in.q, in.k, in.v, mask, options, in.dcontext);
        const auto g2 = device::attention_backward_host(*context, GetParam(), in.q, k2, v2, mask, options, in.dcontext);
        expect_rows_identical(g1.dq, g2.dq, all_rows, "dq");
        // padded keys get exactly zero gradient
        for (size_t b = 0; b < 2; ++b)
            for (size_t h = 0; h < 2; ++h)
                for (size_t j = lengths[b]; j < dims.Tk; ++j) {
                    EXPECT_EQ(g2.dk.at({b, h, j, 0}), 0.0);
                    EXPECT_EQ(g2.dv.at({b, h, j, 0}), 0.0);
                }
    }
}

using CudaDenseWeights = DeviceTest;

TEST_F(CudaDenseWeights, ReturningWeightsNeverChangesTheContext) {
    const AttentionDims dims{2, 2, 2, 70, 70, 16, 12};
    const Inputs in = random_inputs(dims, 23);
    AttentionMask mask;
    mask.causal = true;
    AttentionOptions options;
    options.scale = 0.25;
    const auto without = device::attention_host(*context, AttentionKernel::dense, in.q, in.k, in.v, mask, options);
    options.need_weights = true;
    const auto with = device::attention_host(*context, AttentionKernel::dense, in.q, in.k, in.v, mask, options);
    EXPECT_EQ(without.context.values(), with.context.values());
    EXPECT_FALSE(without.weights.defined());
    EXPECT_TRUE(with.weights.defined());
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaAttentionInvariance,
                         ::testing::Values(AttentionKernel::dense, AttentionKernel::flash),
                         [](const ::testing::TestParamInfo<AttentionKernel>& info) {
                             return device::to_string(info.param);
                         });

}  // namespace
}  // namespace attnlab::cuda_test
