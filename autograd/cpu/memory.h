// Process-wide memory policy for programs that use attnlab (the CLI, benchmarks).
#pragma once

#include <cstddef>

namespace attnlab {

// Tensors are freed and reallocated every step. With glibc's defaults, buffers
// above its mmap threshold are mapped fresh and returned to the kernel each
// time, and first touching a fresh 64 MiB buffer costs more page faults than the
// GEMM that fills it (bench/RESULTS.md); on the default experiment it cost a
// third of the wall time in system calls (44.6 s with 12 s of system time on a
// loaded machine, against 22.9 s with 0.02 s with this set). Keeps
// freed memory in the process instead; peak memory is unchanged. Call once,
// first thing in main. `up_to`: allocations below it come from the heap, and
// up to that much freed heap stays in the process (the CLI: 1 GiB; the Python
// module, a guest in the interpreter's process, 64 MiB: a forward of the
// default model at B = 32 took 7-9 ms there without it, 1.6 ms with it).
void keep_freed_memory(size_t up_to = size_t(1) << 30);

}  // namespace attnlab
