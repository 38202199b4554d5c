// Reading, overriding, validating and writing configs. The keys themselves
// (type, range, doc) are the schema in config_schema.cpp; defaults are in config.h.
#include "experiments/config/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "data/quoted.h"
#include "data/text_task.h"
#include "experiments/config/config_schema.h"
#include "experiments/config/memory_estimate.h"

namespace attnlab {

using config_schema::Field;

namespace {

std::string trim(const std::string& s) {
    const size_t first = s.find_first_not_of(" \t");
    if (first == std::string::npos) return "";
    return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
    return out;
}

// "configs/x.toml:3:7: "
std::string where(const std::string& path, const toml::source_position& at) {
    return path + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": ";
}

[[noreturn]] void fail_key(const std::string& key, const std::string& problem) { throw ConfigError(key, key + ": " + problem); }

// Stores a TOML value into one key, checking its type and range; the config is
// unchanged when it returns a problem.
std::string set_field(Config& config, const Field& field, const toml::node& value) {
    Config updated = config;
    std::string problem = field.read(updated, value);
    if (problem.empty()) problem = field.check(updated);
    if (problem.empty()) config = std::move(updated);
    return problem;
}

// A key of the document (dotted, as in the schema) with its value and where the key is.
struct Entry {
    std::string key;
    toml::source_position at;
    const toml::node* node;
};

// The leaves of a table in file order (toml++ tables are sorted by key). Tables are
// walked into, except a schema key's value, the sweep, and empty tables.
std::vector<Entry> entries_of(const toml::table& table, const std::string& prefix = "") {
    std::vector<Entry> out;
    for (auto&& [name, node] : table) {
        const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
        const toml::table* inner = node.as_table();
        if (inner && !inner->empty() && key != "sweep" && !config_schema::find(key)) {
            for (Entry& e : entries_of(*inner, key)) out.push_back(std::move(e));
        } else {
            out.push_back({key, name.source().begin, &node});
        }
    }
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
        return std::pair(a.at.line, a.at.column) < std::pair(b.at.line, b.at.column);
    });
    return out;
}

// [sweep] "model.heads" = [1, 2, 4]: each value checked against its key, kept as canonical TOML.
void read_sweep(Config& config, const toml::node& node, const std::string& path) {
    const toml::table* table = node.as_table();
    if (!table) throw ConfigError("sweep", where(path, node.source().begin) + "sweep: expected a table, got " + config_schema::type_of(node));
    for (const Entry& axis : entries_of(*table)) {
        const std::string name = "sweep." + config_schema::quote(axis.key);
        const Field* field = config_schema::find(axis.key);
        if (!field && config_schema::is_section(axis.key))  // `model = [...]`: a section, not a key
            throw ConfigError("sweep." + axis.key, where(path, axis.at) + "sweep key " + axis.key +
                                                       " is a section; sweep one of its keys, e.g. \"" + axis.key + "." +
                                                       config_schema::first_key_of(axis.key) + "\" = [...]");
        if (!field)
            throw ConfigError("sweep." + axis.key, where(path, axis.at) + "unknown sweep key " + axis.key + config_schema::suggestion(axis.key));
        const toml::array* values = axis.node->as_array();
        if (!values || values->empty())
            throw ConfigError("sweep." + axis.key, where(path, axis.node->source().begin) + name + ": expected a non-empty array of values, got " +
                                                       (values ? "an empty array" : config_schema::type_of(*axis.node)));
        for (const SweepAxis& earlier : config.sweep)
            if (earlier.key == field->key)  // "model.heads" and [sweep.model] heads
                throw ConfigError("sweep." + axis.key, where(path, axis.at) + name + ": the key is swept twice in this grid");
        SweepAxis out{field->key, {}};
        for (size_t i = 0; i < values->size(); ++i) {
            const toml::node& value = *values->get(i);
            Config scratch = config;
            if (std::string problem = set_field(scratch, *field, value); !problem.empty())
                throw ConfigError("sweep." + axis.key, where(path, value.source().begin) + name + "[" + std::to_string(i) + "]: " + problem);
            // compared as canonical text, so 2 and 2.0 (or "sqrt" and sqrt) are one value
            const std::string text = field->write(scratch);
            const auto same = std::find(out.values.begin(), out.values.end(), text);
            if (same != out.values.end())
                throw ConfigError("sweep." + axis.key, where(path, value.source().begin) + name + "[" + std::to_string(i) + "]: " + text +
                                                           " repeats element " + std::to_string(same - out.values.begin()) +
                                                           " (each cell would run twice)");
            out.values.push_back(text);
        }
        config.sweep.push_back(std::move(out));
    }
}

