// attnlab inspect CHECKPOINT (--tokens "3 7 5" [--target "2 9"] | --input FILE.h5) --out OUT.h5
//   [--png DIR] [--hooks NAME,...]
//
// One forward pass of a checkpoint (eval mode, no graph) over given tokens, written
// as the analysis tools and the PyTorch bridge (tools/torch_bridge.py) read it:
// logits, every head's weights and score std, the residual stream, and any hook
// point asked for. The layout is in kHelpTail below (`attnlab inspect --help`).
// The file is written under a temporary name and renamed (output_file.h), so a
// failure leaves no OUT.h5 and a second inspect never replaces the first's.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "experiments/files/checkpoint.h"
#include "experiments/cli/command_line.h"
#include "experiments/config/memory_estimate.h"
#include "experiments/config/config.h"
#include "data/h5_probe.h"
#include "data/h5file.h"
#include "experiments/run/model_factory.h"
#include "experiments/files/run_files.h"
#include "experiments/cli/tools_path.h"
#include "experiments/analysis/inspect.h"

namespace attnlab {

namespace {

constexpr const char* kHelpTail = R"(
Inputs. Decoder: --tokens "3 7 5 1" is one sequence of token ids (whitespace
separated; 0 <PAD>, 1 <SEP>, 2 <BOS>, content 3..vocab-1). Encoder-decoder:
--tokens is the SOURCE and --target the decoder input as fed to the decoder,
<BOS> first (default "2": just <BOS>, so logits predict the first target token).
--input FILE.h5 gives a batch: datasets tokens [N,S] and lengths [N] for a
decoder; src, src_lengths, tgt, tgt_lengths for an encoder-decoder (integers,
right-padded; a missing lengths dataset means full rows). An OUT.h5 of this
command is itself a valid --input.

OUT.h5 (format "attnlab-inspect", format_version 1; float32 unless said):
  /  attrs: format, format_version, checkpoint, step, config (TOML), kind, layers, heads
  /tokens [B,T] int32, /lengths [B] int64                (decoder)
  /src [B,S], /src_lengths [B], /tgt [B,T], /tgt_lengths [B]   (encoder-decoder)
  /logits [B,T,V]
  /attention/<kind>/layer_<l> [B,H,Tq,Tk]   kind: self | enc_self, dec_self, cross
  /attention/<kind>/score_std [L,H]         attrs: queries, keys (token datasets), causal
  /hidden/decoder/layer_<l> [B,T,D]         layer_0 = embeddings + positions,
  /hidden/encoder/layer_<l> [B,S,D]         layer_<l> = output of block l-1
  /hooks/<point>                            with --hooks: each named activation
                                            (README, "Hook points": names and shapes)
Weights of ineligible keys (padding, future positions) are exactly 0.

--png DIR runs tools/plot_attention.py OUT.h5 --out-dir DIR with Debian's
/usr/bin/python3 (needs matplotlib; ATTNLAB_PYTHON overrides the interpreter,
ATTNLAB_TOOLS the folder holding the script): one PNG per kind, layer, head and
sequence, token labels on both axes.
PyTorch check: /usr/bin/python3 tools/torch_bridge.py CHECKPOINT --compare OUT.h5
)";

// "3 7 5" -> {3, 7, 5}; every id in [0, vocab).
std::vector<int32_t> parse_ids(const std::string& text, const std::string& option, size_t vocab) {
    std::istringstream in(text);
    std::vector<int32_t> ids;
    std::string word;
    while (in >> word) {
        const std::optional<long long> parsed = parse_whole<long long>(word);
        if (!parsed) throw UsageError(option + ": '" + word + "' is not a token id");
        const long long id = *parsed;
        if (id < 0 || id >= static_cast<long long>(vocab))
            throw UsageError(option + ": token " + word + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
        ids.push_back(static_cast<int32_t>(id));
    }
    if (ids.empty()) throw UsageError(option + ": no token ids given");
    return ids;
}

// One token dataset of an --input file ([N, S] with lengths [N]); padded positions
// become <PAD>. Shapes and types are checked before anything is read.
void read_rows(const h5::File& file, const std::string& name, const std::string& lengths_name, size_t vocab,
               Indices& tokens, std::vector<size_t>& lengths) {
    using h5::Expect;
    const h5::Where& at = file.where();
    if (!file.has(name)) h5::Where{at.tag, at.file, "/" + name}.fail("missing dataset", false);
    const h5::Dataset data = file.dataset(name);
    const std::vector<int64_t> values =
        data.read<int64_t>(Expect::array(Expect::Type::integers, {Expect::kAny, Expect::kAny}, "[N, S]"));
    const Shape shape = data.shape();
    if (shape[0] == 0 || shape[1] == 0)
        data.where().fail("must be a non-empty [N, S] array, got shape " + shape_str(shape), false);
    const size_t N = shape[0], S = shape[1];
    lengths.assign(N, S);
    if (file.has(lengths_name)) {
        const h5::Dataset ld = file.dataset(lengths_name);
        const std::vector<int64_t> stored = ld.read<int64_t>(Expect::array(
            Expect::Type::integers, {N}, "[" + std::to_string(N) + "] (one per row of /" + name + ")"));
        for (size_t b = 0; b < N; ++b) {
            if (stored[b] < 1 || stored[b] > static_cast<int64_t>(S))
                ld.where().fail("length " + std::to_string(stored[b]) + " of row " + std::to_string(b) +
                                    " is outside [1, " + std::to_string(S) + "]", false);
            lengths[b] = static_cast<size_t>(stored[b]);
        }
    }
    tokens = Indices({N, S}, std::vector<int32_t>(N * S, kPad));
    for (size_t b = 0; b < N; ++b)
        for (size_t t = 0; t < lengths[b]; ++t) {
            const int64_t id = values[b * S + t];
            if (id < 0 || id >= static_cast<int64_t>(vocab))
                data.where().fail("token " + std::to_string(id) + " at row " + std::to_string(b) + ", position " +
                                      std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
                                  false);
            tokens.values[b * S + t] = static_cast<int32_t>(id);
        }
}

Indices one_row(const std::vector<int32_t>& ids) { return Indices({1, ids.size()}, ids); }

void run_plot(const std::string& python, const std::string& script, const std::string& h5_path, const std::string& dir) {
    const int status = run_program({python, script, h5_path, "--out-dir", dir});
    if (status != 0)
        fail("inspect", "--png: " + script + (status < 0 ? " could not run" : " failed") + " (" + h5_path +
                            " is written; no heatmaps in " + dir + ")");
}

std::string join(const int32_t* ids, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += (i ? " " : "") + std::to_string(ids[i]);
    return s;
}

// Per sequence (the first 8): the decoder input and the argmax prediction at each valid position.
void print_summary(const Inspection& in, const TokenText& text, const std::string& out_path) {
    const Batch& batch = *in.batch;
    const Shape& s = in.logits.shape();  // (B, T, V)
    const size_t B = s[0], T = s[1], V = s[2];
    std::cout << "wrote " << out_path << ": logits " << shape_str(s) << ", " << in.model->layers() << " layer(s) x "
              << in.model->heads() << " head(s) of";
    for (const auto& k : in.model->kinds()) std::cout << " " << k;
    std::cout << " attention\n";
    const std::vector<double> logits = in.logits.values();
    for (size_t b = 0; b < std::min<size_t>(B, 8); ++b) {
        std::vector<int32_t> best(batch.lengths[b]);
        for (size_t t = 0; t < batch.lengths[b]; ++t) {
            const double* row = &logits[(b * T + t) * V];
            best[t] = static_cast<int32_t>(std::max_element(row, row + V) - row);
        }
        std::cout << "  [" << b << "] ";
        if (in.model->encoder_decoder())
            std::cout << "src " << join(&batch.src.values[b * batch.src.shape[1]], batch.src_lengths[b]) << " | ";
        if (text.reads_text()) {  // the text, a newline as \n
            const auto shown = [&](const int32_t* ids, size_t n) {
                std::string s;
                for (const char c : text.text(std::vector<int32_t>(ids, ids + n))) s += c == '\n' ? std::string("\\n") : std::string(1, c);
                return "\"" + s + "\"";
            };
            std::cout << "input " << shown(&batch.inputs.values[b * T], batch.lengths[b]) << " -> argmax "
                      << shown(best.data(), best.size()) << "\n";
            continue;
        }
        std::cout << "input " << join(&batch.inputs.values[b * T], batch.lengths[b]) << " -> argmax "
                  << join(best.data(), best.size()) << "\n";
    }
    if (B > 8) std::cout << "  (" << B - 8 << " more)\n";
}

// The batch --tokens/--target or --input describe, checked against the model's
// vocabulary and positional table.
Batch batch_from_options(const cxxopts::ParseResult& parsed, const TaskModel& model, const ModelConfig& shape, const TokenText& text) {
    const size_t vocab = shape.vocab;
    Batch batch;
    if (parsed.count("tokens")) {
        const std::vector<int32_t> tokens = text.reads_text() ? text.tokens(parsed["tokens"].as<std::string>(), "--tokens")
                                                              : parse_ids(parsed["tokens"].as<std::string>(), "--tokens", vocab);
        if (model.encoder_decoder()) {
            const std::vector<int32_t> target =
                parsed.count("target") ? parse_ids(parsed["target"].as<std::string>(), "--target", vocab)
                                       : std::vector<int32_t>{kBos};
            batch.src = one_row(tokens);
            batch.src_lengths = {tokens.size()};
            batch.inputs = one_row(target);
            batch.lengths = {target.size()};
        } else {
            if (parsed.count("target")) throw UsageError("--target is for encoder-decoder checkpoints; this one is a decoder");
            batch.inputs = one_row(tokens);
            batch.lengths = {tokens.size()};
        }
    } else {
        if (parsed.count("target")) throw UsageError("--target goes with --tokens; with --input put tgt in the file");
        const std::string input = parsed["input"].as<std::string>();
        const auto read_input = [&](Batch& into) {
            const h5::File in = h5::File::open(input, "inspect", h5::File::Access::read);
            if (model.encoder_decoder()) {
                read_rows(in, "src", "src_lengths", vocab, into.src, into.src_lengths);
                read_rows(in, "tgt", "tgt_lengths", vocab, into.inputs, into.lengths);
                if (into.src.shape[0] != into.inputs.shape[0])
                    fail("inspect", in.path() + ": /src has " + std::to_string(into.src.shape[0]) + " rows, /tgt has " +
                                        std::to_string(into.inputs.shape[0]));
            } else {
                read_rows(in, "tokens", "lengths", vocab, into.inputs, into.lengths);
            }
        };
        h5::probe(input, "inspect", [&] {  // first in a child: libhdf5 may crash on a crafted file
            Batch scratch;
            read_input(scratch);
        });
        read_input(batch);
    }
    if (shape.position_table()) {  // a table of max_len rows
        auto check_fits = [&](const Indices& t, const char* what) {
            if (t.shape[1] > shape.max_len)
                throw UsageError(std::string(what) + " has " + std::to_string(t.shape[1]) +
                                 " positions; the model's positional table covers " + std::to_string(shape.max_len));
        };
        check_fits(batch.inputs, model.encoder_decoder() ? "the decoder input" : "the input");
        if (model.encoder_decoder()) check_fits(batch.src, "the source");
    }
    return batch;
}

// --hooks: each name recorded in `hooks` too, all checked against the model's
// points before the forward ("[hooks] no hook point matches ...").
Hooks requested_hooks(const cxxopts::ParseResult& parsed, const TaskModel& model, Hooks& hooks) {
    Hooks asked;
    if (parsed.count("hooks"))
        for (const std::string& name : list_option(parsed, "hooks")) {
            asked.record(name);
            hooks.record(name);
        }
    { HookScope check(model.module(), asked); }
    return asked;
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab inspect",
                             "One forward pass of a checkpoint (eval mode, no graph): logits, every attention head's "
                             "weights and the hidden states, to an HDF5 file.");
    options.positional_help("CHECKPOINT");
    add_device_option(options);
    options.add_options()("tokens", "token ids \"3 7 5 1\" (the source, for an encoder-decoder)", cxxopts::value<std::string>())
                         ("target", "encoder-decoder only: decoder input ids, <BOS> first (default \"2\")",
                          cxxopts::value<std::string>())
                         ("input", "HDF5 file of token rows (see below)", cxxopts::value<std::string>())
                         ("out", "the HDF5 file to write", cxxopts::value<std::string>())
                         ("png", "also write heatmaps to DIR (runs /usr/bin/python3 with matplotlib)",
                          cxxopts::value<std::string>())
                         ("hooks", "also write these hook points: names or globs, comma-separated "
                                   "(\"blocks.*.attn.z,blocks.1.resid_post\")", cxxopts::value<std::string>())
                         ("h,help", "this help")
                         // a plain string, not a vector: cxxopts splits vector values at commas
                         ("checkpoint", "checkpoint file", cxxopts::value<std::string>());
    options.parse_positional({"checkpoint"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::cout << options.help() << kHelpTail;
        return 0;
    }
    if (!parsed.count("checkpoint") || !parsed.unmatched().empty())
        throw UsageError("give exactly one CHECKPOINT (see --help)");
    const std::string path = resolve_checkpoint(parsed["checkpoint"].as<std::string>());
    const Device device = device_option(parsed);
    if (parsed.count("tokens") == parsed.count("input")) throw UsageError("give either --tokens or --input (see --help)");
    if (!parsed.count("out")) throw UsageError("--out OUT.h5 is required");
    const std::string out_path = parsed["out"].as<std::string>();
    std::vector<std::string> inputs = {path};
    if (parsed.count("input")) inputs.push_back(parsed["input"].as<std::string>());
    const OutputFile out = check_output("--out", out_path, inputs, "attnlab-inspect");
    std::string png_dir, python, plot_script;
    if (parsed.count("png")) {  // checked before any work: a bad --png must not cost a forward pass
        png_dir = png_dir_option(parsed);
        python = python_interpreter("--png", "matplotlib");
        plot_script = find_tool("plot_attention.py", "--png").string();
    }

    const LoadedCheckpoint in = load_checkpoint(path, device);
    const CheckpointData& checkpoint = in.checkpoint;
    const Config& config = in.config;
    const LoadedModel& loaded = in.loaded;
    const TaskModel& model = *loaded.model;

    const TokenText text(in);  // its tokenizer checked now: the summary after the file shows its tokens
    const Batch batch = batch_from_options(parsed, model, model_config(config, loaded.max_len), text);
    // the forward records every attention's scores and pattern
    check_table_fits(parsed.count("input") ? "--input" : "--tokens",
                     forward_tables(model, {.rows = batch.inputs.shape[0], .positions = batch.inputs.shape[1],
                                            .sources = model.encoder_decoder() ? batch.src.shape[1] : 0,
                                            .tables = 2 * attention_sites(model).size()}));

    Hooks hooks;
    hooks.record("*attn.pattern").record("*attn.scores");
    for (const std::string& point : model.hidden_points(false)) hooks.record(point);
    if (model.encoder_decoder())
        for (const std::string& point : model.hidden_points(true)) hooks.record(point);
    const Hooks asked = requested_hooks(parsed, model, hooks);
    Tensor logits;
    {
        NoGradGuard no_graph;
        logits = model.forward(batch, hooks);  // (B, T, V)
    }
    std::vector<std::string> extra;  // the points --hooks named, in the model's order
    for (const std::string& point : model.module().hook_points())
        for (const std::string& pattern : asked.patterns())
            if (hook_pattern_matches(pattern, point) && hooks.has_recorded(point)) {
                extra.push_back(point);
                break;
            }
    const Inspection inspection{path, &checkpoint, &model, &batch, logits, &hooks, extra};
    write_output(out, "[inspect]", [&](const std::string& tmp) { write_inspection(tmp, inspection); });
    print_summary(inspection, text, out_path);
    if (!png_dir.empty()) run_plot(python, plot_script, out_path, png_dir);  // prints what it wrote
    return 0;
}

}  // namespace attnlab
