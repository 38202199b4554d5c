// `attnlab sweep`: the [sweep] grid of a config, each cell an ordinary run in
// out_dir/<run.name>/<index>_<key=value,...>/, run as child `attnlab train`
// processes (a failing cell cannot take the others down), then one table.
//
// The sweep folder is known by its sweep.toml (the sweep's resolved config). A
// rerun continues it only when the grid and the base config are the same; any
// other folder (a single run, another sweep, foreign files) is refused, as is a
// bad grid or a cell that training would refuse, all before anything is written.
// The sweep holds the folder's RunLock while it runs, and each cell's lock
// (sweep_plan.h: cell_lock_file) while it runs that cell; SIGINT/SIGTERM are
// passed on to the running cells, which checkpoint, and a rerun resumes them.
//
//   summary.csv / summary.h5   one row per cell: the swept values, final eval
//                              loss and accuracies, the first eval step at the
//                              target accuracy, mean entropy and normalised
//                              entropy per attention kind and layer (last log
//                              row, averaged over heads), the largest masked
//                              mass seen, wall time, tokens/s, status; then one
//                              row per combination of the other swept keys,
//                              aggregated over run.seed (mean and sample std).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "experiments/config/config.h"
#include "experiments/distributed/world.h"
#include "experiments/files/run_files.h"  // cell_name, unquote

namespace attnlab {

struct SweepOptions {
    size_t jobs = 1;            // cells at a time (on each rank); the cores are split between them
    size_t ranks_per_machine = 1;  // under mpirun: the ranks that share this machine's cores
    size_t max_cells = 64;      // a larger grid needs force
    bool force = false;
    std::string executable;     // the attnlab binary that runs cells
    std::string config_path;    // for messages: where the grid comes from
    std::vector<std::string> overrides;  // the command line's key=value (none may name a swept key)
    // The config file or an override sets train.threads: every cell runs with it.
    // Otherwise each cell gets the cores split between the cells that run at once.
    bool threads_given = false;
    // --seeds-together: the cells whose configs differ only in run.seed run as one job,
    // one `attnlab train --runs` process training them side by side, in this mode
    // ("threads" or "stacked", as train.seeds_mode); "": every cell a process of its own.
    std::string seeds_together;
};

struct CellResult {
    std::string name;                         // "03_model.heads=4,run.seed=1"
    std::vector<std::string> values;          // one per swept key, as given (strings unquoted)
    std::string status;                       // "ok" | "failed (exit N)" | ...
    std::map<std::string, double> numbers;    // column -> value (NaN when missing)
};

struct SweepTable {
    std::vector<std::string> keys;            // swept keys, in [sweep] order
    std::vector<std::string> columns;         // numeric columns, in a fixed order
    std::vector<CellResult> cells;
    std::vector<CellResult> aggregated;       // over run.seed; "values" has "*" for run.seed
    int interrupted = 0;                      // SIGINT or SIGTERM when the sweep was interrupted, else 0
    std::vector<std::string> stopped;         // the cells the interrupt stopped
    size_t not_started = 0;                   // the cells it kept from starting
};

// Runs (or skips, or resumes) every cell, writes summary.csv and summary.h5, and
// returns the table. Refuses bad grids before any cell starts.
// Under mpirun (`world` of N ranks) rank 0 calls this and the cells run on every
// rank (experiments/sweep/sweep_ranks.h); every other rank calls serve_cells.
SweepTable run_sweep(const Config& config, const SweepOptions& options, const World& world = single_world());

// The grid's cell count, with everything checked that run_sweep checks before it
// writes (the grid, every cell's config, the sweep folder and the cells' folders,
// no other process running them); writes nothing. For `--slurm`.
size_t count_cells(const Config& config, const SweepOptions& options);  // with seeds_together: the seed groups
// `--cell K`: runs (or resumes, or skips when finished) cell K alone, as one
// array task of a Slurm job does; several may run at once, each cell under its
// own lock (a second process for the same cell is refused, an Error, before it
// writes anything). Its exit status: 0 ok, 1 failed, 130 interrupted.
int run_sweep_cell(const Config& config, const SweepOptions& options, size_t index);
// `--group K` (with --seeds-together): the K-th group of cells that differ only in
// run.seed (in grid order of their first cell), side by side in one process, as an
// array task of `--slurm --seeds-together` runs it; as --cell otherwise.
int run_sweep_group(const Config& config, const SweepOptions& options, size_t index);
// `--summarize`: the table of whatever cells have finished (the others with
// their status), written as summary.csv and summary.h5.
SweepTable summarize_sweep(const Config& config, const SweepOptions& options);

// The one line for an interrupted sweep: the signal, the cells it stopped, how
// to resume (`command`: the sweep's command line).
std::string interruption_line(const SweepTable& table, const std::string& command);

// Reads a finished or partial sweep folder's cells back into a table (used by
// run_sweep and by tests).
SweepTable collect_sweep(const Config& config, const std::string& sweep_dir);

// The numbers of a cell's summary.json (null as NaN). A garbled file is an Error
// naming the file, the line and the key.
std::map<std::string, double> read_summary_numbers(const std::string& path);

void write_summary_csv(const SweepTable& table, const std::string& path);
void write_summary_h5(const SweepTable& table, const std::string& path);

// Mean and sample standard deviation of the cells that share every swept value
// but run.seed (the cells themselves when the grid has no run.seed axis).
std::vector<CellResult> aggregate_over_seeds(const SweepTable& table);

std::string format_table(const SweepTable& table, const std::vector<CellResult>& rows);

}  // namespace attnlab
