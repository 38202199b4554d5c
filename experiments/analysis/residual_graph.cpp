#include "experiments/analysis/residual_graph.h"

#include <algorithm>

#include "autograd/ops.h"
#include "experiments/run/model_factory.h"
#include "layers/models.h"

namespace attnlab::residual_graph {

namespace {

const DecoderLM& decoder_of(const TaskModel& model) {
    if (model.encoder_decoder() || model.decoder_lm() == nullptr)
        fail("circuit", "the residual graph is a decoder's; this checkpoint is an encoder-decoder");
    const DecoderLM& lm = *model.decoder_lm();
    if (lm.config.block.norm == Norm::post)
        fail("circuit", "model.norm = \"post\": a post-norm residual stream is not a sum of the components' outputs, so its "
                        "edges are undefined (pre-norm and norm-free decoders only)");
    return lm;
}

}  // namespace

std::string block(size_t layer) { return "blocks." + std::to_string(layer) + "."; }

bool feeds(const Node& s, const Node& r, bool parallel) {
    if (s.kind == Node::Kind::embed || r.kind == Node::Kind::logits) return true;
    if (s.kind == Node::Kind::head && r.kind == Node::Kind::mlp && !parallel) return s.layer <= r.layer;
    return s.layer < r.layer;
}

Graph graph_of(const TaskModel& model) {
    const DecoderLM& lm = decoder_of(model);
    Graph g;
    g.layers = model.layers();
    g.heads = model.heads();
    g.kv_heads = lm.config.block.attention.kv_heads == 0 ? g.heads : lm.config.block.attention.kv_heads;
    g.ffn = lm.config.block.ffn > 0;
    g.parallel = lm.config.block.parallel;
    using K = Node::Kind;
    g.senders.push_back({K::embed});
    for (size_t l = 0; l < g.layers; ++l) {
        for (size_t h = 0; h < g.heads; ++h) g.senders.push_back({K::head, l, h});
        if (g.ffn) g.senders.push_back({K::mlp, l});
    }
    for (size_t l = 0; l < g.layers; ++l) {
        for (size_t h = 0; h < g.heads; ++h) g.receivers.push_back({K::q, l, h});
        for (K kind : {K::k, K::v})
            for (size_t h = 0; h < g.kv_heads; ++h) g.receivers.push_back({kind, l, h});
        if (g.ffn) g.receivers.push_back({K::mlp, l});
    }
    g.receivers.push_back({K::logits});
    for (size_t r = 0; r < g.receivers.size(); ++r)
        for (size_t s = 0; s < g.senders.size(); ++s)
            if (feeds(g.senders[s], g.receivers[r], g.parallel)) g.edges.push_back({s, r});
    return g;
}

Tensor patch_copies(const Tensor& value, size_t N, std::vector<CopyPatch> patches) {
    std::sort(patches.begin(), patches.end(), [](const CopyPatch& a, const CopyPatch& b) { return a.copy < b.copy; });
    const size_t copies = value.size(0) / N;
    std::vector<Tensor> parts;
    size_t next = 0;  // first copy not yet in parts
    for (const CopyPatch& p : patches) {
        if (p.copy > next) parts.push_back(slice(value, 0, next * N, p.copy * N));  // unpatched copies, one slice
        if (p.head < 0) {
            parts.push_back(p.value);
        } else {
            const Tensor rows = slice(value, 0, p.copy * N, (p.copy + 1) * N);
            const size_t h = static_cast<size_t>(p.head), H = rows.size(2);
            std::vector<Tensor> heads;
            if (h > 0) heads.push_back(slice(rows, 2, 0, h));
            heads.push_back(p.value);
            if (h + 1 < H) heads.push_back(slice(rows, 2, h + 1, H));
            parts.push_back(heads.size() == 1 ? heads.front() : concat(heads, 2));
        }
        next = p.copy + 1;
    }
    if (next < copies) parts.push_back(slice(value, 0, next * N, copies * N));
    return parts.size() == 1 ? parts.front() : concat(parts, 0);
}

// The N prompts repeated `copies` times.
std::vector<std::vector<int32_t>> repeated(const std::vector<std::vector<int32_t>>& rows, size_t copies) {
    std::vector<std::vector<int32_t>> out;
    out.reserve(rows.size() * copies);
    for (size_t c = 0; c < copies; ++c) out.insert(out.end(), rows.begin(), rows.end());
    return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// `t` (N, ...) repeated `copies` times along the batch.
Tensor tiled(const Tensor& t, size_t copies) { return copies == 1 ? t : concat(std::vector<Tensor>(copies, t), 0); }

// One head's slice (axis 2) of a (N, T, H, d_h) activation, or the whole of another.
Tensor of_receiver(const Tensor& activation, const Node& r) {
    return r.per_head() ? slice(activation, 2, r.head, r.head + 1) : activation;
}


}  // namespace attnlab::residual_graph
