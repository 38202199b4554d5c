#include "experiments/analysis/composition.h"

#include <cmath>
#include <limits>
#include <string>

#include "autograd/ops.h"
#include "experiments/run/head_scores.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

double frobenius(const Tensor& m) {
    double total = 0;
    for (double v : m.values()) total += v * v;
    return std::sqrt(total);
}

struct HeadCircuits {
    Tensor ov, qk;  // (D, D) each
    double ov_norm = 0, qk_norm = 0;
};

// Every head's OV and QK (D, D), [layer * H + head].
std::vector<HeadCircuits> head_circuits(const TaskModel& model) {
    std::vector<HeadCircuits> heads;
    for (const HeadWeights& w : head_weights(model)) {
        HeadCircuits c;
        c.ov = matmul(transpose(w.v, 0, 1), transpose(w.o, 0, 1));  // W_V,h^T W_O,h^T (D, D)
        c.qk = matmul(transpose(w.q, 0, 1), w.k);                    // W_Q,h^T W_K,h (D, D)
        c.ov_norm = frobenius(c.ov);
        c.qk_norm = frobenius(c.qk);
        heads.push_back(c);
    }
    return heads;
}

}  // namespace

CompositionScores composition_scores(const TaskModel& model) {
    if (model.encoder_decoder()) fail("composition", "composition scores need a decoder model (this one is an encoder-decoder)");
    NoGradGuard no_grad;
    const size_t L = model.layers(), H = model.heads();
    const std::vector<HeadCircuits> heads = head_circuits(model);
    CompositionScores s;
    s.layers = L;
    s.heads = H;
    const size_t n = L * H;
    const double none = std::numeric_limits<double>::quiet_NaN();
    s.q.assign(n * n, none);
    s.k.assign(n * n, none);
    s.v.assign(n * n, none);
    for (size_t a = 0; a < n; ++a)
        for (size_t b = 0; b < n; ++b) {
            if (a / H >= b / H) continue;  // the sender must be in an earlier layer
            const HeadCircuits &sender = heads[a], &receiver = heads[b];
            const double ov = sender.ov_norm;
            s.q[a * n + b] = frobenius(matmul(sender.ov, receiver.qk)) / (ov * receiver.qk_norm);
            s.k[a * n + b] = frobenius(matmul(sender.ov, transpose(receiver.qk, 0, 1))) / (ov * receiver.qk_norm);
            s.v[a * n + b] = frobenius(matmul(sender.ov, receiver.ov)) / (ov * receiver.ov_norm);
        }
    return s;
}

TableSize composition_size(const TaskModel& model) {
    const size_t n = model.layers() * model.heads();
    const size_t D = model.decoder_lm() ? model.decoder_lm()->config.block.attention.width : 0;
    const double heads = static_cast<double>(n), width = static_cast<double>(D);
    return {"the composition scores [3 x " + std::to_string(n) + " x " + std::to_string(n) + " heads, float64] and the heads' circuits [2 x " +
                std::to_string(n) + " heads x " + std::to_string(D) + " x " + std::to_string(D) + "]",
            3 * 8 * heads * heads + 2 * 4 * heads * width * width};
}

TokenCircuits token_circuits(const TaskModel& model) {
    const DecoderLM* lm = model.decoder_lm();
    if (lm == nullptr) fail("composition", "token circuits need a decoder model (this one is an encoder-decoder)");
    NoGradGuard no_grad;
    const Tensor embed = cpu_parameter(model, "tok_emb.weight", "composition");         // W_E (V, D)
    const Tensor unembed = cpu_parameter(model, lm->unembedding_name(), "composition");  // W_U (V, D)
    TokenCircuits t;
    t.layers = model.layers();
    t.heads = model.heads();
    t.vocab = embed.size(0);
    for (const HeadCircuits& c : head_circuits(model)) {
        const std::vector<double> qk = matmul(matmul(embed, c.qk), transpose(embed, 0, 1)).values();    // (V, V)
        const std::vector<double> ov = matmul(matmul(embed, c.ov), transpose(unembed, 0, 1)).values();  // (V, V)
        t.qk.insert(t.qk.end(), qk.begin(), qk.end());
        t.ov.insert(t.ov.end(), ov.begin(), ov.end());
    }
    return t;
}

TableSize token_circuits_size(const TaskModel& model) {
    const size_t n = model.layers() * model.heads();
    const size_t V = model.decoder_lm() ? model.decoder_lm()->config.vocab : 0;
    const double vocab = static_cast<double>(V);
    return {"the token circuits [2 x " + std::to_string(n) + " heads x " + std::to_string(V) + " x " + std::to_string(V) + "]",
            // qk and ov float32, up to twice over while the vectors grow; one head's two products, float32 and float64
            2 * 4 * 2 * static_cast<double>(n) * vocab * vocab + 2 * (4 + 8) * vocab * vocab};
}

}  // namespace attnlab
