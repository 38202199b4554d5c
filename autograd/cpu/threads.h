// attnlab's one thread pool. OpenBLAS is kept at one thread: every parallel
// loop, GEMMs included (blas.h splits a large product into row or column
// blocks), runs on this pool, so two pools never fight over the cores.
//
// Work is split statically: with T threads, the range [0, n) is cut into T
// contiguous chunks, thread t taking chunk t. A loop body that writes only its
// own chunk therefore gives the same result for a given thread count every
// run, whatever the scheduling (reductions add their per-chunk parts in chunk
// order).
#pragma once

#include <cstddef>
#include <functional>

namespace attnlab {

// Sets the pool's size (the calling thread counts as one) and pins OpenBLAS to
// one thread. 1 = everything runs on the calling thread. Not while a loop runs.
void set_threads(int threads);
int threads();

// Calls body(begin, end) on contiguous chunks covering [0, n), in parallel when
// n >= 2 and the pool has more than one thread; serially inside another
// parallel loop. `grain` is the smallest chunk worth a thread (fewer chunks
// are used when n / grain is small). The first exception thrown by any chunk
// is rethrown here after all chunks have finished.
void parallel_for(size_t n, const std::function<void(size_t begin, size_t end)>& body, size_t grain = 1);

// Work per chunk below which a loop is not worth splitting: elements of an
// elementwise loop, and multiply-adds of a product (a GEMM, attention's heads:
// 2^22 take ~20 us on libxsmm's kernels). Smaller bounds (2^12 and 2^18) made
// two threads slower than one on the small bench step (bench/RESULTS.md, issue 32).
constexpr size_t kElementGrain = size_t(1) << 16;
constexpr size_t kParallelWork = size_t(1) << 22;

// True on a pool thread, or on the caller while it runs its own chunk.
bool in_parallel_region();

}  // namespace attnlab
