// attnlab report PATH... --out REPORT.html [--tokens "3 7 5 1" [--target "2 9"]]
//
// One self-contained interactive HTML report (plotly, embedded; no network
// request) of a run folder, several run folders, a sweep folder, a
// checkpoint's attention on one prompt, or an `attnlab circuit` file. The work is done by tools/report.py,
// run with Debian's /usr/bin/python3 (python3-plotly, python3-h5py); for a
// checkpoint it runs this same binary's `inspect` into a temporary file. The
// script checks every input and prints its own one line on bad input (exit 2).
#include <filesystem>
#include <iostream>

#include "experiments/cli/command_line.h"
#include "experiments/cli/tools_path.h"

namespace attnlab {

namespace {

constexpr const char* kHelpTail = R"(
PATH is one of:
  a run folder      summary, loss and accuracy curves (train and held-out), per
                    layer x head heatmaps over training of entropy, normalised
                    entropy, masked mass and score std, the saved audit
                    (RUN/audit.json or RUN/checkpoints/step_N.audit.json, from
                    `attnlab audit CHECKPOINT --json > ...`), the newest ablation
                    (RUN/checkpoints/step_N.ablation.h5, `attnlab ablate`), the
                    resolved config
  several runs      their curves overlaid, and the config keys that differ
  a sweep folder    the summary tables (click a header to sort), final accuracy and
                    steps to target against the first swept key (seed error bars),
                    every cell's curves, initial score std against head width,
                    every head's final normalised entropy
  a checkpoint      with --tokens (a run folder with --tokens: its newest
                    checkpoint): every kind, layer and head of that prompt's
                    attention: a grid of every head of the layer picked (hover a
                    head to see it big, click to keep it; a menu picks any head),
                    the prompt's tokens (hover one: its row and column outlined,
                    every key shaded by its weight), click a query to see its row.
                    Several prompts go in one --tokens separated by " | " (a bar
                    with a space each side), "3 7 5 1 | 4 4 2"; a menu picks the
                    prompt (a text prompt cannot hold " | ")
  a circuit file    `attnlab circuit`'s .circuit.h5, alone and without --tokens: its
                    edges drawn by layer from embed to logits (the circuit kept by
                    --prune, and the largest |scores|; each score on hover), the
                    faithfulness curve, score against exact, the top edges

The report is one HTML file with plotly.js inside: it opens offline and makes
no network request. It is written to a temporary name and renamed; on bad input
nothing is written (one line naming the file at fault, exit status 2). --out
never replaces an input or a file that is not an HTML report, and inside a run
or sweep folder it must be an .html file outside checkpoints/, cells/, logs/, tb/.
A text model's tokens are labelled with its characters (a space as U+2423, a
newline as 
); a generated task's 0, 1, 2 as <PAD>, <SEP>, <BOS>.
tools/report.py runs with /usr/bin/python3 (python3-plotly, python3-h5py,
python3-numpy); ATTNLAB_PYTHON overrides the interpreter, ATTNLAB_TOOLS the
folder holding the script.
)";

}  // namespace

int cmd_report(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab report",
                             "An interactive HTML report of a run, several runs, a sweep, a checkpoint's attention, or a circuit.");
    options.positional_help("PATH...");
    options.add_options()("out", "the HTML file to write", cxxopts::value<std::string>())
                         ("tokens", "with a checkpoint: the prompt's token ids, \"3 7 5 1\" (several: \"3 7 5 1 | 4 4 2\")",
                          cxxopts::value<std::string>())
                         ("target", "with an encoder-decoder checkpoint: decoder input ids (default \"2\")",
                          cxxopts::value<std::string>())
                         ("h,help", "this help")
                         ("paths", "run or sweep folders, a checkpoint, or a circuit file", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"paths"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::cout << options.help() << kHelpTail;
        return 0;
    }
    if (!parsed.count("paths"))
        throw UsageError("give a run folder, several run folders, a sweep folder, or a checkpoint with --tokens (see --help)");
    if (!parsed.count("out")) throw UsageError("--out REPORT.html is required");
    const std::string python = python_interpreter("", "python3-plotly, python3-h5py and python3-numpy");
    const std::string script = find_tool("report.py", "").string();

    std::vector<std::string> words{python, script};
    for (const std::string& path : parsed["paths"].as<std::vector<std::string>>()) words.push_back(path);
    words.insert(words.end(), {"--out", parsed["out"].as<std::string>()});
    for (const char* option : {"tokens", "target"})
        if (parsed.count(option)) words.insert(words.end(), {std::string("--") + option, parsed[option].as<std::string>()});
    words.insert(words.end(), {"--attnlab", self_executable().string(), "--prog", "attnlab report"});
    const int status = run_program(words);  // report.py prints its own line on failure
    if (status < 0) {
        std::cerr << "attnlab report: " << script << " did not finish (it could not start, or was killed)\n";
        return 1;
    }
    return status;
}

}  // namespace attnlab
