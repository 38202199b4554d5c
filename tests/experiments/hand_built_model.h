// A hand-built decoder whose circuit is known exactly (the patching and circuit
// tests): two layers of two heads, attention only, no norm, no positions, no
// biases, a vocabulary of 8 = the width (one-hot embeddings).
#pragma once

#include <memory>
#include <string>

#include "experiments/analysis/patching.h"
#include "experiments/config/config.h"
#include "experiments/run/model_factory.h"

namespace attnlab::analysis_test {

constexpr size_t V = 8;  // vocabulary = width: one-hot embeddings

// Two layers of two heads, attention only, no norm, no positions, no biases.
// Every query is zero, so every head averages over the positions so far; head 0
// of each layer copies what it averages (W_V = W_O = identity), head 1 writes
// nothing (W_O = 0). Embedding and unembedding are the identity. So the last
// position's logits count the tokens seen, through L0.H0, L1.H0 and the path
// L0.H0 -> L1.H0's values; L*.H1 and every query path have no effect at all.
struct HandBuilt {
    Config config = default_config();
    std::unique_ptr<TaskModel> model;
    HandBuilt() {
        for (const std::string o : {"task.name=copy", "task.vocab=8", "task.min_len=2", "task.max_len=3", "model.layers=2",
                                    "model.width=8", "model.heads=2", "model.head_width=8", "model.ffn=0", "model.norm=none",
                                    "model.positional=none", "model.bias=false", "model.max_len=8"})
            apply_override(config, o);
        validate(config);
        Rng init(0);
        model = std::make_unique<TaskModel>(config, 8, init, nullptr);
        for (auto& [name, p] : model->module().state_dict()) {
            std::vector<double> v(p.numel(), 0.0);
            const size_t cols = p.size(-1);
            const bool identity_blocks = name.find("tok_emb") != std::string::npos || name.find("head.") == 0 ||
                                         name.find("v_proj") != std::string::npos;
            if (identity_blocks)  // (rows, cols): the first V rows are I (head 0 of v_proj), the rest 0
                for (size_t i = 0; i < V; ++i) v[i * cols + i] = 1.0;
            if (name.find("out_proj") != std::string::npos)  // (D, H d_h): head 0's columns are I
                for (size_t i = 0; i < V; ++i) v[i * cols + i] = 1.0;
            p.assign(Tensor::from_values(v, p.shape()));
        }
    }
};

inline PromptPairs majority_pairs() {
    PromptPairs p;
    p.clean = {{5, 5, 5, 7}};
    p.corrupt = {{6, 6, 6, 7}};
    p.positions = {{3}};
    p.clean_answers = {{5}};
    p.corrupt_answers = {{6}};
    return p;
}

}  // namespace attnlab::analysis_test
