#include "experiments/analysis/audit.h"
#include "experiments/analysis/audit_support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <fstream>
#include <limits>
#include <sstream>

#include "autograd/cpu/threads.h"
#include "autograd/cpu/blas.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "experiments/run/attention_metrics.h"
#include "experiments/config/config.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

using namespace audit_detail;

// --- the record ---
bool AuditRecord::passed() const {
    return std::all_of(tests.begin(), tests.end(), [](const LiveTest& t) { return t.pass; });
}

namespace {

double proc_status_mb(const char* key) {  // "VmHWM", "VmRSS" from /proc/self/status (kB)
    std::ifstream status("/proc/self/status");
    std::string line;
    const std::string prefix = std::string(key) + ":";
    while (std::getline(status, line))
        if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size())) / 1024.0;
    return 0;
}

bool reset_peak_rss() {  // Linux: writing 5 to clear_refs resets VmHWM to the current RSS
    std::ofstream f("/proc/self/clear_refs");
    f << "5";
    f.flush();
    return static_cast<bool>(f);
}

// 1/sqrt(d_h), 1, 1/d_h or the number, computed here again (not by resolve_scale).
double expected_scale(const std::string& spec, size_t head_width) {
    const double d = static_cast<double>(head_width);
    if (spec == "sqrt") return 1.0 / std::sqrt(d);
    if (spec == "none") return 1.0;
    if (spec == "linear") return 1.0 / d;
    return std::stod(spec);
}

struct Moments {
    double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
    double sum = 0, sumsq = 0;
    size_t count = 0;
    void add(double x) {
        min = std::min(min, x);
        max = std::max(max, x);
        sum += x;
        sumsq += x * x;
        ++count;
    }
    double mean() const { return count ? sum / static_cast<double>(count) : 0; }
    double std() const { return std_from_moments(static_cast<double>(count), sum, sumsq); }
};

