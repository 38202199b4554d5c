// The config schema: one row per dotted key with its type, allowed values and
// doc. Defaults live in config.h's member initialisers; this table reads them.
#include "experiments/config/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "data/quoted.h"
#include "experiments/config/edit_distance.h"
#include "experiments/files/run_files.h"
#include "layers/models.h"  // the architecture options' choices, listed once there (blocks.h, models.h)

namespace attnlab::config_schema {

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

// 1 -> "1", 0.5 -> "0.5", 1e-8 -> "1e-08": shortest text that reads back equal.
std::string number_text(double value) {
    if (value == std::floor(value) && std::fabs(value) < 1e16) return std::to_string(static_cast<long long>(value));  // 100000, not 1e+05
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    return std::string(buffer, result.ptr);
}

// A strict decimal number (the whole text), as a scale spec may be.
bool parse_number(const std::string& text, double& value) {
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    return !text.empty() && result.ec == std::errc() && result.ptr == text.data() + text.size();
}

std::string expected(const std::string& what, const toml::node& node) { return "expected " + what + ", got " + type_of(node); }

// Every size and count: at most 2^53 - 1 (so every larger int64 converts to a larger double). What a config's sizes
// need together (their products: heads x head_width, batch x length, ...) is
// estimated in double precision before anything is allocated or multiplied in
// integers (memory_estimate.h), so no product wraps.
constexpr double kLargestCount = 9007199254740991.0;

// A numeric range: lo and hi, each closed, open or absent (infinite).
struct Bounds {
    double lo = -inf, hi = inf;
    bool lo_open = false, hi_open = false;

