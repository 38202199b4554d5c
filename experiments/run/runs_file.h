// The runs file of `attnlab train --runs FILE`: several runs trained side by side
// in one process (Trainer::train_runs). `attnlab sweep --seeds-together` writes
// one for each group of cells that differ only in run.seed. A TOML file:
//
//   mode = "threads"                  # or "stacked": as train.seeds_mode
//   [[run]]                           # a new run of this config, written exactly to dir
//   config = "runs/x/cells/3.toml"
//   dir = "runs/x/03_run.seed=0"
//   [[run]]                           # the run in this folder, resumed from its newest checkpoint
//   resume = "runs/x/04_run.seed=1"
//
// Paths are taken as on the command line (from the working directory).
#pragma once

#include <string>
#include <vector>

#include "experiments/run/trainer.h"

namespace attnlab {

// A run as the file lists it: `config` and `dir` for a new run, or `resume` alone.
struct RunsFileEntry {
    std::string config;
    std::string dir;
    std::string resume;
};

std::string runs_file_text(const std::string& mode, const std::vector<RunsFileEntry>& runs);

struct RunsFile {
    std::string mode = "threads";
    std::vector<Trainer::GroupRun> runs;  // each new run's config loaded and checked
};

// Reads and checks a runs file: a bad one is an Error in one line naming the file
// and, where there is one, the line and the key (a config's own errors name its file).
RunsFile read_runs_file(const std::string& path);

}  // namespace attnlab
