#include "experiments/run/model_factory.h"

#include <algorithm>
#include <optional>

#include "data/file_task.h"
#include "data/finite_task.h"
#include "data/text_task.h"
#include "experiments/files/checkpoint.h"
#include "experiments/config/config.h"

namespace attnlab {

ModelConfig model_config(const Config& c, size_t max_len) {
    ModelConfig m;
    m.vocab = static_cast<size_t>(c.task.vocab);
    m.layers = static_cast<size_t>(c.model.layers);
    m.max_len = c.model.max_len > 0 ? static_cast<size_t>(c.model.max_len) : max_len;
    m.positional = parse_positional(c.model.positional);
    m.rotary_base = c.model.rotary_base;
    m.rotary_dims = static_cast<size_t>(c.model.rotary_dims);
    m.head_bias = c.model.head_bias;
    m.embedding_dropout = c.model.dropout;
    BlockConfig& b = m.block;
    b.attention.width = static_cast<size_t>(c.model.width);
    b.attention.heads = static_cast<size_t>(c.model.heads);
    b.attention.kv_heads = static_cast<size_t>(c.model.kv_heads);
    b.attention.head_width = static_cast<size_t>(c.model.head_width);
    b.attention.scale = c.model.scale;
    b.attention.bias = c.model.bias;
    b.attention.dropout = c.model.attn_dropout;
    b.attention.masked_rows = parse_masked_rows(c.model.masked_rows);
    b.ffn = static_cast<size_t>(c.model.ffn);
    b.activation = activation_choices().parse(c.model.activation);
    b.norm = parse_norm(c.model.norm);
    b.norm_type = parse_norm_type(c.model.norm_type);
    b.dropout = c.model.dropout;
    b.ffn_bias = c.model.ffn_bias;
    b.norm_bias = c.model.norm_bias;
    b.norm_eps = c.model.norm_eps;
    b.parallel = c.model.parallel;
    m.tie_embeddings = c.model.tie_embeddings;
    m.init = init_choices().parse(c.model.init);
    for (const std::string& head : c.model.ablate_heads) m.ablated_heads.push_back(ablated_head(head));
    m.variant = c.model.variant;
    return m;
}

std::unique_ptr<BatchSource> make_batch_source(const Config& config, uint64_t seed, uint64_t stream) {
    if (config.task.name == "none")
        throw Error("task.name = \"none\" has no data to draw (a model attnlab import wrote): eval, ablate, audit and cache take "
                    "a token file (--data FILE.h5), the other analyses tokens (--tokens, --input, --prompt, --clean/--corrupt); "
                    "train needs a task");
    if (config.task.name == "file")
        return std::make_unique<FileTask>(config.task.path, static_cast<size_t>(config.task.vocab), seed, stream);
    if (config.task.name == "text")
        return std::make_unique<TextTask>(config.task.path, config.task.alphabet, static_cast<size_t>(config.task.max_len), seed, stream);
    if (config.task.train_size > 0) {  // the same set for every stream: train on it, or evaluate beside it
        // always the run's set, whatever seed the other streams are drawn with (cache --seed, eval --seed)
        auto training = std::make_unique<TrainingSet>(task_config(config), static_cast<size_t>(config.task.train_size),
                                                      static_cast<uint64_t>(config.run.seed));
        if (stream == 0) return training;
        return std::make_unique<HeldOutTask>(task_config(config), seed, stream, training->keys());
    }
    return std::make_unique<TaskGenerator>(task_config(config), seed, stream);
}

void resolve_text_task(Config& config) {
    if (config.task.name != "text") return;
    // the file's characters (at least two); one the config gives is checked as validate() does
    if (config.task.alphabet.empty()) config.task.alphabet = text_alphabet(config.task.path);
    config.task.vocab = static_cast<int64_t>(alphabet_letters(config.task.alphabet, "task.alphabet").size());
}

BpeTokenizer model_tokenizer(const Config& config) {
    try {
        return BpeTokenizer::for_model(config.task.tokenizer, config.task.vocab);
    } catch (const Error& e) {  // "[bpe] FOLDER: problem" -> "task.tokenizer FOLDER: problem", as task.path's
        std::string problem = e.what();
        if (problem.rfind("[bpe] ", 0) == 0) problem.erase(0, 6);
        throw ConfigError("task.tokenizer", "task.tokenizer " + problem);
    }
}

TaskModel::TaskModel(const Config& config, size_t max_len, Rng& init, Rng* dropout_rng) {
    const ModelConfig m = model_config(config, max_len);
    if (config.model.kind == "encoder-decoder")
        enc_dec_ = std::make_unique<EncoderDecoder>(m, init, dropout_rng);
    else
        decoder_ = std::make_unique<DecoderLM>(m, init, dropout_rng);
}

Tensor TaskModel::forward(const Batch& batch) const {
    if (enc_dec_) return enc_dec_->forward(batch.src, batch.src_lengths, batch.inputs, batch.lengths);
    return decoder_->forward(batch.inputs, batch.lengths);
}

Tensor TaskModel::forward(const Batch& batch, Hooks& hooks) const {
    HookScope scope(module(), hooks);
    return forward(batch);
}

Tensor TaskModel::forward_counted(const Batch& batch, Hooks* hooks) const {
    std::optional<HookScope> scope;
    if (hooks) scope.emplace(module(), *hooks);
    const Indices rows = counted_rows(batch);
    if (decoder_) return decoder_->forward_at(batch.inputs, batch.lengths, rows);
    const Tensor logits = enc_dec_->forward(batch.src, batch.src_lengths, batch.inputs, batch.lengths);  // (B, T, V)
    return embedding(reshape(logits, {logits.size(0) * logits.size(1), logits.size(2)}), rows);
}

Tensor TaskModel::forward_from(const Batch& batch, size_t first, const Tensor& resid, Hooks* hooks) const {
    if (!decoder_) fail("model", "forward_from runs decoder models");
    if (!hooks) return decoder_->forward_from(first, resid, batch.inputs, batch.lengths);
    HookScope scope(module(), *hooks);
    return decoder_->forward_from(first, resid, batch.inputs, batch.lengths);
}

Tensor TaskModel::forward_blocks(const Batch& batch, size_t first, size_t last, const Tensor& resid, Hooks* hooks) const {
    if (!decoder_) fail("model", "forward_blocks runs decoder models");
    if (!hooks) return decoder_->forward_blocks(first, last, resid, batch.inputs, batch.lengths);
    HookScope scope(module(), *hooks);
    return decoder_->forward_blocks(first, last, resid, batch.inputs, batch.lengths);
}

std::vector<std::string> TaskModel::kinds() const {
    if (enc_dec_) return {"enc_self", "dec_self", "cross"};
    return {"self"};
}

std::vector<AttentionKind> TaskModel::kinds_for(const Batch& batch) const {
    auto names = [&](const std::string& stack, const std::string& module) {  // "blocks.<l>.attn"
        std::vector<std::string> out;
        for (size_t l = 0; l < layers(); ++l) out.push_back(stack + "." + std::to_string(l) + "." + module);
        return out;
    };
    const ModelConfig& m = enc_dec_ ? enc_dec_->config : decoder_->config;  // the masks the model itself runs under
    if (!enc_dec_) return {{"self", m.self_mask(batch.inputs, batch.lengths), batch.lengths, names("blocks", "attn")}};
    return {{"enc_self", m.encoder_mask(batch.src_lengths), batch.src_lengths, names("encoder", "attn")},
            {"dec_self", m.self_mask(batch.inputs, batch.lengths), batch.lengths, names("decoder", "attn")},
            {"cross", m.cross_mask(batch.src_lengths), batch.lengths, names("decoder", "cross_attn")}};
}

std::vector<std::string> TaskModel::hidden_points(bool encoder) const {
    const std::string stack = enc_dec_ ? (encoder ? "encoder" : "decoder") : "blocks";
    std::vector<std::string> out{enc_dec_ ? (encoder ? "src_embed" : "tgt_embed") : "embed"};
    for (size_t l = 0; l < layers(); ++l) out.push_back(stack + "." + std::to_string(l) + ".resid_post");
    return out;
}

TableSize forward_tables(const TaskModel& model, const ForwardInput& in) {
    const ModelConfig& m = model.encoder_decoder() ? model.enc_dec()->config : model.decoder_lm()->config;
    const bool composed = m.variant.runs_composed(true);  // MultiHeadAttention::attend; on the device, the most it forms
    const size_t tables = in.tables + (composed || in.tables > 0 ? 2 : 0) + (composed && in.graph ? 4 * attention_sites(model).size() : 0);
    const size_t side = std::max(in.positions, in.sources);  // T, or max(T, S): every attention's queries and keys
    const double B = static_cast<double>(in.rows), H = static_cast<double>(model.heads()), T = static_cast<double>(in.positions),
                 A = static_cast<double>(side), V = static_cast<double>(m.vocab);
    const auto n = [](size_t x) { return std::to_string(x); };
    TableSize size;
    size.table = "the logits [" + n(in.rows) + " x " + n(in.positions) + " positions x " + n(m.vocab) + " tokens]";
    size.bytes = (4 + 8) * B * T * V;
    if (tables == 0) return size;
    size.table = "the attention tables [" + n(tables) + " x " + n(in.rows) + " x " + n(model.heads()) + " heads x " + n(side) + " x " +
                 n(side) + " positions] and " + size.table;
    size.bytes += 4 * static_cast<double>(tables) * B * H * A * A;
    return size;
}

size_t recorded_attention_tables(const TaskModel& model, const Hooks& hooks) {
    const std::vector<std::string> patterns = hooks.patterns();
    size_t tables = 0;
    for (const Module::HookPoint& p : model.module().described_hook_points()) {
        const auto has = [&](const char* axis) { return std::find(p.axes.begin(), p.axes.end(), axis) != p.axes.end(); };
        const bool recorded = std::any_of(patterns.begin(), patterns.end(), [&](const std::string& pattern) { return hook_pattern_matches(pattern, p.name); });
        if (recorded && has("query_pos") && has("key_pos")) ++tables;
    }
    return tables;
}

bool has_hook_point(const TaskModel& model, const std::string& point) {
    const std::vector<std::string> points = model.module().hook_points();
    return std::find(points.begin(), points.end(), point) != points.end();
}

std::vector<Tensor> recorded_per_layer(const Hooks& hooks, const AttentionKind& kind, const std::string& point) {
    std::vector<Tensor> out;
    for (const std::string& layer : kind.layers) out.push_back(hooks.last(layer + "." + point));
    return out;
}

Module& TaskModel::module() const {
    if (enc_dec_) return *enc_dec_;
    return *decoder_;
}

size_t TaskModel::layers() const { return enc_dec_ ? enc_dec_->config.layers : decoder_->config.layers; }

size_t TaskModel::heads() const {
    return enc_dec_ ? enc_dec_->config.block.attention.heads : decoder_->config.block.attention.heads;
}

LoadedModel load_model(const Config& config, const CheckpointData& checkpoint, const std::string& source) {
    LoadedModel loaded;
    loaded.max_len = config.model.max_len > 0 ? static_cast<size_t>(config.model.max_len)
                                              : make_batch_source(config, 0, 0)->max_sequence_length();
    Rng init(0);  // the values are replaced by the checkpoint's
    loaded.model = std::make_unique<TaskModel>(config, loaded.max_len, init, nullptr);
    try {
        loaded.model->module().load_state_dict(checkpoint.params);
    } catch (const Error& e) {
        throw Error(std::string("[checkpoint] ") + source + ": " + e.what());
    }
    loaded.model->module().eval();
    return loaded;
}

std::vector<AttentionSite> attention_sites(const TaskModel& model) {
    std::vector<AttentionSite> sites;
    auto add = [&](const std::string& kind, size_t layer, const std::string& name, const MultiHeadAttention& attn) {
        sites.push_back({kind, layer, name, &attn, attn.heads, attn.kv_heads, attn.head_width, attn.scale, attn.masked_rows,
                         attn.sink.defined() ? attn.sink.values() : std::vector<double>(),
                         attn.rel_bias.defined() ? attn.rel_bias.values() : std::vector<double>(), attn.ablated_heads});
    };
    auto at = [](const std::string& stack, size_t l, const std::string& module) { return stack + "." + std::to_string(l) + "." + module; };
    if (DecoderLM* d = model.decoder_lm()) {
        for (size_t l = 0; l < d->blocks.size(); ++l) add("self", l, at("blocks", l, "attn"), d->blocks[l]->attn);
    } else if (EncoderDecoder* e = model.enc_dec()) {
        for (size_t l = 0; l < e->encoder.size(); ++l) add("enc_self", l, at("encoder", l, "attn"), e->encoder[l]->attn);
        for (size_t l = 0; l < e->decoder.size(); ++l) add("dec_self", l, at("decoder", l, "attn"), e->decoder[l]->attn);
        for (size_t l = 0; l < e->decoder.size(); ++l) add("cross", l, at("decoder", l, "cross_attn"), *e->decoder[l]->cross_attn);
    }
    return sites;
}

}  // namespace attnlab