    std::string text() const {  // " >= 1", " > 0", " in [0, 1)"
        if (hi == kLargestCount && !hi_open) return " >= " + number_text(lo);  // the count bound goes without saying
        if (std::isfinite(lo) && std::isfinite(hi))
            return std::string(" in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + (hi_open ? ")" : "]");
        if (std::isfinite(lo)) return (lo_open ? " > " : " >= ") + number_text(lo);
        return "";
    }
    std::string check(double value) const {
        if (std::isfinite(value) && value > hi && hi == kLargestCount) return "must be at most " + number_text(hi) + ", got " + number_text(value);
        const bool fine = std::isfinite(value) && (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
        return fine ? "" : "must be" + text() + ", got " + number_text(value);
    }
};
Bounds at_least(double lo) { return {lo, kLargestCount}; }  // a count
Bounds non_negative() { return {0}; }                          // a float
Bounds between(double lo, double hi) { return {lo, hi}; }
Bounds above(double lo) { return {lo, inf, true}; }
const Bounds fraction{0, 1, false, true};     // [0, 1)
const Bounds probability{0, 1, false, false};  // [0, 1]

std::string non_empty(const std::string& text) { return text.empty() ? "must not be empty" : ""; }
std::string path_text(const std::string& text) {
    if (text.size() > 4000) return "must be a path of at most 4000 bytes, got " + std::to_string(text.size());
    return "";
}
std::string folder_path(const std::string& text) { return text.empty() ? non_empty(text) : path_text(text); }
std::string folder_name(const std::string& text) {
    if (text.empty() || text == "." || text == ".." || text.find('/') != std::string::npos)
        return "must be a folder name (not empty, no '/'), got " + quoted_bytes(text);
    if (text.size() > kMaxFolderName)
        return "must be at most " + std::to_string(kMaxFolderName) + " bytes (a folder name), got " + std::to_string(text.size());
    return "";
}

// The builders: each turns an accessor (see KEY) into a Field. `get(config)`
// yields a reference to the member, const or not as the config is.

template <class Get>
Field integer(std::string key, Get get, Bounds bounds, std::string doc) {
    return {std::move(key), "integer" + bounds.text(), std::move(doc), false,
            [get, bounds](Config& c, const toml::node& n) -> std::string {
                if (!n.is_integer()) return expected("an integer", n);
                const int64_t value = n.as_integer()->get();
                // checked as written: a negative count stored in a size_t would show as 2^64 - |value|
                if (std::string error = bounds.check(static_cast<double>(value)); !error.empty()) return error;
                get(c) = value;
                return "";
            },
            [get, bounds](const Config& c) { return bounds.check(static_cast<double>(get(c))); },
            [get](const Config& c) { return std::to_string(get(c)); }};
}

// Two integers, each within bounds (train.eval_lengths).
template <class Get>
Field integer_pair(std::string key, Get get, Bounds bounds, std::string doc) {
    return {std::move(key), "[integer, integer], each" + bounds.text(), std::move(doc), false,
            [get](Config& c, const toml::node& n) -> std::string {
                const toml::array* array = n.as_array();
                if (!array || array->size() != 2 || !array->get(0)->is_integer() || !array->get(1)->is_integer())
                    return array ? "expected an array of 2 integers" : expected("an array of 2 integers", n);
                for (size_t i = 0; i < 2; ++i) get(c)[i] = array->get(i)->as_integer()->get();
                return "";
            },
            [get, bounds](const Config& c) -> std::string {
                for (size_t i = 0; i < 2; ++i)
                    if (std::string problem = bounds.check(static_cast<double>(get(c)[i])); !problem.empty())
                        return "element " + std::to_string(i) + " " + problem;
                return "";
            },
            [get](const Config& c) { return "[" + std::to_string(get(c)[0]) + ", " + std::to_string(get(c)[1]) + "]"; }};
}

// Distinct integers, each within bounds, at most `longest` of them (train.seeds).
template <class Get>
Field integer_list(std::string key, Get get, Bounds bounds, size_t longest, std::string doc) {
    return {std::move(key), "[integer, ...], distinct, at most " + std::to_string(longest) + ", each" + bounds.text(), std::move(doc), false,
            [get](Config& c, const toml::node& n) -> std::string {
                const toml::array* array = n.as_array();
                if (!array) return expected("an array of integers", n);
                std::vector<int64_t> values;
                for (size_t i = 0; i < array->size(); ++i) {
                    if (!array->get(i)->is_integer()) return "element " + std::to_string(i) + ": " + expected("an integer", *array->get(i));
                    values.push_back(array->get(i)->as_integer()->get());
                }
                get(c) = std::move(values);
                return "";
            },
            [get, bounds, longest](const Config& c) -> std::string {
                const std::vector<int64_t>& values = get(c);
                if (values.size() > longest) return "has " + std::to_string(values.size()) + " elements, more than " + std::to_string(longest);
                for (size_t i = 0; i < values.size(); ++i) {
                    if (std::string problem = bounds.check(static_cast<double>(values[i])); !problem.empty())
                        return "element " + std::to_string(i) + " " + problem;
                    if (std::find(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(i), values[i]) != values.begin() + static_cast<std::ptrdiff_t>(i))
                        return "element " + std::to_string(i) + " (" + std::to_string(values[i]) + ") is given twice";
                }
                return "";
            },
            [get](const Config& c) {
                std::string out = "[";
                for (const int64_t value : get(c)) out += (out.size() > 1 ? ", " : "") + std::to_string(value);
                return out + "]";
            }};
}

// A float; an integer is taken too (lr = 1).
std::string read_number(const toml::node& n, double& out) {
    if (n.is_floating_point()) out = n.as_floating_point()->get();
    else if (n.is_integer()) out = static_cast<double>(n.as_integer()->get());
    else return expected("a float", n);
    return "";
}

// Training runs in float32: a setting that float32 would turn into 0 or inf
// (optim.eps = 1e-320, model.scale = 1e300) or round far off (a subnormal) is refused.
std::string float32_problem(double value) {
    const double magnitude = std::fabs(value);
    if (value == 0 || (magnitude >= std::numeric_limits<float>::min() && magnitude <= std::numeric_limits<float>::max())) return "";
    return "must be representable in float32, which training uses (a magnitude from 1.2e-38 to 3.4e+38, or 0), got " +
           number_text(value);
}

template <class Get>
Field number(std::string key, Get get, Bounds bounds, std::string doc) {
    return {std::move(key), "float" + bounds.text(), std::move(doc), false,
            [get](Config& c, const toml::node& n) { return read_number(n, get(c)); },
            [get, bounds](const Config& c) {
                const std::string problem = bounds.check(get(c));
                return problem.empty() ? float32_problem(get(c)) : problem;
            },
            [get](const Config& c) { return format_double(get(c)); }};
}

template <class Get>
Field boolean(std::string key, Get get, std::string doc) {
    return {std::move(key), "true | false", std::move(doc), false,
            [get](Config& c, const toml::node& n) -> std::string {
                if (!n.is_boolean()) return expected("a boolean", n);
                get(c) = n.as_boolean()->get();
                return "";
            },
            [](const Config&) { return std::string(); },
            [get](const Config& c) { return std::string(get(c) ? "true" : "false"); }};
}

// Every string key is a name, a path or a choice: control characters (a NUL from
// "\u0000", a newline) would name another file than the one shown, so none is taken.
std::string read_string(const toml::node& n, std::string& out) {
    if (!n.is_string()) return expected("a string", n);
    const std::string& text = n.as_string()->get();
    for (size_t i = 0; i < text.size(); ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (byte < 0x20 || byte == 0x7f) {
            char code[8];
            std::snprintf(code, sizeof code, "U+%04X", byte);
            return std::string("must not hold control characters, got ") + code + " at byte " + std::to_string(i);
        }
    }
    out = text;
    return "";
}

template <class Get>
Field text(std::string key, Get get, std::string allowed, std::string (*rule)(const std::string&), std::string doc) {
    return {std::move(key), std::move(allowed), std::move(doc), true,
            [get](Config& c, const toml::node& n) { return read_string(n, get(c)); },
            [get, rule](const Config& c) { return rule(get(c)); },
            [get](const Config& c) { return quote(get(c)); }};
}

// The characters of a text task, any of them (newlines too: written escaped).
template <class Get>
Field alphabet(std::string key, Get get, std::string doc) {
    return {std::move(key), "string", std::move(doc), true,
            [get](Config& c, const toml::node& n) {
                if (!n.is_string()) return expected("a string", n);
                get(c) = n.as_string()->get();
                return std::string();
            },
            [](const Config&) { return std::string(); },
            [get](const Config& c) { return quote(get(c)); }};
}

template <class Get>
Field choice(std::string key, Get get, std::vector<std::string> options, std::string doc) {
    std::string bars, commas;
    for (const auto& o : options) {
        bars += (bars.empty() ? "" : " | ") + quote(o);
        commas += (commas.empty() ? "" : ", ") + quote(o);
    }
    return {std::move(key), bars, std::move(doc), true,
            [get](Config& c, const toml::node& n) { return read_string(n, get(c)); },
            [get, options, commas](const Config& c) {
                const bool known = std::find(options.begin(), options.end(), get(c)) != options.end();
                return known ? std::string() : "must be one of " + commas + ", got " + quoted_bytes(get(c));
            },
            [get](const Config& c) { return quote(get(c)); }};
}

// The score scale: a name, or a positive number kept as its shortest text ("0.125").
template <class Get>
Field scale(std::string key, Get get, std::string doc) {
    static const std::vector<std::string> names = {"sqrt", "none", "linear"};
    auto is_name = [](const std::string& s) { return std::find(names.begin(), names.end(), s) != names.end(); };
    return {std::move(key), "\"sqrt\" | \"none\" | \"linear\" | float > 0", std::move(doc), false,
            [get, is_name](Config& c, const toml::node& n) -> std::string {
                double value = 0;
                if (n.is_string()) {
                    const std::string s = n.as_string()->get();
                    get(c) = !is_name(s) && parse_number(s, value) ? number_text(value) : s;
                    return "";
                }
                if (!read_number(n, value).empty()) return expected("a string or a number", n);
                get(c) = number_text(value);
                return "";
            },
            [get, is_name](const Config& c) -> std::string {
                double value = 0;
                if (is_name(get(c))) return "";
                if (parse_number(get(c), value) && std::isfinite(value) && value > 0) return float32_problem(value);
                return "must be \"sqrt\", \"none\", \"linear\" or a positive number, got " + quoted_bytes(get(c));
            },
            [get](const Config& c) {
                double value = 0;
                return parse_number(get(c), value) ? get(c) : quote(get(c));
            }};
}

// A list of strings, each checked by `rule` (model.ablate_heads, train.freeze).
template <class Get>
Field text_list(std::string key, Get get, std::string allowed, std::string (*rule)(const std::string&), std::string doc) {
    return {std::move(key), std::move(allowed), std::move(doc), false,
            [get](Config& c, const toml::node& n) -> std::string {
                const toml::array* array = n.as_array();
                if (!array) return expected("an array of strings", n);
                std::vector<std::string> values;
                for (size_t i = 0; i < array->size(); ++i) {
                    std::string value;
                    if (std::string problem = read_string(*array->get(i), value); !problem.empty())
                        return "element " + std::to_string(i) + ": " + (array->get(i)->is_string() ? problem : expected("a string", *array->get(i)));
                    values.push_back(value);
                }
                get(c) = std::move(values);
                return "";
            },
            [get, rule](const Config& c) -> std::string {
                const std::vector<std::string>& values = get(c);
                for (size_t i = 0; i < values.size(); ++i) {
                    if (std::string problem = rule(values[i]); !problem.empty()) return "element " + std::to_string(i) + " " + problem;
                    if (std::find(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(i), values[i]) != values.begin() + static_cast<std::ptrdiff_t>(i))
                        return "element " + std::to_string(i) + " " + quoted_bytes(values[i]) + " is given twice";
                }
                return "";
            },
            [get](const Config& c) {
                std::string out = "[";
                for (const std::string& value : get(c)) out += (out.size() > 1 ? ", " : "") + quote(value);
                return out + "]";
            }};
}

// "L.H": a layer and a head, each a number (their range is checked against the model's).
std::string layer_head(const std::string& text) {
    const size_t dot = text.find('.');
    const auto digits = [](const std::string& part) { return !part.empty() && part.size() <= 6 && std::all_of(part.begin(), part.end(), ::isdigit); };
    if (dot == std::string::npos || !digits(text.substr(0, dot)) || !digits(text.substr(dot + 1)))
        return "must be \"LAYER.HEAD\" (e.g. \"1.0\"), got " + quoted_bytes(text);
    return "";
}

// train.batch: a count, or "all" (kept as 0): the whole finite training set.
template <class Get>
Field batch(std::string key, Get get, std::string doc) {
    return {std::move(key), "integer >= 1 | \"all\"", std::move(doc), false,
            [get](Config& c, const toml::node& n) -> std::string {
                if (n.is_string() && n.as_string()->get() == "all") {
                    get(c) = 0;
                    return "";
                }
                if (!n.is_integer()) return n.is_string() ? "expected an integer or \"all\", got " + quoted_bytes(n.as_string()->get())
                                                          : expected("an integer or \"all\"", n);
                const int64_t value = n.as_integer()->get();
                if (std::string error = at_least(1).check(static_cast<double>(value)); !error.empty()) return error + " (or \"all\")";
                get(c) = value;
                return "";
            },
            [get](const Config& c) { return get(c) == 0 ? std::string() : at_least(1).check(static_cast<double>(get(c))); },
            [get](const Config& c) { return get(c) == 0 ? std::string("\"all\"") : std::to_string(get(c)); }};
}

// Two floats, each within bounds (Adam's betas).
template <class Get>
Field pair(std::string key, Get get, Bounds bounds, std::string doc) {
    return {std::move(key), "[float, float], each" + bounds.text(), std::move(doc), false,
            [get](Config& c, const toml::node& n) -> std::string {
                const toml::array* array = n.as_array();
                if (!array) return expected("an array of 2 floats", n);
                if (array->size() != 2) return "expected an array of 2 floats, got an array of " + std::to_string(array->size());
                for (size_t i = 0; i < 2; ++i)
                    if (!read_number(*array->get(i), get(c)[i]).empty())
                        return "expected an array of 2 floats, got " + type_of(*array->get(i)) + " at index " + std::to_string(i);
                return "";
            },
            [get, bounds](const Config& c) -> std::string {
                for (size_t i = 0; i < 2; ++i)
                    if (std::string problem = bounds.check(get(c)[i]); !problem.empty() || !(problem = float32_problem(get(c)[i])).empty())
                        return "element " + std::to_string(i) + " " + problem;
                return "";
            },
            [get](const Config& c) { return "[" + format_double(get(c)[0]) + ", " + format_double(get(c)[1]) + "]"; }};
}

// KEY(model, heads) -> "model.heads", [](auto& c) -> auto& { return c.model.heads; }:
// a key's name and the member it reads cannot disagree.
#define KEY(section, member) #section "." #member, [](auto& c) -> auto& { return c.section.member; }
// A variant's key (an eligibility rule or a score modifier), model.<member>, held in Config::Model::variant (autograd/variant.h).
#define VARIANT_KEY(member) "model." #member, [](auto& c) -> auto& { return c.model.variant.member; }

std::vector<Field> make_fields() {
    return {
        text(KEY(run, name), "folder name", folder_name, "name of the run folder under run.out_dir"),
        integer(KEY(run, seed), between(0, 9.2e18), "seed for initialisation, data and dropout"),
        text(KEY(run, out_dir), "path", folder_path, "folder that holds the run folders"),

        choice(KEY(task, name), {"copy", "reverse", "sort", "recall", "induction", "translate", "modular", "mqar", "file", "text", "none"},
               "toy task (data/tasks.h), tokens of the HDF5 file task.path, characters of the text file task.path, or none (an imported model: analysis of given tokens only)"),
        // a text model's vocabulary is its alphabet, from 2 characters; the other tasks' lower bound is a rule (config.cpp)
        integer(KEY(task, vocab), {2, 1 << 24}, "vocabulary size, including <PAD>, <SEP> and <BOS> (text: the alphabet's size)"),
        integer(KEY(task, min_len), at_least(1), "shortest x (copy, reverse, sort, translate), r (induction), or pairs (recall)"),
        integer(KEY(task, max_len), at_least(1), "longest x or r, or most pairs (recall), or the key-value pairs (mqar)"),
        integer(KEY(task, queries), at_least(1), "recall: queries per sequence"),
        integer(KEY(task, pack), between(0, 1 << 20), "pack whole examples, each led by <BOS>, into rows of this many positions (decoder-only tasks); 0 = one per row"),
        integer(KEY(task, train_size), between(0, 1 << 22), "train on this many distinct examples, drawn once, in epochs; evaluate on others (generated tasks); 0 = fresh examples every step"),
        integer(KEY(task, modulus), between(2, (1 << 24) - 3), "modular: p, the numbers 0 .. p-1 (task.vocab >= p + 3)"),
        integer(KEY(task, seq_len), between(2, 1 << 20), "mqar: input positions (Zoology's input_seq_len), even, >= 4 x task.max_len"),
        choice(KEY(task, op), {"+", "-", "*", "/"}, "modular: a op b = c (mod p); / needs a prime p"),
        choice(KEY(task, fill), {"random", "pad"}, "mqar: the positions between the queries hold random content tokens (Zoology's random_non_queries = True) or <PAD> (False, their Figure 2)"),
        text(KEY(task, path), "path", path_text, "HDF5 token file (file) or UTF-8 text (text); required for those"),
        alphabet(KEY(task, alphabet), "text: the file's characters, sorted (token id = index); filled in by the run"),
        text(KEY(task, tokenizer), "path", path_text, "none or file: a folder with tokenizer.json, or vocab.json and merges.txt (byte-level BPE), of at most task.vocab tokens: --tokens and --prompt then take text; \"\" = token ids"),

        choice(KEY(model, kind), {"decoder", "encoder-decoder"}, "decoder-only LM, or encoder-decoder (translate)"),
        integer(KEY(model, layers), at_least(1), "blocks per stack"),
        integer(KEY(model, width), at_least(1), "model width D"),
        integer(KEY(model, heads), at_least(1), "attention heads H"),
        integer(KEY(model, kv_heads), at_least(0), "K/V heads (grouped attention), dividing heads; 0 = heads"),
        integer(KEY(model, head_width), at_least(0), "per-head width d_h; 0 = width / heads (which must divide)"),
        integer(KEY(model, ffn), at_least(0), "feed-forward hidden width; 0 = attention-only blocks"),
        choice(KEY(model, norm), norm_choices().names(), "LayerNorm before each sublayer, after the residual sum, or none"),
        choice(KEY(model, norm_type), norm_type_choices().names(), "the norm model.norm places (each is defined in README, \"The norms\")"),
        choice(KEY(model, positional), positional_choices().names(), "positional encoding (rotary: on q and k; alibi: a bias on the scores)"),
        number(KEY(model, rotary_base), above(1), "rotary positions' base: pair c of a head turns by p base^(-2c/d_h)"),
        integer(KEY(model, rotary_dims), at_least(0), "rotary positions on the first r features of each head only (pairs (c, c + r/2), angle p base^(-2c/r); GPT-NeoX's rotary_pct); even, <= d_h; 0 = all d_h"),
        scale(KEY(model, scale), "score scale: sqrt = 1/sqrt(d_h), none = 1, linear = 1/d_h, or that number"),
        choice(KEY(model, masked_rows), masked_rows_choices().names(), "a query row with no eligible key: error, or zero context"),
        integer(VARIANT_KEY(window), at_least(0), "sliding window (self-attention): key j eligible for query i iff i - W < j (<= i when causal, < i + W in an encoder); 0 = off"),
        boolean(VARIANT_KEY(prefix_lm), "prefix-LM (decoder): each document's tokens through its first <SEP> attend both ways, the rest causally"),
        boolean(VARIANT_KEY(documents), "packed documents (decoder): a query reads only keys of its own document, which starts at a <BOS>"),
        number(VARIANT_KEY(softcap), non_negative(), "logit soft-capping (Gemma 2): scaled scores s become C tanh(s / C) before the mask and ALiBi; 0 = off"),
        boolean(VARIANT_KEY(sinks), "attention sinks: a learned logit per head (parameter blocks.L.attn.sink) in every self-attention softmax, a key of value 0"),
        integer(VARIANT_KEY(rel_buckets), at_least(0), "T5's learned relative position bias: buckets of key-query distance (parameter blocks.L.attn.rel_bias (buckets, H)); 0 = off, else >= 4"),
        integer(VARIANT_KEY(rel_max_distance), at_least(1), "T5's relative bias: the distance from which every key shares the last bucket"),
        number(KEY(model, dropout), fraction, "dropout on embeddings and sublayer outputs"),
        number(KEY(model, attn_dropout), fraction, "dropout on attention weights"),
        boolean(KEY(model, bias), "biases in the attention projections"),
        boolean(KEY(model, ffn_bias), "biases in the feed-forward layers (fc1, fc2)"),
        boolean(KEY(model, norm_bias), "LayerNorm's bias (every LayerNorm of the model; nanoGPT's bias = False sets all three off)"),
        number(KEY(model, norm_eps), above(0), "epsilon of every norm of the model (GPT-2's layer_norm_epsilon)"),
        boolean(KEY(model, parallel), "decoder: attention and feed-forward side by side, x + attn(ln1(x)) + ffn(ln2(x)) (GPT-J, GPT-NeoX); pre-norm with model.ffn > 0"),
        boolean(KEY(model, head_bias), "a bias on the output head, head.bias (V) (TransformerLens's b_U); not with tied embeddings"),
        choice(KEY(model, init), init_choices().names(), "initial parameters: torch's layer defaults, GPT-2's (nanoGPT's) N(0, 0.02) with the residual outputs scaled by 1/sqrt(2 layers), or TransformerLens's N(0, 0.8/sqrt(width)) (layers/models.h)"),
        boolean(KEY(model, tie_embeddings), "decoder: the output head's matrix is the token embedding's (one parameter, tok_emb.weight)"),
        choice(KEY(model, activation), activation_choices().names(), "feed-forward activation: gelu exact (erf), gelu_tanh GPT-2's tanh approximation (\"gelu_new\"), relu"),
        integer(KEY(model, max_len), at_least(0), "positions the model covers; 0 = the task's longest sequence"),
        text_list(KEY(model, ablate_heads), "[\"L.H\", ...]", layer_head, "heads whose output (z) is zero, in training and every analysis (decoder self-attention)"),

        integer(KEY(train, steps), at_least(1), "optimiser steps"),
        batch(KEY(train, batch), "sequences per step; \"all\" = the whole training set (task.train_size)"),
        integer(KEY(train, log_every), at_least(1), "steps between training log rows"),
        integer(KEY(train, eval_every), at_least(1), "steps between evaluations"),
        // drawn once and evaluated at every evaluation: beyond 100000 a run would spend its time there
        integer(KEY(train, eval_batches), between(1, 100000), "held-out batches per evaluation"),
        integer_pair(KEY(train, eval_lengths), between(0, 1 << 20), "also evaluate at task lengths [min, max] (length generalisation); [0, 0] = none"),
        integer(KEY(train, checkpoint_every), at_least(1), "steps between checkpoints"),
        integer(KEY(train, keep_checkpoints), at_least(0), "newest checkpoints kept; 0 = all"),
        choice(KEY(train, device), {"cpu", "cuda"}, "where to train; cuda: the whole training step on the GPU (needs a CUDA build and a GPU)"),
        integer(KEY(train, threads), between(0, 1024), "CPU threads (per rank under mpirun); 0 = all cores"),
        choice(KEY(train, reduce), {"fast", "deterministic"}, "gradient sum across ranks: one allreduce, or a fixed tree of micro-batches (bitwise at any rank count)"),
        integer(KEY(train, micro_batches), between(1, 1 << 20), "train.reduce = deterministic: micro-batches per step (divides train.batch)"),
        number(KEY(train, target_accuracy), probability, "eval token accuracy at which the task counts as solved"),
        boolean(KEY(train, tensorboard), "also write TensorBoard event files (scalars) under <run>/tb/, flushed at each log interval"),
        text_list(KEY(train, freeze), "[\"pattern\", ...]", non_empty, "parameters the optimiser leaves at their initial values: names or globs (blocks.0.attn.*)"),
        boolean(KEY(train, head_scores), "at each evaluation, every head's previous-token, duplicate-token and induction scores on a fixed repeated-token batch (decoder models)"),
        integer_list(KEY(train, seeds), between(0, 9.2e18), 256, "train the runs at run.seed = each of these in one process, side by side (their folders <run>/<i>_run.seed=<s>, as a sweep's); [] = one run at run.seed"),
        choice(KEY(train, seeds_mode), {"threads", "stacked"}, "train.seeds: each member's step on a thread of its own, or one stacked model over every member (one pass a step, its launches shared on the device; slower on the cpu at the sizes measured, bench/RESULTS.md)"),

        choice(KEY(optim, name), {"adamw", "adam", "sgd"}, "optimiser (torch.optim's update rules)"),
        number(KEY(optim, lr), above(0), "peak learning rate"),
        number(KEY(optim, weight_decay), non_negative(), "weight decay (decoupled for adamw)"),
        pair(KEY(optim, betas), fraction, "adam/adamw moment decay rates"),
        number(KEY(optim, eps), above(0), "adam/adamw denominator epsilon"),
        number(KEY(optim, momentum), fraction, "sgd momentum"),
        boolean(KEY(optim, nesterov), "sgd Nesterov momentum (needs momentum > 0)"),
        integer(KEY(optim, warmup), at_least(0), "steps of linear warm-up from 0"),
        choice(KEY(optim, schedule), {"cosine", "linear", "constant"}, "after warm-up: decay to 0 at the schedule's end, or constant"),
        integer(KEY(optim, schedule_steps), at_least(0), "the step the schedule ends at (its floor after it); 0 = train.steps, "
                                                           "so raising train.steps on resume stretches the schedule"),
        number(KEY(optim, min_lr), non_negative(), "the floor the cosine or linear decay ends at (nanoGPT's min_lr), below optim.lr"),
        number(KEY(optim, clip), non_negative(), "largest global gradient norm; 0 = no clipping"),
    };
}

#undef KEY

std::string_view leaf(std::string_view key) { return key.substr(key.rfind('.') + 1); }  // npos + 1 = 0
std::string_view section_of(std::string_view key) { return key.substr(0, key.find('.')); }

}  // namespace

