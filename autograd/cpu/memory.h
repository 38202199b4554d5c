// Process-wide memory policy for programs that use attnlab (the CLI, benchmarks).
#pragma once

namespace attnlab {

// Tensors are freed and reallocated every step. With glibc's defaults, buffers
// above its mmap threshold are mapped fresh and returned to the kernel each
// time, and first touching a fresh 64 MiB buffer costs more page faults than the
// GEMM that fills it (bench/RESULTS.md); on the default experiment it cost a
// third of the wall time in system calls (44.6 s with 12 s of system time on a
// loaded machine, against 22.9 s with 0.02 s with this set). Keeps
// freed memory in the process instead; peak memory is unchanged. Call once,
// first thing in main.
void keep_freed_memory();

}  // namespace attnlab
