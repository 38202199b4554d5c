#include "experiments/analysis/circuit.h"
#include "experiments/analysis/residual_graph.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "autograd/ops.h"
#include "data/h5file.h"
#include "data/tasks.h"
#include "experiments/files/provenance.h"
#include "experiments/files/output_file.h"
#include "experiments/run/model_factory.h"
#include "layers/hooks.h"
#include "layers/models.h"

namespace attnlab {

namespace {

using namespace residual_graph;


// Everything the methods share: the two prompts' runs and each sender's change.
class EdgeScorer {
public:
    EdgeScorer(const TaskModel& model, const PromptPairs& pairs, const CircuitOptions& o)
        : model_(model), pairs_(pairs), o_(o), g_(graph_of(model)),
          base_(o.noising ? pairs.clean : pairs.corrupt), source_(o.noising ? pairs.corrupt : pairs.clean),
          N_(pairs.clean.size()), T_(pairs.clean.front().size()),
          copies_per_run_(std::max<size_t>(1, o.batch_tokens / (N_ * T_))) {}

    CircuitResult run() {
        CircuitResult result;
        const auto [base_metric, source_metric] = record_unpatched();
        result.clean = o_.noising ? base_metric : source_metric;
        result.corrupt = o_.noising ? source_metric : base_metric;
        check_normalisable(result.clean, result.corrupt, o_.metric, "circuit");
        // metric units per unit of the patching metric: norm_logit_diff divides by clean - corrupted
        scale_ = o_.metric == PatchMetric::norm_logit_diff ? 1.0 / (result.clean - result.corrupt) : 1.0;
        base_metric_ = base_metric;
        sender_changes();
        for (const Graph::Edge& e : g_.edges) result.edges.push_back({g_.senders[e.sender].name(), g_.receivers[e.receiver].name()});
        scores_.assign(g_.edges.size(), 0.0);
        if (o_.method == CircuitMethod::exact || o_.method == CircuitMethod::atp || o_.method == CircuitMethod::atp_star) {
            if (o_.method == CircuitMethod::atp) gradients();
            for (size_t l = 0; l < g_.layers; ++l) patched_inputs(l);
            logit_edges();
            if (o_.method == CircuitMethod::atp_star) grad_drop();
        } else {
            const size_t steps = o_.method == CircuitMethod::eap ? 1 : o_.ig_steps;
            if (steps == 0) fail("circuit", "--ig-steps must be at least 1");
            for (size_t k = 1; k <= steps; ++k) {
                const double alpha = o_.method == CircuitMethod::eap ? 0.0 : static_cast<double>(k) / static_cast<double>(steps);
                embed_ = alpha > 0 ? base_embed_ + (source_embed_ - base_embed_) * alpha : Tensor();
                gradients();
                input_gradients(1.0 / static_cast<double>(steps));
            }
        }
        result.scores = scores_;
        result.copies = copies_;
        return result;
    }

private:
    // The base prompts' activations at every receiver, and what the senders'
    // changes are made of on both prompts.
    // Returns the metric of the base run and of the source run.
    std::pair<double, double> record_unpatched() {
        Hooks base, source;
        for (Hooks* h : {&base, &source}) h->record("embed").record("blocks.*.attn.result");
        if (g_.ffn) base.record("blocks.*.ffn.out"), source.record("blocks.*.ffn.out");
        base.record("blocks.*.attn.q").record("blocks.*.attn.k").record("blocks.*.attn.v").record("blocks.*.resid_pre");
        base.record(block(g_.layers - 1) + "resid_post");
        if (o_.method == CircuitMethod::atp_star) base.record("blocks.*.attn.pattern");
        const double base_metric = patch_metric(run_prompts(model_, base_, &base), pairs_, o_.metric);
        const double source_metric = patch_metric(run_prompts(model_, source_, &source), pairs_, o_.metric);
        copies_ += 2;
        base_embed_ = base.last("embed");
        source_embed_ = source.last("embed");
        for (const Node& r : g_.receivers) base_activation_[r.name()] = of_receiver(base.last(r.activation(g_.layers)), r);
        base_records_ = std::move(base);
        source_records_ = std::move(source);
        return {base_metric, source_metric};
    }

