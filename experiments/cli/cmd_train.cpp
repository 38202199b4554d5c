// attnlab train [CONFIG] [key=value ...] | attnlab train --resume RUN_DIR | attnlab train --runs FILE
#include <iostream>

#include "experiments/cli/command_line.h"
#include "experiments/distributed/world.h"
#include "experiments/run/runs_file.h"
#include "experiments/run/trainer.h"

namespace attnlab {

namespace {

// Under mpirun, a rank whose step fails (a full disk on rank 0, a lost rank's
// partner) says so in one line and ends every rank: the others would wait in
// the next collective for ever. The run resumes from its last checkpoint.
int run_on_every_rank(Trainer& trainer, const World& world) {
    if (world.size() == 1) return trainer.run();
    try {
        return trainer.run();
    } catch (const std::exception& e) {
        std::cerr << "attnlab train: rank " << world.rank() << " of " << world.size() << ": " << e.what()
                  << "; stopping every rank (resume with `attnlab train --resume " << trainer.run_dir() << "`)\n";
        world.abort(2);
    }
    return 2;  // not reached: abort ends the process
}

}  // namespace

int cmd_train(const std::vector<std::string>& args, const World& world) {
    cxxopts::Options options("attnlab train", "Train a model from a TOML config (the built-in default experiment without one).");
    options.positional_help("[CONFIG] [key=value ...]");
    options.add_options()("resume", "continue RUN_DIR from its newest checkpoint", cxxopts::value<std::string>())
                         ("run-dir", "write the run exactly to this new folder (as sweeps do); with train.seeds, the folder of its runs", cxxopts::value<std::string>())
                         ("runs", "train the runs FILE lists side by side in one process, each new or resumed (experiments/run/runs_file.h)", cxxopts::value<std::string>())
                         ("keys", "list every config key with its default")
                         ("h,help", "this help")
                         ("args", "config file and overrides", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"args"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::cout << options.help() << "\nOverrides use the config's dotted keys, e.g. model.heads=8; see --keys.\n";
        return 0;
    }
    if (parsed.count("keys")) {
        if (parsed.count("args") || parsed.count("resume") || parsed.count("run-dir") || parsed.count("runs"))
            throw UsageError("--keys lists the config keys and takes nothing else");
        std::cout << describe_keys();
        return 0;
    }
    std::string config_path;
    std::vector<std::string> overrides;
    if (parsed.count("args")) split_config_and_overrides(parsed["args"].as<std::vector<std::string>>(), config_path, overrides);

    if (parsed.count("runs")) {  // several runs side by side, as a sweep's seed group
        if (!config_path.empty() || !overrides.empty() || parsed.count("resume") || parsed.count("run-dir"))
            throw UsageError("--runs lists the runs with their configs and folders: give no CONFIG, overrides, --resume or --run-dir");
        if (world.size() > 1) throw UsageError("--runs trains its runs in one process; run it without mpirun");
        const RunsFile file = read_runs_file(parsed["runs"].as<std::string>());
        return Trainer::train_runs(file.runs, file.mode);
    }
    std::unique_ptr<Trainer> trainer;
    if (parsed.count("resume")) {
        if (!config_path.empty() || !overrides.empty() || parsed.count("run-dir"))
            throw UsageError("--resume continues a run with its saved config: give no CONFIG, overrides or --run-dir");
        trainer = Trainer::resume(parsed["resume"].as<std::string>(), world);
    } else {
        Config config = config_path.empty() ? default_config() : load_config(config_path, overrides);
        if (config_path.empty()) {
            for (const auto& o : overrides) apply_override(config, o);
            validate(config);
        }
        if (!config.sweep.empty()) throw UsageError("this config has a [sweep] table: run it with `attnlab sweep`");
        if (!config.train.seeds.empty()) {  // several runs side by side, in one process
            if (world.size() > 1)
                throw ConfigError("train.seeds", "train.seeds trains its runs in one process; run it without mpirun");
            return Trainer::train_members(config, parsed.count("run-dir") ? parsed["run-dir"].as<std::string>() : "");
        }
        trainer = Trainer::start(config, parsed.count("run-dir") ? parsed["run-dir"].as<std::string>() : "", world);
    }
    if (world.root()) {
        std::cerr << "attnlab train: writing " << trainer->run_dir();
        if (world.size() > 1) std::cerr << " (" << world.size() << " ranks)";
        std::cerr << "\n";
    }
    return run_on_every_rank(*trainer, world);
}

}  // namespace attnlab
