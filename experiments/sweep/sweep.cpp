// run_sweep: the grid checked, every cell planned and checked, the sweep folder
// recognised, then the cells run as child processes (experiments/sweep/sweep_process.h)
// and the table written (experiments/sweep/sweep_table.cpp).
#include "experiments/sweep/sweep.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "experiments/files/checkpoint.h"
#include "experiments/run/trainer.h"
#include "experiments/files/run_files.h"
#include "experiments/sweep/sweep_process.h"

namespace fs = std::filesystem;

namespace attnlab {

namespace {

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
    return out;
}

// FNV-1a, 64 bits: a stable hash for shortened cell names.
std::string hash_hex(const std::string& text) {
    uint64_t h = 1469598103934665603ULL;
    for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ULL;
    char out[17];
    std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
    return out;
}

std::string values_of(const SweepAxis& axis) { return "[" + join(axis.values, ", ") + "]"; }

// "train.steps (90, was 60)" for each key whose value differs from `before` to
// `after` (differing_keys), `ignored` aside; then the same for the [sweep] axes,
// whose order counts too (it numbers the cells).
std::vector<std::string> differences(const Config& before, const Config& after, const std::set<std::string>& ignored) {
    std::vector<std::string> out;
    for (const std::string& change : differing_keys(before, after))
        if (!ignored.count(change.substr(0, change.find(' ')))) out.push_back(change);
    auto find = [](const Config& c, const std::string& key) -> const SweepAxis* {
        for (const SweepAxis& axis : c.sweep)
            if (axis.key == key) return &axis;
        return nullptr;
    };
    for (const SweepAxis& axis : after.sweep) {
        const SweepAxis* was = find(before, axis.key);
        if (!was || was->values != axis.values)
            out.push_back("sweep." + axis.key + " (" + values_of(axis) + ", was " + (was ? values_of(*was) : "not swept") + ")");
    }
    for (const SweepAxis& axis : before.sweep)
        if (!find(after, axis.key)) out.push_back("sweep." + axis.key + " (not swept, was " + values_of(axis) + ")");
    std::vector<std::string> order_before, order_after;
    for (const SweepAxis& axis : before.sweep) order_before.push_back(axis.key);
    for (const SweepAxis& axis : after.sweep) order_after.push_back(axis.key);
    if (out.empty() && order_before != order_after)
        out.push_back("the order of the [sweep] axes (" + join(order_after, ", ") + ", was " + join(order_before, ", ") + ")");
    return out;
}

std::string listed(const std::vector<std::string>& items, size_t most = 4, const std::string& separator = "; ") {
    std::vector<std::string> shown(items.begin(), items.begin() + static_cast<long>(std::min(most, items.size())));
    std::string out = join(shown, separator);
    if (items.size() > most) out += separator + "and " + std::to_string(items.size() - most) + " more";
    return out;
}

// The grid against what the sweep sets itself: no axis over a key the sweep
// sets for every cell, no override of a swept key. (A key swept twice, or a
// value listed twice, is refused where the grid is read: read_sweep in config.cpp.)
void check_grid(const Config& config, const SweepOptions& options) {
    const std::string where = "[sweep] " + (options.config_path.empty() ? "" : options.config_path + ": ");
    for (const SweepAxis& axis : config.sweep) {
        if (axis.key == "run.name" || axis.key == "run.out_dir")
            throw Error(where + "sweep key " + axis.key + ": the sweep names and places its cells itself (" + axis.key +
                        " sets the sweep's folder); sweep another key");
        if (axis.key == "train.threads")
            throw Error(where + "sweep key train.threads: each cell's threads follow --jobs (the cores split between the "
                                "cells that run at once); sweep another key, or time cells with `attnlab train`");
        for (const std::string& assignment : options.overrides) {
            std::string key = assignment.substr(0, assignment.find('='));
            key.erase(0, key.find_first_not_of(" \t"));
            key.erase(key.find_last_not_of(" \t") + 1);
            if (key == axis.key)
                throw Error(where + "override " + assignment + " sets " + axis.key + ", which the [sweep] table sweeps over " +
                            values_of(axis) + " (every cell would replace it); change the table instead");
        }
    }
}

enum class Action { start, restart, resume, skip };

struct CellPlan {
    std::string name;
    Config config;
    Action action = Action::start;
};

// What a cell's folder holds, read only; refuses one that is no earlier run of this cell.
Action inspect_cell(const fs::path& dir, const Config& cell) {
    std::error_code ec;
    const fs::file_status status = fs::symlink_status(dir, ec);
    if (!fs::exists(status)) return Action::start;
    if (!fs::is_directory(status)) throw Error("[sweep] " + dir.string() + " exists and is not a folder; remove it");
    const bool has_config = fs::exists(dir / "config.toml");
    if (has_config) {
        // An earlier run of this cell must hold the same config (threads aside,
        // which follow --jobs): otherwise skipping or resuming it would tabulate
        // another experiment's results.
        Config earlier;
        try {
            earlier = load_config((dir / "config.toml").string());
        } catch (const Error& e) {
            throw Error("[sweep] " + dir.string() + " holds a config.toml that cannot be read (" + e.what() +
                        "); remove the folder to run the cell again");
        }
        std::set<std::string> ignored = {"run.name", "run.out_dir", "train.threads"};
        if (cell.model.max_len == 0) ignored.insert("model.max_len");  // the run writes the length it derived
        const auto diff = differences(earlier, cell, ignored);
        if (!diff.empty())
            throw Error("[sweep] " + dir.string() + " was run with another config: this cell has " + listed(diff) +
                        "; use another run.name, or remove the folder");
    }
    if (fs::exists(dir / "summary.json")) {
        if (!has_config) throw Error("[sweep] " + dir.string() + " has a summary.json but no config.toml: not a run of this sweep");
        (void)read_summary_numbers((dir / "summary.json").string());  // a garbled one is refused now, not at the end
        return Action::skip;
    }
    if (!list_checkpoints((dir / "checkpoints").string()).empty()) {
        if (!has_config) throw Error("[sweep] " + dir.string() + " has checkpoints but no config.toml: not a run of this sweep");
        return Action::resume;
    }
    // Started earlier but never checkpointed: what the trainer writes first can go.
    auto is_leftover = [](const fs::directory_entry& entry) {
        const std::string name = entry.path().filename().string();
        return name == "config.toml" || name == "metrics.h5" || name == ".lock" || name == "checkpoints" ||
               (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0);
    };
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
        bool ok = is_leftover(entry);
        if (ok && entry.path().filename() == "checkpoints") {
            ok = entry.is_directory();
            for (const fs::directory_entry& inner : fs::directory_iterator(entry.path(), ec))
                ok = ok && inner.path().extension() == ".tmp";  // a checkpoint the trainer never finished
        }
        if (!ok)
            throw Error("[sweep] " + dir.string() + " holds " + entry.path().filename().string() +
                        ", which no run of this cell writes; remove it (or the folder) to run the cell");
    }
    return Action::restart;
}