    // Each sender's change (source - base) in the residual stream, (N, T, D): a
    // head's is the change of its result (its output through its slice of the
    // output projection, the hook point attn.result).
    void sender_changes() {
        for (size_t s = 0; s < g_.senders.size(); ++s) {
            const Node& n = g_.senders[s];
            if (n.kind == Node::Kind::embed) delta_[s] = source_embed_ - base_embed_;
            if (n.kind == Node::Kind::mlp) {
                const std::string point = block(n.layer) + "ffn.out";
                delta_[s] = source_records_.last(point) - base_records_.last(point);
            }
            if (n.kind == Node::Kind::head) {
                const std::string point = block(n.layer) + "attn.result";
                const Tensor d = slice(source_records_.last(point) - base_records_.last(point), 2, n.head, n.head + 1);  // (N, T, 1, D)
                delta_[s] = reshape(d, {d.size(0), d.size(1), d.size(3)});
            }
        }
        for (auto& [s, d] : delta_) {
            if (o_.delta_scale != 1.0) d = d * o_.delta_scale;
            delta_values_[s] = d.values();
        }
    }

    // The base prompts in `copies` copies side by side (copy c = rows [c N, (c + 1) N)),
    // run from block `layer` on (the earlier blocks' outputs are the base run's);
    // `resid` (copies N, T, D) is added to the residual stream entering it when defined.
    // The logits; with `only_that_block`, block `layer` alone runs (what it records is
    // all the caller reads) and the result is undefined.
    Tensor run_copies_from(size_t layer, size_t copies, const Tensor& added, Hooks* hooks, bool only_that_block = false) {
        const std::string entering = layer < g_.layers ? block(layer) + "resid_pre" : block(g_.layers - 1) + "resid_post";
        Tensor resid = tiled(base_records_.last(entering), copies);
        if (added.defined()) resid = resid + added;
        copies_ += copies;
        if (!only_that_block) return run_prompts_from(model_, repeated(base_, copies), layer, resid, hooks);
        run_prompts_blocks(model_, repeated(base_, copies), layer, layer + 1, resid, hooks);
        return Tensor();
    }

    // Runs the base prompts in copies side by side from the receiver's layer on,
    // copy c with sender senders[c]'s change added at the receiver's `input` (the
    // stream entering the layer, the stream after its attention, or the final
    // stream), and records `points`: the receivers' patched activations.
    void with_changes_at(const Node& receiver, const std::vector<size_t>& senders, const std::vector<std::string>& points,
                         const std::function<void(size_t sender, const Hooks& recorded, size_t copy, const Tensor& logits)>& read) {
        for (size_t first = 0; first < senders.size(); first += copies_per_run_) {
            const size_t copies = std::min(copies_per_run_, senders.size() - first);
            std::vector<Tensor> changes;
            for (size_t c = 0; c < copies; ++c) changes.push_back(delta_.at(senders[first + c]));
            const Tensor added = changes.size() == 1 ? changes.front() : concat(changes, 0);
            Hooks hooks;
            for (const std::string& p : points) hooks.record(p);
            Tensor logits;  // the receiver is the logits: the final stream with the change, through the head
            if (receiver.kind == Node::Kind::mlp) {
                hooks.replace(receiver.input(g_.layers, g_.parallel), [&](const std::string&, const Tensor& value) { return value + added; });
                run_copies_from(receiver.layer, copies, Tensor(), &hooks, true);
            } else if (receiver.kind == Node::Kind::logits) {
                logits = run_copies_from(g_.layers, copies, added, &hooks);
            } else {
                run_copies_from(receiver.layer, copies, added, &hooks, true);
            }
            for (size_t c = 0; c < copies; ++c)
                read(senders[first + c], hooks, c, logits.defined() ? slice(logits, 0, c * N_, (c + 1) * N_) : Tensor());
        }
    }

