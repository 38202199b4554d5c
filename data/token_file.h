// Token datasets for the `file` task: an HDF5 file of right-padded sequences.
//
//   tokens     [N, S]  integers (int32 preferred; any integer type is read)
//   lengths    [N]     any integer type, each in [1, S]
//   loss_mask  [N, S]  optional: uint8, int or bool (h5py's bool enum), 0 or 1,
//                      never 1 at a padded position (>= length)
//
// Tokens at valid positions (< length) must be in [0, vocab); padded positions
// may hold anything in the file and are set to 0 (kPad) on reading.
// Write one with h5py:
//   f.create_dataset("tokens", data=np.asarray(seqs, np.int32)); f["lengths"] = lens
//
// The path (task.path) must be a regular file, checked before libhdf5 opens it
// (a FIFO would hang it, a device or a directory is no HDF5 file), and /tokens
// may declare at most kMaxFileTokens elements, checked before anything is read.
#pragma once

#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

// The most tokens (N x S, padding included) a token file may hold: read as
// int64 and kept as int32, they take 12 bytes each while the file is read.
constexpr uint64_t kMaxFileTokens = uint64_t{1} << 28;

struct TokenFile {
    Indices tokens;               // (N, S)
    std::vector<size_t> lengths;  // (N)
    Mask loss_mask;               // (N, S); empty (no shape) when the file has none
};

// Throws attnlab::Error "[token_file] task.path PATH: problem" for a path that
// is no regular file, and "[token_file] PATH: /DATASET: problem" (with the first
// bad index) for a non-HDF5 file, a missing dataset, more than kMaxFileTokens, a wrong rank,
// type or size (checked before anything is read, data/h5file.h), a
// length outside [1, S], a token outside [0, vocab), and a loss mask that
// selects no target (no 1 past position 0).
TokenFile read_token_file(const std::string& path, size_t vocab);

}  // namespace attnlab
