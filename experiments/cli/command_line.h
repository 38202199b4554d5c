// Option parsing shared by the subcommands: cxxopts over the arguments after
// the command name, its errors turned into UsageError (one line, exit 2).
#pragma once

// Vector-valued options (our positional CONFIG and key=value lists) must keep
// commas: "optim.betas=[0.9,0.98]" is one argument. Every command includes
// cxxopts through this header, so the setting is the same everywhere.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "experiments/cli/commands.h"
#include "experiments/config/edit_distance.h"
#include "experiments/files/fnv_hash.h"
#include "experiments/files/output_file.h"
#include "experiments/files/parse_number.h"
#include "experiments/files/run_files.h"

namespace attnlab {

template <class T> std::string number_text(T value) {
    if constexpr (std::is_integral_v<T>) return std::to_string(value);
    else {
        char text[32];
        std::snprintf(text, sizeof text, "%g", static_cast<double>(value));
        return text;
    }
}

// An unknown --option, with the nearest known one suggested (--resmue: --resume).
inline void check_option_names(const cxxopts::Options& options, const std::vector<std::string>& args) {
    std::vector<std::string> known;
    for (const std::string& group : options.groups())
        for (const cxxopts::HelpOptionDetails& option : options.group_help(group).options)
            for (const std::string& name : option.l) known.push_back(name);
    for (const std::string& arg : args) {
        if (arg == "--") return;  // what follows is positional
        if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
        const std::string name = arg.substr(2, arg.find('=') - 2);
        if (std::find(known.begin(), known.end(), name) != known.end()) continue;
        std::string best;
        size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
        for (const std::string& k : known)
            if (const size_t d = edit_distance(name, k); d < best_distance) best = k, best_distance = d;
        throw UsageError("unknown option --" + name + (best.empty() ? "" : " (did you mean --" + best + "?)") + "; see --help");
    }
}

inline cxxopts::ParseResult parse_command_line(cxxopts::Options& options, const std::vector<std::string>& args) {
    check_option_names(options, args);
    std::vector<const char*> argv{"attnlab"};
    for (const auto& a : args) argv.push_back(a.c_str());
    cxxopts::ParseResult parsed;
    try {
        parsed = options.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const cxxopts::exceptions::exception& e) {
        throw UsageError(e.what());
    }
    // An empty value is no value: `--hooks ""` or `--run-dir ""` must not run as
    // if the option were absent (a flag's value is "true", never empty).
    for (const cxxopts::KeyValue& given : parsed.arguments())
        if (given.value().empty()) {
            const bool positional = std::find(args.begin(), args.end(), "--" + given.key()) == args.end() &&
                                    std::none_of(args.begin(), args.end(), [&](const std::string& a) { return a.rfind("--" + given.key() + "=", 0) == 0; });
            throw UsageError(positional ? std::string("an empty argument ('') where a value was expected; see --help")
                                        : "--" + given.key() + ": empty value (give a value, or leave the option out)");
        }
    return parsed;
}

// A numeric option's value (declared as a string option, so that cxxopts never
// parses it): the whole text as a T in [lo, hi], else a UsageError naming the option.
template <class T>
T number_option(const cxxopts::ParseResult& parsed, const std::string& name, T lo, T hi) {
    const std::string text = parsed[name].as<std::string>();
    const std::optional<T> value = parse_whole<T>(text);
    const char* kind = std::is_integral_v<T> ? "an integer" : "a number";
    if (!value) throw UsageError("--" + name + ": expected " + kind + ", got '" + text + "'");
    if (!(*value >= lo && *value <= hi))  // NaN fails too
        throw UsageError("--" + name + ": must be in [" + number_text(lo) + ", " + number_text(hi) + "], got '" + text + "'");
    return *value;
}

}  // namespace attnlab

#include <filesystem>
#include <memory>
#include <optional>

#include "autograd/device/backend.h"
#include "data/h5_probe.h"
#include "data/bpe_tokenizer.h"
#include "data/h5file.h"
#include "data/text_task.h"
#include "experiments/analysis/generate.h"
#include "experiments/files/checkpoint.h"
#include "experiments/config/config.h"
#include "experiments/run/load_checkpoint.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

