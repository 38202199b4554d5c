// The threads of a block as fibers: each has its own stack and runs on the one
// OS thread until it reaches __syncthreads(), a warp shuffle or its end; the
// scheduler then releases whatever can go on (a warp whose live lanes all wait
// at a shuffle, or the whole block at a barrier) and runs the released fibers
// again in thread order (CUEMU_ORDER=reverse: n-1..0, and the blocks in reverse
// too). x86-64 only: the switch is eight instructions of assembly, because
// swapcontext's two system calls per switch would dominate the run time.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CUEMU_ASAN 1  // tell ASan about every stack switch, or it reports false stack overflows
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *save, switches to `load` and pops that stack's registers.
extern "C" void cuemu_switch(void** save, void* load);
asm(R"(
.text
.globl cuemu_switch
.type cuemu_switch,@function
cuemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
)");

namespace cuemu {
namespace {

enum class State { runnable, at_barrier, at_shuffle, exited };

struct Fiber {
    char* stack = nullptr;  // lowest address; a guard page below the usable part
    void* sp = nullptr;
    State state = State::runnable;
    uint3 index{};
    long barriers = 0, shuffles = 0;  // how many each has passed: lanes at different calls differ
    unsigned shuffle_mask = 0;
    int shuffle_lane_mask = 0;
    uint64_t shuffle_value = 0, shuffle_result = 0;
    void* asan_fake_stack = nullptr;
};

constexpr size_t stack_bytes = 512 * 1024, guard_bytes = 4096;

std::vector<Fiber> fibers;  // grown to the largest block seen, stacks kept
Fiber* current = nullptr;
void* scheduler_sp = nullptr;
const std::function<void()>* thread_body = nullptr;
const char* kernel_name = "";
float* shared_memory = nullptr;
size_t shared_bytes = 0;
long launch_count = 0;
#ifdef CUEMU_ASAN
const void* scheduler_stack_bottom = nullptr;
size_t scheduler_stack_size = 0;
void* scheduler_fake_stack = nullptr;
#endif

void yield_to_scheduler() {
    Fiber& f = *current;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(&f.asan_fake_stack, scheduler_stack_bottom, scheduler_stack_size);
#endif
    cuemu_switch(&f.sp, scheduler_sp);
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, &scheduler_stack_bottom, &scheduler_stack_size);
#endif
}

[[noreturn]] void fiber_entry() {
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_bottom, &scheduler_stack_size);
#endif
    (*thread_body)();
    current->state = State::exited;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, scheduler_stack_bottom, scheduler_stack_size);  // this stack is done
#endif
    cuemu_switch(&current->sp, scheduler_sp);
    std::abort();  // an exited fiber is never resumed
}

void resume(Fiber& f) {
    current = &f;
    threadIdx = f.index;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(&scheduler_fake_stack, f.stack + guard_bytes, stack_bytes - guard_bytes);
#endif
    cuemu_switch(&scheduler_sp, f.sp);
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr);
#endif
    current = nullptr;
}

void ensure_fibers(size_t n) {
    while (fibers.size() < n) {
        Fiber f;
        void* memory = mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
        if (memory == MAP_FAILED) internal::model_error("cannot map a fiber stack");
        mprotect(memory, guard_bytes, PROT_NONE);  // a stack overflow faults instead of corrupting memory
        f.stack = static_cast<char*>(memory);
        fibers.push_back(f);
    }
}

// A fresh stack whose first switch "returns" into fiber_entry.
void start(Fiber& f, unsigned t) {
    f.state = State::runnable;
    f.barriers = f.shuffles = 0;
    f.index = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
    const uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + stack_bytes) & ~uintptr_t(15);
    void** return_slot = reinterpret_cast<void**>(top - 16);  // after `ret`, rsp = top - 8, as after a call
    *return_slot = reinterpret_cast<void*>(&fiber_entry);
    void** registers = return_slot - 6;  // rbp rbx r12..r15, popped by cuemu_switch
    for (int r = 0; r < 6; ++r) registers[r] = nullptr;
    f.sp = registers;
}

// Warps whose live lanes all wait at a shuffle exchange their values. True if any did.
bool release_shuffles(unsigned n) {
    bool released = false;
    for (unsigned lo = 0; lo < n; lo += 32) {
        const unsigned hi = std::min(n, lo + 32);
        unsigned waiting = 0, live = 0;
        for (unsigned t = lo; t < hi; ++t) {
            waiting += fibers[t].state == State::at_shuffle;
            live += fibers[t].state != State::exited;
        }
        if (waiting == 0 || waiting != live) continue;
        if (live != 32)
            internal::model_error("a shuffle with " + std::to_string(live) + " live lanes of warp " +
                                  std::to_string(lo / 32) + " (every attnlab shuffle names all 32)");
        for (unsigned t = lo; t < hi; ++t) {
            const Fiber& f = fibers[t];
            if (f.shuffle_mask != 0xffffffffu) internal::model_error("a shuffle mask that is not 0xffffffff");
            if (f.shuffles != fibers[lo].shuffles)
                internal::model_error("lanes of warp " + std::to_string(lo / 32) + " at different shuffles");
        }
        for (unsigned t = lo; t < hi; ++t) {
            Fiber& f = fibers[t];
            f.shuffle_result = fibers[lo + ((t - lo) ^ unsigned(f.shuffle_lane_mask & 31))].shuffle_value;
        }
        for (unsigned t = lo; t < hi; ++t) fibers[t].state = State::runnable;
        released = true;
    }
    return released;
}

