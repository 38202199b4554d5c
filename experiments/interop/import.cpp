// The four imports (import.h). Each format is one function from the tool's
// config fields and tensor names to attnlab's config and parameters, beside the
// refusals that say what attnlab cannot compute as that tool does.
#include "experiments/interop/import.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "data/bpe_tokenizer.h"
#include "data/quoted.h"
#include "experiments/config/config.h"
#include "experiments/files/safetensors.h"
#include "experiments/interop/arrays.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace interop;

std::string read_text(const fs::path& path) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw Error(path.string() + ": not a file");
    const uintmax_t size = fs::file_size(path, ec);
    if (ec || size > (uintmax_t{64} << 20)) throw Error(path.string() + ": " + (ec ? ec.message() : "larger than 64 MiB; not a config"));
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in && !in.eof()) throw Error(path.string() + ": cannot be read");
    return text.str();
}

std::string json_type(const json& j) {
    if (j.is_null()) return "null";
    if (j.is_boolean()) return "a boolean";
    if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
    if (j.is_number()) return "a number";
    if (j.is_string()) return "a string";
    if (j.is_array()) return "an array";
    return "an object";
}

// config.json's fields, each read with its type checked. A field given as null
// counts as absent (Hugging Face writes n_inner: null for "the default").
class Fields {
public:
    Fields(const fs::path& path) : file_(path.string()) {
        const std::string text = read_text(path);
        if (const std::string deep = json_nesting_problem(text); !deep.empty()) throw Error(file_ + ": the JSON has " + deep);
        try {
            json_ = json::parse(text);
        } catch (const json::exception& e) {
            throw Error(file_ + ": not JSON (" + escaped(e.what()) + ")");
        }
        if (!json_.is_object()) throw Error(file_ + ": not a JSON object");
    }
    bool has(const std::string& name) const { return json_.contains(name) && !json_.at(name).is_null(); }
    bool given(const std::string& name) const { return json_.contains(name); }  // null included
    const std::string& file() const { return file_; }

    // A count: an integer >= 1.
    size_t count(const std::string& name) const {
        const json& j = required(name);
        if (!j.is_number_integer() && !j.is_number_unsigned()) wrong(name, "a positive integer", j);
        if (j.get<int64_t>() < 1 || j.get<int64_t>() > (int64_t{1} << 32)) refuse(name, quoted_json(j), "expected a positive integer");
        return j.get<size_t>();
    }
    int64_t integer(const std::string& name, int64_t fallback) const {
        if (!has(name)) return fallback;
        const json& j = json_.at(name);
        if (!j.is_number_integer() && !j.is_number_unsigned()) wrong(name, "an integer", j);
        return j.get<int64_t>();
    }
    double number(const std::string& name, double fallback) const {
        if (!has(name)) return fallback;
        const json& j = json_.at(name);
        if (!j.is_number()) wrong(name, "a number", j);
        return j.get<double>();
    }
    bool boolean(const std::string& name, bool fallback) const {
        if (!has(name)) return fallback;
        const json& j = json_.at(name);
        if (!j.is_boolean()) wrong(name, "true or false", j);
        return j.get<bool>();
    }
    std::string text(const std::string& name) const {
        const json& j = required(name);
        if (!j.is_string()) wrong(name, "a string", j);
        return j.get<std::string>();
    }
    std::string text(const std::string& name, const std::string& fallback) const { return has(name) ? text(name) : fallback; }
    std::string shown(const std::string& name) const { return has(name) ? quoted_json(json_.at(name)) : "null"; }
    // Whether the field is an array of strings, each `text`.
    bool all_are(const std::string& name, const std::string& text) const {
        const json& j = required(name);
        return j.is_array() && std::all_of(j.begin(), j.end(), [&](const json& item) { return item.is_string() && item.get_ref<const std::string&>() == text; });
    }

