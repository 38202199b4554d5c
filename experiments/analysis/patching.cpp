#include "experiments/analysis/patching.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "autograd/ops.h"
#include "data/h5file.h"
#include "experiments/analysis/log_prob.h"
#include "experiments/files/provenance.h"
#include "experiments/files/output_file.h"
#include "experiments/analysis/tolerance.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

const DecoderLM& decoder_of(const TaskModel& model, const char* what) {
    if (model.encoder_decoder() || model.decoder_lm() == nullptr)
        fail(what, "patching takes decoder models; this checkpoint is an encoder-decoder");
    return *model.decoder_lm();
}

std::string block(size_t layer) { return "blocks." + std::to_string(layer) + "."; }

// Where row r of one side of the pairs is: "--clean" on the command line, or
// "pairs.h5: /clean row 3" in a pairs file.
std::string where(const PromptPairs& p, const std::string& side, size_t r) {
    if (p.source.empty()) return "--" + side;
    return p.source + ": /" + side + " row " + std::to_string(r);
}

// `base` with the cells whose coordinate along each given axis (-1: any) is the
// given index taken from `source` (same shape).
Tensor mixed(const Tensor& base, const Tensor& source, int axis_a, size_t index_a, int axis_b = -1, size_t index_b = 0) {
    const Shape& s = base.shape();
    std::vector<size_t> stride(s.size(), 1);
    for (size_t a = s.size() - 1; a-- > 0;) stride[a] = stride[a + 1] * s[a + 1];
    std::vector<double> out = base.values();
    const std::vector<double> from = source.values();
    for (size_t i = 0; i < out.size(); ++i) {
        const bool a_ok = axis_a < 0 || (i / stride[axis_a]) % s[axis_a] == index_a;
        const bool b_ok = axis_b < 0 || (i / stride[axis_b]) % s[axis_b] == index_b;
        if (a_ok && b_ok) out[i] = from[i];
    }
    return Tensor::from_values(out, s, base.dtype());
}

template <class T>
void write_table(const h5::File& f, const std::string& name, const std::vector<std::vector<T>>& rows) {
    std::vector<int64_t> flat;
    for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
    f.write<int64_t>(name, Shape{rows.size(), rows.front().size()}, flat.data());
}

}  // namespace

Batch prompt_batch(const std::vector<std::vector<int32_t>>& rows) {
    Batch b;
    const size_t N = rows.size(), T = rows.front().size();
    std::vector<int32_t> flat;
    for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
    b.inputs = Indices({N, T}, flat);
    b.lengths.assign(N, T);
    return b;
}

Tensor run_prompts(const TaskModel& model, const std::vector<std::vector<int32_t>>& rows, Hooks* hooks, bool with_graph) {
    std::optional<NoGradGuard> no_grad;
    if (!with_graph) no_grad.emplace();
    model.module().eval();
    const Batch batch = prompt_batch(rows);
    return hooks ? model.forward(batch, *hooks) : model.forward(batch);
}

Tensor run_prompts_from(const TaskModel& model, const std::vector<std::vector<int32_t>>& rows, size_t first, const Tensor& resid,
                        Hooks* hooks) {
    NoGradGuard no_grad;
    model.module().eval();
    return model.forward_from(prompt_batch(rows), first, resid, hooks);
}

Tensor run_prompts_blocks(const TaskModel& model, const std::vector<std::vector<int32_t>>& rows, size_t first, size_t last,
                          const Tensor& resid, Hooks* hooks) {
    NoGradGuard no_grad;
    model.module().eval();
    return model.forward_blocks(prompt_batch(rows), first, last, resid, hooks);
}

void write_prompt_pairs(const h5::File& f, const PromptPairs& p) {
    write_table(f, "clean", p.clean);
    write_table(f, "corrupt", p.corrupt);
    write_table(f, "positions", p.positions);
    write_table(f, "clean_answers", p.clean_answers);
    write_table(f, "corrupt_answers", p.corrupt_answers);
}

