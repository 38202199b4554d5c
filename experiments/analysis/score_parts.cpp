#include "experiments/analysis/score_parts.h"

#include <cmath>
#include <filesystem>

#include "autograd/ops.h"
#include "data/h5file.h"
#include "experiments/analysis/patching.h"
#include "experiments/files/provenance.h"
#include "experiments/files/output_file.h"
#include "experiments/run/head_scores.h"
#include "experiments/run/model_factory.h"
#include "layers/hooks.h"
#include "layers/models.h"

namespace attnlab {

namespace {

std::string block(size_t layer) { return "blocks." + std::to_string(layer) + "."; }

// A parameter on the CPU, or undefined when the model has none of that name (a bias).
Tensor optional_parameter(const TaskModel& model, const std::string& name) {
    for (const auto& [n, p] : model.module().named_parameters())
        if (n == name) return p.to(Device::cpu);
    return Tensor();
}

}  // namespace

TableSize score_parts_size(const TaskModel& model, size_t T) {
    return forward_tables(model, {.rows = 1, .positions = T, .tables = 1});  // the block's scores, recorded
}

ScoreParts score_parts(const TaskModel& model, const std::vector<int32_t>& tokens, size_t layer, size_t head, size_t query,
                       size_t key) {
    if (model.encoder_decoder() || model.decoder_lm() == nullptr)
        fail("decompose", "the score decomposition reads a decoder's residual stream; this checkpoint is an encoder-decoder");
    const DecoderLM& lm = *model.decoder_lm();
    if (lm.config.block.norm == Norm::post)
        fail("decompose", "model.norm = \"post\": the stream entering a post-norm block is no sum of components");
    const size_t L = model.layers(), H = model.heads(), T = tokens.size();
    if (layer >= L) fail("decompose", "--head " + std::to_string(layer) + "." + std::to_string(head) + ": the model has " + std::to_string(L) + " layers");
    if (head >= H) fail("decompose", "--head " + std::to_string(layer) + "." + std::to_string(head) + ": the model has " + std::to_string(H) + " heads");
    if (query >= T || key >= T)
        fail("decompose", "--query " + std::to_string(query) + " --key " + std::to_string(key) + ": the prompt has " + std::to_string(T) + " positions");

    // one pass: the stream entering the block, every component of it, the score itself
    Hooks pass;
    pass.record("embed").record(block(layer) + "resid_pre").record(block(layer) + "attn.scores");
    for (size_t l = 0; l < layer; ++l) {
        pass.record(block(l) + "attn.result");
        if (lm.config.block.ffn > 0) pass.record(block(l) + "ffn.out");
    }
    run_prompts(model, {tokens}, &pass);
    ScoreParts r;
    r.layer = layer, r.head = head, r.query = query, r.key = key;
    r.score = pass.last(block(layer) + "attn.scores").at({0, head, query, key});
    if (std::isinf(r.score))
        fail("decompose", "key " + std::to_string(key) + " is not eligible for query " + std::to_string(query) +
                              " (its score is -inf: causal, window or padding)");

    // the components of the stream (1, T, D)
    const Tensor stream = pass.last(block(layer) + "resid_pre");
    std::vector<Tensor> components;
    const Tensor tok = embedding(optional_parameter(model, "tok_emb.weight").to(stream.dtype()), Indices({1, T}, tokens));
    components.push_back(tok), r.components.push_back("tok_emb");
    if (lm.config.position_table()) components.push_back(pass.last("embed") - tok), r.components.push_back("pos_emb");
    Tensor attn_bias;
    for (size_t l = 0; l < layer; ++l) {
        const Tensor& result = pass.last(block(l) + "attn.result");  // (1, T, H, D)
        for (size_t h = 0; h < H; ++h) {
            components.push_back(reshape(slice(result, 2, h, h + 1), stream.shape()));
            r.components.push_back(std::to_string(l) + "." + std::to_string(h));
        }
        if (lm.config.block.ffn > 0) components.push_back(pass.last(block(l) + "ffn.out")), r.components.push_back("mlp." + std::to_string(l));
        const Tensor b = optional_parameter(model, block(l) + "attn.out_proj.bias");
        if (b.defined()) attn_bias = attn_bias.defined() ? attn_bias + b : b;
    }
    if (attn_bias.defined())
        components.push_back(Tensor::zeros(stream.shape(), stream.dtype()) + attn_bias.to(stream.dtype())), r.components.push_back("attn_bias");
    Tensor total = components.front();
    for (size_t c = 1; c < components.size(); ++c) total = total + components[c];
    const std::vector<double> sum_values = total.values(), stream_values = stream.values();
    for (size_t i = 0; i < sum_values.size(); ++i) r.stream_error = std::max(r.stream_error, std::abs(sum_values[i] - stream_values[i]));

    // each component's term of q and of k: the norm's linear part at the stream's
    // statistics, the head's projection, the rotation; the last term the biases
    const NormLayer* norm = lm.blocks[layer]->attention_norm();
    const HeadWeights w = head_weights(model)[layer * H + head];
    const size_t d_h = w.q.size(0), group = H / (lm.config.block.attention.kv_heads == 0 ? H : lm.config.block.attention.kv_heads);
    auto bias_rows = [&](const char* proj, size_t index) {
        const Tensor b = optional_parameter(model, block(layer) + "attn." + proj + ".bias");
        return b.defined() ? slice(b, 0, index * d_h, (index + 1) * d_h).to(stream.dtype()) : Tensor::zeros({d_h}, stream.dtype());
    };
    const Tensor norm_bias = norm ? norm->forward(stream) - norm->frozen(stream, stream) : Tensor::zeros(stream.shape(), stream.dtype());
    auto terms = [&](const Tensor& weight, const Tensor& bias) {
        std::vector<Tensor> out;
        for (const Tensor& c : components) out.push_back(linear(norm ? norm->frozen(c, stream) : c, weight.to(stream.dtype()), Tensor()));
        out.push_back(linear(norm_bias, weight.to(stream.dtype()), bias));
        if (lm.config.positional == Positional::rotary)
            for (Tensor& t : out) t = rotary_features(t, 1, d_h, lm.blocks[layer]->attn.rotary_dims, 0, lm.config.rotary_base);
        return out;  // each (1, T, d_h)
    };
    const std::vector<Tensor> q = terms(w.q, bias_rows("q_proj", head)), k = terms(w.k, bias_rows("k_proj", head / group));
    r.components.push_back("bias");
    const double scale = attention_sites(model)[layer].scale;
    double sum = 0;
    for (const Tensor& qc : q) {
        const std::vector<double> qi = slice(qc, 1, query, query + 1).values();
        for (const Tensor& kc : k) {
            const std::vector<double> kj = slice(kc, 1, key, key + 1).values();
            double dot = 0;
            for (size_t d = 0; d < d_h; ++d) dot += qi[d] * kj[d];
            r.parts.push_back(scale * dot);
            sum += scale * dot;
        }
    }
    r.modifier = r.score - sum;
    return r;
}

std::string write_score_parts_file(const OutputFile& out, const std::string& checkpoint, int64_t step, const std::vector<int32_t>& tokens,
                            const ScoreParts& r) {
    return write_output(out, "[decompose]", [&](const std::string& tmp) {
        h5::File f = h5::File::create(tmp, "decompose");
        write_output_attrs(f, "attnlab-score-parts", checkpoint, step);
        f.write_attr_int("layer", static_cast<int64_t>(r.layer));
        f.write_attr_int("head", static_cast<int64_t>(r.head));
        f.write_attr_int("query", static_cast<int64_t>(r.query));
        f.write_attr_int("key", static_cast<int64_t>(r.key));
        f.write_attr_double("score", r.score);
        f.write_attr_double("modifier", r.modifier);
        f.write<int64_t>("tokens", std::vector<int64_t>(tokens.begin(), tokens.end()));
        f.write_strings("components", r.components);
        f.write<double>("parts", Shape{r.components.size(), r.components.size()}, r.parts.data());
        f.close();
    });
}

}  // namespace attnlab