// One entry of a config file into config; `set_at` records where each key was set.
void read_entry(Config& config, const Entry& entry, const std::string& path, std::map<std::string, toml::source_position>& set_at) {
    const toml::source_position value_at = entry.node->source().begin;
    if (entry.key == "sweep") return read_sweep(config, *entry.node, path);
    if (const Field* field = config_schema::find(entry.key)) {
        if (std::string problem = set_field(config, *field, *entry.node); !problem.empty())
            throw ConfigError(field->key, where(path, value_at) + field->key + ": " + problem);
        set_at[field->key] = value_at;
        return;
    }
    if (config_schema::is_section(entry.key)) {
        if (entry.node->is_table()) return;  // an empty section
        throw ConfigError(entry.key, where(path, entry.at) + entry.key + ": expected a table, got " + config_schema::type_of(*entry.node));
    }
    const std::string what = entry.node->is_table() ? "unknown section " : "unknown key ";
    throw ConfigError(entry.key, where(path, entry.at) + what + entry.key + config_schema::suggestion(entry.key));
}

// "path:line:column: " of what the file says that a validation error is about:
// its key (or section), else the first key set in the file that its message names.
std::string locate(const ConfigError& error, const std::string& path, const std::map<std::string, toml::source_position>& set_at) {
    auto at = set_at.find(error.key);
    if (at == set_at.end()) {
        const std::string message = error.what();
        size_t first = std::string::npos;
        for (auto it = set_at.begin(); it != set_at.end(); ++it)
            if (const size_t named = message.find(it->first); config_schema::find(it->first) && named < first) first = named, at = it;
    }
    return at != set_at.end() ? where(path, at->second) : path + ": ";
}

// train.eval_lengths: off ([0, 0]), or lengths the task can be drawn at; the
// longest sequence they give (0 when off).
size_t check_eval_lengths(const Config& c) {
    const auto [lo, hi] = c.train.eval_lengths;
    if (lo == 0 && hi == 0) return 0;
    const std::string given = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (lo < 1 || lo > hi) fail_key("train.eval_lengths", "needs 1 <= min <= max, or [0, 0] for none, got " + given);
    if (c.task.name == "file" || c.task.name == "text" || c.task.name == "none")
        fail_key("train.eval_lengths", "task.name = \"" + c.task.name + "\" has no lengths to vary");
    try {
        return TaskGenerator(task_config(with_task_lengths(c, lo, hi)), 0, 0).max_sequence_length();
    } catch (const Error& e) {
        std::string problem = e.what();
        if (problem.rfind("[task] ", 0) == 0) problem.erase(0, 7);
        throw ConfigError("train.eval_lengths", "train.eval_lengths: " + given + ": " + problem);
    }
}

// A text task's task.alphabet, when the config has one (a run's resolved config,
// a checkpoint's): the model's characters, UTF-8, sorted, each once, and as many
// as task.vocab, the model's vocabulary; so that no token id reads as a wrong
// letter, or as none.
void check_text_alphabet(const Config::Task& task) {
    if (task.name != "text" || task.alphabet.empty()) return;
    size_t letters = 0;
    try {
        letters = alphabet_letters(task.alphabet, "task.alphabet").size();
    } catch (const Error& e) {
        std::string problem = e.what();
        if (problem.rfind("[text] task.alphabet: ", 0) == 0) problem.erase(0, 22);
        fail_key("task.alphabet", problem);
    }
    if (static_cast<int64_t>(letters) != task.vocab)
        fail_key("task.alphabet", std::to_string(letters) + " characters, but task.vocab = " + std::to_string(task.vocab) +
                                      " (a text model's vocabulary is its alphabet: give both, or leave task.alphabet out to read it"
                                      " from task.path)");
}

