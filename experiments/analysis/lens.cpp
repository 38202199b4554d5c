#include "experiments/analysis/lens.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "autograd/ops.h"
#include "data/h5file.h"
#include "experiments/analysis/log_prob.h"
#include "experiments/files/provenance.h"
#include "experiments/files/output_file.h"
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

std::vector<double> flat(const Tensor& t) { return t.to(Device::cpu).values(); }

// Direct logit attribution of r.targets (the header's formula) from one pass's
// recorded embeddings, head outputs and feed-forward outputs, in the model's
// ops: each component goes through the final norm's own linear part at the
// final stream's statistics (NormLayer::frozen), then onto the unembedding row
// of the target.
void attribute_logits(const TaskModel& model, const Hooks& pass, bool has_ffn, LensResult& r) {
    const DecoderLM& lm = *model.decoder_lm();
    const size_t L = r.layers, H = r.heads, B = r.batch, T = r.positions;
    if (lm.config.block.norm == Norm::post) {
        r.note = "post-norm blocks end in a norm of their own: the final stream is no sum of components, so no direct logit attribution";
        return;
    }
    r.attribution = true;
    const NormLayer* final_norm = lm.final_norm();  // pre-norm: ln_f; no norm: none
    const Tensor stream = pass.last(block(L - 1) + "resid_post");                     // (B, T, D)
    const Tensor unembed_rows = embedding(parameter(model, lm.unembedding_name()).to(Device::cpu),
                                          Indices({B, T}, r.targets));                  // (B, T, D): W_U[target]
    auto normed = [&](const Tensor& component) { return final_norm ? final_norm->frozen(component, stream) : component; };
    // the logit a component (B, T, D) adds at each position, (B * T) values
    auto attribute = [&](const Tensor& component) { return flat(sum(normed(component) * unembed_rows, {-1})); };

    r.layer_logit = attribute(pass.last("embed"));
    r.head_logit.assign(L * H * B * T, 0.0);
    for (size_t l = 0; l < L; ++l) {
        const Tensor& result = pass.last(block(l) + "attn.result");                     // (B, T, H, D): each head in the stream
        const Tensor b_out = parameter(model, block(l) + "attn.out_proj.bias");
        std::vector<double> layer_total(B * T, 0.0);
        for (size_t h = 0; h < H; ++h) {
            const std::vector<double> a = attribute(reshape(slice(result, 2, h, h + 1), stream.shape()));  // (B, T, D)
            std::copy(a.begin(), a.end(), r.head_logit.begin() + (l * H + h) * B * T);
            for (size_t i = 0; i < B * T; ++i) layer_total[i] += a[i];
        }
        // the output projection's bias and the feed-forward output join the layer's row
        std::vector<Tensor> rest;
        if (b_out.defined()) rest.push_back(b_out.to(Device::cpu) * Tensor::ones(stream.shape(), stream.dtype()));
        if (has_ffn) rest.push_back(pass.last(block(l) + "ffn.out"));
        for (const Tensor& component : rest) {
            const std::vector<double> a = attribute(component);
            for (size_t i = 0; i < B * T; ++i) layer_total[i] += a[i];
        }
        r.layer_logit.insert(r.layer_logit.end(), layer_total.begin(), layer_total.end());
    }
    // what the norm adds beyond its linear part (its bias): forward(x) - frozen(x, x)
    const Tensor bias_part = final_norm ? final_norm->forward(stream.to(final_norm->weight.device())).to(Device::cpu) -
                                              final_norm->frozen(stream, stream)
                                        : Tensor::zeros(stream.shape(), stream.dtype());
    r.norm_bias_logit = flat(sum(bias_part * unembed_rows, {-1}));
    if (const Tensor head_bias = parameter(model, "head.bias"); head_bias.defined()) {  // model.head_bias: b_U[target]
        const std::vector<double> b = head_bias.to(Device::cpu).values();
        for (size_t i = 0; i < B * T; ++i) r.norm_bias_logit[i] += b[static_cast<size_t>(r.targets[i])];
    }
}

std::vector<int64_t> wide(const std::vector<int32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

}  // namespace

std::string write_lens_file(const OutputFile& out, const std::string& path, int64_t step, const std::vector<int32_t>& tokens,
                     const LensResult& r) {
    const size_t L = r.layers, H = r.heads, T = r.positions;
    return write_output(out, "[lens]", [&](const std::string& tmp) {
        h5::File f = h5::File::create(tmp, "lens");
        write_output_attrs(f, "attnlab-lens", path, step);
        f.write_attr_int("attribution", r.attribution ? 1 : 0);
        if (!r.note.empty()) f.write_attr_string("note", r.note);
        f.write<int64_t>("tokens", Shape{1, T}, wide(tokens).data());
        f.write<int64_t>("targets", Shape{1, T}, wide(r.targets).data());
        f.write_strings("streams", r.streams);
        const h5::Group lens = f.create_group("lens");
        const std::vector<double> logits = r.lens_logits.values();
        lens.write<double>("logits", r.lens_logits.shape(), logits.data());
        lens.write<double>("target_logprob", Shape{L + 1, 1, T}, r.target_logprob.data());
        lens.write<int64_t>("top_token", Shape{L + 1, 1, T}, wide(r.top_token).data());
        if (r.attribution) {
            const h5::Group dla = f.create_group("dla");
            dla.write<double>("head", Shape{L, H, 1, T}, r.head_logit.data());
            dla.write<double>("layer", Shape{L + 1, 1, T}, r.layer_logit.data());
            dla.write<double>("norm_bias", Shape{1, T}, r.norm_bias_logit.data());
            dla.write<double>("target_logit", Shape{1, T}, r.target_logit.data());
        }
        f.close();
    });
}

TableSize lens_size(const TaskModel& model, size_t B, size_t T) {
    const size_t streams = model.layers() + 1, V = model.decoder_lm() ? model.decoder_lm()->config.vocab : 0;
    const double lens = static_cast<double>(streams) * static_cast<double>(B) * static_cast<double>(T) * static_cast<double>(V);
    const TableSize forward = forward_tables(model, {.rows = B, .positions = T});
    const auto n = [](size_t x) { return std::to_string(x); };
    return {"the lens logits [" + n(streams) + " streams x " + n(B) + " x " + n(T) + " positions x " + n(V) + " tokens], " + forward.table,
            (4 + 4 + 8) * lens + forward.bytes};
}

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
    pass.record("embed").record("blocks.*.resid_post").record("blocks.*.attn.result").record("logits");
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