    // "<file>: <field> = <value>: <why>"
    [[noreturn]] void refuse(const std::string& name, const std::string& value, const std::string& why) const {
        throw Error(file_ + ": " + name + " = " + value + ": " + why);
    }
    // A field that changes the maths away from what attnlab computes, refused unless it has `allowed`'s value.
    void refuse_unless(const std::string& name, bool given_is_default, const std::string& why) const {
        if (!given_is_default) refuse(name, shown(name), why);
    }

private:
    const json& required(const std::string& name) const {
        if (!has(name)) throw Error(file_ + ": no field \"" + name + "\" (the model's architecture needs it)");
        return json_.at(name);
    }
    [[noreturn]] void wrong(const std::string& name, const std::string& want, const json& j) const {
        throw Error(file_ + ": field \"" + name + "\": expected " + want + ", got " + json_type(j));
    }
    std::string file_;
    json json_;
};

// model.safetensors's tensors, each taken once at the shape the config says;
// buffers a tool saves beside its parameters (causal masks, rotary tables) are
// named as ignorable; anything else left over is refused.
class Tensors {
public:
    explicit Tensors(const fs::path& path) : file_(path.string()) {
        std::error_code ec;
        if (!fs::exists(path, ec)) {
            const fs::path index = path.parent_path() / "model.safetensors.index.json";
            if (fs::exists(index, ec))
                throw Error(file_ + ": no such file; " + index.string() + " names a sharded checkpoint, which attnlab does not "
                                    "read yet: save the model as one model.safetensors (save_pretrained(max_shard_size=\"100GB\"))");
            throw Error(file_ + ": no such file (the weights; only safetensors are read)");
        }
        SafetensorsFile read = read_safetensors(file_);
        count_ = read.tensors.size();
        metadata = read.metadata;
        for (SafeTensor& t : read.tensors) tensors_.emplace(t.name, std::move(t));
    }
    bool has(const std::string& name) const { return tensors_.count(name) > 0; }
    size_t count() const { return count_; }

    Array take(const std::string& name, const Shape& shape) {
        const auto it = tensors_.find(name);
        if (it == tensors_.end()) throw Error(file_ + ": no tensor " + name + " (the config needs it, " + shape_str(shape) + ")");
        SafeTensor& t = it->second;
        if (t.dtype == SafeDType::other)
            throw Error(file_ + ": tensor " + name + " is " + t.file_dtype + "; a parameter is F16, BF16, F32 or F64");
        if (t.shape != shape)
            throw Error(file_ + ": tensor " + name + " is " + shape_str(t.shape) + "; the config needs " + shape_str(shape));
        // the values move out: the entry is erased below
        Array a{t.shape, t.dtype == SafeDType::f64 ? std::vector<float>(t.doubles.begin(), t.doubles.end()) : std::move(t.floats)};
        for (float v : a.values)
            if (!std::isfinite(v)) throw Error(file_ + ": tensor " + name + " holds a NaN or infinite value");
        tensors_.erase(it);
        return a;
    }
    void ignore(const std::function<bool(const std::string&)>& buffer) {
        for (auto it = tensors_.begin(); it != tensors_.end();) it = buffer(it->first) ? tensors_.erase(it) : std::next(it);
    }
    void check_all_taken(const std::string& model) const {
        if (!tensors_.empty())
            throw Error(file_ + ": tensor " + quoted_bytes(tensors_.begin()->first) + " is not part of " + model + " of this config" +
                        (tensors_.size() > 1 ? " (and " + std::to_string(tensors_.size() - 1) + " more)" : ""));
    }

private:
    std::string file_;
    std::map<std::string, SafeTensor> tensors_;
    size_t count_ = 0;

public:
    std::map<std::string, std::string> metadata;
};

using Params = std::map<std::string, Array>;  // attnlab's names

// The config of an imported decoder: task "none" over `vocab` tokens, `positions` long.
Config imported_config(size_t vocab, size_t positions) {
    Config c = default_config();
    c.task = Config::Task{};
    c.task.name = "none";
    c.task.vocab = static_cast<int64_t>(vocab);
    c.model = Config::Model{};
    c.model.max_len = static_cast<int64_t>(positions);
    c.model.dropout = c.model.attn_dropout = 0.0;
    return c;
}

