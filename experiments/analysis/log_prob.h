// log softmax of one row of logits at one token, in double: the answer
// probabilities of patching and of the logit lens.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace attnlab {

// row (V) -> log p(target) = row[target] - logsumexp(row)
inline double log_prob_at(const double* row, size_t V, int32_t target) {
    const double top = *std::max_element(row, row + V);
    double sum = 0;
    for (size_t v = 0; v < V; ++v) sum += std::exp(row[v] - top);
    return row[target] - top - std::log(sum);
}

}  // namespace attnlab
