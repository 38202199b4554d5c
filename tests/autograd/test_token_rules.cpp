// The variant rules read from the tokens (autograd/variant.h): prefix-LM and packed
// documents. Their spans and eligibility by hand; the fused op's dense and blockwise
// paths against attention composed of ops; float64 gradients at lengths 1, 7, 129.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/attention.h"
#include "autograd/composed.h"
#include "autograd/gradcheck.h"
#include "autograd/rng.h"
#include "expect.h"

namespace attnlab {
namespace {

using testing::expect_rule_on_fused_paths;
using testing::expect_same;
using testing::Op;
using V = const std::vector<Tensor>&;
constexpr int32_t S = 1, B = 2, x = 7;  // <SEP>, <BOS>, a content token

AttentionMask token_mask(bool prefix_lm, bool documents, const Indices& tokens, const std::vector<size_t>& lengths) {
    AttentionMask mask;
    mask.causal = true;
    mask.key_lengths = lengths;
    mask.variant.prefix_lm = prefix_lm;
    mask.variant.documents = documents;
    mask.spans = token_spans(mask.variant, tokens, lengths);
    return mask;
}

// Row: <BOS> x <SEP> x | <BOS> x x <SEP> x | padding (length 9 of 10).
TEST(TokenRules, SpansAndEligibilityByHand) {
    const Indices tokens({1, 10}, {B, x, S, x, B, x, x, S, x, 0});
    const AttentionMask both = token_mask(true, true, tokens, {9});
    const std::vector<uint32_t> begin = {0, 0, 0, 0, 4, 4, 4, 4, 4, 4}, end = {4, 4, 4, 4, 10, 10, 10, 10, 10, 10},
                                prefix = {3, 3, 3, 3, 8, 8, 8, 8, 8, 8};
    EXPECT_EQ(both.spans.doc_begin, begin);
    EXPECT_EQ(both.spans.doc_end, end);
    EXPECT_EQ(both.spans.prefix_end, prefix);
    for (size_t i = 0; i < 10; ++i)
        for (size_t j = 0; j < 10; ++j) {
            const size_t p = std::min<size_t>(i, 8);  // the padding query reads as the last real one
            const bool same_doc = begin[p] <= j && j < end[p];
            EXPECT_EQ(both.allows(0, i, j, 10, 10), j < 9 && same_doc && (j <= p || j < prefix[p])) << i << " " << j;
        }
    // prefix-LM alone: one document, its first <SEP> at 2; query 0 reads keys 0..2
    const AttentionMask prefix_only = token_mask(true, false, tokens, {9});
    EXPECT_TRUE(prefix_only.allows(0, 0, 2, 10, 10));
    EXPECT_FALSE(prefix_only.allows(0, 0, 3, 10, 10));
    EXPECT_TRUE(prefix_only.allows(0, 5, 0, 10, 10));
    EXPECT_FALSE(prefix_only.allows(0, 5, 6, 10, 10));
    EXPECT_EQ(prefix_only.key_end(0, 0, 10, 10), 3u);
    // documents alone: causal within each document
    const AttentionMask docs = token_mask(false, true, tokens, {9});
    EXPECT_FALSE(docs.allows(0, 5, 3, 10, 10));
    EXPECT_TRUE(docs.allows(0, 5, 4, 10, 10));
    EXPECT_FALSE(docs.allows(0, 4, 5, 10, 10));
    EXPECT_EQ(docs.key_begin(0, 6, 10, 10), 4u);
    // a document with no <SEP> has no prefix: causal
    const AttentionMask none = token_mask(true, false, Indices({1, 3}, {x, x, x}), {});
    EXPECT_FALSE(none.allows(0, 0, 1, 3, 3));
    // the last 4 positions (a window's KV cache), positions counted from the first
    const TokenSpans tail = both.spans.tail(4);
    EXPECT_EQ(tail.doc_begin, (std::vector<uint32_t>{0, 0, 0, 0}));
    EXPECT_EQ(tail.prefix_end, (std::vector<uint32_t>{2, 2, 2, 2}));
    // spans that do not cover the keys are refused in one line
    AttentionMask short_spans = both;
    short_spans.spans = both.spans.tail(4);
    testing::expect_error([&] { check_token_spans("attention", short_spans, 1, 10); }, "[attention]",
                          {"token spans cover 4 positions, not the 10 keys"});
}

// Random rows of T tokens with <SEP> and <BOS> at random places.
Indices random_tokens(Rng& rng, size_t rows, size_t T) {
    Indices tokens({rows, T}, std::vector<int32_t>(rows * T));
    for (int32_t& t : tokens.values) {
        const int64_t r = rng.integer(0, 10);
        t = r == 0 ? S : r == 1 ? B : x;
    }
    return tokens;
}

// The fused op's two paths apply the token rules as attention composed of ops
// does, values and every gradient; float64 central differences at lengths 1, 7
// and 129 (no multiple of a tile); padding and an empty item (policy "zero": finite).
TEST(TokenRules, FusedPathsMatchComposedAndGradcheck) {
    Rng rng(53);
    for (const size_t T : {1, 7, 129})
        for (const int rules : {1, 2, 3}) {  // prefix-LM, documents, both
            const bool prefix_lm = rules & 1, documents = rules & 2;
            const AttentionMask mask = token_mask(prefix_lm, documents, random_tokens(rng, 3, T), {T, (T + 1) / 2, 0});
            const std::vector<Tensor> in = {gradcheck_input(rng, {3, T, 4}, -2, 2), gradcheck_input(rng, {3, T, 2}, -2, 2),
                                            gradcheck_input(rng, {3, T, 2})};
            const std::string what = std::string(prefix_lm ? "prefix-LM " : "") + (documents ? "documents " : "") +
                                     "T = " + std::to_string(T);
            // at T = 129 (slow: one backward per output element), one gradcheck: both rules, blockwise
            expect_rule_on_fused_paths(what, mask, in,
                                       T < 129      ? std::vector<AttentionPath>{AttentionPath::dense, AttentionPath::blockwise}
                                       : rules == 3 ? std::vector<AttentionPath>{AttentionPath::blockwise}
                                                    : std::vector<AttentionPath>{});
        }
    // Past the first key block, the blockwise path starts each block of queries at
    // its documents' first key: still the composed values and gradients.
    const AttentionMask mask = token_mask(true, true, random_tokens(rng, 2, 300), {300, 200});
    const std::vector<Tensor> in = {gradcheck_input(rng, {2, 300, 4}, -2, 2), gradcheck_input(rng, {2, 300, 2}, -2, 2),
                                    gradcheck_input(rng, {2, 300, 2})};
    AttentionOptions options;
    options.path = AttentionPath::blockwise;
    expect_same("prefix-LM documents, T = 300, blockwise",
                [&](V t) { return attention_packed(t[0], t[1], t[2], 2, 1, mask, options).context; },
                [&](V t) { return composed::attention(t[0], t[1], t[2], 2, 1, mask, 1.0, MaskedRows::error); }, in);
}

}  // namespace
}  // namespace attnlab
