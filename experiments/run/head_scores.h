// Head scores (Olsson et al. 2022, "In-context Learning and Induction Heads"):
// what each head of a decoder does on a fixed batch of repeated random tokens.
//
// The batch: `rows` sequences r r, r of n distinct tokens drawn uniformly
// (seeded), fed as a decoder input of T = 2n - 1 positions (the last token is
// only a target), so position t < n is r[t] and t >= n is r[t - n]. With the
// head's attention weights a (B, H, T, T) from the model's own forward (hook
// point blocks.<l>.attn.pattern), per head, averaged over the batch:
//
//   previous_token   mean over t = 1 .. T-1     of a[t, t-1]
//   duplicate_token  mean over t = n .. T-1     of a[t, t-n]      (the same token, earlier)
//   induction        mean over t = n .. T-1     of a[t, t-n+1]    (the token after it:
//                                                                  prefix matching)
//
// and from the weights alone
//
//   copying          Olsson et al.'s copying score of the head's full OV circuit
//                    M = W_E W_V,h^T W_O,h^T W_U^T (vocab x vocab: what attending to
//                    token s adds to each logit): sum Re(lambda) / sum |lambda| over
//                    its eigenvalues, in [-1, 1]; near 1 a head raises the logit of
//                    the token it attends to (the copying half of an induction head).
//                    The norms, biases and positions are left out, as in their paper;
//                    the nonzero eigenvalues of M = A B are those of the d_h x d_h
//                    B A, which is what is computed (LAPACK's dgeev).
//
// and for the whole model repeat_loss, the mean cross-entropy at t = n .. T-1 (the
// repeat from its second token, which only in-context copying can predict: a
// model without it is at about log(tokens) there). The attention scores are in
// [0, 1]; a perfect head of its kind scores 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "data/tasks.h"

namespace attnlab {

class TaskModel;
struct Config;

// Rows of the batch train.head_scores and `attnlab heads` score on by default.
constexpr size_t kHeadScoreRows = 32;

// The repeated-token batch a model is scored on: half = n.
struct HeadScoreBatch {
    Batch batch;
    size_t half = 0;
};

// `rows` sequences r r with r of `half` distinct tokens from [first, last], from
// Rng(seed); the loss mask counts t = half .. 2 half - 2.
HeadScoreBatch repeated_token_batch(size_t rows, size_t half, int32_t first, int32_t last, uint64_t seed);

// The batch for a model of `config` whose inputs may be `max_positions` long:
// n = min((max_positions + 1) / 2, distinct tokens), tokens from the task's
// content tokens (a text or file task: all of its vocabulary). Throws Error
// (naming "head scores") for an encoder-decoder, or when n < 2.
HeadScoreBatch head_score_batch(const Config& config, size_t max_positions, size_t rows, uint64_t seed);

struct HeadScores {
    size_t layers = 0, heads = 0;
    // each layers * heads, row-major [layer][head]
    std::vector<double> previous_token, duplicate_token, induction, copying;
    double repeat_loss = 0.0;
};

// The scores from each layer's weights (B, H, T, T), T = 2 half - 1 (repeat_loss left 0).
HeadScores attention_scores(const std::vector<Tensor>& patterns, size_t half);

// One head's slices of its self-attention's weights, on the CPU in the model's
// dtype, with grouped K/V resolved (k and v are those of the K/V head it reads):
// q, k, v its rows of q_proj, k_proj, v_proj (d_h, D); o its columns of out_proj (D, d_h).
struct HeadWeights {
    Tensor q, k, v, o;
};
// Every head of a decoder, [layer * heads + head].
std::vector<HeadWeights> head_weights(const TaskModel& model);
// A parameter of the model by its name, on the CPU; Error naming `what` when there is none.
Tensor cpu_parameter(const TaskModel& model, const std::string& name, const std::string& what);

// The copying score of every head (layers * heads, [layer][head]) of a decoder.
std::vector<double> copying_scores(const TaskModel& model);

// Everything above for `model` on `input`, in eval mode without a graph (the
// model's mode is restored).
HeadScores head_scores(const TaskModel& model, const HeadScoreBatch& input);

// The score names in the order of HeadScores' vectors and of the files' datasets.
const std::vector<std::string>& head_score_names();
const std::vector<double>& head_score_values(const HeadScores& scores, size_t which);

}  // namespace attnlab
