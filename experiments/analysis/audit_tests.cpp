#include "experiments/analysis/audit.h"
#include "experiments/analysis/audit_support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "autograd/cpu/blas.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "experiments/run/attention_metrics.h"
#include "experiments/config/config.h"
#include "experiments/run/model_factory.h"

// The audit's live tests: causal perturbation, padding invariance, KV cache,
// agreement with a dense reference, the all-masked-row policy.
namespace attnlab {

using namespace audit_detail;

// --- sites ---

std::vector<AttentionSite> attention_sites(const TaskModel& model) {
    std::vector<AttentionSite> sites;
    auto add = [&](const std::string& kind, size_t layer, const std::string& name, const MultiHeadAttention& attn) {
        sites.push_back({kind, layer, name, &attn, attn.heads, attn.kv_heads, attn.head_width, attn.scale, attn.masked_rows});
    };
    auto at = [](const std::string& stack, size_t l, const std::string& module) { return stack + "." + std::to_string(l) + "." + module; };
    if (DecoderLM* d = model.decoder_lm()) {
        for (size_t l = 0; l < d->blocks.size(); ++l) add("self", l, at("blocks", l, "attn"), d->blocks[l]->attn);
    } else if (EncoderDecoder* e = model.enc_dec()) {
        for (size_t l = 0; l < e->encoder.size(); ++l) add("enc_self", l, at("encoder", l, "attn"), e->encoder[l]->attn);
        for (size_t l = 0; l < e->decoder.size(); ++l) add("dec_self", l, at("decoder", l, "attn"), e->decoder[l]->attn);
        for (size_t l = 0; l < e->decoder.size(); ++l) add("cross", l, at("decoder", l, "cross_attn"), *e->decoder[l]->cross_attn);
    }
    return sites;
}

const AttentionKind& AttentionPass::kind_of(const AttentionSite& site) const {
    for (const AttentionKind& k : kinds)
        if (k.name == site.kind) return k;
    fail("audit", "no attention kind " + site.kind);
}

AttentionPass attention_pass(const TaskModel& model, const Batch& batch) {
    NoGradGuard no_grad;
    AttentionPass pass;
    pass.hooks.record("*attn.*");
    pass.logits = model.forward(batch, pass.hooks);
    pass.kinds = model.kinds_for(batch);
    return pass;
}

// --- the dense reference ---

DenseAttention dense_reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                         double scale, MaskedRows masked_rows) {
    const size_t B = q.size(0), H = q.size(1), Tq = q.size(2), d = q.size(3);
    const size_t H_kv = k.size(1), Tk = k.size(2), d_v = v.size(3);
    const std::vector<double> Q = q.values(), K = k.values(), V = v.values();
    auto eligible = [&](size_t b, size_t i, size_t j) {
        using L = long long;
        if (mask.causal && L(j) > L(i) + L(Tk) - L(Tq)) return false;
        if (!mask.key_lengths.empty() && j >= mask.key_lengths[b]) return false;
        if (!mask.eligible.values.empty()) {
            const size_t item = mask.eligible.shape.size() == 3 ? b : 0;
            if (mask.eligible.values[(item * Tq + i) * Tk + j] == 0) return false;
        }
        return true;
    };
    DenseAttention out;
    out.context.assign(B * H * Tq * d_v, 0.0);
    out.weights.assign(B * H * Tq * Tk, 0.0);
    std::vector<double> score(Tk);
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h) {
            const size_t kv = h / (H / H_kv);
            for (size_t i = 0; i < Tq; ++i) {
                double top = -std::numeric_limits<double>::infinity();
                bool any = false;
                for (size_t j = 0; j < Tk; ++j) {
                    if (!eligible(b, i, j)) continue;
                    double dot = 0;
                    for (size_t c = 0; c < d; ++c) dot += Q[((b * H + h) * Tq + i) * d + c] * K[((b * H_kv + kv) * Tk + j) * d + c];
                    score[j] = scale * dot;
                    top = std::max(top, score[j]);
                    any = true;
                }
                if (!any) {
                    if (masked_rows == MaskedRows::error)
                        fail("reference", "batch item " + std::to_string(b) + ", query position " + std::to_string(i) +
                                              " has no eligible key");
                    continue;  // "zero": weights and context stay 0
                }
                double total = 0;
                for (size_t j = 0; j < Tk; ++j)
                    if (eligible(b, i, j)) total += std::exp(score[j] - top);
                double* w = out.weights.data() + ((b * H + h) * Tq + i) * Tk;
                double* c = out.context.data() + ((b * H + h) * Tq + i) * d_v;
                for (size_t j = 0; j < Tk; ++j) {
                    if (!eligible(b, i, j)) continue;
                    w[j] = std::exp(score[j] - top) / total;
                    for (size_t e = 0; e < d_v; ++e) c[e] += w[j] * V[((b * H_kv + kv) * Tk + j) * d_v + e];
                }
            }
        }
    return out;
}

