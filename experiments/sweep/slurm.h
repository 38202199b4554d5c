// `attnlab sweep CONFIG --slurm`: the sweep as a Slurm job array, printed as an
// sbatch script. Array task t runs cells t C .. t C + C - 1 one after the other
// (`attnlab sweep CONFIG --cell K`; C = --cells-per-task, for short cells), then
// tabulates whatever has finished (`--summarize`), so the last task to end
// leaves the whole table. With --seeds-together the units are seed groups
// (`--group K`), each trained side by side in its task. Every node must see the sweep folder, the binary and
// the config at the same paths.
#pragma once

#include <string>
#include <vector>

namespace attnlab {

struct SlurmArray {
    std::string job_name;             // "attnlab-sweep-<run.name>"
    std::string directory;            // where the tasks start (the submitting directory)
    std::vector<std::string> command;  // the sweep's command line: the binary, "sweep", CONFIG, overrides
    size_t cells = 0;                 // the units to run: cells, or seed groups
    size_t cells_per_task = 1;
    std::string unit = "cell";        // "group" (--seeds-together): each unit runs as `--group K`
};

std::string slurm_script(const SlurmArray& array);

// `text` as one word of a POSIX shell command (quoted when needed).
std::string shell_word(const std::string& text);

}  // namespace attnlab