    // Layer l's receivers: their activations with each edge's change (exact:
    // then one patched run per edge; atp: times the metric's gradient there).
    void patched_inputs(size_t l) {
        // edges into layer l, by input point
        std::map<std::string, std::vector<size_t>> by_input;  // (the receivers of one input share it: any one stands for them)
        for (size_t e = 0; e < g_.edges.size(); ++e) {
            const Node& r = g_.receivers[g_.edges[e].receiver];
            if (r.kind != Node::Kind::logits && r.layer == l) by_input[r.input(g_.layers, g_.parallel)].push_back(e);
        }
        std::map<size_t, Tensor> patched;  // edge -> the receiver's activation with that edge patched
        for (const auto& [input, edges] : by_input) {
            std::vector<size_t> senders;
            std::vector<std::string> points;
            for (size_t e : edges) {
                if (std::find(senders.begin(), senders.end(), g_.edges[e].sender) == senders.end()) senders.push_back(g_.edges[e].sender);
                const std::string p = g_.receivers[g_.edges[e].receiver].activation(g_.layers);
                if (std::find(points.begin(), points.end(), p) == points.end()) points.push_back(p);
            }
            with_changes_at(g_.receivers[g_.edges[edges.front()].receiver], senders, points, [&](size_t sender, const Hooks& rec, size_t c, const Tensor&) {
                for (size_t e : edges) {
                    if (g_.edges[e].sender != sender) continue;
                    const Node& r = g_.receivers[g_.edges[e].receiver];
                    patched[e] = of_receiver(slice(rec.last(r.activation(g_.layers)), 0, c * N_, (c + 1) * N_), r);
                }
            });
        }
        if (o_.method == CircuitMethod::atp) {
            for (auto& [e, act] : patched) {
                const Node& r = g_.receivers[g_.edges[e].receiver];
                scores_[e] = dot((act - base_activation_.at(r.name())).values(), grad_values_.at(r.name()));
            }
            return;
        }
        if (o_.method == CircuitMethod::atp_star) {
            for (auto& [e, act] : patched) change_[e] = (act - base_activation_.at(g_.receivers[g_.edges[e].receiver].name())).values();
            pattern_changes(l, patched);
            return;
        }
        // exact: the base prompts with one receiver activation replaced per copy
        std::vector<size_t> edges;
        for (const auto& [e, act] : patched) edges.push_back(e);
        for (size_t first = 0; first < edges.size(); first += copies_per_run_) {
            const size_t copies = std::min(copies_per_run_, edges.size() - first);
            Hooks hooks = patching_copies(edges, first, copies, patched);
            const Tensor logits = run_copies_from(l, copies, Tensor(), &hooks);
            for (size_t c = 0; c < copies; ++c)
                scores_[edges[first + c]] = effect(slice(logits, 0, c * N_, (c + 1) * N_));
        }
    }

    // Hooks that give copy c (of edges[first + c]) its edge's patched receiver
    // activation, `patched` (edge -> its activation), in place of the base one.
    Hooks patching_copies(const std::vector<size_t>& edges, size_t first, size_t copies, const std::map<size_t, Tensor>& patched) const {
        std::map<std::string, std::vector<CopyPatch>> patches;
        for (size_t c = 0; c < copies; ++c) {
            const size_t e = edges[first + c];
            const Node& r = g_.receivers[g_.edges[e].receiver];
            patches[r.activation(g_.layers)].push_back({c, r.per_head() ? static_cast<int>(r.head) : -1, patched.at(e)});
        }
        Hooks hooks;
        for (auto& [point, list] : patches)
            hooks.replace(point, [N = N_, list](const std::string&, const Tensor& value) { return patch_copies(value, N, list); });
        return hooks;
    }

    // Edges into the logits: the final residual stream with the sender's change.
    void logit_edges() {
        std::vector<size_t> edges, senders;
        for (size_t e = 0; e < g_.edges.size(); ++e)
            if (g_.receivers[g_.edges[e].receiver].kind == Node::Kind::logits) edges.push_back(e), senders.push_back(g_.edges[e].sender);
        if (o_.method == CircuitMethod::atp) {  // the receiver's activation is the residual itself: atp = eap
            const std::vector<double>& grad = grad_values_.at("logits");
            for (size_t i = 0; i < edges.size(); ++i) scores_[edges[i]] = dot(delta_values_.at(senders[i]), grad);
            return;
        }
        if (o_.method == CircuitMethod::atp_star) {
            for (size_t i = 0; i < edges.size(); ++i) change_[edges[i]] = delta_values_.at(senders[i]);
            return;
        }
        with_changes_at(g_.receivers.back(), senders, {}, [&](size_t sender, const Hooks&, size_t, const Tensor& logits) {
            for (size_t i = 0; i < edges.size(); ++i)
                if (senders[i] == sender) scores_[edges[i]] = effect(logits);
        });
    }