// How a checkpoint's tokens are read from and shown as text: a text model's
// characters (task "text"), the BPE tokenizer of task.tokenizer, else token
// ids. A command makes one right after it loads the checkpoint: the tokenizer
// is loaded and checked then (model_tokenizer: a missing folder, or more
// tokens than the model has rows), before the command writes anything, and
// showing a token never fails once it has.
class TokenText {
public:
    explicit TokenText(const LoadedCheckpoint& in) : task_(in.config.task) {
        if (task_.tokenizer.empty()) return;
        try {
            bpe_.emplace(model_tokenizer(in.config));
        } catch (const ConfigError& e) {
            throw Error(in.path + " (config attribute): " + e.what());
        }
    }

    // Whether tokens are read and shown as text, and whether that text is BPE's.
    bool reads_text() const { return task_.name == "text" || bpe(); }
    bool bpe() const { return bpe_.has_value(); }

    // Tokens as the text they stand for (reads_text models only); a row the
    // tokenizer has no token for as "<id>".
    std::string text(const std::vector<int32_t>& ids) const {
        return bpe_ ? bpe_->decode(ids) : tokens_to_text(ids, task_.alphabet);
    }

    // Tokens from a command-line argument: a text model's characters ("Anna had a "),
    // text through the model's BPE tokenizer (each id within the model's rows: the
    // tokenizer has no more tokens), else token ids ("3 7 5 1"), each checked
    // against the model's vocabulary.
    std::vector<int32_t> tokens(const std::string& text, const std::string& what) const {
        if (bpe_) {
            std::vector<int32_t> ids = bpe_->encode(text);
            if (ids.empty()) throw UsageError(what + ": empty text");
            return ids;
        }
        if (task_.name != "text") return parse_token_ids(text, static_cast<size_t>(task_.vocab), what);
        std::vector<int32_t> tokens = text_to_tokens(text, task_.alphabet, what);
        if (tokens.empty()) throw UsageError(what + ": empty text");
        return tokens;
    }

    // One token as a person reads it: its text in quotes (a newline as \n, a tab
    // as \t), "<id>" for a row the tokenizer has no token for, else its id.
    std::string label(int32_t id) const {
        if (bpe_ && id >= bpe_->vocab_size()) return "<" + std::to_string(id) + ">";
        if (!reads_text()) return std::to_string(id);
        std::string shown;
        for (const char c : text({id})) shown += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
        return "'" + shown + "'";
    }

private:
    Config::Task task_;
    std::optional<BpeTokenizer> bpe_;
};

// --device cpu|cuda: where a loaded model runs. The analyses are the same code on
// either (hook points and the ops); what has no device kernel says so in one line.
inline void add_device_option(cxxopts::Options& options) {
    options.add_options()("device", "cpu or cuda: where the model runs", cxxopts::value<std::string>()->default_value("cpu"));
}

inline Device device_option(const cxxopts::ParseResult& parsed) {
    const std::string name = parsed["device"].as<std::string>();
    if (name == "cpu") return Device::cpu;
    if (name != "cuda") throw UsageError("--device: must be \"cpu\" or \"cuda\", got '" + name + "'");
    const device::DeviceInfo info = device::probe();
    if (!info.available) throw UsageError("--device cuda: " + info.reason);
    return Device::cuda;
}