// --- tests on one module ---

LiveTest causal_perturbation(const MultiHeadAttention& attn, const Tensor& x, const std::vector<size_t>& lengths,
                             const AttentionMask& mask, Rng& rng, const std::string& name) {
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const size_t B = x.size(0), T = x.size(1), D = x.size(2);
        std::vector<size_t> cut(B, T);  // T: nothing after the cut (a sequence shorter than 2)
        for (size_t b = 0; b < B; ++b) {
            const size_t n = length_of(lengths, b, T);
            if (n >= 2) cut[b] = static_cast<size_t>(rng.integer(0, static_cast<int64_t>(n) - 1));
        }
        const Tensor changed = perturbed(x, rng, 10.0, [&](size_t b, size_t t) { return t > cut[b]; });
        const std::vector<double> a = attn.forward(x, x, mask).out.values();
        const std::vector<double> c = attn.forward(changed, changed, mask).out.values();
        LiveTest r;
        r.name = name;
        r.figure_name = "max |change| of outputs at or before the cut";
        r.figure = rows_diff(a, c, B, T, D, [&](size_t b, size_t t) { return t <= cut[b]; });
        r.tolerance = same_numbers_tolerance(max_abs(a));
        const double moved = rows_diff(a, c, B, T, D, [&](size_t b, size_t t) { return t > cut[b] && t < length_of(lengths, b, T); });
        r.pass = r.figure <= r.tolerance && moved > 0;
        r.detail = "later valid outputs moved by up to " + fmt(moved);
        if (moved == 0) r.detail += " (the perturbation reached nothing: the test proves nothing)";
        return r;
    });
}

LiveTest padding_invariance(const MultiHeadAttention& attn, const Tensor& x_q, const Tensor& x_kv,
                            const std::vector<size_t>& query_lengths, const std::vector<size_t>& key_lengths,
                            const AttentionMask& mask, Rng& rng, const std::string& name) {
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const bool self = x_q.same(x_kv);
        const size_t B = x_q.size(0), Tq = x_q.size(1), D = x_q.size(2);
        // Two extra padded key positions (self-attention: positions) with random
        // content, so every item has padding to ignore.
        const size_t extra = mask.eligible.values.empty() ? 2 : 0;
        auto extend = [&](const Tensor& x) {
            if (extra == 0) return x;
            return concat({x, rng.normal({x.size(0), extra, x.size(2)}, 0.0, 1.0, x.dtype())}, 1);
        };
        const Tensor kv_ext = extend(x_kv);
        const size_t Tk = kv_ext.size(1);
        const Tensor kv_changed = perturbed(kv_ext, rng, 10.0, [&](size_t b, size_t t) { return t >= length_of(key_lengths, b, Tk); });
        const std::vector<double> a = attn.forward(x_q, x_kv, mask).out.values();
        const std::vector<double> c = self ? attn.forward(kv_changed, kv_changed, mask).out.values()
                                           : attn.forward(x_q, kv_changed, mask).out.values();
        const size_t Tc = self ? Tk : Tq;  // rows of c
        // compare the valid query rows of a (B, Tq, D) and c (B, Tc, D)
        double worst = 0;
        size_t rows = 0;
        for (size_t b = 0; b < B; ++b)
            for (size_t t = 0; t < std::min(length_of(query_lengths, b, Tq), Tq); ++t, ++rows)
                for (size_t f = 0; f < D; ++f)
                    worst = worse(worst, std::abs(a[(b * Tq + t) * D + f] - c[(b * Tc + t) * D + f]));
        size_t padded = 0;
        for (size_t b = 0; b < B; ++b) padded += Tk - length_of(key_lengths, b, Tk);
        LiveTest r;
        r.name = name;
        r.figure_name = "max |change| of outputs at valid query positions";
        r.figure = worst;
        r.tolerance = f32_tolerance(max_abs(a));
        r.pass = worst <= r.tolerance;
        r.detail = std::to_string(padded) + " padded key positions (" + std::to_string(B * extra) +
                   " appended) perturbed, " + std::to_string(rows) + " valid query rows compared";
        if (mask.causal && self)  // right padding follows every valid query: the causal part alone keeps it out
            r.detail += " (with right padding the causal mask alone already excludes these keys from valid rows)";
        return r;
    });
}