// Every key's own range, then the rules between keys (not the sweep).
void check_rules(const Config& c) {
    for (const Field& field : config_schema::fields()) {
        if (field.key == "task.vocab" && c.task.name == "text") continue;  // the alphabet's size (no special tokens)
        if (std::string problem = field.check(c); !problem.empty()) fail_key(field.key, problem);
    }
    const Config::Task& task = c.task;
    const Config::Model& model = c.model;
    using std::to_string;

    const bool from_file = task.name == "file", from_text = task.name == "text", no_data = task.name == "none";
    if (no_data && model.max_len == 0) fail_key("model.max_len", "task.name = \"none\" has no sequences to size the model by: give the positions it covers");
    if (!from_file && !from_text && !no_data && task.min_len > task.max_len)
        fail_key("task.min_len", to_string(task.min_len) + " is greater than task.max_len = " + to_string(task.max_len));
    if ((from_file || from_text) && task.path.empty()) fail_key("task.path", "required when task.name = \"" + task.name + "\"");
    if (!from_text && task.vocab < kFirstContent + 2)  // the special tokens and two content tokens
        fail_key("task.vocab",
                 "must be in [" + to_string(kFirstContent + 2) + ", " + to_string(1 << 24) + "], got " + to_string(task.vocab));
    check_text_alphabet(task);
    const std::string kind = task.name == "translate" ? "encoder-decoder" : "decoder";
    if (model.kind != kind) fail_key("model.kind", "task.name = \"" + task.name + "\" needs \"" + kind + "\", got \"" + model.kind + "\"");

    if (model.head_width == 0 && model.width % model.heads != 0)
        fail_key("model.width", to_string(model.width) + " is not divisible by model.heads = " + to_string(model.heads) +
                                    " (change one, or set model.head_width)");
    if (model.kv_heads > 0 && model.heads % model.kv_heads != 0)
        fail_key("model.kv_heads", to_string(model.kv_heads) + " does not divide model.heads = " + to_string(model.heads));
    const AttentionVariant& variant = model.variant;
    if (variant.rel_buckets > 0 && variant.rel_buckets < 4)
        fail_key("model.rel_buckets", "must be 0 (off) or at least 4 (an encoder halves them, then half are exact), got " +
                                          to_string(variant.rel_buckets));
    if (variant.rel_buckets > 0 && variant.rel_max_distance <= variant.rel_buckets / 2)
        fail_key("model.rel_max_distance", "must exceed model.rel_buckets / 2 = " + to_string(variant.rel_buckets / 2) +
                                               " (the exact buckets' reach), got " + to_string(variant.rel_max_distance));
    const int64_t head_width = model.head_width > 0 ? model.head_width : model.width / model.heads;
    if (model.positional == "rotary" && head_width % 2 != 0)
        fail_key("model.positional", "rotary positions rotate pairs of a head's features; the head width " +
                                         to_string(head_width) + " is odd (change model.width, model.heads or model.head_width)");
    if (model.positional == "rotary" && (model.rotary_dims % 2 != 0 || model.rotary_dims > head_width))
        fail_key("model.rotary_dims", "rotary positions turn pairs of the head's first features: an even number up to the head width " +
                                          to_string(head_width) + ", or 0 for all; got " + to_string(model.rotary_dims));
    if (model.parallel && (model.norm != "pre" || model.ffn == 0))
        fail_key("model.parallel", "attention and feed-forward side by side read the block's input through their own norms: "
                                   "needs model.norm = \"pre\" and model.ffn > 0 (got \"" + model.norm + "\", " + to_string(model.ffn) + ")");
    if (model.head_bias && model.tie_embeddings)
        fail_key("model.head_bias", "not with model.tie_embeddings = true (the tied head is the token embedding, which has no bias)");
    if (c.optim.min_lr > 0 && c.optim.min_lr >= c.optim.lr)
        fail_key("optim.min_lr", config_schema::format_double(c.optim.min_lr) + " is not below optim.lr = " +
                                     config_schema::format_double(c.optim.lr) + " (the decay goes from optim.lr down to it)");
    if (c.optim.nesterov && (c.optim.name != "sgd" || c.optim.momentum <= 0))
        fail_key("optim.nesterov", "needs optim.name = \"sgd\" and optim.momentum > 0 (got \"" + c.optim.name + "\", " +
                                       config_schema::format_double(c.optim.momentum) + ")");

    for (const std::string& head : model.ablate_heads) {
        const auto [layer, index] = ablated_head(head);
        if (model.kind != "decoder")
            fail_key("model.ablate_heads", "ablates heads of a decoder's self-attention; model.kind = \"" + model.kind + "\" is not one");
        if (layer >= static_cast<size_t>(model.layers) || index >= static_cast<size_t>(model.heads))
            fail_key("model.ablate_heads", quoted_bytes(head) + " is outside the model: layers 0.." + to_string(model.layers - 1) +
                                               ", heads 0.." + to_string(model.heads - 1));
    }
    if (c.train.head_scores && model.kind != "decoder")
        fail_key("train.head_scores", "head scores are measured on a decoder's self-attention; model.kind = \"" + model.kind + "\" has none of its own");
    if (c.train.batch == 0 && task.train_size == 0)
        fail_key("train.batch", "\"all\" trains on the whole training set each step: set task.train_size (the set's size)");
    if (task.name == "modular" && task.train_size > 0) {  // the task's examples can be counted: a held-out part must remain
        const int64_t examples = task.modulus * (task.op == "/" ? task.modulus - 1 : task.modulus);
        if (task.train_size >= examples)
            fail_key("task.train_size", to_string(task.train_size) + " leaves no held-out example: task \"modular\" with task.modulus = " +
                                            to_string(task.modulus) + " has " + to_string(examples) + " (a, b) pairs");
    }
    if (task.train_size > 0 && task.pack > 0)
        fail_key("task.train_size", "a finite training set trains one example per row: set task.pack = 0, or task.train_size = 0");
    if (task.train_size > 0 && c.train.eval_lengths[1] > 0)
        fail_key("task.train_size", "train.eval_lengths with a finite training set is not supported yet (the held-out "
                                    "examples at other lengths are not checked against the set): set one of them to 0");
    if (c.train.reduce == "deterministic" && batch_size(c) % c.train.micro_batches != 0)
        fail_key("train.micro_batches", to_string(c.train.micro_batches) + " does not divide train.batch = " + to_string(batch_size(c)) +
                                            (c.train.batch == 0 ? " (\"all\": task.train_size)" : ""));
    if (c.train.reduce == "deterministic" && c.train.device == "cuda")
        fail_key("train.reduce", "\"deterministic\" sums micro-batches on the cpu; with train.device = \"cuda\" use \"fast\"");
    const size_t longest_eval = check_eval_lengths(c);  // also refuses it for file, text and none
    if (no_data) return;  // nothing is trained: no memory to check
    if (from_file) {  // the file's lengths are known only when it is read (the trainer checks again then)
        check_fits_in_memory(c, static_cast<double>(std::max<int64_t>(1, model.max_len)));
        return;
    }
    if (from_text) {  // windows of task.max_len characters
        if (model.max_len > 0 && model.max_len < task.max_len)
            fail_key("model.max_len", to_string(model.max_len) + " is shorter than task.max_len = " + to_string(task.max_len) +
                                          " (the text task's window)");
        check_fits_in_memory(c, static_cast<double>(task.max_len));
        return;
    }
    size_t longest = 0;
    try {
        Config one = c;  // one example per row: what a packed row must hold
        one.task.pack = 0;
        longest = TaskGenerator(task_config(one), 0, 0).max_sequence_length();
    } catch (const Error& e) {
        std::string problem = e.what();
        if (problem.rfind("[task] ", 0) == 0) problem.erase(0, 7);
        const std::string sizes = task.name == "modular"
                                      ? "task.vocab = " + to_string(task.vocab) + ", task.modulus = " + to_string(task.modulus) +
                                            ", task.op = \"" + task.op + "\""
                                  : task.name == "mqar"
                                      ? "task.vocab = " + to_string(task.vocab) + ", task.max_len = " + to_string(task.max_len) +
                                            ", task.seq_len = " + to_string(task.seq_len)
                                      : "task.vocab = " + to_string(task.vocab) + ", task.min_len = " + to_string(task.min_len) +
                                            ", task.max_len = " + to_string(task.max_len) + ", task.queries = " + to_string(task.queries);
        throw ConfigError("task", sizes + ": " + problem);
    }
    if (task.pack > 0 && static_cast<size_t>(task.pack) < longest + 1)
        fail_key("task.pack", to_string(task.pack) + " positions cannot hold the longest example of task \"" + task.name + "\" (" +
                                  to_string(longest) + " tokens and its <BOS>)");
    if (task.pack > 0) longest = static_cast<size_t>(task.pack);
    if (model.max_len > 0 && static_cast<size_t>(model.max_len) < longest)
        fail_key("model.max_len", to_string(model.max_len) + " is shorter than the longest sequence of task \"" + task.name + "\" (" +
                                      to_string(longest) + " tokens; 0 derives it)");
    if (model.max_len > 0 && static_cast<size_t>(model.max_len) < longest_eval)
        fail_key("model.max_len", to_string(model.max_len) + " is shorter than the longest sequence at train.eval_lengths (" +
                                      to_string(longest_eval) + " tokens; 0 derives it)");
    check_fits_in_memory(c, static_cast<double>(std::max(longest, longest_eval)),
                         longest_eval > longest ? "train.eval_lengths" : "task.max_len");
}