// What the commands that read one checkpoint share (eval, audit, ablate): the
// CHECKPOINT positional, --batches and --seed.
inline void add_checkpoint_options(cxxopts::Options& options, const std::string& default_batches) {
    add_device_option(options);
    options.positional_help("CHECKPOINT");
    options.add_options()("batches", "eval batches", cxxopts::value<std::string>()->default_value(default_batches))
                         ("seed", "data seed (default: the run's seed)", cxxopts::value<std::string>())
                         ("data", "an HDF5 token file (the file task's format) to draw the batches from instead of the run's task; "
                                  "an imported model has no task of its own", cxxopts::value<std::string>())
                         ("checkpoint", "checkpoint file", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
}

// The checkpoint named on the command line (after --help was handled), its
// config and model, and the run's data settings.
struct CheckpointInput : LoadedCheckpoint {
    uint64_t seed = 0;   // --seed, else the run's seed
    int batches = 0;     // --batches
    Device device = Device::cpu;  // --device: where the model was placed
    // what set the batches' length, for a message: --data or --max-len when given
    std::string length_option = "the checkpoint's task.max_len";
};

// A CHECKPOINT argument: a checkpoint file, or a run folder, which stands for
// its newest checkpoint.
inline std::string resolve_checkpoint(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) return path;
    const std::vector<std::string> saved = list_checkpoints((std::filesystem::path(path) / "checkpoints").string());
    if (saved.empty()) throw UsageError(path + ": a folder without checkpoints/step_*.h5 (give a checkpoint file or a run folder)");
    return saved.back();
}

inline std::string checkpoint_argument(const cxxopts::ParseResult& parsed) {
    if (!parsed.count("checkpoint") || parsed["checkpoint"].as<std::vector<std::string>>().size() != 1)
        throw UsageError("give exactly one CHECKPOINT (see --help)");
    return resolve_checkpoint(parsed["checkpoint"].as<std::vector<std::string>>()[0]);
}

// --batches: eval batches of the run's batch size (each a fresh draw of the task).
inline int checkpoint_batches(const cxxopts::ParseResult& parsed) { return number_option<int>(parsed, "batches", 1, 1 << 20); }

inline void use_token_file(CheckpointInput& in, const std::string& path);  // --data, below

inline CheckpointInput load_checkpoint_input(const cxxopts::ParseResult& parsed) {
    CheckpointInput in;
    const std::string path = checkpoint_argument(parsed);
    in.batches = checkpoint_batches(parsed);
    in.device = device_option(parsed);
    static_cast<LoadedCheckpoint&>(in) = load_checkpoint(path, in.device);
    in.seed = static_cast<uint64_t>(parsed.count("seed") ? number_option<int64_t>(parsed, "seed", 0, std::numeric_limits<int64_t>::max())
                                                         : in.config.run.seed);
    if (parsed.count("data")) use_token_file(in, parsed["data"].as<std::string>());
    return in;
}

// Evaluation at task lengths [lo, hi] instead of the run's: the model is loaded
// again to cover the longest sequence they give, which positions without a
// table (sinusoidal is computed, rotary, ALiBi, none) do at any length; a
// learned table refuses, in one line, what it was not trained to cover.
// The model loaded again to cover `needed` positions, which positions without a
// table (sinusoidal is computed, rotary, ALiBi, none) do at any length; a learned
// table refuses, in one line naming `what`, what it was not trained to cover.
inline void cover_length(CheckpointInput& in, size_t needed, const std::string& what) {
    if (needed <= in.loaded.max_len) return;
    if (in.config.model.positional == "learned")
        throw UsageError(what + " needs " + std::to_string(needed) + " positions; the learned table of " + in.path + " covers " +
                         std::to_string(in.loaded.max_len) + " (model.max_len)");
    Config wider = in.config;
    wider.model.max_len = static_cast<int64_t>(needed);
    in.loaded = load_model(wider, in.checkpoint, in.path);
    place_model(in.loaded, in.device);
}

inline void set_task_lengths(CheckpointInput& in, int64_t lo, int64_t hi) {
    if (in.config.task.name == "file") throw UsageError("--min-len/--max-len: task \"file\" has no lengths");
    if (lo > hi) throw UsageError("--min-len " + std::to_string(lo) + " is above --max-len " + std::to_string(hi));
    in.config = with_task_lengths(in.config, lo, hi);
    in.length_option = "--max-len " + std::to_string(hi);
    cover_length(in, make_batch_source(in.config, 0, 0)->max_sequence_length(), "--max-len " + std::to_string(hi));  // also checks the task
}

