// attnlab audit CHECKPOINT [--json] [--batches N] [--seed S]: the seed chapter's
// self-attention audit record of a checkpoint (experiments/analysis/audit.h), then its
// live tests, each PASS or FAIL with the figure it rests on. Exit status 1 when
// a test fails, 2 for bad input.

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "autograd/cpu/blas.h"
#include "experiments/analysis/audit.h"
#include "experiments/files/checkpoint.h"
#include "experiments/cli/command_line.h"
#include "experiments/files/json_text.h"
#include "experiments/config/config.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

constexpr const char* kHelpTail = R"(
The record (the seed chapter's audit list): width, heads, head width, K/V heads,
every projection shape, scale, softmax axis, the masks of each attention kind,
the all-masked-row policy, dropout, dtype; on --batches fresh batches (the data
stream `attnlab eval` uses): sequence lengths, score ranges per layer (scale *
q.k over eligible keys of valid query rows), entropy and masked mass per head;
the KV-cache policy and bytes (per token, at the longest sequence, and measured
on a real cache), score-matrix elements at that length, and the time, valid
tokens/s and peak resident memory of forward passes (eval mode, no graph).

Live tests, each PASS or FAIL with its figure: shape contracts and softmax axis,
masked mass = 0, causal perturbation (whole model and each layer), the encoder
seeing its whole source (encoder-decoder), padding invariance (each kind and
layer, and the whole model: padding replaced, sequences run alone), KV cache
against full recomputation, the attention op against a dense triple-loop
reference (the model's q, k, v; random tensors with each mask kind, float32 and
float64), all-masked rows (the op under both policies; the model under its own).

Exit status: 0 when every live test passes, 1 when one fails, 2 for bad input.
)";

std::string num(double x, int precision = 4) {
    if (!std::isfinite(x)) return x > 0 ? "inf" : x < 0 ? "-inf" : "nan";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    return buf;
}

std::string shape_list(const Shape& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

std::string bytes_str(size_t bytes) {
    char buf[64];
    if (bytes < 10 * 1024) std::snprintf(buf, sizeof buf, "%zu B", bytes);
    else if (bytes < 10 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%zu B (%.1f KiB)", bytes, static_cast<double>(bytes) / 1024);
    else std::snprintf(buf, sizeof buf, "%zu B (%.1f MiB)", bytes, static_cast<double>(bytes) / (1024 * 1024));
    return buf;
}

std::string scale_text(const AuditRecord& r) {
    const std::string d = std::to_string(r.head_width);
    if (r.scale_spec == "sqrt") return "\"sqrt\": 1/sqrt(" + d + ") = " + num(r.scale);
    if (r.scale_spec == "linear") return "\"linear\": 1/" + d + " = " + num(r.scale);
    if (r.scale_spec == "none") return "\"none\": 1";
    return num(r.scale);
}

// One "  key                  value" line of the text record.
void row(std::ostream& o, const std::string& key, const std::string& value) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "  %-20s ", key.c_str());
    o << buf << value << "\n";
}

// What it is: the model's shape, parameters and projections.
void text_model(std::ostream& o, const AuditRecord& r) {
    o << "\nmodel\n";
    row(o, "kind", r.model_kind + ", " + std::to_string(r.layers) + " layers, " +
                       (r.ffn ? "feed-forward width " + std::to_string(r.ffn) : std::string("attention-only (ffn 0)")) + ", norm " +
                       r.norm + ", positions " + r.positional + "; task " + r.task + ", vocab " + std::to_string(r.vocab));
    row(o, "width D", std::to_string(r.width));
    row(o, "heads H", std::to_string(r.heads));
    row(o, "head width d_h", std::to_string(r.head_width) + (r.head_width * r.heads == r.width ? " (D / H)" : " (set explicitly)"));
    row(o, "K/V heads H_kv", std::to_string(r.kv_heads) + " (" + std::to_string(r.heads / r.kv_heads) + (r.heads / r.kv_heads == 1 ? " query head" : " query heads") + " per K/V head)");
    row(o, "parameters", std::to_string(r.parameters));
    // projections, one line per attention module: q [out, in] + bias [out], ...
    std::map<std::string, std::string> modules;
    std::vector<std::string> order;
    for (const ProjectionShape& p : r.projections) {
        const size_t cut = p.name.rfind('.', p.name.rfind("_proj.") - 1);
        const std::string module = p.name.substr(0, cut), part = p.name.substr(cut + 1);
        if (!modules.count(module)) order.push_back(module);
        std::string& line = modules[module];
        const std::string proj = part.substr(0, part.find("_proj."));
        if (part.find(".weight") != std::string::npos) line += (line.empty() ? "" : "   ") + proj + " " + shape_list(p.shape);
        else line += " + bias " + shape_list(p.shape);
    }
    for (size_t i = 0; i < order.size(); ++i) row(o, i == 0 ? "projections" : "", order[i] + ":  " + modules[order[i]]);
}

