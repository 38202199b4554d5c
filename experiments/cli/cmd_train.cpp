// attnlab train [CONFIG] [key=value ...] | attnlab train --resume RUN_DIR
#include <iostream>

#include "experiments/cli/command_line.h"
#include "experiments/run/trainer.h"

namespace attnlab {

int cmd_train(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab train", "Train a model from a TOML config (the built-in default experiment without one).");
    options.positional_help("[CONFIG] [key=value ...]");
    options.add_options()("resume", "continue RUN_DIR from its newest checkpoint", cxxopts::value<std::string>())
                         ("run-dir", "write the run exactly to this new folder (as sweeps do)", cxxopts::value<std::string>())
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
        if (parsed.count("args") || parsed.count("resume") || parsed.count("run-dir"))
            throw UsageError("--keys lists the config keys and takes nothing else");
        std::cout << describe_keys();
        return 0;
    }
    std::string config_path;
    std::vector<std::string> overrides;
    if (parsed.count("args")) split_config_and_overrides(parsed["args"].as<std::vector<std::string>>(), config_path, overrides);

    std::unique_ptr<Trainer> trainer;
    if (parsed.count("resume")) {
        if (!config_path.empty() || !overrides.empty() || parsed.count("run-dir"))
            throw UsageError("--resume continues a run with its saved config: give no CONFIG, overrides or --run-dir");
        trainer = Trainer::resume(parsed["resume"].as<std::string>());
    } else {
        Config config = config_path.empty() ? default_config() : load_config(config_path, overrides);
        if (config_path.empty()) {
            for (const auto& o : overrides) apply_override(config, o);
            validate(config);
        }
        if (!config.sweep.empty()) throw UsageError("this config has a [sweep] table: run it with `attnlab sweep`");
        trainer = Trainer::start(config, parsed.count("run-dir") ? parsed["run-dir"].as<std::string>() : "");
    }
    std::cerr << "attnlab train: writing " << trainer->run_dir() << "\n";
    return trainer->run();
}

}  // namespace attnlab
