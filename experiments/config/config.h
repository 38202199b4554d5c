// Experiment configs: TOML files with the sections [run], [task], [model],
// [train], [optim] and [sweep], `key=value` overrides, validation and the
// resolved config written beside every run.
//
// Every key's default is the member initialiser below (together: the built-in
// default experiment, multi-query associative recall on a small decoder). Every
// key's type, allowed values and one-line doc are in ONE schema table
// (experiments/config/config_schema.cpp), which parsing, overrides, validation,
// to_toml and describe_keys all read.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variant.h"  // AttentionVariant
#include "autograd/tensor.h"  // Error
#include "data/tasks.h"       // TaskConfig

namespace attnlab {

// Bad config input, as one line that names the key and, for a file, where:
//   configs/x.toml:5:1: unknown key model.head (did you mean model.heads?)
//   override model.heads=abc: expected an integer, got a string
//   model.width: 66 is not divisible by model.heads = 4 (or set model.head_width)
struct ConfigError : Error {
    ConfigError(std::string key_, const std::string& message) : Error(message), key(std::move(key_)) {}
    std::string key;  // dotted key at fault ("model.heads"), a section ("task"), or "" (file syntax, bad assignment)
};

// One [sweep] axis: "model.heads" = [1, 2, 4]. Values are canonical TOML text
// ("4", "\"sqrt\"", "[0.9, 0.98]"), each already checked against the key's type
// and range, so `key + "=" + value` is a valid override.
struct SweepAxis {
    std::string key;
    std::vector<std::string> values;
    bool operator==(const SweepAxis&) const = default;
};

struct Config {
    struct Run {
        std::string name = "default";  // the run folder: out_dir/name
        int64_t seed = 0;
        std::string out_dir = "runs";
        bool operator==(const Run&) const = default;
    } run;

    struct Task {
        // copy | reverse | sort | recall | induction | translate | modular | mqar | file | text | none
        // (none: no data, a model made by `attnlab import`; analysis commands take given tokens)
        std::string name = "recall";
        int64_t vocab = 32;           // including the 3 special tokens
        int64_t min_len = 3;
        int64_t max_len = 6;
        int64_t queries = 4;          // recall only
        int64_t pack = 0;             // input positions of a packed row (decoder-only generated tasks); 0 = off
        int64_t train_size = 0;       // generated tasks: train on this many distinct examples (data/finite_task.h); 0 = fresh ones
        int64_t modulus = 113;        // modular only: p
        int64_t seq_len = 64;         // mqar only: input positions (max_len: the key-value pairs)
        std::string op = "+";         // modular only: + - * /
        std::string fill = "random";  // mqar only: what stands between the queries: random content tokens, or <PAD>
        std::string path;             // HDF5 token file (file) or UTF-8 text (text); required iff one of those
        std::string alphabet;         // text only: its characters, token id = index (filled from the file)
        // none and file: a folder holding tokenizer.json, or vocab.json + merges.txt (GPT-2's
        // byte-level BPE, data/bpe_tokenizer.h); then --tokens and --prompt take text. "" = ids
        std::string tokenizer;
        bool operator==(const Task&) const = default;
    } task;

