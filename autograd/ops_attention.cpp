// The fused attention op: forward and backward side by side.
#include <cmath>
#include <limits>

#include "autograd/attention.h"
#include "autograd/cpu/attention_kernels.h"
#include "autograd/device_ops.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/shape.h"

namespace attnlab {

const Choices<MaskedRows>& masked_rows_choices() {
    static const Choices<MaskedRows> choices{"attention", "masked_rows ", {{MaskedRows::error, "error"}, {MaskedRows::zero, "zero"}}};
    return choices;
}

MaskedRows parse_masked_rows(const std::string& name) { return masked_rows_choices().parse(name); }

std::string to_string(MaskedRows policy) { return masked_rows_choices().name(policy); }

void check_token_spans(const char* op, const AttentionMask& mask, size_t B, size_t Tk) {
    if (!mask.variant.reads_tokens()) return;
    const TokenSpans& s = mask.spans;
    const size_t n = B * Tk;
    const bool sized = s.T == Tk && s.doc_begin.size() == (mask.variant.documents ? n : 0) &&
                       s.doc_end.size() == s.doc_begin.size() && s.prefix_end.size() == (mask.variant.prefix_lm ? n : 0);
    if (!sized)
        fail(op, "the variant reads the tokens (prefix-LM or documents) but the mask's token spans cover " +
                     std::to_string(s.T) + " positions, not the " + std::to_string(Tk) + " keys of " + std::to_string(B) +
                     " items");
}

void check_attention_mask(const char* op, const AttentionDims& d, const AttentionMask& mask) {
    check_token_spans(op, mask, d.B, d.Tk);
    if (mask.variant.sinks || mask.variant.rel_buckets > 0)  // the fused kernels compute the soft-cap alone (autograd/variant.h)
        fail(op, "sinks and T5's relative bias have no fused kernel; attention composed of ops applies them (as MultiHeadAttention does)");
    if (!mask.key_lengths.empty()) {
        if (mask.key_lengths.size() != d.B)
            fail(op, std::to_string(mask.key_lengths.size()) + " key lengths for batch " + std::to_string(d.B));
        for (size_t b = 0; b < d.B; ++b)
            if (mask.key_lengths[b] > d.Tk)
                fail(op, "key length " + std::to_string(mask.key_lengths[b]) + " of batch item " + std::to_string(b) +
                             " exceeds key count " + std::to_string(d.Tk));
    }
    if (mask.has_explicit()) {
        const Shape& s = mask.eligible.shape;
        if (s != Shape{d.Tq, d.Tk} && s != Shape{d.B, d.Tq, d.Tk})
            fail(op, "mask " + shape_str(s) + " must be (Tq, Tk) = " + shape_str({d.Tq, d.Tk}) + " or (B, Tq, Tk) = " +
                         shape_str({d.B, d.Tq, d.Tk}));
        if (mask.eligible.values.size() != numel_of(s))
            fail(op, "mask " + shape_str(s) + " holds " + std::to_string(mask.eligible.values.size()) + " values");
    }
}

void check_masked_rows(const AttentionMask& mask, MaskedRows policy, size_t B, size_t Tq, size_t Tk) {
    AttentionOptions options;
    options.masked_rows = policy;
    attention_kernels::check_masked_rows({B, 1, 1, Tq, Tk, 0, 0}, mask, options);
}

namespace {

using attention_kernels::Dims;
using attention_kernels::HeadView;

// The checks both layouts share, on dims already read from the shapes.
void check_common(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Dims& d,
                  const AttentionMask& mask, const AttentionOptions& options, const std::string& shapes) {
    check_same_dtype(op, q, k);
    check_same_dtype(op, q, v);
    if (k.size(0) != d.B || v.size(0) != d.B) fail(op, shapes + ": batch sizes differ");
    if (d.H_kv == 0 || d.H % d.H_kv != 0)
        fail(op, shapes + ": K/V heads (" + std::to_string(d.H_kv) + ") must divide query heads (" + std::to_string(d.H) + ")");
    check_attention_mask(op, d, mask);
    if (!(options.dropout >= 0.0 && options.dropout < 1.0))
        fail(op, "dropout " + std::to_string(options.dropout) + " is outside [0, 1)");
    const bool use_dropout = options.training && options.dropout > 0.0;
    if (use_dropout && options.rng == nullptr) fail(op, "dropout in training needs an Rng");
    if (options.path == AttentionPath::blockwise && use_dropout)
        fail(op, "the blockwise path keeps no weights to apply dropout to; use the dense path");
}

// q (B, H, Tq, d), k (B, H_kv, Tk, d), v (B, H_kv, Tk, d_v)
Dims check_split(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                 const AttentionOptions& options) {
    constexpr const char* op = "attention";
    check_defined(op, q, "q");
    check_defined(op, k, "k");
    check_defined(op, v, "v");
    const std::string shapes = "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape());
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) fail(op, shapes + ": expected (B, H, T, d) for each");
    const Dims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
    if (v.size(1) != d.H_kv || v.size(2) != d.Tk) fail(op, shapes + ": k and v disagree on heads or length");
    if (k.size(3) != d.d) fail(op, shapes + ": q and k head widths differ");
    check_common(op, q, k, v, d, mask, options, shapes);
    return d;
}

// q (B, Tq, H d), k (B, Tk, H_kv d), v (B, Tk, H_kv d_v)
Dims check_packed(const Tensor& q, const Tensor& k, const Tensor& v, size_t heads, size_t kv_heads,
                  const AttentionMask& mask, const AttentionOptions& options) {
    constexpr const char* op = "attention_packed";
    check_defined(op, q, "q");
    check_defined(op, k, "k");
    check_defined(op, v, "v");
    const std::string shapes = "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()) +
                               " with " + std::to_string(heads) + " heads over " + std::to_string(kv_heads) + " K/V heads";
    if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3) fail(op, shapes + ": expected (B, T, heads * width) for each");
    if (heads == 0 || kv_heads == 0 || q.size(2) % heads != 0 || k.size(2) % kv_heads != 0 || v.size(2) % kv_heads != 0)
        fail(op, shapes + ": the last axes must split evenly into heads");
    const Dims d{q.size(0), heads, kv_heads, q.size(1), k.size(1), q.size(2) / heads, v.size(2) / kv_heads};
    if (v.size(1) != d.Tk) fail(op, shapes + ": k and v lengths differ");
    if (k.size(2) / kv_heads != d.d) fail(op, shapes + ": q and k head widths differ");
    check_common(op, q, k, v, d, mask, options, shapes);
    return d;
}

