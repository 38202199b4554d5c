// Temporaries in flight (output_file.h's <name>.<pid>.<random>.tmp files, and
// export's temporary folder), removed when a signal ends the process, so that
// SIGTERM during a long write (a cache of many batches) leaves nothing behind.
// Commands that handle signals themselves (train, sweep) replace these handlers
// with their own, which finish the write.
#pragma once

#include <string>

namespace attnlab {

// Registers `path` for removal by the signal handlers while this lives: a file,
// or a folder of files (its files are removed, then the folder; files first).
class InFlight {
public:
    enum class Kind { file, folder };
    explicit InFlight(const std::string& path, Kind kind = Kind::file);
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

private:
    int slot_ = -1;  // -1: no free slot (the path is then only removed on a normal exit)
};

// Installs handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT that remove every
// registered temporary and then end the process by the same signal.
void remove_temporaries_on_signals();

}  // namespace attnlab
