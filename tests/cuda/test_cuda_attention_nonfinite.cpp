// Non-finite inputs, one policy on every attention path (autograd/attention.h):
//   - a NaN among a row's eligible scores makes that row's output NaN (context,
//     and lse for flash): never a finite number that silently ignores the keys,
//     never the zero row of "no eligible key";
//   - keys past a batch item's key length are never read, so inf or NaN in
//     those K/V rows (an unwritten cache tail) leaves every output finite.
// Each case runs the CPU op and both kernels. Skipped without a device.
#include <cmath>
#include <limits>

#include "attention_reference.h"

namespace attnlab::cuda_test {
namespace {

constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_value = std::numeric_limits<double>::infinity();

// t (B, H, T, w) with rows [from, to) of head (b, h) set to `value`.
Tensor with_rows(const Tensor& t, size_t b, size_t h, size_t from, size_t to, double value) {
    std::vector<double> values = t.values();
    const size_t H = t.size(1), T = t.size(2), w = t.size(3);
    for (size_t row = from; row < to; ++row)
        for (size_t c = 0; c < w; ++c) values[((b * H + h) * T + row) * w + c] = value;
    return Tensor::from_values(values, t.shape(), DType::f32);
}

// Which rows (b, h, i) of a (B, H, Tq, w) result hold a NaN.
std::vector<bool> nan_rows(const Tensor& t) {
    const std::vector<double> values = t.values();
    const size_t w = t.size(t.dim() - 1);
    std::vector<bool> rows(values.size() / w, false);
    for (size_t e = 0; e < values.size(); ++e) rows[e / w] = rows[e / w] || std::isnan(values[e]);
    return rows;
}

class CudaNonFinite : public DeviceTest, public ::testing::WithParamInterface<AttentionKernel> {};

TEST_P(CudaNonFinite, NanQueryRowGivesANanRowOnly) {
    const AttentionDims dims{1, 1, 1, 4, 4, 8, 8};
    Inputs in = random_inputs(dims, 1);
    in.q = with_rows(in.q, 0, 0, 2, 3, nan_value);  // every score of query 2 is NaN
    AttentionOptions options;
    options.scale = 0.3;
    const Tensor cpu = attention(in.q, in.k, in.v, {}, options).context;
    const device::HostAttention gpu = device::attention_host(*context, GetParam(), in.q, in.k, in.v, {}, options);
    const std::vector<bool> expected{false, false, true, false};
    EXPECT_EQ(nan_rows(cpu), expected);
    EXPECT_EQ(nan_rows(gpu.context), expected);
    if (gpu.lse.defined()) {
        EXPECT_TRUE(std::isnan(gpu.lse.values()[2])) << gpu.lse.values()[2];
        EXPECT_TRUE(std::isfinite(gpu.lse.values()[1]));
    }
    const Tensor clean_rows = with_rows(cpu, 0, 0, 2, 3, 0.0);
    expect_close(with_rows(gpu.context, 0, 0, 2, 3, 0.0), clean_rows, "the other rows");
}

// The first 64-key tile (flash) and half of the first 128-key block (CPU
// blockwise) are all NaN, the rest finite: every row sees them, so every row is NaN.
TEST_P(CudaNonFinite, NanLeadingKeyTileGivesNanRows) {
    const AttentionDims dims{1, 1, 1, 3, 130, 8, 8};
    Inputs in = random_inputs(dims, 4);
    in.k = with_rows(in.k, 0, 0, 0, 64, nan_value);
    AttentionOptions options;
    options.scale = 0.3;
    const std::vector<bool> all(3, true);
    for (AttentionPath path : {AttentionPath::dense, AttentionPath::blockwise}) {
        options.path = path;
        EXPECT_EQ(nan_rows(attention(in.q, in.k, in.v, {}, options).context), all);
    }
    options.path = AttentionPath::automatic;
    const device::HostAttention gpu = device::attention_host(*context, GetParam(), in.q, in.k, in.v, {}, options);
    EXPECT_EQ(nan_rows(gpu.context), all);
    if (gpu.lse.defined()) {
        for (double lse : gpu.lse.values()) EXPECT_TRUE(std::isnan(lse)) << lse;
    }
}

// K and V rows at or past each item's key length hold inf and NaN: the outputs
// and gradients equal those of the same inputs with those rows zeroed (the
// padded keys' dk and dv exactly 0), for padding alone and with causal.
TEST_P(CudaNonFinite, PaddedKeysMayHoldInfAndNan) {
    const AttentionDims dims{2, 2, 1, 70, 100, 16, 12};
    const std::vector<size_t> lengths{40, 77};
    const Inputs clean = [&] {
        Inputs in = random_inputs(dims, 6);
        for (size_t b = 0; b < 2; ++b) {
            in.k = with_rows(in.k, b, 0, lengths[b], dims.Tk, 0.0);
            in.v = with_rows(in.v, b, 0, lengths[b], dims.Tk, 0.0);
        }
        return in;
    }();
    Inputs dirty = clean;
    for (size_t b = 0; b < 2; ++b) {
        dirty.k = with_rows(dirty.k, b, 0, lengths[b], dims.Tk, inf_value);
        dirty.v = with_rows(dirty.v, b, 0, lengths[b], lengths[b] + 3, nan_value);
        dirty.v = with_rows(dirty.v, b, 0, lengths[b] + 3, dims.Tk, -inf_value);
    }
    for (bool causal : {false, true}) {
        SCOPED_TRACE(causal ? "causal and padding" : "padding");
        AttentionMask mask;
        mask.key_lengths = lengths;
        mask.causal = causal;
        AttentionOptions options;
        options.scale = 0.25;
        const Reference expected = cpu_reference(clean, mask, options);
        const Reference cpu = cpu_reference(dirty, mask, options);
        expect_close(cpu.context, expected.context, "cpu context");
        expect_close(cpu.dq, expected.dq, "cpu dq");
        expect_close(cpu.dk, expected.dk, "cpu dk");
        expect_close(cpu.dv, expected.dv, "cpu dv");

        const device::HostAttention gpu = device::attention_host(*context, GetParam(), dirty.q, dirty.k, dirty.v, mask, options);
        expect_close(gpu.context, expected.context, "context");
        const device::HostAttentionGrads grads =
            device::attention_backward_host(*context, GetParam(), dirty.q, dirty.k, dirty.v, mask, options, dirty.dcontext);
        expect_close(grads.dq, expected.dq, "dq");
        expect_close(grads.dk, expected.dk, "dk");  // includes the padded rows: exactly 0 there
        expect_close(grads.dv, expected.dv, "dv");
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaNonFinite, ::testing::Values(AttentionKernel::dense, AttentionKernel::flash),
                         [](const ::testing::TestParamInfo<AttentionKernel>& info) {
                             return device::to_string(info.param);
                         });

}  // namespace
}  // namespace attnlab::cuda_test
