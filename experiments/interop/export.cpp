// The three exports (export.h). Each format is one function from the model's
// parameters to the other tool's names and layouts, beside the refusals that
// say what that tool cannot express.
#include "experiments/interop/export.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "experiments/files/run_files.h"
#include "experiments/interop/arrays.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

const Choices<ExportFormat>& export_format_choices() {
    static const Choices<ExportFormat> choices{"export", "--format ", {{ExportFormat::safetensors, "safetensors"},
                                                                      {ExportFormat::hf, "hf"}, {ExportFormat::tl, "tl"}}};
    return choices;
}

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using namespace interop;

// The model's parameters by name; an absent bias reads as zeros (adding zero adds nothing).
class Parameters {
public:
    explicit Parameters(const TaskModel& model) {
        for (const auto& [name, tensor] : model.module().named_parameters()) tensors_.emplace(name, tensor);
    }
    Array operator()(const std::string& name) const {
        const auto it = tensors_.find(name);
        if (it == tensors_.end()) fail("export", "the model has no parameter " + name);
        return array_of(it->second);
    }
    Array or_zeros(const std::string& name, const Shape& shape) const {
        return tensors_.count(name) ? (*this)(name) : zeros(shape);
    }

private:
    std::unordered_map<std::string, Tensor> tensors_;
};

// The decoder's sizes, as its modules resolved them.
struct Sizes {
    size_t vocab, layers, width, heads, kv_heads, head_width, ffn, positions;
};

Sizes sizes_of(const LoadedCheckpoint& in) {
    const DecoderLM& lm = *in.loaded.model->decoder_lm();
    const AttentionSite site = attention_sites(*in.loaded.model).front();
    return {lm.config.vocab, lm.config.layers, lm.config.block.attention.width, site.heads, site.kv_heads,
            site.head_width, lm.config.block.ffn, lm.config.max_len};
}

// The table of positions the decoder adds to its token embeddings, [max_len, D]:
// the learned parameter, the sinusoidal table the model computed, or zeros.
Array position_table(const DecoderLM& lm, const Parameters& p, const Sizes& s) {
    if (lm.pos_emb.kind == Positional::learned) return p("pos_emb.weight");
    if (lm.pos_emb.kind == Positional::sinusoidal) return array_of(lm.pos_emb.weight);
    return zeros({s.positions, s.width});
}

void add(ExportFiles& files, const std::string& name, Array a) {
    SafeTensor t;
    t.name = name;
    t.dtype = SafeDType::f32;
    t.shape = std::move(a.shape);
    t.floats = std::move(a.values);
    files.tensors.push_back(std::move(t));
}

ExportFiles with_metadata(const LoadedCheckpoint& in) {
    ExportFiles files;
    files.metadata = {{"format", "pt"}, {"attnlab_config", in.checkpoint.config_toml}, {"step", std::to_string(in.checkpoint.step)}};
    return files;
}

std::string number(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    return text;
}

// ---- refusals: one line naming the option and why ----------------------------

[[noreturn]] void refuse(ExportFormat format, const std::string& option, const std::string& why) {
    const std::string tool = format == ExportFormat::hf ? "GPT-2" : "TransformerLens";
    throw Error("--format " + export_format_choices().name(format) + ": " + option + " does not map onto " + tool + " (" + why + ")");
}


// What neither GPT-2 nor TransformerLens's HookedTransformer holds in its weights and config.
void refuse_either(const Config::Model& m, ExportFormat format) {
    const AttentionVariant& v = m.variant;
    // by allow-list: GPT-2 normalises before each sublayer; TransformerLens before each sublayer or not at all
    if (!(format == ExportFormat::hf ? m.norm == "pre" : one_of(m.norm, {"pre", "none"})))
        refuse(format, "model.norm = \"" + m.norm + "\"", format == ExportFormat::hf ? "its blocks normalise before each sublayer"
                                                                                   : "its blocks normalise before each sublayer, or not at all");
    if (v.prefix_lm) refuse(format, "model.prefix_lm = true", "causal attention only; no prefix read both ways");
    if (v.documents) refuse(format, "model.documents = true", "causal attention only; no mask per packed document");
    if (v.sinks) refuse(format, "model.sinks = true", "no sink logit in the attention softmax");
    if (v.rel_buckets > 0) refuse(format, "model.rel_buckets = " + std::to_string(v.rel_buckets), "no learned relative position bias");
    if (!m.ablate_heads.empty())
        refuse(format, "model.ablate_heads = [\"" + m.ablate_heads[0] + (m.ablate_heads.size() > 1 ? "\", ...]" : "\"]"),
               "no weight zeroes a head's output z; export a model trained without ablations");
}

