// Named activations (hook points, layers/hooks.h) over batches of a task's
// fresh data (the `attnlab eval` stream, 2), streamed batch by batch into
// chunked, growing HDF5 datasets (format "attnlab-cache", docs/file_formats.md):
// memory holds one batch's activations at a time. Every row of the file has
// one shape: batches are padded to the task's longest sequence (and source).
#pragma once

#include <cstdint>
#include <string>

#include "experiments/run/load_checkpoint.h"
#include "layers/hooks.h"

namespace attnlab {

struct OutputFile;  // experiments/files/output_file.h

struct CacheRequest {
    const LoadedCheckpoint* checkpoint = nullptr;
    uint64_t seed = 0;  // the data stream's seed
    int batches = 0;    // of train.batch sequences each
};

// What the file will take, in bytes: the first batch's recorded activations (at
// the width the file stores) and its tokens, times the batches. Runs one batch.
double cache_bytes_needed(const CacheRequest& request, Hooks& hooks);

// Every batch's activations (the points `hooks` records) appended to `out` as
// they come, the file written whole (a temporary, then a rename: output_file.h);
// returns the sequences written.
size_t write_cache(const OutputFile& out, const CacheRequest& request, Hooks& hooks);

}  // namespace attnlab
