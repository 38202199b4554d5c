// attnlab example: the seed chapter's worked examples, computed by attnlab's own
// ops, so that its exercises can be answered without writing code.
//   Level 2: five positions, four features, one head of width 2 (its X, W_Q,
//            W_K, W_V): Q, K, V, the scaled scores, the weights under no mask
//            and under causal AND key padding (position 5 is padding), the context.
//   Level 3: the batched multi-head shapes (B, S, D, H = 2, 5, 8, 2), through
//            MultiHeadAttention with the causal mask, and the masked mass.
#include <cmath>
#include <cstdio>
#include <string>

#include "autograd/attention.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "experiments/cli/command_line.h"
#include "layers/hooks.h"
#include "layers/multihead.h"

namespace attnlab {

namespace {

void print_matrix(const std::string& name, const Tensor& m) {
    const size_t rows = m.size(0), cols = m.size(1);
    std::printf("%s %s\n", name.c_str(), shape_str(m.shape()).c_str());
    const std::vector<double> v = m.values();
    for (size_t r = 0; r < rows; ++r) {
        std::printf("   ");
        for (size_t c = 0; c < cols; ++c) {
            const double x = v[r * cols + c];
            if (std::isinf(x)) std::printf(" %8s", x < 0 ? "-inf" : "inf");
            else std::printf(" %8.4f", x);
        }
        std::printf("\n");
    }
}

void level_two() {
    const Tensor X = Tensor::from_values({1., 0., .2, .1, .8, .2, .1, .3, .1, .9, .3, .2, .3, .4, .8, .2, .2, .1, .6, .9}, {5, 4}, DType::f64);
    const Tensor Wq = Tensor::from_values({.7, 0., .1, .6, .2, .4, .4, .1}, {4, 2}, DType::f64);
    const Tensor Wk = Tensor::from_values({.5, .2, .2, .7, .6, .1, .1, .5}, {4, 2}, DType::f64);
    const Tensor Wv = Tensor::from_values({.4, .1, .2, .2, .5, .1, .1, .3, .6, .5, .2, .2}, {4, 3}, DType::f64);
    std::printf("== Level 2: one head, S = 5 positions, D = 4 features, d_k = 2, d_v = 3 (position 5 is padding)\n");
    print_matrix("X", X);
    print_matrix("W_Q", Wq);
    print_matrix("W_K", Wk);
    print_matrix("W_V", Wv);
    const Tensor Q = matmul(X, Wq), K = matmul(X, Wk), V = matmul(X, Wv);
    print_matrix("Q = X W_Q", Q);
    print_matrix("K = X W_K", K);
    print_matrix("V = X W_V", V);
    const double scale = 1.0 / std::sqrt(2.0);
    print_matrix("scores = Q K^T / sqrt(d_k)", matmul(Q, transpose(K, 0, 1)) * scale);
    AttentionOptions options;
    options.scale = scale;
    options.need_weights = true;
    options.need_score_std = true;
    auto heads = [](const Tensor& t) { return reshape(t, {1, 1, 5, t.size(1)}); };
    const AttentionResult open = attention(heads(Q), heads(K), heads(V), {}, options);
    print_matrix("weights, no mask (rows sum to 1)", reshape(open.weights, {5, 5}));
    AttentionMask mask;
    mask.causal = true;
    mask.key_lengths = {4};  // valid keys [T, T, T, T, F]
    const AttentionResult masked = attention(heads(Q), heads(K), heads(V), mask, options);
    print_matrix("weights, causal AND key padding", reshape(masked.weights, {5, 5}));
    const Tensor w = reshape(masked.weights, {5, 5});
    std::printf("query 4 attends to keys 1..5 with %.3f %.3f %.3f %.3f %.3f; future mass at query 2 = %g\n", w.at({3, 0}),
                w.at({3, 1}), w.at({3, 2}), w.at({3, 3}), w.at({3, 4}), w.at({1, 2}) + w.at({1, 3}) + w.at({1, 4}));
    print_matrix("context = weights V", reshape(masked.context, {5, 3}));
    std::printf("score std over the 15 causal pairs: %.6f\n\n", masked.score_std[0]);
}

void level_three() {
    const size_t B = 2, S = 5, D = 8, H = 2;
    std::printf("== Level 3: batched multi-head attention, B = %zu, S = %zu, D = %zu, H = %zu, d_h = %zu, causal\n", B, S, D, H, D / H);
    Rng rng(20);
    AttentionConfig c;
    c.width = D;
    c.heads = H;
    c.bias = false;
    const MultiHeadAttention mha(c, rng, nullptr);
    const Tensor x = rng.normal({B, S, D}, 0.0, 1.0);  // values from attnlab's Rng (not torch.manual_seed(20))
    AttentionMask mask;
    mask.causal = true;
    Hooks hooks;
    hooks.record("*");
    Tensor out;
    {
        HookScope scope(mha, hooks);
        out = mha.forward(x, x, mask).out;
    }
    for (const char* point : {"q", "k", "v", "scores", "pattern", "z", "out"})
        std::printf("  %-8s %s\n", point, shape_str(hooks.last(point).shape()).c_str());
    const Tensor& pattern = hooks.last("pattern");
    double future = 0;
    for (size_t j = 2; j < S; ++j) future += pattern.at({0, 0, 1, j});
    std::printf("scores and weights are (B, H, S, S): the last axis is keys, the one before it queries;\n"
                "merged output %s; masked mass attention[0, 0, 1, 2:] = %g\n",
                shape_str(out.shape()).c_str(), future);
}

}  // namespace

int cmd_example(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab example", "The seed chapter's worked examples (Levels 2 and 3), computed by attnlab.");
    options.add_options()("h,help", "this help");
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s", options.help().c_str());
        return 0;
    }
    if (parsed.unmatched().size() > 0) throw UsageError("example takes no arguments");
    level_two();
    level_three();
    return 0;
}

}  // namespace attnlab
