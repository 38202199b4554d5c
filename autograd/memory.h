// Process-wide memory policy for programs that use attnlab (the CLI, benchmarks).
#pragma once

namespace attnlab {

// Tensors are freed and reallocated every step. With glibc's defaults, buffers
// above its mmap threshold are mapped fresh and returned to the kernel each
// time, and first touching a fresh 64 MiB buffer costs more page faults than the
// GEMM that fills it (bench/RESULTS.md); on the default experiment it cost a
// third of the wall time in system calls (36 s -> 23 s with this set). Keeps
// freed memory in the process instead; peak memory is unchanged. Call once,
// first thing in main.
void keep_freed_memory();

}  // namespace attnlab