// Keys that only some settings read, each with whether this config reads it:
// "key: only used when <when> (<now>)" when it does not.
struct ReadWhen {
    std::string key;
    bool read;
    std::string when, now;
};

std::vector<ReadWhen> conditional_keys(const Config& c) {
    auto is = [](const std::string& key, const std::string& value) { return key + " = \"" + value + "\""; };
    const std::string task = is("task.name", c.task.name), optim = is("optim.name", c.optim.name);
    const bool file = c.task.name == "file", text = c.task.name == "text", none = c.task.name == "none";
    const bool adam = c.optim.name == "adam" || c.optim.name == "adamw", sgd = c.optim.name == "sgd";
    const bool prefix_tasks = c.task.name == "copy" || c.task.name == "reverse" || c.task.name == "sort" || c.task.name == "recall";
    const bool modular = c.task.name == "modular", mqar = c.task.name == "mqar";
    return {
        {"task.path", file || text, "task.name = \"file\" or \"text\"", task},
        {"task.alphabet", text, "task.name = \"text\"", task},
        {"task.tokenizer", file || none, "task.name = \"none\" or \"file\"", task},
        // a text model's vocabulary is its alphabet, read from task.path; both given must agree (check_text_alphabet)
        {"task.vocab", !text || !c.task.alphabet.empty(), "task.alphabet is given with it",
         task + ": the vocabulary is the alphabet, read from task.path"},
        {"task.min_len", !file && !text && !none && !modular && !mqar, "the task draws sequences of varying length (the file's are read whole, "
                                                              "the text's windows are task.max_len characters, modular's are a b =, "
                                                              "mqar's task.seq_len)", task},
        {"task.max_len", !file && !none && !modular, "the task draws sequences of varying length (the file's are read whole, modular's are a b =)", task},
        {"task.modulus", modular, "task.name = \"modular\"", task},
        {"task.op", modular, "task.name = \"modular\"", task},
        {"task.seq_len", mqar, "task.name = \"mqar\"", task},
        {"task.fill", mqar, "task.name = \"mqar\"", task},
        {"train.seeds_mode", !c.train.seeds.empty(), "train.seeds names the seeds", "train.seeds = []"},
        {"task.train_size", !file && !text && !none, "the task draws its examples (a file's and a text's data are finite already)", task},
        {"task.queries", c.task.name == "recall", "task.name = \"recall\"", task},
        {"task.pack", !file && !text && !none && c.task.name != "translate", "a decoder-only task draws its sequences", task},
        // the token rules read <SEP> (ending a prefix) and <BOS> (starting a document): tasks and files that hold them
        {"model.prefix_lm", file || prefix_tasks, "the task marks a prefix with <SEP> (copy, reverse, sort, recall) or is a file", task},
        {"model.documents", file || c.task.pack > 0, "task.pack > 0 or task.name = \"file\" (documents start at <BOS>)",
         c.task.pack > 0 ? task : "task.pack = 0"},
        {"model.rotary_base", c.model.positional == "rotary", "model.positional = \"rotary\"", is("model.positional", c.model.positional)},
        {"model.rotary_dims", c.model.positional == "rotary", "model.positional = \"rotary\"", is("model.positional", c.model.positional)},
        {"model.rel_max_distance", c.model.variant.rel_buckets > 0, "model.rel_buckets > 0", "model.rel_buckets = 0: no relative bias"},
        {"model.norm_eps", c.model.norm != "none", "model.norm = \"pre\" or \"post\"", is("model.norm", c.model.norm)},
        {"model.parallel", c.model.kind == "decoder", "model.kind = \"decoder\"", is("model.kind", c.model.kind)},
        {"model.norm_type", c.model.norm != "none", "model.norm = \"pre\" or \"post\"", is("model.norm", c.model.norm)},
        {"model.activation", c.model.ffn > 0, "model.ffn > 0", "model.ffn = 0: attention-only blocks"},
        {"model.ffn_bias", c.model.ffn > 0, "model.ffn > 0", "model.ffn = 0: attention-only blocks"},
        {"model.norm_bias", c.model.norm != "none" && c.model.norm_type == "layernorm", "LayerNorms are placed (model.norm "
                                                                                         "\"pre\" or \"post\", model.norm_type = \"layernorm\")",
         c.model.norm == "none" ? is("model.norm", c.model.norm) : is("model.norm_type", c.model.norm_type)},
        {"model.tie_embeddings", c.model.kind == "decoder", "model.kind = \"decoder\"", is("model.kind", c.model.kind)},
        {"train.micro_batches", c.train.reduce == "deterministic", "train.reduce = \"deterministic\"", is("train.reduce", c.train.reduce)},
        {"optim.betas", adam, "optim.name = \"adamw\" or \"adam\"", optim},
        {"optim.eps", adam, "optim.name = \"adamw\" or \"adam\"", optim},
        {"optim.momentum", sgd, "optim.name = \"sgd\"", optim},
        {"optim.schedule_steps", c.optim.schedule != "constant", "optim.schedule = \"cosine\" or \"linear\"",
         is("optim.schedule", c.optim.schedule)},
        {"optim.min_lr", c.optim.schedule != "constant", "optim.schedule = \"cosine\" or \"linear\"", is("optim.schedule", c.optim.schedule)},
    };
}