// How a layout places each head: split (B, H, T, w) or packed (B, T, H w).
template <class T>
HeadView<T> view(T* data, size_t heads, size_t T_len, size_t width, bool packed) {
    if (packed) return {data, T_len * heads * width, width, heads * width};
    return {data, heads * T_len * width, T_len * width, width};
}

// Per head: the standard deviation of the eligible scaled scores, from the
// per-(b, h) count, sum and sum of squares, added over the batch in order.
std::vector<double> score_std_of(const std::vector<double>& moments, size_t B, size_t H) {
    std::vector<double> out;
    for (size_t h = 0; h < H; ++h) {
        double count = 0, sum = 0, sumsq = 0;
        for (size_t b = 0; b < B; ++b) {
            const double* m = moments.data() + (b * H + h) * 3;
            count += m[0];
            sum += m[1];
            sumsq += m[2];
        }
        out.push_back(std_from_moments(count, sum, sumsq));
    }
    return out;
}

// One call's operands in their layout: q, k, v read and the context written,
// each as view() places its heads.
template <class T>
struct Operands {
    HeadView<const T> Q, K, V;
    HeadView<T> C;  // into `context`, which the path records as the op's value
};

// The blockwise path: FlashAttention's online softmax over key blocks, no
// (Tq, Tk) buffer; the per-row log-sum-exp is kept and the backward recomputes
// each block's probabilities from it. Returns the context, in the graph.
template <class T>
Tensor blockwise_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Dims dims, bool packed,
                           const AttentionMask& mask, const AttentionOptions& options, const Operands<T>& x,
                           Array<T>&& context, AttentionResult& result) {
    namespace ak = attention_kernels;
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    const HeadView<const T> &Q = x.Q, &K = x.K, &V = x.V;
    const HeadView<T>& C = x.C;
    const T scale = static_cast<T>(options.scale);
    Array<T> lse = make_array<T>({B, H, Tq});  // log-sum-exp per query row, kept for the backward
    ak::blockwise_forward<T>(dims, Q, K, V, mask, scale, C, lse.data());
    if (options.need_weights) {  // computed beside the graph; the context above is not touched
        Array<T> weights = make_array<T>({B, H, Tq, Tk});
        std::vector<double> moments(options.need_score_std ? B * H * 3 : 0, 0.0);
        ak::dense_forward<T>(dims, Q, K, V, mask, scale, weights.data(), nullptr, {}, HeadView<T>{nullptr, 0, 0, 0},
                             options.need_score_std ? moments.data() : nullptr);
        result.weights = wrap<T>(std::move(weights));
        if (options.need_score_std) result.score_std = score_std_of(moments, B, H);
    }
    return record<T>(op, std::move(context), {q, k, v},
                     [q, k, v, dims, packed, mask, scale, lse = std::move(lse)](const Array<T>& g, const Array<T>& out) {
        const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
        auto in_view = [&](const Array<T>& a, size_t heads, size_t T_len, size_t width) {
            return view<const T>(a.data(), heads, T_len, width, packed);
        };
        Array<T> gq = make_array<T>(q.shape()), gk = make_array<T>(k.shape()), gv = make_array<T>(v.shape());
        gq.fill(T(0));
        gk.fill(T(0));
        gv.fill(T(0));
        ak::blockwise_backward<T>(dims, in_view(values_of<T>(q), H, Tq, d), in_view(values_of<T>(k), H_kv, Tk, d),
                                  in_view(values_of<T>(v), H_kv, Tk, d_v), mask, scale, in_view(out, H, Tq, d_v),
                                  lse.data(), in_view(g, H, Tq, d_v), view<T>(gq.data(), H, Tq, d, packed),
                                  view<T>(gk.data(), H_kv, Tk, d, packed),
                                  view<T>(gv.data(), H_kv, Tk, d_v, packed));
        send_grad<T>(q, [&] { return std::move(gq); });
        send_grad<T>(k, [&] { return std::move(gk); });
        send_grad<T>(v, [&] { return std::move(gv); });
    });
}