    double effect(const Tensor& logits) const { return (patch_metric(logits, pairs_, o_.metric) - base_metric_) * scale_; }

    // The metric's gradient at every receiver's activation (grad_values_), on the
    // base prompts, or with the input embeddings replaced by embed_ when defined.
    // With `drop` < layers (AtP*'s GradDrop), no gradient flows through block
    // drop's outputs into the stream; with `patterns`, also the gradient at every
    // attention pattern (pattern_grad_).
    void gradients(size_t drop = SIZE_MAX, bool patterns = false) {
        Hooks hooks;
        std::map<std::string, Tensor> zeros;
        if (embed_.defined()) hooks.replace("embed", [&](const std::string&, const Tensor&) { return embed_; });
        if (drop < g_.layers) {
            hooks.replace(block(drop) + "attn.out", [](const std::string&, const Tensor& value) { return value.detach(); });
            if (g_.ffn) hooks.replace(block(drop) + "ffn.out", [](const std::string&, const Tensor& value) { return value.detach(); });
        }
        // each point continues as value + zero, the zero a leaf whose gradient is the point's
        const Hooks::Replace plus_zero = [&zeros](const std::string& name, const Tensor& value) {
            Tensor zero = Tensor::zeros(value.shape(), value.dtype(), true);
            zeros[name] = zero;
            return value + zero;
        };
        if (patterns) hooks.replace("blocks.*.attn.pattern", plus_zero);
        for (const Node& r : g_.receivers) {
            const std::string point = r.activation(g_.layers);
            if (zeros.count(point)) continue;
            zeros[point] = Tensor();
            if (drop < g_.layers && r.kind == Node::Kind::mlp && r.layer == drop) continue;  // its output is detached: no gradient
            hooks.replace(point, plus_zero);
        }
        const Tensor logits = run_prompts(model_, base_, &hooks, true);
        copies_ += 1;
        const Tensor seed = patch_metric_gradient(logits, pairs_, o_.metric) * Tensor::scalar(scale_, logits.dtype());
        logits.backward(seed);
        grad_.clear();
        for (const Node& r : g_.receivers) {
            const Tensor& zero = zeros.at(r.activation(g_.layers));
            const Tensor grad = zero.defined() && zero.grad().defined() ? zero.grad() : Tensor();
            grad_[r.name()] = grad.defined() ? of_receiver(grad, r) : Tensor();
            grad_values_[r.name()] = grad.defined() ? grad_[r.name()].values()
                                                    : std::vector<double>(base_activation_.at(r.name()).numel(), 0.0);
        }
        for (size_t l = 0; patterns && l < g_.layers; ++l) {
            const Tensor& zero = zeros.at(block(l) + "attn.pattern");
            pattern_grad_[l] = zero.grad().defined() ? zero.grad() : Tensor::zeros(zero.shape(), zero.dtype());
        }
        zero_parameter_grads();
    }

    // AtP*'s QK fix (Kramar et al. 2024): for an edge into a query or a key, the
    // exact change of the attention pattern of the heads reading it (the block
    // run with that q or k), which the gradient then meets after the softmax.
    void pattern_changes(size_t l, const std::map<size_t, Tensor>& patched) {
        std::vector<size_t> edges;
        for (const auto& [e, act] : patched) {
            const Node::Kind kind = g_.receivers[g_.edges[e].receiver].kind;
            if (kind == Node::Kind::q || kind == Node::Kind::k) edges.push_back(e);
        }
        const Tensor& base_pattern = base_records_.last(block(l) + "attn.pattern");  // (N, H, T, T)
        const size_t group = g_.heads / g_.kv_heads;
        for (size_t first = 0; first < edges.size(); first += copies_per_run_) {
            const size_t copies = std::min(copies_per_run_, edges.size() - first);
            Hooks hooks = patching_copies(edges, first, copies, patched);
            hooks.record(block(l) + "attn.pattern");
            run_copies_from(l, copies, Tensor(), &hooks, true);
            const Tensor& pattern = hooks.last(block(l) + "attn.pattern");
            for (size_t c = 0; c < copies; ++c) {
                const size_t e = edges[first + c];
                const Node& r = g_.receivers[g_.edges[e].receiver];
                const size_t h0 = r.kind == Node::Kind::q ? r.head : r.head * group, h1 = r.kind == Node::Kind::q ? r.head + 1 : h0 + group;
                pattern_heads_[e] = {h0, h1};
                change_[e] = (slice(slice(pattern, 0, c * N_, (c + 1) * N_), 1, h0, h1) - slice(base_pattern, 1, h0, h1)).values();
            }
        }
    }

