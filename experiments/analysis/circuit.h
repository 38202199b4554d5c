// Every edge of a decoder's residual graph and its effect on a patching metric
// (experiments/analysis/patching.h), exactly or by the gradient approximations
// the circuit-finding literature uses, so that the approximations can be judged
// against the truth on models small enough to compute it.
//
// The residual stream of a pre-norm (or norm-free) decoder is a sum of
// components, each read by the components after it:
//   senders    embed (tokens and positions), each head's output L.H (its slice
//              of the output projection), each feed-forward output mlp.L
//   receivers  each head's query, key and value input L.H:q, L.G:k, L.G:v (G a
//              K/V head), each feed-forward input mlp.L, and the logits
// An edge sender -> receiver exists when the sender is upstream: a head feeds
// the later layers and the feed-forward of its own layer.
//
// Patching one edge (denoising; noising swaps the prompts): the receiver's input
// becomes its input on the corrupted prompt plus (sender on the clean prompt -
// sender on the corrupted prompt), every other input unchanged, and everything
// downstream of the receiver recomputed (path patching, Wang et al. 2022, one
// edge at a time; the same number `attnlab path-patch` gives for a head's edge).
// Its effect is the metric's change from the unpatched run, normalised as the
// metric is (norm_logit_diff: divided by clean - corrupted).
//
// Methods (scores in the same units as the effect):
//   exact   the patched runs themselves: per receiver layer one batched run for
//           the receivers' patched inputs, then one patched run per edge, many
//           edges side by side in one batch
//   atp     attribution patching (Nanda 2023) at the receiver: the change of the
//           receiver's activation (its q, k or v, or the feed-forward's output),
//           computed exactly, times the metric's gradient there
//   atp-star  AtP* (Kramar et al. 2024): atp with the QK fix (for an edge into a
//           query or key, the exact change of the attention pattern of the heads
//           reading it, from a run of that block, times the gradient at the
//           pattern) and GradDrop (the mean over blocks l of |atp with no
//           gradient through block l's outputs|, sum / (L - 1)): unsigned, an
//           estimate of |effect|; compared with |exact|
//   eap     edge attribution patching (Syed et al. 2023): the sender's change
//           times the gradient of the metric with respect to the receiver's
//           residual input, through that receiver alone
//   eap-ig  EAP with integrated gradients (Hanna et al. 2024): the gradient
//           averaged over `ig_steps` runs whose input embeddings lie on the
//           line from the unpatched prompt's to the other prompt's (alpha =
//           k / steps, k = 1..steps)
// Gradients are taken on the unpatched run (the corrupted prompt when
// denoising). Post-norm decoders (the residual is not a sum of components) and
// encoder-decoders are refused.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "experiments/analysis/patching.h"

namespace attnlab {

enum class CircuitMethod { exact, atp, atp_star, eap, eap_ig };
CircuitMethod parse_circuit_method(const std::string& name);  // Error naming the choices
std::string to_string(CircuitMethod method);

struct CircuitEdge {
    std::string sender;    // "embed", "1.2", "mlp.0"
    std::string receiver;  // "2.0:q", "2.1:k", "mlp.1", "logits"
};

struct CircuitOptions {
    CircuitMethod method = CircuitMethod::exact;
    PatchMetric metric = PatchMetric::norm_logit_diff;
    bool noising = false;
    size_t ig_steps = 5;
    // Tokens per batched run: how many patched copies of the prompts go side by side.
    size_t batch_tokens = 2048;
    // Each sender's change multiplied by this before it is patched in (exact
    // and atp): 1 is the edge itself; a small one gives the derivative along the
    // edge, which the gradient methods estimate.
    double delta_scale = 1.0;
};

struct CircuitResult {
    double clean = 0, corrupt = 0;   // the metric of the unpatched runs (baseline_name's metric)
    std::vector<CircuitEdge> edges;  // senders in order, receivers in order (the graph of residual_edges)
    std::vector<double> scores;      // per edge
    size_t copies = 0;               // prompt copies run through the model (each N rows of T tokens)
};

// The edges of the model's residual graph, in the order results list them.
std::vector<CircuitEdge> residual_edges(const TaskModel& model);

CircuitResult edge_scores(const TaskModel& model, const PromptPairs& pairs, const CircuitOptions& options);

// What edge_scores holds at once for N prompt pairs of T tokens (and with
// `prune`, discover_circuit), to refuse them before anything runs
// (memory_estimate.h): each sender's change (N, T, D) in float32 and float64
// and both prompts' recorded head results (L, N, T, H, D); a batched run of
// options.batch_tokens worth of prompt copies (at most one per edge); for a
// gradient method a forward keeping its graph (every layer's attention tables
// and their gradients); AtP*'s recorded patterns and their gradients
// (L, N, H, T, T) and, per query or key edge, the pattern change of the heads it
// feeds (N, heads, T, T) float64; pruning's saved senders' outputs per layer
// and its runs of a block's distinct head inputs side by side.
TableSize circuit_size(const TaskModel& model, size_t N, size_t T, const CircuitOptions& options, bool prune = false);

// How well `approx` ranks edges against `exact` (same order): Spearman's rank
// correlation of the signed scores (ties get their mean rank), and the share of
// the k largest |exact| edges found among the k largest |approx| ones.
struct Agreement {
    double spearman = 0;
    size_t top_k = 0;
    double recall = 0;
};
Agreement agreement(const std::vector<double>& approx, const std::vector<double>& exact, size_t top_k);

// A circuit is a subset of the edges (kept[e], in residual_edges' order). Its
// metric (ACDC's convention, Conmy et al. 2023): the clean prompts run with
// every edge outside the circuit carrying the corrupted prompts' sender output
// in place of this run's own (the receiver's input minus this run's sender
// output plus the corrupted one), normalised as the metric is (norm_logit_diff:
// every edge kept = 1, the clean model; none = 0, the corrupted one).
double circuit_metric(const TaskModel& model, const PromptPairs& pairs, PatchMetric metric, const std::vector<bool>& kept);

// Greedy pruning by a threshold (ACDC's procedure, with the edges tried in order
// of increasing |score| from any method, not in ACDC's reverse topological order):
// starting from every edge, an edge is removed for good when the circuit's
// metric then drops by less than `threshold`. And the faithfulness curve: the
// metric of the circuit of the k edges of largest |score|, for k = 0 to all
// (at most `curve_points` values of k, spread evenly).
struct Discovery {
    double threshold = 0;
    std::vector<bool> kept;  // the circuit found
    double metric = 0;       // its metric
    std::vector<size_t> curve_kept;
    std::vector<double> curve_metric;
    size_t evaluations = 0;  // circuits evaluated
};
Discovery discover_circuit(const TaskModel& model, const PromptPairs& pairs, PatchMetric metric, const std::vector<double>& scores,
                           double threshold, size_t curve_points = 33);

// The circuit file (format "attnlab-circuit", docs/file_formats.md), written whole.
// `exact` and `agreement` are written when `exact` is non-empty (--compare exact),
// `discovery` when given (--prune). Returns the name it was given (output_file.h).
std::string write_circuit_file(const OutputFile& out, const std::string& checkpoint, int64_t step, const PromptPairs& pairs,
                        const CircuitOptions& options, const CircuitResult& result, const std::vector<double>& exact,
                        const Agreement& agreement, const Discovery* discovery = nullptr);

}  // namespace attnlab
