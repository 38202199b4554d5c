// The dense reference (the seed's formula as plain loops, with ALiBi's bias when
// the mask carries it) and the audit's live
// tests of the fused attention op against it: every mask kind, both dtypes, both
// all-masked-row policies.
#include "experiments/analysis/audit.h"
#include "experiments/analysis/audit_support.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "autograd/rng.h"

namespace attnlab {

using namespace audit_detail;

// --- the dense reference ---

DenseAttention dense_reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                         double scale, MaskedRows masked_rows, const std::vector<double>& sink,
                                         const std::vector<double>& rel_bias) {
    const size_t B = q.size(0), H = q.size(1), Tq = q.size(2), d = q.size(3);
    const size_t H_kv = k.size(1), Tk = k.size(2), d_v = v.size(3);
    const std::vector<double> Q = q.values(), K = k.values(), V = v.values();
    // the mask's own eligibility rule (AttentionMask::allows), as the model's op reads it
    auto eligible = [&](size_t b, size_t i, size_t j) { return mask.allows(b, i, j, Tq, Tk); };
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
                    score[j] = modify_score(scale * dot, mask.variant) + (mask.variant.alibi ? alibi_bias(h, H, i, j, Tq, Tk) : 0.0);
                    if (!rel_bias.empty()) {
                        const long long relative = static_cast<long long>(j) - static_cast<long long>(i + Tk - Tq);
                        score[j] += rel_bias[relative_bucket(mask.variant, mask.causal, relative) * H + h];
                    }
                    top = std::max(top, score[j]);
                    any = true;
                }
                if (!any) {
                    if (masked_rows == MaskedRows::error)
                        fail("reference", "batch item " + std::to_string(b) + ", query position " + std::to_string(i) +
                                              " has no eligible key");
                    continue;  // "zero": weights and context stay 0
                }
                if (!sink.empty()) top = std::max(top, sink[h]);
                double total = sink.empty() ? 0.0 : std::exp(sink[h] - top);  // the sink: a key of value zero
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
        AttentionMask alibi = both;
        alibi.variant.alibi = true;
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
            {"ALiBi, causal and key padding", 2, 4, 2, 5, 5, 4, 4, alibi},
            {"ALiBi, Tq 2 < Tk 6 (cached decoding)", 2, 2, 2, 2, 6, 4, 4, alibi},
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
                   " mask kinds (none, causal, padding, both, explicit 2-D and 3-D, Tq < Tk, grouped K/V, cross, ALiBi); weights differ by up to " +
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
