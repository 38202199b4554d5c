// Where a sweep's cells run: child processes of this process and, under
// `mpirun -np N attnlab sweep`, of the other ranks. Rank 0 plans, writes and
// tabulates the sweep; it hands each cell to a rank with a free slot (its own
// first), by an MPI message holding the cell's command line, and hears back its
// exit status when it ends. Every other rank serves: it starts the cells it is
// given (at most `jobs` at a time) and reports their ends, until rank 0 says stop.
// The cell folders must be on a filesystem every rank sees at the same path.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "experiments/distributed/world.h"
#include "experiments/sweep/sweep_process.h"

namespace attnlab {

class CellSlots {
public:
    // `jobs` cells at a time on each rank.
    CellSlots(CellProcesses& processes, const World& world, size_t jobs);
    ~CellSlots();  // tells every serving rank to stop

    bool free() const;  // a slot on some rank
    // Runs `args` on a rank with a free slot (this one first), its output appended to `log`.
    void start(const std::string& name, const std::vector<std::string>& args, const std::filesystem::path& log);
    // The next cell to end, on any rank; nullopt when none runs or an interrupt arrived here.
    std::optional<CellProcesses::Ended> wait();
    size_t running() const { return processes_.running() + remote_.size(); }
    int interrupted() const { return processes_.interrupted(); }
    void check_interrupt() { processes_.check_interrupt(); }

private:
    CellProcesses& processes_;
    const World& world_;
    size_t jobs_;
    std::map<int, size_t> busy_;           // rank -> cells it runs
    std::map<int64_t, std::string> remote_;  // ticket -> cell name, for the cells on other ranks
    int64_t next_ticket_ = 0;
};

// A rank other than 0: runs the cells rank 0 sends until it says stop.
void serve_cells(const World& world, size_t jobs);

}  // namespace attnlab