// The attention's scale, softmax axis, masks, policies, dropout and dtype.
void text_attention(std::ostream& o, const AuditRecord& r) {
    o << "\nattention\n";
    row(o, "scale", scale_text(r));
    row(o, "softmax axis", r.softmax_axis);
    for (size_t i = 0; i < r.masks.size(); ++i) {
        const MaskRecord& m = r.masks[i];
        row(o, i == 0 ? "masks" : "", m.kind + ": " + (m.causal ? "causal (key j <= query i + Tk - Tq) AND " : "") + "key padding (" +
                                          m.key_padding + ")" + (m.rules.empty() ? "" : " AND " + m.rules) + "; queries over " +
                                          m.queries + ", keys over " + m.keys);
    }
    row(o, "all-masked rows", "\"" + r.masked_rows + "\"" +
                                  (r.masked_rows == "error" ? " (a row with no eligible key is an error naming item and position)"
                                                            : " (zero weights, zero context, zero gradient)"));
    row(o, "dropout", num(r.dropout) + " (residual, embedding), " + num(r.attn_dropout) + " (attention weights); off in eval");
    row(o, "dtype", r.dtype + " (parameters, activations, KV cache)");
}

// The data the statistics and costs were measured on.
void text_data(std::ostream& o, const AuditRecord& r) {
    o << "\ndata\n";
    row(o, "eval data", std::to_string(r.batches) + " batches x " + std::to_string(r.batch_size) +
                            " sequences, fresh stream (seed " + std::to_string(r.seed) + ")");
    row(o, "sequence lengths", std::to_string(r.min_length) + " .. " + std::to_string(r.max_length) + ", mean " +
                                   num(r.mean_length, 3) + "; longest the task makes " + std::to_string(r.longest) +
                                   "; positions up to " + std::to_string(r.positional_max_len));
    if (r.model_kind == "encoder-decoder")
        row(o, "source lengths", std::to_string(r.min_source_length) + " .. " + std::to_string(r.max_source_length) + ", mean " +
                                     num(r.mean_source_length, 3) + "; longest " + std::to_string(r.longest_source));
}

// What it does: score ranges per layer, entropy and masked mass per head.
void text_statistics(std::ostream& o, const AuditRecord& r) {
    o << "\nscores: scale * q.k over eligible keys of valid query rows, all heads of a layer\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-9s %5s %10s %10s %10s %10s %10s\n", "kind", "layer", "min", "max", "mean", "std", "pairs");
    o << buf;
    for (const ScoreRange& s : r.scores) {
        std::snprintf(buf, sizeof buf, "  %-9s %5zu %10.4f %10.4f %10.4f %10.4f %10zu\n", s.kind.c_str(), s.layer, s.min, s.max,
                      s.mean, s.std, s.pairs);
        o << buf;
    }
    o << "\nheads: entropy over keys (nats; / log eligible keys), mass on ineligible keys (mean, max)\n";
    std::snprintf(buf, sizeof buf, "  %-9s %5s %4s %10s %10s %10s %12s %12s\n", "kind", "layer", "head", "score std", "entropy",
                  "ent/log n", "masked mean", "masked max");
    o << buf;
    for (const HeadRecord& h : r.head_stats) {
        std::snprintf(buf, sizeof buf, "  %-9s %5zu %4zu %10.4f %10.4f %10.4f %12.3g %12.3g\n", h.kind.c_str(), h.layer, h.head,
                      h.score_std, h.entropy, h.entropy_norm, h.masked_mass, h.masked_mass_max);
        o << buf;
    }
}