// The activation names of Hugging Face's ACT2FN and TransformerLens's act_fn that
// attnlab computes; `fallback` "" makes the field required.
std::string activation_of(const Fields& f, const std::string& field, const std::string& fallback) {
    const std::string name = fallback.empty() ? f.text(field) : f.text(field, fallback);
    if (name == "gelu") return "gelu";
    // gelu_fast's 0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2))) is the same function
    if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return "gelu_tanh";
    if (name == "relu") return "relu";
    f.refuse(field, quoted_bytes(name), "attnlab computes gelu (exact), gelu_new (tanh) and relu");
}

std::string number_text(double value) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17g", value);
    return text;
}

// A norm's weight and bias, as the tool names them.
void take_norm(Tensors& t, Params& p, const std::string& to, const std::string& weight, const std::string& bias, size_t D) {
    p[to + ".weight"] = t.take(weight, {D});
    if (!bias.empty()) p[to + ".bias"] = t.take(bias, {D});
}

// ---- Hugging Face GPT-2 (modeling_gpt2.py) ----------------------------------
//
// Conv1D computes x W + b with W [in, out]: c_attn [D, 3D] holds q, k, v side by
// side along its outputs; each matrix is transposed into nn.Linear's [out, in].
Config gpt2(const Fields& f, Tensors& t, Params& p) {
    const size_t V = f.count("vocab_size"), P = f.count("n_positions"), D = f.count("n_embd"), L = f.count("n_layer"),
                 H = f.count("n_head");
    const size_t F = f.has("n_inner") ? f.count("n_inner") : 4 * D;
    if (D % H != 0) f.refuse("n_head", std::to_string(H), "does not divide n_embd = " + std::to_string(D));
    f.refuse_unless("scale_attn_by_inverse_layer_idx", !f.boolean("scale_attn_by_inverse_layer_idx", false),
                    "attnlab scales every layer's scores alike");
    f.refuse_unless("add_cross_attention", !f.boolean("add_cross_attention", false), "a decoder-only GPT-2 has no cross-attention");
    const bool tied = f.boolean("tie_word_embeddings", true);
    Config c = imported_config(V, P);
    Config::Model& m = c.model;
    m.layers = static_cast<int64_t>(L), m.width = static_cast<int64_t>(D), m.heads = static_cast<int64_t>(H), m.ffn = static_cast<int64_t>(F);
    m.activation = activation_of(f, "activation_function", "gelu_new");
    m.norm_eps = f.number("layer_norm_epsilon", 1e-5);
    m.scale = f.boolean("scale_attn_weights", true) ? "sqrt" : "none";
    m.tie_embeddings = tied;

    // GPT2LMHeadModel's names start with "transformer."; GPT2Model's (OpenAI's own upload) do not
    const std::string top = t.has("wte.weight") && !t.has("transformer.wte.weight") ? "" : "transformer.";
    t.ignore([&](const std::string& name) {  // the causal mask buffers older versions saved
        return name.rfind(top + "h.", 0) == 0 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
    });
    if (tied) t.ignore([](const std::string& name) { return name == "lm_head.weight"; });  // GPT-2 reads wte there
    p["tok_emb.weight"] = t.take(top + "wte.weight", {V, D});
    p["pos_emb.weight"] = t.take(top + "wpe.weight", {P, D});
    for (size_t l = 0; l < L; ++l) {
        const std::string h = top + "h." + std::to_string(l) + ".", a = "blocks." + std::to_string(l) + ".";
        take_norm(t, p, a + "ln1", h + "ln_1.weight", h + "ln_1.bias", D);
        const Array qkv = t.take(h + "attn.c_attn.weight", {D, 3 * D}), qkv_bias = t.take(h + "attn.c_attn.bias", {3 * D});
        const char* proj[] = {"q_proj", "k_proj", "v_proj"};
        for (size_t i = 0; i < 3; ++i) {
            p[a + "attn." + proj[i] + ".weight"] = transposed(columns(qkv, i * D, (i + 1) * D));
            p[a + "attn." + proj[i] + ".bias"] = rows(qkv_bias, i * D, (i + 1) * D);
        }
        p[a + "attn.out_proj.weight"] = transposed(t.take(h + "attn.c_proj.weight", {D, D}));
        p[a + "attn.out_proj.bias"] = t.take(h + "attn.c_proj.bias", {D});
        take_norm(t, p, a + "ln2", h + "ln_2.weight", h + "ln_2.bias", D);
        p[a + "ffn.fc1.weight"] = transposed(t.take(h + "mlp.c_fc.weight", {D, F}));
        p[a + "ffn.fc1.bias"] = t.take(h + "mlp.c_fc.bias", {F});
        p[a + "ffn.fc2.weight"] = transposed(t.take(h + "mlp.c_proj.weight", {F, D}));
        p[a + "ffn.fc2.bias"] = t.take(h + "mlp.c_proj.bias", {D});
    }
    take_norm(t, p, "ln_f", top + "ln_f.weight", top + "ln_f.bias", D);
    if (!tied) p["head.weight"] = t.take("lm_head.weight", {V, D});
    t.check_all_taken("a GPT-2");
    return c;
}