// The dense path: the scores written once into the (Tq, Tk) weight buffer kept
// for the backward (and dropout applied to it). Returns the context, in the graph.
template <class T>
Tensor dense_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Dims dims, bool packed,
                       const AttentionMask& mask, const AttentionOptions& options, const Operands<T>& x,
                       Array<T>&& context, AttentionResult& result) {
    namespace ak = attention_kernels;
    const bool use_dropout = options.training && options.dropout > 0.0;
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    const HeadView<const T> &Q = x.Q, &K = x.K, &V = x.V;
    const HeadView<T>& C = x.C;
    const T scale = static_cast<T>(options.scale);
    Array<T> weights = make_array<T>({B, H, Tq, Tk});  // A, kept for the backward
    Array<T> dropped;                                   // A after dropout (if any)
    std::vector<T> keep;                                // 1/(1-p) or 0 per weight
    if (use_dropout) {
        dropped = make_array<T>({B, H, Tq, Tk});
        keep.resize(B * H * Tq * Tk);
        const T keep_scale = static_cast<T>(1.0 / (1.0 - options.dropout));
        for (T& e : keep) e = options.rng->bernoulli(options.dropout) ? T(0) : keep_scale;  // drawn in order
    }
    const bool score_std = options.need_weights && options.need_score_std;
    std::vector<double> moments(score_std ? B * H * 3 : 0, 0.0);
    ak::dense_forward<T>(dims, Q, K, V, mask, scale, weights.data(), use_dropout ? dropped.data() : nullptr, keep, C,
                         score_std ? moments.data() : nullptr);
    if (options.need_weights)  // a copy only when the backward below keeps the weights
        result.weights = needs_graph({q, k, v}) ? wrap<T>(Array<T>(weights)) : wrap<T>(std::move(weights));
    if (score_std) result.score_std = score_std_of(moments, B, H);
    return record<T>(op, std::move(context), {q, k, v},
                     [q, k, v, dims, packed, scale, softcap = mask.variant.softcap, weights = std::move(weights), dropped = std::move(dropped),
                      keep = std::move(keep)](const Array<T>& g, const Array<T>&) {
        const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
        auto in_view = [&](const Array<T>& a, size_t heads, size_t T_len, size_t width) {
            return view<const T>(a.data(), heads, T_len, width, packed);
        };
        Array<T> gq = make_array<T>(q.shape()), gk = make_array<T>(k.shape()), gv = make_array<T>(v.shape());
        gq.fill(T(0));
        gk.fill(T(0));  // K/V gradients accumulate over the heads of a group
        gv.fill(T(0));
        ak::dense_backward<T>(dims, in_view(values_of<T>(q), H, Tq, d), in_view(values_of<T>(k), H_kv, Tk, d),
                              in_view(values_of<T>(v), H_kv, Tk, d_v), scale, softcap, weights.data(),
                              keep.empty() ? nullptr : dropped.data(), keep, in_view(g, H, Tq, d_v),
                              view<T>(gq.data(), H, Tq, d, packed), view<T>(gk.data(), H_kv, Tk, d, packed),
                              view<T>(gv.data(), H_kv, Tk, d_v, packed));
        send_grad<T>(q, [&] { return std::move(gq); });
        send_grad<T>(k, [&] { return std::move(gk); });
        send_grad<T>(v, [&] { return std::move(gv); });
    });
}

