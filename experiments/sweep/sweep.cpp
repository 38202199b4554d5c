// run_sweep: the sweep planned and checked (experiments/sweep/sweep_plan.h),
// then the cells run as child processes, here and on the other ranks under
// mpirun (experiments/sweep/sweep_ranks.h), and the table written
// (experiments/sweep/sweep_table.cpp); one cell alone (--cell); the table of
// whatever has finished (--summarize).
#include "experiments/sweep/sweep.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "experiments/files/checkpoint.h"
#include "experiments/run/trainer.h"
#include "experiments/files/run_files.h"
#include "experiments/sweep/sweep_process.h"
#include "experiments/sweep/sweep_plan.h"
#include "experiments/sweep/sweep_ranks.h"

namespace fs = std::filesystem;

namespace attnlab {

using sweep_plan::Action;
using sweep_plan::CellPlan;
using sweep_plan::cell_lock_file;
using sweep_plan::check_grid;
using sweep_plan::inspect_cell;
using sweep_plan::inspect_sweep_folder;
using sweep_plan::join;
using sweep_plan::listed;
using sweep_plan::prepare_sweep;
using sweep_plan::PreparedSweep;

namespace {

const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace

namespace {

// How the cells ended: each one's status ("ok", "interrupted", "failed (exit
// N)", "refused"), those an interrupt stopped, and how many never started.
struct CellOutcomes {
    std::map<std::string, std::string> status;
    std::vector<std::string> stopped;
    size_t not_started = 0;
};

// A resumed cell runs at this sweep's thread count: its config.toml is given it
// (a key `train --resume` lets change, and records in resumes.log).
void give_threads(const fs::path& dir, int64_t threads) {
    Config config = load_config((dir / "config.toml").string());
    if (config.train.threads == threads) return;
    config.train.threads = threads;
    write_text_atomically(dir / "config.toml", to_toml(config), "[sweep]");
}

// Takes the cell's lock, returned to be held until its trainer ends, then looks
// at its folder again (another process may have run it since it was planned):
// the leftovers of a start that never checkpointed are removed, a resumed cell's
// config.toml gets the cell's threads. The folder's own lock is held meanwhile,
// so that no trainer started by hand runs in it; it is let go for the cell's
// trainer to take. An Error (nothing written) when another process holds either.
RunLock claim_cell(const fs::path& sweep_dir, CellPlan& cell) {
    const fs::path dir = sweep_dir / cell.name;
    RunLock lock(cell_lock_file(sweep_dir, cell), dir.string(), "[sweep]");
    std::error_code ec;
    std::optional<RunLock> folder;
    if (fs::is_directory(fs::symlink_status(dir, ec))) folder.emplace(dir, "[sweep]");
    cell.action = inspect_cell(dir, cell.config);
    if (cell.action == Action::restart) fs::remove_all(dir);  // nothing in it to keep (inspect_cell)
    if (cell.action == Action::resume) give_threads(dir, cell.config.train.threads);
    return lock;
}

// The cells to run (skipping the finished ones), at most `jobs` at a time, until
// all have ended or an interrupt stops the rest. A cell another process runs is
// refused: an Error with `one_cell` (--cell, where nothing else runs), else that
// cell's status while the others go on.
CellOutcomes run_cells(const std::vector<CellPlan>& plan, const fs::path& sweep_dir, const std::string& executable,
                       CellSlots& processes, bool one_cell) {
    CellOutcomes outcomes;
    std::map<std::string, std::string>& outcome = outcomes.status;
    std::vector<std::string>& stopped = outcomes.stopped;
    std::map<std::string, RunLock> locks;  // of the cells running
    auto report = [&](const CellProcesses::Ended& ended) {
        locks.erase(ended.name);
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
    for (CellPlan cell : plan) {
        const fs::path dir = sweep_dir / cell.name;
        if (cell.action == Action::skip) {
            std::cerr << "sweep: " << cell.name << ": finished earlier, skipped\n";
            continue;
        }
        while (!processes.free() && !processes.interrupted()) wait_one();
        processes.check_interrupt();
        if (processes.interrupted()) {
            ++outcomes.not_started;
            continue;
        }
        std::optional<RunLock> lock;
        try {
            lock.emplace(claim_cell(sweep_dir, cell));
        } catch (const std::exception& e) {  // taken, or its folder gone strange since the plan
            if (one_cell) throw;
            outcome[cell.name] = "refused";
            std::cerr << "sweep: " << cell.name << ": refused: " << e.what() << "\n";
            continue;
        }
        if (cell.action == Action::skip) {
            std::cerr << "sweep: " << cell.name << ": finished meanwhile, skipped\n";
            continue;
        }
        std::vector<std::string> args{executable, "train"};
        if (cell.action == Action::resume) {
            args.insert(args.end(), {"--resume", dir.string()});
        } else {
            const fs::path cell_config = sweep_dir / "cells" / (std::to_string(cell.index) + ".toml");
            write_text_atomically(cell_config, to_toml(cell.config), "[sweep]");
            args.insert(args.end(), {cell_config.string(), "--run-dir", dir.string()});
        }
        std::cerr << "sweep: " << cell.name << ": " << (cell.action == Action::resume ? "resuming" : "starting") << "\n";
        processes.start(cell.name, args, sweep_dir / "logs" / (cell.name + ".log"));
        locks.emplace(cell.name, std::move(*lock));
    }
    while (processes.running() > 0) wait_one();
    return outcomes;
}

// The table of every cell (each run's summary, the status of those that did not
// finish here), the seed aggregates, written as summary.csv and summary.h5.
SweepTable tabulate(const Config& config, const fs::path& sweep_dir, const CellOutcomes& outcomes, int interrupted) {
    SweepTable table = collect_sweep(config, sweep_dir.string());
    for (CellResult& c : table.cells) {
        const auto status = outcomes.status.find(c.name);
        if (status != outcomes.status.end() && status->second != "ok") c.status = status->second;
    }
    table.aggregated = aggregate_over_seeds(table);
    table.interrupted = interrupted;
    table.stopped = outcomes.stopped;
    table.not_started = outcomes.not_started;
    write_summary_csv(table, (sweep_dir / "summary.csv").string());
    write_summary_h5(table, (sweep_dir / "summary.h5").string());
    return table;
}

}  // namespace


SweepTable run_sweep(const Config& config, const SweepOptions& options, const World& world) {
    std::optional<RunLock> lock;  // held until the tables are written
    PreparedSweep sweep;
    std::exception_ptr failure;
    try {
        sweep = prepare_sweep(config, options, &lock);
    } catch (...) {
        failure = std::current_exception();
    }
    world.agree(failure);  // rethrows it here; the serving ranks stop (OtherRankFailed)
    CellProcesses processes;  // catches SIGINT and SIGTERM from here until the tables are written
    CellOutcomes outcomes;
    try {
        CellSlots slots(processes, world, sweep.jobs);  // the other ranks' too, under mpirun
        outcomes = run_cells(sweep.plan, sweep.dir, options.executable, slots, false);
    } catch (const std::exception& e) {
        if (world.size() == 1) throw;
        std::cerr << "attnlab sweep: " << e.what() << "; stopping every rank\n";  // they would wait for cells for ever
        world.abort(2);
    }
    return tabulate(config, sweep.dir, outcomes, processes.interrupted());
}

size_t count_cells(const Config& config, const SweepOptions& options) { return sweep_plan::plan_sweep(config, options).plan.size(); }

int run_sweep_cell(const Config& config, const SweepOptions& options, size_t index) {
    const PreparedSweep sweep = prepare_sweep(config, options, nullptr, index);  // the cell's own lock guards it (run_cells)
    CellProcesses processes;
    CellSlots slots(processes, single_world(), 1);
    const CellOutcomes outcomes = run_cells(sweep.plan, sweep.dir, options.executable, slots, true);
    if (processes.interrupted()) return 130;
    const auto status = outcomes.status.find(sweep.plan[0].name);
    return status == outcomes.status.end() || status->second == "ok" ? 0 : 1;  // a finished cell is skipped: ok
}

SweepTable summarize_sweep(const Config& config, const SweepOptions& options) {
    const fs::path dir = fs::path(config.run.out_dir) / config.run.name;
    if (!fs::exists(dir / "sweep.toml"))
        throw Error("[sweep] --summarize: " + dir.string() + " holds no sweep (no sweep.toml); run its cells first");
    check_grid(config, options);
    std::vector<CellPlan> none;
    inspect_sweep_folder(dir, config, none);  // the same grid and base config, or refused
    return tabulate(config, dir, CellOutcomes{}, 0);
}

std::string interruption_line(const SweepTable& table, const std::string& command) {
    std::string line = std::string("interrupted by ") + signal_name(table.interrupted) + ": ";
    if (!table.stopped.empty()) line += "stopped " + listed(table.stopped, 4) + " (each checkpoints as it stops)";
    else line += "no cell was running";
    if (table.not_started) line += ", " + std::to_string(table.not_started) + " not started";
    return line + "; rerun `" + command + "` to resume";
}

}  // namespace attnlab
