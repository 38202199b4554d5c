#include "experiments/analysis/circuit.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "autograd/ops.h"
#include "data/h5file.h"
#include "data/tasks.h"
#include "experiments/files/provenance.h"
#include "experiments/files/run_files.h"
#include "experiments/run/model_factory.h"
#include "layers/hooks.h"
#include "layers/models.h"

namespace attnlab {

namespace {

std::string block(size_t layer) { return "blocks." + std::to_string(layer) + "."; }

// A node of the residual graph: a sender (embed, head, mlp) or a receiver (q, k, v, mlp, logits).
struct Node {
    enum class Kind { embed, head, mlp, q, k, v, logits } kind = Kind::embed;
    size_t layer = 0, head = 0;

    std::string name() const {
        const std::string l = std::to_string(layer), h = std::to_string(head);
        switch (kind) {
            case Kind::embed: return "embed";
            case Kind::head: return l + "." + h;
            case Kind::mlp: return "mlp." + l;
            case Kind::q: return l + "." + h + ":q";
            case Kind::k: return l + "." + h + ":k";
            case Kind::v: return l + "." + h + ":v";
            default: return "logits";
        }
    }
    // A receiver's activation: the head's q, k or v (head axis 2), the feed-forward's
    // output, or the final residual stream (which the logits read through ln_f).
    std::string activation(size_t layers) const {
        switch (kind) {
            case Kind::q: return block(layer) + "attn.q";
            case Kind::k: return block(layer) + "attn.k";
            case Kind::v: return block(layer) + "attn.v";
            case Kind::mlp: return block(layer) + "ffn.out";
            default: return block(layers - 1) + "resid_post";
        }
    }
    bool per_head() const { return kind == Kind::q || kind == Kind::k || kind == Kind::v; }
    // A receiver's residual input: where a sender's change is added in.
    std::string input(size_t layers) const {
        if (per_head()) return block(layer) + "resid_pre";
        if (kind == Kind::mlp) return block(layer) + "resid_mid";
        return block(layers - 1) + "resid_post";
    }
};

// Whether sender s writes into what receiver r reads: a head feeds the later
// layers and its own layer's feed-forward; a feed-forward the later layers.
bool feeds(const Node& s, const Node& r) {
    if (s.kind == Node::Kind::embed || r.kind == Node::Kind::logits) return true;
    if (s.kind == Node::Kind::head && r.kind == Node::Kind::mlp) return s.layer <= r.layer;
    return s.layer < r.layer;
}

struct Graph {
    size_t layers = 0, heads = 0, kv_heads = 0;
    bool ffn = false;
    std::vector<Node> senders, receivers;
    struct Edge {
        size_t sender, receiver;
    };
    std::vector<Edge> edges;  // by receiver, then sender
};

const DecoderLM& decoder_of(const TaskModel& model) {
    if (model.encoder_decoder() || model.decoder_lm() == nullptr)
        fail("circuit", "the residual graph is a decoder's; this checkpoint is an encoder-decoder");
    const DecoderLM& lm = *model.decoder_lm();
    if (lm.config.block.norm == Norm::post)
        fail("circuit", "model.norm = \"post\": a post-norm residual stream is not a sum of the components' outputs, so its "
                        "edges are undefined (pre-norm and norm-free decoders only)");
    return lm;
}

Graph graph_of(const TaskModel& model) {
    const DecoderLM& lm = decoder_of(model);
    Graph g;
    g.layers = model.layers();
    g.heads = model.heads();
    g.kv_heads = lm.config.block.attention.kv_heads == 0 ? g.heads : lm.config.block.attention.kv_heads;
    g.ffn = lm.config.block.ffn > 0;
    using K = Node::Kind;
    g.senders.push_back({K::embed});
    for (size_t l = 0; l < g.layers; ++l) {
        for (size_t h = 0; h < g.heads; ++h) g.senders.push_back({K::head, l, h});
        if (g.ffn) g.senders.push_back({K::mlp, l});
    }
    for (size_t l = 0; l < g.layers; ++l) {
        for (size_t h = 0; h < g.heads; ++h) g.receivers.push_back({K::q, l, h});
        for (K kind : {K::k, K::v})
            for (size_t h = 0; h < g.kv_heads; ++h) g.receivers.push_back({kind, l, h});
        if (g.ffn) g.receivers.push_back({K::mlp, l});
    }
    g.receivers.push_back({K::logits});
    for (size_t r = 0; r < g.receivers.size(); ++r)
        for (size_t s = 0; s < g.senders.size(); ++s)
            if (feeds(g.senders[s], g.receivers[r])) g.edges.push_back({s, r});
    return g;
}

// `value` (C N, T, ...): C copies of the N prompts side by side; copy c's rows
// replaced by `patch.value`, whole, or only its head `patch.head` (axis 2) when >= 0.
struct CopyPatch {
    size_t copy = 0;
    int head = -1;
    Tensor value;  // (N, T, ...) whole; (N, T, 1, d_h) one head
};
Tensor patch_copies(const Tensor& value, size_t N, std::vector<CopyPatch> patches) {
    std::sort(patches.begin(), patches.end(), [](const CopyPatch& a, const CopyPatch& b) { return a.copy < b.copy; });
    const size_t copies = value.size(0) / N;
    std::vector<Tensor> parts;
    size_t next = 0;  // first copy not yet in parts
    for (const CopyPatch& p : patches) {
        if (p.copy > next) parts.push_back(slice(value, 0, next * N, p.copy * N));  // unpatched copies, one slice
        if (p.head < 0) {
            parts.push_back(p.value);
        } else {
            const Tensor rows = slice(value, 0, p.copy * N, (p.copy + 1) * N);
            const size_t h = static_cast<size_t>(p.head), H = rows.size(2);
            std::vector<Tensor> heads;
            if (h > 0) heads.push_back(slice(rows, 2, 0, h));
            heads.push_back(p.value);
            if (h + 1 < H) heads.push_back(slice(rows, 2, h + 1, H));
            parts.push_back(heads.size() == 1 ? heads.front() : concat(heads, 2));
        }
        next = p.copy + 1;
    }
    if (next < copies) parts.push_back(slice(value, 0, next * N, copies * N));
    return parts.size() == 1 ? parts.front() : concat(parts, 0);
}

// The N prompts repeated `copies` times.
std::vector<std::vector<int32_t>> repeated(const std::vector<std::vector<int32_t>>& rows, size_t copies) {
    std::vector<std::vector<int32_t>> out;
    out.reserve(rows.size() * copies);
    for (size_t c = 0; c < copies; ++c) out.insert(out.end(), rows.begin(), rows.end());
    return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// `t` (N, ...) repeated `copies` times along the batch.
Tensor tiled(const Tensor& t, size_t copies) { return copies == 1 ? t : concat(std::vector<Tensor>(copies, t), 0); }

// One head's slice (axis 2) of a (N, T, H, d_h) activation, or the whole of another.
Tensor of_receiver(const Tensor& activation, const Node& r) {
    return r.per_head() ? slice(activation, 2, r.head, r.head + 1) : activation;
}

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
        result.clean = patch_metric(run_prompts(model_, pairs_.clean, nullptr), pairs_, o_.metric);
        result.corrupt = patch_metric(run_prompts(model_, pairs_.corrupt, nullptr), pairs_, o_.metric);
        check_normalisable(result.clean, result.corrupt, o_.metric, "circuit");
        // metric units per unit of the patching metric: norm_logit_diff divides by clean - corrupted
        scale_ = o_.metric == PatchMetric::norm_logit_diff ? 1.0 / (result.clean - result.corrupt) : 1.0;
        base_metric_ = o_.noising ? result.clean : result.corrupt;
        record_unpatched();
        sender_changes();
        for (const Graph::Edge& e : g_.edges) result.edges.push_back({g_.senders[e.sender].name(), g_.receivers[e.receiver].name()});
        scores_.assign(g_.edges.size(), 0.0);
        if (o_.method == CircuitMethod::exact || o_.method == CircuitMethod::atp) {
            if (o_.method == CircuitMethod::atp) gradients();
            for (size_t l = 0; l < g_.layers; ++l) patched_inputs(l);
            logit_edges();
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
    void record_unpatched() {
        Hooks base, source;
        for (Hooks* h : {&base, &source}) h->record("embed").record("blocks.*.attn.z").record("blocks.*.attn.out");
        if (g_.ffn) base.record("blocks.*.ffn.out"), source.record("blocks.*.ffn.out");
        base.record("blocks.*.attn.q").record("blocks.*.attn.k").record("blocks.*.attn.v").record("blocks.*.resid_pre");
        base.record(block(g_.layers - 1) + "resid_post");
        run_prompts(model_, base_, &base);
        run_prompts(model_, source_, &source);
        copies_ += 2;
        base_embed_ = base.last("embed");
        source_embed_ = source.last("embed");
        for (const Node& r : g_.receivers) base_activation_[r.name()] = of_receiver(base.last(r.activation(g_.layers)), r);
        base_records_ = std::move(base);
        source_records_ = std::move(source);
    }

    // Each sender's change (source - base) in the residual stream, (N, T, D):
    // a head's is its slice of the output projection, found by running the
    // base prompts with that head's z from the source prompts and reading the
    // attention output (many heads side by side, one copy each).
    void sender_changes() {
        std::vector<size_t> heads;
        for (size_t s = 0; s < g_.senders.size(); ++s) {
            const Node& n = g_.senders[s];
            if (n.kind == Node::Kind::embed) delta_[s] = source_embed_ - base_embed_;
            if (n.kind == Node::Kind::mlp) {
                const std::string point = block(n.layer) + "ffn.out";
                delta_[s] = source_records_.last(point) - base_records_.last(point);
            }
            if (n.kind == Node::Kind::head) heads.push_back(s);
        }
        for (size_t first = 0; first < heads.size(); first += copies_per_run_) {
            const size_t copies = std::min(copies_per_run_, heads.size() - first);
            std::map<std::string, std::vector<CopyPatch>> patches;
            for (size_t c = 0; c < copies; ++c) {
                const Node& n = g_.senders[heads[first + c]];
                const std::string z = block(n.layer) + "attn.z";
                patches[z].push_back({c, static_cast<int>(n.head), slice(source_records_.last(z), 2, n.head, n.head + 1)});
            }
            Hooks hooks;
            for (auto& [point, list] : patches) {
                hooks.replace(point, [&, list](const std::string&, const Tensor& value) { return patch_copies(value, N_, list); });
                hooks.record(point.substr(0, point.size() - 1) + "out");  // blocks.l.attn.out
            }
            run_copies_from(g_.senders[heads[first]].layer, copies, Tensor(), &hooks);
            for (size_t c = 0; c < copies; ++c) {
                const Node& n = g_.senders[heads[first + c]];
                const std::string out = block(n.layer) + "attn.out";
                delta_[heads[first + c]] = slice(hooks.last(out), 0, c * N_, (c + 1) * N_) - base_records_.last(out);
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
    Tensor run_copies_from(size_t layer, size_t copies, const Tensor& added, Hooks* hooks) {
        const std::string entering = layer < g_.layers ? block(layer) + "resid_pre" : block(g_.layers - 1) + "resid_post";
        Tensor resid = tiled(base_records_.last(entering), copies);
        if (added.defined()) resid = resid + added;
        copies_ += copies;
        return run_prompts_from(model_, repeated(base_, copies), layer, resid, hooks);
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
            Tensor logits;
            if (receiver.kind == Node::Kind::mlp) {
                hooks.replace(receiver.input(g_.layers), [&](const std::string&, const Tensor& value) { return value + added; });
                logits = run_copies_from(receiver.layer, copies, Tensor(), &hooks);
            } else {
                logits = run_copies_from(receiver.kind == Node::Kind::logits ? g_.layers : receiver.layer, copies, added, &hooks);
            }
            for (size_t c = 0; c < copies; ++c) read(senders[first + c], hooks, c, slice(logits, 0, c * N_, (c + 1) * N_));
        }
    }

    // Layer l's receivers: their activations with each edge's change (exact:
    // then one patched run per edge; atp: times the metric's gradient there).
    void patched_inputs(size_t l) {
        // edges into layer l, by input point
        std::map<std::string, std::vector<size_t>> by_input;  // (the receivers of one input share it: any one stands for them)
        for (size_t e = 0; e < g_.edges.size(); ++e) {
            const Node& r = g_.receivers[g_.edges[e].receiver];
            if (r.kind != Node::Kind::logits && r.layer == l) by_input[r.input(g_.layers)].push_back(e);
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
        // exact: the base prompts with one receiver activation replaced per copy
        std::vector<size_t> edges;
        for (const auto& [e, act] : patched) edges.push_back(e);
        for (size_t first = 0; first < edges.size(); first += copies_per_run_) {
            const size_t copies = std::min(copies_per_run_, edges.size() - first);
            std::map<std::string, std::vector<CopyPatch>> patches;
            for (size_t c = 0; c < copies; ++c) {
                const size_t e = edges[first + c];
                const Node& r = g_.receivers[g_.edges[e].receiver];
                patches[r.activation(g_.layers)].push_back({c, r.per_head() ? static_cast<int>(r.head) : -1, patched.at(e)});
            }
            Hooks hooks;
            for (auto& [point, list] : patches)
                hooks.replace(point, [&, list](const std::string&, const Tensor& value) { return patch_copies(value, N_, list); });
            const Tensor logits = run_copies_from(l, copies, Tensor(), &hooks);
            for (size_t c = 0; c < copies; ++c)
                scores_[edges[first + c]] = effect(slice(logits, 0, c * N_, (c + 1) * N_));
        }
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
        with_changes_at(g_.receivers.back(), senders, {}, [&](size_t sender, const Hooks&, size_t, const Tensor& logits) {
            for (size_t i = 0; i < edges.size(); ++i)
                if (senders[i] == sender) scores_[edges[i]] = effect(logits);
        });
    }

    double effect(const Tensor& logits) const { return (patch_metric(logits, pairs_, o_.metric) - base_metric_) * scale_; }

    // The metric's gradient at every receiver's activation (grad_values_), on the
    // base prompts, or with the input embeddings replaced by embed_ when defined.
    void gradients() {
        Hooks hooks;
        std::map<std::string, Tensor> zeros;
        if (embed_.defined()) hooks.replace("embed", [&](const std::string&, const Tensor&) { return embed_; });
        for (const Node& r : g_.receivers) {
            const std::string point = r.activation(g_.layers);
            if (zeros.count(point)) continue;
            zeros[point] = Tensor();
            hooks.replace(point, [&zeros](const std::string& name, const Tensor& value) {
                Tensor zero = Tensor::zeros(value.shape(), value.dtype(), true);
                zeros[name] = zero;
                return value + zero;
            });
        }
        const Tensor logits = run_prompts(model_, base_, &hooks, true);
        copies_ += 1;
        const Tensor seed = patch_metric_gradient(logits, pairs_, o_.metric) * Tensor::scalar(scale_, logits.dtype());
        logits.backward(seed);
        grad_.clear();
        for (const Node& r : g_.receivers) {
            grad_[r.name()] = of_receiver(zeros.at(r.activation(g_.layers)).grad(), r);
            grad_values_[r.name()] = grad_[r.name()].values();
        }
        zero_parameter_grads();
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
                if (!g_.ffn && point == std::string("resid_mid")) continue;
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
            Tensor& leaf = leaves.at(r.input(g_.layers));
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
    fail("circuit", "--method must be exact, atp, eap or eap-ig, got '" + name + "'");
}

std::string to_string(CircuitMethod method) {
    switch (method) {
        case CircuitMethod::exact: return "exact";
        case CircuitMethod::atp: return "atp";
        case CircuitMethod::eap: return "eap";
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

void write_circuit_file(const std::string& path, const std::string& checkpoint, int64_t step, const PromptPairs& pairs,
                        const CircuitOptions& o, const CircuitResult& r, const std::vector<double>& exact, const Agreement& a) {
    write_atomically(std::filesystem::path(path), "[circuit]", [&](const std::string& tmp) {
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
        f.close();
    });
}

}  // namespace attnlab
