// The child `attnlab train` processes of a sweep. Each is started so that it
// dies with the sweep (PR_SET_PDEATHSIG: SIGTERM, which makes it checkpoint and
// exit), and waiting for them also watches for SIGINT/SIGTERM: an interrupt is
// forwarded to every running cell, a second one (or kStopGrace seconds without
// an exit) kills them, so a sweep never waits forever.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attnlab {

class CellProcesses {
public:
    static constexpr std::chrono::seconds kStopGrace{120};

    CellProcesses();   // catches SIGINT and SIGTERM from now on (see wait)
    ~CellProcesses();  // kills and reaps what still runs, restores the signal handlers
    CellProcesses(const CellProcesses&) = delete;
    CellProcesses& operator=(const CellProcesses&) = delete;

    // Starts `args` (args[0] the executable) with stdout and stderr appended to `log`,
    // in this process's environment without an MPI launcher's variables (OMPI_*,
    // PMIX_*, PMI_*): a cell of a sweep under mpirun is a process of its own.
    void start(const std::string& name, const std::vector<std::string>& args, const std::filesystem::path& log);

    struct Ended {
        std::string name;
        int code = 0;  // exit status, or 128 + the signal that ended it
    };
    // The next cell to end; nullopt when none runs or an interrupt arrived
    // (forwarded already; call again to wait for the cells it stopped), or when
    // `patience` passed without either.
    std::optional<Ended> wait(std::chrono::milliseconds patience = std::chrono::milliseconds::max());

    // Takes the interrupts that arrived since the last call, without waiting.
    void check_interrupt() { take_signals(0); }

    size_t running() const { return running_.size(); }
    int interrupted() const { return interrupted_; }  // the first SIGINT/SIGTERM received, 0 if none

private:
    void forward(int signal);
    bool take_signals(int timeout_ms);  // true when an interrupt arrived
    std::map<pid_t, std::string> running_;
    int interrupted_ = 0;
    int interrupts_ = 0;
    bool killed_ = false;
    std::chrono::steady_clock::time_point interrupted_at_;
};

}  // namespace attnlab