LiveTest bidirectional(const MultiHeadAttention& attn, const Tensor& x, const std::vector<size_t>& lengths,
                       const AttentionMask& mask, Rng& rng, const std::string& name) {
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const size_t B = x.size(0), T = x.size(1), D = x.size(2);
        // perturb the last valid position only; position 0 must see it
        const Tensor changed = perturbed(x, rng, 10.0, [&](size_t b, size_t t) {
            const size_t n = length_of(lengths, b, T);
            return n >= 2 && t == n - 1;
        });
        const std::vector<double> a = attn.forward(x, x, mask).out.values();
        const std::vector<double> c = attn.forward(changed, changed, mask).out.values();
        double smallest = std::numeric_limits<double>::infinity();
        for (size_t b = 0; b < B; ++b) {
            if (length_of(lengths, b, T) < 2) continue;
            smallest = std::min(smallest, rows_diff(a, c, B, T, D, [&](size_t i, size_t t) { return i == b && t == 0; }));
        }
        LiveTest r;
        r.name = name;
        r.figure_name = "smallest change at position 0 when the last position is perturbed";
        r.figure = std::isfinite(smallest) ? smallest : 0.0;
        r.rule = "> 0";
        r.pass = r.figure > 0;
        r.detail = "an encoder sees the whole source";
        return r;
    });
}

// --- tests on the whole model ---

LiveTest causal_perturbation(const TaskModel& model, const Batch& batch, Rng& rng) {
    const std::string kind = model.encoder_decoder() ? "dec_self" : "self";
    const std::string name = "causal perturbation (" + kind + ", whole model)";
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const size_t B = batch.inputs.shape[0], T = batch.inputs.shape[1];
        const int64_t V = static_cast<int64_t>(vocab_of(model));
        Batch changed = batch;
        std::vector<size_t> cut(B, T);
        for (size_t b = 0; b < B; ++b) {
            const size_t n = batch.lengths[b];
            if (n < 2) continue;
            cut[b] = static_cast<size_t>(rng.integer(0, static_cast<int64_t>(n) - 1));
            for (size_t t = cut[b] + 1; t < T; ++t) {
                int32_t& token = changed.inputs.values[b * T + t];
                const int32_t old = token;
                while (token == old) token = static_cast<int32_t>(rng.integer(kFirstContent, V));
            }
        }
        const std::vector<double> a = model.forward(batch).values();
        const std::vector<double> c = model.forward(changed).values();
        LiveTest r;
        r.name = name;
        r.figure_name = "max |change| of logits at or before the cut";
        r.figure = rows_diff(a, c, B, T, static_cast<size_t>(V), [&](size_t b, size_t t) { return t <= cut[b]; });
        r.tolerance = same_numbers_tolerance(max_abs(a));
        const double moved = rows_diff(a, c, B, T, static_cast<size_t>(V),
                                       [&](size_t b, size_t t) { return t > cut[b] && t < batch.lengths[b]; });
        r.pass = r.figure <= r.tolerance && moved > 0;
        r.detail = "tokens after a random cut replaced in " + std::to_string(B) + " sequences; later logits moved by up to " + fmt(moved);
        return r;
    });
}

