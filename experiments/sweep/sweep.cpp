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
#include "experiments/run/runs_file.h"
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

// The jobs of a sweep: each cell alone, or (`together`) the cells whose
// configs differ only in run.seed as one job, in grid order of their first cell.
std::vector<std::vector<CellPlan>> jobs_of(const std::vector<CellPlan>& plan, bool together) {
    std::vector<std::vector<CellPlan>> jobs;
    if (!together) {
        for (const CellPlan& cell : plan) jobs.push_back({cell});
        return jobs;
    }
    for (const std::vector<size_t>& group : sweep_plan::seed_groups(plan)) {
        jobs.emplace_back();
        for (const size_t i : group) jobs.back().push_back(plan[i]);
    }
    return jobs;
}

// A job that runs: its cells, their locks (held until it ends), its log.
struct RunningJob {
    std::vector<std::string> cells;
    std::vector<RunLock> locks;
    fs::path log;
};

// The command that trains `cells` (claimed, none finished): `attnlab train` on one
// cell's config or --resume on its folder, or for several cells one `attnlab train
// --runs` (experiments/run/runs_file.h) that trains them side by side in `mode`,
// its output in logs/together_<first index>.log, which each cell's log names.
std::pair<std::string, std::vector<std::string>> job_command(const std::vector<CellPlan>& cells, const fs::path& sweep_dir,
                                                             const std::string& executable, const std::string& mode, fs::path& log) {
    std::vector<std::string> args{executable, "train"};
    std::vector<RunsFileEntry> runs;
    for (const CellPlan& cell : cells) {
        const fs::path dir = sweep_dir / cell.name;
        if (cell.action == Action::resume) {
            runs.push_back({"", "", dir.string()});
            continue;
        }
        const fs::path cell_config = sweep_dir / "cells" / (std::to_string(cell.index) + ".toml");
        write_text_atomically(cell_config, to_toml(cell.config), "[sweep]");
        runs.push_back({cell_config.string(), dir.string(), ""});
    }
    if (cells.size() == 1) {
        const RunsFileEntry& run = runs.front();
        if (!run.resume.empty()) args.insert(args.end(), {"--resume", run.resume});
        else args.insert(args.end(), {run.config, "--run-dir", run.dir});
        log = sweep_dir / "logs" / (cells.front().name + ".log");
        return {cells.front().name, args};
    }
    const std::string name = "together_" + std::to_string(cells.front().index);
    const fs::path runs_file = sweep_dir / "cells" / (name + ".toml");
    write_text_atomically(runs_file, runs_file_text(mode, runs), "[sweep]");
    log = sweep_dir / "logs" / (name + ".log");
    for (const CellPlan& cell : cells)
        std::ofstream(sweep_dir / "logs" / (cell.name + ".log"), std::ios::app)
            << "sweep: trained side by side with " << cells.size() - 1 << " other cells in one process (--seeds-together); its output: "
            << log.string() << "\n";
    args.insert(args.end(), {"--runs", runs_file.string()});
    return {name, args};
}

