// The residual graph of a decoder (experiments/analysis/circuit.h) and what its
// batched runs share: nodes and edges, and copies of the prompts side by side.
// Internal to the circuit analyses (circuit.cpp, circuit_discovery.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

class TaskModel;

namespace residual_graph {

// "blocks.<l>."
std::string block(size_t layer);

// A node of the residual graph: a sender (embed, head, mlp) or a receiver (q, k, v, mlp, logits).
struct Node {
    enum class Kind { embed, head, mlp, q, k, v, logits } kind = Kind::embed;
    size_t layer = 0, head = 0;

    std::string name() const {
        const std::string l = std::to_string(layer), h = std::to_string(head);
        switch (kind) {
            case Kind::embed: return "embed";
            case Kind::head: return l + "." + h;
            case Kind::mlp: return "mlp." + l;
            case Kind::q: return l + "." + h + ":q";
            case Kind::k: return l + "." + h + ":k";
            case Kind::v: return l + "." + h + ":v";
            default: return "logits";
        }
    }
    // A receiver's activation: the head's q, k or v (head axis 2), the feed-forward's
    // output, or the final residual stream (which the logits read through ln_f).
    std::string activation(size_t layers) const {
        switch (kind) {
            case Kind::q: return block(layer) + "attn.q";
            case Kind::k: return block(layer) + "attn.k";
            case Kind::v: return block(layer) + "attn.v";
            case Kind::mlp: return block(layer) + "ffn.out";
            default: return block(layers - 1) + "resid_post";
        }
    }
    bool per_head() const { return kind == Kind::q || kind == Kind::k || kind == Kind::v; }
    // A receiver's residual input: where a sender's change is added in (a parallel
    // block's feed-forward reads the block's input, as its attention does).
    std::string input(size_t layers, bool parallel) const {
        if (per_head()) return block(layer) + "resid_pre";
        if (kind == Kind::mlp) return block(layer) + (parallel ? "resid_pre" : "resid_mid");
        return block(layers - 1) + "resid_post";
    }
};

// Whether sender s writes into what receiver r reads: a head feeds the later
// layers and its own layer's feed-forward (unless the blocks are parallel); a
// feed-forward the later layers.
bool feeds(const Node& s, const Node& r, bool parallel);

struct Graph {
    size_t layers = 0, heads = 0, kv_heads = 0;
    bool ffn = false;
    bool parallel = false;  // model.parallel: attention and feed-forward read the block's input
    std::vector<Node> senders, receivers;
    struct Edge {
        size_t sender, receiver;
    };
    std::vector<Edge> edges;  // by receiver, then sender
};

// The graph of a pre-norm or norm-free decoder; an Error for any other model.
Graph graph_of(const TaskModel& model);

// `value` (C N, T, ...): C copies of the N prompts side by side; copy c's rows
// replaced by `patch.value`, whole, or only its head `patch.head` (axis 2) when >= 0.
struct CopyPatch {
    size_t copy = 0;
    int head = -1;
    Tensor value;  // (N, T, ...) whole; (N, T, 1, d_h) one head
};
Tensor patch_copies(const Tensor& value, size_t N, std::vector<CopyPatch> patches);

// The N prompts repeated `copies` times; a tensor (N, ...) likewise along the batch.
std::vector<std::vector<int32_t>> repeated(const std::vector<std::vector<int32_t>>& rows, size_t copies);
Tensor tiled(const Tensor& t, size_t copies);
double dot(const std::vector<double>& a, const std::vector<double>& b);
// One head's slice (axis 2) of a (N, T, H, d_h) activation, or the whole of another.
Tensor of_receiver(const Tensor& activation, const Node& r);

}  // namespace residual_graph
}  // namespace attnlab
