// Checkpoints: runs/<name>/checkpoints/step_NNNNNNN.h5 (layout fixed by
// docs/file_formats.md, "Checkpoints"):
//
//   /                  attrs: format="attnlab-checkpoint", format_version=1, step, config (TOML text)
//   /params/<dotted.name>      float32, the tensor's shape (PyTorch layout)
//   /optimizer/<name>          the tensor's dtype (float32 or float64) and shape
//   /rng/<name>                uint64 [n]   generator states
//   /data/<name>               int64 [n]    data-stream positions
//
// Dotted names are dataset names as they are ("blocks.0.attn.q_proj.weight"
// directly under /params); a name with '/' makes nested groups. Names come back
// in the order they were written (groups track creation order).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/named_tensors.h"

namespace attnlab {

struct CheckpointData {
    int64_t step = 0;
    std::string config_toml;
    NamedTensors params;     // stored float32 (a float64 parameter is converted)
    NamedTensors optimizer;  // stored in each tensor's own dtype
    std::vector<std::pair<std::string, std::vector<uint64_t>>> rng;
    std::vector<std::pair<std::string, std::vector<int64_t>>> data;
};

// Writes atomically (output_file.h): to a temporary name of this process's own in
// the same directory, flushed, closed and fsync'ed, then renamed to its name, then
// the directory is fsync'ed. On any failure the temporary is removed and nothing
// is replaced. A path alone is a run's checkpoint, replaced if there (the run's
// lock makes this process its only writer); `out` says what may be replaced
// (import's: nothing).
struct OutputFile;
void write_checkpoint(const std::string& path, const CheckpointData& checkpoint);
void write_checkpoint(const OutputFile& out, const CheckpointData& checkpoint);

// Reads a checkpoint back. Throws attnlab::Error, one line naming the path (and
// the dataset or attribute), for a missing file, a file that is not HDF5, a
// truncated or corrupt one, a format attribute other than "attnlab-checkpoint",
// an unsupported format_version, a missing group or attribute, an attribute of
// the wrong type, a negative step, a config attribute that sets nothing, a
// dataset of the wrong type or rank or declaring more data than the file holds
// (checked before anything is allocated), a soft or external link or a group
// loop, and a NaN or infinite value (naming its index). The file is read in a
// child process first (data/h5_probe.h), so a crash or hang of libhdf5 on a
// crafted file is one line too.
CheckpointData read_checkpoint(const std::string& path);

// "step_0000123.h5" (at least 7 digits; steps past 9,999,999 get more).
std::string checkpoint_name(int64_t step);
// Paths ("<dir>/step_NNNNNNN.h5") of the checkpoints in `dir`, oldest step
// first; other files (and "*.tmp" leftovers) are ignored. A missing dir has none.
std::vector<std::string> list_checkpoints(const std::string& dir);
// Deletes all but the newest `keep` checkpoints in `dir` (keep = 0 deletes all).
void prune_checkpoints(const std::string& dir, size_t keep);

}  // namespace attnlab