    // AtP* with GradDrop: for each block, the attribution with no gradient through
    // that block's outputs; the score is the mean of their magnitudes,
    // sum |AtP*_-l| / (L - 1) (unsigned: an estimate of |effect|).
    void grad_drop() {
        std::vector<double> total(g_.edges.size(), 0.0);
        for (size_t drop = 0; drop < g_.layers; ++drop) {
            gradients(drop, true);
            for (size_t e = 0; e < g_.edges.size(); ++e) {
                const auto heads = pattern_heads_.find(e);
                const double s = heads == pattern_heads_.end()
                                     ? dot(change_.at(e), grad_values_.at(g_.receivers[g_.edges[e].receiver].name()))
                                     : dot(change_.at(e), slice(pattern_grad_.at(g_.receivers[g_.edges[e].receiver].layer), 1,
                                                                heads->second.first, heads->second.second).values());
                total[e] += std::abs(s);
            }
        }
        for (size_t e = 0; e < g_.edges.size(); ++e) scores_[e] = total[e] / static_cast<double>(std::max<size_t>(1, g_.layers - 1));
    }

    // EAP: the gradient with respect to each receiver's residual input through
    // that receiver alone (a backward from its activation times its gradient,
    // the residual input a leaf), times each sender's change; `weight` is this
    // run's share of the integrated gradient.
    void input_gradients(double weight) {
        Hooks hooks;
        std::map<std::string, Tensor> leaves, activations;
        for (size_t l = 0; l < g_.layers; ++l)
            for (const char* point : {"resid_pre", "resid_mid"}) {
                if ((!g_.ffn || g_.parallel) && point == std::string("resid_mid")) continue;  // parallel: the ffn reads resid_pre
                hooks.replace(block(l) + point, [&leaves](const std::string& name, const Tensor& value) {
                    Tensor leaf = Tensor::zeros(value.shape(), value.dtype(), true);
                    leaves[name] = leaf;
                    return value.detach() + leaf;  // the upstream graph cut: only this input's paths remain
                });
            }
        for (const Node& r : g_.receivers) {
            if (r.kind == Node::Kind::logits) continue;
            hooks.replace(r.activation(g_.layers), [&activations](const std::string& name, const Tensor& value) {
                activations[name] = value;
                return value;
            });
        }
        if (embed_.defined()) hooks.replace("embed", [&](const std::string&, const Tensor&) { return embed_; });
        run_prompts(model_, base_, &hooks, true);
        copies_ += 1;
        std::map<std::string, std::vector<double>> input_grad;  // receiver -> d metric / d its residual input
        for (const Node& r : g_.receivers) {
            if (r.kind == Node::Kind::logits) {
                input_grad[r.name()] = grad_values_.at(r.name());
                continue;
            }
            const Tensor through = sum(of_receiver(activations.at(r.activation(g_.layers)), r) * grad_.at(r.name()));
            through.backward(Tensor(), true);
            Tensor& leaf = leaves.at(r.input(g_.layers, g_.parallel));
            input_grad[r.name()] = leaf.grad().values();
            leaf.zero_grad();
        }
        zero_parameter_grads();
        for (size_t e = 0; e < g_.edges.size(); ++e) {
            const Graph::Edge& edge = g_.edges[e];
            scores_[e] += weight * dot(delta_values_.at(edge.sender), input_grad.at(g_.receivers[edge.receiver].name()));
        }
    }

    void zero_parameter_grads() const {
        for (const auto& [name, p] : model_.module().named_parameters()) Tensor(p).zero_grad();
    }