bool at_default(const Config& c, const std::string& key) {
    const Field& field = *config_schema::find(key);
    return field.write(c) == field.write(default_config());
}

// The keys this config sets away from their defaults where nothing reads them.
std::vector<ReadWhen> unread(const Config& c) {
    std::vector<ReadWhen> out;
    for (ReadWhen& k : conditional_keys(c))
        if (!k.read && !at_default(c, k.key)) out.push_back(std::move(k));
    return out;
}

std::string unread_problem(const ReadWhen& k) { return "only used when " + k.when + " (" + k.now + ")"; }

// A config with a sweep: every cell must read the keys its axes set (cells that
// differed only in an unread key would repeat one run), and every key of the
// base must be read by some cell (the cells that do not read it get its default).
// `cells`: each cell's assignments and its config (the base with them applied).
void check_sweep_reads(const Config& config, const std::vector<std::pair<std::vector<std::string>, Config>>& cells) {
    std::map<std::string, ReadWhen> unread_in_base;  // key -> in the first cell that does not read it
    std::set<std::string> read_somewhere;
    for (const auto& [cell, one] : cells) {
        for (const ReadWhen& k : conditional_keys(one)) {
            if (k.read) read_somewhere.insert(k.key);
            if (k.read || at_default(one, k.key)) continue;
            const bool swept = std::any_of(config.sweep.begin(), config.sweep.end(), [&](const SweepAxis& a) { return a.key == k.key; });
            if (swept)
                throw ConfigError("sweep", "sweep cell " + join(cell, " ") + ": " + k.key + ": " + unread_problem(k) +
                                               ", so the cells that differ only in it would repeat one run");
            unread_in_base.emplace(k.key, k);
        }
    }
    for (const auto& [key, k] : unread_in_base)
        if (!read_somewhere.count(key)) fail_key(key, unread_problem(k) + " in every cell of the sweep");
}

}  // namespace