LiveTest padding_invariance(const TaskModel& model, const Batch& batch, Rng& rng) {
    const std::string name = "padding invariance (whole model)";
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const size_t B = batch.inputs.shape[0], T = batch.inputs.shape[1];
        const int64_t V = static_cast<int64_t>(vocab_of(model));
        Batch changed = batch;
        size_t replaced = 0;
        for (size_t b = 0; b < B; ++b)
            for (size_t t = batch.lengths[b]; t < T; ++t, ++replaced)
                changed.inputs.values[b * T + t] = static_cast<int32_t>(rng.integer(kFirstContent, V));
        if (!batch.src_lengths.empty()) {
            const size_t S = batch.src.shape[1];
            for (size_t b = 0; b < B; ++b)
                for (size_t s = batch.src_lengths[b]; s < S; ++s, ++replaced)
                    changed.src.values[b * S + s] = static_cast<int32_t>(rng.integer(kFirstContent, V));
        }
        const std::vector<double> a = model.forward(batch).values();
        const std::vector<double> c = model.forward(changed).values();
        auto valid = [&](size_t b, size_t t) { return t < batch.lengths[b]; };
        const double replaced_diff = rows_diff(a, c, B, T, static_cast<size_t>(V), valid);
        // every sequence alone, without padding (up to 8: each is a forward pass)
        double alone_diff = 0;
        const size_t alone = std::min<size_t>(B, 8);
        for (size_t b = 0; b < alone; ++b) {
            const Batch s = single(batch, b);
            const std::vector<double> one = model.forward(s).values();
            const size_t n = batch.lengths[b];
            for (size_t t = 0; t < n; ++t)
                for (size_t v = 0; v < static_cast<size_t>(V); ++v)
                    alone_diff = worse(alone_diff, std::abs(one[t * V + v] - a[(b * T + t) * V + v]));
        }
        LiveTest r;
        r.name = name;
        r.figure_name = "max |change| of logits at valid positions";
        r.figure = worse(replaced_diff, alone_diff);
        r.tolerance = f32_tolerance(max_abs(a));
        r.pass = r.figure <= r.tolerance;
        r.detail = std::to_string(replaced) + " padding tokens replaced by content: " + fmt(replaced_diff) + "; " +
                   std::to_string(alone) + " sequences run alone, unpadded: " + fmt(alone_diff);
        return r;
    });
}

LiveTest kv_cache_agreement(const TaskModel& model, const Batch& batch, size_t sequences) {
    const std::string name = "KV cache vs full recomputation";
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const std::vector<AttentionSite> sites = attention_sites(model);
        const AttentionSite& first = sites.front();
        const size_t element = model.module().parameters().front().dtype() == DType::f32 ? 4 : 8;
        const size_t layers = model.layers();
        const size_t per_token = 2 * layers * first.kv_heads * first.head_width * element;
        const size_t V = vocab_of(model);
        // the longest sequences of the batch
        std::vector<size_t> order(batch.lengths.size());
        for (size_t b = 0; b < order.size(); ++b) order[b] = b;
        std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return batch.lengths[x] > batch.lengths[y]; });
        order.resize(std::min(order.size(), sequences));
        double worst = 0, magnitude = 0;
        bool bytes_ok = true;
        std::string bytes_note;
        for (size_t b : order) {
            const Batch s = single(batch, b);
            const size_t n = s.lengths[0];
            if (n == 0) continue;
            auto column = [&](size_t t0, size_t t1) {
                return Indices({1, t1 - t0}, std::vector<int32_t>(s.inputs.values.begin() + static_cast<std::ptrdiff_t>(t0),
                                                                  s.inputs.values.begin() + static_cast<std::ptrdiff_t>(t1)));
            };
            Tensor memory;
            std::vector<double> full;
            if (const DecoderLM* d = decoder_of(model)) {
                full = d->forward(s.inputs, s.lengths).values();
            } else {
                memory = enc_dec_of(model)->encode(s.src, s.src_lengths);
                full = enc_dec_of(model)->decode(memory, s.src_lengths, s.inputs, s.lengths).values();
            }
            magnitude = std::max(magnitude, max_abs(full));
            auto step = [&](const Indices& tokens, DecoderCache& cache) {
                if (const DecoderLM* d = decoder_of(model)) return d->forward_cached(tokens, cache);
                return enc_dec_of(model)->decode_cached(memory, s.src_lengths, tokens, cache);
            };
            // token by token, then in chunks (a first chunk of half, then 1, then the rest)
            std::vector<std::vector<size_t>> schedules = {std::vector<size_t>(n, 1)};
            if (n >= 3) schedules.push_back({n / 2, 1, n - n / 2 - 1});
            for (const auto& chunks : schedules) {
                DecoderCache cache;
                size_t t0 = 0;
                for (size_t size : chunks) {
                    const std::vector<double> got = step(column(t0, t0 + size), cache).values();
                    for (size_t e = 0; e < size * V; ++e) worst = worse(worst, std::abs(got[e] - full[t0 * V + e]));
                    t0 += size;
                }
                const size_t expected = per_token * n + (memory.defined() ? per_token * s.src_lengths[0] : 0);
                if (cache.bytes() != expected) {
                    bytes_ok = false;
                    bytes_note = "; cache holds " + std::to_string(cache.bytes()) + " bytes after " + std::to_string(n) +
                                 " tokens, expected " + std::to_string(expected);
                }
            }
        }
        LiveTest r;
        r.name = name;
        r.figure_name = "max |cached - full| of logits";
        r.figure = worst;
        r.tolerance = f32_tolerance(magnitude);
        r.pass = worst <= r.tolerance && bytes_ok;
        r.detail = std::to_string(order.size()) + " sequences, token by token and in chunks; cache bytes " +
                   (bytes_ok ? "= " + std::to_string(per_token) + " per token (2 * layers * kv_heads * head_width * " +
                                   std::to_string(element) + ")"
                             : "WRONG" + bytes_note);
        return r;
    });
}

