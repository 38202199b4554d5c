// Helpers shared by the audit record (audit.cpp) and its live tests
// (audit_tests.cpp). Internal to experiments/.
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "experiments/analysis/audit.h"
#include "experiments/analysis/tolerance.h"
#include "experiments/run/model_factory.h"

namespace attnlab::audit_detail {

inline const DecoderLM* decoder_of(const TaskModel& model) { return model.decoder_lm(); }
inline const EncoderDecoder* enc_dec_of(const TaskModel& model) { return model.enc_dec(); }

inline size_t vocab_of(const TaskModel& model) {
    if (const DecoderLM* d = decoder_of(model)) return d->config.vocab;
    return enc_dec_of(model)->config.vocab;
}

// The larger of two differences; a NaN wins and stays (it must fail a test, not vanish).
inline double worse(double m, double x) { return x > m || std::isnan(x) ? x : m; }

inline double max_abs(const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m = worse(m, std::abs(x));
    return m;
}


// x with `amount` * N(0, 1) added at the (b, t) positions where `where(b, t)` holds; x (B, T, D).
template <class Where>
inline Tensor perturbed(const Tensor& x, Rng& rng, double amount, Where where) {
    std::vector<double> v = x.values();
    const size_t B = x.size(0), T = x.size(1), D = x.size(2);
    for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; t < T; ++t)
            if (where(b, t))
                for (size_t c = 0; c < D; ++c) v[(b * T + t) * D + c] += amount * rng.normal();
    return Tensor::from_values(v, x.shape(), x.dtype());
}

// Max |a - b| over the rows (b, t) of two (B, T, F) value arrays where `where(b, t)` holds.
template <class Where>
inline double rows_diff(const std::vector<double>& a, const std::vector<double>& b, size_t B, size_t T, size_t F, Where where) {
    double m = 0;
    for (size_t i = 0; i < B; ++i)
        for (size_t t = 0; t < T; ++t)
            if (where(i, t))
                for (size_t f = 0; f < F; ++f) {
                    const size_t e = (i * T + t) * F + f;
                    m = worse(m, std::abs(a[e] - b[e]));
                }
    return m;
}

inline std::string fmt(double x) {
    std::ostringstream s;
    s.precision(3);
    s << x;
    return s.str();
}

inline size_t length_of(const std::vector<size_t>& lengths, size_t b, size_t T) { return lengths.empty() ? T : lengths[b]; }

// Sequence b of a batch alone, cut to its lengths (no padding).
inline Batch single(const Batch& batch, size_t b) {
    auto cut = [](const Indices& x, size_t row, size_t n) {
        const size_t T = x.shape[1];
        return Indices({1, n}, std::vector<int32_t>(x.values.begin() + static_cast<std::ptrdiff_t>(row * T),
                                                    x.values.begin() + static_cast<std::ptrdiff_t>(row * T + n)));
    };
    Batch s;
    const size_t n = batch.lengths[b];
    s.inputs = cut(batch.inputs, b, n);
    s.targets = cut(batch.targets, b, n);
    const size_t T = batch.inputs.shape[1];
    s.loss_mask = Mask({1, n}, std::vector<uint8_t>(batch.loss_mask.values.begin() + static_cast<std::ptrdiff_t>(b * T),
                                                    batch.loss_mask.values.begin() + static_cast<std::ptrdiff_t>(b * T + n)));
    s.lengths = {n};
    if (!batch.src_lengths.empty()) {
        s.src = cut(batch.src, b, batch.src_lengths[b]);
        s.src_lengths = {batch.src_lengths[b]};
    }
    return s;
}

// A one-sequence batch stacked twice (for tests that need a second item).
inline Batch twice(const Batch& one) {
    auto stack = [](const Indices& x) {
        std::vector<int32_t> v = x.values;
        v.insert(v.end(), x.values.begin(), x.values.end());
        return Indices({2, x.shape[1]}, v);
    };
    Batch two = one;
    two.inputs = stack(one.inputs);
    two.targets = stack(one.targets);
    two.lengths = {one.lengths[0], one.lengths[0]};
    std::vector<uint8_t> m = one.loss_mask.values;
    m.insert(m.end(), one.loss_mask.values.begin(), one.loss_mask.values.end());
    two.loss_mask = Mask({2, one.loss_mask.shape[1]}, m);
    if (!one.src_lengths.empty()) {
        two.src = stack(one.src);
        two.src_lengths = {one.src_lengths[0], one.src_lengths[0]};
    }
    return two;
}

// Runs a test body; an exception is a FAIL that says what was thrown.
template <class Body>
inline LiveTest guarded(const std::string& name, Body body) {
    try {
        return body();
    } catch (const std::exception& e) {
        LiveTest t;
        t.name = name;
        t.detail = std::string("threw: ") + e.what();
        return t;
    }
}

// The worst of several results of one test (over layers): FAIL if any fails.
inline LiveTest worst_of(const std::string& name, const std::vector<LiveTest>& parts) {
    LiveTest t;
    t.name = name;
    t.pass = !parts.empty();
    for (const LiveTest& p : parts) {
        if (t.figure_name.empty()) t.figure_name = p.figure_name;
        t.rule = p.rule;
        if (!p.pass && t.pass) t.detail = p.name + ": " + p.detail;
        t.pass = t.pass && p.pass;
        t.figure = worse(t.figure, p.figure);
        t.tolerance = t.tolerance == 0 ? p.tolerance : std::min(t.tolerance, p.tolerance);
    }
    if (t.pass && !parts.empty()) t.detail = std::to_string(parts.size()) + " layers; " + parts.front().detail;
    return t;
}

}  // namespace attnlab::audit_detail