Config without_unread_keys(Config config) {
    for (const ReadWhen& k : unread(config)) apply_override(config, k.key + "=" + config_schema::find(k.key)->write(default_config()));
    return config;
}

Config default_config() { return Config{}; }

std::pair<size_t, size_t> ablated_head(const std::string& text) {
    const size_t dot = text.find('.');
    return {std::stoul(text.substr(0, dot)), std::stoul(text.substr(dot + 1))};
}

Config with_task_lengths(const Config& config, int64_t min_len, int64_t max_len) {
    Config out = config;
    out.task.min_len = min_len;
    out.task.max_len = max_len;
    return out;
}

TaskConfig task_config(const Config& config) {
    TaskConfig task;
    task.name = config.task.name;
    task.vocab = static_cast<size_t>(config.task.vocab);
    task.min_len = static_cast<size_t>(config.task.min_len);
    task.max_len = static_cast<size_t>(config.task.max_len);
    task.queries = static_cast<size_t>(config.task.queries);
    task.pack = static_cast<size_t>(config.task.pack);
    task.modulus = static_cast<size_t>(config.task.modulus);
    task.op = config.task.op;
    task.seq_len = static_cast<size_t>(config.task.seq_len);
    task.fill = config.task.fill;
    return task;
}

void apply_override(Config& config, const std::string& assignment) {
    const std::string context = "override " + assignment + ": ";
    const size_t equals = assignment.find('=');
    if (equals == std::string::npos) throw ConfigError("", context + "expected key=value (e.g. model.heads=8)");
    const std::string key = trim(assignment.substr(0, equals)), text = trim(assignment.substr(equals + 1));
    const Field* field = config_schema::find(key);
    if (!field) throw ConfigError(key, context + "unknown key " + key + config_schema::suggestion(key));

    // The value in TOML syntax; else, and for string keys whenever it is not a
    // quoted string, the bare text as a string (model.norm=post, run.name=2024).
    toml::table parsed;
    try {
        parsed = toml::parse("value = " + text);
    } catch (const toml::parse_error& e) {
        if (!text.empty() && std::string_view("[{\"'").find(text[0]) != std::string_view::npos)
            throw ConfigError(key, context + "TOML syntax error: " + std::string(e.description()));
    }
    const toml::node* value = parsed.size() == 1 ? parsed.get("value") : nullptr;
    if (!value || (field->bare_text && !value->is_string())) {
        parsed = toml::table{{"value", text}};
        value = parsed.get("value");
    }
    if (std::string problem = set_field(config, *field, *value); !problem.empty()) throw ConfigError(key, context + problem);
}

