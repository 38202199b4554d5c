// Composition scores between heads (Elhage et al. 2021, "A Mathematical
// Framework for Transformer Circuits"), from a decoder's weights. In the
// row-vector convention of the model's Linear layers (y = x W^T), head h has
//
//   OV_h = W_V,h^T W_O,h^T   (D, D): what it writes, for what it reads
//   QK_h = W_Q,h^T W_K,h     (D, D): its score x_q QK_h x_k^T (before the scale)
//
// (W_V,h, W_Q,h, W_K,h: the head's rows of v_proj, q_proj, k_proj; W_O,h: its
// columns of out_proj; grouped K/V: the K/V head the query head reads). For a
// sender head a in an earlier layer than a receiver head b:
//
//   Q-composition  |OV_a QK_b|   / (|OV_a| |QK_b|)     a's output read by b's queries
//   K-composition  |OV_a QK_b^T| / (|OV_a| |QK_b|)     ... by b's keys (an induction head
//                                                      reading a previous-token head)
//   V-composition  |OV_a OV_b|   / (|OV_a| |OV_b|)     ... by b's values
//
// with Frobenius norms, as TransformerLens's all_composition_scores. The norms,
// biases and positions (rotary's rotation included) are left out.
#pragma once

#include <cstddef>
#include <vector>

#include "experiments/config/memory_estimate.h"

namespace attnlab {

class TaskModel;

struct CompositionScores {
    size_t layers = 0, heads = 0;
    // each (layers * heads)^2, row-major [sender layer * heads + head][receiver layer * heads + head];
    // NaN where the sender is not in an earlier layer than the receiver
    std::vector<double> q, k, v;
};

// Throws Error for an encoder-decoder.
CompositionScores composition_scores(const TaskModel& model);
// What it holds, to refuse a model too large for it before it runs
// (memory_estimate.h): every head's OV and QK (L H, D, D) float32 and the three
// (L H)^2 score tables float64.
TableSize composition_size(const TaskModel& model);

// Each head's circuits through the token embedding W_E and unembedding W_U, as
// token x token tables (Elhage et al.'s for attention-only models; the positions,
// norms and biases left out, and for heads past layer 0 the composition too):
//   qk  W_E QK_h W_E^T   [query token, key token]: the score before the scale
//   ov  W_E OV_h W_U^T   [attended token, logit token]: what attending to a token
//                        adds to each logit (its eigenvalues give the copying score)
struct TokenCircuits {
    size_t layers = 0, heads = 0, vocab = 0;
    std::vector<float> qk, ov;  // each [layers * heads, vocab, vocab]
};
TokenCircuits token_circuits(const TaskModel& model);
// What it holds, to refuse a vocabulary too large for it before it runs
// (memory_estimate.h): both tables (L H, V, V) float32 (up to twice over while
// they grow) and one head's (V, V) products in float32 and float64.
TableSize token_circuits_size(const TaskModel& model);

}  // namespace attnlab