// The op behind both layouts. `shape_out` is the context's shape.
AttentionResult attention_impl(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Dims dims,
                               bool packed, const Shape& shape_out, const AttentionMask& mask,
                               const AttentionOptions& options) {
    namespace ak = attention_kernels;
    const bool use_dropout = options.training && options.dropout > 0.0;
    // Blockwise unless dropout needs the weights, or all keys fit in one key
    // block: then there is nothing to stream over, the kept weights are at most
    // kKeyBlock per query (memory still linear in the sequence), and the dense
    // backward skips the recomputation (30% faster at Tk = 32). Asking for the
    // weights never changes the path, so that it never changes the output either.
    const bool blockwise = options.path == AttentionPath::blockwise ||
                           (options.path == AttentionPath::automatic && !use_dropout && dims.Tk > ak::kKeyBlock);
    ak::check_masked_rows(dims, mask, options);
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;

    AttentionResult result;
    result.context = dispatch(q.dtype(), [&]<class T>() {
        auto in_view = [&](const Tensor& t, size_t heads, size_t T_len, size_t width) {
            return view<const T>(values_of<T>(t).data(), heads, T_len, width, packed);
        };
        Array<T> context = make_array<T>(shape_out);
        const Operands<T> x{in_view(q, H, Tq, d), in_view(k, H_kv, Tk, d), in_view(v, H_kv, Tk, d_v),
                            view<T>(context.data(), H, Tq, d_v, packed)};
        if (blockwise) return blockwise_attention<T>(op, q, k, v, dims, packed, mask, options, x, std::move(context), result);
        return dense_attention<T>(op, q, k, v, dims, packed, mask, options, x, std::move(context), result);
    });
    return result;
}

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                          const AttentionOptions& options) {
    constexpr const char* op = "attention";
    const Dims dims = check_split(q, k, v, mask, options);
    return attention_impl(op, q, k, v, dims, false, {dims.B, dims.H, dims.Tq, dims.d_v}, mask, options);
}

AttentionResult attention_packed(const Tensor& q, const Tensor& k, const Tensor& v, size_t heads, size_t kv_heads,
                                 const AttentionMask& mask, const AttentionOptions& options) {
    constexpr const char* op = "attention_packed";
    const Dims dims = check_packed(q, k, v, heads, kv_heads, mask, options);
    check_same_device(op, {&q, &k, &v});
    if (on_device(q)) return attention_packed_device(q, k, v, dims, mask, options);
    return attention_impl(op, q, k, v, dims, true, {dims.B, dims.Tq, dims.H * dims.d_v}, mask, options);
}