const std::vector<Field>& fields() {
    static const std::vector<Field> all = make_fields();
    return all;
}

const Field* find(std::string_view key) {
    for (const Field& f : fields())
        if (f.key == key) return &f;
    return nullptr;
}

std::string first_key_of(std::string_view section) {
    for (const Field& f : fields())
        if (section_of(f.key) == section) return std::string(leaf(f.key));
    return "";
}

bool is_section(std::string_view name) {
    if (name == "sweep") return true;
    return std::any_of(fields().begin(), fields().end(), [&](const Field& f) { return section_of(f.key) == name; });
}

std::string suggestion(const std::string& unknown) {
    // Nearest full dotted key; a key with the same name in another section
    // (model.steps -> train.steps) counts as distance 1.
    std::string best;
    size_t best_distance = std::numeric_limits<size_t>::max();
    auto consider = [&](const std::string& candidate, size_t distance) {
        if (distance < best_distance) best = candidate, best_distance = distance;
    };
    for (const Field& f : fields()) {
        consider(f.key, edit_distance(unknown, f.key));
        consider(f.key, edit_distance(leaf(unknown), leaf(f.key)) + 1);
        consider(std::string(section_of(f.key)), edit_distance(unknown, section_of(f.key)));
    }
    if (best_distance <= std::max<size_t>(2, unknown.size() / 5)) return " (did you mean " + best + "?)";
    const std::string_view section = section_of(unknown);
    if (section == unknown || !is_section(section) || section == "sweep") return "";
    std::string keys;
    for (const Field& f : fields())
        if (section_of(f.key) == section) keys += (keys.empty() ? "" : ", ") + std::string(leaf(f.key));
    return " (" + std::string(section) + " keys: " + keys + ")";
}

std::string type_of(const toml::node& node) {
    switch (node.type()) {
        case toml::node_type::table: return "a table";
        case toml::node_type::array: return "an array";
        case toml::node_type::string: return "a string";
        case toml::node_type::integer: return "an integer";
        case toml::node_type::floating_point: return "a float";
        case toml::node_type::boolean: return "a boolean";
        case toml::node_type::date: return "a date";
        case toml::node_type::time: return "a time";
        case toml::node_type::date_time: return "a date-time";
        default: return "nothing";
    }
}

std::string format_double(double value) {
    std::string text = number_text(value);
    if (text.find_first_of(".en") == std::string::npos) text += ".0";  // "1" -> "1.0"; "1e-08", "inf" stay
    return text;
}

}  // namespace attnlab::config_schema
