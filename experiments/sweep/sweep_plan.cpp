// Planning a sweep: the grid against what the sweep sets, every cell's config
// built and checked, the sweep folder and each cell's folder recognised (start,
// restart, resume or skip), then the folder made. Reads only until then.
#include "experiments/sweep/sweep_plan.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "experiments/files/checkpoint.h"
#include "experiments/run/trainer.h"

namespace fs = std::filesystem;

namespace attnlab::sweep_plan {

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
    return out;
}

namespace {

// A temporary file of a write (output_file.h): <name>.<pid>.<random>.tmp.
bool is_temporary(const std::string& name) { return name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0; }

std::string values_of(const SweepAxis& axis) { return "[" + join(axis.values, ", ") + "]"; }

// "train.steps (90, was 60)" for each key whose value differs from `before` to
// `after` (differing_keys), `ignored` aside; then the same for the [sweep] axes,
// whose order counts too (it numbers the cells).
std::vector<std::string> differences(const Config& before, const Config& after, const std::set<std::string>& ignored) {
    std::vector<std::string> out = differing_keys(before, after, ignored);
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

}  // namespace

std::string listed(const std::vector<std::string>& items, size_t most, const std::string& separator) {
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
    const bool seeds_axis = std::any_of(config.sweep.begin(), config.sweep.end(), [](const SweepAxis& a) { return a.key == "train.seeds"; });
    if (!config.train.seeds.empty() || seeds_axis)
        throw Error(where + "train.seeds: a sweep's cells are single runs; sweep run.seed instead (\"run.seed\" = [0, 1, 2])");
    for (const SweepAxis& axis : config.sweep) {
        if (axis.key == "run.name" || axis.key == "run.out_dir")
            throw Error(where + "sweep key " + axis.key + ": the sweep names and places its cells itself (" + axis.key +
                        " sets the sweep's folder); sweep another key");
        if (axis.key == "train.threads")
            throw Error(where + "sweep key train.threads: a sweep's cells share one thread count (train.threads in the "
                                "config or an override, else the cores split between --jobs); sweep another key, or "
                                "time cells with `attnlab train`");
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

Action inspect_cell(const fs::path& dir, const Config& cell) {
    std::error_code ec;
    const fs::file_status status = fs::symlink_status(dir, ec);
    if (!fs::exists(status)) return Action::start;
    if (!fs::is_directory(status)) throw Error("[sweep] " + dir.string() + " exists and is not a folder; remove it");
    const bool has_config = fs::exists(dir / "config.toml");
    if (has_config) {
        // An earlier run of this cell must hold the same config (threads aside:
        // a rerun gives a resumed cell its own): otherwise skipping or resuming it
        // would tabulate another experiment's results.
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
               name == "tb" || is_temporary(name);  // tb: train.tensorboard's event files
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

fs::path cell_lock_file(const fs::path& sweep_dir, const CellPlan& cell) {
    return sweep_dir / "cells" / (std::to_string(cell.index) + ".lock");
}

// Whether out_dir/run.name is absent or empty (a new sweep) or this sweep's own
// folder (its sweep.toml has the same grid and base config); then each cell's
// action. Anything else is refused. Reads only.
void inspect_sweep_folder(const fs::path& sweep_dir, const Config& config, std::vector<CellPlan>& plan) {
    std::error_code ec;
    for (CellPlan& cell : plan) cell.action = Action::start;
    const fs::path out_dir = sweep_dir.parent_path();
    // The first part of out_dir that exists must be a folder: a file there would
    // only show when the folder is made.
    for (fs::path part = out_dir; !part.empty(); part = part.parent_path()) {
        const fs::file_status part_status = fs::status(part, ec);
        if (fs::exists(part_status)) {
            if (!fs::is_directory(part_status))
                throw Error("[sweep] run.out_dir " + out_dir.string() + ": " + part.string() +
                            " exists and is not a folder; choose another run.out_dir");
            break;
        }
        if (part == part.parent_path()) break;
    }
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
    for (const fs::directory_entry& entry : fs::directory_iterator(sweep_dir)) {
        const std::string name = entry.path().filename().string();
        // another process's sweep.toml on its way in (two `--cell` tasks starting at once)
        if (name != ".lock" && !is_temporary(name)) entries.push_back(name);
    }
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

namespace {

// Every cell's config, built and checked before anything is written: the grid's
// assignments on the base config (the command line's overrides in it), named and
// placed in sweep_dir (plan_sweep gives them their threads).
std::vector<CellPlan> plan_cells(const Config& config, const std::vector<std::vector<std::string>>& cells, const fs::path& sweep_dir) {
    std::vector<CellPlan> plan;
    for (size_t i = 0; i < cells.size(); ++i) {
        Config cell = config;
        cell.sweep.clear();
        for (const std::string& assignment : cells[i]) apply_override(cell, assignment);
        cell = without_unread_keys(cell);  // a key of the base that this cell does not read (validate checked that some cell does)
        cell.run.name = cell_name(i, cells.size(), cells[i]);
        cell.run.out_dir = sweep_dir.string();
        validate(cell);
        const std::string longest =  // a checkpoint's temporary name (output_file.h)
            (sweep_dir / cell.run.name / "checkpoints" / "step_0000000000.h5").string() + std::string(kTemporarySuffix, 'x');
        if (longest.size() >= PATH_MAX)
            throw Error("[sweep] " + (sweep_dir / cell.run.name).string().substr(0, 80) + "...: the paths of cell " +
                        std::to_string(i) + " would be longer than " + std::to_string(PATH_MAX) +
                        " bytes; choose a shorter run.out_dir");
        std::string group;
        for (const std::string& assignment : cells[i])
            if (assignment.rfind("run.seed=", 0) != 0) group += assignment + "\n";
        plan.push_back({i, cell.run.name, cell, Action::start, group});
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

}  // namespace

std::vector<std::vector<std::string>> checked_cells(const Config& config, const SweepOptions& options) {
    if (config.sweep.empty()) throw Error("[sweep] the config has no [sweep] table");
    check_grid(config, options);
    auto cells = sweep_cells(config);
    if (cells.size() > options.max_cells && !options.force)
        throw Error("[sweep] the grid has " + std::to_string(cells.size()) + " cells, more than the limit of " +
                    std::to_string(options.max_cells) + "; pass --force to run it");
    return cells;
}

namespace {

// Each cell's share of the cores: those this process may use (a Slurm task or a
// bound MPI rank may have fewer than the machine) split between the cells that
// run at once on this machine.
int64_t threads_per_cell(size_t jobs, size_t ranks_per_machine) {
    long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) cores = std::max(1, CPU_COUNT(&allowed));
    return std::max<int64_t>(1, cores / static_cast<long>(jobs * std::max<size_t>(1, ranks_per_machine)));
}

// Another process running the sweep (its folder's lock), or one of the planned
// cells (the cell's lock, or its folder's, held by a trainer started by hand):
// refused before anything looks into their folders.
void check_not_running(const fs::path& sweep_dir, const std::vector<CellPlan>& plan) {
    RunLock::check_free(sweep_dir / ".lock", sweep_dir.string(), "[sweep]");
    for (const CellPlan& cell : plan) {
        const fs::path dir = sweep_dir / cell.name;
        RunLock::check_free(cell_lock_file(sweep_dir, cell), dir.string(), "[sweep]");
        RunLock::check_free(dir / ".lock", dir.string(), "[sweep]");
    }
}

}  // namespace

std::vector<std::vector<size_t>> seed_groups(const std::vector<CellPlan>& plan) {
    std::vector<std::vector<size_t>> groups;
    std::map<std::string, size_t> group_of;
    for (size_t i = 0; i < plan.size(); ++i) {
        const auto [at, added] = group_of.emplace(plan[i].seed_group, groups.size());
        if (added) groups.emplace_back();
        groups[at->second].push_back(i);
    }
    return groups;
}

PreparedSweep plan_sweep(const Config& config, const SweepOptions& options, Selection only) {
    const auto cells = checked_cells(config, options);
    if (only.kind == Selection::Kind::cell && only.index >= cells.size())
        throw Error("[sweep] --cell " + std::to_string(only.index) + ": the grid has cells 0 to " + std::to_string(cells.size() - 1));
    PreparedSweep out;
    out.jobs = std::max<size_t>(1, options.jobs);
    if (config.run.name.size() > kMaxFolderName)
        throw Error("[sweep] run.name is " + std::to_string(config.run.name.size()) + " bytes long, more than " +
                    std::to_string(kMaxFolderName) + "; choose a shorter one");
    out.dir = fs::path(config.run.out_dir) / config.run.name;
    out.plan = plan_cells(config, cells, out.dir);
    if (!options.threads_given) {  // the cores split between the jobs that can run at once
        size_t at_once = out.jobs;
        if (!options.seeds_together.empty()) at_once = std::min(at_once, seed_groups(out.plan).size());  // a job for each group
        const int64_t threads = threads_per_cell(at_once, options.ranks_per_machine);
        for (CellPlan& cell : out.plan) cell.config.train.threads = threads;
    }
    if (only.kind == Selection::Kind::cell) out.plan = {out.plan[only.index]};
    if (only.kind == Selection::Kind::group) {
        const auto groups = seed_groups(out.plan);
        if (only.index >= groups.size())
            throw Error("[sweep] --group " + std::to_string(only.index) + ": the grid has seed groups 0 to " + std::to_string(groups.size() - 1));
        std::vector<CellPlan> group;
        for (const size_t i : groups[only.index]) group.push_back(out.plan[i]);
        out.plan = std::move(group);
    }
    check_not_running(out.dir, out.plan);
    inspect_sweep_folder(out.dir, config, out.plan);
    check_cells_runnable(out.plan);
    return out;
}

PreparedSweep prepare_sweep(const Config& config, const SweepOptions& options, std::optional<RunLock>* lock, Selection only) {
    PreparedSweep out = plan_sweep(config, options, only);
    fs::create_directories(out.dir);
    if (lock) {
        lock->emplace(out.dir, "[sweep]");
        inspect_sweep_folder(out.dir, config, out.plan);
    }
    if (!fs::exists(out.dir / "sweep.toml"))  // the tasks of a Slurm array write the same text: the last rename wins, whole
        write_text_atomically(out.dir / "sweep.toml", to_toml(config), "[sweep]");
    fs::create_directories(out.dir / "cells");
    fs::create_directories(out.dir / "logs");
    return out;
}

}  // namespace attnlab::sweep_plan
