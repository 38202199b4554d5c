// Every edge of the residual graph (experiments/analysis/circuit.h):
//   - on the hand-built linear model, the exact effects are the hand-computed
//     ones, and every gradient method equals them (a linear model has no error);
//   - on a trained decoder with LayerNorm, feed-forwards and grouped K/V, each
//     exact edge into a head is `path-patch`'s number for that edge, whatever
//     the batching;
//   - the gradient methods are the derivative of the exact effect: the effect of
//     a sender's change scaled by a small epsilon, over epsilon, tends to them;
//   - the metric's gradient matches finite differences; the agreement measures
//     on known rankings; post-norm models and encoder-decoders are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/ops.h"
#include "experiments/analysis/circuit.h"
#include "hand_built_model.h"
#include "tiny_runs.h"

namespace attnlab::analysis_test {
namespace {

std::map<std::string, double> by_edge(const CircuitResult& r) {
    std::map<std::string, double> m;
    for (size_t i = 0; i < r.edges.size(); ++i) m[r.edges[i].sender + " -> " + r.edges[i].receiver] = r.scores[i];
    return m;
}

CircuitOptions with_method(CircuitMethod method) {
    CircuitOptions o;
    o.method = method;
    return o;
}

TEST(Circuit, TheGraphHasEveryUpstreamEdgeOnce) {
    const Trained& run = decoder_run();  // 2 layers, 2 heads, 1 K/V head, feed-forwards
    const LoadedModel loaded = run.load();
    const std::vector<CircuitEdge> edges = residual_edges(*loaded.model);
    // senders: embed, 0.0, 0.1, mlp.0, 1.0, 1.1, mlp.1; receivers per layer: 2 q, 1 k, 1 v, mlp
    // layer 0: q/k/v from embed (4), mlp.0 from embed, 0.0, 0.1 (3); layer 1: q/k/v from
    // the 4 senders of layer 0 (16), mlp.1 from those and 1.0, 1.1 (6); logits from all 7
    EXPECT_EQ(edges.size(), 4u + 3u + 16u + 6u + 7u);
    std::map<std::string, int> seen;
    for (const CircuitEdge& e : edges) ++seen[e.sender + " -> " + e.receiver];
    for (const auto& [name, count] : seen) EXPECT_EQ(count, 1) << name;
    EXPECT_EQ(seen.count("1.0 -> mlp.1"), 1u);
    EXPECT_EQ(seen.count("1.0 -> 1.1:q"), 0u);
    EXPECT_EQ(seen.count("mlp.0 -> 1.0:k"), 1u);
    EXPECT_EQ(seen.count("0.0 -> 1.1:k"), 0u);  // one K/V head: 1.0:k only
}

// The hand-built model is linear in its residual stream (every query is zero, so
// attention is a fixed average): at the last position, L0.H0 carries 3/4 (e5 - e6)
// of change, L1.H0 reads 3/4 of it from the embeddings and (1 + 1 + 1 + 3/4) / 4 from
// L0.H0; the clean - corrupted logit difference is 2 * (3/4 + 3/4 + 15/16) = 4.875.
TEST(Circuit, TheHandBuiltModelsEdgesAreTheHandComputedOnesByEveryMethod) {
    HandBuilt m;
    PromptPairs pairs = majority_pairs();
    resolve_answers(*m.model, pairs);
    const double total = 4.875;
    const std::map<std::string, double> expected = {
        {"0.0 -> logits", 1.5 / total},
        {"1.0 -> logits", (1.5 + 1.875) / total},  // L1.H0's whole change
        {"embed -> 1.0:v", 1.5 / total},
        {"0.0 -> 1.0:v", 1.875 / total},
        {"embed -> 0.0:v", (1.5 + 1.875) / total},  // through L0.H0's output, both ways on
    };
    for (CircuitMethod method : {CircuitMethod::exact, CircuitMethod::atp, CircuitMethod::eap, CircuitMethod::eap_ig}) {
        const CircuitResult r = edge_scores(*m.model, pairs, with_method(method));
        EXPECT_NEAR(r.clean - r.corrupt, total, 1e-5);
        for (const auto& [edge, score] : by_edge(r)) {
            const auto want = expected.find(edge);
            EXPECT_NEAR(score, want == expected.end() ? 0.0 : want->second, 1e-5) << to_string(method) << " " << edge;
        }
    }
}

// AtP* on the same model: the QK fix finds no pattern change (every query is zero),
// and GradDrop sums |atp with block l's outputs cut from the gradient| over both
// blocks, over L - 1 = 1: the edges into the logits keep their whole gradient
// either way (2x their effect), embed -> L0.H0:v keeps only its direct path when
// block 1 is cut, and nothing when block 0 is.
TEST(Circuit, AtpStarOnTheHandBuiltModel) {
    HandBuilt m;
    PromptPairs pairs = majority_pairs();
    resolve_answers(*m.model, pairs);
    const double total = 4.875;
    const std::map<std::string, double> scores = by_edge(edge_scores(*m.model, pairs, with_method(CircuitMethod::atp_star)));
    EXPECT_NEAR(scores.at("0.0 -> logits"), 2 * 1.5 / total, 1e-5);
    EXPECT_NEAR(scores.at("1.0 -> logits"), 2 * (1.5 + 1.875) / total, 1e-5);
    EXPECT_NEAR(scores.at("embed -> 0.0:v"), 1.5 / total, 1e-5);
    EXPECT_NEAR(scores.at("0.0 -> 1.0:v"), 1.875 / total, 1e-5);  // cut block 0: all of it; cut block 1: nothing
    for (const auto& [edge, score] : scores) {
        EXPECT_GE(score, 0.0) << edge;
        if (edge.find(":q") != std::string::npos || edge.find(":k") != std::string::npos) EXPECT_NEAR(score, 0.0, 1e-6) << edge;
    }
}

PromptPairs recall_pairs(const TaskModel& model) {
    PromptPairs pairs;
    pairs.clean = {{3, 9, 4, 12, 5, 1, 5, 12, 4}, {7, 2, 6, 13, 8, 10, 6, 13, 7}};
    pairs.corrupt = {{3, 8, 4, 11, 5, 1, 5, 12, 4}, {7, 3, 6, 14, 8, 10, 6, 13, 7}};
    resolve_answers(model, pairs, PatchMetric::prob);
    return pairs;
}

// Each exact edge into a head's q, k or v is `path-patch`'s number for that edge
// (its receivers are heads); returns how many edges were compared.
size_t expect_head_edges_are_path_patching(const TaskModel& model, const PromptPairs& pairs, const CircuitResult& r) {
    size_t checked = 0;
    for (size_t i = 0; i < r.edges.size(); ++i) {
        const std::string& receiver = r.edges[i].receiver;
        const size_t colon = receiver.find(':');
        if (colon == std::string::npos) continue;
        PathPatch edge;
        edge.senders = {r.edges[i].sender};
        edge.receiver_layer = std::stoul(receiver.substr(0, 1));
        edge.receiver_head = std::stoul(receiver.substr(2, colon - 2));
        edge.receiver_input = receiver.substr(colon + 1);
        const PathPatchResult p = path_patching(model, pairs, edge, PatchMetric::prob);
        EXPECT_NEAR(r.scores[i], p.patched - p.corrupt, 1e-6) << r.edges[i].sender << " -> " << receiver;
        ++checked;
    }
    return checked;
}

TEST(Circuit, ExactEdgesIntoHeadsArePathPatchingsNumbersAtAnyBatching) {
    const Trained& run = decoder_run();
    const LoadedModel loaded = run.load();
    const PromptPairs pairs = recall_pairs(*loaded.model);
    CircuitOptions o;
    o.metric = PatchMetric::prob;
    const CircuitResult batched = edge_scores(*loaded.model, pairs, o);
    o.batch_tokens = 1;  // one copy of the prompts per run
    const CircuitResult single = edge_scores(*loaded.model, pairs, o);
    ASSERT_EQ(batched.edges.size(), single.edges.size());
    for (size_t i = 0; i < batched.edges.size(); ++i)
        EXPECT_NEAR(batched.scores[i], single.scores[i], 1e-6) << batched.edges[i].sender << " -> " << batched.edges[i].receiver;
    EXPECT_EQ(expect_head_edges_are_path_patching(*loaded.model, pairs, batched), 4u + 16u);
}

// d/d eps of the effect of (eps * the sender's change) at eps = 0 is what the
// gradient methods estimate: eap exactly, and atp too (the receiver's change is
// then linear in eps). float64 weights, so that the difference quotient is clean.
TEST(Circuit, GradientMethodsAreTheDerivativeOfTheExactEffect) {
    const Trained& run = decoder_run();
    const LoadedModel loaded = run.load();
    loaded.model->module().to(DType::f64);
    const PromptPairs pairs = recall_pairs(*loaded.model);
    CircuitOptions o;
    o.metric = PatchMetric::prob;
    const double eps = 1e-5;
    o.delta_scale = eps;
    const CircuitResult exact = edge_scores(*loaded.model, pairs, o);
    o.method = CircuitMethod::atp;
    const CircuitResult atp = edge_scores(*loaded.model, pairs, o);
    o.method = CircuitMethod::eap;
    o.delta_scale = 1.0;
    const CircuitResult eap = edge_scores(*loaded.model, pairs, o);
    double largest = 0;
    for (double s : eap.scores) largest = std::max(largest, std::abs(s));
    ASSERT_GT(largest, 1e-3);
    for (size_t i = 0; i < eap.scores.size(); ++i) {
        const std::string name = eap.edges[i].sender + " -> " + eap.edges[i].receiver;
        EXPECT_NEAR(exact.scores[i] / eps, eap.scores[i], 1e-4 * largest) << name;
        EXPECT_NEAR(atp.scores[i] / eps, eap.scores[i], 1e-4 * largest) << name;
    }
}

// The noised effect of each edge (the exact method: patched inputs, started at
// the layer) against the circuit of every edge but that one (circuit runs, block
// by block): two computations of one number. Returns the noised effects.
CircuitResult expect_removing_each_edge_is_noising_it(const TaskModel& model, const PromptPairs& pairs) {
    CircuitOptions o;
    o.metric = PatchMetric::prob;
    o.noising = true;
    const CircuitResult noised = edge_scores(model, pairs, o);
    const size_t E = noised.edges.size();
    for (size_t e = 0; e < E; ++e) {
        std::vector<bool> kept(E, true);
        kept[e] = false;
        EXPECT_NEAR(circuit_metric(model, pairs, PatchMetric::prob, kept) - noised.clean, noised.scores[e], 1e-6)
            << noised.edges[e].sender << " -> " << noised.edges[e].receiver;
    }
    return noised;
}

// A circuit's metric: every edge is the clean model (1), none the corrupted (0);
// removing one edge from the whole graph is noising that edge alone, which the
// exact method computes in its own way (patched inputs, started at the layer).
TEST(Circuit, RemovingOneEdgeFromTheWholeGraphIsNoisingIt) {
    const Trained& run = decoder_run();  // LayerNorm, feed-forwards, grouped K/V
    const LoadedModel loaded = run.load();
    const PromptPairs pairs = recall_pairs(*loaded.model);
    const CircuitResult noised = expect_removing_each_edge_is_noising_it(*loaded.model, pairs);
    const size_t E = noised.edges.size();
    const double clean = noised.clean, corrupt = noised.corrupt;
    EXPECT_NEAR(circuit_metric(*loaded.model, pairs, PatchMetric::prob, std::vector<bool>(E, true)), clean, 1e-6);
    EXPECT_NEAR(circuit_metric(*loaded.model, pairs, PatchMetric::prob, std::vector<bool>(E, false)), corrupt, 1e-6);
    // pruning reuses each circuit run's blocks up to the first edge that changed:
    // the circuit it ends with has the metric a fresh run gives it
    const Discovery d = discover_circuit(*loaded.model, pairs, PatchMetric::prob, noised.scores, std::abs(clean - corrupt) / 50);
    const size_t kept = static_cast<size_t>(std::count(d.kept.begin(), d.kept.end(), true));
    EXPECT_GT(kept, 0u);
    EXPECT_LT(kept, E);
    EXPECT_NEAR(d.metric, circuit_metric(*loaded.model, pairs, PatchMetric::prob, d.kept), 1e-9);
}

// model.parallel (GPT-NeoX): a block's feed-forward reads the block's input, so a
// head feeds only the later layers. The exact effects (patched inputs at resid_pre)
// and the circuit runs (block by block) agree as on sequential blocks, and the
// edges into heads are path-patch's numbers.
TEST(Circuit, ParallelBlocksFeedTheirFeedForwardFromTheBlocksInput) {
    static const Trained run = train_tiny({"model.parallel=true", "model.activation=gelu_tanh", "model.norm_eps=0.001"});
    const LoadedModel loaded = run.load();
    std::map<std::string, int> seen;
    for (const CircuitEdge& e : residual_edges(*loaded.model)) ++seen[e.sender + " -> " + e.receiver];
    // layer 0: q/k/v and mlp.0 from embed (5); layer 1: q/k/v and mlp.1 from embed, 0.0, 0.1, mlp.0 (20); logits from 7
    EXPECT_EQ(seen.size(), 5u + 20u + 7u);
    EXPECT_EQ(seen.count("0.0 -> mlp.0"), 0u);
    EXPECT_EQ(seen.count("1.1 -> mlp.1"), 0u);
    EXPECT_EQ(seen.count("0.1 -> mlp.1"), 1u);

    const PromptPairs pairs = recall_pairs(*loaded.model);
    expect_removing_each_edge_is_noising_it(*loaded.model, pairs);
    CircuitOptions o;
    o.metric = PatchMetric::prob;
    EXPECT_EQ(expect_head_edges_are_path_patching(*loaded.model, pairs, edge_scores(*loaded.model, pairs, o)), 4u + 16u);
}

// On the hand-built linear model the five edges of its circuit are what pruning
// keeps at any threshold below their smallest effect, and the faithfulness curve
// climbs from 0 to 1 through them.
TEST(Circuit, PruningKeepsTheHandBuiltCircuit) {
    HandBuilt m;
    PromptPairs pairs = majority_pairs();
    resolve_answers(*m.model, pairs);
    const CircuitResult exact = edge_scores(*m.model, pairs, CircuitOptions());
    const Discovery d = discover_circuit(*m.model, pairs, PatchMetric::norm_logit_diff, exact.scores, 0.05);
    std::vector<std::string> kept;
    for (size_t e = 0; e < d.kept.size(); ++e)
        if (d.kept[e]) kept.push_back(exact.edges[e].sender + " -> " + exact.edges[e].receiver);
    std::sort(kept.begin(), kept.end());
    EXPECT_EQ(kept, (std::vector<std::string>{"0.0 -> 1.0:v", "0.0 -> logits", "1.0 -> logits", "embed -> 0.0:v", "embed -> 1.0:v"}));
    EXPECT_NEAR(d.metric, 1.0, 1e-5);
    EXPECT_EQ(d.curve_kept.front(), 0u);
    EXPECT_EQ(d.curve_kept.back(), exact.edges.size());
    EXPECT_NEAR(d.curve_metric.front(), 0.0, 1e-5);
    EXPECT_NEAR(d.curve_metric.back(), 1.0, 1e-5);
    EXPECT_NEAR(d.curve_metric[5], 1.0, 1e-5);  // k = 5 with 29 edges and 29 + 1 points: the five edges
    EXPECT_EQ(d.evaluations, d.curve_kept.size() + exact.edges.size());
    // a threshold above every effect prunes everything
    const Discovery none = discover_circuit(*m.model, pairs, PatchMetric::norm_logit_diff, exact.scores, 2.0);
    EXPECT_EQ(std::count(none.kept.begin(), none.kept.end(), true), 0);
    EXPECT_NEAR(none.metric, 0.0, 1e-5);
}

TEST(Circuit, TheMetricsGradientIsItsDerivative) {
    PromptPairs pairs;
    pairs.positions = {{1, 2}, {2}};
    pairs.clean_answers = {{0, 3}, {1}};
    pairs.corrupt_answers = {{2, 1}, {4}};
    Rng rng(3);
    std::vector<double> values(2 * 3 * 5);
    for (double& v : values) v = rng.normal() * 2.0;
    const Shape shape{2, 3, 5};
    for (PatchMetric metric : {PatchMetric::logit_diff, PatchMetric::prob, PatchMetric::loss}) {
        const std::vector<double> grad = patch_metric_gradient(Tensor::from_values(values, shape, DType::f64), pairs, metric).values();
        for (size_t i = 0; i < values.size(); ++i) {
            std::vector<double> up = values, down = values;
            up[i] += 1e-6, down[i] -= 1e-6;
            const double fd = (patch_metric(Tensor::from_values(up, shape, DType::f64), pairs, metric) -
                               patch_metric(Tensor::from_values(down, shape, DType::f64), pairs, metric)) / 2e-6;
            EXPECT_NEAR(grad[i], fd, 1e-7) << to_string(metric) << " at " << i;
        }
    }
}

TEST(Circuit, AgreementOnKnownRankings) {
    const Agreement same = agreement({1, 2, 3, 4}, {10, 20, 30, 40}, 2);
    EXPECT_DOUBLE_EQ(same.spearman, 1.0);
    EXPECT_DOUBLE_EQ(same.recall, 1.0);
    const Agreement reversed = agreement({4, 3, 2, 1}, {1, 2, 3, 4}, 1);
    EXPECT_DOUBLE_EQ(reversed.spearman, -1.0);
    EXPECT_DOUBLE_EQ(reversed.recall, 0.0);  // the largest |exact| (4, last) is not the largest |approx| (first)
    // ties share their mean rank: ranks (1.5, 1.5, 3) and (1, 2, 3): rho = 0.75 / sqrt(0.75 * 1) ... = 0.866
    EXPECT_NEAR(agreement({1, 1, 2}, {1, 2, 3}, 3).spearman, std::sqrt(0.75), 1e-12);
    // recall by magnitude: exact's top 2 are -9 and 5 (indices 0, 2); approx's -8 and 4 (0, 3)
    EXPECT_DOUBLE_EQ(agreement({-8, 1, 2, 4}, {-9, 1, 5, 2}, 2).recall, 0.5);
}

TEST(Circuit, ModelsWithoutAResidualSumAreRefused) {
    const Trained& ed = enc_dec_run();
    EXPECT_THROW(
        try { residual_edges(*ed.load().model); } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("encoder-decoder"), std::string::npos) << e.what();
            throw;
        },
        Error);
    Config post = default_config();
    apply_override(post, "model.norm=post");
    validate(post);
    Rng init(0);
    const TaskModel model(post, 20, init, nullptr);
    EXPECT_THROW(
        try { residual_edges(model); } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("post-norm"), std::string::npos) << e.what();
            throw;
        },
        Error);
    EXPECT_THROW(parse_circuit_method("acdc"), Error);
}

}  // namespace
}  // namespace attnlab::analysis_test