// --data FILE.h5: the batches come from a token file (task "file": its held-out
// tenth, as `attnlab eval` draws a file task's), checked against the model's
// vocabulary and positions.
inline void use_token_file(CheckpointInput& in, const std::string& path) {
    if (in.loaded.model->encoder_decoder()) throw UsageError("--data " + path + ": token files feed decoder-only models");
    in.config.task.name = "file";
    in.config.task.path = path;
    in.length_option = "--data " + path;
    cover_length(in, make_batch_source(in.config, in.seed, 2)->max_sequence_length(), "--data " + path);  // reads and checks the file
}

// The batches' shape: train.batch rows, the task's longest sequence, an
// encoder-decoder's longest source (0 for a decoder).
struct FreshShape {
    size_t rows = 0, positions = 0, sources = 0;
};
inline FreshShape fresh_shape(const CheckpointInput& in) {
    return {static_cast<size_t>(batch_size(in.config)), make_batch_source(in.config, in.seed, 2)->max_sequence_length(),
            in.loaded.model->encoder_decoder() ? static_cast<size_t>(in.config.task.max_len) : 0};
}

// Refuses, before a batch is drawn (memory_estimate.h), --batches batches that
// cannot be held at once: inputs and targets int32 and the loss mask per
// position, an encoder-decoder's sources int32.
inline void check_held_batches_fit(const CheckpointInput& in) {
    const FreshShape s = fresh_shape(in);
    const double rows = static_cast<double>(in.batches) * static_cast<double>(s.rows);
    check_table_fits("--batches", "the batches [" + std::to_string(in.batches) + " x " + std::to_string(s.rows) + " x " +
                                      std::to_string(s.positions) + " positions]",
                     rows * (static_cast<double>(s.positions) * (4 + 4 + 1) + static_cast<double>(s.sources) * 4));
}

// Refuses, before a batch is drawn, a batch whose forward (model_factory.h)
// cannot fit with `tables` attention tables recorded, naming what set its
// length (in.length_option).
inline void check_batch_forward_fits(const CheckpointInput& in, size_t tables = 0) {
    const FreshShape s = fresh_shape(in);
    check_table_fits(in.length_option,
                     forward_tables(*in.loaded.model, {.rows = s.rows, .positions = s.positions, .sources = s.sources, .tables = tables}));
}

// `batches` batches of fresh data: stream 2, which neither training (0) nor the
// run's held-out evaluation (1) used.
inline std::vector<Batch> fresh_batches(const CheckpointInput& in) {
    const std::unique_ptr<BatchSource> source = make_batch_source(in.config, in.seed, 2);
    std::vector<Batch> data;
    for (int i = 0; i < in.batches; ++i) data.push_back(source->next(static_cast<size_t>(batch_size(in.config))));
    return data;
}

// "a,b,,c" -> {"a", "b", "", "c"}
inline std::vector<std::string> split(const std::string& text, char separator) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t end = text.find(separator, start);
        parts.push_back(text.substr(start, end - start));
        if (end == std::string::npos) return parts;
        start = end + 1;
    }
}

// A comma-separated option ("--hooks z,v"): its items, none of them empty
// (",," or "z," names nothing and is refused, never read as "all" or "none").
inline std::vector<std::string> list_option(const cxxopts::ParseResult& parsed, const std::string& name) {
    const std::string text = parsed[name].as<std::string>();
    std::vector<std::string> items = split(text, ',');
    for (const std::string& item : items)
        if (item.empty()) throw UsageError("--" + name + " '" + text.substr(0, 80) + "': an empty name in the comma-separated list");
    return items;
}

// CHECKPOINT with its .h5 replaced by `suffix` ("step_0001500.patch.h5").
inline std::string beside_checkpoint(const std::string& checkpoint, const std::string& suffix) {
    const std::string stem = checkpoint.size() > 3 && checkpoint.ends_with(".h5") ? checkpoint.substr(0, checkpoint.size() - 3) : checkpoint;
    return stem + suffix;
}