void refuse_for_gpt2(const Config::Model& m, const Sizes& s) {
    const ExportFormat f = ExportFormat::hf;
    refuse_either(m, f);
    if (m.norm != "pre") refuse(f, "model.norm = \"" + m.norm + "\"", "its blocks normalise before each sublayer");
    if (!one_of(m.norm_type, {"layernorm"})) refuse(f, "model.norm_type = \"" + m.norm_type + "\"", "LayerNorm only");
    if (!one_of(m.positional, {"learned", "sinusoidal", "none"}))
        refuse(f, "model.positional = \"" + m.positional + "\"", "a table of positions added to the embeddings: learned, sinusoidal or none");
    if (!one_of(m.activation, {"gelu", "gelu_tanh", "relu"}))
        refuse(f, "model.activation = \"" + m.activation + "\"", "ACT2FN's gelu, gelu_new or relu");
    if (s.kv_heads != s.heads) refuse(f, "model.kv_heads = " + std::to_string(s.kv_heads), "every head has its own keys and values");
    if (s.heads * s.head_width != s.width)
        refuse(f, "model.head_width = " + std::to_string(s.head_width), "heads x head width must be model.width");
    if (m.scale != "sqrt" && m.scale != "none")
        refuse(f, "model.scale = \"" + m.scale + "\"", "scores scaled by 1/sqrt(head width) or not at all");
    if (s.ffn == 0) refuse(f, "model.ffn = 0", "every block has a feed-forward layer; --format tl takes attention-only models");
    if (m.variant.window > 0) refuse(f, "model.window = " + std::to_string(m.variant.window), "full causal attention only");
    if (m.variant.softcap > 0) refuse(f, "model.softcap = " + number(m.variant.softcap), "no soft-capping of the scores");
    if (m.parallel) refuse(f, "model.parallel = true", "attention and feed-forward one after the other");
    if (m.head_bias) refuse(f, "model.head_bias = true", "lm_head has no bias");
}

void refuse_for_transformer_lens(const Config::Model& m, const Sizes& s) {
    const ExportFormat f = ExportFormat::tl;
    refuse_either(m, f);
    if (m.norm != "none" && !one_of(m.norm_type, {"layernorm", "rmsnorm"}))  // its normalization_type: "LN" or "RMS"
        refuse(f, "model.norm_type = \"" + m.norm_type + "\"", "LayerNorm or RMSNorm");
    if (!one_of(m.positional, {"learned", "sinusoidal", "none", "rotary", "alibi"}))
        refuse(f, "model.positional = \"" + m.positional + "\"", "standard (a table), rotary or alibi");
    if (!one_of(m.activation, {"gelu", "gelu_tanh", "relu"}))
        refuse(f, "model.activation = \"" + m.activation + "\"", "act_fn gelu, gelu_new or relu");
    if (m.positional == "alibi" && (s.heads & (s.heads - 1)) != 0)
        refuse(f, "model.positional = \"alibi\" with model.heads = " + std::to_string(s.heads),
               "its ALiBi slopes 2^(-8(h+1)/H) are Press et al.'s for a power-of-two head count only");
}

// ---- what each format maps: allow-lists ---------------------------------------

// Every model.* key whose values the writers below map or refuse (refuse_either,
// refuse_for_gpt2, refuse_for_transformer_lens). A key of the config not listed
// maps only at its default, so an option added to the schema later is refused
// until its mapping is written here (tests/experiments/test_config_reads.cpp
// walks every model key through export). Keys that change only training
// (dropout, init) or that a decoder's causal mask makes moot (masked_rows) map.
const std::set<std::string>& keys_mapped(ExportFormat format) {
    static const std::set<std::string> both = {
        "model.kind", "model.layers", "model.width", "model.heads", "model.kv_heads", "model.head_width", "model.ffn", "model.norm",
        "model.norm_type", "model.positional", "model.scale", "model.masked_rows", "model.window", "model.prefix_lm",
        "model.documents", "model.softcap", "model.sinks", "model.rel_buckets", "model.rel_max_distance", "model.dropout",
        "model.attn_dropout", "model.bias", "model.ffn_bias", "model.norm_bias", "model.norm_eps", "model.parallel",
        "model.head_bias", "model.init", "model.tie_embeddings", "model.activation", "model.max_len", "model.ablate_heads"};
    static const std::set<std::string> tl = [] {
        std::set<std::string> keys = both;
        keys.insert({"model.rotary_base", "model.rotary_dims"});  // TransformerLens's rotary_base, rotary_dim
        return keys;
    }();
    return format == ExportFormat::tl ? tl : both;
}

