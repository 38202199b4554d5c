// How attnlab writes the files of a run so that nothing is ever half-written,
// overwritten by a second process, or lost:
//   - write_atomically: a temporary file, fsynced, renamed over the target, the
//     folder fsynced (a crash leaves the old file or the new one, never a mix);
//   - RunLock: one writer per run folder (flock on <dir>/.lock), a second one
//     refused with the holder's pid;
//   - claim_new_folder: a fresh folder name (name, name-2, ...) taken with an
//     exclusive mkdir, in a search that always ends.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace attnlab {

// fsync of a file (or, with directory = true, of a folder, which makes a rename in it durable).
void fsync_path(const std::string& path, bool directory, const std::string& tag);

// Writes `path` through `path.tmp`: `write(tmp)` fills the temporary file, which
// is then fsynced and renamed over `path`; on any failure the temporary is removed
// and `path` is untouched. `tag` ("[train]") starts every error message. A
// leftover `path.tmp` of a crashed write is replaced. Writers::several: other
// processes may write the same file at the same time (the `sweep --cell` tasks
// of one Slurm array write sweep.toml and the summaries), so the temporary is
// this process's own, `path.<pid>.tmp`; the last rename wins, whole.
enum class Writers { one, several };
void write_atomically(const std::filesystem::path& path, const std::string& tag,
                      const std::function<void(const std::string& tmp)>& write, Writers writers = Writers::one);
void write_text_atomically(const std::filesystem::path& path, const std::string& text, const std::string& tag,
                           Writers writers = Writers::one);

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
// "-9999" and ".tmp" suffixes it may add (".<pid>.tmp" on the few files several
// processes write: a sweep's sweep.toml and summaries).
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