std::vector<std::vector<std::string>> sweep_cells(const Config& config) {
    std::vector<std::vector<std::string>> cells = {{}};
    for (const SweepAxis& axis : config.sweep) {
        std::vector<std::vector<std::string>> next;
        for (const auto& cell : cells)
            for (const auto& value : axis.values) {
                next.push_back(cell);
                next.back().push_back(axis.key + "=" + value);
            }
        cells = std::move(next);
    }
    return cells;
}

void validate(const Config& config) {
    check_rules(config);
    for (const SweepAxis& axis : config.sweep) {
        if (!config_schema::find(axis.key))
            throw ConfigError("sweep." + axis.key, "sweep: unknown key " + axis.key + config_schema::suggestion(axis.key));
        if (axis.values.empty()) fail_key("sweep." + config_schema::quote(axis.key), "needs at least one value");
    }
    if (config.sweep.empty()) {
        if (const auto keys = unread(config); !keys.empty()) fail_key(keys.front().key, unread_problem(keys.front()));
        return;
    }
    std::vector<std::pair<std::vector<std::string>, Config>> cells;  // each cell's assignments and config
    for (auto& cell : sweep_cells(config)) {
        Config one = config;
        one.sweep.clear();
        try {
            for (const auto& assignment : cell) apply_override(one, assignment);
            check_rules(one);
        } catch (const ConfigError& e) {
            throw ConfigError("sweep", "sweep cell " + join(cell, " ") + ": " + e.what());
        }
        cells.emplace_back(std::move(cell), std::move(one));
    }
    check_sweep_reads(config, cells);
}

