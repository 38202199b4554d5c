// The audit's live tests on a whole model (eval mode): causal perturbation,
// padding invariance, the KV cache against full recomputation, the op's outputs
// against the dense reference, the all-masked-row policy.
#include "experiments/analysis/audit.h"
#include "experiments/analysis/audit_support.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

using namespace audit_detail;

namespace {

// The spans the decoder's self-attention reads off `batch`'s tokens (prefix-LM,
// documents; empty without them), from the mask the model runs under.
TokenSpans decoder_spans(const TaskModel& model, const Batch& batch) {
    return model.kinds_for(batch)[model.encoder_decoder() ? 1 : 0].mask.spans;  // enc_self, dec_self, cross
}

// Chunk sizes of one sequence, each boundary that would split a prefix (prefix-LM)
// moved to its end: a prefix reaches a KV cache whole (layers/models.cpp).
std::vector<size_t> prefixes_whole(const std::vector<size_t>& chunks, const TokenSpans& spans) {
    std::vector<size_t> out;
    size_t start = 0, t = 0;
    for (size_t size : chunks) {
        t += size;
        if (t < spans.T && spans.splits_prefix(0, t)) continue;  // the prefix goes on past t: join the next chunk
        out.push_back(t - start);
        start = t;
    }
    if (t > start) out.push_back(t - start);
    return out;
}

// model.ablate_heads: an ablated head's output z is zero (its weights are still
// the softmax's). context (B, H, Tq, d_v), as the dense reference gives it.
void zero_heads(std::vector<double>& context, size_t B, size_t H, const std::vector<size_t>& heads) {
    const size_t per_head = context.size() / (B * H);  // Tq d_v
    for (size_t b = 0; b < B; ++b)
        for (const size_t h : heads) std::fill_n(context.begin() + static_cast<std::ptrdiff_t>((b * H + h) * per_head), per_head, 0.0);
}

}  // namespace

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
        const TokenSpans spans = decoder_spans(model, batch);
        for (size_t b = 0; b < B; ++b) {
            const size_t n = batch.lengths[b];
            if (n < 2) continue;
            // prefix-LM: a prefix reads itself both ways; cut after it
            cut[b] = spans.cut_after_prefix(b, static_cast<size_t>(rng.integer(0, static_cast<int64_t>(n) - 1)));
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


LiveTest kv_cache_agreement(const TaskModel& model, const Batch& batch, size_t window, size_t sequences) {
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
            const TokenSpans spans = decoder_spans(model, s);
            for (auto& chunks : schedules) {
                chunks = prefixes_whole(chunks, spans);
                DecoderCache cache;
                size_t t0 = 0;
                for (size_t size : chunks) {
                    const std::vector<double> got = step(column(t0, t0 + size), cache).values();
                    for (size_t e = 0; e < size * V; ++e) worst = worse(worst, std::abs(got[e] - full[t0 * V + e]));
                    t0 += size;
                }
                const size_t kept = window > 0 ? std::min(n, window) : n;  // a sliding window keeps the last W
                const size_t expected = per_token * kept + (memory.defined() ? per_token * s.src_lengths[0] : 0);
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
                                   std::to_string(element) + ")" +
                                   (window > 0 ? ", self-attention's for the last " + std::to_string(window) + " only" : "")
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
            // what the op read: the queries and keys after the rotary rotation when the model has one
            const bool rotary = has_hook_point(model, site.name + ".rot_q");
            DenseAttention ref = dense_reference_attention(heads_first(pass.at(site, rotary ? "rot_q" : "q")),
                                                           heads_first(pass.at(site, rotary ? "rot_k" : "k")),
                                                           heads_first(pass.at(site, "v")), pass.kind_of(site).mask,
                                                           site.scale, site.masked_rows, site.sink, site.rel_bias);
            zero_heads(ref.context, pass.at(site, "z").size(0), site.heads, site.ablated_heads);
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
        const AttentionSite attn = attention_sites(model).front();  // a copy: the vector is a temporary
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

}  // namespace attnlab
