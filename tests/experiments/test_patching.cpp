// Activation patching, path patching and the logit lens (experiments/analysis/
// patching.h, lens.h), on a hand-built model whose circuit is known exactly and on
// a trained tiny decoder:
//   - clean into clean changes nothing; patching a whole residual stream restores
//     the clean logits exactly;
//   - path patching with every upstream component as sender is patching the
//     receiver's input;
//   - in the hand-built model patching singles out the two averaging heads, and
//     path patching the edge into the receiver's values, never its queries;
//   - the lens at the last layer is the model's logits; the attribution sums to
//     the target logit.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"
#include "experiments/analysis/lens.h"
#include "experiments/analysis/patching.h"
#include "experiments/config/config.h"
#include "experiments/run/model_factory.h"
#include "hand_built_model.h"
#include "tiny_runs.h"

namespace attnlab::analysis_test {
namespace {

PatchOptions every_head(const TaskModel& model, bool per_position = false) {
    PatchOptions o;
    for (const char* h : {"z", "q", "k", "v", "pattern", "resid_pre", "resid_post"}) o.hooks.push_back(parse_patch_hook(model, h));
    o.per_position = per_position;
    return o;
}

const PatchGrid& grid(const PatchResult& r, const std::string& hook) {
    for (const PatchGrid& g : r.grids)
        if (g.hook == hook) return g;
    throw Error("no grid " + hook);
}

TEST(Patching, CleanIntoCleanChangesNothing) {
    HandBuilt m;
    PromptPairs pairs = majority_pairs();
    resolve_answers(*m.model, pairs);
    PatchOptions o = every_head(*m.model, true);
    o.metric = PatchMetric::logit_diff;
    const PatchResult reference = activation_patching(*m.model, pairs, o);
    PromptPairs same = pairs;
    same.corrupt = same.clean;
    const PatchResult r = activation_patching(*m.model, same, o);
    for (const PatchGrid& g : r.grids)
        for (double v : g.values) EXPECT_EQ(normalised(v, reference.clean, reference.corrupt, PatchMetric::norm_logit_diff), 1.0) << g.hook;
}

TEST(Patching, AWholeResidualStreamRestoresTheCleanLogitsExactly) {
    for (const Trained* run : {&decoder_run()}) {
        const LoadedModel loaded = run->load();
        PromptPairs pairs;
        pairs.clean = {{3, 9, 4, 12, 5, 1, 5, 12, 4}};
        pairs.corrupt = {{3, 9, 4, 12, 5, 1, 7, 6, 8}};
        pairs.positions = {{8}};
        pairs.clean_answers = {{9}};
        pairs.corrupt_answers = {{10}};
        resolve_answers(*loaded.model, pairs);
        PatchOptions o;
        for (const char* h : {"resid_pre", "resid_mid", "resid_post"}) o.hooks.push_back(parse_patch_hook(*loaded.model, h));
        for (bool noising : {false, true}) {
            o.noising = noising;
            const PatchResult r = activation_patching(*loaded.model, pairs, o);
            for (const PatchGrid& g : r.grids)
                for (double v : g.values) EXPECT_EQ(v, noising ? 0.0 : 1.0) << g.hook << (noising ? " noising" : "");
        }
    }
}

TEST(Patching, SinglesOutTheTwoAveragingHeads) {
    HandBuilt m;
    PromptPairs pairs = majority_pairs();
    resolve_answers(*m.model, pairs);
    const PatchResult r = activation_patching(*m.model, pairs, every_head(*m.model));
    EXPECT_GT(r.clean, 0.0);
    EXPECT_LT(r.corrupt, 0.0);
    const PatchGrid& z = grid(r, "z");
    ASSERT_EQ(z.shape, (Shape{2, 2}));
    EXPECT_GT(z.values[0], 0.1);   // L0.H0
    EXPECT_EQ(z.values[1], 0.0);   // L0.H1 writes nothing
    EXPECT_GT(z.values[2], 0.1);   // L1.H0
    EXPECT_EQ(z.values[3], 0.0);   // L1.H1
    for (double q : grid(r, "q").values) EXPECT_EQ(q, 0.0);  // W_Q = 0: queries carry nothing
    for (double k : grid(r, "k").values) EXPECT_EQ(k, 0.0);  // and keys meet only zero queries
    EXPECT_NEAR(z.values[0] + z.values[2], 1.0, 0.5);
}

TEST(PathPatching, FindsTheEdgeIntoTheValuesAndNotTheQueries) {
    HandBuilt m;
    PromptPairs pairs = majority_pairs();
    resolve_answers(*m.model, pairs);
    PathPatch edge;
    edge.senders = {"0.0"};
    edge.receiver_layer = 1;
    edge.receiver_head = 0;
    edge.receiver_input = "v";
    const double into_values = path_patching(*m.model, pairs, edge, PatchMetric::norm_logit_diff).patched;
    EXPECT_GT(into_values, 0.05);
    edge.receiver_input = "q";
    EXPECT_EQ(path_patching(*m.model, pairs, edge, PatchMetric::norm_logit_diff).patched, 0.0);
    edge.receiver_input = "v";
    edge.senders = {"0.1"};
    EXPECT_EQ(path_patching(*m.model, pairs, edge, PatchMetric::norm_logit_diff).patched, 0.0);
    edge.senders = {"1.0"};
    EXPECT_THROW(path_patching(*m.model, pairs, edge, PatchMetric::norm_logit_diff), Error);  // not upstream
}

TEST(PathPatching, EveryUpstreamSenderIsPatchingTheReceiversInput) {
    const Trained& run = decoder_run();
    const LoadedModel loaded = run.load();
    PromptPairs pairs;
    pairs.clean = {{3, 9, 4, 12, 5, 1, 5, 12, 4}};
    pairs.corrupt = {{3, 8, 4, 11, 5, 1, 5, 12, 4}};
    pairs.positions = {{8}};
    pairs.clean_answers = {{9}};
    pairs.corrupt_answers = {{8}};
    resolve_answers(*loaded.model, pairs);
    PatchOptions o;
    for (const char* h : {"q", "k", "v"}) o.hooks.push_back(parse_patch_hook(*loaded.model, h));
    const PatchResult direct = activation_patching(*loaded.model, pairs, o);
    for (const char* input : {"q", "k", "v"}) {
        PathPatch edge;
        edge.senders = {"all"};
        edge.receiver_layer = 1;
        edge.receiver_head = 0;
        edge.receiver_input = input;
        const double path = path_patching(*loaded.model, pairs, edge, PatchMetric::norm_logit_diff).patched;
        const PatchGrid& g = grid(direct, input);
        EXPECT_EQ(path, g.values[1 * g.shape[1] + 0]) << input;  // layer 1, head 0
    }
}

TEST(Lens, TheLastLayerIsTheModelAndTheAttributionSumsToTheLogit) {
    const Trained& run = decoder_run();
    const LoadedModel loaded = run.load();
    const Indices tokens({1, 7}, {3, 9, 4, 12, 5, 1, 5});
    const LensResult r = logit_lens(*loaded.model, tokens);
    ASSERT_EQ(r.streams.size(), 3u);
    Batch batch;
    batch.inputs = tokens;
    batch.lengths = {7};
    NoGradGuard no_grad;
    const std::vector<double> logits = loaded.model->forward(batch).values();
    const std::vector<double> lens = r.lens_logits.values();
    const size_t n = logits.size();
    ASSERT_EQ(lens.size(), 3 * n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(lens[2 * n + i], logits[i]);
    bool some_layer_differs = false;
    for (size_t i = 0; i < n; ++i) some_layer_differs = some_layer_differs || lens[i] != logits[i];
    EXPECT_TRUE(some_layer_differs);
    ASSERT_TRUE(r.attribution);
    for (size_t t = 0; t < 7; ++t) {
        double total = r.norm_bias_logit[t];
        for (size_t s = 0; s < 3; ++s) total += r.layer_logit[s * 7 + t];
        EXPECT_NEAR(total, r.target_logit[t], 1e-4 * std::max(1.0, std::abs(r.target_logit[t]))) << "position " << t;
        double heads = 0;
        for (size_t h = 0; h < 2; ++h) heads += r.head_logit[(1 * 2 + h) * 7 + t];
        EXPECT_NE(heads, 0.0);
    }
}

TEST(Patching, BadInputsAreRefused) {
    HandBuilt m;
    PromptPairs uneven = majority_pairs();
    uneven.corrupt = {{6, 6, 7}};
    EXPECT_THROW(resolve_answers(*m.model, uneven), Error);
    PromptPairs outside = majority_pairs();
    outside.clean = {{5, 5, 5, 8}};
    EXPECT_THROW(resolve_answers(*m.model, outside), Error);
    PromptPairs same_answer = majority_pairs();
    same_answer.corrupt_answers = {{5}};
    EXPECT_THROW(resolve_answers(*m.model, same_answer), Error);
    PromptPairs prob_only = same_answer;  // prob and loss read the clean answer only
    EXPECT_NO_THROW(resolve_answers(*m.model, prob_only, PatchMetric::prob));
    EXPECT_THROW(parse_patch_hook(*m.model, "zz"), Error);
    EXPECT_THROW(parse_patch_metric("kl"), Error);
}

}  // namespace
}  // namespace attnlab::analysis_test
