// Option parsing shared by the subcommands: cxxopts over the arguments after
// the command name, its errors turned into UsageError (one line, exit 2).
#pragma once

// Vector-valued options (our positional CONFIG and key=value lists) must keep
// commas: "optim.betas=[0.9,0.98]" is one argument. Every command includes
// cxxopts through this header, so the setting is the same everywhere.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>
#include <string>
#include <vector>

#include "experiments/commands.h"

namespace attnlab {

inline cxxopts::ParseResult parse_command_line(cxxopts::Options& options, const std::vector<std::string>& args) {
    std::vector<const char*> argv{"attnlab"};
    for (const auto& a : args) argv.push_back(a.c_str());
    try {
        return options.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const cxxopts::exceptions::exception& e) {
        throw UsageError(e.what());
    }
}

}  // namespace attnlab

#include <memory>

#include "experiments/checkpoint.h"
#include "experiments/config.h"
#include "experiments/model_factory.h"

namespace attnlab {

// What the commands that read one checkpoint share (eval, audit, ablate): the
// CHECKPOINT positional, --batches and --seed.
inline void add_checkpoint_options(cxxopts::Options& options, const std::string& default_batches) {
    options.positional_help("CHECKPOINT");
    options.add_options()("batches", "eval batches", cxxopts::value<int>()->default_value(default_batches))
                         ("seed", "data seed (default: the run's seed)", cxxopts::value<int64_t>())
                         ("checkpoint", "checkpoint file", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
}

// The checkpoint named on the command line (after --help was handled), its
// config and model, and the run's data settings.
struct CheckpointInput {
    std::string path;
    CheckpointData checkpoint;
    Config config;
    LoadedModel loaded;
    uint64_t seed = 0;   // --seed, else the run's seed
    int batches = 0;     // --batches
};

inline std::string checkpoint_argument(const cxxopts::ParseResult& parsed) {
    if (!parsed.count("checkpoint") || parsed["checkpoint"].as<std::vector<std::string>>().size() != 1)
        throw UsageError("give exactly one CHECKPOINT (see --help)");
    return parsed["checkpoint"].as<std::vector<std::string>>()[0];
}

inline CheckpointInput load_checkpoint_input(const cxxopts::ParseResult& parsed) {
    CheckpointInput in;
    in.path = checkpoint_argument(parsed);
    in.batches = parsed["batches"].as<int>();
    if (in.batches < 1) throw UsageError("--batches must be at least 1, got " + std::to_string(in.batches));
    in.checkpoint = read_checkpoint(in.path);
    in.config = parse_config(in.checkpoint.config_toml, in.path + " (config attribute)");
    in.loaded = load_model(in.config, in.checkpoint, in.path);
    in.seed = static_cast<uint64_t>(parsed.count("seed") ? parsed["seed"].as<int64_t>() : in.config.run.seed);
    return in;
}

// `batches` batches of fresh data: stream 2, which neither training (0) nor the
// run's held-out evaluation (1) used.
inline std::vector<Batch> fresh_batches(const CheckpointInput& in) {
    const std::unique_ptr<BatchSource> source = make_batch_source(in.config, in.seed, 2);
    std::vector<Batch> data;
    for (int i = 0; i < in.batches; ++i) data.push_back(source->next(static_cast<size_t>(in.config.train.batch)));
    return data;
}

}  // namespace attnlab
