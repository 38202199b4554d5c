#include "experiments/analysis/inspect.h"

#include "data/h5file.h"
#include "experiments/files/provenance.h"
#include "experiments/run/attention_metrics.h"

namespace attnlab {

namespace {

std::vector<float> floats(const Tensor& t) {
    const std::vector<double> v = t.values();
    return std::vector<float>(v.begin(), v.end());
}

void write_tokens(const h5::File& out, const std::string& name, const std::string& lengths_name, const Indices& tokens,
                  const std::vector<size_t>& lengths) {
    out.write<int32_t>(name, tokens.shape, tokens.values.data());
    out.write<int64_t>(lengths_name, std::vector<int64_t>(lengths.begin(), lengths.end()));
}

// The token dataset each axis of a kind's weights belongs to.
struct KindAxes {
    const char* queries;
    const char* keys;
    bool causal;
};
KindAxes axes_of(const std::string& kind) {
    if (kind == "self") return {"tokens", "tokens", true};
    if (kind == "enc_self") return {"src", "src", false};
    if (kind == "dec_self") return {"tgt", "tgt", true};
    return {"tgt", "src", false};  // cross
}

void write_hidden(const h5::Group& hidden, const std::string& group, const std::vector<Tensor>& states) {
    const h5::Group g = hidden.create_group(group);
    for (size_t l = 0; l < states.size(); ++l)
        g.write<float>("layer_" + std::to_string(l), states[l].shape(), floats(states[l]).data());
}



}  // namespace

void write_inspection(const std::string& path, const Inspection& in) {
    const TaskModel& model = *in.model;
    const Batch& batch = *in.batch;
    h5::File out = h5::File::create(path, "inspect");
    write_output_attrs(out, "attnlab-inspect", in.checkpoint_path, in.checkpoint->step);
    out.write_attr_string("config", in.checkpoint->config_toml);
    out.write_attr_string("kind", model.encoder_decoder() ? "encoder-decoder" : "decoder");
    out.write_attr_int("layers", static_cast<int64_t>(model.layers()));
    out.write_attr_int("heads", static_cast<int64_t>(model.heads()));
    if (model.encoder_decoder()) {
        write_tokens(out, "src", "src_lengths", batch.src, batch.src_lengths);
        write_tokens(out, "tgt", "tgt_lengths", batch.inputs, batch.lengths);
    } else {
        write_tokens(out, "tokens", "lengths", batch.inputs, batch.lengths);
    }
    out.write<float>("logits", in.logits.shape(), floats(in.logits).data());
    const h5::Group attention = out.create_group("attention");
    for (const AttentionKind& kind : model.kinds_for(batch)) {
        const h5::Group g = attention.create_group(kind.name);
        const KindAxes axes = axes_of(kind.name);
        g.write_attr_string("queries", axes.queries);
        g.write_attr_string("keys", axes.keys);
        g.write_attr_int("causal", axes.causal ? 1 : 0);
        const std::vector<Tensor> weights = recorded_per_layer(*in.hooks, kind, "pattern");
        for (size_t l = 0; l < weights.size(); ++l)
            g.write<float>("layer_" + std::to_string(l), weights[l].shape(), floats(weights[l]).data());
        const std::vector<double> score_std_flat = score_std(recorded_per_layer(*in.hooks, kind, "scores"), kind.mask);
        const std::vector<float> score_std_values(score_std_flat.begin(), score_std_flat.end());
        g.write<float>("score_std", Shape{weights.size(), model.heads()}, score_std_values.data());
    }
    const h5::Group hidden = out.create_group("hidden");
    auto states = [&](bool encoder) {
        std::vector<Tensor> out_states;
        for (const std::string& point : model.hidden_points(encoder)) out_states.push_back(in.hooks->last(point));
        return out_states;
    };
    write_hidden(hidden, "decoder", states(false));
    if (model.encoder_decoder()) write_hidden(hidden, "encoder", states(true));
    if (!in.extra.empty()) {
        const h5::Group named = out.create_group("hooks");
        for (const std::string& point : in.extra) {
            const Tensor& value = in.hooks->last(point);
            named.write<float>(point, value.shape(), floats(value).data());
            named.write_attr_string(point, model.module().hook_point_axes(point));  // "batch pos d_model"
        }
    }
    out.close();
}

}  // namespace attnlab