// The jobs to run (skipping the finished cells), at most `jobs` at a time, until
// all have ended or an interrupt stops the rest. A cell another process runs is
// refused: an Error with `one_cell` (--cell, where nothing else runs), else that
// cell's status while the others go on. With `together` ("threads" or "stacked")
// the cells that differ only in run.seed run as one process.
CellOutcomes run_cells(const std::vector<CellPlan>& plan, const fs::path& sweep_dir, const std::string& executable,
                       CellSlots& processes, bool one_cell, const std::string& together = "") {
    CellOutcomes outcomes;
    std::map<std::string, std::string>& outcome = outcomes.status;
    std::map<std::string, RunningJob> running;  // job name -> its cells
    auto report = [&](const CellProcesses::Ended& ended) {
        const RunningJob job = std::move(running.at(ended.name));
        running.erase(ended.name);
        const bool interrupted = processes.interrupted() && (ended.code == 130 || ended.code > 128);
        for (const std::string& name : job.cells) {  // a cell of a group may have finished before the group ended
            const bool finished = ended.code == 0 || (job.cells.size() > 1 && fs::exists(sweep_dir / name / "summary.json"));
            const bool stopped_now = !finished && interrupted;
            if (stopped_now) outcomes.stopped.push_back(name);
            std::string& status = outcome[name];
            status = finished ? "ok" : stopped_now ? "interrupted" : "failed (exit " + std::to_string(ended.code) + ")";
            std::cerr << "sweep: " << name << ": " << status << (!finished && !stopped_now ? ", see " + job.log.string() : "") << "\n";
        }
    };
    auto wait_one = [&] {
        if (const auto ended = processes.wait()) report(*ended);
    };
    for (const std::vector<CellPlan>& job : jobs_of(plan, !together.empty())) {
        std::vector<CellPlan> cells;
        for (const CellPlan& cell : job) {
            if (cell.action != Action::skip) cells.push_back(cell);
            else std::cerr << "sweep: " << cell.name << ": finished earlier, skipped\n";
        }
        if (cells.empty()) continue;
        while (!processes.free() && !processes.interrupted()) wait_one();
        processes.check_interrupt();
        if (processes.interrupted()) {
            outcomes.not_started += cells.size();
            continue;
        }
        RunningJob claimed;
        std::vector<CellPlan> to_run;
        for (CellPlan cell : cells) {
            try {
                claimed.locks.push_back(claim_cell(sweep_dir, cell));
            } catch (const std::exception& e) {  // taken, or its folder gone strange since the plan
                if (one_cell) throw;
                outcome[cell.name] = "refused";
                std::cerr << "sweep: " << cell.name << ": refused: " << e.what() << "\n";
                continue;
            }
            if (cell.action == Action::skip) {
                std::cerr << "sweep: " << cell.name << ": finished meanwhile, skipped\n";
                claimed.locks.pop_back();
                continue;
            }
            std::cerr << "sweep: " << cell.name << ": " << (cell.action == Action::resume ? "resuming" : "starting") << "\n";
            claimed.cells.push_back(cell.name);
            to_run.push_back(std::move(cell));
        }
        if (to_run.empty()) continue;
        const auto [name, args] = job_command(to_run, sweep_dir, executable, together, claimed.log);
        if (to_run.size() > 1)
            std::cerr << "sweep: " << to_run.size() << " cells side by side in one process (" << together << "), output in " << claimed.log.string() << "\n";
        processes.start(name, args, claimed.log);
        running.emplace(name, std::move(claimed));
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
        outcomes = run_cells(sweep.plan, sweep.dir, options.executable, slots, false, options.seeds_together);
    } catch (const std::exception& e) {
        if (world.size() == 1) throw;
        std::cerr << "attnlab sweep: " << e.what() << "; stopping every rank\n";  // they would wait for cells for ever
        world.abort(2);
    }
    return tabulate(config, sweep.dir, outcomes, processes.interrupted());
}

size_t count_cells(const Config& config, const SweepOptions& options) {
    const PreparedSweep sweep = sweep_plan::plan_sweep(config, options);
    return options.seeds_together.empty() ? sweep.plan.size() : sweep_plan::seed_groups(sweep.plan).size();
}

namespace {

// --cell K or --group K: those cells alone, under their own locks (run_cells).
// 0 when each ended ok or had finished (skipped), 130 after an interrupt, else 1.
int run_selected(const Config& config, const SweepOptions& options, sweep_plan::Selection only) {
    const PreparedSweep sweep = prepare_sweep(config, options, nullptr, only);
    CellProcesses processes;
    CellSlots slots(processes, single_world(), 1);
    const CellOutcomes outcomes = run_cells(sweep.plan, sweep.dir, options.executable, slots, true, options.seeds_together);
    if (processes.interrupted()) return 130;
    for (const CellPlan& cell : sweep.plan) {
        const auto status = outcomes.status.find(cell.name);
        if (status != outcomes.status.end() && status->second != "ok") return 1;
    }
    return 0;
}

}  // namespace

int run_sweep_cell(const Config& config, const SweepOptions& options, size_t index) {
    return run_selected(config, options, {sweep_plan::Selection::Kind::cell, index});
}

int run_sweep_group(const Config& config, const SweepOptions& options, size_t index) {
    return run_selected(config, options, {sweep_plan::Selection::Kind::group, index});
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
