// attnlab circuit CHECKPOINT (--clean ... --corrupt ... | --pairs F.h5) [--method exact|atp|eap|eap-ig]
//   [--compare exact] [--prune TAU] [--metric M] [--noising] [--ig-steps K] [--top N] [--recall-k K] [--out F.h5]
// Every edge of the residual graph scored (experiments/analysis/circuit.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "experiments/analysis/circuit.h"
#include "experiments/cli/command_line.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/patch_options.h"

namespace attnlab {

namespace {

constexpr const char* kCircuitHelp = R"(
Prompts, answers, --metric and --noising as `attnlab patch`.

Edges: senders (embed, each head L.H, each feed-forward mlp.L) to receivers (each
head's q, k and v input L.H:q, L.G:k, L.G:v, each feed-forward input mlp.L, the
logits) downstream of them. An edge's effect: the receiver's input on the
corrupted prompt plus the sender's change (clean - corrupted), everything else
as it was, everything downstream recomputed; the metric's change, normalised as
the metric is (norm_logit_diff: 1 = the whole clean behaviour).

--method: exact (the patched runs, many side by side in a batch), atp (the
receiver's exact change times the metric's gradient there), atp-star (AtP*: atp
with the QK fix and GradDrop; unsigned, compared with |exact|), eap (the sender's
change times the gradient at the receiver's input), eap-ig (eap with the
gradient averaged over --ig-steps runs between the prompts' embeddings).
--compare exact: also the exact effects, and how the method ranks them
(Spearman's rho; recall of the --recall-k largest |effects|).

--prune TAU: circuit discovery. Starting from every edge, each edge (smallest
|score| first) is removed for good when the circuit's metric then drops by less
than TAU (ACDC's greedy rule); a circuit runs the clean prompts with every edge
outside it carrying the corrupted prompts' sender output. Also the faithfulness
curve: the metric of the circuit of the k largest |scores|, k = 0 .. all
(--curve-points values of k). Normalised metric: 1 = the clean model.

--out (default: CHECKPOINT with .circuit.PAIRS.METHOD.METRIC[.noising][.pruneTAU].h5,
PAIRS the --pairs file's stem (none for --clean/--corrupt):
"step_0003000.circuit.key.eap.prob.h5"; NAME-2.h5, ... when that exists: nothing
is replaced): attrs format = "attnlab-circuit",
format_version, checkpoint, step, metric, direction, method, clean_metric,
corrupt_metric; the pairs as in a patch file; /edges/sender, /edges/receiver
(strings), /edges/score (float64); with --compare, /edges/exact and the
attrs spearman, top_k, top_k_recall of /edges. With --prune: /circuit/kept [E]
uint8 (attrs threshold, metric, edges_kept), /faithfulness/edges_kept [P] int64,
/faithfulness/metric [P] float64.
Pre-norm and norm-free decoders; post-norm models and encoder-decoders are refused.
)";

void print_top(const CircuitResult& r, size_t count) {
    std::vector<size_t> order(r.scores.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::abs(r.scores[a]) > std::abs(r.scores[b]); });
    std::printf("top %zu of %zu edges by |score|:\n", std::min(count, order.size()), order.size());
    for (size_t i = 0; i < std::min(count, order.size()); ++i) {
        const CircuitEdge& e = r.edges[order[i]];
        std::printf("  %-8s -> %-8s %9.4f\n", e.sender.c_str(), e.receiver.c_str(), r.scores[order[i]]);
    }
}

}  // namespace

int cmd_circuit(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab circuit", "Every edge of the residual graph: its exact effect or an attribution estimate.");
    add_prompt_options(options);
    options.add_options()("method", "exact | atp | atp-star | eap | eap-ig", cxxopts::value<std::string>()->default_value("exact"))
                         ("compare", "exact: also compute the exact effects and compare", cxxopts::value<std::string>())
                         ("noising", "patch corrupted senders into the clean run instead")
                         ("ig-steps", "eap-ig: runs along the line between the embeddings", cxxopts::value<std::string>()->default_value("5"))
                         ("batch-tokens", "tokens per batched run (copies of the prompts side by side)",
                          cxxopts::value<std::string>()->default_value("2048"))
                         ("prune", "circuit discovery: remove edges that cost less than TAU of the metric", cxxopts::value<std::string>())
                         ("curve-points", "--prune: circuits on the faithfulness curve", cxxopts::value<std::string>()->default_value("33"))
                         ("top", "edges to print", cxxopts::value<std::string>()->default_value("10"))
                         ("recall-k", "--compare: the k of top-k recall", cxxopts::value<std::string>()->default_value("20"))
                         ("out", "HDF5 edge table (default: CHECKPOINT with .circuit.PAIRS.METHOD.METRIC.h5)", cxxopts::value<std::string>());
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kCircuitHelp);
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    CircuitOptions o;
    o.method = parse_circuit_method(parsed["method"].as<std::string>());
    o.metric = parse_patch_metric(parsed["metric"].as<std::string>());
    o.noising = parsed.count("noising") > 0;
    std::vector<std::string> inputs = {path};
    std::vector<std::string> name_parts;  // what tells two default circuit files of one checkpoint apart
    if (parsed.count("pairs")) {
        inputs.push_back(parsed["pairs"].as<std::string>());
        name_parts.push_back(std::filesystem::path(inputs.back()).stem().string());
    }
    name_parts.insert(name_parts.end(), {to_string(o.method), to_string(o.metric)});
    if (o.noising) name_parts.push_back("noising");
    if (parsed.count("prune")) name_parts.push_back("prune" + parsed["prune"].as<std::string>());
    const OutputFile out = parsed.count("out") ? check_output("--out", parsed["out"].as<std::string>(), inputs, "attnlab-circuit")
                                               : default_output(path, "circuit", name_parts);
    o.ig_steps = static_cast<size_t>(number_option<int64_t>(parsed, "ig-steps", 1, 1000));
    o.batch_tokens = static_cast<size_t>(number_option<int64_t>(parsed, "batch-tokens", 1, int64_t{1} << 30));
    const size_t top = static_cast<size_t>(number_option<int64_t>(parsed, "top", 0, 1 << 20));
    const size_t recall_k = static_cast<size_t>(number_option<int64_t>(parsed, "recall-k", 1, 1 << 20));
    const bool compare = parsed.count("compare") > 0;
    const bool prune = parsed.count("prune") > 0;
    const double threshold = prune ? number_option<double>(parsed, "prune", 0.0, 1e30) : 0.0;
    const size_t curve_points = static_cast<size_t>(number_option<int64_t>(parsed, "curve-points", 2, 100000));
    if (compare && parsed["compare"].as<std::string>() != "exact")
        throw UsageError("--compare takes exact (the method compared against), got '" + parsed["compare"].as<std::string>() + "'");

