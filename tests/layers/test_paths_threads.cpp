// The attention op's two paths agree, the blockwise path keeps memory linear in
// the sequence length, and training is deterministic for a given thread count.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/attention.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/cpu/threads.h"
#include "layer_test_util.h"
#include "optim/optimizer.h"

namespace attnlab {
namespace {

using layer_testing::random_tokens;
using layer_testing::small_config;

struct Grads {
    std::vector<double> context, dq, dk, dv;
};

// context and gradients of sum(context * seed) for one path
Grads run_path(AttentionPath path, const Tensor& q0, const Tensor& k0, const Tensor& v0, const AttentionMask& mask,
               MaskedRows policy) {
    Tensor q = q0.detach().set_requires_grad(true), k = k0.detach().set_requires_grad(true),
           v = v0.detach().set_requires_grad(true);
    AttentionOptions o;
    o.scale = 0.3;
    o.path = path;
    o.masked_rows = policy;
    const Tensor context = attention(q, k, v, mask, o).context;
    Rng seed_rng(9);
    sum(context * seed_rng.normal(context.shape(), 0, 1)).backward();
    return {context.values(), q.grad().values(), k.grad().values(), v.grad().values()};
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
}

// Shapes spanning several 64 x 128 blocks, with ragged edges, every mask kind.
TEST(AttentionPaths, BlockwiseAgreesWithDenseWithin1e5) {
    Rng rng(4);
    struct Case {
        const char* name;
        size_t B, H, H_kv, Tq, Tk;
        AttentionMask mask;
        MaskedRows policy = MaskedRows::error;
    };
    AttentionMask none, causal, padded, both, explicit_mask;
    causal.causal = true;
    padded.key_lengths = {300, 17};
    both.causal = true;
    both.key_lengths = {150, 290};
    std::vector<uint8_t> eligible(150 * 300);
    for (size_t e = 0; e < eligible.size(); ++e) eligible[e] = (e * 7 + e / 300) % 5 != 0;
    for (size_t j = 0; j < 300; ++j) eligible[3 * 300 + j] = 0;  // query 3 has no eligible key
    explicit_mask.eligible = Mask({150, 300}, eligible);
    const std::vector<Case> cases = {
        {"no mask", 2, 2, 2, 150, 300, none},
        {"causal Tq < Tk", 2, 4, 2, 150, 300, causal},
        {"causal Tq = Tk", 1, 2, 1, 300, 300, causal},
        {"key padding", 2, 2, 2, 150, 300, padded},
        {"causal and padding", 2, 2, 1, 150, 300, both},
        {"explicit, an all-masked row, policy zero", 2, 2, 2, 150, 300, explicit_mask, MaskedRows::zero},
    };
    for (const Case& c : cases) {
        const Tensor q = rng.normal({c.B, c.H, c.Tq, 16}, 0, 1), k = rng.normal({c.B, c.H_kv, c.Tk, 16}, 0, 1),
                     v = rng.normal({c.B, c.H_kv, c.Tk, 8}, 0, 1);
        const Grads dense = run_path(AttentionPath::dense, q, k, v, c.mask, c.policy);
        const Grads block = run_path(AttentionPath::blockwise, q, k, v, c.mask, c.policy);
        EXPECT_LE(max_diff(dense.context, block.context), 1e-5) << c.name;
        EXPECT_LE(max_diff(dense.dq, block.dq), 1e-5) << c.name;
        EXPECT_LE(max_diff(dense.dk, block.dk), 1e-5) << c.name;
        EXPECT_LE(max_diff(dense.dv, block.dv), 1e-5) << c.name;
    }
}

// The automatic path is the dense one while all keys fit in one key block
// (Tk <= 128) and the blockwise one beyond: bitwise the same as asking for it.
TEST(AttentionPaths, AutomaticIsDenseUpTo128KeysAndBlockwiseBeyond) {
    Rng rng(5);
    AttentionMask causal;
    causal.causal = true;
    for (size_t Tk : {size_t(32), size_t(128), size_t(129), size_t(300)}) {
        const Tensor q = rng.normal({2, 2, Tk, 16}, 0, 1), k = rng.normal({2, 2, Tk, 16}, 0, 1),
                     v = rng.normal({2, 2, Tk, 16}, 0, 1);
        const Grads automatic = run_path(AttentionPath::automatic, q, k, v, causal, MaskedRows::error);
        const Grads expected = run_path(Tk <= 128 ? AttentionPath::dense : AttentionPath::blockwise, q, k, v, causal,
                                        MaskedRows::error);
        const Grads other = run_path(Tk <= 128 ? AttentionPath::blockwise : AttentionPath::dense, q, k, v, causal,
                                     MaskedRows::error);
        EXPECT_EQ(automatic.context, expected.context) << "Tk = " << Tk;
        EXPECT_EQ(automatic.dq, expected.dq) << "Tk = " << Tk;
        EXPECT_EQ(automatic.dk, expected.dk) << "Tk = " << Tk;
        // the two paths round differently, so the check above can tell them apart
        EXPECT_NE(automatic.dq, other.dq) << "Tk = " << Tk;
    }
}

TEST(AttentionPaths, BlockwiseRefusesDropout) {
    Rng rng(1), drop(2);
    const Tensor x = rng.normal({1, 1, 3, 2}, 0, 1);
    AttentionOptions o;
    o.path = AttentionPath::blockwise;
    o.dropout = 0.5;
    o.training = true;
    o.rng = &drop;
    try {
        attention(x, x, x, {}, o);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("dense path"), std::string::npos) << e.what();
    }
}

// Restores the thread count a test changed.
struct ThreadCount {
    int saved = threads();
    ~ThreadCount() { set_threads(saved); }
};

// Three AdamW steps of a small decoder: the losses, the first step's
// gradients (before any update), and the parameters after the third step.
// Batch 64 x 40 positions: large enough that its GEMMs, elementwise ops and
// attention heads are split over two threads (threads.h's kParallelWork and
// kElementGrain).
struct ThreeSteps {
    std::vector<double> losses, first_grads, params;
};

ThreeSteps train_three_steps() {
    Rng init(1), dropout_rng(2), data(3);
    ModelConfig c = small_config();
    c.block.attention.width = 64;
    c.block.ffn = 128;
    c.max_len = 40;
    DecoderLM model(c, init, &dropout_rng);
    auto optimizer = make_adamw(model.named_parameters(), 1e-3);
    ThreeSteps out;
    for (int step = 0; step < 3; ++step) {
        const Indices tokens = random_tokens(data, 64, 40, c.vocab);
        const Indices targets = random_tokens(data, 64, 40, c.vocab);
        Tensor loss = cross_entropy(model.forward(tokens), targets);
        out.losses.push_back(loss.item());
        loss.backward();
        if (step == 0)
            for (const auto& [name, p] : model.named_parameters())
                for (double g : p.grad().values()) out.first_grads.push_back(g);
        optimizer->step();
        optimizer->zero_grad();
    }
    for (const auto& [name, p] : model.named_parameters())
        for (double x : p.values()) out.params.push_back(x);
    return out;
}

TEST(Threads, TrainingIsBitwiseRepeatableAtAGivenThreadCount) {
    ThreadCount restore;
    set_threads(1);
    const ThreeSteps one = train_three_steps();
    set_threads(2);
    const ThreeSteps two = train_three_steps(), again = train_three_steps();
    EXPECT_EQ(two.losses, again.losses);
    EXPECT_EQ(two.first_grads, again.first_grads);
    EXPECT_EQ(two.params, again.params);
    // Other thread counts add partial sums in another order: float rounding only.
    // Compared where rounding stays small: the losses and the first gradients
    // (Adam divides each update by the gradient's own scale, so a parameter whose
    // gradient is rounding noise can move by up to lr either way).
    EXPECT_LE(max_diff(one.losses, two.losses), 1e-5);
    EXPECT_LE(max_diff(one.first_grads, two.first_grads), 1e-6);
}

}  // namespace
}  // namespace attnlab
