#include "experiments/files/provenance.h"
#include "experiments/analysis/ablate.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "experiments/analysis/audit.h"
#include "data/h5file.h"
#include "experiments/run/model_factory.h"
#include "experiments/files/parse_number.h"
#include "experiments/files/output_file.h"

namespace attnlab {

namespace {

using HeadMeans = std::vector<std::vector<std::vector<std::vector<double>>>>;  // [kind][layer][head][d_h]

size_t kind_index(const std::vector<std::string>& kinds, const std::string& kind) {
    return static_cast<size_t>(std::find(kinds.begin(), kinds.end(), kind) - kinds.begin());
}

// Evaluates with every head in `heads` zeroed (or replaced by its mean), the rest
// kept: a replacement at each affected module's hook point z (B, Tq, H, d_h).
Score evaluate_ablated(const TaskModel& model, const std::vector<Batch>& data, const std::vector<HeadRef>& heads,
                       bool mean, const std::vector<std::string>& kinds, const HeadMeans& means) {
    Hooks hooks;
    for (const AttentionSite& site : attention_sites(model)) {
        std::vector<double> keep(site.heads, 1.0), replacement;  // keep (H), replacement (H d_h)
        bool any = false;
        for (const HeadRef& r : heads) {
            if (r.kind != site.kind || r.layer != site.layer) continue;
            any = true;
            keep[r.head] = 0.0;
        }
        if (!any) continue;
        for (size_t h = 0; h < site.heads; ++h) {
            const std::vector<double>& m = means[kind_index(kinds, site.kind)][site.layer][h];
            for (double x : m) replacement.push_back(mean && keep[h] == 0.0 ? x : 0.0);
        }
        hooks.replace(site.name + ".z", [keep, replacement](const std::string&, const Tensor& z) {
            const size_t H = z.size(2), d = z.size(3);
            return z * Tensor::from_values(keep, {1, 1, H, 1}, z.dtype()) +
                   Tensor::from_values(replacement, {1, 1, H, d}, z.dtype());
        });
    }
    return evaluate(model, data, &hooks);
}

// An HDF5 file written through a temporary, fsynced and renamed (output_file.h).
template <class Body>
std::string write_h5_atomically(const OutputFile& out, const std::string& tag, Body body) {
    return write_output(out, "[" + tag + "]", [&](const std::string& tmp) {
        h5::File file = h5::File::create(tmp, tag);
        body(file);
        file.close();
    });
}

void write_source_attrs(const h5::File& file, const std::string& format, const AblationSource& source) {
    write_output_attrs(file, format, source.checkpoint, source.step);
    file.write_attr_string("config", source.config_toml);
}

}  // namespace

HeadMeans mean_head_outputs(const TaskModel& model, const std::vector<Batch>& data) {
    NoGradGuard no_grad;
    Module& module = model.module();
    const bool was_training = module.is_training();
    module.eval();
    const std::vector<std::string> kinds = model.kinds();
    const std::vector<AttentionSite> sites = attention_sites(model);
    const size_t layers = model.layers();
    HeadMeans sums(kinds.size(), std::vector<std::vector<std::vector<double>>>(layers));
    std::vector<size_t> counts(kinds.size(), 0);  // valid query positions per kind (the same for every layer and head)
    for (const AttentionSite& s : sites)
        sums[kind_index(kinds, s.kind)][s.layer].assign(s.heads, std::vector<double>(s.head_width, 0.0));
    for (const Batch& batch : data) {
        Hooks hooks;
        hooks.record("*attn.z");
        model.forward(batch, hooks);
        for (const AttentionKind& kind : model.kinds_for(batch)) {
            const size_t k = kind_index(kinds, kind.name);
            const std::vector<Tensor> outputs = recorded_per_layer(hooks, kind, "z");
            for (size_t l = 0; l < outputs.size(); ++l) {
                const Tensor& z = outputs[l];  // (B, Tq, H, d_h)
                const size_t B = z.size(0), Tq = z.size(1), H = z.size(2), d = z.size(3);
                const std::vector<double> c = z.values();
                for (size_t b = 0; b < B; ++b) {
                    const size_t valid = kind.query_lengths.empty() ? Tq : std::min(kind.query_lengths[b], Tq);
                    if (l == 0) counts[k] += valid;
                    for (size_t h = 0; h < H; ++h)
                        for (size_t i = 0; i < valid; ++i)
                            for (size_t e = 0; e < d; ++e) sums[k][l][h][e] += c[((b * Tq + i) * H + h) * d + e];
                }
            }
        }
    }
    module.train(was_training);
    for (size_t k = 0; k < kinds.size(); ++k)
        for (auto& layer : sums[k])
            for (auto& head : layer)
                for (double& x : head) x /= static_cast<double>(std::max<size_t>(counts[k], 1));
    return sums;
}

HeadRef parse_head_ref(const std::string& spec, const TaskModel& model) {
    const size_t colon = spec.rfind(':');
    HeadRef r;
    r.kind = colon == std::string::npos ? (model.encoder_decoder() ? "dec_self" : "self") : spec.substr(0, colon);
    const std::string lh = colon == std::string::npos ? spec : spec.substr(colon + 1);
    const size_t dot = lh.find('.');
    auto number = [&](const std::string& text, size_t& out) {
        const std::optional<size_t> value = parse_whole<size_t>(text);  // digits only; too large is refused, not thrown
        if (!value || text.find_first_not_of("0123456789") != std::string::npos) return false;
        out = *value;
        return true;
    };
    const std::vector<std::string> kinds = model.kinds();
    if (dot == std::string::npos || !number(lh.substr(0, dot), r.layer) || !number(lh.substr(dot + 1), r.head))
        fail("ablate", "head \"" + spec + "\": expected [KIND:]LAYER.HEAD, e.g. 1.0 or cross:0.1");
    if (std::find(kinds.begin(), kinds.end(), r.kind) == kinds.end())
        fail("ablate", "head \"" + spec + "\": this model has no attention kind \"" + r.kind + "\"");
    if (r.layer >= model.layers() || r.head >= model.heads())
        fail("ablate", "head \"" + spec + "\": the model has " + std::to_string(model.layers()) + " layers of " +
                           std::to_string(model.heads()) + " heads (counted from 0)");
    return r;
}

Ablation ablate(const TaskModel& model, const std::vector<Batch>& data, const std::vector<std::vector<HeadRef>>& groups) {
    Ablation result;
    result.kinds = model.kinds();
    result.baseline = evaluate(model, data);
    result.mean_outputs = mean_head_outputs(model, data);
    for (const AttentionSite& site : attention_sites(model))
        for (size_t h = 0; h < site.heads; ++h) {
            AblationRow row;
            row.kind = site.kind;
            row.layer = site.layer;
            row.head = h;
            const std::vector<HeadRef> one = {{site.kind, site.layer, h}};
            row.zero = evaluate_ablated(model, data, one, false, result.kinds, result.mean_outputs);
            row.mean = evaluate_ablated(model, data, one, true, result.kinds, result.mean_outputs);
            row.effect = std::max(row.zero.loss, row.mean.loss) - result.baseline.loss;
            result.rows.push_back(row);
        }
    std::stable_sort(result.rows.begin(), result.rows.end(),
                     [](const AblationRow& a, const AblationRow& b) { return a.effect > b.effect; });
    for (const std::vector<HeadRef>& heads : groups) {
        GroupRow g;
        g.heads = heads;
        for (const HeadRef& r : heads)
            g.name += (g.name.empty() ? "" : " + ") + r.kind + " " + std::to_string(r.layer) + "." + std::to_string(r.head);
        g.zero = evaluate_ablated(model, data, heads, false, result.kinds, result.mean_outputs);
        g.mean = evaluate_ablated(model, data, heads, true, result.kinds, result.mean_outputs);
        g.effect = std::max(g.zero.loss, g.mean.loss) - result.baseline.loss;
        result.groups.push_back(g);
    }
    return result;
}

std::string ablation_table(const Ablation& a) {
    std::string out;
    char buf[1024];
    std::snprintf(buf, sizeof buf, "baseline: loss %.4f  token accuracy %.4f  sequence accuracy %.4f  (%zu sequences, %zu counted tokens)\n\n",
                  a.baseline.loss, a.baseline.token_acc, a.baseline.seq_acc, a.baseline.sequences, a.baseline.counted);
    out += buf;
    std::snprintf(buf, sizeof buf, "%4s  %-8s %5s %4s | %-29s | %-29s | %8s\n", "rank", "kind", "layer", "head",
                  "zero-ablated: loss   d_tok  d_seq", "mean-ablated: loss   d_tok  d_seq", "effect");
    out += buf;
    for (size_t r = 0; r < a.rows.size(); ++r) {
        const AblationRow& x = a.rows[r];
        const Score& b = a.baseline;
        std::snprintf(buf, sizeof buf, "%4zu  %-8s %5zu %4zu | %+11.4f %+8.4f %+8.4f | %+11.4f %+8.4f %+8.4f | %+8.4f\n", r + 1,
                      x.kind.c_str(), x.layer, x.head, x.zero.loss - b.loss, x.zero.token_acc - b.token_acc,
                      x.zero.seq_acc - b.seq_acc, x.mean.loss - b.loss, x.mean.token_acc - b.token_acc, x.mean.seq_acc - b.seq_acc,
                      x.effect);
        out += buf;
    }
    out += "(changes from the baseline: loss in nats, d_tok token accuracy, d_seq sequence accuracy;\n"
           " effect = the larger loss increase of the two ablations, sorted largest first)\n";
    if (a.groups.empty()) return out;
    out += "\nheads ablated together:\n";
    for (const GroupRow& g : a.groups) {
        const Score& b = a.baseline;
        std::snprintf(buf, sizeof buf, "  %s\n      zero: loss %.4f (%+.4f)  token accuracy %.4f (%+.4f)  sequence accuracy %.4f (%+.4f)\n"
                                        "      mean: loss %.4f (%+.4f)  token accuracy %.4f (%+.4f)  sequence accuracy %.4f (%+.4f)\n",
                      g.name.c_str(), g.zero.loss, g.zero.loss - b.loss, g.zero.token_acc, g.zero.token_acc - b.token_acc,
                      g.zero.seq_acc, g.zero.seq_acc - b.seq_acc, g.mean.loss, g.mean.loss - b.loss, g.mean.token_acc,
                      g.mean.token_acc - b.token_acc, g.mean.seq_acc, g.mean.seq_acc - b.seq_acc);
        out += buf;
    }
    return out;
}

std::string write_ablation_h5(const OutputFile& out, const Ablation& a, const AblationSource& source) {
    return write_h5_atomically(out, "ablate", [&](const h5::File& file) {
        write_source_attrs(file, "attnlab-ablation", source);
        file.write_attr_int("seed", static_cast<int64_t>(source.seed));
        file.write_attr_int("batches", static_cast<int64_t>(source.batches));
        file.write_attr_int("sequences", static_cast<int64_t>(a.baseline.sequences));
        file.write_attr_int("counted", static_cast<int64_t>(a.baseline.counted));
        file.write_attr_double("baseline_loss", a.baseline.loss);
        file.write_attr_double("baseline_token_acc", a.baseline.token_acc);
        file.write_attr_double("baseline_seq_acc", a.baseline.seq_acc);
        file.write_attr_string("sort", "effect = max(zero_loss, mean_loss) - baseline_loss, descending");

        const h5::Group ranked = file.create_group("ranked");
        std::vector<std::string> kinds;
        std::vector<int64_t> layers, heads;
        std::vector<double> columns[7];  // zero loss/tok/seq, mean loss/tok/seq, effect
        for (const AblationRow& r : a.rows) {
            kinds.push_back(r.kind);
            layers.push_back(static_cast<int64_t>(r.layer));
            heads.push_back(static_cast<int64_t>(r.head));
            const double values[7] = {r.zero.loss, r.zero.token_acc, r.zero.seq_acc, r.mean.loss, r.mean.token_acc, r.mean.seq_acc, r.effect};
            for (int c = 0; c < 7; ++c) columns[c].push_back(values[c]);
        }
        const char* names[7] = {"zero_loss", "zero_token_acc", "zero_seq_acc", "mean_loss", "mean_token_acc", "mean_seq_acc", "effect"};
        ranked.write_strings("kind", kinds);
        ranked.write("layer", layers);
        ranked.write("head", heads);
        for (int c = 0; c < 7; ++c) ranked.write(names[c], columns[c]);

        for (size_t k = 0; k < a.kinds.size(); ++k) {
            const auto& means = a.mean_outputs[k];  // [layers][heads][d_h]
            const size_t L = means.size(), H = means.front().size(), d = means.front().front().size();
            const h5::Group group = file.create_group(a.kinds[k]);
            std::vector<double> grids[6];
            for (auto& g : grids) g.assign(L * H, 0.0);
            for (const AblationRow& r : a.rows) {
                if (r.kind != a.kinds[k]) continue;
                const size_t cell = r.layer * H + r.head;
                const double values[6] = {r.zero.loss, r.zero.token_acc, r.zero.seq_acc, r.mean.loss, r.mean.token_acc, r.mean.seq_acc};
                for (int c = 0; c < 6; ++c) grids[c][cell] = values[c];
            }
            for (int c = 0; c < 6; ++c) group.write(names[c], Shape{L, H}, grids[c].data());
            std::vector<double> flat;
            for (const auto& layer : means)
                for (const auto& head : layer) flat.insert(flat.end(), head.begin(), head.end());
            group.write("mean_output", Shape{L, H, d}, flat.data());
        }
        if (a.groups.empty()) return;
        const h5::Group together = file.create_group("together");
        std::vector<std::string> group_names;
        std::vector<double> group_columns[7];
        for (const GroupRow& g : a.groups) {
            group_names.push_back(g.name);
            const double values[7] = {g.zero.loss, g.zero.token_acc, g.zero.seq_acc, g.mean.loss, g.mean.token_acc, g.mean.seq_acc, g.effect};
            for (int c = 0; c < 7; ++c) group_columns[c].push_back(values[c]);
        }
        together.write_strings("name", group_names);
        for (int c = 0; c < 7; ++c) together.write(names[c], group_columns[c]);
    });
}

std::string write_maps_h5(const OutputFile& out, const TaskModel& model, const Batch& batch, const AblationSource& source) {
    NoGradGuard no_grad;
    Hooks hooks;
    hooks.record("*attn.pattern");
    model.forward(batch, hooks);
    const std::vector<AttentionKind> kinds = model.kinds_for(batch);
    return write_h5_atomically(out, "ablate", [&](const h5::File& file) {
        write_source_attrs(file, "attnlab-maps", source);
        file.write_attr_string("kind", model.encoder_decoder() ? "encoder-decoder" : "decoder");
        file.write_attr_int("layers", static_cast<int64_t>(model.layers()));
        file.write_attr_int("heads", static_cast<int64_t>(model.heads()));
        auto lengths = [](const std::vector<size_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); };
        const std::string tokens = model.encoder_decoder() ? "tgt" : "tokens";
        file.write(tokens, batch.inputs.shape, batch.inputs.values.data());
        file.write(model.encoder_decoder() ? "tgt_lengths" : "lengths", lengths(batch.lengths));
        if (model.encoder_decoder()) {
            file.write("src", batch.src.shape, batch.src.values.data());
            file.write("src_lengths", lengths(batch.src_lengths));
        }
        file.write("targets", batch.targets.shape, batch.targets.values.data());
        file.write("loss_mask", batch.loss_mask.shape, batch.loss_mask.values.data());
        const h5::Group attention = file.create_group("attention");
        for (const AttentionKind& kind : kinds) {
            const h5::Group group = attention.create_group(kind.name);
            const std::vector<Tensor> weights = recorded_per_layer(hooks, kind, "pattern");
            for (size_t l = 0; l < weights.size(); ++l) {
                const Tensor& w = weights[l];
                const std::vector<double> v = w.values();
                const std::vector<float> f(v.begin(), v.end());
                group.write("layer_" + std::to_string(l), w.shape(), f.data());
            }
        }
    });
}

}  // namespace attnlab
