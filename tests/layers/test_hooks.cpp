// Hook points (layers/hooks.h): every point a model declares is reached by a
// forward pass; recording never changes a result; a replacement flows on
// (values and gradients); replacing scores or the pattern by themselves
// reproduces the fused op; bad patterns and bad replacements are refused; what a
// hook leaves (returned or edited in place) is checked against the point's
// HookValues: -inf in the scores (a knockout), nothing else non-finite.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "layer_test_util.h"
#include "layers/hooks.h"

namespace attnlab {
namespace {

using namespace layer_testing;

const std::vector<std::string> kDecoderBlockPoints = {
    "resid_pre",    "resid_mid",   "resid_post",   "attn.in",     "attn.in_kv", "attn.q",  "attn.k",
    "attn.v",       "attn.scores", "attn.pattern", "attn.z",      "attn.result", "attn.out", "ln1.out", "ffn.hidden",
    "ffn.out",      "ln2.out"};

// The logits of a forward (with `hooks` attached when given), then every
// parameter's gradient of sum(logits^2), as one row of values.
std::vector<double> logits_and_gradients(DecoderLM& model, const Indices& tokens, const std::vector<size_t>& lengths,
                                         Hooks* hooks) {
    model.zero_grad();
    Tensor logits = hooks ? recorded_forward(model, *hooks, [&] { return model.forward(tokens, lengths); })
                          : model.forward(tokens, lengths);
    sum(logits * logits).backward();
    std::vector<double> out = logits.values();
    for (const Tensor& p : model.parameters()) {
        const std::vector<double> g = p.grad().values();
        out.insert(out.end(), g.begin(), g.end());
    }
    return out;
}

TEST(Hooks, DecoderLMDeclaresEveryPointAndAForwardReachesEachOnce) {
    Rng init(1), data(2);
    DecoderLM model(small_config(), init, nullptr);
    model.eval();
    const std::vector<std::string> points = model.hook_points();
    std::set<std::string> want{"embed", "logits", "ln_f.out"};
    for (size_t l = 0; l < 2; ++l)
        for (const std::string& p : kDecoderBlockPoints) want.insert("blocks." + std::to_string(l) + "." + p);
    EXPECT_EQ(std::set<std::string>(points.begin(), points.end()), want);
    EXPECT_EQ(points.size(), want.size());  // no point declared twice

    Hooks hooks;
    hooks.record("*");
    recorded_forward(model, hooks, [&] { return model.forward(random_tokens(data, 2, 5, 11)); });
    for (const std::string& p : points) {
        ASSERT_TRUE(hooks.has_recorded(p)) << p;
        EXPECT_EQ(hooks.recorded(p).size(), 1u) << p;
    }
    EXPECT_EQ(hooks.last("blocks.1.attn.q").shape(), (Shape{2, 5, 2, 8}));
    EXPECT_EQ(hooks.last("blocks.1.attn.pattern").shape(), (Shape{2, 2, 5, 5}));
    EXPECT_EQ(hooks.last("blocks.1.attn.z").shape(), (Shape{2, 5, 2, 8}));
    EXPECT_EQ(hooks.last("blocks.0.ffn.hidden").shape(), (Shape{2, 5, 32}));
    EXPECT_EQ(hooks.last("logits").shape(), (Shape{2, 5, 11}));
    // the residual stream: a block's input is the previous block's output
    EXPECT_EQ(hooks.last("blocks.1.resid_pre").values(), hooks.last("blocks.0.resid_post").values());
    EXPECT_EQ(hooks.last("blocks.0.resid_pre").values(), hooks.last("embed").values());
    // self-attention's key/value input is its query input, the same tensor
    EXPECT_TRUE(hooks.last("blocks.0.attn.in").same(hooks.last("blocks.0.attn.in_kv")));
}

TEST(Hooks, EncoderDecoderHasCrossAttentionPointsAndTheMemory) {
    Rng init(1), data(2);
    EncoderDecoder model(small_config(), init, nullptr);
    model.eval();
    const std::vector<std::string> points = model.hook_points();
    for (const char* p : {"src_embed", "memory", "tgt_embed", "logits", "enc_ln_f.out", "dec_ln_f.out", "encoder.1.attn.pattern",
                          "decoder.0.resid_cross", "decoder.0.cross_attn.pattern", "decoder.1.ln_cross.out"})
        EXPECT_NE(std::find(points.begin(), points.end(), p), points.end()) << p;
    Hooks hooks;
    hooks.record("memory").record("decoder.*.cross_attn.in_kv").record("decoder.0.cross_attn.pattern");
    const Indices src = random_tokens(data, 2, 7, 11), tgt = random_tokens(data, 2, 4, 11);
    recorded_forward(model, hooks, [&] { return model.forward(src, {7, 5}, tgt); });
    // cross-attention reads the encoder's output
    EXPECT_EQ(hooks.last("decoder.1.cross_attn.in_kv").values(), hooks.last("memory").values());
    EXPECT_EQ(hooks.last("decoder.0.cross_attn.pattern").shape(), (Shape{2, 2, 4, 7}));
    EXPECT_EQ(hooks.last("decoder.0.cross_attn.pattern").at({1, 0, 2, 5}), 0.0);  // padded source key
}

// Each point's described axes (Module::described_hook_points, what analyses read
// layouts from) name the activation's dimensions one by one, with their sizes.
void expect_axes_describe_activations(const Module& model, const Hooks& hooks, const std::map<std::string, size_t>& sizes,
                                      const std::function<std::map<std::string, size_t>(const std::string&)>& positions) {
    const std::vector<Module::HookPoint> described = model.described_hook_points();
    EXPECT_EQ(described.size(), model.hook_points().size());
    for (const Module::HookPoint& point : described) {
        const Shape& shape = hooks.last(point.name).shape();
        ASSERT_EQ(point.axes.size(), shape.size()) << point.name;
        std::map<std::string, size_t> expected = sizes;
        for (const auto& [axis, size] : positions(point.name)) expected[axis] = size;
        for (size_t a = 0; a < shape.size(); ++a) {
            ASSERT_TRUE(expected.count(point.axes[a])) << point.name << ": unknown axis " << point.axes[a];
            EXPECT_EQ(shape[a], expected.at(point.axes[a])) << point.name << " axis " << a << " (" << point.axes[a] << ")";
        }
        EXPECT_EQ(point.axes.front(), "batch") << point.name;
    }
}

TEST(Hooks, EveryPointsAxesDescribeItsActivation) {
    Rng init(1), data(2);
    const std::map<std::string, size_t> sizes{{"batch", 2}, {"d_model", 16}, {"head", 2}, {"kv_head", 1},
                                              {"d_head", 8}, {"d_ffn", 32},  {"vocab", 11}};
    for (Positional positional : {Positional::learned, Positional::rotary, Positional::alibi}) {
        DecoderLM model(small_config(Norm::pre, positional, 1), init, nullptr);
        model.eval();
        Hooks hooks;
        hooks.record("*");
        recorded_forward(model, hooks, [&] { return model.forward(random_tokens(data, 2, 5, 11)); });
        expect_axes_describe_activations(model, hooks, sizes, [](const std::string&) {
            return std::map<std::string, size_t>{{"pos", 5}, {"query_pos", 5}, {"key_pos", 5}};
        });
        EXPECT_EQ(model.hook_point_axes("blocks.0.attn.pattern"), "batch head query_pos key_pos");
        EXPECT_EQ(model.hook_point_axes("blocks.0.attn.k"), "batch key_pos kv_head d_head");
        EXPECT_EQ(model.hook_point_axes("no.such.point"), "");
    }
    EncoderDecoder model(small_config(Norm::post, Positional::learned, 1), init, nullptr);
    model.eval();
    Hooks hooks;
    hooks.record("*");
    recorded_forward(model, hooks, [&] { return model.forward(random_tokens(data, 2, 7, 11), {7, 5}, random_tokens(data, 2, 4, 11)); });
    expect_axes_describe_activations(model, hooks, sizes, [](const std::string& name) {
        const bool source = name.rfind("encoder.", 0) == 0 || name == "src_embed" || name == "memory" || name.rfind("enc_", 0) == 0;
        const bool cross = name.find(".cross_attn.") != std::string::npos;
        const size_t S = 7, T = 4;
        return std::map<std::string, size_t>{{"pos", source ? S : T}, {"query_pos", source ? S : T}, {"key_pos", source || cross ? S : T}};
    });
}

TEST(Hooks, RecordingEverythingChangesNoLogitOrGradient) {
    Rng init(3), data(4);
    DecoderLM model(small_config(Norm::pre, Positional::learned, 1), init, nullptr);
    const Indices tokens = random_tokens(data, 2, 6, 11);
    auto run = [&](Hooks* hooks) { return logits_and_gradients(model, tokens, {6, 4}, hooks); };
    const std::vector<double> plain = run(nullptr);
    Hooks hooks;
    hooks.record("*");
    EXPECT_EQ(run(&hooks), plain);  // bit for bit
}

// forward_from and forward_blocks (TransformerLens's start_at_layer, stop_at_layer): the rest of the model from a
// block's recorded input gives the whole forward's logits bit for bit, padding
// and all; from the last block's output (first = layers) the final norm and head.
TEST(Hooks, ForwardFromABlocksInputIsTheWholeForward) {
    Rng init(3), data(4);
    ModelConfig config = small_config();
    config.layers = 3;
    DecoderLM model(config, init, nullptr);
    const Indices tokens = random_tokens(data, 2, 6, 11);
    const std::vector<size_t> lengths = {6, 4};
    Hooks hooks;
    hooks.record("blocks.*.resid_pre").record("blocks.2.resid_post");
    const std::vector<double> whole = recorded_forward(model, hooks, [&] { return model.forward(tokens, lengths); }).values();
    for (size_t first = 0; first <= 3; ++first) {
        const std::string entering = first < 3 ? "blocks." + std::to_string(first) + ".resid_pre" : "blocks.2.resid_post";
        Hooks later;
        later.record("blocks.*.resid_pre");
        const Tensor logits = recorded_forward(model, later, [&] { return model.forward_from(first, hooks.last(entering), tokens, lengths); });
        EXPECT_EQ(logits.values(), whole) << first;
        for (size_t l = 0; l < 3; ++l)  // the earlier blocks do not run
            EXPECT_EQ(later.has_recorded("blocks." + std::to_string(l) + ".resid_pre"), l >= first) << first << " " << l;
    }
    EXPECT_THROW(model.forward_from(4, hooks.last("blocks.0.resid_pre"), tokens, lengths), Error);
    EXPECT_THROW(model.forward_from(1, Tensor::zeros({2, 5, 16}), tokens, lengths), Error);  // the wrong shape
    // forward_blocks: blocks [1, 3) then from 3 on is the whole forward; [1, 2) is block 1's output
    const Tensor middle = model.forward_blocks(1, 3, hooks.last("blocks.1.resid_pre"), tokens, lengths);
    EXPECT_EQ(model.forward_from(3, middle, tokens, lengths).values(), whole);
    Hooks one;
    one.record("blocks.1.resid_post").record("blocks.2.resid_pre");
    const Tensor block1 = recorded_forward(model, one, [&] { return model.forward_blocks(1, 2, hooks.last("blocks.1.resid_pre"), tokens, lengths); });
    EXPECT_EQ(block1.values(), hooks.last("blocks.2.resid_pre").values());
    EXPECT_FALSE(one.has_recorded("blocks.2.resid_pre"));  // block 2 did not run
    EXPECT_THROW(model.forward_blocks(2, 1, hooks.last("blocks.0.resid_pre"), tokens, lengths), Error);
}

// Replacing the pattern (or the scores) by the value it had runs attention as
// separate ops: the logits and every gradient match the fused op's. Replacing
// each head's result by itself sums them (plus the bias) in place of the output
// projection: the same numbers within rounding.
TEST(Hooks, ReplacingPatternOrScoresByThemselvesReproducesTheFusedOp) {
    for (size_t kv_heads : {0u, 1u}) {
        for (const char* point : {"*.attn.pattern", "*.attn.scores", "*.attn.result"}) {
            SCOPED_TRACE(std::string(point) + (kv_heads ? ", grouped K/V" : ""));
            Rng init(5), data(6);
            DecoderLM model(small_config(Norm::pre, Positional::learned, kv_heads), init, nullptr);
            model.to(DType::f64);
            const Indices tokens = random_tokens(data, 2, 6, 11);
            auto run = [&](Hooks* hooks) { return logits_and_gradients(model, tokens, {6, 3}, hooks); };
            const std::vector<double> fused = run(nullptr);
            size_t calls = 0;
            Hooks hooks;
            hooks.replace(point, [&](const std::string&, const Tensor& t) {
                ++calls;
                return t;
            });
            const std::vector<double> composed = run(&hooks);
            EXPECT_EQ(calls, 2u);
            EXPECT_LT(max_abs_diff(composed, fused), 1e-10);
        }
    }
}

// result: each head's output in the stream; over heads, plus the bias, the module's output.
TEST(Hooks, EachHeadsResultSumsToTheOutput) {
    Rng init(9), data(10);
    DecoderLM model(small_config(Norm::pre, Positional::learned, 1), init, nullptr);
    model.to(DType::f64);
    const Indices tokens = random_tokens(data, 2, 5, 11);
    Hooks hooks;
    hooks.record("blocks.0.attn.result").record("blocks.0.attn.out").record("blocks.0.attn.z");
    recorded_forward(model, hooks, [&] { return model.forward(tokens, {5, 5}); });
    const Tensor& result = hooks.last("blocks.0.attn.result");
    ASSERT_EQ(result.shape(), (Shape{2, 5, 2, 16}));
    const Tensor summed = sum(result, {2}) + model.blocks[0]->attn.out_proj.bias;
    EXPECT_LT(max_abs_diff(summed.values(), hooks.last("blocks.0.attn.out").values()), 1e-12);
    // head 1's result is its z through its columns of W_O alone
    const Tensor z1 = slice(hooks.last("blocks.0.attn.z"), 2, 1, 2);  // (B, T, 1, d_h)
    const Tensor w1 = slice(model.blocks[0]->attn.out_proj.weight, 1, 8, 16);
    const Tensor expected = linear(reshape(z1, {2, 5, 8}), w1, Tensor());
    EXPECT_LT(max_abs_diff(reshape(slice(result, 2, 1, 2), {2, 5, 16}).values(), expected.values()), 1e-12);
}

TEST(Hooks, AReplacementFlowsOnAndGradientsFlowThroughIt) {
    Rng init(7), data(8);
    DecoderLM model(small_config(), init, nullptr);
    model.eval();
    const Indices tokens = random_tokens(data, 1, 5, 11);
    // zeroing every head's output of the last block leaves the residual stream there unchanged
    Hooks zero;
    zero.record("blocks.1.resid_pre").record("blocks.1.resid_mid").record("blocks.1.attn.out");
    zero.replace("blocks.1.attn.z", [](const std::string&, const Tensor& z) { return z * 0.0; });
    recorded_forward(model, zero, [&] { return model.forward(tokens); });
    // out = 0 W^T + b: only the output projection's bias is left
    const std::vector<double> pre = zero.last("blocks.1.resid_pre").values(), mid = zero.last("blocks.1.resid_mid").values();
    const std::vector<double> out = zero.last("blocks.1.attn.out").values();
    for (size_t e = 0; e < pre.size(); ++e) EXPECT_NEAR(mid[e], pre[e] + out[e], 1e-6);
    for (size_t e = 16; e < out.size(); ++e) EXPECT_EQ(out[e], out[e % 16]);  // the same bias at every position
    // a scaled replacement scales the gradient reaching the replaced point's inputs
    Hooks scaled;
    scaled.replace("blocks.0.ffn.hidden", [](const std::string&, const Tensor& h) { return h * 0.0; });
    Tensor logits = recorded_forward(model, scaled, [&] { return model.forward(tokens); });
    model.zero_grad();
    sum(logits).backward();
    for (const auto& [name, p] : model.named_parameters())
        if (name.rfind("blocks.0.ffn.fc1.", 0) == 0) EXPECT_EQ(max_abs_diff(p.grad().values(), std::vector<double>(p.numel(), 0.0)), 0.0) << name;
}

TEST(Hooks, KVCachedDecodingRecordsOnePerStep) {
    Rng init(9), data(10);
    DecoderLM model(small_config(), init, nullptr);
    model.eval();
    const Indices tokens = random_tokens(data, 1, 4, 11);
    Hooks hooks;
    hooks.record("blocks.0.attn.k").record("blocks.0.attn.pattern");
    DecoderCache cache;
    {
        HookScope scope(model, hooks);
        for (size_t t = 0; t < 4; ++t) model.forward_cached(token_columns(tokens, t, t + 1), cache);
    }
    ASSERT_EQ(hooks.recorded("blocks.0.attn.k").size(), 4u);
    EXPECT_EQ(hooks.recorded("blocks.0.attn.k")[3].shape(), (Shape{1, 1, 2, 8}));  // the new position's keys
    EXPECT_EQ(hooks.recorded("blocks.0.attn.pattern")[3].shape(), (Shape{1, 2, 1, 4}));  // over every cached key
}

TEST(Hooks, BadPatternsAndReplacementsAreRefused) {
    Rng init(11), data(12);
    DecoderLM model(small_config(), init, nullptr);
    Hooks typo;
    typo.record("blocks.0.atn.pattern");
    const std::string message = error_message([&] { HookScope scope(model, typo); });
    EXPECT_TRUE(starts_with(message, "[hooks] no hook point matches \"blocks.0.atn.pattern\" (nearest: blocks.0.")) << message;
    Hooks misshapen;
    misshapen.replace("blocks.0.attn.z", [](const std::string&, const Tensor& z) { return sum(z); });
    const std::string shape_message =
        error_message([&] { recorded_forward(model, misshapen, [&] { return model.forward(random_tokens(data, 1, 3, 11)); }); });
    EXPECT_TRUE(starts_with(shape_message, "[hooks] blocks.0.attn.z: a replacement must keep shape (1,3,2,8)")) << shape_message;
    // the scope detaches even when the forward throws: a plain forward runs untouched
    EXPECT_NO_THROW(model.forward(random_tokens(data, 1, 3, 11)));
    EXPECT_THROW(Hooks().recorded("logits"), Error);
}

TEST(Hooks, ComposedAttentionKeepsTheMaskedRowPolicies) {
    Rng init(13), data(14);
    ModelConfig c = small_config();
    c.block.attention.masked_rows = MaskedRows::zero;
    DecoderLM model(c, init, nullptr);
    Hooks hooks;
    hooks.replace("*.pattern", [](const std::string&, const Tensor& p) { return p; }).record("blocks.0.attn.pattern");
    Tensor logits = recorded_forward(model, hooks, [&] { return model.forward(random_tokens(data, 2, 4, 11), {4, 0}); });
    sum(logits).backward();
    const Tensor& pattern = hooks.last("blocks.0.attn.pattern");
    for (size_t h = 0; h < 2; ++h)
        for (size_t i = 0; i < 4; ++i)
            for (size_t j = 0; j < 4; ++j) EXPECT_EQ(pattern.at({1, h, i, j}), 0.0);  // the empty item: no weight
    for (const Tensor& p : model.parameters()) EXPECT_TRUE(all_finite(p.grad().values()));
    DecoderLM strict(small_config(), init, nullptr);
    const std::string message = error_message([&] {
        recorded_forward(strict, hooks, [&] { return strict.forward(random_tokens(data, 2, 4, 11), {4, 0}); });
    });
    EXPECT_TRUE(starts_with(message, "[attention] batch item 1, query position 0 has no eligible key")) << message;
}

// (1, 1, T, T): true at the (query, key) pairs given
Mask pairs_mask(size_t T, const std::vector<std::pair<size_t, size_t>>& pairs) {
    Mask m({1, 1, T, T}, std::vector<uint8_t>(T * T, 0));
    for (const auto& [i, j] : pairs) m.values[i * T + j] = 1;
    return m;
}

// A knockout (a score set to -inf) is a replacement like any other: the key gets
// no weight, the others renormalise, gradients stay finite; editing the scores in
// place gives the same forward as returning the edited copy.
TEST(Hooks, ScoresMayHoldMinusInfAndAKnockedOutKeyGetsNoWeight) {
    Rng init(21), data(22);
    DecoderLM model(small_config(), init, nullptr);
    model.to(DType::f64);
    const Indices tokens = random_tokens(data, 2, 6, 11);
    const Mask knock = pairs_mask(6, {{4, 1}});
    Hooks replaced;
    replaced.replace("blocks.0.attn.scores", [&](const std::string&, const Tensor& s) { return masked_fill(s, knock, -INFINITY); })
        .record("blocks.0.attn.pattern");
    Tensor logits = recorded_forward(model, replaced, [&] { return model.forward(tokens, {6, 6}); });
    model.zero_grad();
    sum(logits * logits).backward();
    for (const Tensor& p : model.parameters()) EXPECT_TRUE(all_finite(p.grad().values()));
    const Tensor& pattern = replaced.last("blocks.0.attn.pattern");
    for (size_t b = 0; b < 2; ++b)
        for (size_t h = 0; h < 2; ++h) {
            EXPECT_EQ(pattern.at({b, h, 4, 1}), 0.0);
            double row = 0.0;
            for (size_t j = 0; j < 6; ++j) row += pattern.at({b, h, 4, j});
            EXPECT_NEAR(row, 1.0, 1e-12);
        }
    NoGradGuard no_grad;
    Hooks in_place;
    in_place.replace("blocks.0.attn.scores", [&](const std::string&, const Tensor& s) {
        Tensor(s).assign(masked_fill(s, knock, -INFINITY));
        return s;
    });
    const Tensor edited = recorded_forward(model, in_place, [&] { return model.forward(tokens, {6, 6}); });
    EXPECT_EQ(max_abs_diff(edited.values(), logits.values()), 0.0);
}

// A row the hook leaves at -inf throughout has no eligible key: the model's
// masked_rows policy decides, as for a row the mask empties.
TEST(Hooks, AScoresRowOfOnlyMinusInfFollowsTheMaskedRowsPolicy) {
    Rng init(23), data(24);
    const Indices tokens = random_tokens(data, 1, 6, 11);
    const Mask row = pairs_mask(6, {{3, 0}, {3, 1}, {3, 2}, {3, 3}, {3, 4}, {3, 5}});
    Hooks hooks;
    hooks.replace("blocks.1.attn.scores", [&](const std::string&, const Tensor& s) { return masked_fill(s, row, -INFINITY); })
        .record("blocks.1.attn.pattern")
        .record("blocks.1.attn.z");
    DecoderLM strict(small_config(), init, nullptr);
    const std::string message = error_message([&] { recorded_forward(strict, hooks, [&] { return strict.forward(tokens); }); });
    EXPECT_TRUE(starts_with(message, "[attention] blocks.1.attn.scores: batch item 0, head 0, query position 3 has no key left "
                                     "after the hook (every score -inf; masked_rows = \"error\"")) << message;
    EXPECT_NO_THROW(strict.forward(tokens));  // detached, as it was

    ModelConfig c = small_config();
    c.block.attention.masked_rows = MaskedRows::zero;
    DecoderLM lenient(c, init, nullptr);
    lenient.to(DType::f64);
    Tensor logits = recorded_forward(lenient, hooks, [&] { return lenient.forward(tokens); });
    lenient.zero_grad();
    sum(logits * logits).backward();
    EXPECT_TRUE(all_finite(logits.values()));
    for (const auto& [name, p] : lenient.named_parameters()) EXPECT_TRUE(all_finite(p.grad().values())) << name;
    const Tensor& pattern = hooks.last("blocks.1.attn.pattern");
    const Tensor& z = hooks.last("blocks.1.attn.z");  // (B, T, H, d_h)
    for (size_t h = 0; h < 2; ++h) {
        for (size_t j = 0; j < 6; ++j) EXPECT_EQ(pattern.at({0, h, 3, j}), 0.0);  // no weight
        for (size_t d = 0; d < 8; ++d) EXPECT_EQ(z.at({0, 3, h, d}), 0.0);        // no context
    }
}

// NaN and +inf are refused everywhere, -inf everywhere but the scores, whether the
// hook returns them or writes them into its input; a point that held them before
// the hook (the model's own doing) is not refused.
TEST(Hooks, AHookMayNotBringNaNOrInfinity) {
    Rng init(25), data(26);
    DecoderLM model(small_config(), init, nullptr);
    model.eval();
    const Indices tokens = random_tokens(data, 1, 4, 11);
    const auto refusal = [&](const std::string& point, Hooks::Replace fn) {
        Hooks hooks;
        hooks.replace(point, std::move(fn));
        return error_message([&] { recorded_forward(model, hooks, [&] { return model.forward(tokens); }); });
    };
    const Mask one = pairs_mask(4, {{2, 1}});
    for (double value : {double(NAN), double(INFINITY)}) {
        const std::string message = refusal("blocks.0.attn.scores", [&](const std::string&, const Tensor& s) { return masked_fill(s, one, value); });
        EXPECT_TRUE(starts_with(message, "[hooks] blocks.0.attn.scores: after the hook it holds a non-finite value, " +
                                             std::string(std::isnan(value) ? "nan" : "inf") + " at (0, 0, 2, 1) (scores may be -inf")) << message;
    }
    const std::string z_message = refusal("blocks.1.attn.z", [](const std::string&, const Tensor& z) { return z - INFINITY; });
    EXPECT_TRUE(starts_with(z_message, "[hooks] blocks.1.attn.z: after the hook it holds a non-finite value, -inf at (0, 0, 0, 0)"))
        << z_message;
    EXPECT_TRUE(contains(z_message, "(only finite values may follow a hook here)")) << z_message;
    NoGradGuard no_grad;
    const std::string in_place = refusal("blocks.0.ffn.hidden", [](const std::string&, const Tensor& h) {
        Tensor(h).assign(h * NAN);
        return h;
    });
    EXPECT_TRUE(starts_with(in_place, "[hooks] blocks.0.ffn.hidden: after the hook it holds a non-finite value, nan at (0, 0, 0)"))
        << in_place;
    EXPECT_TRUE(all_finite(model.forward(tokens).values()));  // the model as it was

    for (const auto& [name, p] : model.named_parameters())
        if (name == "tok_emb.weight") Tensor(p).assign(p * NAN);
    Hooks unchanged;
    unchanged.replace("blocks.0.resid_pre", [](const std::string&, const Tensor& x) { return x; });
    EXPECT_NO_THROW(recorded_forward(model, unchanged, [&] { return model.forward(tokens); }));
}

}  // namespace
}  // namespace attnlab