// Shapes of every projection and traced tensor, softmax over keys (rows sum to 1),
// the scale: the shape contracts of the seed's audit.
LiveTest shape_contracts(const TaskModel& model, const Batch& batch, const std::string& scale_spec) {
    return guarded("shape contracts and softmax axis", [&] {
        NoGradGuard no_grad;
        const AttentionPass pass = attention_pass(model, batch);
        const Tensor& logits = pass.logits;
        const std::vector<AttentionSite> sites = attention_sites(model);
        std::map<std::string, Shape> parameter_shapes;
        for (const auto& [name, p] : model.module().named_parameters()) parameter_shapes[name] = p.shape();
        const size_t B = batch.inputs.shape[0], T = batch.inputs.shape[1];
        std::vector<std::string> problems;
        auto expect = [&](const std::string& what, const Shape& got, const Shape& want) {
            if (got != want) problems.push_back(what + " " + shape_str(got) + ", expected " + shape_str(want));
        };
        expect("logits", logits.shape(), {B, T, vocab_of(model)});
        double row_error = 0;
        for (const AttentionSite& a : sites) {
            const Tensor &x_q = pass.at(a, "in"), &x_kv = pass.at(a, "in_kv");
            const size_t D = x_q.size(2), D_kv = x_kv.size(2), Tq = x_q.size(1), Tk = x_kv.size(1);
            const size_t H = a.heads, H_kv = a.kv_heads, d_h = a.head_width;
            const std::string& n = a.name;
            expect(n + ".q_proj.weight", parameter_shapes[n + ".q_proj.weight"], {H * d_h, D});
            expect(n + ".k_proj.weight", parameter_shapes[n + ".k_proj.weight"], {H_kv * d_h, D_kv});
            expect(n + ".v_proj.weight", parameter_shapes[n + ".v_proj.weight"], {H_kv * d_h, D_kv});
            expect(n + ".out_proj.weight", parameter_shapes[n + ".out_proj.weight"], {D, H * d_h});
            const Tensor& w = pass.at(a, "pattern");
            expect(n + " weights", w.shape(), {B, H, Tq, Tk});
            expect(n + " per-head outputs", pass.at(a, "z").shape(), {B, Tq, H, d_h});
            if (std::abs(a.scale - expected_scale(scale_spec, d_h)) > 1e-12 * std::max(1.0, a.scale))
                problems.push_back(n + " scale " + fmt(a.scale) + ", expected " + fmt(expected_scale(scale_spec, d_h)));
            const AttentionKind* kind = &pass.kind_of(a);
            const std::vector<double> v = w.values();
            // with attention sinks, the softmax's last key is the sink: a row's weights sum to
            // 1 - e^(s_h) / (e^(s_h) + sum_j e^(x_j)), from the recorded scores x (-inf where ineligible)
            const std::vector<double> scores = a.sink.empty() ? std::vector<double>() : pass.at(a, "scores").values();
            auto sink_weight = [&](size_t b, size_t h, size_t i) {
                const double* x = scores.data() + ((b * H + h) * Tq + i) * Tk;
                const double top = std::max(a.sink[h], *std::max_element(x, x + Tk));
                double total = std::exp(a.sink[h] - top);
                for (size_t j = 0; j < Tk; ++j) total += std::exp(x[j] - top);
                return std::exp(a.sink[h] - top) / total;
            };
            for (size_t b = 0; b < B; ++b)
                for (size_t h = 0; h < H; ++h)
                    for (size_t i = 0; i < std::min(length_of(kind->query_lengths, b, Tq), Tq); ++i) {
                        double total = 0;
                        for (size_t j = 0; j < Tk; ++j) total += v[((b * H + h) * Tq + i) * Tk + j];
                        row_error = worse(row_error, std::abs(total - (a.sink.empty() ? 1.0 : 1.0 - sink_weight(b, h, i))));
                    }
        }
        LiveTest r;
        r.name = "shape contracts and softmax axis";
        r.figure_name = "max |sum over keys of a valid row's weights - (1 - the sink's weight, with sinks)|";
        r.figure = row_error;
        r.tolerance = 1e-5;
        r.pass = problems.empty() && row_error <= r.tolerance;
        r.detail = problems.empty() ? "projection, weight, per-head output and logit shapes as configured; scale as configured"
                                    : problems.front() + (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "");
        return r;
    });
}

// What the model is: its configuration, projection shapes, scale, policies and dtype.
void describe_model(AuditRecord& rec, const TaskModel& model, const Config& config, const AttentionSite& first) {
    rec.model_kind = config.model.kind;
    rec.task = config.task.name;
    rec.vocab = vocab_of(model);
    rec.layers = model.layers();
    rec.width = static_cast<size_t>(config.model.width);
    rec.heads = first.heads;
    rec.kv_heads = first.kv_heads;
    rec.head_width = first.head_width;
    rec.ffn = static_cast<size_t>(config.model.ffn);
    rec.norm = config.model.norm;
    rec.positional = config.model.positional;
    rec.parameters = model.module().parameter_count();
    for (const auto& [name, tensor] : model.module().named_parameters())
        if (name.find("_proj.") != std::string::npos) rec.projections.push_back({name, tensor.shape()});
    rec.scale_spec = config.model.scale;
    rec.scale = first.scale;
    rec.softmax_axis = "keys: the last axis of the scores (B, H, Tq, Tk), one distribution per query row";
    rec.masked_rows = to_string(first.masked_rows);
    rec.dropout = config.model.dropout;
    rec.attn_dropout = config.model.attn_dropout;
    rec.dtype = to_string(model.module().parameters().front().dtype());
    rec.cache_dtype = rec.dtype;
}