LiveTest reference_agreement(const TaskModel& model, const Batch& batch) {
    const std::string name = "attention op vs dense reference (model's q, k, v)";
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const AttentionPass pass = attention_pass(model, batch);
        const std::vector<AttentionSite> sites = attention_sites(model);
        double context_diff = 0, weight_diff = 0, magnitude = 0;
        auto heads_first = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };  // (B, T, H, d) -> (B, H, T, d)
        for (const AttentionSite& site : sites) {
            const DenseAttention ref = dense_reference_attention(heads_first(pass.at(site, "q")), heads_first(pass.at(site, "k")),
                                                                 heads_first(pass.at(site, "v")), pass.kind_of(site).mask,
                                                                 site.scale, site.masked_rows);
            const std::vector<double> context = heads_first(pass.at(site, "z")).values();
            const std::vector<double> weights = pass.at(site, "pattern").values();
            magnitude = std::max(magnitude, max_abs(ref.context));
            for (size_t e = 0; e < context.size(); ++e) context_diff = worse(context_diff, std::abs(context[e] - ref.context[e]));
            for (size_t e = 0; e < weights.size(); ++e) weight_diff = worse(weight_diff, std::abs(weights[e] - ref.weights[e]));
        }
        LiveTest r;
        r.name = name;
        r.figure_name = "max |op - reference| of per-head outputs";
        r.figure = context_diff;
        r.tolerance = f32_tolerance(magnitude);
        r.pass = context_diff <= r.tolerance && weight_diff <= f32_tolerance(1.0);
        r.detail = std::to_string(sites.size()) + " modules (every kind and layer, float32); weights differ by up to " + fmt(weight_diff);
        return r;
    });
}

LiveTest masked_row_policy(const TaskModel& model, const Batch& batch) {
    const std::string name = "all-masked rows in the model (an empty sequence)";
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const AttentionSite& attn = attention_sites(model).front();
        const Batch two = batch.lengths.size() >= 2 ? batch : twice(single(batch, 0));  // item 1 becomes empty
        Batch empty = two;
        empty.lengths[1] = 0;
        if (!empty.src_lengths.empty()) empty.src_lengths[1] = 0;
        LiveTest r;
        r.name = name + ", policy " + to_string(attn.masked_rows);
        if (attn.masked_rows == MaskedRows::error) {
            r.figure_name = "errors naming batch item 1, query position 0";
            r.rule = "= 1";
            try {
                model.forward(empty);
                r.detail = "no error for a sequence of length 0";
            } catch (const Error& e) {
                const std::string what = e.what();
                r.pass = what.find("batch item 1, query position 0") != std::string::npos;
                r.figure = r.pass ? 1 : 0;
                r.detail = what;
            }
            return r;
        }
        const size_t B = two.inputs.shape[0], T = two.inputs.shape[1];
        const std::vector<double> a = model.forward(two).values();
        const std::vector<double> c = model.forward(empty).values();
        const size_t V = a.size() / (B * T);
        const double others = rows_diff(a, c, B, T, V, [&](size_t b, size_t t) { return b != 1 && t < two.lengths[b]; });
        const bool finite = std::all_of(c.begin(), c.end(), [](double x) { return std::isfinite(x); });
        r.figure_name = "max |change| of the other sequences' logits";
        r.figure = others;
        r.tolerance = same_numbers_tolerance(max_abs(a));
        r.pass = finite && others <= r.tolerance;
        r.detail = finite ? "every logit finite" : "NON-FINITE logits";
        return r;
    });
}

