#include "experiments/analysis/lens.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "experiments/analysis/log_prob.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

// A parameter by its dotted name (undefined when the model has none of that name).
Tensor parameter(const TaskModel& model, const std::string& name) {
    for (const auto& [n, p] : model.module().named_parameters())
        if (n == name) return p;
    return Tensor();
}

std::string block(size_t layer) { return "blocks." + std::to_string(layer) + "."; }

// Direct logit attribution of r.targets (the header's formula) from one pass's
// recorded embeddings, head outputs and feed-forward outputs.
void attribute_logits(const TaskModel& model, const Hooks& pass, bool has_ffn, LensResult& r) {
    const ModelConfig& c = model.decoder_lm()->config;
    const size_t L = r.layers, H = r.heads, B = r.batch, T = r.positions, D = c.block.attention.width;
    if (c.block.norm == Norm::post) {
        r.note = "post-norm blocks end in a norm of their own: the final stream is no sum of components, so no direct logit attribution";
        return;
    }
    r.attribution = true;
    const std::vector<double> x = pass.last(block(L - 1) + "resid_post").values();  // (B, T, D)
    const std::vector<double> unembed = parameter(model, "head.weight").values();    // (V, D)
    const bool pre = c.block.norm == Norm::pre, rms = c.block.norm_type == NormType::rms;
    const std::vector<double> w = pre ? parameter(model, "ln_f.weight").values() : std::vector<double>(D, 1.0);
    const Tensor ln_bias = pre ? parameter(model, "ln_f.bias") : Tensor();
    std::vector<double> scale(B * T, 1.0);  // 1 / the final norm's frozen denominator
    for (size_t i = 0; i < B * T && pre; ++i) {
        double mean = 0, squares = 0;
        for (size_t d = 0; d < D; ++d) mean += x[i * D + d] / static_cast<double>(D);
        for (size_t d = 0; d < D; ++d) {
            const double centred = rms ? x[i * D + d] : x[i * D + d] - mean;
            squares += centred * centred / static_cast<double>(D);
        }
        scale[i] = 1.0 / std::sqrt(squares + 1e-5);
    }
    // the logit a component c (B, T, D) adds at each position
    auto attribute = [&](const std::vector<double>& comp, size_t i) {
        double mean = 0, dot = 0;
        if (pre && !rms)
            for (size_t d = 0; d < D; ++d) mean += comp[i * D + d] / static_cast<double>(D);
        for (size_t d = 0; d < D; ++d) dot += (comp[i * D + d] - mean) * scale[i] * w[d] * unembed[r.targets[i] * D + d];
        return dot;
    };
    const std::vector<double> embed = pass.last("embed").values();
    for (size_t i = 0; i < B * T; ++i) r.layer_logit.push_back(attribute(embed, i));
    r.head_logit.assign(L * H * B * T, 0.0);
    for (size_t l = 0; l < L; ++l) {
        const std::vector<double> z = pass.last(block(l) + "attn.z").values();  // (B, T, H, d_h)
        const Tensor w_out = parameter(model, block(l) + "attn.out_proj.weight");  // (D, H d_h)
        const std::vector<double> wo = w_out.values();
        const size_t d_h = z.size() / (B * T * H);
        const Tensor b_out = parameter(model, block(l) + "attn.out_proj.bias");
        std::vector<double> bias_comp(B * T * D, 0.0);
        if (b_out.defined()) {
            const std::vector<double> bo = b_out.values();
            for (size_t i = 0; i < B * T; ++i) std::copy(bo.begin(), bo.end(), bias_comp.begin() + i * D);
        }
        std::vector<double> layer_total(B * T, 0.0);
        for (size_t h = 0; h < H; ++h) {
            std::vector<double> comp(B * T * D, 0.0);  // z_h W_O,h^T
            for (size_t i = 0; i < B * T; ++i)
                for (size_t d = 0; d < D; ++d)
                    for (size_t e = 0; e < d_h; ++e) comp[i * D + d] += z[(i * H + h) * d_h + e] * wo[d * H * d_h + h * d_h + e];
            for (size_t i = 0; i < B * T; ++i) {
                const double a = attribute(comp, i);
                r.head_logit[(l * H + h) * B * T + i] = a;
                layer_total[i] += a;
            }
        }
        const std::vector<double> ffn = has_ffn ? pass.last(block(l) + "ffn.out").values() : std::vector<double>();
        for (size_t i = 0; i < B * T; ++i)
            r.layer_logit.push_back(layer_total[i] + attribute(bias_comp, i) + (has_ffn ? attribute(ffn, i) : 0.0));
    }
    const std::vector<double> nb = ln_bias.defined() ? ln_bias.values() : std::vector<double>(D, 0.0);
    for (size_t i = 0; i < B * T; ++i) {
        double dot = 0;
        for (size_t d = 0; d < D; ++d) dot += nb[d] * unembed[r.targets[i] * D + d];
        r.norm_bias_logit.push_back(dot);
    }
}

}  // namespace

