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
#pragma once

#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

struct TokenFile {
    Indices tokens;               // (N, S)
    std::vector<size_t> lengths;  // (N)
    Mask loss_mask;               // (N, S); empty (no shape) when the file has none
};

// Throws attnlab::Error "[token_file] PATH: /DATASET: problem" (with the first
// bad index) for a missing or non-HDF5 file, a missing dataset, a wrong rank,
// type or size (checked before anything is read, data/h5file.h), a
// length outside [1, S], a token outside [0, vocab), and a loss mask that
// selects no target (no 1 past position 0).
TokenFile read_token_file(const std::string& path, size_t vocab);

}  // namespace attnlab