// Refuses the first model.* key set away from its default that the format's list does not name.
void refuse_unlisted(const Config& config, ExportFormat format) {
    const std::string unlisted = first_unlisted_model_key(config, keys_mapped(format));
    if (!unlisted.empty()) refuse(format, unlisted, "attnlab's export has no mapping for this option");
}

// The activation's name in Hugging Face's ACT2FN and TransformerLens's act_fn:
// GPT-2's tanh approximation is "gelu_new" in both.
std::string activation_name(const std::string& activation) { return activation == "gelu_tanh" ? "gelu_new" : activation; }

// ---- the formats -------------------------------------------------------------

// attnlab's own names and layouts, any model.
ExportFiles own_names(const LoadedCheckpoint& in) {
    ExportFiles files = with_metadata(in);
    for (const auto& [name, tensor] : in.loaded.model->module().named_parameters()) add(files, name, array_of(tensor));
    files.texts.emplace_back("attnlab_config.toml", in.checkpoint.config_toml);
    return files;
}

// Hugging Face's GPT2LMHeadModel. Conv1D computes x W + b with W [in, out]: each
// nn.Linear weight [out, in] is transposed; c_attn holds q, k, v side by side
// along its output axis, each split into heads as attnlab splits them.
ExportFiles gpt2(const LoadedCheckpoint& in) {
    const Config::Model& m = in.config.model;
    const Sizes s = sizes_of(in);
    refuse_for_gpt2(m, s);
    const DecoderLM& lm = *in.loaded.model->decoder_lm();
    const Parameters p(*in.loaded.model);
    const size_t D = s.width, F = s.ffn;
    ExportFiles files = with_metadata(in);
    add(files, "transformer.wte.weight", p("tok_emb.weight"));              // [V, D]
    add(files, "transformer.wpe.weight", position_table(lm, p, s));         // [n_positions, D]
    for (size_t l = 0; l < s.layers; ++l) {
        const std::string a = "blocks." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
        add(files, h + "ln_1.weight", p(a + "ln1.weight"));
        add(files, h + "ln_1.bias", p.or_zeros(a + "ln1.bias", {D}));
        add(files, h + "attn.c_attn.weight",                                // [D, 3D]
            transposed(stacked({p(a + "attn.q_proj.weight"), p(a + "attn.k_proj.weight"), p(a + "attn.v_proj.weight")})));
        add(files, h + "attn.c_attn.bias", stacked({p.or_zeros(a + "attn.q_proj.bias", {D}), p.or_zeros(a + "attn.k_proj.bias", {D}),
                                                    p.or_zeros(a + "attn.v_proj.bias", {D})}));  // [3D]
        add(files, h + "attn.c_proj.weight", transposed(p(a + "attn.out_proj.weight")));        // [D, D]
        add(files, h + "attn.c_proj.bias", p.or_zeros(a + "attn.out_proj.bias", {D}));
        add(files, h + "ln_2.weight", p(a + "ln2.weight"));
        add(files, h + "ln_2.bias", p.or_zeros(a + "ln2.bias", {D}));
        add(files, h + "mlp.c_fc.weight", transposed(p(a + "ffn.fc1.weight")));     // [D, F]
        add(files, h + "mlp.c_fc.bias", p.or_zeros(a + "ffn.fc1.bias", {F}));
        add(files, h + "mlp.c_proj.weight", transposed(p(a + "ffn.fc2.weight")));   // [F, D]
        add(files, h + "mlp.c_proj.bias", p.or_zeros(a + "ffn.fc2.bias", {D}));
    }
    add(files, "transformer.ln_f.weight", p("ln_f.weight"));
    add(files, "transformer.ln_f.bias", p.or_zeros("ln_f.bias", {D}));
    if (!m.tie_embeddings) add(files, "lm_head.weight", p("head.weight"));  // [V, D]; tied: GPT-2 reads wte

    // attnlab's tasks: <PAD> 0, <SEP> 1, <BOS> 2, which also ends a document
    // (GPT-2's <|endoftext|> is both); a text model's tokens are its characters only.
    const bool text = in.config.task.name == "text";
    const json config = {
        {"model_type", "gpt2"}, {"architectures", json::array({"GPT2LMHeadModel"})},
        {"vocab_size", s.vocab}, {"n_positions", s.positions}, {"n_ctx", s.positions},
        {"n_embd", D}, {"n_layer", s.layers}, {"n_head", s.heads}, {"n_inner", F},
        {"activation_function", activation_name(m.activation)},  // "gelu": F.gelu, exact (erf), as attnlab's
        {"layer_norm_epsilon", m.norm_eps}, {"scale_attn_weights", m.scale == "sqrt"},
        {"scale_attn_by_inverse_layer_idx", false}, {"reorder_and_upcast_attn", false},
        {"resid_pdrop", m.dropout}, {"embd_pdrop", m.dropout}, {"attn_pdrop", m.attn_dropout},
        {"tie_word_embeddings", m.tie_embeddings},
        {"bos_token_id", text ? json(nullptr) : json(2)}, {"eos_token_id", text ? json(nullptr) : json(2)},
        {"pad_token_id", text ? json(nullptr) : json(0)},
        {"torch_dtype", "float32"}};
    files.texts.emplace_back("config.json", config.dump(2) + "\n");
    return files;
}

