#include "experiments/analysis/composition.h"

#include <cmath>
#include <limits>
#include <string>

#include "autograd/ops.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

// A parameter by name, on the CPU.
Tensor parameter(const NamedTensors& params, const std::string& name) {
    for (const auto& [n, p] : params)
        if (n == name) return p.detach().to(Device::cpu);
    fail("composition", "the model has no parameter " + name);
}

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
std::vector<HeadCircuits> head_circuits(const TaskModel& model, const NamedTensors& params) {
    const size_t L = model.layers(), H = model.heads();
    std::vector<HeadCircuits> heads;  // [layer * H + head]
    for (size_t l = 0; l < L; ++l) {
        const std::string block = "blocks." + std::to_string(l) + ".attn.";
        const Tensor w_q = parameter(params, block + "q_proj.weight");    // (H d_h, D)
        const Tensor w_k = parameter(params, block + "k_proj.weight");    // (H_kv d_h, D)
        const Tensor w_v = parameter(params, block + "v_proj.weight");    // (H_kv d_h, D)
        const Tensor w_o = parameter(params, block + "out_proj.weight");  // (D, H d_h)
        const size_t d_h = w_q.size(0) / H, group = H / (w_k.size(0) / d_h);
        for (size_t h = 0; h < H; ++h) {
            const size_t kv = h / group;  // the K/V head query head h reads
            const Tensor q_h = slice(w_q, 0, h * d_h, (h + 1) * d_h), k_h = slice(w_k, 0, kv * d_h, (kv + 1) * d_h);
            const Tensor v_h = slice(w_v, 0, kv * d_h, (kv + 1) * d_h), o_h = slice(w_o, 1, h * d_h, (h + 1) * d_h);
            HeadCircuits c;
            c.ov = matmul(transpose(v_h, 0, 1), transpose(o_h, 0, 1));  // W_V,h^T W_O,h^T (D, D)
            c.qk = matmul(transpose(q_h, 0, 1), k_h);                    // W_Q,h^T W_K,h (D, D)
            c.ov_norm = frobenius(c.ov);
            c.qk_norm = frobenius(c.qk);
            heads.push_back(c);
        }
    }
    return heads;
}

}  // namespace

CompositionScores composition_scores(const TaskModel& model) {
    if (model.encoder_decoder()) fail("composition", "composition scores need a decoder model (this one is an encoder-decoder)");
    NoGradGuard no_grad;
    const size_t L = model.layers(), H = model.heads();
    const std::vector<HeadCircuits> heads = head_circuits(model, model.module().named_parameters());
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


TokenCircuits token_circuits(const TaskModel& model) {
    const DecoderLM* lm = model.decoder_lm();
    if (lm == nullptr) fail("composition", "token circuits need a decoder model (this one is an encoder-decoder)");
    NoGradGuard no_grad;
    const NamedTensors params = model.module().named_parameters();
    const Tensor embed = parameter(params, "tok_emb.weight");         // W_E (V, D)
    const Tensor unembed = parameter(params, lm->unembedding_name());  // W_U (V, D)
    TokenCircuits t;
    t.layers = model.layers();
    t.heads = model.heads();
    t.vocab = embed.size(0);
    for (const HeadCircuits& c : head_circuits(model, params)) {
        const std::vector<double> qk = matmul(matmul(embed, c.qk), transpose(embed, 0, 1)).values();    // (V, V)
        const std::vector<double> ov = matmul(matmul(embed, c.ov), transpose(unembed, 0, 1)).values();  // (V, V)
        t.qk.insert(t.qk.end(), qk.begin(), qk.end());
        t.ov.insert(t.ov.end(), ov.begin(), ov.end());
    }
    return t;
}

}  // namespace attnlab
