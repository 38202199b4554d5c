// `attnlab sweep`: the [sweep] grid of a config, each cell an ordinary run in
// out_dir/<run.name>/<index>_<key=value,...>/, run as child `attnlab train`
// processes (a failing cell cannot take the others down), then one table.
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

#include "experiments/config.h"

namespace attnlab {

struct SweepOptions {
    size_t jobs = 1;            // cells at a time; the cores are split between them
    size_t max_cells = 64;      // a larger grid needs force
    bool force = false;
    std::string executable;     // the attnlab binary that runs cells
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
};

// Runs (or skips, or resumes) every cell, writes summary.csv and summary.h5, and
// returns the table. Refuses bad grids before any cell starts.
SweepTable run_sweep(const Config& config, const SweepOptions& options);

// Reads a finished or partial sweep folder's cells back into a table (used by
// run_sweep and by tests).
SweepTable collect_sweep(const Config& config, const std::string& sweep_dir);

// The cell folder name for cell `index` of `count` with these assignments.
std::string cell_name(size_t index, size_t count, const std::vector<std::string>& assignments);

// Mean and sample standard deviation of the cells that share every swept value
// but run.seed (the cells themselves when the grid has no run.seed axis).
std::vector<CellResult> aggregate_over_seeds(const SweepTable& table);

std::string format_table(const SweepTable& table, const std::vector<CellResult>& rows);

}  // namespace attnlab