// TransformerLens's HookedTransformer: per-head [head, d_model, d_head] weights,
// W_O [head, d_head, d_model], [in, out] MLP matrices, W_U [d_model, vocab].
ExportFiles transformer_lens(const LoadedCheckpoint& in) {
    const Config::Model& m = in.config.model;
    const Sizes s = sizes_of(in);
    refuse_for_transformer_lens(m, s);
    const DecoderLM& lm = *in.loaded.model->decoder_lm();
    const Parameters p(*in.loaded.model);
    const size_t D = s.width, H = s.heads, Hkv = s.kv_heads, dh = s.head_width, F = s.ffn;
    const bool norms = m.norm != "none", layernorm = m.norm_type == "layernorm", grouped = Hkv != H;
    ExportFiles files = with_metadata(in);
    auto norm = [&](const std::string& to, const std::string& from) {  // LN: w and b; RMS: w only
        add(files, to + ".w", p(from + ".weight"));
        if (layernorm) add(files, to + ".b", p.or_zeros(from + ".bias", {D}));
    };
    add(files, "embed.W_E", p("tok_emb.weight"));  // [V, D]
    // every type but rotary has a pos_embed module; ALiBi's (zeros) goes unread
    if (m.positional != "rotary") add(files, "pos_embed.W_pos", m.positional == "alibi" ? zeros({s.positions, D}) : position_table(lm, p, s));
    for (size_t l = 0; l < s.layers; ++l) {
        const std::string a = "blocks." + std::to_string(l) + ".";  // the same prefix in both
        if (norms) norm(a + "ln1", a + "ln1");
        add(files, a + "attn.W_Q", per_head_inputs(p(a + "attn.q_proj.weight"), H, dh));             // [H, D, d_h]
        add(files, a + "attn.b_Q", reshaped(p.or_zeros(a + "attn.q_proj.bias", {H * dh}), {H, dh}));
        // grouped K/V: GroupedQueryAttention's _W_K, _W_V [H_kv, D, d_h], repeat_interleave'd as attnlab's
        const std::string kv = grouped ? "attn._" : "attn.";
        add(files, a + kv + "W_K", per_head_inputs(p(a + "attn.k_proj.weight"), Hkv, dh));
        add(files, a + kv + "W_V", per_head_inputs(p(a + "attn.v_proj.weight"), Hkv, dh));
        add(files, a + kv + "b_K", reshaped(p.or_zeros(a + "attn.k_proj.bias", {Hkv * dh}), {Hkv, dh}));
        add(files, a + kv + "b_V", reshaped(p.or_zeros(a + "attn.v_proj.bias", {Hkv * dh}), {Hkv, dh}));
        add(files, a + "attn.W_O", reshaped(transposed(p(a + "attn.out_proj.weight")), {H, dh, D}));  // [H, d_h, D]
        add(files, a + "attn.b_O", p.or_zeros(a + "attn.out_proj.bias", {D}));
        if (F == 0) continue;
        if (norms) norm(a + "ln2", a + "ln2");
        add(files, a + "mlp.W_in", transposed(p(a + "ffn.fc1.weight")));   // [D, F]
        add(files, a + "mlp.b_in", p.or_zeros(a + "ffn.fc1.bias", {F}));
        add(files, a + "mlp.W_out", transposed(p(a + "ffn.fc2.weight")));  // [F, D]
        add(files, a + "mlp.b_out", p.or_zeros(a + "ffn.fc2.bias", {D}));
    }
    if (norms) norm("ln_final", "ln_f");
    add(files, "unembed.W_U", transposed(p(lm.unembedding_name())));  // [D, V]; tied: a copy of W_E^T
    add(files, "unembed.b_U", p.or_zeros("head.bias", {s.vocab}));      // model.head_bias, or none: zeros

    // HookedTransformerConfig's fields only: it is built as HookedTransformerConfig(**config).
    json config = {{"model_name", "attnlab"}, {"original_architecture", "attnlab"},
                   {"n_layers", s.layers}, {"d_model", D}, {"d_head", dh}, {"n_heads", H},
                   {"d_mlp", F > 0 ? json(F) : json(nullptr)}, {"act_fn", activation_name(m.activation)}, {"attn_only", F == 0},
                   {"d_vocab", s.vocab}, {"d_vocab_out", s.vocab}, {"n_ctx", s.positions}, {"eps", m.norm_eps},
                   {"normalization_type", !norms ? json(nullptr) : json(layernorm ? "LN" : "RMS")},
                   {"positional_embedding_type", m.positional == "rotary" ? "rotary" : m.positional == "alibi" ? "alibi" : "standard"},
                   {"use_attn_scale", m.scale != "none"}};
    if (m.scale != "none")  // TransformerLens divides the scores by attn_scale
        config["attn_scale"] = m.scale == "sqrt" ? std::sqrt(static_cast<double>(dh)) : 1.0 / resolve_scale(m.scale, dh);
    if (grouped) config["n_key_value_heads"] = Hkv;
    if (m.parallel) config["parallel_attn_mlp"] = true;
    if (m.positional == "rotary") {  // split halves (c, c + r/2), angle p base^(-2c/r), the first r features of the head
        config["rotary_dim"] = m.rotary_dims > 0 ? static_cast<size_t>(m.rotary_dims) : dh;
        config["rotary_base"] = m.rotary_base == std::floor(m.rotary_base) && m.rotary_base < 1e15
                                    ? json(static_cast<int64_t>(m.rotary_base)) : json(m.rotary_base);
        config["rotary_adjacent_pairs"] = false;
    }
    if (m.variant.window > 0) {  // "local": query i reads keys i - W < j <= i
        config["use_local_attn"] = true;
        config["window_size"] = m.variant.window;
        config["attn_types"] = std::vector<std::string>(s.layers, "local");
    }
    if (m.variant.softcap > 0) config["attn_scores_soft_cap"] = m.variant.softcap;  // C tanh(s / C) on the scaled scores
    files.texts.emplace_back("config.json", config.dump(2) + "\n");
    return files;
}

}  // namespace