    struct Model {
        std::string kind = "decoder";  // decoder | encoder-decoder
        int64_t layers = 2;
        int64_t width = 64;
        int64_t heads = 4;
        int64_t kv_heads = 0;          // 0 = heads
        int64_t head_width = 0;        // 0 = width / heads
        int64_t ffn = 256;             // 0 = attention-only blocks
        std::string norm = "pre";      // pre | post | none
        std::string norm_type = "layernorm";  // norm_type_choices() (layers/basic.h)
        std::string positional = "learned";  // learned | sinusoidal | none | rotary | alibi
        double rotary_base = 10000.0;  // rotary: theta_c = base^(-2c/d_h)
        int64_t rotary_dims = 0;       // rotary: the first rotary_dims features of each head turn; 0 = all
        std::string scale = "sqrt";    // sqrt | none | linear | a positive number ("0.125")
        std::string masked_rows = "error";   // error | zero
        double dropout = 0.0;
        double attn_dropout = 0.0;
        bool bias = true;              // the attention projections'
        bool ffn_bias = true;          // the feed-forward layers'
        bool norm_bias = true;         // LayerNorm's
        double norm_eps = 1e-5;        // every norm's epsilon
        bool parallel = false;         // decoder: x + attn(ln1(x)) + ffn(ln2(x)) (GPT-NeoX)
        bool head_bias = false;        // the output head's bias (head.bias)
        bool tie_embeddings = false;   // decoder: the output head is the token embedding
        std::string init = "torch";    // torch | gpt2 | transformerlens (init_choices(), layers/models.h)
        std::string activation = "gelu";     // gelu | gelu_tanh | relu
        int64_t max_len = 0;           // 0 = the task's longest sequence
        // "L.H": heads whose output z is zero in every forward (Bietti et al. 2023's
        // ablations during training); decoder self-attention
        std::vector<std::string> ablate_heads;
        AttentionVariant variant;          // the score modifiers, each a key model.<field> (autograd/variant.h)
        bool operator==(const Model&) const = default;
    } model;

    struct Train {
        int64_t steps = 1500;
        int64_t batch = 32;            // 0 = "all": the whole training set each step (task.train_size)
        int64_t log_every = 50;
        int64_t eval_every = 250;
        int64_t eval_batches = 4;
        // [min, max]: each evaluation also draws the task at these lengths (length
        // generalisation: /eval_lengths in metrics.h5); [0, 0] = none
        std::array<int64_t, 2> eval_lengths = {0, 0};
        int64_t checkpoint_every = 500;
        int64_t keep_checkpoints = 3;  // 0 = keep all
        std::string device = "cpu";    // cpu | cuda (attention core on the GPU; refused without a GPU)
        int64_t threads = 1;           // 0 = all cores (per rank under mpirun); small models run fastest on one
        // Under mpirun, how the ranks' gradients are summed: "fast" (one allreduce of
        // each rank's share) or "deterministic" (train.micro_batches summed in one fixed
        // tree: the same bits at every rank count, a single process included)
        std::string reduce = "fast";
        int64_t micro_batches = 8;     // deterministic only: pieces of train.batch (must divide it)
        double target_accuracy = 0.99;
        bool tensorboard = false;      // also TensorBoard event files under <run>/tb/
        // parameter names or globs the optimiser leaves alone (they keep their initial values)
        std::vector<std::string> freeze;
        // at each evaluation, Olsson et al.'s head scores on a fixed repeated-token
        // batch (experiments/run/head_scores.h): /head_scores in metrics.h5
        bool head_scores = false;
        // several seeds in one process (experiments/run/trainer_members.cpp): the runs of
        // this config at run.seed = each of them, trained side by side; empty = one run at run.seed
        std::vector<int64_t> seeds;
        // how they share the process: "threads" (each member's step on a thread of the
        // pool) or "stacked" (one model holding every member's parameters, one pass a step)
        std::string seeds_mode = "threads";
        bool operator==(const Train&) const = default;
    } train;

    struct Optim {
        std::string name = "adamw";    // adamw | adam | sgd
        double lr = 1e-3;
        double weight_decay = 0.01;
        std::array<double, 2> betas = {0.9, 0.999};
        double eps = 1e-8;
        double momentum = 0.9;         // sgd only
        bool nesterov = false;         // sgd only
        int64_t warmup = 100;
        std::string schedule = "cosine";  // cosine | linear | constant
        int64_t schedule_steps = 0;    // the step the schedule ends at (then its floor); 0 = train.steps
        double min_lr = 0.0;           // the decay's floor (cosine, linear)
        double clip = 1.0;             // 0 = no clipping
        bool operator==(const Optim&) const = default;
    } optim;

    std::vector<SweepAxis> sweep;      // in file order; empty: a single run