void run_block(unsigned n, bool reverse) {
    for (unsigned t = 0; t < n; ++t) start(fibers[t], t);
    if (shared_memory != nullptr) std::memset(shared_memory, 0xff, shared_bytes);  // unwritten shared memory: NaN
    for (;;) {
        for (unsigned k = 0; k < n; ++k) {
            Fiber& f = fibers[reverse ? n - 1 - k : k];
            if (f.state == State::runnable) resume(f);
        }
        unsigned exited = 0, at_barrier = 0;
        for (unsigned t = 0; t < n; ++t) {
            exited += fibers[t].state == State::exited;
            at_barrier += fibers[t].state == State::at_barrier;
        }
        if (exited == n) return;
        if (release_shuffles(n)) continue;
        if (at_barrier == n) {
            for (unsigned t = 0; t < n; ++t)
                if (fibers[t].barriers != fibers[0].barriers)
                    internal::model_error("threads 0 and " + std::to_string(t) + " wait at different __syncthreads");
            for (unsigned t = 0; t < n; ++t) fibers[t].state = State::runnable;
            continue;
        }
        if (at_barrier + exited == n)
            internal::model_error("__syncthreads reached after " + std::to_string(exited) + " of " +
                                  std::to_string(n) + " threads returned");
        internal::model_error("deadlock: some threads wait at __syncthreads, others at a shuffle their warp never completes");
    }
}

}  // namespace

Order thread_order() {
    static const Order order = [] {
        const char* value = std::getenv("CUEMU_ORDER");
        if (value == nullptr || std::string(value) == "forward") return Order::forward;
        if (std::string(value) == "reverse") return Order::reverse;
        std::fprintf(stderr, "[cuemu] CUEMU_ORDER must be forward or reverse, got %s\n", value);
        std::exit(2);
    }();
    return order;
}

long launches() { return launch_count; }

float* dynamic_shared() { return shared_memory; }

uint64_t shuffle_xor_bits(unsigned mask, uint64_t bits, int lane_mask) {
    Fiber& f = *current;
    f.state = State::at_shuffle;
    f.shuffle_mask = mask;
    f.shuffle_value = bits;
    f.shuffle_lane_mask = lane_mask;
    ++f.shuffles;
    yield_to_scheduler();
    return current->shuffle_result;
}

void run_grid(const void* kernel, const char* name, const LaunchConfig& config, const std::function<void()>& thread) {
    using namespace internal;
    ++launch_count;
    kernel_name = name;
    const dim3 block = config.block, grid = config.grid;
    const unsigned long long n = 1ull * block.x * block.y * block.z;
    if (n == 0 || n > max_threads_per_block || block.x > 1024 || block.y > 1024 || block.z > 64) {
        std::fprintf(stderr, "[cuemu] launch of %s refused: block (%u, %u, %u)\n", name, block.x, block.y, block.z);
        return set_last_error(cudaErrorInvalidConfiguration);
    }
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > max_grid_x || grid.y > max_grid_yz ||
        grid.z > max_grid_yz) {
        std::fprintf(stderr, "[cuemu] launch of %s refused: grid (%u, %u, %u)\n", name, grid.x, grid.y, grid.z);
        return set_last_error(cudaErrorInvalidConfiguration);
    }
    if (config.shared_bytes > max_dynamic_shared(kernel)) {
        std::fprintf(stderr, "[cuemu] launch of %s refused: %zu bytes of dynamic shared memory, limit %zu\n", name,
                     config.shared_bytes, max_dynamic_shared(kernel));
        return set_last_error(cudaErrorInvalidValue);
    }
    ensure_fibers(n);
    // Exact size, so that ASan sees an access past the end of the dynamic shared memory.
    std::vector<float> shared((config.shared_bytes + sizeof(float) - 1) / sizeof(float));
    shared_memory = shared.empty() ? nullptr : shared.data();
    shared_bytes = config.shared_bytes;
    thread_body = &thread;
    blockDim = block;
    gridDim = grid;
    const bool reverse = thread_order() == Order::reverse;
    const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
    for (unsigned long long k = 0; k < blocks; ++k) {
        const unsigned long long b = reverse ? blocks - 1 - k : k;
        blockIdx = {unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / (1ull * grid.x * grid.y))};
        run_block(unsigned(n), reverse);
    }
    shared_memory = nullptr;
    if (take_injected_fault(name)) set_pending_fault(cudaErrorIllegalAddress);
}

namespace internal {
void model_error(const std::string& what) {
    std::fprintf(stderr, "[cuemu] %s block (%u, %u, %u) thread %u: %s\n", kernel_name, blockIdx.x, blockIdx.y,
                 blockIdx.z, current != nullptr ? unsigned(current - fibers.data()) : 0u, what.c_str());
    std::abort();
}
}  // namespace internal

}  // namespace cuemu

void __syncthreads() {
    cuemu::Fiber& f = *cuemu::current;
    f.state = cuemu::State::at_barrier;
    ++f.barriers;
    cuemu::yield_to_scheduler();
}
