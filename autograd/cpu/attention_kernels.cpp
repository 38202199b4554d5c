#include "autograd/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "autograd/cpu/blas.h"
#include "autograd/cpu/kernels.h"
#include "autograd/pointwise.h"
#include "autograd/tensor.h"
#include "autograd/cpu/threads.h"

namespace attnlab::attention_kernels {

namespace {

constexpr size_t kQueryBlock = 64;   // blockwise: query rows per block

template <class T> constexpr T minus_infinity() { return -std::numeric_limits<T>::infinity(); }

// Runs task(b, kv) for every (batch item, K/V head) on the pool; `Scratch` is
// one per chunk of tasks, reused across them. A chunk takes at least
// kParallelWork multiply-adds of scores and weighted values, as a GEMM must:
// small heads are not worth a thread each.
template <class Scratch, class Task>
void for_each_group(const Dims& dims, Task&& task) {
    const size_t work = dims.group() * dims.Tq * dims.Tk * (dims.d + dims.d_v);
    parallel_for(dims.B * dims.H_kv, [&](size_t begin, size_t end) {
        Scratch scratch;
        for (size_t t = begin; t < end; ++t) task(t / dims.H_kv, t % dims.H_kv, scratch);
    }, std::max<size_t>(1, kParallelWork / std::max<size_t>(work, 1)));
}

// Sets the scores of ineligible keys j0 .. j0 + n of query i (head h) to -inf,
// and adds ALiBi's bias to the others when the mask asks for it.
template <class T>
void mask_row(T* row, const AttentionMask& mask, size_t b, size_t h, size_t i, size_t j0, size_t n, const Dims& dims) {
    const size_t end = mask.key_end(b, i, dims.Tq, dims.Tk);
    const size_t eligible_end = std::clamp(end, j0, j0 + n) - j0;  // columns >= this are beyond the key end
    std::fill(row + eligible_end, row + n, minus_infinity<T>());
    if (mask.checks_each_key())
        for (size_t c = 0; c < eligible_end; ++c)
            if (!mask.allows(b, i, j0 + c, dims.Tq, dims.Tk)) row[c] = minus_infinity<T>();
    if (mask.variant.alibi)
        for (size_t c = 0; c < eligible_end; ++c)
            row[c] += static_cast<T>(alibi_bias(h, dims.H, i, j0 + c, dims.Tq, dims.Tk));  // -inf stays -inf
}

// The variant's soft-cap (autograd/pointwise.h's SoftCap: c tanh(s / c)) on the
// scaled scores row[0, n), in place, before the mask and ALiBi's bias as
// modify_scores (autograd/variant.h) orders them. Nothing without a cap.
template <class T>
void cap_row(T* row, size_t n, double softcap) {
    if (softcap > 0.0) kernels::pointwise_forward(pointwise::index_of<pointwise::SoftCap>, row, T(softcap), row, n);
}

// dS = dS_capped f'(S) over [0, n): the cap's derivative at the raw scaled
// scores `raw`, from SoftCap's definition; `scratch` holds n values.
template <class T>
void through_cap(T* grad, const T* raw, size_t n, double softcap, T* scratch) {
    if (softcap <= 0.0) return;
    kernels::pointwise_backward(pointwise::index_of<pointwise::SoftCap>, grad, raw, T(softcap), scratch, n);
    std::copy(scratch, scratch + n, grad);
}

// The first key that any query in [i0, i1) of batch item b may see, rounded down
// to a key block: the blocks before it are ineligible for every row (a window's past).
size_t block_key_begin(const AttentionMask& mask, size_t b, size_t i0, size_t i1, const Dims& dims, size_t block) {
    size_t begin = dims.Tk;
    for (size_t i = i0; i < i1; ++i) begin = std::min(begin, mask.key_begin(b, i, dims.Tq, dims.Tk));
    return begin / block * block;
}

// The last key + 1 that any query in [i0, i1) of batch item b may see.
size_t block_key_end(const AttentionMask& mask, size_t b, size_t i0, size_t i1, const Dims& dims) {
    size_t end = 0;
    for (size_t i = i0; i < i1; ++i) end = std::max(end, mask.key_end(b, i, dims.Tq, dims.Tk));
    return end;
}

template <class T>
bool contains_nan(const T* x, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (x[i] != x[i]) return true;
    return false;
}

// The keys [0, extent) of a (Tq, Tk) weight matrix that carry any weight; the
// others are zero in every row (padding, for one). Scans from the right and
// stops at the first nonzero of each row: O(1) per row without padding.
template <class T>
size_t weighted_key_extent(const T* A, size_t Tq, size_t Tk) {
    size_t extent = 0;
    for (size_t i = Tq; i-- > 0 && extent < Tk;) {
        const T* a = A + i * Tk;
        size_t j = Tk;
        while (j > extent && a[j - 1] == T(0)) --j;
        extent = j;
    }
    return extent;
}

}  // namespace

void check_masked_rows(const Dims& dims, const AttentionMask& mask, const AttentionOptions& options) {
    if (options.masked_rows != MaskedRows::error) return;
    for (size_t b = 0; b < dims.B; ++b)
        for (size_t i = 0; i < dims.Tq; ++i) {
            const size_t end = mask.key_end(b, i, dims.Tq, dims.Tk);
            bool any = false;
            for (size_t j = 0; j < end && !any; ++j) any = !mask.checks_each_key() || mask.allows(b, i, j, dims.Tq, dims.Tk);
            if (!any)
                fail("attention", "batch item " + std::to_string(b) + ", query position " + std::to_string(i) +
                                      " has no eligible key (masked_rows = \"error\"; use \"zero\" to allow it)");
        }
}

// ---- dense ----

template <class T>
void dense_forward(const Dims& dims, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v,
                   const AttentionMask& mask, T scale, T* weights, T* dropped, const std::vector<T>& keep,
                   HeadView<T> out, double* score_moments) {
    const size_t Tq = dims.Tq, Tk = dims.Tk;
    struct None {};
    for_each_group<None>(dims, [&](size_t b, size_t kv, None&) {
        // keys >= live are ineligible for every query of b: their K/V rows are never read
        const size_t live = block_key_end(mask, b, 0, Tq, dims);
        for (size_t h = kv * dims.group(); h < (kv + 1) * dims.group(); ++h) {
            T* A = weights + (b * dims.H + h) * Tq * Tk;  // (Tq, Tk)
            // scores = scale Q K^T, written into A and turned into weights in place; mask_row
            // fills the columns >= live (>= every row's key end) with -inf
            gemm<T>(false, true, Tq, live, dims.d, scale, q.at(b, h), q.row, k.at(b, kv), k.row, T(0), A, Tk);
            for (size_t i = 0; i < Tq; ++i) {
                cap_row(A + i * Tk, live, mask.variant.softcap);
                mask_row(A + i * Tk, mask, b, h, i, 0, Tk, dims);
            }
            if (score_moments) {
                double* m = score_moments + (b * dims.H + h) * 3;
                for (size_t e = 0; e < Tq * Tk; ++e)
                    if (A[e] != minus_infinity<T>()) {
                        m[0] += 1;
                        m[1] += A[e];
                        m[2] += static_cast<double>(A[e]) * A[e];
                    }
            }
            for (size_t i = 0; i < Tq; ++i) {
                T* row = A + i * Tk;
                const size_t end = mask.key_end(b, i, Tq, Tk);  // keys >= end are ineligible
                T m = end ? kernels::max(row, end) : minus_infinity<T>();  // vectorised: exact in any order
                // A row whose eligible scores overflowed (inf, NaN) is not a masking
                // matter: it goes on to NaN weights, which the loss then reports.
                // The maximum of a row holding a NaN may be the NaN or not; a row whose
                // eligible scores are all NaN and -inf may land here, and is sent on
                // to NaN weights too.
                if (m == minus_infinity<T>()) {
                    if (!contains_nan(row, end)) {  // no eligible key: policy "zero" (check_masked_rows ran)
                        std::fill(row, row + Tk, T(0));
                        continue;
                    }
                    m = std::numeric_limits<T>::quiet_NaN();
                }
                const T inverse = T(1) / kernels::exp_shifted(row, m, row, end);
                for (size_t j = 0; j < end; ++j) row[j] *= inverse;
                std::fill(row + end, row + Tk, T(0));
            }
            const T* P = A;  // the weights the values are mixed with
            if (dropped) {
                T* Ad = dropped + (b * dims.H + h) * Tq * Tk;
                const T* keep_h = keep.data() + (b * dims.H + h) * Tq * Tk;
                for (size_t e = 0; e < Tq * Tk; ++e) Ad[e] = A[e] * keep_h[e];
                P = Ad;
            }
            // context = P V   (Tq, d_v) over the live keys; no context wanted (weights only) when out.data is null
            if (out.data)
                gemm<T>(false, false, Tq, dims.d_v, live, T(1), P, Tk, v.at(b, kv), v.row, T(0), out.at(b, h), out.row);
        }
    });
}

template <class T>
void dense_backward(const Dims& dims, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v, T scale,
                    double softcap, const T* weights, const T* dropped, const std::vector<T>& keep,
                    HeadView<const T> grad_out, HeadView<T> dq, HeadView<T> dk, HeadView<T> dv) {
    const size_t Tq = dims.Tq, Tk = dims.Tk, d = dims.d, d_v = dims.d_v;
    struct Scratch {
        std::vector<T> dA, raw, row;  // (Tq, Tk) gradient of the weights, then of the scores; with a cap: the raw scores, one row
    };
    for_each_group<Scratch>(dims, [&](size_t b, size_t kv, Scratch& s) {
        std::vector<T>& dA = s.dA;
        dA.resize(Tq * Tk);  // gradient of the weights, then of the scores
        if (softcap > 0.0) {
            s.raw.resize(Tq * Tk);
            s.row.resize(Tk);
        }
        for (size_t h = kv * dims.group(); h < (kv + 1) * dims.group(); ++h) {
            const T* A = weights + (b * dims.H + h) * Tq * Tk;
            const T* P = dropped ? dropped + (b * dims.H + h) * Tq * Tk : A;
            const T* G = grad_out.at(b, h);  // dC (Tq, d_v)
            // Keys >= live have zero weight in every row: they get no gradient, and
            // their K/V rows are never read (as in the forward).
            const size_t live = weighted_key_extent(A, Tq, Tk);
            // dV += P^T dC   (live, d_v)
            gemm<T>(true, false, live, d_v, Tq, T(1), P, Tk, G, grad_out.row, T(1), dv.at(b, kv), dv.row);
            // dP = dC V^T   (Tq, live), in dA with row stride Tk; through dropout: dA = dP * keep
            gemm<T>(false, true, Tq, live, d_v, T(1), G, grad_out.row, v.at(b, kv), v.row, T(0), dA.data(), Tk);
            if (dropped) {
                const T* keep_h = keep.data() + (b * dims.H + h) * Tq * Tk;
                for (size_t i = 0; i < Tq; ++i)
                    for (size_t j = 0; j < live; ++j) dA[i * Tk + j] *= keep_h[i * Tk + j];
            }
            // softmax backward: dS_ij = A_ij (dA_ij - sum_k dA_ik A_ik), times the scale.
            // Ineligible keys and all-masked rows have A = 0, so they get exactly 0.
            for (size_t i = 0; i < Tq; ++i) {
                T* row = dA.data() + i * Tk;
                const T* a = A + i * Tk;
                const T dot = kernels::dot(row, a, live);
                for (size_t j = 0; j < live; ++j) row[j] = scale * a[j] * (row[j] - dot);
            }
            // with a cap, through its derivative at the raw scaled scores, recomputed (Tq, live)
            if (softcap > 0.0 && live > 0) {
                gemm<T>(false, true, Tq, live, d, scale, q.at(b, h), q.row, k.at(b, kv), k.row, T(0), s.raw.data(), Tk);
                for (size_t i = 0; i < Tq; ++i) through_cap(dA.data() + i * Tk, s.raw.data() + i * Tk, live, softcap, s.row.data());
            }
            // dQ = dS K   (Tq, d);  dK += dS^T Q   (live, d)
            gemm<T>(false, false, Tq, d, live, T(1), dA.data(), Tk, k.at(b, kv), k.row, T(0), dq.at(b, h), dq.row);
            gemm<T>(true, false, live, d, Tq, T(1), dA.data(), Tk, q.at(b, h), q.row, T(1), dk.at(b, kv), dk.row);
        }
    });
}

// ---- blockwise ----

template <class T>
void blockwise_forward(const Dims& dims, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v,
                       const AttentionMask& mask, T scale, HeadView<T> out, T* lse) {
    const size_t Tq = dims.Tq, d_v = dims.d_v;
    struct Scratch {
        std::vector<T> S, acc, m, l;  // (Bq, Bk) scores; (Bq, d_v) running sum; running max and total per row
    };
    for_each_group<Scratch>(dims, [&](size_t b, size_t kv, Scratch& s) {
        s.S.resize(kQueryBlock * kKeyBlock);
        s.acc.resize(kQueryBlock * d_v);
        s.m.resize(kQueryBlock);
        s.l.resize(kQueryBlock);
        for (size_t h = kv * dims.group(); h < (kv + 1) * dims.group(); ++h)
            for (size_t i0 = 0; i0 < Tq; i0 += kQueryBlock) {
                const size_t rows = std::min(kQueryBlock, Tq - i0);
                std::fill(s.m.begin(), s.m.end(), minus_infinity<T>());
                std::fill(s.l.begin(), s.l.end(), T(0));
                std::fill(s.acc.begin(), s.acc.end(), T(0));
                const size_t key_end = block_key_end(mask, b, i0, i0 + rows, dims);
                for (size_t j0 = block_key_begin(mask, b, i0, i0 + rows, dims, kKeyBlock); j0 < key_end; j0 += kKeyBlock) {
                    const size_t cols = std::min(kKeyBlock, key_end - j0);
                    // S = scale Q_i K_j^T   (rows, cols)
                    gemm<T>(false, true, rows, cols, dims.d, scale, q.at(b, h) + i0 * q.row, q.row,
                            k.at(b, kv) + j0 * k.row, k.row, T(0), s.S.data(), cols);
                    for (size_t r = 0; r < rows; ++r) {
                        T* row = s.S.data() + r * cols;
                        cap_row(row, cols, mask.variant.softcap);
                        mask_row(row, mask, b, h, i0 + r, j0, cols, dims);
                        T m_new = std::max(s.m[r], *std::max_element(row, row + cols));
                        if (m_new == minus_infinity<T>()) {
                            // std::max and max_element pass over NaN, so a block of NaN (and
                            // -inf) scores lands here; a NaN score makes the row's output NaN,
                            // as on the dense path, rather than being skipped with the block
                            if (!contains_nan(row, cols)) {  // nothing eligible yet
                                std::fill(row, row + cols, T(0));
                                continue;
                            }
                            m_new = std::numeric_limits<T>::quiet_NaN();
                        }
                        // l = l e^(m - m_new) + sum_j e^(S_j - m_new);  acc likewise rescaled
                        const T alpha = s.m[r] == minus_infinity<T>() ? T(0) : std::exp(s.m[r] - m_new);
                        s.l[r] = s.l[r] * alpha + kernels::exp_shifted(row, m_new, row, cols);
                        if (alpha != T(1))
                            for (size_t c = 0; c < d_v; ++c) s.acc[r * d_v + c] *= alpha;
                        s.m[r] = m_new;
                    }
                    // acc += P V_j   (rows, d_v)
                    gemm<T>(false, false, rows, d_v, cols, T(1), s.S.data(), cols, v.at(b, kv) + j0 * v.row, v.row,
                            T(1), s.acc.data(), d_v);
                }
                for (size_t r = 0; r < rows; ++r) {
                    T* o = out.at(b, h) + (i0 + r) * out.row;
                    T* L = lse + (b * dims.H + h) * Tq + i0 + r;
                    if (s.l[r] == T(0)) {  // no eligible key: policy "zero"
                        std::fill(o, o + d_v, T(0));
                        *L = minus_infinity<T>();
                        continue;
                    }
                    const T inverse = T(1) / s.l[r];
                    for (size_t c = 0; c < d_v; ++c) o[c] = s.acc[r * d_v + c] * inverse;
                    *L = s.m[r] + std::log(s.l[r]);
                }
            }
    });
}

template <class T>
void blockwise_backward(const Dims& dims, HeadView<const T> q, HeadView<const T> k, HeadView<const T> v,
                        const AttentionMask& mask, T scale, HeadView<const T> out, const T* lse,
                        HeadView<const T> grad_out, HeadView<T> dq, HeadView<T> dk, HeadView<T> dv) {
    const size_t Tq = dims.Tq, d = dims.d, d_v = dims.d_v;
    const double softcap = mask.variant.softcap;
    struct Scratch {
        std::vector<T> P, dP, D;  // (Bq, Bk) probabilities and their gradient; D_i = dO_i . O_i
        std::vector<T> raw, row;  // with a cap: (Bq, Bk) raw scaled scores; one row
    };
    for_each_group<Scratch>(dims, [&](size_t b, size_t kv, Scratch& s) {
        s.P.resize(kQueryBlock * kKeyBlock);
        s.dP.resize(kQueryBlock * kKeyBlock);
        s.D.resize(kQueryBlock);
        if (softcap > 0.0) {
            s.raw.resize(kQueryBlock * kKeyBlock);
            s.row.resize(kKeyBlock);
        }
        for (size_t h = kv * dims.group(); h < (kv + 1) * dims.group(); ++h)
            for (size_t i0 = 0; i0 < Tq; i0 += kQueryBlock) {
                const size_t rows = std::min(kQueryBlock, Tq - i0);
                const T* L = lse + (b * dims.H + h) * Tq + i0;
                const T* dO = grad_out.at(b, h) + i0 * grad_out.row;
                for (size_t r = 0; r < rows; ++r)
                    s.D[r] = kernels::dot(dO + r * grad_out.row, out.at(b, h) + (i0 + r) * out.row, d_v);
                const size_t key_end = block_key_end(mask, b, i0, i0 + rows, dims);
                for (size_t j0 = block_key_begin(mask, b, i0, i0 + rows, dims, kKeyBlock); j0 < key_end; j0 += kKeyBlock) {
                    const size_t cols = std::min(kKeyBlock, key_end - j0);
                    // P = exp(scale Q_i K_j^T - L_i), 0 where ineligible or where the row has no key
                    gemm<T>(false, true, rows, cols, d, scale, q.at(b, h) + i0 * q.row, q.row, k.at(b, kv) + j0 * k.row,
                            k.row, T(0), s.P.data(), cols);
                    if (softcap > 0.0) std::copy(s.P.begin(), s.P.begin() + rows * cols, s.raw.begin());
                    for (size_t r = 0; r < rows; ++r) {
                        T* row = s.P.data() + r * cols;
                        if (L[r] == minus_infinity<T>()) {
                            std::fill(row, row + cols, T(0));
                            continue;
                        }
                        cap_row(row, cols, softcap);
                        mask_row(row, mask, b, h, i0 + r, j0, cols, dims);
                        kernels::exp_shifted(row, L[r], row, cols);
                    }
                    // dV_j += P^T dO_i   (cols, d_v)
                    gemm<T>(true, false, cols, d_v, rows, T(1), s.P.data(), cols, dO, grad_out.row, T(1),
                            dv.at(b, kv) + j0 * dv.row, dv.row);
                    // dP = dO_i V_j^T   (rows, cols);  dS = P (dP - D_i) scale, kept in dP
                    gemm<T>(false, true, rows, cols, d_v, T(1), dO, grad_out.row, v.at(b, kv) + j0 * v.row, v.row, T(0),
                            s.dP.data(), cols);
                    for (size_t r = 0; r < rows; ++r) {
                        for (size_t c = 0; c < cols; ++c) {
                            const size_t e = r * cols + c;
                            s.dP[e] = scale * s.P[e] * (s.dP[e] - s.D[r]);
                        }
                        through_cap(s.dP.data() + r * cols, s.raw.data() + r * cols, cols, softcap, s.row.data());
                    }
                    // dQ_i += dS K_j   (rows, d);  dK_j += dS^T Q_i   (cols, d)
                    gemm<T>(false, false, rows, d, cols, T(1), s.dP.data(), cols, k.at(b, kv) + j0 * k.row, k.row, T(1),
                            dq.at(b, h) + i0 * dq.row, dq.row);
                    gemm<T>(true, false, cols, d, rows, T(1), s.dP.data(), cols, q.at(b, h) + i0 * q.row, q.row, T(1),
                            dk.at(b, kv) + j0 * dk.row, dk.row);
                }
            }
    });
}

#define ATTNLAB_INSTANTIATE(T)                                                                                       \
    template void dense_forward<T>(const Dims&, HeadView<const T>, HeadView<const T>, HeadView<const T>,             \
                                   const AttentionMask&, T, T*, T*, const std::vector<T>&, HeadView<T>, double*);    \
    template void dense_backward<T>(const Dims&, HeadView<const T>, HeadView<const T>, HeadView<const T>, T, double, \
                                    const T*, const T*, const std::vector<T>&, HeadView<const T>, HeadView<T>,       \
                                    HeadView<T>, HeadView<T>);                                                       \
    template void blockwise_forward<T>(const Dims&, HeadView<const T>, HeadView<const T>, HeadView<const T>,         \
                                       const AttentionMask&, T, HeadView<T>, T*);                                    \
    template void blockwise_backward<T>(const Dims&, HeadView<const T>, HeadView<const T>, HeadView<const T>,        \
                                        const AttentionMask&, T, HeadView<const T>, const T*, HeadView<const T>,     \
                                        HeadView<T>, HeadView<T>, HeadView<T>);
ATTNLAB_INSTANTIATE(float)
ATTNLAB_INSTANTIATE(double)
#undef ATTNLAB_INSTANTIATE

}  // namespace attnlab::attention_kernels