// Each attention kind's mask: causal or not, whose lengths pad the keys, what the
// axes run over, the variant's eligibility rules (self-attention's).
void describe_masks(AuditRecord& rec, bool enc_dec, const AttentionVariant& variant) {
    if (enc_dec) {
        rec.masks = {{"enc_self", false, "source lengths", "source", "source", rules_text(variant, false)},
                     {"dec_self", true, "decoder lengths", "decoder input", "decoder input", rules_text(variant, true)},
                     {"cross", false, "source lengths", "decoder input", "source (encoder output)", ""}};
    } else {
        rec.masks = {{"self", true, "sequence lengths", "sequence", "sequence", rules_text(variant, true)}};
    }
}

// Fresh batches of the `attnlab eval` stream, and the lengths they hold.
std::vector<Batch> fresh_data(AuditRecord& rec, BatchSource& source, size_t batches, bool enc_dec) {
    std::vector<Batch> data;
    for (size_t i = 0; i < std::max<size_t>(batches, 1); ++i) data.push_back(source.next(rec.batch_size));
    rec.batches = data.size();
    Moments lengths, src_lengths;
    for (const Batch& batch : data) {
        for (size_t n : batch.lengths) lengths.add(static_cast<double>(n));
        for (size_t n : batch.src_lengths) src_lengths.add(static_cast<double>(n));
    }
    rec.sequences = lengths.count;
    rec.min_length = static_cast<size_t>(lengths.min);
    rec.max_length = static_cast<size_t>(lengths.max);
    rec.mean_length = lengths.mean();
    if (enc_dec) {
        rec.min_source_length = static_cast<size_t>(src_lengths.min);
        rec.max_source_length = static_cast<size_t>(src_lengths.max);
        rec.mean_source_length = src_lengths.mean();
    }
    return data;
}

// Score ranges per layer, entropy and masked mass per head, over `data`.
void measure_attention(AuditRecord& rec, const TaskModel& model, const std::vector<AttentionSite>& sites,
                       const std::vector<Batch>& data) {
    NoGradGuard no_grad;
    std::vector<Moments> per_site(sites.size());
    std::vector<std::vector<Moments>> per_head(sites.size(), std::vector<Moments>(rec.heads));
    std::vector<HeadStats> stats(sites.size());  // summed over batches, per site (1 layer each)
    for (const Batch& batch : data) {
        const AttentionPass pass = attention_pass(model, batch);
        for (size_t s = 0; s < sites.size(); ++s) {
            const AttentionKind* kind = &pass.kind_of(sites[s]);
            const Tensor& scores = pass.at(sites[s], "scores");  // (B, H, Tq, Tk): scale q.k
            const std::vector<double> score = scores.values();
            const size_t B = scores.size(0), H = scores.size(1), Tq = scores.size(2), Tk = scores.size(3);
            for (size_t b = 0; b < B; ++b)
                for (size_t h = 0; h < H; ++h)
                    for (size_t i = 0; i < std::min(length_of(kind->query_lengths, b, Tq), Tq); ++i)
                        for (size_t j = 0; j < Tk; ++j) {
                            if (!kind->mask.allows(b, i, j, Tq, Tk)) continue;
                            per_site[s].add(score[((b * H + h) * Tq + i) * Tk + j]);
                            per_head[s][h].add(score[((b * H + h) * Tq + i) * Tk + j]);
                        }
            const HeadStats hs = attention_stats({pass.at(sites[s], "pattern")}, kind->mask, kind->query_lengths);
            HeadStats& acc = stats[s];
            if (acc.entropy.empty()) {
                acc = hs;
                continue;
            }
            for (size_t h = 0; h < hs.heads; ++h) {
                acc.entropy[h] += hs.entropy[h];
                acc.entropy_norm[h] += hs.entropy_norm[h];
                acc.masked_mass[h] += hs.masked_mass[h];
                acc.masked_mass_max[h] = std::max(acc.masked_mass_max[h], hs.masked_mass_max[h]);
            }
        }
    }
    const double n = static_cast<double>(data.size());
    for (size_t s = 0; s < sites.size(); ++s) {
        const Moments& m = per_site[s];
        rec.scores.push_back({sites[s].kind, sites[s].layer, m.min, m.max, m.mean(), m.std(), m.count});
        for (size_t h = 0; h < rec.heads; ++h)
            rec.head_stats.push_back({sites[s].kind, sites[s].layer, h, per_head[s][h].std(), stats[s].entropy[h] / n,
                                      stats[s].entropy_norm[h] / n, stats[s].masked_mass[h] / n, stats[s].masked_mass_max[h]});
    }
}