// Whether out_dir/run.name is absent or empty (a new sweep) or this sweep's own
// folder (its sweep.toml has the same grid and base config); then each cell's
// action. Anything else is refused. Reads only.
void inspect_sweep_folder(const fs::path& sweep_dir, const Config& config, std::vector<CellPlan>& plan) {
    std::error_code ec;
    for (CellPlan& cell : plan) cell.action = Action::start;
    const fs::path out_dir = sweep_dir.parent_path();
    for (const char* marker : {"config.toml", "sweep.toml"})
        if (fs::exists(out_dir / marker))
            throw Error("[sweep] run.out_dir " + out_dir.string() + " is itself a " +
                        (marker == std::string("config.toml") ? "run" : "sweep") + " folder (it has " + marker +
                        "); choose another run.out_dir");
    const fs::file_status status = fs::symlink_status(sweep_dir, ec);
    if (!fs::exists(status)) return;
    if (!fs::is_directory(status))
        throw Error("[sweep] " + sweep_dir.string() + " exists and is not a folder; choose another run.name");
    std::vector<std::string> entries;
    for (const fs::directory_entry& entry : fs::directory_iterator(sweep_dir))
        if (entry.path().filename() != ".lock") entries.push_back(entry.path().filename().string());
    if (entries.empty()) return;
    const fs::path saved_path = sweep_dir / "sweep.toml";
    if (!fs::exists(saved_path)) {
        const bool single_run = fs::exists(sweep_dir / "config.toml") || fs::exists(sweep_dir / "metrics.h5") ||
                                fs::exists(sweep_dir / "checkpoints");
        std::sort(entries.begin(), entries.end());
        throw Error("[sweep] " + sweep_dir.string() + (single_run ? " is a single run (it has " : " is not a sweep folder (it has ") +
                    listed(entries, 3, ", ") + ", but no sweep.toml); a sweep writes only into a folder of its own: choose another run.name");
    }
    Config saved;
    try {
        saved = load_config(saved_path.string());
    } catch (const Error& e) {
        throw Error("[sweep] " + saved_path.string() + " cannot be read, so " + sweep_dir.string() +
                    " cannot be continued (" + e.what() + "); choose another run.name, or remove the folder");
    }
    const auto diff = differences(saved, config, {"run.name", "run.out_dir", "train.threads"});
    if (!diff.empty())
        throw Error("[sweep] " + sweep_dir.string() + " holds another sweep: this one has " + listed(diff) +
                    " against its sweep.toml; choose another run.name, or remove the folder");
    for (CellPlan& cell : plan) cell.action = inspect_cell(sweep_dir / cell.name, cell.config);
}

