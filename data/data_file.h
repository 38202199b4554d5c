// The data files a config names (task.path): what is there is checked before
// anything reads it, and what is read is read in bounded chunks, so that a FIFO
// cannot hang a run, a device or a huge (or sparse) file cannot exhaust memory,
// and a directory is not read as empty. Every refusal is one line naming the
// config key and the path:
//
//   [text] task.path /dev/zero: not a regular file (a character device)
//   [text] task.path big.txt: 2147483648 bytes, more than the 268435456 (256 MiB) a text task reads
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace attnlab {

// A file named by a config key, and the tag its errors carry ("text", "token_file").
struct DataPath {
    std::string tag;   // "[tag] " starts every message
    std::string key;   // "task.path"
    std::string path;
    std::string where() const { return key + " " + path; }         // "task.path runs/x.txt"
    [[noreturn]] void fail(const std::string& problem) const;      // "[tag] key path: problem"
};

// The file's size in bytes, if it exists, is a regular file (after symbolic
// links) and holds at most `max_bytes`; else throws naming what it is
// ("a directory", "a FIFO", "a character device", ...). `reader` says who
// reads it in the size message ("a text task").
uint64_t check_data_file(const DataPath& file, uint64_t max_bytes, const std::string& reader);

// check_data_file, then the bytes of the file passed to `consume` in chunks of
// at most `chunk_bytes`, in order. The file is opened without blocking and
// checked again once open, so a path swapped for a FIFO after the check cannot
// hang; one that grows past `max_bytes` while it is read is refused.
void read_data_file(const DataPath& file, uint64_t max_bytes, const std::string& reader,
                    const std::function<void(std::string_view)>& consume, size_t chunk_bytes = size_t{1} << 20);

// "268435456 (256 MiB)": a byte count as messages give it.
std::string bytes_text(uint64_t bytes);

}  // namespace attnlab
