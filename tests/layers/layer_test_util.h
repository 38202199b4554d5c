// Small helpers shared by the layers suites: the small model configs of our
// issue, token batches, value comparisons and error capture.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "layers/hooks.h"
#include "layers/models.h"
#include "tests/autograd/expect.h"  // error_message, starts_with

namespace attnlab::layer_testing {

using testing::error_message;
using testing::starts_with;

// forward() with `hooks` attached to `model` for its duration.
template <class Forward>
Tensor recorded_forward(const Module& model, Hooks& hooks, Forward forward) {
    HookScope scope(model, hooks);
    return forward();
}

// vocab 11, width 16, heads 2, 2 layers, ffn 32, max_len 16 (the small config).
inline ModelConfig small_config(Norm norm = Norm::pre, Positional positional = Positional::learned,
                                size_t kv_heads = 0, double dropout = 0.0) {
    ModelConfig c;
    c.vocab = 11;
    c.layers = 2;
    c.max_len = 16;
    c.positional = positional;
    c.block.attention.width = 16;
    c.block.attention.heads = 2;
    c.block.attention.kv_heads = kv_heads;
    c.block.attention.dropout = dropout;
    c.block.ffn = 32;
    c.block.norm = norm;
    c.block.dropout = dropout;
    c.embedding_dropout = dropout;
    return c;
}

inline AttentionConfig attention_config(size_t width, size_t heads, size_t kv_heads = 0) {
    AttentionConfig c;
    c.width = width;
    c.heads = heads;
    c.kv_heads = kv_heads;
    return c;
}

// (B, T) token ids drawn uniformly from [0, vocab).
inline Indices random_tokens(Rng& rng, size_t B, size_t T, size_t vocab) {
    std::vector<int32_t> v(B * T);
    for (auto& t : v) t = static_cast<int32_t>(rng.integer(0, static_cast<int64_t>(vocab)));
    return Indices({B, T}, v);
}

// Columns [start, stop) of a (B, T) token batch.
inline Indices token_columns(const Indices& tokens, size_t start, size_t stop) {
    const size_t B = tokens.shape[0], T = tokens.shape[1];
    std::vector<int32_t> v;
    for (size_t b = 0; b < B; ++b)
        for (size_t t = start; t < stop; ++t) v.push_back(tokens.values[b * T + t]);
    return Indices({B, stop - start}, v);
}

// Row b of a (B, T) token batch, first `length` columns, as a (1, length) batch.
inline Indices token_row(const Indices& tokens, size_t b, size_t length) {
    const size_t T = tokens.shape[1];
    return Indices({1, length}, std::vector<int32_t>(tokens.values.begin() + b * T, tokens.values.begin() + b * T + length));
}

// Concatenates per-chunk (B, Tn, V) values along time into (B, T, V) row-major values.
inline std::vector<double> concat_time(const std::vector<Tensor>& chunks) {
    const size_t B = chunks.at(0).size(0), V = chunks.at(0).size(2);
    size_t T = 0;
    for (const Tensor& c : chunks) T += c.size(1);
    std::vector<double> out(B * T * V);
    size_t t0 = 0;
    for (const Tensor& c : chunks) {
        const std::vector<double> v = c.values();
        const size_t Tn = c.size(1);
        for (size_t b = 0; b < B; ++b)
            std::copy(v.begin() + b * Tn * V, v.begin() + (b + 1) * Tn * V, out.begin() + (b * T + t0) * V);
        t0 += Tn;
    }
    return out;
}

// The logits of `tokens` (B, T) decoded through `cache` in chunks of these sizes
// (summing to at most T), as (B, sum, V) row-major values.
inline std::vector<double> decode_in_chunks(const DecoderLM& model, const Indices& tokens, const std::vector<size_t>& chunks,
                                            DecoderCache& cache) {
    std::vector<Tensor> parts;
    size_t t0 = 0;
    for (size_t n : chunks) {
        parts.push_back(model.forward_cached(token_columns(tokens, t0, t0 + n), cache));
        t0 += n;
    }
    return concat_time(parts);
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0.0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

inline bool all_finite(const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace attnlab::layer_testing
