// The fused attention op: forward and backward side by side.
#include <cmath>
#include <limits>

#include "autograd/attention.h"
#include "autograd/blas.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/shape.h"

namespace attnlab {

MaskedRows parse_masked_rows(const std::string& name) {
    if (name == "error") return MaskedRows::error;
    if (name == "zero") return MaskedRows::zero;
    fail("attention", "masked_rows must be \"error\" or \"zero\", got \"" + name + "\"");
}

std::string to_string(MaskedRows policy) { return policy == MaskedRows::error ? "error" : "zero"; }

namespace {

struct Dims {
    size_t B, H, H_kv, Tq, Tk, d, d_v;
};

Dims check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                          const AttentionOptions& options) {
    constexpr const char* op = "attention";
    check_defined(op, q, "q");
    check_defined(op, k, "k");
    check_defined(op, v, "v");
    const std::string shapes = "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape());
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) fail(op, shapes + ": expected (B, H, T, d) for each");
    check_same_dtype(op, q, k);
    check_same_dtype(op, q, v);
    const Dims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
    if (k.size(0) != d.B || v.size(0) != d.B) fail(op, shapes + ": batch sizes differ");
    if (v.size(1) != d.H_kv || v.size(2) != d.Tk) fail(op, shapes + ": k and v disagree on heads or length");
    if (k.size(3) != d.d) fail(op, shapes + ": q and k head widths differ");
    if (d.H_kv == 0 || d.H % d.H_kv != 0)
        fail(op, shapes + ": K/V heads (" + std::to_string(d.H_kv) + ") must divide query heads (" + std::to_string(d.H) + ")");
    if (!mask.key_lengths.empty()) {
        if (mask.key_lengths.size() != d.B)
            fail(op, std::to_string(mask.key_lengths.size()) + " key lengths for batch " + std::to_string(d.B));
        for (size_t b = 0; b < d.B; ++b)
            if (mask.key_lengths[b] > d.Tk)
                fail(op, "key length " + std::to_string(mask.key_lengths[b]) + " of batch item " + std::to_string(b) +
                             " exceeds key count " + std::to_string(d.Tk));
    }
    if (!mask.eligible.values.empty()) {
        const Shape& s = mask.eligible.shape;
        if (s != Shape{d.Tq, d.Tk} && s != Shape{d.B, d.Tq, d.Tk})
            fail(op, "mask " + shape_str(s) + " must be (Tq, Tk) = " + shape_str({d.Tq, d.Tk}) + " or (B, Tq, Tk) = " +
                         shape_str({d.B, d.Tq, d.Tk}));
    }
    if (!(options.dropout >= 0.0 && options.dropout < 1.0))
        fail(op, "dropout " + std::to_string(options.dropout) + " is outside [0, 1)");
    if (options.training && options.dropout > 0.0 && options.rng == nullptr)
        fail(op, "dropout in training needs an Rng");
    return d;
}

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                          const AttentionOptions& options) {
    constexpr const char* op = "attention";
    const Dims dims = check_attention_args(q, k, v, mask, options);
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    const size_t group = H / H_kv;  // query heads per K/V head
    const bool use_dropout = options.training && options.dropout > 0.0;

    AttentionResult result;
    result.context = dispatch(q.dtype(), [&]<class T>() {
        const T* Q = values_of<T>(q).data();
        const T* K = values_of<T>(k).data();
        const T* V = values_of<T>(v).data();
        const T scale = static_cast<T>(options.scale);
        Array<T> weights = make_array<T>({B, H, Tq, Tk});   // A, kept for the backward
        Array<T> dropped;                                     // A after dropout (if any)
        Array<T> context = make_array<T>({B, H, Tq, d_v});
        if (use_dropout) dropped = make_array<T>({B, H, Tq, Tk});
        const T keep_scale = static_cast<T>(1.0 / (1.0 - options.dropout));
        std::vector<double> score_sum(H, 0.0), score_sumsq(H, 0.0), score_count(H, 0.0);  // need_weights only

        for (size_t b = 0; b < B; ++b)
            for (size_t h = 0; h < H; ++h) {
                const size_t kv = b * H_kv + h / group;
                const T* Qh = Q + (b * H + h) * Tq * d;   // (Tq, d)
                const T* Kh = K + kv * Tk * d;            // (Tk, d)
                const T* Vh = V + kv * Tk * d_v;          // (Tk, d_v)
                T* A = weights.data() + (b * H + h) * Tq * Tk;  // (Tq, Tk)
                // scores = scale Q K^T, written into A and turned into weights in place
                gemm<T>(false, true, Tq, Tk, d, scale, Qh, Kh, T(0), A);
                const bool explicit_mask = mask.has_explicit();
                if (options.need_weights)
                    for (size_t i = 0; i < Tq; ++i)
                        for (size_t j = 0, end = mask.key_end(b, i, Tq, Tk); j < end; ++j)
                            if (!explicit_mask || mask.allows(b, i, j, Tq, Tk)) {
                                const double s = A[i * Tk + j];
                                score_sum[h] += s;
                                score_sumsq[h] += s * s;
                                score_count[h] += 1;
                            }
                for (size_t i = 0; i < Tq; ++i) {
                    T* row = A + i * Tk;
                    const size_t end = mask.key_end(b, i, Tq, Tk);  // keys >= end are ineligible
                    T m = -std::numeric_limits<T>::infinity();
                    bool any_eligible = false;
                    for (size_t j = 0; j < end; ++j)
                        if (!explicit_mask || mask.allows(b, i, j, Tq, Tk)) {
                            m = std::max(m, row[j]);
                            any_eligible = true;
                        }
                    // A row whose eligible scores overflowed (inf, NaN) is not a masking
                    // matter: it goes on to NaN weights, which the loss then reports.
                    if (!any_eligible) {
                        if (options.masked_rows == MaskedRows::error)
                            fail(op, "batch item " + std::to_string(b) + ", query position " + std::to_string(i) +
                                         " has no eligible key (masked_rows = \"error\"; use \"zero\" to allow it)");
                        std::fill(row, row + Tk, T(0));
                        continue;
                    }
                    T total = 0;
                    for (size_t j = 0; j < end; ++j) {
                        row[j] = !explicit_mask || mask.allows(b, i, j, Tq, Tk) ? std::exp(row[j] - m) : T(0);
                        total += row[j];
                    }
                    const T inverse = T(1) / total;
                    for (size_t j = 0; j < end; ++j) row[j] *= inverse;
                    std::fill(row + end, row + Tk, T(0));
                }
                const T* P = A;  // the weights the values are mixed with
                if (use_dropout) {
                    T* Ad = dropped.data() + (b * H + h) * Tq * Tk;
                    for (size_t e = 0; e < Tq * Tk; ++e) Ad[e] = options.rng->bernoulli(options.dropout) ? T(0) : A[e] * keep_scale;
                    P = Ad;
                }
                // context = P V   (Tq, d_v)
                gemm<T>(false, false, Tq, d_v, Tk, T(1), P, Vh, T(0), context.data() + (b * H + h) * Tq * d_v);
            }

        if (options.need_weights) {
            result.weights = wrap<T>(Array<T>(weights));
            for (size_t h = 0; h < H; ++h) {
                const double n = std::max(score_count[h], 1.0), mean = score_sum[h] / n;
                result.score_std.push_back(std::sqrt(std::max(0.0, score_sumsq[h] / n - mean * mean)));
            }
        }
        return record<T>(op, std::move(context), {q, k, v},
                         [q, k, v, dims, group, scale, keep_scale, use_dropout, weights = std::move(weights),
                          dropped = std::move(dropped)](const Array<T>& g, const Array<T>&) {
            const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
            const T* Q = values_of<T>(q).data();
            const T* K = values_of<T>(k).data();
            const T* V = values_of<T>(v).data();
            Array<T> gq = make_array<T>(q.shape());
            Array<T> gk = make_array<T>(k.shape());
            Array<T> gv = make_array<T>(v.shape());
            gk.fill(T(0));  // K/V gradients accumulate over the heads of a group
            gv.fill(T(0));
            std::vector<T> dA(Tq * Tk);  // gradient of the weights, then of the scores
            for (size_t b = 0; b < B; ++b)
                for (size_t h = 0; h < H; ++h) {
                    const size_t kv = b * H_kv + h / group;
                    const T* A = weights.data() + (b * H + h) * Tq * Tk;
                    const T* P = use_dropout ? dropped.data() + (b * H + h) * Tq * Tk : A;
                    const T* G = g.data() + (b * H + h) * Tq * d_v;  // dC (Tq, d_v)
                    // dV += P^T dC   (Tk, d_v)
                    gemm<T>(true, false, Tk, d_v, Tq, T(1), P, G, T(1), gv.data() + kv * Tk * d_v);
                    // dP = dC V^T   (Tq, Tk); through dropout: dA = dP * keep/(1-p)
                    gemm<T>(false, true, Tq, Tk, d_v, T(1), G, V + kv * Tk * d_v, T(0), dA.data());
                    if (use_dropout)
                        for (size_t e = 0; e < Tq * Tk; ++e) dA[e] = P[e] != T(0) ? dA[e] * keep_scale : T(0);
                    // softmax backward: dS_ij = A_ij (dA_ij - sum_k dA_ik A_ik), times the scale.
                    // Ineligible keys and all-masked rows have A = 0, so they get exactly 0.
                    for (size_t i = 0; i < Tq; ++i) {
                        T* row = dA.data() + i * Tk;
                        const T* a = A + i * Tk;
                        T dot = 0;
                        for (size_t j = 0; j < Tk; ++j) dot += row[j] * a[j];
                        for (size_t j = 0; j < Tk; ++j) row[j] = scale * a[j] * (row[j] - dot);
                    }
                    // dQ = dS K   (Tq, d);  dK += dS^T Q   (Tk, d)
                    gemm<T>(false, false, Tq, d, Tk, T(1), dA.data(), K + kv * Tk * d, T(0), gq.data() + (b * H + h) * Tq * d);
                    gemm<T>(true, false, Tk, d, Tq, T(1), dA.data(), Q + (b * H + h) * Tq * d, T(1), gk.data() + kv * Tk * d);
                }
            send_grad<T>(q, [&] { return std::move(gq); });
            send_grad<T>(k, [&] { return std::move(gk); });
            send_grad<T>(v, [&] { return std::move(gv); });
        });
    });
    return result;
}