void add_attention_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(16);
    auto in = [&](const Shape& s) { return gradcheck_input(rng, s); };
    using V = const std::vector<Tensor>&;
    auto run = [](AttentionMask mask, AttentionOptions options) {
        return [mask, options](V t) { return attention(t[0], t[1], t[2], mask, options).context; };
    };
    AttentionMask causal;
    causal.causal = true;
    AttentionMask padding;
    padding.key_lengths = {2, 4};
    AttentionMask both = padding;
    both.causal = true;
    AttentionMask explicit_rows;
    explicit_rows.eligible = Mask({3, 3}, {1, 0, 1, 0, 0, 0, 1, 1, 0});  // row 1 has no eligible key
    for (AttentionPath path : {AttentionPath::dense, AttentionPath::blockwise}) {
        const std::string on = path == AttentionPath::dense ? " (dense)" : " (blockwise)";
        AttentionOptions plain;
        plain.scale = 1.0 / std::sqrt(3.0);
        plain.path = path;
        cases.push_back({"attention", "no mask (2,2,3,3)" + on, {in({2, 2, 3, 3}), in({2, 2, 3, 3}), in({2, 2, 3, 2})},
                         run({}, plain)});
        cases.push_back({"attention", "causal, Tq=2 < Tk=4 (bottom-right)" + on,
                         {in({1, 2, 2, 3}), in({1, 2, 4, 3}), in({1, 2, 4, 3})}, run(causal, plain)});
        cases.push_back({"attention", "key padding, lengths 2 and 4" + on,
                         {in({2, 1, 3, 3}), in({2, 1, 4, 3}), in({2, 1, 4, 3})}, run(padding, plain)});
        cases.push_back({"attention", "causal AND key padding" + on, {in({2, 2, 4, 2}), in({2, 2, 4, 2}), in({2, 2, 4, 2})},
                         run(both, plain)});
        AttentionOptions zero_rows = plain;
        zero_rows.masked_rows = MaskedRows::zero;
        cases.push_back({"attention", "explicit mask with an all-masked row, policy zero" + on,
                         {in({1, 1, 3, 2}), in({1, 1, 3, 2}), in({1, 1, 3, 2})}, run(explicit_rows, zero_rows)});
        cases.push_back({"attention", "grouped K/V: 4 query heads over 2 K/V heads" + on,
                         {in({1, 4, 3, 2}), in({1, 2, 3, 2}), in({1, 2, 3, 2})}, run(causal, plain)});
        // the packed layout: (B, T, H d) with 2 query heads over 1 K/V head, causal and padded
        cases.push_back({"attention_packed", "(2,3,2*2) over (2,4,1*2), causal AND key padding" + on,
                         {in({2, 3, 4}), in({2, 4, 2}), in({2, 4, 2})}, [both, plain](V t) {
                             return attention_packed(t[0], t[1], t[2], 2, 1, both, plain).context;
                         }});
    }
    AttentionOptions with_dropout;
    with_dropout.scale = 1.0 / std::sqrt(3.0);
    with_dropout.dropout = 0.3;
    with_dropout.training = true;
    cases.push_back({"attention", "dropout 0.3, fixed seed (dense)", {in({1, 2, 3, 2}), in({1, 2, 3, 2}), in({1, 2, 3, 2})},
                     [with_dropout](V t) {
                         Rng r(5);
                         AttentionOptions o = with_dropout;
                         o.rng = &r;
                         return attention(t[0], t[1], t[2], {}, o).context;
                     }});
    AttentionMask alibi = both;
    alibi.variant.alibi = true;
    for (AttentionPath path : {AttentionPath::dense, AttentionPath::blockwise}) {
        AttentionOptions plain;
        plain.scale = 0.5;
        plain.path = path;
        cases.push_back({"attention", std::string("ALiBi, causal and padding, 3 heads") +
                                          (path == AttentionPath::dense ? " (dense)" : " (blockwise)"),
                         {in({2, 3, 3, 2}), in({2, 3, 4, 2}), in({2, 3, 4, 2})}, run(alibi, plain)});
    }
    cases.push_back({"attention_scores", "ALiBi, causal, through softmax", {in({2, 3, 4}), in({2, 4, 4})},
                     [alibi](V t) { return softmax(attention_scores(t[0], t[1], 2, 2, alibi, 0.5), -1); }});
    // the scores written out of ops (packed layout, grouped K/V), through a softmax: -inf never reaches the check
    cases.push_back({"attention_scores", "causal, grouped K/V, (2,3,2 x 2) with (2,4,1 x 2), through softmax",
                     {in({2, 3, 4}), in({2, 4, 2})}, [causal](V t) { return softmax(attention_scores(t[0], t[1], 2, 1, causal, 0.5), -1); }});
}

}  // namespace attnlab