// ---- Hugging Face GPT-NeoX (modeling_gpt_neox.py): Pythia ----------------------
//
// query_key_value [3D, D]: its output viewed as (B, T, H, 3 d_h) is head h's q,
// k, v side by side, so head h's q rows are 3 h d_h .. 3 h d_h + d_h - 1, then
// its k rows, then its v rows. Rotary on the first int(d_h rotary_pct) features
// (rotate_half: pairs (c, c + r/2)); with use_parallel_residual each layer is
// x + attn(ln1(x)) + mlp(ln2(x)).
Config gpt_neox(const Fields& f, Tensors& t, Params& p) {
    const size_t V = f.count("vocab_size"), D = f.count("hidden_size"), L = f.count("num_hidden_layers"),
                 H = f.count("num_attention_heads"), F = f.count("intermediate_size");
    const size_t P = f.has("max_position_embeddings") ? f.count("max_position_embeddings") : 2048;
    if (D % H != 0) f.refuse("num_attention_heads", std::to_string(H), "does not divide hidden_size = " + std::to_string(D));
    const size_t dh = D / H;
    const double pct = f.number("rotary_pct", 0.25);
    if (!(pct >= 0.0 && pct <= 1.0)) f.refuse("rotary_pct", number_text(pct), "a fraction of the head's features, in [0, 1]");
    const auto r = static_cast<size_t>(static_cast<double>(dh) * pct);  // Python's int(): towards zero
    if (r % 2 != 0)
        f.refuse("rotary_pct", f.shown("rotary_pct"), "turns " + std::to_string(r) + " features of a head of " + std::to_string(dh) +
                                                          "; rotary turns pairs (an even number)");
    f.refuse_unless("rope_scaling", !f.has("rope_scaling"), "attnlab's rotary positions are not scaled");
    const bool tied = f.boolean("tie_word_embeddings", false), biased = f.boolean("attention_bias", true);
    Config c = imported_config(V, P);
    Config::Model& m = c.model;
    m.layers = static_cast<int64_t>(L), m.width = static_cast<int64_t>(D), m.heads = static_cast<int64_t>(H), m.ffn = static_cast<int64_t>(F);
    m.activation = activation_of(f, "hidden_act", "gelu");
    m.norm_eps = f.number("layer_norm_eps", 1e-5);
    m.parallel = f.boolean("use_parallel_residual", true);
    m.tie_embeddings = tied;
    m.bias = biased;
    if (r == 0) {
        m.positional = "none";
    } else {
        m.positional = "rotary";
        m.rotary_base = f.has("rotary_emb_base") ? f.number("rotary_emb_base", 10000.0) : f.number("rope_theta", 10000.0);
        m.rotary_dims = r == dh ? 0 : static_cast<int64_t>(r);
    }

    t.ignore([](const std::string& name) {  // buffers: the causal mask, its fill value, the rotary frequencies
        return name.rfind("gpt_neox.layers.", 0) == 0 &&
               (name.ends_with(".attention.bias") || name.ends_with(".attention.masked_bias") || name.ends_with(".rotary_emb.inv_freq"));
    });
    if (tied) t.ignore([](const std::string& name) { return name == "embed_out.weight"; });
    p["tok_emb.weight"] = t.take("gpt_neox.embed_in.weight", {V, D});
    for (size_t l = 0; l < L; ++l) {
        const std::string h = "gpt_neox.layers." + std::to_string(l) + ".", a = "blocks." + std::to_string(l) + ".";
        take_norm(t, p, a + "ln1", h + "input_layernorm.weight", h + "input_layernorm.bias", D);
        take_norm(t, p, a + "ln2", h + "post_attention_layernorm.weight", h + "post_attention_layernorm.bias", D);
        const Array qkv = t.take(h + "attention.query_key_value.weight", {3 * D, D});
        const Array qkv_bias = biased ? t.take(h + "attention.query_key_value.bias", {3 * D}) : Array{};
        const char* proj[] = {"q_proj", "k_proj", "v_proj"};
        for (size_t i = 0; i < 3; ++i) {
            std::vector<Array> heads, biases;
            for (size_t head = 0; head < H; ++head) {
                const size_t first = (3 * head + i) * dh;
                heads.push_back(rows(qkv, first, first + dh));
                if (biased) biases.push_back(rows(qkv_bias, first, first + dh));
            }
            p[a + "attn." + proj[i] + ".weight"] = stacked(heads);
            if (biased) p[a + "attn." + proj[i] + ".bias"] = stacked(biases);
        }
        p[a + "attn.out_proj.weight"] = t.take(h + "attention.dense.weight", {D, D});
        if (biased) p[a + "attn.out_proj.bias"] = t.take(h + "attention.dense.bias", {D});
        p[a + "ffn.fc1.weight"] = t.take(h + "mlp.dense_h_to_4h.weight", {F, D});
        p[a + "ffn.fc1.bias"] = t.take(h + "mlp.dense_h_to_4h.bias", {F});
        p[a + "ffn.fc2.weight"] = t.take(h + "mlp.dense_4h_to_h.weight", {D, F});
        p[a + "ffn.fc2.bias"] = t.take(h + "mlp.dense_4h_to_h.bias", {D});
    }
    take_norm(t, p, "ln_f", "gpt_neox.final_layer_norm.weight", "gpt_neox.final_layer_norm.bias", D);
    if (!tied) p["head.weight"] = t.take("embed_out.weight", {V, D});
    t.check_all_taken("a GPT-NeoX");
    return c;
}