ExportFiles export_model(const LoadedCheckpoint& in, ExportFormat format) {
    if (format == ExportFormat::safetensors) return own_names(in);
    if (in.loaded.model->decoder_lm() == nullptr) refuse(format, "model.kind = \"" + in.config.model.kind + "\"", "a decoder-only model");
    refuse_unlisted(in.config, format);
    return format == ExportFormat::hf ? gpt2(in) : transformer_lens(in);
}

void check_export_folder(const std::string& dir) {
    const fs::path path = folder_path(dir);
    const std::string name = path.filename().string();
    if (name.empty() || name == "." || name == "..") throw Error("--out " + dir + ": name the folder to write (a new or empty one)");
    std::error_code ec;
    const fs::file_status status = fs::symlink_status(path, ec);
    if (fs::exists(status)) {
        if (!fs::is_directory(status)) throw Error("--out " + dir + " exists and is not a folder; give a new or empty folder");
        if (!fs::is_empty(path, ec) || ec)
            throw Error("--out " + dir + " is a folder that is not empty; give a new or empty folder (nothing is replaced)");
        return;
    }
    const fs::path parent = path.parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec)) throw Error("--out " + dir + ": folder " + parent.string() + " does not exist");
}

void write_export(const ExportFiles& files, const std::string& dir) {
    const std::string tag = "[export]";
    write_output_folder(folder_path(dir), tag, [&](const fs::path& tmp) {
        write_safetensors((tmp / "model.safetensors").string(), files.tensors, files.metadata);
        for (const auto& [name, text] : files.texts) write_text_atomically(tmp / name, text, tag);
    });
}

}  // namespace attnlab
