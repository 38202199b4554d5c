// Shape contracts (seed exercise 1), parameter counts (exercise 9), state_dict,
// construction errors, score scales, and train/eval propagation.
#include <gtest/gtest.h>

#include "autograd/attention.h"
#include "layer_test_util.h"

namespace attnlab {
namespace {

using namespace layer_testing;

// B=4, S=32, D=128, H=8: Q, K, V (4,8,32,16), weights (4,8,32,32), output (4,32,128).
TEST(ShapeContracts, SeedExerciseOne) {
    const size_t B = 4, S = 32, D = 128, H = 8, d_h = 16;
    Rng init(1), data(2);
    MultiHeadAttention mha(attention_config(D, H), init, nullptr);
    EXPECT_EQ(mha.head_width, d_h);
    EXPECT_DOUBLE_EQ(mha.scale, 0.25);  // 1/sqrt(16)
    const Tensor x = data.uniform({B, S, D}, -1, 1);
    // the head split MultiHeadAttention uses: (B, S, H*d_h) -> (B, S, H, d_h) -> (B, H, S, d_h)
    auto split = [&](const Tensor& t) { return permute(reshape(t, {B, S, H, d_h}), {0, 2, 1, 3}); };
    const Tensor q = split(mha.q_proj.forward(x)), k = split(mha.k_proj.forward(x)), v = split(mha.v_proj.forward(x));
    EXPECT_EQ(q.shape(), (Shape{B, H, S, d_h}));
    EXPECT_EQ(k.shape(), (Shape{B, H, S, d_h}));
    EXPECT_EQ(v.shape(), (Shape{B, H, S, d_h}));
    const Tensor scores = matmul(q, transpose(k, 2, 3)) * mha.scale;
    EXPECT_EQ(scores.shape(), (Shape{B, H, S, S}));

    MultiHeadAttention::Output out = mha.forward(x, x, {}, true);
    EXPECT_EQ(out.weights.shape(), (Shape{B, H, S, S}));
    EXPECT_EQ(out.out.shape(), (Shape{B, S, D}));
    // the weights are softmax over keys of these scores, so the split above is the module's
    EXPECT_LE(max_abs_diff(out.weights.values(), softmax(scores, -1).values()), 1e-6);
    // and the output is out_proj of the merged contexts
    const Tensor merged = reshape(permute(matmul(out.weights, v), {0, 2, 1, 3}), {B, S, D});
    EXPECT_LE(max_abs_diff(out.out.values(), mha.out_proj.forward(merged).values()), 1e-5);
}

// Exercise 9: at fixed width, heads split the width; they do not add parameters.
TEST(ParameterCounts, OneAndFourHeadsAtFixedWidth) {
    for (size_t D : {16u, 128u}) {
        Rng init(1);
        MultiHeadAttention one(attention_config(D, 1), init, nullptr), four(attention_config(D, 4), init, nullptr);
        EXPECT_EQ(one.parameter_count(), 4 * (D * D + D));
        EXPECT_EQ(four.parameter_count(), 4 * (D * D + D));
        AttentionConfig no_bias = attention_config(D, 4);
        no_bias.bias = false;
        EXPECT_EQ(MultiHeadAttention(no_bias, init, nullptr).parameter_count(), 4 * D * D);
        // grouped K/V: one K/V head of width D/4 shrinks only k_proj and v_proj
        EXPECT_EQ(MultiHeadAttention(attention_config(D, 4, 1), init, nullptr).parameter_count(),
                  2 * (D * D + D) + 2 * (D * D / 4 + D / 4));
    }
}

// ---- state_dict ----

TEST(StateDict, RoundTripCopiesValues) {
    Rng init_a(1), init_b(2), data(3);
    DecoderLM a(small_config(), init_a, nullptr), b(small_config(), init_b, nullptr);
    const Indices tokens = random_tokens(data, 2, 6, 11);
    ASSERT_NE(a.forward(tokens).values(), b.forward(tokens).values());
    b.load_state_dict(a.state_dict());
    EXPECT_EQ(a.forward(tokens).values(), b.forward(tokens).values());
    // values were copied, not shared: changing a leaves b alone
    const std::vector<double> head_b = b.head.weight.values();
    a.head.weight.assign(Tensor::zeros(a.head.weight.shape()));
    EXPECT_EQ(b.head.weight.values(), head_b);
    EXPECT_FALSE(b.head.weight.same(a.head.weight));
}

TEST(StateDict, StrictLoadListsEveryProblemInOneError) {
    Rng init_a(1), init_b(2);
    DecoderLM a(small_config(), init_a, nullptr), b(small_config(), init_b, nullptr);
    NamedTensors state;
    for (const auto& [name, p] : a.state_dict()) {
        if (name == "head.weight" || name == "blocks.1.ln2.bias") continue;  // missing
        if (name == "blocks.0.ln1.weight") state.emplace_back(name, Tensor::ones({8}));
        else if (name == "tok_emb.weight") state.emplace_back(name, Tensor::zeros({11, 8}));
        else state.emplace_back(name, p);
    }
    state.emplace_back("extra.weight", Tensor::zeros({3}));  // unexpected
    state.emplace_back("blocks.0.attn.rope.weight", Tensor::zeros({2}));
    const NamedTensors before = b.state_dict();
    std::vector<std::vector<double>> before_values;
    for (const auto& [name, p] : before) before_values.push_back(p.values());

    const std::string message = error_message([&] { b.load_state_dict(state); });
    EXPECT_TRUE(starts_with(message, "[load_state_dict]")) << message;
    for (const char* part : {"missing", "head.weight", "blocks.1.ln2.bias", "unexpected", "extra.weight",
                             "blocks.0.attn.rope.weight", "blocks.0.ln1.weight", "(8)", "(16)", "tok_emb.weight",
                             "(11,8)", "(11,16)"})
        EXPECT_TRUE(contains(message, part)) << "missing \"" << part << "\" in: " << message;
    // nothing half-loaded
    for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(before[i].second.values(), before_values[i]) << before[i].first;
}

TEST(StateDict, NonStrictSkipsMissingAndUnexpected) {
    Rng init_a(1), init_b(2);
    DecoderLM a(small_config(), init_a, nullptr), b(small_config(), init_b, nullptr);
    NamedTensors state;
    for (const auto& [name, p] : a.state_dict())
        if (name != "head.weight") state.emplace_back(name, p);
    state.emplace_back("extra.weight", Tensor::zeros({3}));
    const std::vector<double> head_b = b.head.weight.values();
    b.load_state_dict(state, false);
    EXPECT_EQ(b.head.weight.values(), head_b);  // missing: kept
    EXPECT_EQ(b.tok_emb.weight.values(), a.tok_emb.weight.values());
    EXPECT_EQ(b.blocks[1]->ffn->fc2.bias.values(), a.blocks[1]->ffn->fc2.bias.values());
    // shape conflicts are never skipped
    for (auto& [name, t] : state)
        if (name == "ln_f.weight") t = Tensor::zeros({4});
    const std::string message = error_message([&] { b.load_state_dict(state, false); });
    EXPECT_TRUE(starts_with(message, "[load_state_dict]") && contains(message, "ln_f.weight") && contains(message, "(4)"))
        << message;
}

// ---- construction and configuration errors ----

TEST(ConstructionErrors, WidthNotDivisibleByHeads) {
    Rng init(1);
    std::string message = error_message([&] { MultiHeadAttention mha(attention_config(10, 4), init, nullptr); });
    EXPECT_TRUE(starts_with(message, "[attention]") && contains(message, "10") && contains(message, "4")) << message;
    ModelConfig c = small_config();
    c.block.attention.heads = 3;  // 16 % 3 != 0
    message = error_message([&] { DecoderLM model(c, init, nullptr); });
    EXPECT_TRUE(starts_with(message, "[attention]") && contains(message, "16") && contains(message, "3")) << message;
    AttentionConfig explicit_width = attention_config(10, 4);
    explicit_width.head_width = 3;  // an explicit head width lifts the rule
    EXPECT_EQ(MultiHeadAttention(explicit_width, init, nullptr).q_proj.weight.shape(), (Shape{12, 10}));
}

TEST(ConstructionErrors, KvHeadsMustDivideHeads) {
    Rng init(1);
    const std::string message = error_message([&] { MultiHeadAttention mha(attention_config(16, 4, 3), init, nullptr); });
    EXPECT_TRUE(starts_with(message, "[attention]") && contains(message, "kv_heads 3") && contains(message, "4")) << message;
    EXPECT_TRUE(starts_with(error_message([&] { MultiHeadAttention mha(attention_config(16, 0), init, nullptr); }), "[attention]"));
}

TEST(ConstructionErrors, MaskShapeMismatch) {
    const Tensor q = Tensor::zeros({1, 1, 2, 4}), kv = Tensor::zeros({1, 1, 3, 4});
    AttentionMask mask;
    mask.eligible = Mask::filled({3, 3}, true);
    std::string message = error_message([&] { attention(q, kv, kv, mask, {}); });
    EXPECT_TRUE(starts_with(message, "[attention]") && contains(message, "(3,3)") && contains(message, "(2,3)")) << message;
    Rng init(1);
    MultiHeadAttention mha(attention_config(4, 1), init, nullptr);
    message = error_message([&] { mha.forward(Tensor::zeros({1, 2, 4}), Tensor::zeros({1, 3, 4}), mask); });
    EXPECT_TRUE(starts_with(message, "[attention_packed]") && contains(message, "(3,3)")) << message;
    AttentionMask lengths;
    lengths.key_lengths = {1, 2};  // two lengths for a batch of one
    EXPECT_TRUE(starts_with(error_message([&] { attention(q, kv, kv, lengths, {}); }), "[attention]"));
    lengths.key_lengths = {4};  // longer than Tk = 3
    message = error_message([&] { attention(q, kv, kv, lengths, {}); });
    EXPECT_TRUE(contains(message, "key length 4") && contains(message, "3")) << message;
}

TEST(ConstructionErrors, UnknownScale) {
    Rng init(1);
    AttentionConfig c = attention_config(16, 2);
    c.scale = "cubic";
    const std::string message = error_message([&] { MultiHeadAttention mha(c, init, nullptr); });
    EXPECT_TRUE(starts_with(message, "[attention] scale must be")) << message;
    EXPECT_TRUE(contains(message, "cubic")) << message;
}

TEST(ConstructionErrors, PositionsBeyondMaxLen) {
    Rng init(1), data(2);
    for (Positional kind : {Positional::learned, Positional::sinusoidal}) {
        DecoderLM lm(small_config(Norm::pre, kind), init, nullptr);
        EXPECT_EQ(lm.forward(random_tokens(data, 1, 16, 11)).shape(), (Shape{1, 16, 11}));
        const std::string message = error_message([&] { lm.forward(random_tokens(data, 1, 17, 11)); });
        EXPECT_TRUE(starts_with(message, "[positional]") && contains(message, "17") && contains(message, "16")) << message;
    }
    EncoderDecoder ed(small_config(), init, nullptr);
    const std::string message = error_message([&] { ed.encode(random_tokens(data, 1, 17, 11), {17}); });
    EXPECT_TRUE(starts_with(message, "[positional]")) << message;
}

TEST(ResolveScale, NamedAndNumericValues) {
    EXPECT_DOUBLE_EQ(resolve_scale("sqrt", 16), 0.25);
    EXPECT_DOUBLE_EQ(resolve_scale("sqrt", 2), 1.0 / std::sqrt(2.0));
    EXPECT_DOUBLE_EQ(resolve_scale("none", 16), 1.0);
    EXPECT_DOUBLE_EQ(resolve_scale("linear", 16), 1.0 / 16);
    EXPECT_DOUBLE_EQ(resolve_scale("0.5", 16), 0.5);
    EXPECT_DOUBLE_EQ(resolve_scale("2", 16), 2.0);
    EXPECT_DOUBLE_EQ(resolve_scale("1e-2", 16), 0.01);
    for (const char* bad : {"", "-1", "0", "0.5x", "abc", "nan", "inf", "SQRT"})
        EXPECT_TRUE(starts_with(error_message([&] { resolve_scale(bad, 16); }), "[attention] scale must be")) << bad;
    Rng init(1);
    AttentionConfig c = attention_config(16, 4);
    c.scale = "linear";
    EXPECT_DOUBLE_EQ(MultiHeadAttention(c, init, nullptr).scale, 0.25);  // 1/d_h, d_h = 4
}

// ---- train / eval ----

std::vector<const Module*> dropout_modules(const DecoderLM& m) {
    std::vector<const Module*> out = {&m, &m.emb_drop, &m.head};
    for (const auto& b : m.blocks)
        out.insert(out.end(), {b.get(), &b->attn, &b->res1, &b->res1.drop, b->ffn.get(), &b->ffn->drop, b->res2.get(),
                               &b->res2->drop, &*b->res1.ln});
    return out;
}

TEST(TrainEval, PropagatesToEveryChild) {
    ModelConfig residual_only = small_config();
    residual_only.block.dropout = 0.5;  // only the Residual blocks' dropout
    for (const ModelConfig& c : {residual_only, small_config(Norm::pre, Positional::learned, 0, 0.5)}) {
        Rng init(1), dropout_rng(2), data(3);
        DecoderLM model(c, init, &dropout_rng);
        const Indices tokens = random_tokens(data, 2, 6, 11);
        model.eval();
        for (const Module* m : dropout_modules(model)) EXPECT_FALSE(m->is_training());
        EXPECT_EQ(model.forward(tokens).values(), model.forward(tokens).values());
        model.train();
        for (const Module* m : dropout_modules(model)) EXPECT_TRUE(m->is_training());
        EXPECT_NE(model.forward(tokens).values(), model.forward(tokens).values());
        model.eval();  // and back
        EXPECT_EQ(model.forward(tokens).values(), model.forward(tokens).values());
    }
}

}  // namespace
}  // namespace attnlab