// ---- TransformerLens (HookedTransformer's state dict) ---------------------------
//
// W_Q, W_K, W_V [head, d_model, d_head], W_O [head, d_head, d_model], b_Q [head,
// d_head], W_in [d_model, d_mlp], W_U [d_model, d_vocab]: each moved into
// nn.Linear's [out, in]; grouped K/V are attn._W_K, attn._W_V [kv_head, ...].
Config transformer_lens(const Fields& f, Tensors& t, Params& p) {
    const size_t L = f.count("n_layers"), D = f.count("d_model"), dh = f.count("d_head"), H = f.count("n_heads"), V = f.count("d_vocab"),
                 P = f.count("n_ctx");
    if (const int64_t out = f.integer("d_vocab_out", -1); out != -1 && out != static_cast<int64_t>(V))
        f.refuse("d_vocab_out", std::to_string(out), "attnlab's head predicts the input vocabulary (d_vocab = " + std::to_string(V) + ")");
    const bool attn_only = f.boolean("attn_only", false);
    // HookedTransformerConfig's defaults: d_mlp 4 d_model, normalization_type "LN" (null: none)
    const size_t F = attn_only ? 0 : f.has("d_mlp") ? f.count("d_mlp") : 4 * D;
    const size_t Hkv = f.has("n_key_value_heads") ? f.count("n_key_value_heads") : H;
    if (H % Hkv != 0) f.refuse("n_key_value_heads", std::to_string(Hkv), "does not divide n_heads = " + std::to_string(H));
    f.refuse_unless("gated_mlp", !f.boolean("gated_mlp", false), "attnlab's feed-forward is fc2(act(fc1(x))), not gated");
    f.refuse_unless("use_qk_norm", !f.boolean("use_qk_norm", false), "no norm on queries and keys");
    f.refuse_unless("use_normalization_before_and_after", !f.boolean("use_normalization_before_and_after", false),
                    "one norm before each sublayer");
    f.refuse_unless("scale_attn_by_inverse_layer_idx", !f.boolean("scale_attn_by_inverse_layer_idx", false),
                    "attnlab scales every layer's scores alike");
    f.refuse_unless("output_logits_soft_cap", f.number("output_logits_soft_cap", -1.0) <= 0.0, "no soft-capping of the logits");
    f.refuse_unless("rotary_adjacent_pairs", !f.boolean("rotary_adjacent_pairs", false),
                    "attnlab's rotary pairs feature c with c + r/2 (GPT-NeoX's rotate_half), not adjacent features");

    Config c = imported_config(V, P);
    Config::Model& m = c.model;
    m.layers = static_cast<int64_t>(L), m.width = static_cast<int64_t>(D), m.heads = static_cast<int64_t>(H);
    m.head_width = H * dh == D ? 0 : static_cast<int64_t>(dh);
    m.kv_heads = Hkv == H ? 0 : static_cast<int64_t>(Hkv);
    m.ffn = static_cast<int64_t>(F);
    if (!attn_only) m.activation = activation_of(f, "act_fn", "");  // HookedTransformerConfig requires it with an MLP
    m.parallel = f.boolean("parallel_attn_mlp", false);
    if (m.parallel && attn_only) f.refuse("parallel_attn_mlp", "true", "an attention-only model has no feed-forward to run beside attention");

    const std::string norm = !f.given("normalization_type") ? "LN" : f.text("normalization_type", "");  // null: no norm
    if (norm != "" && norm != "LN" && norm != "LNPre" && norm != "RMS" && norm != "RMSPre")
        f.refuse("normalization_type", quoted_bytes(norm), "attnlab places LN, LNPre, RMS, RMSPre or none");
    const bool layernorm = norm == "LN" || norm == "LNPre", folded = norm == "LNPre" || norm == "RMSPre";
    m.norm = norm.empty() ? "none" : "pre";
    if (!norm.empty()) {
        m.norm_type = layernorm ? "layernorm" : "rmsnorm";
        m.norm_eps = f.number("eps", 1e-5);
    }

    const std::string positional = f.text("positional_embedding_type", "standard");
    if (positional == "standard") {
        m.positional = "learned";
    } else if (positional == "rotary") {
        m.positional = "rotary";
        const size_t r = f.count("rotary_dim");
        if (r % 2 != 0 || r > dh) f.refuse("rotary_dim", std::to_string(r), "an even number up to d_head = " + std::to_string(dh));
        m.rotary_dims = r == dh ? 0 : static_cast<int64_t>(r);
        m.rotary_base = f.number("rotary_base", 10000.0);
    } else if (positional == "alibi") {
        if ((H & (H - 1)) != 0)
            f.refuse("n_heads", std::to_string(H), "TransformerLens's ALiBi slopes are Press et al.'s for a power-of-two head count only");
        m.positional = "alibi";
    } else {
        f.refuse("positional_embedding_type", quoted_bytes(positional), "attnlab adds standard, rotary or alibi positions");
    }
    if (!f.boolean("use_attn_scale", true)) {
        m.scale = "none";
    } else if (const double s = f.number("attn_scale", std::sqrt(static_cast<double>(dh))); s != std::sqrt(static_cast<double>(dh))) {
        if (!(s > 0.0)) f.refuse("attn_scale", number_text(s), "scores are divided by it: a positive number");
        m.scale = number_text(1.0 / s);
    }
    if (f.boolean("use_local_attn", false)) {
        if (f.has("attn_types") && !f.all_are("attn_types", "local"))
            f.refuse("attn_types", f.shown("attn_types"), "attnlab gives every layer the same window (all \"local\")");
        m.variant.window = static_cast<int64_t>(f.count("window_size"));
    }
    if (const double cap = f.number("attn_scores_soft_cap", -1.0); cap > 0.0) m.variant.softcap = cap;

    t.ignore([](const std::string& name) {  // buffers: the causal mask, its fill value, the rotary tables
        return name.rfind("blocks.", 0) == 0 && (name.ends_with(".attn.mask") || name.ends_with(".attn.IGNORE") ||
                                                 name.ends_with(".attn.rotary_sin") || name.ends_with(".attn.rotary_cos"));
    });
    auto take_tl_norm = [&](const std::string& to, const std::string& from) {
        if (norm.empty()) return;
        if (folded) {  // LNPre, RMSPre: the weights were folded into the next layer; the norm has none
            p[to + ".weight"] = filled({D}, 1.0f);
            if (layernorm) p[to + ".bias"] = zeros({D});
            return;
        }
        take_norm(t, p, to, from + ".w", layernorm ? from + ".b" : "", D);
    };
    p["tok_emb.weight"] = t.take("embed.W_E", {V, D});
    if (m.positional == "learned") p["pos_emb.weight"] = t.take("pos_embed.W_pos", {P, D});
    if (m.positional == "alibi") t.ignore([](const std::string& name) { return name == "pos_embed.W_pos"; });  // unread there
    // HookedTransformer builds GroupedQueryAttention (attn._W_K, _W_V) whenever n_key_value_heads is set
    const std::string kv = f.has("n_key_value_heads") ? "attn._" : "attn.";
    for (size_t l = 0; l < L; ++l) {
        const std::string a = "blocks." + std::to_string(l) + ".";  // the same prefix in both
        take_tl_norm(a + "ln1", a + "ln1");
        p[a + "attn.q_proj.weight"] = from_per_head_inputs(t.take(a + "attn.W_Q", {H, D, dh}));
        p[a + "attn.q_proj.bias"] = reshaped(t.take(a + "attn.b_Q", {H, dh}), {H * dh});
        p[a + "attn.k_proj.weight"] = from_per_head_inputs(t.take(a + kv + "W_K", {Hkv, D, dh}));
        p[a + "attn.k_proj.bias"] = reshaped(t.take(a + kv + "b_K", {Hkv, dh}), {Hkv * dh});
        p[a + "attn.v_proj.weight"] = from_per_head_inputs(t.take(a + kv + "W_V", {Hkv, D, dh}));
        p[a + "attn.v_proj.bias"] = reshaped(t.take(a + kv + "b_V", {Hkv, dh}), {Hkv * dh});
        p[a + "attn.out_proj.weight"] = transposed(reshaped(t.take(a + "attn.W_O", {H, dh, D}), {H * dh, D}));
        p[a + "attn.out_proj.bias"] = t.take(a + "attn.b_O", {D});
        if (attn_only) continue;
        take_tl_norm(a + "ln2", a + "ln2");
        p[a + "ffn.fc1.weight"] = transposed(t.take(a + "mlp.W_in", {D, F}));
        p[a + "ffn.fc1.bias"] = t.take(a + "mlp.b_in", {F});
        p[a + "ffn.fc2.weight"] = transposed(t.take(a + "mlp.W_out", {F, D}));
        p[a + "ffn.fc2.bias"] = t.take(a + "mlp.b_out", {D});
    }
    take_tl_norm("ln_f", "ln_final");
    p["head.weight"] = transposed(t.take("unembed.W_U", {D, V}));
    if (Array b = t.take("unembed.b_U", {V}); !all_zero(b)) {  // a head bias only where it adds something
        m.head_bias = true;
        p["head.bias"] = std::move(b);
    }
    t.check_all_taken("a TransformerLens model");
    return c;
}

