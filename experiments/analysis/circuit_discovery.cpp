// Circuits as subsets of the residual graph's edges: their metric, greedy
// pruning and the faithfulness curve (experiments/analysis/circuit.h).
//
// Running a circuit: each receiver must read its own input (the stream minus
// the changes of its removed edges), which one forward cannot give every head
// at once. So the clean prompts go block by block (DecoderLM::forward_blocks):
// per block, one run of the distinct inputs its heads read (one copy each),
// from which each head's q, k and v are taken; one run of the block itself with
// those q, k, v, which also gives each head's output in the stream (the hook
// point attn.result); and, when the feed-forward's input differs, one more.
#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/ops.h"
#include "data/tasks.h"
#include "experiments/analysis/circuit.h"
#include "experiments/analysis/residual_graph.h"
#include "experiments/run/model_factory.h"
#include "layers/hooks.h"

namespace attnlab {

namespace {

using namespace residual_graph;

class CircuitRunner {
public:
    CircuitRunner(const TaskModel& model, const PromptPairs& pairs, PatchMetric metric)
        : model_(model), pairs_(pairs), metric_(metric), g_(graph_of(model)), N_(pairs.clean.size()) {
        into_.resize(g_.receivers.size());
        for (size_t e = 0; e < g_.edges.size(); ++e) into_[g_.edges[e].receiver].push_back(e);
        clean_ = patch_metric(run_prompts(model, pairs.clean, nullptr), pairs, metric);
        corrupt_ = patch_metric(run_prompts(model, pairs.corrupt, nullptr), pairs, metric);
        check_normalisable(clean_, corrupt_, metric, "circuit");
        corrupted_outputs_ = pass(pairs.corrupt, std::vector<bool>(g_.edges.size(), true)).outputs;
    }

    double metric(const std::vector<bool>& kept) {
        if (kept.size() != g_.edges.size()) fail("circuit", "a circuit names " + std::to_string(kept.size()) + " edges of " +
                                                                std::to_string(g_.edges.size()));
        return normalised(patch_metric(pass(pairs_.clean, kept, &clean_states_).logits, pairs_, metric_), clean_, corrupt_, metric_);
    }

private:
    struct Pass {
        std::vector<Tensor> outputs;  // per sender: its output in the stream (N, T, D)
        Tensor logits;
    };
    // A pass's state entering each block (and the head): what the next circuit
    // can start from, up to the first block an edge of difference reaches.
    struct States {
        std::vector<bool> kept;
        std::vector<Tensor> resid;                 // [l]: the stream entering block l (l = layers: the final stream)
        std::vector<std::vector<Tensor>> outputs;  // [l]: the senders' outputs known there
    };

    // The sum of (this run's output - the corrupted one) over the senders of the
    // edges into receiver r outside the circuit; undefined when none is outside.
    Tensor removed_change(size_t r, const std::vector<bool>& kept, const std::vector<Tensor>& outputs) const {
        Tensor change;
        for (size_t e : into_[r]) {
            if (kept[e]) continue;
            const size_t s = g_.edges[e].sender;
            const Tensor d = outputs[s] - corrupted_outputs_[s];
            change = change.defined() ? change + d : d;
        }
        return change;
    }


    Pass pass(const std::vector<std::vector<int32_t>>& rows, const std::vector<bool>& kept, States* states = nullptr) {
        Pass p;
        size_t first = 0;  // the first block whose inputs differ from the states'
        if (states && !states->kept.empty()) {
            first = g_.layers + 1;
            for (size_t e = 0; e < kept.size(); ++e)
                if (kept[e] != states->kept[e]) {
                    const Node& r = g_.receivers[g_.edges[e].receiver];
                    first = std::min(first, r.kind == Node::Kind::logits ? g_.layers : r.layer);
                }
            first = std::min(first, g_.layers);
        }
        Tensor resid;
        if (first > 0) {
            resid = states->resid[first];
            p.outputs = states->outputs[first];
        } else {
            p.outputs.resize(g_.senders.size());
            Hooks embed;
            embed.record("embed");
            run_prompts(model_, rows, &embed);
            resid = embed.last("embed");
            p.outputs[0] = resid;  // sender 0 is embed
        }
        if (states) {
            states->kept = kept;
            states->resid.resize(g_.layers + 1);
            states->outputs.resize(g_.layers + 1);
        }
        for (size_t l = first; l <= g_.layers; ++l) {
            if (states) states->resid[l] = resid, states->outputs[l] = p.outputs;
            if (l < g_.layers) resid = through_block(rows, l, resid, kept, p.outputs);
        }
        const size_t logits = g_.receivers.size() - 1;
        const Tensor change = removed_change(logits, kept, p.outputs);
        p.logits = run_prompts_from(model_, rows, g_.layers, change.defined() ? resid - change : resid, nullptr);
        return p;
    }