// --- tests of the op ---

LiveTest reference_agreement_random(DType dtype, uint64_t seed) {
    const std::string name = "attention op vs dense reference (random q, k, v, " + to_string(dtype) + ")";
    return guarded(name, [&] {
        NoGradGuard no_grad;
        Rng rng(seed);
        struct Case {
            const char* what;
            size_t B, H, H_kv, Tq, Tk, d, d_v;
            AttentionMask mask;
        };
        AttentionMask none, causal, padding, both, explicit2, explicit3;
        causal.causal = true;
        padding.key_lengths = {5, 2};
        both = padding;
        both.causal = true;
        // explicit masks with random holes; key 0 stays eligible so no row is empty
        auto random_mask = [&](const Shape& shape, size_t Tk) {
            Mask m = Mask::filled(shape, true);
            for (size_t e = 0; e < m.values.size(); ++e) m.values[e] = (e % Tk == 0) || rng.bernoulli(0.6);
            return m;
        };
        explicit2.eligible = random_mask({5, 5}, 5);
        explicit3.eligible = random_mask({2, 5, 5}, 5);
        AttentionMask cross = padding;
        cross.key_lengths = {7, 3};
        AttentionMask grouped = both;
        const std::vector<Case> cases = {
            {"no mask", 2, 2, 2, 5, 5, 4, 4, none},
            {"causal", 2, 2, 2, 5, 5, 4, 4, causal},
            {"key padding", 2, 2, 2, 5, 5, 4, 4, padding},
            {"causal and key padding", 2, 2, 2, 5, 5, 4, 4, both},
            {"explicit (Tq, Tk)", 2, 2, 2, 5, 5, 4, 4, explicit2},
            {"explicit (B, Tq, Tk)", 2, 2, 2, 5, 5, 4, 4, explicit3},
            {"causal, Tq 2 < Tk 6 (cached decoding)", 2, 2, 2, 2, 6, 4, 4, causal},
            {"grouped K/V (4 over 2), causal and padding", 2, 4, 2, 5, 5, 4, 4, grouped},
            {"cross shapes (Tq 3, Tk 7, d_v 3), key padding", 2, 2, 2, 3, 7, 4, 3, cross},
        };
        double context_diff = 0, weight_diff = 0;
        for (const Case& c : cases) {
            const Tensor q = rng.normal({c.B, c.H, c.Tq, c.d}, 0.0, 1.0, dtype);
            const Tensor k = rng.normal({c.B, c.H_kv, c.Tk, c.d}, 0.0, 1.0, dtype);
            const Tensor v = rng.normal({c.B, c.H_kv, c.Tk, c.d_v}, 0.0, 1.0, dtype);
            AttentionOptions options;
            options.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
            options.need_weights = true;
            const AttentionResult got = attention(q, k, v, c.mask, options);
            const DenseAttention ref = dense_reference_attention(q, k, v, c.mask, options.scale, MaskedRows::error);
            const std::vector<double> context = got.context.values(), weights = got.weights.values();
            for (size_t e = 0; e < context.size(); ++e) context_diff = worse(context_diff, std::abs(context[e] - ref.context[e]));
            for (size_t e = 0; e < weights.size(); ++e) weight_diff = worse(weight_diff, std::abs(weights[e] - ref.weights[e]));
        }
        LiveTest r;
        r.name = name;
        r.figure_name = "max |op - reference| of contexts";
        r.figure = context_diff;
        r.tolerance = dtype == DType::f64 ? 1e-12 : 1e-5;
        r.pass = context_diff <= r.tolerance && weight_diff <= r.tolerance;
        r.detail = std::to_string(cases.size()) +
                   " mask kinds (none, causal, padding, both, explicit 2-D and 3-D, Tq < Tk, grouped K/V, cross); weights differ by up to " +
                   fmt(weight_diff);
        return r;
    });
}

