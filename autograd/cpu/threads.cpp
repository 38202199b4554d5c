#include "autograd/cpu/threads.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "autograd/cpu/blas.h"
#include "autograd/tensor.h"

namespace attnlab {

namespace {

thread_local bool inside_region = false;

// Workers wait for a new generation of work, run their chunk, and count down.
// After a loop they spin for up to kSpinBeforeSleep before sleeping: a training
// step runs parallel ops between serial stretches (graph building, small serial
// ops) of tens to hundreds of microseconds, and waking a sleeping worker (a
// futex, and in a virtual machine the wake-up of a halted vCPU) cost more than
// those ops gained: with 37 us of spinning, two threads made the small bench
// step 17% slower than one (0.82 against 0.70 ms); with 2 ms, no slower.
class Pool {
public:
    explicit Pool(int threads) : size_(threads) {
        for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
        for (std::thread& w : workers_) w.join();
    }
    int size() const { return size_; }

    // Runs chunk(c) for c in [0, chunks), chunks <= size(); chunk 0 on the caller.
    // Every worker acknowledges every generation (those without a chunk too), so
    // no worker can still be reading this loop's fields when the next one starts.
    void run(int chunks, const std::function<void(int)>& chunk) {
        chunk_ = &chunk;
        chunks_ = chunks;
        error_ = nullptr;
        pending_.store(size_ - 1, std::memory_order_relaxed);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
        run_chunk(0);
        // The other chunks are about as long as ours: spin briefly, then yield
        // the CPU (a worker sharing it with us could not run otherwise).
        for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
            if (spin < kSpinsBeforeYield) pause();
            else std::this_thread::yield();
        }
        chunk_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

private:
    // A pause instruction takes about 40-140 cycles, depending on the CPU.
    static constexpr std::chrono::microseconds kSpinBeforeSleep{2000};
    static constexpr int kSpinsBeforeYield = 2000;

    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }

    void run_chunk(int c) {
        inside_region = true;
        try {
            (*chunk_)(c);
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
        }
        inside_region = false;
    }

    void work(int t) {
        uint64_t seen = 0;
        for (;;) {
            // Spin (reading the clock every 256 pauses) for up to kSpinBeforeSleep, then
            // sleep until the next generation.
            const auto sleep_at = std::chrono::steady_clock::now() + kSpinBeforeSleep;
            for (int spin = 1; generation_.load(std::memory_order_acquire) == seen; ++spin) {
                pause();
                if (spin % 256 == 0 && std::chrono::steady_clock::now() >= sleep_at) break;
            }
            if (generation_.load(std::memory_order_acquire) == seen) {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            }
            seen = generation_.load(std::memory_order_acquire);
            if (stopping_) return;
            if (t < chunks_) run_chunk(t);
            pending_.fetch_sub(1, std::memory_order_acq_rel);
        }
    }

    const int size_;
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    bool stopping_ = false;
    const std::function<void(int)>* chunk_ = nullptr;
    int chunks_ = 0;
    std::mutex error_mutex_;
    std::exception_ptr error_;
};

std::unique_ptr<Pool>& pool() {
    static std::unique_ptr<Pool> instance;
    return instance;
}

}  // namespace

void set_threads(int n) {
    if (n < 1) fail("threads", "thread count must be at least 1, got " + std::to_string(n));
    if (in_parallel_region()) fail("threads", "set_threads called inside a parallel loop");
    set_blas_threads(1);
    if (pool() && pool()->size() == n) return;
    pool().reset();
    if (n > 1) pool() = std::make_unique<Pool>(n);
}

int threads() { return pool() ? pool()->size() : 1; }

bool in_parallel_region() { return inside_region; }

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& body, size_t grain) {
    if (n == 0) return;
    const size_t by_grain = grain == 0 ? n : std::max<size_t>(1, n / grain);
    const size_t chunks = std::min<size_t>({static_cast<size_t>(threads()), n, by_grain});
    if (chunks <= 1 || inside_region) {
        body(0, n);
        return;
    }
    pool()->run(static_cast<int>(chunks), [&](int c) {
        const size_t begin = n * static_cast<size_t>(c) / chunks, end = n * (static_cast<size_t>(c) + 1) / chunks;
        if (begin < end) body(begin, end);
    });
}

}  // namespace attnlab