    // Block l of the circuit run: its heads' q, k and v from their own inputs,
    // each head's and the feed-forward's output into `outputs`; the stream leaving it.
    Tensor through_block(const std::vector<std::vector<int32_t>>& rows, size_t l, const Tensor& resid, const std::vector<bool>& kept,
                         std::vector<Tensor>& outputs) {
        // 1. the distinct inputs of the block's head receivers (copy 0: the stream itself)
        std::vector<Tensor> inputs = {resid};
        std::map<std::string, size_t> input_of;  // receiver name -> its copy
        std::map<std::vector<bool>, size_t> copy_of_removed;  // every head receiver of a block has the same senders
        for (size_t r = 0; r < g_.receivers.size(); ++r) {
            const Node& n = g_.receivers[r];
            if (!n.per_head() || n.layer != l) continue;
            std::vector<bool> removed;
            for (size_t e : into_[r]) removed.push_back(!kept[e]);
            if (std::find(removed.begin(), removed.end(), true) == removed.end()) {
                input_of[n.name()] = 0;
                continue;
            }
            auto [it, fresh] = copy_of_removed.emplace(removed, inputs.size());
            if (fresh) inputs.push_back(resid - removed_change(r, kept, outputs));
            input_of[n.name()] = it->second;
        }
        std::map<std::string, Tensor> qkv;  // point -> (N, T, heads, d_h) assembled per head
        if (inputs.size() > 1) {
            Hooks hooks;
            for (const char* point : {"attn.q", "attn.k", "attn.v"}) hooks.record(block(l) + point);
            run_prompts_blocks(model_, repeated(rows, inputs.size()), l, l + 1, concat(inputs, 0), &hooks);
            for (const auto& [kind, point] : {std::pair{Node::Kind::q, "attn.q"}, {Node::Kind::k, "attn.k"}, {Node::Kind::v, "attn.v"}}) {
                const Tensor& all = hooks.last(block(l) + point);
                std::vector<Tensor> heads;
                for (size_t h = 0; h < all.size(2); ++h) {
                    const size_t c = input_of.at(Node{kind, l, h}.name());
                    heads.push_back(slice(slice(all, 0, c * N_, (c + 1) * N_), 2, h, h + 1));
                }
                qkv[block(l) + point] = concat(heads, 2);
            }
        }
        // 2. the block with those q, k, v, and each head's output in the stream (its result)
        Hooks block_hooks;
        for (const auto& [point, value] : qkv) block_hooks.replace(point, [value](const std::string&, const Tensor&) { return value; });
        // the feed-forward's residual input: the stream after attention, or a parallel block's input
        const std::string result = block(l) + "attn.result", mid = block(l) + (g_.parallel ? "resid_pre" : "resid_mid"),
                          ffn = block(l) + "ffn.out";
        block_hooks.record(result).record(mid);
        if (g_.ffn) block_hooks.record(ffn);
        const Tensor leaving = run_prompts_blocks(model_, rows, l, l + 1, resid, &block_hooks);
        for (size_t s = 0; s < g_.senders.size(); ++s)
            if (g_.senders[s].kind == Node::Kind::head && g_.senders[s].layer == l) {
                const size_t h = g_.senders[s].head;
                const Tensor& all = block_hooks.last(result);  // (N, T, H, D)
                outputs[s] = reshape(slice(all, 2, h, h + 1), {all.size(0), all.size(1), all.size(3)});
            }
        const Tensor& stream = leaving;
        if (!g_.ffn) return stream;
        // 3. the feed-forward: its own input when edges into it are removed
        size_t mlp = 0;
        while (!(g_.senders[mlp].kind == Node::Kind::mlp && g_.senders[mlp].layer == l)) ++mlp;
        size_t receiver = 0;
        while (!(g_.receivers[receiver].kind == Node::Kind::mlp && g_.receivers[receiver].layer == l)) ++receiver;
        const Tensor change = removed_change(receiver, kept, outputs);
        if (!change.defined()) {
            outputs[mlp] = block_hooks.last(ffn);
            return stream;
        }
        // copy 0: the feed-forward on its own input; copy 1: the circuit's run, with copy 0's feed-forward output
        Hooks mlp_hooks;
        for (const auto& [point, value] : qkv) {
            const Tensor all = tiled(value, 2);
            mlp_hooks.replace(point, [all](const std::string&, const Tensor&) { return all; });
        }
        mlp_hooks.replace(mid, [&](const std::string&, const Tensor& value) {
            return concat({slice(value, 0, 0, N_) - change, slice(value, 0, N_, 2 * N_)}, 0);
        });
        mlp_hooks.replace(ffn, [&](const std::string&, const Tensor& value) { return tiled(slice(value, 0, 0, N_), 2); });
        mlp_hooks.record(ffn);
        const Tensor both = run_prompts_blocks(model_, repeated(rows, 2), l, l + 1, tiled(resid, 2), &mlp_hooks);
        outputs[mlp] = slice(mlp_hooks.last(ffn), 0, 0, N_);
        return slice(both, 0, N_, 2 * N_);
    }