namespace {

std::string read_config_file(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw ConfigError("", path + ": no such config file");
    if (!fs::is_regular_file(path, ec)) throw ConfigError("", path + ": not a regular file");
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw ConfigError("", path + ": cannot read the config file");
    return text.str();
}

// A config file's relative task.path and task.tokenizer name files beside the
// config (as most tools read their configs), made absolute here so that the run,
// its saved config and a sweep's cell configs read the same file from anywhere.
// Overrides keep theirs: relative to the working directory, as a shell's paths.
void resolve_paths_beside(Config& config, const std::string& config_file) {
    namespace fs = std::filesystem;
    const fs::path folder = fs::absolute(fs::path(config_file)).parent_path();
    for (std::string* value : {&config.task.path, &config.task.tokenizer})
        if (!value->empty() && fs::path(*value).is_relative()) *value = (folder / *value).lexically_normal().string();
}

Config parse(const std::string& text, const std::string& path, const std::vector<std::string>& overrides, bool saved,
             bool beside_file = false) {
    toml::table document;
    try {
        document = toml::parse(text, std::string_view(path));
    } catch (const toml::parse_error& e) {
        throw ConfigError("", where(path, e.source().begin) + "TOML syntax error: " + std::string(e.description()));
    }

    Config config = default_config();
    std::map<std::string, toml::source_position> set_at;  // key or section -> where the file sets it
    for (auto&& [name, node] : document) set_at[std::string(name.str())] = node.source().begin;
    for (const Entry& entry : entries_of(document)) read_entry(config, entry, path, set_at);
    if (beside_file) resolve_paths_beside(config, path);
    for (const std::string& assignment : overrides) {
        apply_override(config, assignment);
        set_at.erase(trim(assignment.substr(0, assignment.find('='))));  // no longer the file's value
    }
    if (saved && config.sweep.empty()) config = without_unread_keys(config);  // an earlier version accepted them; they had no effect
    try {
        // a run writes its text's characters into its config: a saved one without them cannot map ids to characters
        if (saved && config.task.name == "text" && config.task.alphabet.empty())
            fail_key("task.alphabet", "empty, but a text model's saved config holds its alphabet (the characters of task.path, "
                                      "written by the run that trained it)");
        validate(config);
    } catch (const ConfigError& e) {
        throw ConfigError(e.key, locate(e, path, set_at) + e.what());
    }
    return config;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
    return parse(read_config_file(path), path, overrides, false, true);
}

Config parse_config(const std::string& text, const std::string& path, const std::vector<std::string>& overrides) {
    return parse(text, path, overrides, false);
}

Config parse_saved_config(const std::string& text, const std::string& source) { return parse(text, source, {}, true); }

Config load_saved_config(const std::string& path) { return parse(read_config_file(path), path, {}, true); }

bool is_config_key(const std::string& name) { return config_schema::find(name) != nullptr; }

std::vector<std::string> differing_keys(const Config& a, const Config& b, const std::set<std::string>& ignored) {
    std::vector<std::string> keys;
    for (const Field& field : config_schema::fields())
        if (!ignored.count(field.key) && field.write(a) != field.write(b)) keys.push_back(field.key + " (" + field.write(b) + ", was " + field.write(a) + ")");
    return keys;
}

std::string first_unlisted_model_key(const Config& config, const std::set<std::string>& listed) {
    for (const std::string& differs : differing_keys(default_config(), config)) {
        const std::string key = differs.substr(0, differs.find(' '));
        if (key.rfind("model.", 0) == 0 && !listed.count(key)) return differs;
    }
    return "";
}

bool one_of(const std::string& value, std::initializer_list<const char*> allowed) {
    for (const char* a : allowed)
        if (value == a) return true;
    return false;
}

std::string to_toml(const Config& config) {
    std::string out = "# attnlab config, resolved: every key, defaults included\n";
    std::string section;
    for (const Field& field : config_schema::fields()) {
        const size_t dot = field.key.find('.');
        if (field.key.substr(0, dot) != section) {
            section = field.key.substr(0, dot);
            out += "\n[" + section + "]\n";
        }
        out += field.key.substr(dot + 1) + " = " + field.write(config) + "\n";
    }
    if (!config.sweep.empty()) out += "\n[sweep]\n";
    for (const SweepAxis& axis : config.sweep) out += config_schema::quote(axis.key) + " = [" + join(axis.values, ", ") + "]\n";
    return out;
}

}  // namespace attnlab
