// Why a head attends: one attention score split exactly into the contributions
// of the components upstream of the head (Elhage et al. 2021's bilinear view).
//
// The score of head h in block l, query position i, key position j is
//   s = scale * rot_i(q_i) . rot_j(k_j),  q_i = W_Q,h n_i(x_i) + b_Q,h,  k_j = W_K,g n_j(x_j) + b_K,g
// with x the stream entering the block, n its norm (ln1) and g the K/V head h
// reads. The stream is a sum of components: the token embedding, the position
// table (learned or sinusoidal positions), each earlier head's result, each
// earlier feed-forward's output and the earlier attention output biases. The
// norm held at its statistics on the whole stream (NormLayer::frozen, as the
// lens's direct logit attribution) is linear in them, so q_i and k_j are sums of
// one term per component plus a bias term (the projection's bias and the norm's),
// the rotation is linear, and the score is the sum over (query term, key term)
// pairs. Exact: the parts add up to `scale * q.k`, and `modifier` is what the
// scores point adds beyond it (ALiBi's distance penalty, T5's relative bias;
// 0 otherwise). Pre-norm and norm-free decoders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/config/memory_estimate.h"

namespace attnlab {

class TaskModel;
struct OutputFile;  // experiments/files/output_file.h

struct ScoreParts {
    size_t layer = 0, head = 0, query = 0, key = 0;
    std::vector<std::string> components;  // "tok_emb", "pos_emb", "0.1", "mlp.0", "attn_bias", ..., "bias" (last)
    std::vector<double> parts;            // [query component][key component], row-major
    double score = 0;                     // the scores hook point's value at (h, i, j)
    double modifier = 0;                  // score - sum(parts)
    double stream_error = 0;              // the largest |sum of components - the stream| over i and j (a check)
};

// What score_parts holds at once for a prompt of T tokens, to refuse it before
// it runs (memory_estimate.h): one forward's tables (model_factory.h) with the
// head's layer's scores recorded beside the attention computing its own.
TableSize score_parts_size(const TaskModel& model, size_t T);

// Errors (one line) for a head, query or key out of range, a key the query
// cannot see, an encoder-decoder or post-norm model.
ScoreParts score_parts(const TaskModel& model, const std::vector<int32_t>& tokens, size_t layer, size_t head, size_t query,
                       size_t key);

// The file (format "attnlab-score-parts", docs/file_formats.md), written whole;
// returns the name it was given (output_file.h).
std::string write_score_parts_file(const OutputFile& out, const std::string& checkpoint, int64_t step, const std::vector<int32_t>& tokens,
                            const ScoreParts& parts);

}  // namespace attnlab