const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace

std::string cell_name(size_t index, size_t count, const std::vector<std::string>& assignments) {
    const size_t digits = std::to_string(std::max<size_t>(count, 1) - 1).size();
    std::string name = std::to_string(index);
    name = std::string(digits > name.size() ? digits - name.size() : 0, '0') + name + "_";
    for (size_t i = 0; i < assignments.size(); ++i) {
        const size_t eq = assignments[i].find('=');
        name += (i ? "," : "") + assignments[i].substr(0, eq + 1) + unquote(assignments[i].substr(eq + 1));
    }
    for (char& ch : name)
        if (ch == '/' || ch == ' ' || ch == '"' || ch == '[' || ch == ']' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
            ch = '_';
    if (name.size() <= kMaxFolderName) return name;
    const std::string tail = "~" + hash_hex(join(assignments, "\n"));
    size_t keep = kMaxFolderName - tail.size();
    while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;  // not inside a UTF-8 character
    return name.substr(0, keep) + tail;
}

namespace {

// Every cell's config, built and checked before anything is written: the grid's
// assignments on the base config, `threads` each, named and placed in sweep_dir.
std::vector<CellPlan> plan_cells(const Config& config, const std::vector<std::vector<std::string>>& cells, int64_t threads,
                                 const fs::path& sweep_dir) {
    std::vector<CellPlan> plan;
    for (size_t i = 0; i < cells.size(); ++i) {
        Config cell = config;
        cell.sweep.clear();
        for (const std::string& assignment : cells[i]) apply_override(cell, assignment);
        cell.train.threads = threads;
        cell.run.name = cell_name(i, cells.size(), cells[i]);
        cell.run.out_dir = sweep_dir.string();
        validate(cell);
        const std::string longest = (sweep_dir / cell.run.name / "checkpoints" / "step_0000000000.h5.tmp").string();
        if (longest.size() >= PATH_MAX)
            throw Error("[sweep] " + (sweep_dir / cell.run.name).string().substr(0, 80) + "...: the paths of cell " +
                        std::to_string(i) + " would be longer than " + std::to_string(PATH_MAX) +
                        " bytes; choose a shorter run.out_dir");
        plan.push_back({cell.run.name, cell});
    }
    return plan;
}

// What `attnlab train` would refuse (a missing token file, ...) is refused now.
void check_cells_runnable(const std::vector<CellPlan>& plan) {
    for (const CellPlan& cell : plan) {
        if (cell.action == Action::skip) continue;
        try {
            Trainer::check_runnable(cell.config);
        } catch (const Error& e) {
            throw Error("[sweep] cell " + cell.name + ": " + e.what());
        }
    }
}

// How the cells ended: each one's status ("ok", "interrupted", "failed (exit
// N)"), those an interrupt stopped, and how many never started.
struct CellOutcomes {
    std::map<std::string, std::string> status;
    std::vector<std::string> stopped;
    size_t not_started = 0;
};

// The cells to run (skipping the finished ones), at most `jobs` at a time, until
// all have ended or an interrupt stops the rest.
CellOutcomes run_cells(const std::vector<CellPlan>& plan, const fs::path& sweep_dir, const std::string& executable,
                       size_t jobs, CellProcesses& processes) {
    CellOutcomes outcomes;
    std::map<std::string, std::string>& outcome = outcomes.status;
    std::vector<std::string>& stopped = outcomes.stopped;
    auto report = [&](const CellProcesses::Ended& ended) {
        const bool stopped_now = processes.interrupted() && (ended.code == 130 || ended.code > 128);
        if (stopped_now) stopped.push_back(ended.name);
        std::string& status = outcome[ended.name];
        status = ended.code == 0 ? "ok" : stopped_now ? "interrupted" : "failed (exit " + std::to_string(ended.code) + ")";
        std::cerr << "sweep: " << ended.name << ": " << status
                  << (ended.code && !stopped_now ? ", see " + (sweep_dir / "logs" / (ended.name + ".log")).string() : "") << "\n";
    };
    auto wait_one = [&] {
        if (const auto ended = processes.wait()) report(*ended);
    };
    for (size_t i = 0; i < plan.size(); ++i) {
        const CellPlan& cell = plan[i];
        const fs::path dir = sweep_dir / cell.name;
        if (cell.action == Action::skip) {
            std::cerr << "sweep: " << cell.name << ": finished earlier, skipped\n";
            continue;
        }
        while (processes.running() >= jobs && !processes.interrupted()) wait_one();
        processes.check_interrupt();
        if (processes.interrupted()) {
            ++outcomes.not_started;
            continue;
        }
        std::vector<std::string> args{executable, "train"};
        if (cell.action == Action::resume) {
            args.insert(args.end(), {"--resume", dir.string()});
        } else {
            if (cell.action == Action::restart) fs::remove_all(dir);  // nothing in it to keep (inspect_cell)
            const fs::path cell_config = sweep_dir / "cells" / (std::to_string(i) + ".toml");
            write_text_atomically(cell_config, to_toml(cell.config), "[sweep]");
            args.insert(args.end(), {cell_config.string(), "--run-dir", dir.string()});
        }
        std::cerr << "sweep: " << cell.name << ": " << (cell.action == Action::resume ? "resuming" : "starting") << "\n";
        processes.start(cell.name, args, sweep_dir / "logs" / (cell.name + ".log"));
    }
    while (processes.running() > 0) wait_one();
    return outcomes;
}

// The table of every cell (each run's summary, the status of those that did not
// finish here), the seed aggregates, written as summary.csv and summary.h5.
SweepTable tabulate(const Config& config, const fs::path& sweep_dir, const CellOutcomes& outcomes,
                    const CellProcesses& processes) {
    SweepTable table = collect_sweep(config, sweep_dir.string());
    for (CellResult& c : table.cells) {
        const auto status = outcomes.status.find(c.name);
        if (status != outcomes.status.end() && status->second != "ok") c.status = status->second;
    }
    table.aggregated = aggregate_over_seeds(table);
    table.interrupted = processes.interrupted();
    table.stopped = outcomes.stopped;
    table.not_started = outcomes.not_started;
    write_summary_csv(table, (sweep_dir / "summary.csv").string());
    write_summary_h5(table, (sweep_dir / "summary.h5").string());
    return table;
}

}  // namespace

SweepTable run_sweep(const Config& config, const SweepOptions& options) {
    if (config.sweep.empty()) throw Error("[sweep] the config has no [sweep] table");
    check_grid(config, options);
    const auto cells = sweep_cells(config);
    if (cells.size() > options.max_cells && !options.force)
        throw Error("[sweep] the grid has " + std::to_string(cells.size()) + " cells, more than the limit of " +
                    std::to_string(options.max_cells) + "; pass --force to run it");
    const size_t jobs = std::max<size_t>(1, options.jobs);
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    const int64_t threads = std::max<int64_t>(1, cores / static_cast<long>(jobs));

    // Every cell's config is built and checked before anything is written.
    if (config.run.name.size() > kMaxFolderName)
        throw Error("[sweep] run.name is " + std::to_string(config.run.name.size()) + " bytes long, more than " +
                    std::to_string(kMaxFolderName) + "; choose a shorter one");
    const fs::path sweep_dir = fs::path(config.run.out_dir) / config.run.name;
    std::vector<CellPlan> plan = plan_cells(config, cells, threads, sweep_dir);
    inspect_sweep_folder(sweep_dir, config, plan);
    check_cells_runnable(plan);

    // From here on the sweep writes, holding the folder's lock; the folder is
    // looked at again under it (another sweep may have got there first).
    fs::create_directories(sweep_dir);
    const RunLock lock(sweep_dir, "[sweep]");
    inspect_sweep_folder(sweep_dir, config, plan);
    if (!fs::exists(sweep_dir / "sweep.toml")) write_text_atomically(sweep_dir / "sweep.toml", to_toml(config), "[sweep]");
    fs::create_directories(sweep_dir / "cells");
    fs::create_directories(sweep_dir / "logs");

    CellProcesses processes;  // catches SIGINT and SIGTERM from here until the tables are written
    const CellOutcomes outcomes = run_cells(plan, sweep_dir, options.executable, jobs, processes);
    return tabulate(config, sweep_dir, outcomes, processes);
}

std::string interruption_line(const SweepTable& table, const std::string& command) {
    std::string line = std::string("interrupted by ") + signal_name(table.interrupted) + ": ";
    if (!table.stopped.empty()) line += "stopped " + listed(table.stopped, 4) + " (each checkpoints as it stops)";
    else line += "no cell was running";
    if (table.not_started) line += ", " + std::to_string(table.not_started) + " not started";
    return line + "; rerun `" + command + "` to resume";
}

}  // namespace attnlab
