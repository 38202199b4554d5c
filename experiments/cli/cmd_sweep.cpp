// attnlab sweep CONFIG [key=value ...] [--jobs N] [--force] [--seeds-together[=stacked]] [--cell K | --group K | --summarize | --slurm [--cells-per-task C]]
// Under mpirun: the cells across the ranks (experiments/sweep/sweep_ranks.h).
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <set>

#include <toml++/toml.h>

#include "experiments/cli/command_line.h"
#include "experiments/distributed/world.h"
#include "experiments/sweep/slurm.h"
#include "experiments/sweep/sweep.h"
#include "experiments/sweep/sweep_ranks.h"

namespace attnlab {

namespace {

// The dotted keys a config document sets ("model.heads" however it is written:
// [model] heads, model.heads, "model.heads"), as the config reader walks them.
void keys_set(const toml::table& table, const std::string& prefix, std::set<std::string>& out) {
    for (auto&& [name, node] : table) {
        const std::string key = prefix + std::string(name.str());
        const toml::table* inner = node.as_table();
        if (inner && !inner->empty() && key != "sweep") keys_set(*inner, key + ".", out);
        else out.insert(key);
    }
}

// Whether the config file or an override sets `key`.
bool sets(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& key) {
    for (const std::string& o : overrides) {
        std::string name = o.substr(0, o.find('='));
        name.erase(0, name.find_first_not_of(" \t"));
        name.erase(name.find_last_not_of(" \t") + 1);
        if (name == key) return true;
    }
    std::set<std::string> keys;
    try {
        keys_set(toml::parse_file(config_path), "", keys);
    } catch (const toml::parse_error&) {
        return true;  // cannot happen: load_config read it
    }
    return keys.count(key) > 0;
}

// The command line again, for the message that tells how to resume.
std::string shell_command(const std::vector<std::string>& args) {
    std::string out = "attnlab sweep";
    for (const std::string& a : args) out += " " + shell_word(a);
    return out;
}

// The table, and the exit status of a sweep that ran its cells.
int report(const Config& config, const SweepTable& table, const std::vector<std::string>& args) {
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

// --cell K: one cell alone, as a Slurm array task runs it; --group K: one seed group.
int run_cell_mode(const Config& config, const SweepOptions& sweep, const cxxopts::ParseResult& parsed) {
    if (parsed.count("group"))
        return run_sweep_group(config, sweep, static_cast<size_t>(number_option<int64_t>(parsed, "group", 0, int64_t{1} << 40)));
    const int64_t cell = number_option<int64_t>(parsed, "cell", 0, int64_t{1} << 40);
    return run_sweep_cell(config, sweep, static_cast<size_t>(cell));
}

// --slurm: an sbatch script that runs the cells as a job array.
int slurm_mode(const Config& config, const SweepOptions& sweep, const cxxopts::ParseResult& parsed) {
    SlurmArray array;
    array.job_name = "attnlab-sweep-" + config.run.name;
    array.directory = std::filesystem::current_path().string();
    array.command = {sweep.executable, "sweep", std::filesystem::absolute(sweep.config_path).string()};
    array.command.insert(array.command.end(), sweep.overrides.begin(), sweep.overrides.end());
    if (sweep.force) array.command.push_back("--force");
    if (!sweep.seeds_together.empty()) {  // each array task a seed group (or several), side by side
        array.command.push_back("--seeds-together=" + sweep.seeds_together);
        array.unit = "group";
    }
    array.cells = count_cells(config, sweep);  // the grid and the folders checked as a sweep checks them
    array.cells_per_task = static_cast<size_t>(number_option<int64_t>(parsed, "cells-per-task", 1, int64_t{1} << 20));
    std::cout << slurm_script(array);
    return 0;
}

// The whole grid, on this process or across the ranks of mpirun.
int run_mode(const Config& config, const SweepOptions& sweep, const World& world, const std::vector<std::string>& args) {
    if (!world.root()) {  // under mpirun: rank 0 plans and hands out the cells
        world.agree(nullptr);  // rank 0's checks of the grid and the folder (OtherRankFailed when they failed)
        try {
            serve_cells(world, sweep.jobs);
        } catch (const std::exception& e) {  // rank 0 would wait for its cells for ever
            std::cerr << "attnlab sweep: rank " << world.rank() << ": " << e.what() << "; stopping every rank\n";
            world.abort(2);
        }
        return 0;
    }
    return report(config, run_sweep(config, sweep, world), args);
}

// The sweep's config: the file with the overrides, named after the file when
// nothing names it (a sweep never shares the single runs' runs/default).
Config sweep_config(const std::string& config_path, const std::vector<std::string>& overrides) {
    Config config = load_config(config_path, overrides);
    if (config.sweep.empty()) throw UsageError(config_path + ": no [sweep] table (train a single run with `attnlab train`)");
    if (!sets(config_path, overrides, "run.name")) {  // configs/sweeps/x.toml: runs/x
        const std::string stem = std::filesystem::path(config_path).stem().string();
        if (stem.empty() || stem == "." || stem == "..")
            throw UsageError(config_path + ": give the sweep a run.name (its folder under run.out_dir)");
        config.run.name = stem;
    }
    return config;
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& args, const World& world) {
    cxxopts::Options options("attnlab sweep", "Run every cell of a config's [sweep] grid and tabulate the results.");
    options.positional_help("CONFIG [key=value ...]");
    options.add_options()("jobs", "cells run at a time (the cores are split between them)", cxxopts::value<std::string>()->default_value("1"))
                         ("force", "run a grid larger than 64 cells")
                         ("seeds-together", "train the cells that differ only in run.seed side by side in one process each (one job), "
                                            "their members on threads or stacked (=stacked), as train.seeds does",
                          cxxopts::value<std::string>()->implicit_value("threads"))
                         ("cell", "run cell K alone (0-based, as a Slurm array task does)", cxxopts::value<std::string>())
                         ("group", "with --seeds-together: run seed group K alone (0-based, as a Slurm array task does)", cxxopts::value<std::string>())
                         ("summarize", "tabulate the cells that have finished")
                         ("slurm", "print an sbatch script that runs the cells as a Slurm job array")
                         ("cells-per-task", "with --slurm: cells each array task runs in turn", cxxopts::value<std::string>()->default_value("1"))
                         ("h,help", "this help")
                         ("args", "config file and overrides", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"args"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::cout << options.help();
        return 0;
    }
    std::string config_path;
    std::vector<std::string> overrides;
    if (parsed.count("args")) split_config_and_overrides(parsed["args"].as<std::vector<std::string>>(), config_path, overrides);
    if (config_path.empty()) throw UsageError("give the sweep's CONFIG (a TOML file with a [sweep] table)");
    const int jobs = number_option<int>(parsed, "jobs", 1, 4096);
    const int modes = static_cast<int>(parsed.count("cell") + parsed.count("group") + parsed.count("summarize") + parsed.count("slurm"));
    if (modes > 1) throw UsageError("--cell, --group, --summarize and --slurm each do one thing: give one of them");
    if (modes && world.size() > 1)
        throw UsageError("--cell, --group, --summarize and --slurm run as one process, not under mpirun (launched as " +
                         std::to_string(world.size()) + " ranks)");
    if (parsed.count("seeds-together")) {
        const std::string mode = parsed["seeds-together"].as<std::string>();
        if (mode != "threads" && mode != "stacked")
            throw UsageError("--seeds-together=" + mode + ": \"threads\" (the default) or \"stacked\", as train.seeds_mode");
        if (parsed.count("cell")) throw UsageError("--seeds-together runs groups of cells: not with --cell (a group alone: --group K)");
    }
    if (parsed.count("group") && !parsed.count("seeds-together"))
        throw UsageError("--group K runs a seed group of --seeds-together: give --seeds-together (or --cell K for one cell)");
    if (!parsed.count("slurm") && parsed["cells-per-task"].as<std::string>() != "1")
        throw UsageError("--cells-per-task goes with --slurm");
    const Config config = sweep_config(config_path, overrides);

    SweepOptions sweep;
    sweep.config_path = config_path;
    sweep.overrides = overrides;
    sweep.threads_given = sets(config_path, overrides, "train.threads");
    sweep.jobs = static_cast<size_t>(jobs);
    sweep.ranks_per_machine = world.size() > 1 ? static_cast<size_t>(launched_local_ranks()) : 1;  // for the threads per cell
    sweep.force = parsed.count("force") > 0;
    if (parsed.count("seeds-together")) sweep.seeds_together = parsed["seeds-together"].as<std::string>();
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    sweep.executable = n > 0 ? std::string(self, static_cast<size_t>(n)) : "attnlab";

    if (parsed.count("cell") || parsed.count("group")) return run_cell_mode(config, sweep, parsed);
    if (parsed.count("summarize")) return report(config, summarize_sweep(config, sweep), args);
    if (parsed.count("slurm")) return slurm_mode(config, sweep, parsed);
    return run_mode(config, sweep, world, args);
}

}  // namespace attnlab