// A command's default output, beside CHECKPOINT: its .h5 replaced by
// ".KIND.PART....h5", the parts what tells two such outputs apart (circuit: the
// pairs file's stem, the method, the metric: "step_0003000.circuit.key.exact.prob.h5").
// A part's characters other than letters, digits and ._+=- become '_'; a name
// longer than kMaxFolderName keeps its start and ends in "~" and a hash of the
// whole. It never replaces a file: when the name is taken the output goes to
// NAME-2, NAME-3, ... (Existing::number) and the command says so (wrote_text).
inline OutputFile default_output(const std::string& checkpoint, const std::string& kind, const std::vector<std::string>& parts = {}) {
    std::string tail = "." + kind;
    for (const std::string& part : parts) {
        tail += ".";
        for (const char c : part)
            tail += std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("._+=-", c)) ? c : '_';
    }
    std::filesystem::path path = beside_checkpoint(checkpoint, tail + ".h5");
    std::string name = path.filename().string();
    if (name.size() > kMaxFolderName) {
        char hash[18];
        std::snprintf(hash, sizeof hash, "~%016llx", static_cast<unsigned long long>(fnv1a(name.data(), name.size())));
        name = name.substr(0, kMaxFolderName - 3 - 17) + hash + ".h5";
        path.replace_filename(name);
    }
    return OutputFile{path, Existing::number, {}};
}

// What a command prints after "wrote ": the file, and for a default output that
// went to NAME-N, that NAME was there and is kept.
inline std::string wrote_text(const OutputFile& out, const std::filesystem::path& written) {
    if (written == out.path) return written.string();
    return written.string() + " (" + out.path.string() + " exists and is kept; --out chooses the name)";
}

// An output path (--out, --maps) is checked before any work. It names a file in
// an existing folder, is none of the command's inputs, and, when it exists
// already, is a file this same command wrote (an HDF5 file whose `format`
// attribute is `format`): replacing anything else would lose it (a checkpoint,
// metrics.h5, config.toml, another command's result, a user's own file). What an
// existing file is, is read in a child process first (data/h5_probe.h). Returns
// how it is written: a new file (another process's file that appears meanwhile
// is kept, and this write refused), or in place of the file checked here and no
// other (Existing::replace_seen).
inline OutputFile check_output(const std::string& option, const std::string& path, const std::vector<std::string>& inputs,
                               const std::string& format) {
    namespace fs = std::filesystem;
    if (path.empty()) throw UsageError(option + " is empty");
    std::error_code ec;
    if (fs::is_directory(path, ec)) throw UsageError(option + " " + path + " is a directory");
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec))
        throw UsageError(option + " " + path + ": directory " + parent.string() + " does not exist");
    const std::optional<FileId> seen = file_id(path);
    if (!seen) return OutputFile{path, Existing::refuse, {}};
    for (const std::string& input : inputs)
        if (fs::exists(input, ec) && fs::equivalent(path, input, ec))
            throw UsageError(option + " " + path + " is an input of this command (" + input + "); refusing to replace it");
    if (!fs::is_regular_file(fs::symlink_status(path, ec)))
        throw UsageError(option + " " + path + " exists and is not a regular file; refusing to replace it");
    std::string found;
    try {
        found = h5::read_probed(path, option.substr(2), [&] {
            const h5::File f = h5::File::open(path, option.substr(2), h5::File::Access::read);
            return f.has_attr("format") ? f.read_attr_string("format") : std::string();
        });
    } catch (const Error&) {
        found.clear();  // not HDF5, or not readable as such: not ours to replace
    }
    if (found != format)
        throw UsageError(option + " " + path + " exists and is not a file of this command (" +
                         (found.empty() ? std::string("not an attnlab file") : "format " + found) + ", not " + format +
                         "); refusing to replace it: give a new name, or remove it first");
    return OutputFile{path, Existing::replace_seen, *seen};
}

// --png DIR, checked before any work: a name, and a folder when it exists.
inline std::string png_dir_option(const cxxopts::ParseResult& parsed) {
    const std::string dir = parsed["png"].as<std::string>();
    if (dir.empty()) throw UsageError("--png: empty directory name");
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
        throw UsageError("--png " + dir + " exists and is not a directory");
    return dir;
}

}  // namespace attnlab