// What it costs: the KV cache, score-matrix elements, time and memory of a forward pass.
void text_cost(std::ostream& o, const AuditRecord& r) {
    o << "\ncost\n";
    row(o, "cache policy", r.cache_policy);
    const std::string element = r.dtype == "float32" ? "4" : "8";
    row(o, "KV cache per token", bytes_str(r.kv_bytes_per_token) + " = 2 (K, V) * " + std::to_string(r.layers) + " layers * " +
                                     std::to_string(r.kv_heads) + " K/V heads * " + std::to_string(r.head_width) + " * " + element +
                                     " bytes" + (r.cross_kv_bytes_per_token ? "; cross-attention the same per source token" : ""));
    row(o, "KV cache, longest", bytes_str(r.kv_bytes_at_longest) + " for one sequence of " + std::to_string(r.longest) + " tokens" +
                                    (r.longest_source ? " (source " + std::to_string(r.longest_source) + ")" : "") +
                                    "; measured after decoding one: " + bytes_str(r.kv_bytes_measured) +
                                    (r.kv_bytes_measured == r.kv_bytes_at_longest ? " (equal)" : " (DIFFERENT)"));
    for (size_t i = 0; i < r.costs.size(); ++i) {
        const KindCost& c = r.costs[i];
        row(o, i == 0 ? "score matrix" : "", c.kind + ": H * Tq * Tk = " + std::to_string(r.heads) + " * " + std::to_string(c.queries) + " * " +
                                                  std::to_string(c.keys) + " = " + std::to_string(c.score_elements) +
                                                  " elements per layer and sequence; a batch of " + std::to_string(r.batch_size) +
                                                  " over " + std::to_string(r.layers) + " layers: " +
                                                  std::to_string(c.score_elements_batch) + " (" +
                                                  bytes_str(c.score_elements_batch * (r.dtype == "float32" ? 4 : 8)) + ")");
    }
    if (r.tokens_per_s > 0) {
        row(o, "forward pass", num(r.forward_seconds * 1e3, 3) + " ms per batch of " + std::to_string(r.batch_size) +
                                   " (median; eval mode, no graph), " + num(r.tokens_per_s, 4) + " valid tokens/s, " +
                                   std::to_string(r.threads) + (r.threads == 1 ? " thread" : " threads"));
        row(o, "peak memory", num(r.peak_rss_mb, 4) + " MB resident at most during the forward passes (" + num(r.rss_before_mb, 4) +
                                  " MB before)" + (r.peak_is_process_peak ? " [process peak: could not reset]" : ""));
    }
}

// The live tests, each PASS or FAIL with its figure, then the count.
void text_tests(std::ostream& o, const AuditRecord& r) {
    o << "\nlive tests\n";
    size_t failed = 0;
    for (const LiveTest& t : r.tests) {
        failed += !t.pass;
        o << "  " << (t.pass ? "PASS" : "FAIL") << "  " << t.name << ": " << t.figure_name << " = " << num(t.figure, 3)
          << (t.rule.empty() ? " (tolerance " + num(t.tolerance, 3) + ")" : " (pass: " + t.rule + ")") << "\n        " << t.detail
          << "\n";
    }
    o << "audit: " << r.tests.size() - failed << " passed, " << failed << " failed\n";
}

std::string text(const AuditRecord& r) {
    std::ostringstream o;
    o << "audit of " << r.checkpoint << " (step " << r.step << ")\n";
    text_model(o, r);
    text_attention(o, r);
    text_data(o, r);
    text_statistics(o, r);
    text_cost(o, r);
    text_tests(o, r);
    return o.str();
}

// --- JSON ---

std::string jnum(double x) {
    if (!std::isfinite(x)) return "null";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return buf;
}

class Json {
public:
    Json& key(const std::string& k) {
        comma();
        out_ += json_string(k) + ": ";
        fresh_ = true;
        return *this;
    }
    Json& value(const std::string& v) { return raw(json_string(v)); }
    Json& value(const char* v) { return raw(json_string(v)); }
    Json& value(double v) { return raw(jnum(v)); }
    Json& value(size_t v) { return raw(std::to_string(v)); }
    Json& value(int64_t v) { return raw(std::to_string(v)); }
    Json& value(bool v) { return raw(v ? "true" : "false"); }
    Json& shape(const Shape& s) {
        std::string a = "[";
        for (size_t i = 0; i < s.size(); ++i) a += (i ? ", " : "") + std::to_string(s[i]);
        return raw(a + "]");
    }
    Json& open(char bracket) {
        comma();
        out_ += bracket;
        fresh_ = true;
        return *this;
    }
    Json& close(char bracket) {
        out_ += bracket;
        fresh_ = false;
        return *this;
    }
    template <class T> Json& field(const std::string& k, const T& v) { return key(k).value(v); }
    std::string str() const { return out_ + "\n"; }

private:
    Json& raw(const std::string& v) {
        comma();
        out_ += v;
        fresh_ = false;
        return *this;
    }
    void comma() {
        if (!fresh_ && !out_.empty()) out_ += ", ";
        fresh_ = false;
    }
    std::string out_;
    bool fresh_ = true;
};

