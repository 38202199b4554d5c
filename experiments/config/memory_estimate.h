// What a config needs in memory to train, estimated from its sizes before
// anything is allocated: a config that cannot fit is refused in one line that
// names the key to change, instead of ending in std::bad_alloc.
#pragma once

#include <string>

#include "experiments/config/config.h"

namespace attnlab {

// Bytes, in double precision, so that no product of sizes can wrap.
struct MemoryEstimate {
    double parameters = 0;   // weights, their gradients and the optimiser's state
    double activations = 0;  // what one training step keeps for its backward pass
    double data = 0;         // the held-out batches kept for every evaluation, and a text task's tokens
    double total() const { return parameters + activations + data; }
};

// `longest`: the task's longest sequence (inputs per example).
MemoryEstimate estimate_training_memory(const Config& config, double longest);

// Physical memory of this machine, in bytes.
double machine_memory_bytes();

// Throws ConfigError naming the size key whose value costs the most (the one
// whose default would shrink the estimate most), what the config would need and
// what this machine has, when the estimate exceeds the machine's memory.
// `length_key` names what sets `longest` when no size key explains the need
// ("task.max_len", or "train.eval_lengths" when its sequences are the longest).
void check_fits_in_memory(const Config& config, double longest, const std::string& length_key = "task.max_len");

// An analysis's table of `bytes` (a vocabulary- or position-squared table and
// what computing it holds at once): throws Error, one line naming `option`,
// the table and both sizes, when it exceeds this machine's memory, before
// anything is computed or written ("--circuits: the token circuits
// [2 x 1 x 70000 x 70000] need 78.4 GB, this machine has 23.4 GB").
void check_table_fits(const std::string& option, const std::string& table, double bytes);

// What an analysis holds at once, as its own estimate gives it (lens_size,
// forward_tables, ...): the tables with their shapes, as the message names
// them, and the bytes of everything counted.
struct TableSize {
    std::string table;
    double bytes = 0;
};
void check_table_fits(const std::string& option, const TableSize& size);

}  // namespace attnlab