// The KV cache: its policy, its bytes by formula, and those of a real cache
// after decoding one longest sequence (random tokens).
void measure_cache(AuditRecord& rec, const TaskModel& model, bool enc_dec, const AttentionVariant& variant, uint64_t seed) {
    const size_t element = rec.dtype == "float32" ? 4 : 8;
    rec.kv_bytes_per_token = 2 * rec.layers * rec.kv_heads * rec.head_width * element;
    rec.cross_kv_bytes_per_token = enc_dec ? rec.kv_bytes_per_token : 0;
    const size_t kept = variant.window > 0 ? std::min(rec.longest, variant.window) : rec.longest;  // a window keeps W
    rec.kv_bytes_at_longest = rec.kv_bytes_per_token * kept + rec.cross_kv_bytes_per_token * rec.longest_source;
    rec.cache_policy = enc_dec
        ? "decoder self-attention: the keys and values of every decoded position, kept per layer as (B, H_kv, T, d_h), "
          "appended each step, never evicted; new queries see every cached key (bottom-right causal mask); "
          "cross-attention: the source's keys and values, projected once per layer at the first step and reused"
        : "self-attention: the keys and values of every decoded position, kept per layer as (B, H_kv, T, d_h), "
          "appended each step, never evicted; new queries see every cached key (bottom-right causal mask); "
          "no padding inside the cache (one sequence, or equal lengths)";
    if (variant.window > 0)
        rec.cache_policy += "; sliding window: only the last " + std::to_string(variant.window) + " keys and values are kept";
    if (variant.reads_tokens())
        rec.cache_policy += "; the tokens seen are kept for the token rules (prefix-LM, documents), and a prefix must reach "
                            "the cache whole in one call";
    NoGradGuard no_grad;
    Rng rng(seed + 101);
    auto random_tokens = [&](size_t n) {
        std::vector<int32_t> v(n);
        for (auto& t : v) t = static_cast<int32_t>(rng.integer(kFirstContent, static_cast<int64_t>(rec.vocab)));
        return Indices({1, n}, v);
    };
    DecoderCache cache;
    if (const DecoderLM* d = decoder_of(model)) {
        d->forward_cached(random_tokens(rec.longest), cache);
    } else {
        const EncoderDecoder& e = *enc_dec_of(model);
        const Tensor memory = e.encode(random_tokens(rec.longest_source), {rec.longest_source});
        e.decode_cached(memory, {rec.longest_source}, random_tokens(rec.longest), cache);
    }
    rec.kv_bytes_measured = cache.bytes();
}

// Score-matrix elements per attention kind at the longest sequences.
void score_costs(AuditRecord& rec, const TaskModel& model) {
    for (const std::string& kind : model.kinds()) {
        KindCost c;
        c.kind = kind;
        c.queries = kind == "enc_self" ? rec.longest_source : rec.longest;
        c.keys = kind == "enc_self" || kind == "cross" ? rec.longest_source : rec.longest;
        c.score_elements = rec.heads * c.queries * c.keys;
        c.score_elements_batch = rec.batch_size * c.score_elements * rec.layers;
        rec.costs.push_back(c);
    }
}

