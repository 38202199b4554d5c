// Both device kernels (dense, flash) against the CPU op attnlab::attention on
// random float32 inputs, forward (context; weights for dense, lse for flash)
// and gradients (dq, dk, dv for a random dcontext), for every mask kind.
// Tolerance: |gpu - cpu| <= 1e-4 + 1e-4 |cpu| per element (attention_reference.h).
// Shapes are chosen to cross the flash kernel's 64-row tiles (65, 70, 130, 257)
// and to pad head widths (d = 12, 100). Skipped without a device.
#include <cmath>

#include "attention_reference.h"

namespace attnlab::cuda_test {
namespace {

// Random eligibility with key i % Tk always eligible, so no row is empty.
Mask random_eligible(const Shape& shape, uint64_t seed) {
    Rng rng(seed);
    const size_t Tq = shape[shape.size() - 2], Tk = shape.back();
    std::vector<uint8_t> values(numel_of(shape));
    for (size_t e = 0; e < values.size(); ++e) {
        const size_t i = e / Tk % Tq, j = e % Tk;
        values[e] = j == i % Tk || rng.bernoulli(0.6) ? 1 : 0;
    }
    return Mask(shape, values);
}

AttentionMask explicit_mask(const Shape& shape) {
    AttentionMask mask;
    mask.eligible = random_eligible(shape, 11);
    return mask;
}

// Row 3 of the explicit mask has no eligible key, and batch item 1 has no keys at all.
AttentionMask with_empty_rows(size_t Tq, size_t Tk) {
    AttentionMask mask = explicit_mask({Tq, Tk});
    for (size_t j = 0; j < Tk; ++j) mask.eligible.values[3 * Tk + j] = 0;
    mask.key_lengths = {Tk, 0};
    return mask;
}

// A sliding window of W (AttentionVariant::window): the kernels read it as the
// byte mask DeviceMask makes from AttentionMask::allows.
AttentionMask windowed(size_t W, bool causal_too, std::vector<size_t> key_lengths = {}) {
    AttentionMask mask;
    mask.causal = causal_too;
    mask.variant.window = W;
    mask.key_lengths = std::move(key_lengths);
    return mask;
}

// The token rules (prefix-LM, packed documents): spans read off rows of Tk tokens with
// a <BOS> every 23 positions and a <SEP> 9 after it; the kernels read the byte mask.
AttentionMask token_rules(size_t B, size_t Tk, bool prefix_lm, bool documents, std::vector<size_t> key_lengths = {}) {
    AttentionMask mask;
    mask.causal = true;
    mask.variant.prefix_lm = prefix_lm;
    mask.variant.documents = documents;
    mask.key_lengths = std::move(key_lengths);
    Indices tokens({B, Tk}, std::vector<int32_t>(B * Tk, 5));
    for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; t < Tk; ++t) {
            const size_t at = (t + 7 * b) % 23;  // each item its own layout
            if (at == 0) tokens.values[b * Tk + t] = mask.variant.bos_token;
            if (at == 9) tokens.values[b * Tk + t] = mask.variant.sep_token;
        }
    mask.spans = token_spans(mask.variant, tokens, mask.key_lengths);
    return mask;
}

std::vector<Case> cases() {
    //            B  H  H_kv Tq   Tk   d    d_v
    return {
        {"no_mask", {2, 2, 2, 70, 70, 16, 12}, {}},
        {"causal_square", {2, 2, 2, 130, 130, 16, 16}, causal()},
        {"causal_cache_tq_lt_tk", {2, 2, 2, 37, 100, 16, 12}, causal()},
        {"causal_tq_gt_tk_zero_rows", {1, 2, 2, 80, 50, 16, 16}, causal(), MaskedRows::zero},
        {"key_padding", {3, 2, 2, 70, 70, 16, 12}, padded({70, 33, 64})},
        {"causal_and_padding", {2, 2, 2, 130, 130, 16, 16}, padded({130, 70}, true)},
        {"explicit_tq_tk", {2, 2, 2, 70, 90, 16, 12}, explicit_mask({70, 90})},
        {"explicit_b_tq_tk", {2, 2, 2, 70, 90, 16, 12}, explicit_mask({2, 70, 90})},
        {"explicit_and_causal_and_padding", {2, 2, 2, 70, 70, 16, 12},
         [] {
             AttentionMask mask = explicit_mask({2, 70, 70});
             mask.causal = true;
             mask.key_lengths = {70, 50};
             return mask;
         }()},
        {"grouped_kv_4_over_2", {2, 4, 2, 70, 70, 16, 12}, causal()},
        {"grouped_kv_6_over_2_padded", {2, 6, 2, 65, 65, 8, 8}, padded({65, 20})},
        {"all_masked_rows_zero", {2, 2, 2, 20, 24, 16, 12}, with_empty_rows(20, 24), MaskedRows::zero},
        {"wide_heads_128", {1, 2, 2, 65, 65, 128, 128}, causal()},
        {"uneven_heads_100_72", {1, 2, 1, 65, 70, 100, 72}, causal()},
        {"longer_257_d64", {1, 2, 2, 257, 257, 64, 64}, causal()},
        {"window_5_causal_padded", {2, 2, 2, 130, 130, 16, 16}, windowed(5, true, {130, 70})},
        {"window_9_encoder_padded", {2, 2, 1, 70, 70, 16, 12}, windowed(9, false, {70, 33})},
        {"window_20_cache_tq_lt_tk", {2, 2, 2, 37, 100, 16, 12}, windowed(20, true)},
        {"prefix_lm_padded", {2, 2, 2, 130, 130, 16, 16}, token_rules(2, 130, true, false, {130, 70})},
        {"documents_prefix_lm_grouped", {2, 4, 2, 70, 70, 16, 12}, token_rules(2, 70, true, true, {70, 41})},
        {"documents_cache_tq_lt_tk", {2, 2, 2, 37, 100, 16, 12}, token_rules(2, 100, false, true)},
    };
}

class CudaAttentionAgreement : public DeviceTest, public ::testing::WithParamInterface<Param> {};

TEST_P(CudaAttentionAgreement, ForwardAndGradientsMatchTheCpuOp) {
    const Case& c = GetParam().c;
    expect_agreement(*context, GetParam().kernel, c.dims, c.mask, c.masked_rows, 7);
}

INSTANTIATE_TEST_SUITE_P(Masks, CudaAttentionAgreement, ::testing::ValuesIn(params(cases())), param_name);

// A row with no eligible key under "zero": exactly zero context, weights and
// gradient, -inf lse; never NaN.
class CudaMaskedRows : public DeviceTest, public ::testing::WithParamInterface<AttentionKernel> {};

TEST_P(CudaMaskedRows, EmptyRowsAreExactlyZero) {
    const AttentionDims dims{2, 2, 2, 20, 24, 16, 12};
    const AttentionMask mask = with_empty_rows(20, 24);  // row 3 everywhere; all rows of batch item 1
    const Inputs in = random_inputs(dims, 3);
    AttentionOptions options;
    options.scale = 0.25;
    options.masked_rows = MaskedRows::zero;
    options.need_weights = GetParam() == AttentionKernel::dense;
    const device::HostAttention out = device::attention_host(*context, GetParam(), in.q, in.k, in.v, mask, options);
    options.need_weights = false;
    const device::HostAttentionGrads grads =
        device::attention_backward_host(*context, GetParam(), in.q, in.k, in.v, mask, options, in.dcontext);
    for (size_t b = 0; b < 2; ++b)
        for (size_t h = 0; h < 2; ++h)
            for (size_t i = 0; i < 20; ++i) {
                if (!(b == 1 || i == 3)) continue;
                for (size_t c = 0; c < 12; ++c) EXPECT_EQ(out.context.at({b, h, i, c}), 0.0) << b << h << i;
                for (size_t c = 0; c < 16; ++c) EXPECT_EQ(grads.dq.at({b, h, i, c}), 0.0) << b << h << i;
                if (out.weights.defined()) {
                    for (size_t j = 0; j < 24; ++j) EXPECT_EQ(out.weights.at({b, h, i, j}), 0.0);
                }
                if (out.lse.defined()) {
                    EXPECT_EQ(out.lse.at({b, h, i}), -std::numeric_limits<double>::infinity());
                }
            }
    for (const Tensor* t : {&out.context, &grads.dq, &grads.dk, &grads.dv})
        for (double x : t->values()) ASSERT_TRUE(std::isfinite(x));
    // batch item 1 has no eligible key at all: its K/V gradients are zero too
    for (size_t h = 0; h < 2; ++h)
        for (size_t j = 0; j < 24; ++j) {
            for (size_t c = 0; c < 16; ++c) EXPECT_EQ(grads.dk.at({1, h, j, c}), 0.0);
            for (size_t c = 0; c < 12; ++c) EXPECT_EQ(grads.dv.at({1, h, j, c}), 0.0);
        }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaMaskedRows, ::testing::Values(AttentionKernel::dense, AttentionKernel::flash),
                         [](const ::testing::TestParamInfo<AttentionKernel>& info) {
                             return device::to_string(info.param);
                         });

}  // namespace
}  // namespace attnlab::cuda_test
