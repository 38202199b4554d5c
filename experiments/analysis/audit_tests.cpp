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

// The audit's live tests on one attention module
// (causal perturbation, padding invariance, bidirectional encoder). Those on the
// whole model are in audit_model_tests.cpp; those of the op itself, with the
// dense reference, in audit_op_tests.cpp.
namespace attnlab {

using namespace audit_detail;

// --- the pass every live test reads ---

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
// --- tests on one module ---

LiveTest causal_perturbation(const MultiHeadAttention& attn, const Tensor& x, const std::vector<size_t>& lengths,
                             const AttentionMask& mask, Rng& rng, const std::string& name) {
    return guarded(name, [&] {
        NoGradGuard no_grad;
        const size_t B = x.size(0), T = x.size(1), D = x.size(2);
        std::vector<size_t> cut(B, T);  // T: nothing after the cut (a sequence shorter than 2)
        for (size_t b = 0; b < B; ++b) {
            const size_t n = length_of(lengths, b, T);
            // prefix-LM: a prefix reads itself both ways; cut after it
            if (n >= 2) cut[b] = mask.spans.cut_after_prefix(b, static_cast<size_t>(rng.integer(0, static_cast<int64_t>(n) - 1)));
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
        AttentionMask extended = mask;  // the token rules' spans over the extra positions too
        if (self && extra > 0) extended.spans = mask.spans.padded(extra);
        const std::vector<double> c = self ? attn.forward(kv_changed, kv_changed, extended).out.values()
                                           : attn.forward(x_q, kv_changed, extended).out.values();
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
        // perturb the last valid position only; the first query an encoder's rules
        // let read it must see it: position 0, or with a sliding window of W, n - W
        // (what the variant says without the causal part, whatever mask is passed)
        const Tensor changed = perturbed(x, rng, 10.0, [&](size_t b, size_t t) {
            const size_t n = length_of(lengths, b, T);
            return n >= 2 && t == n - 1;
        });
        const std::vector<double> a = attn.forward(x, x, mask).out.values();
        const std::vector<double> c = attn.forward(changed, changed, mask).out.values();
        double smallest = std::numeric_limits<double>::infinity();
        for (size_t b = 0; b < B; ++b) {
            const size_t n = length_of(lengths, b, T);
            if (n < 2) continue;
            size_t first = 0;
            while (!variant_allows(mask.variant, mask.spans, false, b, first, n - 1)) ++first;
            smallest = std::min(smallest, rows_diff(a, c, B, T, D, [&](size_t i, size_t t) { return i == b && t == first; }));
        }
        LiveTest r;
        r.name = name;
        const size_t W = mask.variant.window;
        r.figure_name = std::string("smallest change at ") + (W ? "the first position whose window holds the last" : "position 0") +
                        " when the last position is perturbed";
        r.figure = std::isfinite(smallest) ? smallest : 0.0;
        r.rule = "> 0";
        r.pass = r.figure > 0;
        r.detail = W ? "an encoder sees its window of " + std::to_string(W) + " (|i - j| < " + std::to_string(W) + ")"
                     : "an encoder sees the whole source";
        return r;
    });
}

}  // namespace attnlab
