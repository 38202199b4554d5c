// How attnlab writes the files of a run so that nothing is ever half-written,
// overwritten by a second process, or lost:
//   - write_atomically (output_file.h): a temporary file of this process's own,
//     fsynced, renamed over the target, the folder fsynced (a crash leaves the
//     old file or the new one, never a mix);
//   - RunLock: one writer per run folder (flock on <dir>/.lock), a second one
//     refused with the holder's pid;
//   - claim_new_folder: a fresh folder name (name, name-2, ...) taken with an
//     exclusive mkdir, in a search that always ends.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "experiments/files/output_file.h"

namespace attnlab {

// An exclusive, advisory lock on a run (or sweep) folder, held until destruction
// or process exit (the kernel drops it on SIGKILL too). Every process that writes
// into the folder holds it; a second writer is refused at once with
// "<tag> <dir> is in use by another attnlab process (pid N); ...".
class RunLock {
public:
    RunLock(const std::filesystem::path& dir, const std::string& tag);  // <dir>/.lock
    // The lock of something whose folder may not exist yet (a sweep's cell): the
    // lock file `file`, and `what` (the folder) named in the refusal.
    RunLock(const std::filesystem::path& file, const std::string& what, const std::string& tag);
    ~RunLock();

    // Refuses, as the constructor would, when another process holds `file`; reads
    // only (a missing file is free), so a check that passes leaves no trace.
    static void check_free(const std::filesystem::path& file, const std::string& what, const std::string& tag);
    RunLock(RunLock&& other) noexcept;
    RunLock& operator=(RunLock&&) = delete;
    RunLock(const RunLock&) = delete;

private:
    int fd_ = -1;
};

// A folder given on the command line or in a file, as one path: lexically
// normal, a trailing separator dropped ("a/b/" and "a/./b" are a/b), so that its
// parent and its name are the folder's own (a run's --run-dir, export's --out,
// the runs file's folders).
std::filesystem::path folder_path(const std::string& given);

// Creates and returns parent/name, or parent/name-2, name-3, ... up to
// name-<kMaxNameSuffix> when taken (mkdir is exclusive, so two processes never
// share one); beyond that an Error naming parent and name.
constexpr int kMaxNameSuffix = 9999;
std::filesystem::path claim_new_folder(const std::filesystem::path& parent, const std::string& name,
                                       const std::string& tag);

// The longest file or folder name attnlab creates from a config (run.name, a
// sweep cell's name), leaving room under the filesystem's 255 bytes for the
// "-9999" suffix it may add (a temporary name beside it is cut to fit:
// output_file.h).
constexpr size_t kMaxFolderName = 240;

// The cell folder name for cell `index` of `count` with these assignments:
// "03_model.heads=4,run.seed=1" ('/', spaces, quotes, brackets and control
// characters as '_'). A name longer than kMaxFolderName is cut and ends in "~"
// and 16 hex digits of a hash of the assignments; the index keeps it unique and
// the cell's config.toml holds every value. A sweep's cells and train.seeds'
// members are named so.
std::string cell_name(size_t index, size_t count, const std::vector<std::string>& assignments);

// A swept value as shown in names and tables: "\"sqrt\"" -> "sqrt"; others as they are.
std::string unquote(const std::string& value);

}  // namespace attnlab