std::string write_patch_file(const OutputFile& out, const std::string& checkpoint, int64_t step, const PromptPairs& p,
                      const PatchOptions& o, const PatchResult& r) {
    return write_output(out, "[patch]", [&](const std::string& tmp) {
        h5::File f = h5::File::create(tmp, "patch");
        write_output_attrs(f, "attnlab-patch", checkpoint, step);
        f.write_attr_string("metric", to_string(o.metric));
        f.write_attr_string("direction", o.noising ? "noising" : "denoising");
        f.write_attr_double("clean_metric", r.clean);
        f.write_attr_double("corrupt_metric", r.corrupt);
        write_prompt_pairs(f, p);
        const h5::Group g = f.create_group("grid");
        for (const PatchGrid& grid : r.grids) {
            std::string axes;
            for (const std::string& a : grid.axes) axes += (axes.empty() ? "" : ",") + a;
            const h5::Group one = g.create_group(grid.hook);
            one.write_attr_string("axes", axes);
            one.write<double>("values", grid.shape, grid.values.data());
        }
        f.close();
    });
}

PatchMetric parse_patch_metric(const std::string& name) {
    if (name == "norm_logit_diff") return PatchMetric::norm_logit_diff;
    if (name == "logit_diff") return PatchMetric::logit_diff;
    if (name == "prob") return PatchMetric::prob;
    if (name == "loss") return PatchMetric::loss;
    fail("patch", "--metric must be norm_logit_diff, logit_diff, prob or loss, got '" + name + "'");
}

std::string to_string(PatchMetric metric) {
    switch (metric) {
        case PatchMetric::norm_logit_diff: return "norm_logit_diff";
        case PatchMetric::logit_diff: return "logit_diff";
        case PatchMetric::prob: return "prob";
        default: return "loss";
    }
}