    bool operator==(const Config&) const = default;
};

// Sequences per step: train.batch, or task.train_size for train.batch = "all".
inline int64_t batch_size(const Config& c) { return c.train.batch > 0 ? c.train.batch : c.task.train_size; }

// The step the learning-rate schedule ends at: optim.schedule_steps, or train.steps when it is 0.
inline int64_t schedule_horizon(const Config& c) { return c.optim.schedule_steps > 0 ? c.optim.schedule_steps : c.train.steps; }

// The built-in default experiment (valid as it is).
Config default_config();
// An entry of model.ablate_heads, "LAYER.HEAD" (the form the schema checked), as (layer, head).
std::pair<size_t, size_t> ablated_head(const std::string& text);

// The config with the task drawn at lengths [min_len, max_len] (eval --min-len/--max-len, train.eval_lengths).
Config with_task_lengths(const Config& config, int64_t min_len, int64_t max_len);

// Reads, checks and validates a TOML file, applying `overrides` (key=value)
// before the cross-field rules, so an override may fix what the file alone breaks.
// Throws ConfigError: a missing file, a syntax error, an unknown key, a wrong
// type or range, a cross-field rule, an invalid sweep cell.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from TOML text; `source` names it in messages (a checkpoint's config attribute).
Config parse_config(const std::string& text, const std::string& source, const std::vector<std::string>& overrides = {});

// A config attnlab wrote (a run's config.toml, a checkpoint's config attribute),
// read as parse_config/load_config read a user's, except that a key nothing
// reads under the other keys, which an earlier version accepted, is put back to
// its default (it had no effect) instead of refused.
Config parse_saved_config(const std::string& text, const std::string& source);
Config load_saved_config(const std::string& path);

// One `key=value` (value in TOML syntax: 8, 0.1, [0.9, 0.98], "cuda"; string
// keys also take bare text: model.scale=sqrt). Checks the key, the value's type
// and its range; call validate() after the last override for the cross-field rules.
void apply_override(Config& config, const std::string& assignment);

// Every key's range, then the cross-field rules (divisibility of width and
// heads, kv_heads, task and model kind, task.path, model.max_len against the
// task, the task generator's own checks), then every sweep cell.
//
// Keys read only under some settings (model.rotary_base with rotary positions,
// optim.betas and optim.eps with adam and adamw, optim.momentum with sgd,
// model.activation with a feed-forward layer, task.queries for recall, ...: the
// table in config.cpp, docs/config.md) are refused, naming the setting, when set
// away from their defaults where nothing reads them: the run would be another
// experiment than the one written. In a sweep, every cell must read the keys its
// axes set, and each key of the base must be read by some cell; the other cells
// get its default (without_unread_keys).
void validate(const Config& config);

// The config with each key that nothing reads under the other keys at its default.
Config without_unread_keys(Config config);

// The resolved config as TOML: every key, defaults included; load_config reads
// it back to an equal Config.
std::string to_toml(const Config& config);

// "key (new value, was old value)" for each key whose value differs from `before`
// to `after`, in schema order, but the keys in `ignored`; the sweep is not compared.
std::vector<std::string> differing_keys(const Config& before, const Config& after, const std::set<std::string>& ignored = {});

// The first model.* key `config` sets away from its default that `listed` does
// not name, as differing_keys words it ("key (value, was default)"); "" when
// none. How a feature that takes options by allow-list (export, stacking, the
// audit) finds the one it must refuse.
std::string first_unlisted_model_key(const Config& config, const std::set<std::string>& listed);
// Is `value` one of `allowed`? The choices of an option such a feature names: a
// new choice is refused (or, for stacking, run on threads) until it is written.
bool one_of(const std::string& value, std::initializer_list<const char*> allowed);

// The schema as a table for --help: key, default, allowed values, doc.
std::string describe_keys();

// Whether `name` is a dotted config key ("model.heads").
bool is_config_key(const std::string& name);

// The [sweep] grid as override lists, one per cell, the first axis varying
// slowest; a single empty cell when there is no sweep. Apply each to a copy of
// the config (with its sweep cleared) and validate.
std::vector<std::vector<std::string>> sweep_cells(const Config& config);

// The [task] section as data/tasks.h takes it (not for task.name = "file").
TaskConfig task_config(const Config& config);

}  // namespace attnlab
