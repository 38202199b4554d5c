#include "experiments/sweep/slurm.h"

#include <sstream>

namespace attnlab {

std::string shell_word(const std::string& text) {
    const bool plain = !text.empty() && text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                               "0123456789_-./=,:+@%") == std::string::npos;
    if (plain) return text;
    std::string quoted = "'";
    for (char ch : text) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return quoted + "'";
}

std::string slurm_script(const SlurmArray& array) {
    const size_t per = array.cells_per_task < 1 ? 1 : array.cells_per_task;
    const size_t tasks = (array.cells + per - 1) / per;
    std::string command;
    for (const std::string& word : array.command) command += (command.empty() ? "" : " ") + shell_word(word);
    std::ostringstream s;
    const std::string& unit = array.unit;  // "cell", or "group": the cells of one seed group side by side
    s << "#!/bin/bash\n"
      << "# " << array.cells << " " << unit << "s, " << per << " per array task: task t runs " << unit << "s t*" << per << " to t*" << per
      << "+" << per - 1 << ", then tabulates\n"
      << "# whatever cells have finished (the last task to end leaves the whole table).\n"
      << "# Submit it with `sbatch FILE`; a " << unit << " uses the CPUs Slurm gives its task (--cpus-per-task).\n"
      << "#SBATCH --job-name=" << array.job_name << "\n"
      << "#SBATCH --array=0-" << (tasks ? tasks - 1 : 0) << "\n"
      << "#SBATCH --ntasks=1\n"
      << "#SBATCH --cpus-per-task=1\n"
      << "set -u\n"
      << "cd " << shell_word(array.directory) << " || exit 1\n"
      << "task=${SLURM_ARRAY_TASK_ID:?run this script with sbatch (or set SLURM_ARRAY_TASK_ID)}\n"
      << "status=0\n"
      << "for ((" << unit << " = task * " << per << "; " << unit << " < (task + 1) * " << per << " && " << unit << " < " << array.cells
      << "; " << unit << "++)); do\n"
      << "  " << command << " --" << unit << " \"$" << unit << "\" || status=1\n"
      << "done\n"
      << command << " --summarize || status=1\n"
      << "exit \"$status\"\n";
    return s.str();
}

}  // namespace attnlab
