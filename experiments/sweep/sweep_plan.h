// A sweep's plan (internal to experiments/sweep/): every cell's config and what
// to do with its folder, checked before anything is written (sweep_plan.cpp).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "experiments/files/run_files.h"
#include "experiments/sweep/sweep.h"

namespace attnlab::sweep_plan {

// What a cell's folder asks for: a new run, a leftover start removed first, a
// resume from its checkpoints, or nothing (it finished).
enum class Action { start, restart, resume, skip };

struct CellPlan {
    size_t index = 0;  // in the grid
    std::string name;
    Config config;
    Action action = Action::start;
    std::string seed_group;  // its assignments but run.seed's: the cells that differ only in their seeds share it
};

struct PreparedSweep {
    std::filesystem::path dir;
    std::vector<CellPlan> plan;  // every cell, or the one of --cell
    size_t jobs = 1;
};

// The grid's cells (their assignments), the grid checked: a [sweep] table,
// check_grid, at most options.max_cells unless options.force.
std::vector<std::vector<std::string>> checked_cells(const Config& config, const SweepOptions& options);

// The cells a process runs: every cell, cell K (--cell) or seed group K (--group).
struct Selection {
    enum class Kind { all, cell, group } kind = Kind::all;
    size_t index = 0;
};

// The plan's seed groups (the cells that share a seed_group), each its cells'
// places in `plan`, in grid order of their first cell.
std::vector<std::vector<size_t>> seed_groups(const std::vector<CellPlan>& plan);

// Everything a sweep checks before it writes anything: the grid, every cell's
// config (built as `attnlab train` builds it), that no other process runs the
// sweep or one of the selected cells, the sweep folder and those cells' folders.
// Reads only: `--slurm` stops here.
PreparedSweep plan_sweep(const Config& config, const SweepOptions& options, Selection only = {});

// plan_sweep, then the folder made and sweep.toml written; under `lock` when
// given (another sweep may have got there first: the folder is looked at again).
PreparedSweep prepare_sweep(const Config& config, const SweepOptions& options, std::optional<RunLock>* lock, Selection only = {});

// The grid against what the sweep sets itself (no axis over run.name, run.out_dir, train.threads; no override of a swept key).
void check_grid(const Config& config, const SweepOptions& options);
// Refuses a folder that is neither absent, empty, nor this sweep's own; sets each planned cell's action.
void inspect_sweep_folder(const std::filesystem::path& sweep_dir, const Config& config, std::vector<CellPlan>& plan);
// What cell folder `dir` asks for; refuses one that is no earlier run of the cell `cell`. Reads only.
Action inspect_cell(const std::filesystem::path& dir, const Config& cell);

// The lock of a cell: <sweep_dir>/cells/<index>.lock, held by the process that
// runs the cell from before it looks into the cell's folder until its trainer
// has ended (the trainer holds the folder's own .lock). The cell's folder may
// not exist yet, and a restart removes it: its own .lock cannot serve.
std::filesystem::path cell_lock_file(const std::filesystem::path& sweep_dir, const CellPlan& cell);

std::string join(const std::vector<std::string>& parts, const std::string& separator);
// At most `most` items, then "and N more".
std::string listed(const std::vector<std::string>& items, size_t most = 4, const std::string& separator = "; ");

}  // namespace attnlab::sweep_plan