LiveTest masked_row_policy_op() {
    const std::string name = "all-masked rows in the op (both policies)";
    return guarded(name, [&] {
        Rng rng(11);
        // three ways to empty a row: a key length of 0 (item 1), an explicit mask
        // row of false (query 1), a causal mask with Tq > Tk (query 0 sees no key)
        struct Case {
            const char* what;
            size_t Tq, Tk;
            AttentionMask mask;
            std::string names;  // what the "error" policy's message must contain
        };
        AttentionMask length0, row, tall;
        length0.key_lengths = {3, 0};
        row.eligible = Mask({3, 3}, {1, 1, 0, 0, 0, 0, 1, 1, 1});
        tall.causal = true;
        const std::vector<Case> cases = {{"key length 0", 3, 3, length0, "batch item 1, query position 0"},
                                         {"explicit empty row", 3, 3, row, "batch item 0, query position 1"},
                                         {"causal with Tq 3 > Tk 2", 3, 2, tall, "batch item 0, query position 0"}};
        LiveTest r;
        r.name = name;
        r.figure_name = "max |weight, context or gradient| on empty rows (policy zero)";
        r.tolerance = 0;
        bool ok = true;
        std::string problems;
        for (const Case& c : cases) {
            const Shape qs{2, 2, c.Tq, 4}, ks{2, 2, c.Tk, 4};
            Tensor q = rng.normal(qs, 0.0, 1.0, DType::f64).set_requires_grad(true);
            Tensor k = rng.normal(ks, 0.0, 1.0, DType::f64).set_requires_grad(true);
            Tensor v = rng.normal(ks, 0.0, 1.0, DType::f64).set_requires_grad(true);
            AttentionOptions options;
            options.scale = 0.5;
            options.need_weights = true;
            try {
                attention(q, k, v, c.mask, options);
                ok = false;
                problems += std::string("; ") + c.what + ": policy error did not throw";
            } catch (const Error& e) {
                if (std::string(e.what()).find(c.names) == std::string::npos) {
                    ok = false;
                    problems += std::string("; ") + c.what + ": message lacks \"" + c.names + "\"";
                }
            }
            options.masked_rows = MaskedRows::zero;
            const AttentionResult got = attention(q, k, v, c.mask, options);
            sum(got.context * rng.normal(got.context.shape(), 0.0, 1.0, DType::f64)).backward();
            // which (b, i) rows are empty: from the reference's own eligibility
            const DenseAttention ref = dense_reference_attention(q.detach(), k.detach(), v.detach(), c.mask, 0.5, MaskedRows::zero);
            const std::vector<double> w = got.weights.values(), ctx = got.context.values(), gq = q.grad().values();
            const size_t Tk = c.Tk, d = 4;
            for (size_t b = 0; b < 2; ++b)
                for (size_t h = 0; h < 2; ++h)
                    for (size_t i = 0; i < c.Tq; ++i) {
                        const size_t rowi = (b * 2 + h) * c.Tq + i;
                        double mass = 0;
                        for (size_t j = 0; j < Tk; ++j) mass += ref.weights[rowi * Tk + j];
                        if (mass != 0) continue;  // not an empty row
                        for (size_t j = 0; j < Tk; ++j) r.figure = worse(r.figure, std::abs(w[rowi * Tk + j]));
                        for (size_t e = 0; e < d; ++e) {
                            r.figure = worse(r.figure, std::abs(ctx[rowi * d + e]));
                            r.figure = worse(r.figure, std::abs(gq[rowi * d + e]));
                        }
                    }
            for (const Tensor& t : {got.context, got.weights, q.grad(), k.grad(), v.grad()}) {
                const std::vector<double> values = t.values();
                if (!std::all_of(values.begin(), values.end(), [](double x) { return std::isfinite(x); })) {
                    ok = false;
                    problems += std::string("; ") + c.what + ": NaN or infinity under policy zero";
                }
            }
        }
        r.pass = ok && r.figure <= r.tolerance;
        r.detail = "key length 0, an explicit empty row, causal with Tq > Tk: \"error\" names item and position, \"zero\" is finite" + problems;
        return r;
    });
}

}  // namespace attnlab