std::string json(const AuditRecord& r) {
    Json j;
    j.open('{');
    j.field("checkpoint", r.checkpoint).field("step", r.step).field("passed", r.passed());
    j.key("model").open('{');
    j.field("kind", r.model_kind).field("task", r.task).field("vocab", r.vocab).field("layers", r.layers).field("width", r.width);
    j.field("heads", r.heads).field("kv_heads", r.kv_heads).field("head_width", r.head_width).field("ffn", r.ffn);
    j.field("norm", r.norm).field("positional", r.positional).field("parameters", r.parameters);
    j.key("projections").open('{');
    for (const ProjectionShape& p : r.projections) j.key(p.name).shape(p.shape);
    j.close('}').close('}');
    j.key("attention").open('{');
    j.field("scale_spec", r.scale_spec).field("scale", r.scale).field("softmax_axis", r.softmax_axis);
    j.key("masks").open('[');
    for (const MaskRecord& m : r.masks)
        j.open('{').field("kind", m.kind).field("causal", m.causal).field("key_padding", m.key_padding)
            .field("queries", m.queries).field("keys", m.keys).field("rules", m.rules).close('}');
    j.close(']');
    j.field("masked_rows", r.masked_rows).field("dropout", r.dropout).field("attn_dropout", r.attn_dropout);
    j.field("dtype", r.dtype).close('}');
    j.key("data").open('{');
    j.field("batches", r.batches).field("batch_size", r.batch_size).field("sequences", r.sequences)
        .field("seed", static_cast<size_t>(r.seed));
    j.field("min_length", r.min_length).field("max_length", r.max_length).field("mean_length", r.mean_length);
    if (r.model_kind == "encoder-decoder")
        j.field("min_source_length", r.min_source_length).field("max_source_length", r.max_source_length)
            .field("mean_source_length", r.mean_source_length).field("longest_source", r.longest_source);
    j.field("longest", r.longest).field("positional_max_len", r.positional_max_len).close('}');
    j.key("scores").open('[');
    for (const ScoreRange& s : r.scores)
        j.open('{').field("kind", s.kind).field("layer", s.layer).field("min", s.min).field("max", s.max)
            .field("mean", s.mean).field("std", s.std).field("pairs", s.pairs).close('}');
    j.close(']');
    j.key("heads").open('[');
    for (const HeadRecord& h : r.head_stats)
        j.open('{').field("kind", h.kind).field("layer", h.layer).field("head", h.head).field("score_std", h.score_std)
            .field("entropy", h.entropy).field("entropy_norm", h.entropy_norm).field("masked_mass", h.masked_mass)
            .field("masked_mass_max", h.masked_mass_max).close('}');
    j.close(']');
    j.key("cost").open('{');
    j.field("cache_policy", r.cache_policy).field("cache_dtype", r.cache_dtype);
    j.field("kv_bytes_per_token", r.kv_bytes_per_token).field("cross_kv_bytes_per_source_token", r.cross_kv_bytes_per_token);
    j.field("kv_bytes_at_longest", r.kv_bytes_at_longest).field("kv_bytes_measured", r.kv_bytes_measured);
    j.key("score_elements").open('[');
    for (const KindCost& c : r.costs)
        j.open('{').field("kind", c.kind).field("queries", c.queries).field("keys", c.keys)
            .field("per_layer_per_sequence", c.score_elements).field("batch_all_layers", c.score_elements_batch).close('}');
    j.close(']');
    j.field("forward_seconds", r.forward_seconds).field("tokens_per_s", r.tokens_per_s).field("peak_rss_mb", r.peak_rss_mb);
    j.field("rss_before_mb", r.rss_before_mb).field("peak_is_process_peak", r.peak_is_process_peak);
    j.field("threads", static_cast<size_t>(r.threads)).close('}');
    j.key("tests").open('[');
    for (const LiveTest& t : r.tests)
        j.open('{').field("name", t.name).field("pass", t.pass).field("figure_name", t.figure_name).field("figure", t.figure)
            .field("tolerance", t.tolerance).field("rule", t.rule.empty() ? "<= tolerance" : t.rule).field("detail", t.detail).close('}');
    j.close(']');
    j.close('}');
    return j.str();
}

}  // namespace

int cmd_audit(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab audit", "The seed chapter's self-attention audit of a checkpoint, with its tests run live.");
    add_checkpoint_options(options, "4");
    options.add_options()("json", "print the record as one JSON object instead of text")
                         ("h,help", "this help");
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kHelpTail);
        return 0;
    }
    const CheckpointInput in = load_checkpoint_input(parsed);  // sets the threads from train.threads
    check_held_batches_fit(in);
    check_batch_forward_fits(in, 2 * attention_sites(*in.loaded.model).size());  // every attention's scores and pattern recorded
    AuditOptions audit_options;
    audit_options.batches = static_cast<size_t>(in.batches);
    audit_options.seed = in.seed;
    AuditRecord record = audit(*in.loaded.model, in.config, audit_options);
    record.checkpoint = in.path;
    record.step = in.checkpoint.step;
    std::fputs(parsed.count("json") ? json(record).c_str() : text(record).c_str(), stdout);
    return record.passed() ? 0 : 1;
}

}  // namespace attnlab
