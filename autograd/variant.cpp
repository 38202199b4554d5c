// The token rules' spans (autograd/variant.h): where each document starts and
// ends and where its prefix ends, read off the tokens once per forward pass.
#include "autograd/variant.h"

#include <algorithm>
#include <string>

namespace attnlab {

std::string rules_text(const AttentionVariant& variant, bool causal) {
    std::vector<std::string> rules;
    const std::string W = std::to_string(variant.window);
    if (variant.window > 0) rules.push_back("sliding window of " + W + (causal ? " (i - " + W + " < j)" : " (|i - j| < " + W + ")"));
    if (variant.prefix_lm)
        rules.push_back("prefix-LM (the causal part lifted inside each prefix: a document's tokens through its first <SEP> read each other)");
    if (variant.documents) rules.push_back("own document (keys from the query's <BOS> to the next)");
    std::string out;
    for (const std::string& rule : rules) out += (out.empty() ? "" : " AND ") + rule;
    return out;
}

TokenSpans token_spans(const AttentionVariant& variant, const Indices& tokens, const std::vector<size_t>& lengths) {
    TokenSpans spans;
    if (!variant.reads_tokens()) return spans;
    if (tokens.shape.size() != 2) fail("token_spans", "tokens must be (B, T), got " + shape_str(tokens.shape));
    const size_t B = tokens.shape[0], T = tokens.shape[1];
    spans.T = T;
    if (variant.documents) spans.doc_begin.assign(B * T, 0), spans.doc_end.assign(B * T, 0);
    if (variant.prefix_lm) spans.prefix_end.assign(B * T, 0);
    for (size_t b = 0; b < B; ++b) {
        const int32_t* row = tokens.values.data() + b * T;
        const size_t n = lengths.empty() ? T : std::min(lengths[b], T);  // real tokens; padding joins the last document
        size_t begin = 0;
        while (begin < T) {
            // this document: [begin, end), a <BOS> at end (if end < n) starting the next
            size_t end = begin + 1;
            while (end < n && !(variant.documents && row[end] == variant.bos_token)) ++end;
            if (end >= n) end = T;
            size_t prefix = 0;  // one past the first <SEP> among the document's real tokens
            for (size_t t = begin; t < std::min(end, n) && prefix == 0; ++t)
                if (row[t] == variant.sep_token) prefix = t + 1;
            for (size_t t = begin; t < end; ++t) {
                if (variant.documents) spans.doc_begin[b * T + t] = static_cast<uint32_t>(begin),
                                       spans.doc_end[b * T + t] = static_cast<uint32_t>(end);
                if (variant.prefix_lm) spans.prefix_end[b * T + t] = static_cast<uint32_t>(prefix);
            }
            begin = end;
        }
    }
    return spans;
}

TokenSpans TokenSpans::tail(size_t n) const {
    if (n > T) fail("token_spans", "the last " + std::to_string(n) + " of " + std::to_string(T) + " positions");
    const size_t offset = T - n;
    auto rebase = [&](const std::vector<uint32_t>& all) {
        std::vector<uint32_t> out;
        if (all.empty()) return out;
        const size_t B = all.size() / T;
        out.reserve(B * n);
        for (size_t b = 0; b < B; ++b)
            for (size_t t = offset; t < T; ++t) {
                const uint32_t v = all[b * T + t];
                out.push_back(v > offset ? static_cast<uint32_t>(v - offset) : 0u);
            }
        return out;
    };
    TokenSpans out;
    out.T = n;
    out.doc_begin = rebase(doc_begin);
    out.doc_end = rebase(doc_end);
    out.prefix_end = rebase(prefix_end);
    return out;
}

TokenSpans TokenSpans::padded(size_t n) const {
    if (T == 0) return *this;
    auto extend = [&](const std::vector<uint32_t>& all, bool ends) {
        std::vector<uint32_t> out;
        if (all.empty()) return out;
        const size_t B = all.size() / T;
        for (size_t b = 0; b < B; ++b) {
            for (size_t t = 0; t < T + n; ++t) {
                const uint32_t v = all[b * T + std::min(t, T - 1)];
                out.push_back(ends && v == T ? static_cast<uint32_t>(T + n) : v);
            }
        }
        return out;
    };
    TokenSpans out;
    out.T = T + n;
    out.doc_begin = extend(doc_begin, false);
    out.doc_end = extend(doc_end, true);
    out.prefix_end = extend(prefix_end, false);
    return out;
}

}  // namespace attnlab
