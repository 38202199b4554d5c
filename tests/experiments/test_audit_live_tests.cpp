// The audit's live tests can fail (experiments/analysis/audit.h): a mask built
// without `causal` (or without key padding) makes the perturbation (padding)
// test FAIL, on the inputs of the tiny checkpoints of tiny_runs.h; and the
// dense reference on hand-computed values, against the op under every mask
// kind (and not under another mask), and on all-masked rows.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"
#include "experiments/analysis/audit.h"
#include "tiny_runs.h"

namespace attnlab::analysis_test {
namespace {

// --- the tests can fail ---

struct SiteInputs {
    Tensor x_q, x_kv;  // the hook points <module>.in and <module>.in_kv
};

struct LayerInputs {
    LoadedModel loaded;
    Batch batch;
    std::vector<SiteInputs> inputs;
    std::vector<AttentionKind> kinds;
    const MultiHeadAttention* attn = nullptr;  // layer 0
};

LayerInputs layer_inputs(const Trained& run) {
    LayerInputs in;
    in.loaded = run.load();
    in.batch = eval_data(run.config, 1)[0];
    NoGradGuard no_grad;
    const AttentionPass pass = attention_pass(*in.loaded.model, in.batch);
    for (const AttentionSite& site : attention_sites(*in.loaded.model))
        in.inputs.push_back({pass.at(site, "in"), pass.at(site, "in_kv")});
    in.kinds = pass.kinds;
    in.attn = attention_sites(*in.loaded.model)[0].attn;
    return in;
}

TEST(Audit, CausalPerturbationFailsWithAMaskBuiltWithoutCausal) {
    const LayerInputs in = layer_inputs(decoder_run());
    const AttentionKind& self = in.kinds[0];
    ASSERT_TRUE(self.mask.causal);
    Rng rng(3);
    const LiveTest good = causal_perturbation(*in.attn, in.inputs[0].x_q, self.query_lengths, self.mask, rng, "correct mask");
    EXPECT_TRUE(good.pass) << good.detail;
    EXPECT_EQ(good.figure, 0.0);

    AttentionMask broken = self.mask;  // the library's mask for this batch, without its causal part
    broken.causal = false;
    const LiveTest bad = causal_perturbation(*in.attn, in.inputs[0].x_q, self.query_lengths, broken, rng, "no causal");
    EXPECT_FALSE(bad.pass);
    EXPECT_GT(bad.figure, 100 * bad.tolerance);
}

TEST(Audit, PaddingInvarianceFailsWithAMaskBuiltWithoutKeyPadding) {
    // the encoder's self-attention: key padding is all that keeps padded source positions out
    const LayerInputs in = layer_inputs(enc_dec_run());
    const AttentionKind& enc = in.kinds[0];
    ASSERT_EQ(enc.name, "enc_self");
    ASSERT_FALSE(enc.mask.key_lengths.empty());
    Rng rng(4);
    const SiteInputs& x = in.inputs[0];
    const LiveTest good = padding_invariance(*in.attn, x.x_q, x.x_kv, enc.query_lengths, enc.mask.key_lengths, enc.mask, rng, "ok");
    EXPECT_TRUE(good.pass) << good.detail;
    AttentionMask broken = enc.mask;
    broken.key_lengths.clear();
    const LiveTest bad = padding_invariance(*in.attn, x.x_q, x.x_kv, enc.query_lengths, enc.mask.key_lengths, broken, rng, "no padding");
    EXPECT_FALSE(bad.pass);
    EXPECT_GT(bad.figure, 100 * bad.tolerance);
}

TEST(Audit, CausalSelfAttentionNeedsNoKeyPaddingForItsValidRows) {
    // Right padding sits after every valid query, so the causal mask alone keeps it
    // out of valid rows: the decoder's padding test passes even without key padding
    // (the key padding only matters for padded query rows, which count nowhere).
    const LayerInputs in = layer_inputs(decoder_run());
    const AttentionKind& self = in.kinds[0];
    Rng rng(4);
    const SiteInputs& x = in.inputs[0];
    AttentionMask causal_only = self.mask;
    causal_only.key_lengths.clear();
    EXPECT_TRUE(padding_invariance(*in.attn, x.x_q, x.x_kv, self.query_lengths, self.mask.key_lengths, causal_only, rng, "").pass);
    AttentionMask neither;
    EXPECT_FALSE(padding_invariance(*in.attn, x.x_q, x.x_kv, self.query_lengths, self.mask.key_lengths, neither, rng, "").pass);
}

TEST(Audit, CrossAttentionPaddingFailsWithoutTheSourceMask) {
    const LayerInputs in = layer_inputs(enc_dec_run());
    const AttentionKind& cross = in.kinds[2];
    ASSERT_EQ(cross.name, "cross");
    const std::vector<AttentionSite> sites = attention_sites(*in.loaded.model);
    size_t s = 0;
    while (sites[s].kind != "cross") ++s;
    Rng rng(5);
    const LiveTest good = padding_invariance(*sites[s].attn, in.inputs[s].x_q, in.inputs[s].x_kv, cross.query_lengths,
                                             cross.mask.key_lengths, cross.mask, rng, "ok");
    EXPECT_TRUE(good.pass) << good.detail;
    const LiveTest bad = padding_invariance(*sites[s].attn, in.inputs[s].x_q, in.inputs[s].x_kv, cross.query_lengths,
                                            cross.mask.key_lengths, AttentionMask{}, rng, "no mask");
    EXPECT_FALSE(bad.pass);
}

TEST(Audit, EncoderBidirectionalTestFailsForACausalEncoderMask) {
    const LayerInputs in = layer_inputs(enc_dec_run());
    const AttentionKind& enc = in.kinds[0];
    ASSERT_EQ(enc.name, "enc_self");
    Rng rng(6);
    EXPECT_TRUE(bidirectional(*in.attn, in.inputs[0].x_q, enc.query_lengths, enc.mask, rng, "ok").pass);
    AttentionMask causal = enc.mask;
    causal.causal = true;
    const LiveTest bad = bidirectional(*in.attn, in.inputs[0].x_q, enc.query_lengths, causal, rng, "causal encoder");
    EXPECT_FALSE(bad.pass);
    EXPECT_EQ(bad.figure, 0.0);
}

// --- the dense reference ---

TEST(DenseReference, HandComputedValues) {
    // one query (1, 0), keys (1, 0) and (0, 1), scale 1: scores 1 and 0
    const Tensor q = Tensor::from_values({1, 0}, {1, 1, 1, 2}, DType::f64);
    const Tensor k = Tensor::from_values({1, 0, 0, 1}, {1, 1, 2, 2}, DType::f64);
    const Tensor v = Tensor::from_values({1, 2, 3, 4}, {1, 1, 2, 2}, DType::f64);
    const double a = std::exp(1.0) / (std::exp(1.0) + 1.0);
    DenseAttention r = dense_reference_attention(q, k, v, {}, 1.0, MaskedRows::error);
    EXPECT_NEAR(r.weights[0], a, 1e-15);
    EXPECT_NEAR(r.weights[1], 1 - a, 1e-15);
    EXPECT_NEAR(r.context[0], a * 1 + (1 - a) * 3, 1e-15);
    EXPECT_NEAR(r.context[1], a * 2 + (1 - a) * 4, 1e-15);
    // causal with Tq 1 < Tk 2 is bottom-right aligned: the one query sees both keys
    AttentionMask causal;
    causal.causal = true;
    r = dense_reference_attention(q, k, v, causal, 1.0, MaskedRows::error);
    EXPECT_NEAR(r.weights[1], 1 - a, 1e-15);
    // key padding to length 1: all weight on key 0
    AttentionMask padding;
    padding.key_lengths = {1};
    r = dense_reference_attention(q, k, v, padding, 1.0, MaskedRows::error);
    EXPECT_EQ(r.weights[0], 1.0);
    EXPECT_EQ(r.weights[1], 0.0);
    EXPECT_EQ(r.context[1], 2.0);
    // length 0: "error" names the row, "zero" gives zeros
    padding.key_lengths = {0};
    try {
        dense_reference_attention(q, k, v, padding, 1.0, MaskedRows::error);
        ADD_FAILURE() << "no error for an all-masked row";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("batch item 0, query position 0"), std::string::npos) << e.what();
    }
    r = dense_reference_attention(q, k, v, padding, 1.0, MaskedRows::zero);
    for (double x : r.weights) EXPECT_EQ(x, 0.0);
    for (double x : r.context) EXPECT_EQ(x, 0.0);
}

TEST(DenseReference, AgreesWithTheOpForEveryMaskKindAndDisagreesUnderAnotherMask) {
    for (DType dtype : {DType::f32, DType::f64}) {
        const LiveTest t = reference_agreement_random(dtype);
        EXPECT_TRUE(t.pass) << t.name << ": " << t.figure << "; " << t.detail;
    }
    Rng rng(9);
    const Tensor q = rng.normal({1, 2, 4, 3}, 0, 1, DType::f64), k = rng.normal({1, 2, 4, 3}, 0, 1, DType::f64),
                 v = rng.normal({1, 2, 4, 3}, 0, 1, DType::f64);
    AttentionMask causal;
    causal.causal = true;
    AttentionOptions options;
    options.scale = 0.5;
    const std::vector<double> op = attention(q, k, v, causal, options).context.values();
    const DenseAttention same = dense_reference_attention(q, k, v, causal, 0.5, MaskedRows::error);
    const DenseAttention other = dense_reference_attention(q, k, v, {}, 0.5, MaskedRows::error);
    double same_diff = 0, other_diff = 0;
    for (size_t e = 0; e < op.size(); ++e) {
        same_diff = std::max(same_diff, std::abs(op[e] - same.context[e]));
        other_diff = std::max(other_diff, std::abs(op[e] - other.context[e]));
    }
    EXPECT_LE(same_diff, 1e-12);
    EXPECT_GT(other_diff, 1e-2);
}

TEST(DenseReference, AllMaskedRowPolicyOfTheOp) {
    const LiveTest t = masked_row_policy_op();
    EXPECT_TRUE(t.pass) << t.detail;
    EXPECT_EQ(t.figure, 0.0);
}

}  // namespace
}  // namespace attnlab::analysis_test
