#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>

#include "autograd/cpu/jit_gemm.h"
#include "autograd/cpu/kernels.h"
#include "autograd/tensor.h"
#include "data/quoted.h"
#include "experiments/cli/commands.h"
#include "experiments/config/config.h"
#include "experiments/distributed/world.h"
#include "experiments/files/provenance.h"
#include "experiments/files/temp_files.h"

namespace attnlab {

namespace {

constexpr const char* usage =
    "usage: attnlab COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  train [CONFIG] [key=value ...]   train from a TOML config (no CONFIG: the default experiment)\n"
    "  train --resume RUN_DIR           continue a run from its newest checkpoint\n"
    "  train --runs FILE                new and resumed runs of one config, side by side in one process\n"
    "  train --keys                     every config key, its default and allowed values\n"
    "  eval CHECKPOINT                  loss, token and sequence accuracy on fresh data\n"
    "  inspect CHECKPOINT --tokens \"...\" --out OUT.h5   logits, per-head attention weights, hidden states\n"
    "  sweep CONFIG [key=value ...]     run the config's [sweep] grid, then one summary table\n"
    "  sweep CONFIG --cell K | --summarize | --slurm   one cell; the table so far; an sbatch array script\n"
    "  sweep CONFIG --seeds-together[=stacked] [--group K | --slurm]   cells differing only in run.seed side by side\n"
    "  generate CHECKPOINT --prompt \"...\"  decode with the KV cache (greedy, temperature, top-k)\n"
    "  audit CHECKPOINT [--json]        the seed's audit record, its live tests PASS/FAIL (exit 1 on a FAIL)\n"
    "  ablate CHECKPOINT [--out F.h5]   zero- and mean-ablate every head: change in eval loss and accuracy\n"
    "  report PATH... --out REPORT.html an interactive HTML report of a run, runs, a sweep or a checkpoint\n"
    "  patch CHECKPOINT --clean \"...\" --corrupt \"...\"   activation patching per hook, layer and head\n"
    "  path-patch CHECKPOINT ... --sender L.H --receiver L.H:q   the effect of one edge\n"
    "  circuit CHECKPOINT --pairs F.h5 [--method M]   every edge's effect, exact or by attribution\n"
    "  decompose CHECKPOINT --tokens \"...\" --head L.H --query I --key J   one attention score, part by part\n"
    "  export CHECKPOINT --format safetensors|hf|tl --out DIR   the model as safetensors, Hugging Face GPT-2 or TransformerLens\n"
    "  import DIR --out CHECKPOINT.h5   a Hugging Face GPT-2/GPT-NeoX or TransformerLens model as a checkpoint\n"
    "  lens CHECKPOINT --tokens \"...\"  logit lens per layer and direct logit attribution per head\n"
    "  cache CHECKPOINT --hooks ... --out F.h5   named activations over batches of the task's data\n"
    "  heads CHECKPOINT [--checkpoints all]   previous-token, duplicate-token and induction scores per head\n"
    "  example                          the seed chapter's worked example, every number\n"
    "  gradcheck [OP ...]               float64 finite-difference check of every registered op\n"
    "\n"
    "  --version                        attnlab's version and the commit it was built from\n"
    "\n"
    "CHECKPOINT is a checkpoint file, or a run folder (its newest checkpoint).\n"
    "Under `mpirun -np N`, train runs data parallel and sweep spreads its cells over the ranks.\n"
    "Run `attnlab COMMAND --help` for a command's options.\n";

// Messages are one short line: newlines inside one (a library's) become spaces,
// a word of more than 120 characters (a quoted value, a path) is cut to its
// first 60 and how long it was, so that a culprit is named, never echoed whole,
// and what is left of control characters and invalid UTF-8 (a path's bytes, a
// library's quote of a file) is escaped, so the line is valid UTF-8.
std::string one_line(std::string text) {
    std::replace(text.begin(), text.end(), '\n', ' ');
    std::string out;
    size_t start = 0;
    while (start < text.size()) {
        const size_t space = text.find(' ', start);
        const size_t end = space == std::string::npos ? text.size() : space;
        if (end - start > 120) {
            size_t cut = start + 60;
            while (cut > start && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
            out += text.substr(start, cut - start) + "...(" + std::to_string(end - start) + " characters)";
        } else {
            out += text.substr(start, end - start);
        }
        if (space != std::string::npos) out += ' ';
        start = end + 1;
    }
    return escaped(out, std::string::npos);
}

}  // namespace

void split_config_and_overrides(const std::vector<std::string>& positionals, std::string& config_path,
                                std::vector<std::string>& overrides) {
    for (size_t i = 0; i < positionals.size(); ++i) {
        const std::string& a = positionals[i];
        // A name too long for a path, or unreadable, is not a file: no exception here.
        std::error_code not_a_file;
        const bool file = std::filesystem::is_regular_file(a, not_a_file);
        if (a.find('=') != std::string::npos && !file) overrides.push_back(a);
        else if (!file && is_config_key(a))  // `train model.heads 8`
            throw UsageError(a + ": no such config file; it is a config key: did you mean " + a + "=" +
                             (i + 1 < positionals.size() ? positionals[i + 1] : "VALUE") + "?");
        else if (config_path.empty()) config_path = a;
        else throw UsageError("more than one config file given ('" + config_path + "' and '" + a + "')");
    }
}

int exit_status_of(const std::string& command, const std::function<int()>& body, std::ostream& err) {
    const std::string prefix = "attnlab " + command + ": ";
    try {
        return body();
    } catch (const OtherRankFailed&) {  // under mpirun: the rank that failed said why
        return 2;
    } catch (const UsageError& e) {
        err << prefix << one_line(e.what()) << "\n";
        return 2;
    } catch (const Error& e) {  // bad input: config, override, checkpoint, data file, shapes
        err << prefix << one_line(e.what()) << "\n";
        return 2;
    } catch (const std::filesystem::filesystem_error& e) {  // an unusable path (out_dir, run directory)
        err << prefix << one_line(e.what()) << "\n";
        return 2;
    } catch (const std::bad_alloc&) {  // the memory estimate let a config through that did not fit after all
        err << prefix << "out of memory (the config or input needs more memory than this machine could give)\n";
        return 1;
    } catch (const std::exception& e) {  // our own bug: say so, in one line, never abort
        err << prefix << "internal error: " << one_line(e.what()) << " (please report it with the command line)\n";
        return 1;
    } catch (...) {
        err << prefix << "internal error: an unknown exception (please report it with the command line)\n";
        return 1;
    }
}

int run_cli(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
        std::cout << usage;
        return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
        std::cout << version_line() << "\n";
        return 0;
    }
    set_command_line(argc, argv);
    remove_temporaries_on_signals();  // train and sweep put their own in place (they finish the write)
    const std::string command = args[0];
    args.erase(args.begin());
    // Under mpirun every rank runs this; only rank 0 says what went wrong before
    // the work began (every rank found the same), and a rank's own failure later
    // is said by that rank (cmd_train).
    std::unique_ptr<World> world;
    std::ostringstream quiet;
    const bool other_rank = launched_ranks() > 1 && launched_rank() > 0;
    return exit_status_of(command, [&] {
        try {
            kernels::isa();        // reads ATTNLAB_ISA: a bad value is one line, exit 2, before any work
            fast_gemm_setting();   // and ATTNLAB_GEMM
        } catch (const std::invalid_argument& e) {
            throw UsageError(e.what());
        }
        world = make_world();  // a build without MPI launched as several ranks: one line, exit 2
        if (world->size() > 1 && command != "train" && command != "sweep")
            throw UsageError("launched as " + std::to_string(world->size()) + " ranks, but only train and sweep run "
                             "under mpirun; run `attnlab " + command + "` as one process");
        if (command == "gradcheck") return cmd_gradcheck(args);
        if (command == "train") return cmd_train(args, *world);
        if (command == "eval") return cmd_eval(args);
        if (command == "inspect") return cmd_inspect(args);
        if (command == "sweep") return cmd_sweep(args, *world);
        if (command == "generate") return cmd_generate(args);
        if (command == "audit") return cmd_audit(args);
        if (command == "ablate") return cmd_ablate(args);
        if (command == "report") return cmd_report(args);
        if (command == "patch") return cmd_patch(args);
        if (command == "path-patch") return cmd_path_patch(args);
        if (command == "circuit") return cmd_circuit(args);
        if (command == "decompose") return cmd_decompose(args);
        if (command == "export") return cmd_export(args);
        if (command == "import") return cmd_import(args);
        if (command == "lens") return cmd_lens(args);
        if (command == "cache") return cmd_cache(args);
        if (command == "heads") return cmd_heads(args);
        if (command == "example") return cmd_example(args);
        throw UsageError("unknown command '" + command + "' (try `attnlab --help`)");
    }, other_rank ? quiet : std::cerr);
}

}  // namespace attnlab