// Forward passes over `data` (eval mode, no graph): the median time per batch,
// valid tokens per second and the peak resident memory.
void measure_forward(AuditRecord& rec, const TaskModel& model, const std::vector<Batch>& data) {
    NoGradGuard no_grad;
    size_t tokens = 0;
    for (const Batch& batch : data)
        for (size_t n : batch.lengths) tokens += n;
    model.forward(data.front());  // warm-up
    rec.rss_before_mb = proc_status_mb("VmRSS");
    rec.peak_is_process_peak = !reset_peak_rss();
    std::vector<double> seconds;
    size_t repeats = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (repeats < 3 || (elapsed < 0.5 && repeats < 50)) {
        for (const Batch& batch : data) {
            const auto t0 = std::chrono::steady_clock::now();
            model.forward(batch);
            seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        ++repeats;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    rec.peak_rss_mb = proc_status_mb("VmHWM");
    std::sort(seconds.begin(), seconds.end());
    rec.forward_seconds = seconds[seconds.size() / 2];
    rec.tokens_per_s = static_cast<double>(tokens * repeats) / elapsed;
}

LiveTest masked_mass_test(const AuditRecord& rec) {
    LiveTest t;
    t.name = "masked mass (attention on ineligible keys)";
    t.figure_name = "max over heads and rows of the weight on ineligible keys";
    for (const HeadRecord& h : rec.head_stats) t.figure = worse(t.figure, h.masked_mass_max);
    t.tolerance = 0;
    t.pass = t.figure == 0;
    t.detail = "every kind, layer and head over " + std::to_string(rec.sequences) + " sequences; a correct mask gives exactly 0";
    return t;
}

// The tests on one module, for each kind over its layers (the worst layer counts).
void layer_tests(AuditRecord& rec, const TaskModel& model, const std::vector<AttentionSite>& sites, const Batch& batch,
                 Rng& rng) {
    NoGradGuard no_grad;
    const AttentionPass pass = attention_pass(model, batch);
    for (const AttentionKind& kind : pass.kinds) {
        std::vector<LiveTest> causal, padding, bidi;
        const std::vector<size_t>& key_lengths = kind.mask.key_lengths;
        for (size_t s = 0; s < sites.size(); ++s) {
            if (sites[s].kind != kind.name) continue;
            const std::string layer = sites[s].name;
            const Tensor &x_q = pass.at(sites[s], "in"), &x_kv = pass.at(sites[s], "in_kv");
            if (kind.mask.causal) causal.push_back(causal_perturbation(*sites[s].attn, x_q, kind.query_lengths, kind.mask, rng, layer));
            if (kind.name == "enc_self") bidi.push_back(bidirectional(*sites[s].attn, x_q, kind.query_lengths, kind.mask, rng, layer));
            padding.push_back(padding_invariance(*sites[s].attn, x_q, x_kv, kind.query_lengths, key_lengths, kind.mask, rng, layer));
        }
        if (!causal.empty()) rec.tests.push_back(worst_of("causal perturbation (" + kind.name + ", each layer)", causal));
        if (!bidi.empty()) {
            LiveTest t = worst_of("encoder sees the whole source (" + kind.name + ", each layer)", bidi);
            t.figure = std::numeric_limits<double>::infinity();
            for (const LiveTest& p : bidi) t.figure = std::min(t.figure, p.figure);
            rec.tests.push_back(t);
        }
        rec.tests.push_back(worst_of("padding invariance (" + kind.name + ", each layer)", padding));
    }
}

// Every live test, on the first batch.
void live_tests(AuditRecord& rec, const TaskModel& model, const Config& config, const std::vector<AttentionSite>& sites,
                const Batch& batch, uint64_t seed) {
    Rng rng(seed + 202);
    rec.tests.push_back(shape_contracts(model, batch, config.model.scale));
    rec.tests.push_back(masked_mass_test(rec));
    rec.tests.push_back(causal_perturbation(model, batch, rng));
    layer_tests(rec, model, sites, batch, rng);
    rec.tests.push_back(padding_invariance(model, batch, rng));
    rec.tests.push_back(kv_cache_agreement(model, batch, config.model.variant.window));
    rec.tests.push_back(reference_agreement(model, batch));
    rec.tests.push_back(reference_agreement_random(DType::f32));
    rec.tests.push_back(reference_agreement_random(DType::f64));
    rec.tests.push_back(masked_row_policy_op());
    rec.tests.push_back(masked_row_policy(model, batch));
}

// The model.* keys the audit models: what they change in the attention op the
// dense reference computes too (shapes and grouped K/V, the scale, rotary's q and
// k from the model's rot_q/rot_k, ALiBi's bias, the variant's eligibility rules
// and score modifiers, sinks, the relative bias, the all-masked-row policy), and
// what they change outside it the live tests see by running the model itself
// (norms, feed-forward, embeddings, positions, head, ablated heads' z), or they act
// in training only (dropout, init). A key not listed, set away from its default,
// is refused naming it: the audit never reports PASS for a model whose option it
// ignores (tests/experiments/test_config_reads.cpp walks every model key through it).
const std::set<std::string>& keys_audited() {
    static const std::set<std::string> keys = {
        "model.kind", "model.layers", "model.width", "model.heads", "model.kv_heads", "model.head_width", "model.ffn",
        "model.norm", "model.norm_type", "model.positional", "model.rotary_base", "model.rotary_dims", "model.scale",
        "model.masked_rows", "model.window", "model.prefix_lm", "model.documents", "model.softcap", "model.sinks",
        "model.rel_buckets", "model.rel_max_distance", "model.dropout", "model.attn_dropout", "model.bias", "model.ffn_bias",
        "model.norm_bias", "model.norm_eps", "model.parallel", "model.head_bias", "model.init", "model.tie_embeddings",
        "model.activation", "model.max_len", "model.ablate_heads"};
    return keys;
}

// Refuses the first model option the audit does not model: a key keys_audited
// does not list, or a positional encoding whose scores the reference does not form.
void refuse_unaudited(const Config& config) {
    auto refuse = [](const std::string& option) {
        fail("audit", option + ": the audit's reference and live tests do not model this option, so they cannot vouch for it");
    };
    const std::string& positional = config.model.positional;
    if (!one_of(positional, {"learned", "sinusoidal", "none", "rotary", "alibi"}))
        refuse("model.positional = \"" + positional + "\"");
    const std::string unlisted = first_unlisted_model_key(config, keys_audited());
    if (!unlisted.empty()) refuse(unlisted);
}

}  // namespace

AuditRecord audit(const TaskModel& model, const Config& config, const AuditOptions& options) {
    refuse_unaudited(config);
    model.module().eval();
    AuditRecord rec;
    const std::vector<AttentionSite> sites = attention_sites(model);
    const bool enc_dec = model.encoder_decoder();
    describe_model(rec, model, config, sites.front());
    rec.seed = options.seed;
    const std::unique_ptr<BatchSource> source = make_batch_source(config, options.seed, 2);
    rec.longest = source->max_sequence_length();
    rec.positional_max_len = model_config(config, rec.longest).max_len;
    // translate (the encoder-decoder task) has sources of at most task.max_len tokens
    rec.longest_source = enc_dec ? static_cast<size_t>(config.task.max_len) : 0;
    rec.threads = threads();
    describe_masks(rec, enc_dec, config.model.variant);

    rec.batch_size = static_cast<size_t>(batch_size(config));
    const std::vector<Batch> data = fresh_data(rec, *source, options.batches, enc_dec);
    measure_attention(rec, model, sites, data);
    measure_cache(rec, model, enc_dec, config.model.variant, options.seed);
    score_costs(rec, model);
    if (options.timing) measure_forward(rec, model, data);
    live_tests(rec, model, config, sites, data.front(), options.seed);
    return rec;
}

}  // namespace attnlab
