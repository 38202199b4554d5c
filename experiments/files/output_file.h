// How every file attnlab writes comes into being, so that nothing is ever
// half-written and no writer silently replaces another's file:
//   1. it is written whole under a temporary name of this process's own beside
//      it, <name>.<pid>.<random>.tmp (removed on failure, and by the signal
//      handlers of temp_files.h), and fsynced;
//   2. one rename gives it its name, replacing only what `Existing` allows (a
//      rename that must not replace is renameat2's RENAME_NOREPLACE, or link(2)
//      where the filesystem lacks it: atomic either way), then the folder is fsynced.
// A command's result (--out, a default name, import's checkpoint, export's
// folder) replaces at most the file it saw and was asked to replace; a run or
// sweep folder's own files are replaced under the folder's lock (run_files.h),
// whose holder is their only writer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace attnlab {

// What the final rename may do with a file already at the output's name.
enum class Existing {
    refuse,        // a new file: one that appeared meanwhile (another writer's) is kept, and this write refused
    replace_seen,  // the file seen when the output was checked (`seen`: an --out naming this command's own file), or none; any other refused
    number,        // nothing is replaced: the first free of NAME, NAME-2, ... NAME-9999 (before the extension), as train names runs
    replace,       // whatever is there: a run or sweep folder's files, under its lock (or, for the sweep's tables, the same rows from every writer)
};

struct FileId {  // st_dev and st_ino: which file a name held
    uint64_t device = 0;
    uint64_t inode = 0;
    bool operator==(const FileId&) const = default;
};

// The identity of what `path` names now (a link itself, not its target), or none.
std::optional<FileId> file_id(const std::filesystem::path& path);

struct OutputFile {
    std::filesystem::path path;
    Existing existing = Existing::refuse;
    FileId seen;  // replace_seen
};

// Writes `out`: `write(tmp)` fills the temporary file, which is then fsynced and
// renamed as `out.existing` allows. Returns the name it was given (out.path, or
// NAME-N under Existing::number). On any failure (an Error starting with `tag`,
// "[checkpoint]", naming the file) the temporary is removed and nothing is replaced.
std::filesystem::path write_output(const OutputFile& out, const std::string& tag,
                                   const std::function<void(const std::string& tmp)>& write);

// A run or sweep folder's file (Existing::replace: its lock makes this process its only writer).
void write_atomically(const std::filesystem::path& path, const std::string& tag,
                      const std::function<void(const std::string& tmp)>& write);
void write_text_atomically(const std::filesystem::path& path, const std::string& text, const std::string& tag,
                           Existing existing = Existing::replace);

// A folder (export's): `fill(tmp)` fills a new temporary folder beside `dir`, which
// is then synced and renamed onto `dir`: a new name, or an empty folder (rename(2)
// replaces an empty folder and refuses one that has filled meanwhile, so a
// second writer is refused). A failure or a signal leaves neither.
void write_output_folder(const std::filesystem::path& dir, const std::string& tag,
                         const std::function<void(const std::filesystem::path& tmp)>& fill);

// "<name>.<pid>.<8 hex digits>.tmp" beside `path`, never the same twice; a name
// too long for that keeps its first bytes (the whole within 255).
std::filesystem::path temporary_name(const std::filesystem::path& path);
constexpr size_t kTemporarySuffix = 21;  // the most that adds: ".<7-digit pid>.<8 hex>.tmp"

// fsync of a file (or, with directory = true, of a folder, which makes a rename in it durable).
void fsync_path(const std::string& path, bool directory, const std::string& tag);

}  // namespace attnlab
