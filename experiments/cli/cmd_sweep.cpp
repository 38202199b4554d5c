// attnlab sweep CONFIG [key=value ...] [--jobs N] [--force]
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include <toml++/toml.h>

#include "experiments/cli/command_line.h"
#include "experiments/distributed/world.h"
#include "experiments/sweep/sweep.h"

namespace attnlab {

namespace {

// Whether the config file or an override sets run.name.
bool names_the_run(const std::string& config_path, const std::vector<std::string>& overrides) {
    for (const std::string& o : overrides) {
        std::string key = o.substr(0, o.find('='));
        key.erase(0, key.find_first_not_of(" \t"));
        key.erase(key.find_last_not_of(" \t") + 1);
        if (key == "run.name") return true;
    }
    try {
        const toml::table document = toml::parse_file(config_path);
        return document["run"]["name"].node() != nullptr;
    } catch (const toml::parse_error&) {
        return true;  // cannot happen: load_config read it
    }
}

// The command line again, for the message that tells how to resume.
std::string shell_command(const std::vector<std::string>& args) {
    std::string out = "attnlab sweep";
    for (const std::string& a : args) {
        const bool plain = !a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                             "0123456789_-./=,:+@%") == std::string::npos;
        std::string quoted = "'";
        for (char ch : a) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
        out += " " + (plain ? a : quoted + "'");
    }
    return out;
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& args, const World& world) {
    if (world.size() > 1)  // the cells across ranks: not built yet
        throw UsageError("launched as " + std::to_string(world.size()) + " ranks: sweeps across ranks are not built yet; "
                         "run `attnlab sweep` as one process (--jobs N runs cells side by side)");
    cxxopts::Options options("attnlab sweep", "Run every cell of a config's [sweep] grid and tabulate the results.");
    options.positional_help("CONFIG [key=value ...]");
    options.add_options()("jobs", "cells run at a time (the cores are split between them)", cxxopts::value<int>()->default_value("1"))
                         ("force", "run a grid larger than 64 cells")
                         ("h,help", "this help")
                         ("args", "config file and overrides", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"args"});
    std::vector<const char*> argv{"attnlab sweep"};
    for (const auto& a : args) argv.push_back(a.c_str());
    cxxopts::ParseResult parsed;
    try {
        parsed = options.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
        throw UsageError(std::string("--jobs: expected a positive integer (") + e.what() + ")");
    } catch (const cxxopts::exceptions::exception& e) {
        throw UsageError(e.what());
    }
    if (parsed.count("help")) {
        std::cout << options.help();
        return 0;
    }
    std::string config_path;
    std::vector<std::string> overrides;
    if (parsed.count("args")) split_config_and_overrides(parsed["args"].as<std::vector<std::string>>(), config_path, overrides);
    if (config_path.empty()) throw UsageError("give the sweep's CONFIG (a TOML file with a [sweep] table)");
    const int jobs = parsed["jobs"].as<int>();
    if (jobs < 1) throw UsageError("--jobs must be at least 1, got " + std::to_string(jobs));

    Config config = load_config(config_path, overrides);
    if (config.sweep.empty()) throw UsageError(config_path + ": no [sweep] table (train a single run with `attnlab train`)");
    // A sweep never shares the single runs' default folder (runs/default): without
    // a run.name it is named after its config file (configs/sweeps/x.toml: runs/x).
    if (!names_the_run(config_path, overrides)) {
        const std::string stem = std::filesystem::path(config_path).stem().string();
        if (stem.empty() || stem == "." || stem == "..")
            throw UsageError(config_path + ": give the sweep a run.name (its folder under run.out_dir)");
        config.run.name = stem;
    }
    SweepOptions sweep;
    sweep.config_path = config_path;
    sweep.overrides = overrides;
    sweep.jobs = static_cast<size_t>(jobs);
    sweep.force = parsed.count("force") > 0;
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    sweep.executable = n > 0 ? std::string(self, static_cast<size_t>(n)) : "attnlab";
    const SweepTable table = run_sweep(config, sweep);
    if (table.interrupted) {
        std::cerr << "attnlab sweep: " << interruption_line(table, shell_command(args)) << "\n";
        return 130;
    }
    std::cout << format_table(table, table.aggregated);
    size_t failed = 0;
    for (const auto& c : table.cells) failed += c.status != "ok";
    std::cout << table.cells.size() - failed << " of " << table.cells.size() << " cells ok; summary in "
              << config.run.out_dir << "/" << config.run.name << "/summary.csv\n";
    return failed ? 1 : 0;
}

}  // namespace attnlab
