// What every head does, from its weights (B, H, Tq, Tk) and the mask it ran under:
//   entropy          mean over valid query rows of -sum_j a_tj log a_tj (nats)
//   entropy_norm     the same divided by log(eligible keys of that row), in [0, 1]
//                    (a row with one eligible key counts as 0)
//   masked_mass      mean over valid query rows of the weight on ineligible keys
//   masked_mass_max  its maximum. A correct mask gives exactly 0: anything else is
//                    a bug made visible.
// A valid query row is a position < the query's length that has an eligible key.
#pragma once

#include <vector>

#include "autograd/attention.h"

namespace attnlab {

struct HeadStats {
    size_t layers = 0, heads = 0;
    // each layers * heads, row-major [layer][head]
    std::vector<double> entropy, entropy_norm, masked_mass, masked_mass_max;
};

// weights: one (B, H, Tq, Tk) tensor per layer; query_lengths per batch item (empty: all Tq)
HeadStats attention_stats(const std::vector<Tensor>& weights, const AttentionMask& mask,
                          const std::vector<size_t>& query_lengths);

// Per layer and head ([layer][head], flat), the standard deviation of the scaled
// scores scale q.k (one (B, H, Tq, Tk) tensor per layer, the hook point
// "<attn>.scores") over the (query, key) pairs the mask allows, in the whole
// batch: sqrt(E[s^2] - E[s]^2) from the moments, accumulated in double.
std::vector<double> score_std(const std::vector<Tensor>& scores, const AttentionMask& mask);

}  // namespace attnlab