// The model a config describes, with its initial parameters.
std::unique_ptr<TaskModel> built(const Config& c) {
    const size_t max_len = c.model.max_len > 0 ? static_cast<size_t>(c.model.max_len) : make_batch_source(c, 0, 0)->max_sequence_length();
    Rng init(0);  // the values are replaced
    return std::make_unique<TaskModel>(c, max_len, init, nullptr);
}

}  // namespace

ImportedModel import_model(const std::string& dir) {
    const fs::path folder(dir);
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) throw Error(dir + ": " + (fs::exists(folder, ec) ? "not a folder" : "no such folder"));
    const fs::path config_json = folder / "config.json", own_toml = folder / "attnlab_config.toml";
    const bool has_json = fs::exists(config_json, ec), has_toml = fs::exists(own_toml, ec);
    if (!has_json && !has_toml)
        throw Error(dir + ": no config.json (Hugging Face, TransformerLens) or attnlab_config.toml (attnlab's export) beside the weights");

    ImportedModel out;
    Params params;  // the other tools' tensors in attnlab's names and layouts
    Config config;
    std::optional<Tensors> tensors;
    if (has_toml) {  // attnlab's own export: its config, and every parameter under its own name (taken below)
        config = parse_saved_config(read_text(own_toml), own_toml.string());
        tensors.emplace(folder / "model.safetensors");
        out.format = "attnlab";
        if (const auto step = tensors->metadata.find("step"); step != tensors->metadata.end()) {
            try {
                out.checkpoint.step = std::stoll(step->second);
            } catch (const std::exception&) {
                throw Error((folder / "model.safetensors").string() + ": metadata step = " + quoted_bytes(step->second) + " is not a step number");
            }
            if (out.checkpoint.step < 0) throw Error((folder / "model.safetensors").string() + ": metadata step is negative");
        }
    } else {
        const Fields fields(config_json);
        tensors.emplace(folder / "model.safetensors");
        if (fields.has("model_type")) {
            const std::string type = fields.text("model_type");
            if (type == "gpt2") config = gpt2(fields, *tensors, params);
            else if (type == "gpt_neox") config = gpt_neox(fields, *tensors, params);
            else fields.refuse("model_type", quoted_bytes(type), "attnlab imports gpt2 and gpt_neox (and TransformerLens configs)");
            out.format = type;
        } else if (fields.has("n_layers") && fields.has("d_model")) {
            config = transformer_lens(fields, *tensors, params);
            out.format = "transformerlens";
        } else {
            throw Error(fields.file() + ": neither a Hugging Face config (model_type) nor a TransformerLens one (n_layers, d_model)");
        }
        // the tokenizer beside the weights (GPT-2's vocab.json + merges.txt, NeoX's tokenizer.json): --tokens then take text
        if (BpeTokenizer::folder_has_one(dir)) {
            const std::string at = fs::absolute(folder).lexically_normal().string();
            BpeTokenizer::for_model(at, config.task.vocab);  // a bad tokenizer file, or more tokens than rows: its own line
            config.task.tokenizer = at;
        }
        try {
            validate(config);
        } catch (const ConfigError& e) {  // a size attnlab cannot build, said in the tool's terms where it can be
            throw Error(fields.file() + ": the model it describes is not one attnlab builds (" + std::string(e.what()) + ")");
        }
    }

    out.tensors_read = tensors->count();
    // the model built once: its parameters' names, shapes and order are what the checkpoint holds
    const bool own_names = out.format == "attnlab";
    for (const auto& [name, param] : built(config)->module().named_parameters()) {
        if (own_names) params[name] = tensors->take(name, param.shape());
        const auto it = params.find(name);
        if (it == params.end() || it->second.shape != param.shape())
            throw Error("import " + dir + ": parameter " + name + " " + (it == params.end() ? "was not filled" : "has the wrong shape") +
                        " (a bug in the " + out.format + " mapping)");
        out.checkpoint.params.emplace_back(name, tensor_of(it->second));
    }
    if (own_names) tensors->check_all_taken("the model attnlab_config.toml describes");
    out.checkpoint.config_toml = to_toml(config);
    return out;
}

}  // namespace attnlab