void check_pairs(const TaskModel& model, const PromptPairs& p) {
    const DecoderLM& lm = decoder_of(model, "patch");
    const size_t vocab = lm.config.vocab;
    if (p.clean.empty() || p.clean.size() != p.corrupt.size()) fail("patch", "give as many clean as corrupted prompts, at least one");
    const size_t T = p.clean.front().size();
    for (size_t r = 0; r < p.clean.size(); ++r) {
        const std::string row = (p.source.empty() ? std::string() : p.source + ": ") +
                                (p.clean.size() > 1 || !p.source.empty() ? "pair " + std::to_string(r) + ": " : "");
        if (p.clean[r].size() != T || p.corrupt[r].size() != T)
            fail("patch", row + "the clean prompt has " + std::to_string(p.clean[r].size()) + " tokens and the corrupted " +
                              std::to_string(p.corrupt[r].size()) + " (pairs must all have " + std::to_string(T) +
                              "): patching needs prompts of one length");
        for (const char* side : {"clean", "corrupt"}) {
            const std::vector<int32_t>& prompt = side == std::string("clean") ? p.clean[r] : p.corrupt[r];
            for (size_t t = 0; t < prompt.size(); ++t)
                if (prompt[t] < 0 || static_cast<size_t>(prompt[t]) >= vocab)
                    fail("patch", where(p, side, r) + ", position " + std::to_string(t) + ": token " + std::to_string(prompt[t]) +
                                      " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
        }
    }
    if (T > lm.config.max_len)
        fail("patch", "prompts of " + std::to_string(T) + " tokens exceed the model's " + std::to_string(lm.config.max_len) + " positions");
}

void resolve_answers(const TaskModel& model, PromptPairs& p, PatchMetric metric) {
    check_pairs(model, p);
    const size_t vocab = model.decoder_lm()->config.vocab, T = p.clean.front().size();
    p.positions.resize(p.clean.size());
    p.clean_answers.resize(p.clean.size());
    p.corrupt_answers.resize(p.clean.size());
    const bool fill = p.clean_answers.front().empty();
    const std::vector<double> clean = fill ? run_prompts(model, p.clean, nullptr).values() : std::vector<double>();
    const std::vector<double> corrupt = fill ? run_prompts(model, p.corrupt, nullptr).values() : std::vector<double>();
    auto argmax = [&](const std::vector<double>& logits, size_t r, size_t t) {
        const double* row = logits.data() + (r * T + t) * vocab;
        return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    };
    for (size_t r = 0; r < p.clean.size(); ++r) {
        const std::string row = (p.source.empty() ? std::string() : p.source + ": ") +
                                (p.clean.size() > 1 || !p.source.empty() ? "pair " + std::to_string(r) + ": " : "");
        if (p.positions[r].empty()) p.positions[r] = {T - 1};
        for (size_t t : p.positions[r])
            if (t >= T) fail("patch", row + "answer position " + std::to_string(t) + " is outside the prompt of " + std::to_string(T) + " tokens");
        if (fill) {
            p.clean_answers[r].clear();
            p.corrupt_answers[r].clear();
            for (size_t t : p.positions[r]) {
                p.clean_answers[r].push_back(argmax(clean, r, t));
                p.corrupt_answers[r].push_back(argmax(corrupt, r, t));
            }
        }
        if (p.clean_answers[r].size() != p.positions[r].size() || p.corrupt_answers[r].size() != p.positions[r].size())
            fail("patch", row + "give one clean and one corrupted answer per answer position");
        for (size_t i = 0; i < p.positions[r].size(); ++i) {
            for (const char* side : {"clean_answers", "corrupt_answers"}) {
                const int32_t id = side == std::string("clean_answers") ? p.clean_answers[r][i] : p.corrupt_answers[r][i];
                if (id < 0 || static_cast<size_t>(id) >= vocab)
                    fail("patch", (p.source.empty() ? std::string("--answers") : where(p, side, r)) + ", answer " + std::to_string(i) +
                                      ": token " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
            }
            const bool two_answers = metric == PatchMetric::norm_logit_diff || metric == PatchMetric::logit_diff;
            if (two_answers && p.clean_answers[r][i] == p.corrupt_answers[r][i])
                fail("patch", row + "the clean and corrupted answers at position " + std::to_string(p.positions[r][i]) + " are both token " +
                                  std::to_string(p.clean_answers[r][i]) +
                                  ": the logit difference needs two answers (give them with --answers CLEAN:CORRUPT)");
        }
    }
}

double patch_metric(const Tensor& logits, const PromptPairs& p, PatchMetric metric) {
    const size_t T = logits.size(1), V = logits.size(2);
    const std::vector<double> l = logits.values();
    double total = 0;
    size_t count = 0;
    for (size_t r = 0; r < p.positions.size(); ++r)
        for (size_t i = 0; i < p.positions[r].size(); ++i) {
            const double* row = l.data() + (r * T + p.positions[r][i]) * V;
            const double good = row[p.clean_answers[r][i]], bad = row[p.corrupt_answers[r][i]];
            const double log_prob = log_prob_at(row, V, p.clean_answers[r][i]);
            total += metric == PatchMetric::prob ? std::exp(log_prob) : metric == PatchMetric::loss ? -log_prob : good - bad;
            ++count;
        }
    return total / static_cast<double>(std::max<size_t>(count, 1));
}

Tensor patch_metric_gradient(const Tensor& logits, const PromptPairs& p, PatchMetric metric) {
    const size_t T = logits.size(1), V = logits.size(2);
    const std::vector<double> l = logits.values();
    std::vector<double> seed(l.size(), 0.0);
    size_t count = 0;
    for (const auto& positions : p.positions) count += positions.size();
    const double w = 1.0 / static_cast<double>(std::max<size_t>(count, 1));
    for (size_t r = 0; r < p.positions.size(); ++r)
        for (size_t i = 0; i < p.positions[r].size(); ++i) {
            const size_t at = (r * T + p.positions[r][i]) * V;
            const int32_t good = p.clean_answers[r][i], bad = p.corrupt_answers[r][i];
            if (metric == PatchMetric::logit_diff || metric == PatchMetric::norm_logit_diff) {
                seed[at + good] += w, seed[at + bad] -= w;
                continue;
            }
            // d log p_good / d logit_v = [v = good] - p_v
            const double log_good = log_prob_at(l.data() + at, V, good);
            const double top = log_good - l[at + good];  // -logsumexp(row)
            const double dlog = metric == PatchMetric::prob ? std::exp(log_good) : -1.0;  // d metric / d log p_good
            for (size_t v = 0; v < V; ++v) seed[at + v] -= w * dlog * std::exp(l[at + v] + top);
            seed[at + good] += w * dlog;
        }
    return Tensor::from_values(seed, logits.shape(), logits.dtype());
}

double normalised(double value, double clean, double corrupt, PatchMetric metric) {
    if (metric != PatchMetric::norm_logit_diff) return value;
    return (value - corrupt) / (clean - corrupt);
}

void check_normalisable(double clean, double corrupt, PatchMetric metric, const char* what) {
    if (metric != PatchMetric::norm_logit_diff) return;
    // below float32's noise the ratio is noise (and 0/0 at equal prompts)
    if (!(std::abs(clean - corrupt) > f32_tolerance(std::max(std::abs(clean), std::abs(corrupt)))))
        fail(what, "the clean and corrupted runs have the same logit difference (" + std::to_string(clean) + " and " +
                       std::to_string(corrupt) + "): norm_logit_diff divides by their difference; give prompts "
                       "that change the answer, or --metric logit_diff");
}

std::string baseline_name(PatchMetric metric) {
    return metric == PatchMetric::norm_logit_diff ? "logit_diff" : to_string(metric);
}

PatchHook parse_patch_hook(const TaskModel& model, const std::string& name) {
    decoder_of(model, "patch");
    std::vector<Module::HookPoint> points;  // block 0's, block-relative
    for (Module::HookPoint& p : model.module().described_hook_points())
        if (p.name.rfind("blocks.0.", 0) == 0) points.push_back({p.name.substr(9), std::move(p.axes)});
    auto find = [&](const std::string& point) {
        return std::find_if(points.begin(), points.end(), [&](const Module::HookPoint& p) { return p.name == point; });
    };
    auto found = find(name);
    if (found == points.end()) found = find("attn." + name);  // the attention's points by their own names: z, pattern
    if (found == points.end()) {
        std::string list;
        for (const Module::HookPoint& p : points) list += (list.empty() ? "" : ", ") + p.name;
        fail("patch", "unknown hook '" + name + "' (a block's points, the attention's also without \"attn.\": " + list + ")");
    }
    auto axis = [&](std::initializer_list<const char*> names) {
        for (size_t a = 0; a < found->axes.size(); ++a)
            for (const char* n : names)
                if (found->axes[a] == n) return static_cast<int>(a);
        return -1;
    };
    PatchHook h;
    h.name = name;
    h.point = found->name;
    h.head_axis = axis({"head", "kv_head"});
    h.per_head = h.head_axis >= 0;
    h.position_axis = axis({"query_pos", "pos", "key_pos"});  // scores and pattern: the query's row
    return h;
}

TableSize patching_size(const TaskModel& model, size_t N, size_t T, const std::vector<PatchHook>& hooks) {
    const size_t attention_hooks = static_cast<size_t>(std::count_if(hooks.begin(), hooks.end(), [](const PatchHook& h) {
        return h.point == "attn.scores" || h.point == "attn.pattern";
    }));
    TableSize size = forward_tables(model, {.rows = N, .positions = T, .tables = attention_hooks * model.layers()});
    const double n = static_cast<double>(N), t = static_cast<double>(T);
    size.bytes += 8 * n * t * static_cast<double>(decoder_of(model, "patch").config.vocab);  // the second run's float64 logits
    if (attention_hooks > 0) size.bytes += 3 * 8 * n * static_cast<double>(model.heads()) * t * t;  // mixed(): base, source, result
    return size;
}

PatchResult activation_patching(const TaskModel& model, const PromptPairs& pairs, const PatchOptions& options) {
    decoder_of(model, "patch");
    const size_t L = model.layers(), T = pairs.clean.front().size();
    const auto& source = options.noising ? pairs.corrupt : pairs.clean;
    const auto& base = options.noising ? pairs.clean : pairs.corrupt;
    PatchResult result;
    result.clean = patch_metric(run_prompts(model, pairs.clean, nullptr), pairs, options.metric);
    result.corrupt = patch_metric(run_prompts(model, pairs.corrupt, nullptr), pairs, options.metric);
    check_normalisable(result.clean, result.corrupt, options.metric, "patch");
    auto score = [&](const Tensor& logits) {
        return normalised(patch_metric(logits, pairs, options.metric), result.clean, result.corrupt, options.metric);
    };
    Hooks recorded;  // every patched point on the source prompt
    for (const PatchHook& h : options.hooks) recorded.record("blocks.*." + h.point);
    run_prompts(model, source, &recorded);
    for (const PatchHook& h : options.hooks) {
        const size_t heads = h.per_head ? recorded.last(block(0) + h.point).size(static_cast<size_t>(h.head_axis)) : 1;
        const size_t positions = options.per_position ? T : 1;
        PatchGrid grid;
        grid.hook = h.name;
        grid.axes = {"layer"};
        grid.shape = {L};
        if (h.per_head) grid.axes.push_back("head"), grid.shape.push_back(heads);
        if (options.per_position) grid.axes.push_back("position"), grid.shape.push_back(T);
        for (size_t l = 0; l < L; ++l)
            for (size_t head = 0; head < heads; ++head)
                for (size_t t = 0; t < positions; ++t) {
                    const std::string point = block(l) + h.point;
                    const Tensor& clean_value = recorded.last(point);
                    Hooks patch;
                    patch.replace(point, [&](const std::string&, const Tensor& value) {
                        return mixed(value, clean_value, h.per_head ? h.head_axis : -1, head,
                                     options.per_position ? h.position_axis : -1, t);
                    });
                    grid.values.push_back(score(run_prompts(model, base, &patch)));
                }
        result.grids.push_back(std::move(grid));
    }
    return result;
}

namespace {

// One sender: a head ("L.H"), a feed-forward output ("mlp.L"), the embeddings, or all.
struct Sender {
    enum class Kind { head, mlp, embed, all } kind = Kind::head;
    size_t layer = 0, head = 0;
};

Sender parse_sender(const std::string& text, const PathPatch& edge, size_t heads, bool has_ffn) {
    Sender s;
    auto number = [&](const std::string& part) {
        if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 9)
            fail("path-patch", "--sender '" + text + "': expected L.H, mlp.L, embed or all");
        return static_cast<size_t>(std::stoul(part));
    };
    if (text == "all") s.kind = Sender::Kind::all;
    else if (text == "embed") s.kind = Sender::Kind::embed;
    else if (text.rfind("mlp.", 0) == 0) {
        s.kind = Sender::Kind::mlp;
        s.layer = number(text.substr(4));
        if (!has_ffn) fail("path-patch", "--sender '" + text + "': this model has no feed-forward sublayers (ffn = 0)");
    } else {
        const size_t dot = text.find('.');
        if (dot == std::string::npos) number("");
        s.layer = number(text.substr(0, dot));
        s.head = number(text.substr(dot + 1));
        if (s.head >= heads) fail("path-patch", "--sender '" + text + "': the model has " + std::to_string(heads) + " heads");
    }
    if ((s.kind == Sender::Kind::head || s.kind == Sender::Kind::mlp) && s.layer >= edge.receiver_layer)
        fail("path-patch", "--sender '" + text + "' is not upstream of the receiver in layer " + std::to_string(edge.receiver_layer) +
                               " (a sender's layer must come before it)");
    return s;
}

}  // namespace

PathPatchResult path_patching(const TaskModel& model, const PromptPairs& pairs, const PathPatch& edge, PatchMetric metric) {
    decoder_of(model, "path-patch");
    const size_t L = model.layers(), H = model.heads();
    const bool has_ffn = has_hook_point(model, "blocks.0.ffn.out");
    if (edge.receiver_layer >= L)
        fail("path-patch", "--receiver layer " + std::to_string(edge.receiver_layer) + ": the model has " + std::to_string(L) + " layers");
    if (edge.receiver_input != "q" && edge.receiver_input != "k" && edge.receiver_input != "v")
        fail("path-patch", "--receiver input must be q, k or v, got '" + edge.receiver_input + "'");
    std::vector<Sender> senders;
    for (const std::string& s : edge.senders) senders.push_back(parse_sender(s, edge, H, has_ffn));
    if (senders.empty()) fail("path-patch", "--sender: name at least one sender");
    auto sends = [&](Sender::Kind kind, size_t layer, size_t head) {
        for (const Sender& s : senders)
            if (s.kind == Sender::Kind::all || (s.kind == kind && (kind == Sender::Kind::embed || (s.layer == layer && (kind == Sender::Kind::mlp || s.head == head)))))
                return true;
        return false;
    };

    PathPatchResult result;
    result.clean = patch_metric(run_prompts(model, pairs.clean, nullptr), pairs, metric);
    result.corrupt = patch_metric(run_prompts(model, pairs.corrupt, nullptr), pairs, metric);
    check_normalisable(result.clean, result.corrupt, metric, "path-patch");
    Hooks clean, corrupt;  // every component's output on both prompts
    for (Hooks* h : {&clean, &corrupt}) {
        h->record("embed").record("blocks.*.attn.z");
        if (has_ffn) h->record("blocks.*.ffn.out");
    }
    run_prompts(model, pairs.clean, &clean);
    run_prompts(model, pairs.corrupt, &corrupt);

    // 1. The corrupted prompt with the senders clean and every other component
    //    upstream of the receiver frozen at its corrupted value: the receiver's input.
    const std::string receiver = block(edge.receiver_layer) + "attn." + edge.receiver_input;
    Hooks frozen;
    frozen.record(receiver);
    if (sends(Sender::Kind::embed, 0, 0)) frozen.replace("embed", [&](const std::string&, const Tensor&) { return clean.last("embed"); });
    for (size_t l = 0; l < edge.receiver_layer; ++l) {
        frozen.replace(block(l) + "attn.z", [&, l](const std::string& name, const Tensor&) {
            Tensor z = corrupt.last(name);
            for (size_t h = 0; h < H; ++h)
                if (sends(Sender::Kind::head, l, h)) z = mixed(z, clean.last(name), 2, h);
            return z;
        });
        if (has_ffn)
            frozen.replace(block(l) + "ffn.out", [&, l](const std::string& name, const Tensor&) {
                return sends(Sender::Kind::mlp, l, 0) ? clean.last(name) : corrupt.last(name);
            });
    }
    run_prompts(model, pairs.corrupt, &frozen);
    const Tensor& received = frozen.last(receiver);  // (B, T, H or H_kv, d_h)
    if (edge.receiver_head >= received.size(2))
        fail("path-patch", "--receiver head " + std::to_string(edge.receiver_head) + ": its " + edge.receiver_input + " has " +
                               std::to_string(received.size(2)) + " heads");

    // 2. The corrupted prompt with only the receiver head's input replaced by it.
    Hooks patch;
    patch.replace(receiver, [&](const std::string&, const Tensor& value) { return mixed(value, received, 2, edge.receiver_head); });
    result.patched = normalised(patch_metric(run_prompts(model, pairs.corrupt, &patch), pairs, metric), result.clean, result.corrupt, metric);
    return result;
}

}  // namespace attnlab