    const LoadedCheckpoint l = load_checkpoint_argument(parsed);
    PromptPairs pairs = prompts_from(parsed, l);
    residual_edges(*l.loaded.model);  // refuses a model without a residual graph before any run
    check_pairs(*l.loaded.model, pairs);
    {  // the prompts' own tables (one copy per run), then as many copies side by side as --batch-tokens asks
        const size_t N = pairs.clean.size(), T = pairs.clean.front().size();
        CircuitOptions one_copy = o;
        one_copy.batch_tokens = N * T;
        check_table_fits(prompts_option(parsed), circuit_size(*l.loaded.model, N, T, one_copy, prune));
        check_table_fits("--batch-tokens", circuit_size(*l.loaded.model, N, T, o, prune));
    }
    resolve_answers(*l.loaded.model, pairs, o.metric);
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const CircuitResult r = edge_scores(*l.loaded.model, pairs, o);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<double> exact;
    Agreement a;
    double exact_seconds = 0;
    if (compare) {
        CircuitOptions e = o;
        e.method = CircuitMethod::exact;
        const Clock::time_point t = Clock::now();
        exact = o.method == CircuitMethod::exact ? r.scores : edge_scores(*l.loaded.model, pairs, e).scores;
        exact_seconds = std::chrono::duration<double>(Clock::now() - t).count();
        std::vector<double> against = exact;  // atp-star estimates |effect|
        if (o.method == CircuitMethod::atp_star)
            for (double& x : against) x = std::abs(x);
        a = agreement(r.scores, against, recall_k);
    }
    Discovery d;
    double prune_seconds = 0;
    if (prune) {
        const Clock::time_point t = Clock::now();
        d = discover_circuit(*l.loaded.model, pairs, o.metric, r.scores, threshold, curve_points);
        prune_seconds = std::chrono::duration<double>(Clock::now() - t).count();
    }
    const std::string written = write_circuit_file(out, l.path, l.checkpoint.step, pairs, o, r, exact, a, prune ? &d : nullptr);
    std::printf("circuit %s (step %lld): %zu pair(s) of %zu tokens, %s, %s, %zu edges in %.2f s (%zu prompt copies run); "
                "unpatched %s: clean %.4f, corrupted %.4f\n",
                l.path.c_str(), static_cast<long long>(l.checkpoint.step), pairs.clean.size(), pairs.clean.front().size(),
                o.noising ? "noising" : "denoising", to_string(o.method).c_str(), r.edges.size(), seconds, r.copies,
                baseline_name(o.metric).c_str(), r.clean, r.corrupt);
    print_top(r, top);
    if (compare)
        std::printf("against exact (%.2f s): Spearman %.4f, top-%zu recall %.3f\n", exact_seconds, a.spearman, a.top_k, a.recall);
    if (prune) {
        std::printf("circuit at threshold %g: %zu of %zu edges, metric %.4f (%zu circuits run, %.2f s); faithfulness:",
                    threshold, static_cast<size_t>(std::count(d.kept.begin(), d.kept.end(), true)), d.kept.size(), d.metric,
                    d.evaluations, prune_seconds);
        for (size_t i = 0; i < d.curve_kept.size(); ++i) std::printf(" %zu:%.3f", d.curve_kept[i], d.curve_metric[i]);
        std::printf("\n");
        for (size_t e = 0; e < d.kept.size(); ++e)
            if (d.kept[e]) std::printf("  kept %-8s -> %-8s %9.4f\n", r.edges[e].sender.c_str(), r.edges[e].receiver.c_str(), r.scores[e]);
    }
    std::printf("wrote %s\n", wrote_text(out, written).c_str());
    return 0;
}

}  // namespace attnlab