    const TaskModel& model_;
    const PromptPairs& pairs_;
    const CircuitOptions& o_;
    const Graph g_;
    std::vector<std::vector<int32_t>> base_, source_;
    const size_t N_, T_, copies_per_run_;
    double scale_ = 1, base_metric_ = 0;
    size_t copies_ = 0;
    Hooks base_records_, source_records_;
    Tensor base_embed_, source_embed_;
    Tensor embed_;  // eap-ig: the interpolated input embeddings of this step
    std::map<size_t, Tensor> delta_;                         // sender -> (N, T, D)
    std::map<size_t, std::vector<double>> delta_values_;     // the same, flat
    std::map<std::string, Tensor> base_activation_, grad_;   // receiver -> its activation, the metric's gradient there
    std::map<std::string, std::vector<double>> grad_values_;
    std::vector<double> scores_;
    // atp-star: per edge, the receiver's change (flat; for q and k edges the pattern's
    // change of the heads pattern_heads_ names), and the gradient at each layer's pattern
    std::map<size_t, std::vector<double>> change_;
    std::map<size_t, std::pair<size_t, size_t>> pattern_heads_;
    std::map<size_t, Tensor> pattern_grad_;
};

// Ranks from 1, ties sharing their mean rank.
std::vector<double> ranks(const std::vector<double>& x) {
    std::vector<size_t> order(x.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
    std::vector<double> r(x.size());
    for (size_t i = 0; i < order.size();) {
        size_t j = i;
        while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
        for (size_t k = i; k <= j; ++k) r[order[k]] = (static_cast<double>(i + j) / 2.0) + 1.0;
        i = j + 1;
    }
    return r;
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
    const double n = static_cast<double>(a.size());
    double ma = 0, mb = 0;
    for (size_t i = 0; i < a.size(); ++i) ma += a[i] / n, mb += b[i] / n;
    double sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < a.size(); ++i) sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
    return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

// The k indices of largest |x|.
std::vector<size_t> top_indices(const std::vector<double>& x, size_t k) {
    std::vector<size_t> order(x.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::abs(x[a]) > std::abs(x[b]); });
    order.resize(std::min(k, order.size()));
    return order;
}

}  // namespace

CircuitMethod parse_circuit_method(const std::string& name) {
    if (name == "exact") return CircuitMethod::exact;
    if (name == "atp") return CircuitMethod::atp;
    if (name == "eap") return CircuitMethod::eap;
    if (name == "eap-ig") return CircuitMethod::eap_ig;
    if (name == "atp-star") return CircuitMethod::atp_star;
    fail("circuit", "--method must be exact, atp, atp-star, eap or eap-ig, got '" + name + "'");
}

std::string to_string(CircuitMethod method) {
    switch (method) {
        case CircuitMethod::exact: return "exact";
        case CircuitMethod::atp: return "atp";
        case CircuitMethod::eap: return "eap";
        case CircuitMethod::atp_star: return "atp-star";
        default: return "eap-ig";
    }
}

std::vector<CircuitEdge> residual_edges(const TaskModel& model) {
    const Graph g = graph_of(model);
    std::vector<CircuitEdge> out;
    for (const Graph::Edge& e : g.edges) out.push_back({g.senders[e.sender].name(), g.receivers[e.receiver].name()});
    return out;
}

CircuitResult edge_scores(const TaskModel& model, const PromptPairs& pairs, const CircuitOptions& options) {
    return EdgeScorer(model, pairs, options).run();
}

TableSize circuit_size(const TaskModel& model, size_t N, size_t T, const CircuitOptions& o, bool prune) {
    const Graph g = graph_of(model);
    const size_t copies = std::min(std::max<size_t>(1, o.batch_tokens / (N * T)), g.edges.size());  // as EdgeScorer runs them
    const bool gradient = o.method != CircuitMethod::exact;
    const double n = static_cast<double>(N), t = static_cast<double>(T), L = static_cast<double>(g.layers),
                 H = static_cast<double>(g.heads), D = static_cast<double>(model.decoder_lm()->config.block.attention.width);
    const double stream = n * t * D;  // one (N, T, D) tensor
    const bool star = o.method == CircuitMethod::atp_star;
    // AtP*'s runs record a block's pattern; its gradient runs replace every pattern (composed, in the graph: scores,
    // pattern and their gradients) beside the recorded patterns and their gradients
    const TableSize batched = forward_tables(model, {.rows = copies * N, .positions = T, .tables = star ? 1u : 0u});
    TableSize size = gradient ? forward_tables(model, {.rows = N, .positions = T, .tables = star ? 6 * g.layers : 0, .graph = true})
                              : batched;
    size.bytes = std::max(size.bytes, batched.bytes);
    size.bytes += static_cast<double>(g.senders.size()) * stream * (4 + 8)  // delta_, delta_values_
                  + 2 * L * H * stream * 4;                                 // attn.result of both prompts
    if (star) {
        double changes = 0;  // (N, heads read, T, T) per q or k edge: a query feeds its head, a key its group
        for (const Graph::Edge& e : g.edges) {
            const Node::Kind kind = g.receivers[e.receiver].kind;
            changes += kind == Node::Kind::q ? 1.0 : kind == Node::Kind::k ? H / static_cast<double>(g.kv_heads) : 0.0;
        }
        size.bytes += 8 * changes * n * t * t;
        size.table += ", the pattern changes of " + std::to_string(static_cast<size_t>(changes)) + " query and key edges [" +
                      std::to_string(N) + " x " + std::to_string(T) + " x " + std::to_string(T) + " positions, float64]";
    }
    if (prune) {  // each block's distinct head inputs side by side: the stream and one per q, k, v receiver
        const size_t inputs = 1 + g.heads + 2 * g.kv_heads;
        size.bytes += (L + 1) * static_cast<double>(g.senders.size()) * stream * 4 +
                      forward_tables(model, {.rows = inputs * N, .positions = T}).bytes;
    }
    return size;
}

Agreement agreement(const std::vector<double>& approx, const std::vector<double>& exact, size_t top_k) {
    if (approx.size() != exact.size()) fail("circuit", "agreement: the score lists differ in length");
    Agreement a;
    a.spearman = pearson(ranks(approx), ranks(exact));
    a.top_k = std::min(top_k, exact.size());
    const std::vector<size_t> want = top_indices(exact, a.top_k), got = top_indices(approx, a.top_k);
    size_t found = 0;
    for (size_t i : want) found += std::count(got.begin(), got.end(), i);
    a.recall = a.top_k ? static_cast<double>(found) / static_cast<double>(a.top_k) : 0.0;
    return a;
}

std::string write_circuit_file(const OutputFile& out, const std::string& checkpoint, int64_t step, const PromptPairs& pairs,
                        const CircuitOptions& o, const CircuitResult& r, const std::vector<double>& exact, const Agreement& a,
                        const Discovery* d) {
    return write_output(out, "[circuit]", [&](const std::string& tmp) {
        h5::File f = h5::File::create(tmp, "circuit");
        write_output_attrs(f, "attnlab-circuit", checkpoint, step);
        f.write_attr_string("metric", to_string(o.metric));
        f.write_attr_string("direction", o.noising ? "noising" : "denoising");
        f.write_attr_string("method", to_string(o.method));
        if (o.method == CircuitMethod::eap_ig) f.write_attr_int("ig_steps", static_cast<int64_t>(o.ig_steps));
        f.write_attr_double("clean_metric", r.clean);
        f.write_attr_double("corrupt_metric", r.corrupt);
        write_prompt_pairs(f, pairs);
        const h5::Group edges = f.create_group("edges");
        std::vector<std::string> senders, receivers;
        for (const CircuitEdge& e : r.edges) senders.push_back(e.sender), receivers.push_back(e.receiver);
        edges.write_strings("sender", senders);
        edges.write_strings("receiver", receivers);
        edges.write<double>("score", r.scores);
        if (!exact.empty()) {
            edges.write<double>("exact", exact);
            edges.write_attr_double("spearman", a.spearman);
            edges.write_attr_int("top_k", static_cast<int64_t>(a.top_k));
            edges.write_attr_double("top_k_recall", a.recall);
        }
        if (d) {
            const h5::Group circuit = f.create_group("circuit");
            std::vector<uint8_t> kept(d->kept.begin(), d->kept.end());
            circuit.write<uint8_t>("kept", kept);
            circuit.write_attr_double("threshold", d->threshold);
            circuit.write_attr_double("metric", d->metric);
            circuit.write_attr_int("edges_kept", static_cast<int64_t>(std::count(d->kept.begin(), d->kept.end(), true)));
            const h5::Group curve = f.create_group("faithfulness");
            std::vector<int64_t> counts(d->curve_kept.begin(), d->curve_kept.end());
            curve.write<int64_t>("edges_kept", counts);
            curve.write<double>("metric", d->curve_metric);
        }
        f.close();
    });
}

}  // namespace attnlab
