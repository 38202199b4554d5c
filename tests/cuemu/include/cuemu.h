// cuemu: the part of the CUDA programming model that attnlab's kernels use,
// for compiling cuda/*.cu as host C++ (after tests/cuemu/transform.py) and
// running them on the CPU. See tests/cuemu/README.md.
//
// Model: a launch runs its blocks one after the other on the calling thread;
// the threads of a block are fibers (own stacks, one OS thread) that run until
// they reach __syncthreads(), a warp shuffle or their end, and are then
// released together, in thread order 0..n-1 or, with CUEMU_ORDER=reverse,
// n-1..0. So a value one thread writes to shared memory is seen by another
// only through a barrier (or a shuffle, for lanes of one warp) in one of the
// two orders at least: a missing barrier makes one order read stale data.
// Misuse of the model (a barrier not reached by every thread, a shuffle with
// inactive lanes or a partial mask) aborts with a "[cuemu]" message.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- device-code vocabulary ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Block-shared arrays: one instance per kernel, which is what a block sees,
// since blocks never overlap here (not refilled with NaN per block, unlike
// the dynamic shared memory).
#define __shared__ static

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
// The running fiber's indices; the scheduler sets them at every switch.
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

// CUDA's integer min/max overloads (device code calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
using std::isfinite;

void __syncthreads();

namespace cuemu {

uint64_t shuffle_xor_bits(unsigned mask, uint64_t bits, int lane_mask);  // blocks until the warp arrives
float* dynamic_shared();                                                 // this launch's extern __shared__

struct LaunchConfig {
    dim3 grid, block;
    size_t shared_bytes;
};
inline LaunchConfig config(dim3 grid, dim3 block, size_t shared_bytes = 0, void* /*stream*/ = nullptr) {
    return {grid, block, shared_bytes};
}
// Checks the configuration against an H200's limits (a violation sets the
// error cudaGetLastError returns, as a real launch does) and runs every block.
void run_grid(const void* kernel, const char* name, const LaunchConfig& config, const std::function<void()>& thread);

// `kernel<<<grid, block, shared, stream>>>(args...)` after the transform: the
// arguments are converted to the kernel's parameter types once, like CUDA's
// by-value launch, and every thread runs the kernel on that copy.
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), const LaunchConfig& config, Args&&... args) {
    const std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
    run_grid(reinterpret_cast<const void*>(kernel), name, config, [&] { std::apply(kernel, params); });
}

// ---- for tests of the emulation and of error paths (tests/cuemu/) ----
enum class Order { forward, reverse };
Order thread_order();                      // CUEMU_ORDER: forward (default) or reverse
void fail_next_call(const char* function);  // the next call of this runtime/cuBLAS function fails
void fault_in_kernel(const char* name);     // the next launch of `name` ends in cudaErrorIllegalAddress
int live_streams();
int live_blas_handles();
long launches();                             // kernel launches so far
// What else a real device queues as work of its own, counted since the start:
// cuBLAS GEMM calls, memsets and device-to-device copies, and the copies from and to the host.
struct WorkCounts {
    long gemms = 0, memsets = 0, device_copies = 0, copies_in = 0, copies_out = 0;
};
WorkCounts work_counts();

}  // namespace cuemu

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    bits = cuemu::shuffle_xor_bits(mask, bits, lane_mask);
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
}

// One OS thread runs every fiber, and a fiber switches only at a barrier or
// shuffle: a read-modify-write is atomic as it stands.
template <class T>
T atomicAdd(T* address, T value) {
    const T old = *address;
    *address = old + value;
    return old;
}