    const TaskModel& model_;
    const PromptPairs& pairs_;
    const PatchMetric metric_;
    const Graph g_;
    const size_t N_;
    std::vector<std::vector<size_t>> into_;  // per receiver: the edges into it
    double clean_ = 0, corrupt_ = 0;
    std::vector<Tensor> corrupted_outputs_;  // per sender, on the corrupted prompts
    States clean_states_;                    // of the last circuit run
};

}  // namespace

double circuit_metric(const TaskModel& model, const PromptPairs& pairs, PatchMetric metric, const std::vector<bool>& kept) {
    return CircuitRunner(model, pairs, metric).metric(kept);
}

Discovery discover_circuit(const TaskModel& model, const PromptPairs& pairs, PatchMetric metric, const std::vector<double>& scores,
                           double threshold, size_t curve_points) {
    CircuitRunner runner(model, pairs, metric);
    const size_t E = scores.size();
    std::vector<size_t> order(E);  // by |score|, largest first
    for (size_t i = 0; i < E; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::abs(scores[a]) > std::abs(scores[b]); });
    Discovery d;
    d.threshold = threshold;
    // the faithfulness curve: the top k edges
    const size_t points = std::max<size_t>(2, std::min(curve_points, E + 1));
    for (size_t i = 0; i < points; ++i) {
        const size_t k = (i * E + (points - 1) / 2) / (points - 1);  // 0 .. E, evenly
        if (!d.curve_kept.empty() && d.curve_kept.back() == k) continue;
        std::vector<bool> kept(E, false);
        for (size_t j = 0; j < k; ++j) kept[order[j]] = true;
        d.curve_kept.push_back(k);
        d.curve_metric.push_back(runner.metric(kept));
        ++d.evaluations;
    }
    // greedy pruning, the smallest |score| tried first
    d.kept.assign(E, true);
    d.metric = d.curve_metric.back();  // every edge
    for (size_t j = E; j-- > 0;) {
        const size_t e = order[j];
        d.kept[e] = false;
        const double without = runner.metric(d.kept);
        ++d.evaluations;
        if (d.metric - without < threshold) d.metric = without;
        else d.kept[e] = true;
    }
    return d;
}

}  // namespace attnlab