LensResult logit_lens(const TaskModel& model, const Indices& tokens, const std::vector<int32_t>& targets) {
    if (model.encoder_decoder() || model.decoder_lm() == nullptr) fail("lens", "the lens takes decoder models; this is an encoder-decoder");
    const ModelConfig& c = model.decoder_lm()->config;
    NoGradGuard no_grad;
    model.module().eval();
    LensResult r;
    r.layers = model.layers();
    r.heads = model.heads();
    r.batch = tokens.shape[0];
    r.positions = tokens.shape[1];
    r.vocab = c.vocab;
    const size_t L = r.layers, B = r.batch, T = r.positions, V = r.vocab;
    Batch batch;
    batch.inputs = tokens;
    batch.lengths.assign(B, T);

    // the streams, every head's output and every feed-forward output of one pass
    const bool has_ffn = has_hook_point(model, "blocks.0.ffn.out");
    Hooks pass;
    pass.record("embed").record("blocks.*.resid_post").record("blocks.*.attn.z").record("logits");
    if (has_ffn) pass.record("blocks.*.ffn.out");
    model.forward(batch, pass);
    const std::vector<double> logits = pass.last("logits").values();
    r.targets = targets;
    if (r.targets.empty())
        for (size_t i = 0; i < B * T; ++i)
            r.targets.push_back(static_cast<int32_t>(std::max_element(logits.begin() + i * V, logits.begin() + (i + 1) * V) -
                                                     (logits.begin() + i * V)));
    if (r.targets.size() != B * T) fail("lens", "--target needs one token per position (" + std::to_string(B * T) + ")");
    for (int32_t t : r.targets)
        if (t < 0 || static_cast<size_t>(t) >= V)
            fail("lens", "target " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(V) + ")");

    // the lens: the last block's output replaced by each stream in turn
    r.streams.push_back("embed");
    for (size_t l = 0; l < L; ++l) r.streams.push_back(block(l) + "resid_post");
    std::vector<Tensor> lens;
    for (const std::string& stream : r.streams) {
        Hooks swap;
        const Tensor& value = pass.last(stream);
        swap.replace(block(L - 1) + "resid_post", [&](const std::string&, const Tensor&) { return value; });
        lens.push_back(reshape(model.forward(batch, swap).to(Device::cpu), {1, B, T, V}));
    }
    r.lens_logits = concat(lens, 0);  // (L + 1, B, T, V)
    const std::vector<double> lv = r.lens_logits.values();
    for (size_t s = 0; s <= L; ++s)
        for (size_t i = 0; i < B * T; ++i) {
            const double* row = lv.data() + (s * B * T + i) * V;
            r.target_logprob.push_back(log_prob_at(row, V, r.targets[i]));
            r.top_token.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
        }

    r.target_logit.resize(B * T);
    for (size_t i = 0; i < B * T; ++i) r.target_logit[i] = logits[i * V + r.targets[i]];
    attribute_logits(model, pass, has_ffn, r);
    return r;
}

}  // namespace attnlab