void add_attention_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(16);
    auto in = [&](const Shape& s) { return gradcheck_input(rng, s); };
    using V = const std::vector<Tensor>&;
    auto run = [](AttentionMask mask, AttentionOptions options) {
        return [mask, options](V t) { return attention(t[0], t[1], t[2], mask, options).context; };
    };
    AttentionOptions plain;
    plain.scale = 1.0 / std::sqrt(3.0);
    cases.push_back({"attention", "no mask (2,2,3,3)", {in({2, 2, 3, 3}), in({2, 2, 3, 3}), in({2, 2, 3, 2})},
                     run({}, plain)});
    AttentionMask causal;
    causal.causal = true;
    cases.push_back({"attention", "causal, Tq=2 < Tk=4 (bottom-right)", {in({1, 2, 2, 3}), in({1, 2, 4, 3}), in({1, 2, 4, 3})},
                     run(causal, plain)});
    AttentionMask padding;
    padding.key_lengths = {2, 4};
    cases.push_back({"attention", "key padding, lengths 2 and 4", {in({2, 1, 3, 3}), in({2, 1, 4, 3}), in({2, 1, 4, 3})},
                     run(padding, plain)});
    AttentionMask both = padding;
    both.causal = true;
    cases.push_back({"attention", "causal AND key padding", {in({2, 2, 4, 2}), in({2, 2, 4, 2}), in({2, 2, 4, 2})},
                     run(both, plain)});
    AttentionMask explicit_rows;
    explicit_rows.eligible = Mask({3, 3}, {1, 0, 1, 0, 0, 0, 1, 1, 0});  // row 1 has no eligible key
    AttentionOptions zero_rows = plain;
    zero_rows.masked_rows = MaskedRows::zero;
    cases.push_back({"attention", "explicit mask with an all-masked row, policy zero",
                     {in({1, 1, 3, 2}), in({1, 1, 3, 2}), in({1, 1, 3, 2})}, run(explicit_rows, zero_rows)});
    cases.push_back({"attention", "grouped K/V: 4 query heads over 2 K/V heads",
                     {in({1, 4, 3, 2}), in({1, 2, 3, 2}), in({1, 2, 3, 2})}, run(causal, plain)});
    AttentionOptions with_dropout = plain;
    with_dropout.dropout = 0.3;
    with_dropout.training = true;
    cases.push_back({"attention", "dropout 0.3, fixed seed", {in({1, 2, 3, 2}), in({1, 2, 3, 2}), in({1, 2, 3, 2})},
                     [with_dropout](V t) {
                         Rng r(5);
                         AttentionOptions o = with_dropout;
                         o.rng = &r;
                         return attention(t[0], t[1], t[2], {}, o).context;
                     }});
}

}  // namespace attnlab
