// Device state passed explicitly, never global: one Context holds the cuBLAS
// handle, the stream every kernel and copy of ours runs on, and a caching
// allocator for device memory. Plain C++ (no CUDA header), so CPU code and tests
// can include it; with -DATTNLAB_CUDA=OFF, context_stub.cpp refuses to build one.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <map>
#include <vector>

struct CUstream_st;    // cudaStream_t is CUstream_st*
struct cublasContext;  // cublasHandle_t is cublasContext*

namespace attnlab::device {

class DeviceAllocator;

// One block of device memory, returned to its allocator's cache when destroyed.
// It must not outlive the Context that made it.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    ~DeviceBuffer() { release(); }
    DeviceBuffer(DeviceBuffer&& other) noexcept { take(other); }
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            release();
            take(other);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    float* floats() const { return static_cast<float*>(data_); }
    size_t bytes() const { return bytes_; }  // as requested (the block may be larger)
    bool empty() const { return data_ == nullptr; }

private:
    friend class DeviceAllocator;
    DeviceBuffer(DeviceAllocator* owner, void* data, size_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
    void take(DeviceBuffer& other) {
        owner_ = other.owner_;
        data_ = other.data_;
        bytes_ = other.bytes_;
        other.owner_ = nullptr;
        other.data_ = nullptr;
        other.bytes_ = 0;
    }
    void release();

    DeviceAllocator* owner_ = nullptr;
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

struct AllocatorStats {
    size_t bytes_in_use = 0;       // rounded sizes of live DeviceBuffers
    size_t bytes_cached = 0;       // freed blocks kept for reuse
    size_t peak_bytes_in_use = 0;
    size_t device_allocations = 0;  // cudaMalloc calls so far (cache misses)
};

// Caching allocator over plain cudaMalloc (never managed memory). A request is
// rounded up (rounded_size) and served from the free list of that exact rounded
// size when it has a block; else cudaMalloc, and on out-of-memory the cache is
// emptied and cudaMalloc tried once more. Reuse is safe without events because
// all work of a Context runs in order on its one stream.
//
// ATTNLAB_NO_CUDA_CACHING=1 in the environment turns the cache off (as
// PYTORCH_NO_CUDA_MEMORY_CACHING does torch's): each buffer is its own
// exact-size cudaMalloc, freed when released, so that compute-sanitizer's
// memcheck and initcheck, and ASan in the host emulation (tests/cuemu/), see
// every buffer's true bounds and never a stale block. Stats still count rounded sizes.
class DeviceAllocator {
public:
    DeviceAllocator() : caching_(!no_caching_requested()) {}
    ~DeviceAllocator();  // frees the cached blocks
    DeviceAllocator(const DeviceAllocator&) = delete;
    DeviceAllocator& operator=(const DeviceAllocator&) = delete;

    DeviceBuffer allocate(size_t bytes);  // bytes = 0 gives an empty buffer
    void empty_cache();                   // cudaFree every cached block
    AllocatorStats stats() const { return stats_; }
    bool caching() const { return caching_; }
    static bool no_caching_requested() {
        const char* value = std::getenv("ATTNLAB_NO_CUDA_CACHING");
        return value != nullptr && value[0] != '\0' && value[0] != '0';
    }

    // 512-byte granules up to 1 MiB, whole MiB above (at most 1/1024 wasted there).
    static size_t rounded_size(size_t bytes) {
        constexpr size_t granule = 512, mebibyte = size_t(1) << 20;
        if (bytes <= mebibyte) return (bytes + granule - 1) / granule * granule;
        return (bytes + mebibyte - 1) / mebibyte * mebibyte;
    }

private:
    friend class DeviceBuffer;
    void recycle(void* block, size_t bytes);

    std::map<size_t, std::vector<void*>> free_blocks_;  // rounded size -> cached blocks
    AllocatorStats stats_;
    bool caching_ = true;
};

inline void DeviceBuffer::release() {
    if (owner_ != nullptr && data_ != nullptr) owner_->recycle(data_, bytes_);
    owner_ = nullptr;
    data_ = nullptr;
    bytes_ = 0;
}

class Context {
public:
    // Throws attnlab::Error("[cuda] Context: <reason>") without a usable device.
    explicit Context(int device = 0);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    CUstream_st* stream() const { return stream_; }
    cublasContext* blas() const { return blas_; }
    int device() const { return device_; }

    DeviceBuffer allocate(size_t bytes) { return allocator_.allocate(bytes); }
    DeviceBuffer allocate_floats(size_t count) { return allocator_.allocate(count * sizeof(float)); }
    AllocatorStats memory_stats() const { return allocator_.stats(); }
    bool caching_memory() const { return allocator_.caching(); }  // see DeviceAllocator
    void empty_cache() { allocator_.empty_cache(); }

    // Waits for everything queued on the stream; an error raised by a kernel
    // (asynchronously) is thrown here as "[cuda] <where>: <error>".
    void synchronize(const char* where = "synchronize") const;

private:
    int device_ = 0;
    CUstream_st* stream_ = nullptr;
    cublasContext* blas_ = nullptr;
    DeviceAllocator allocator_;  // ~Context empties its cache before destroying the stream
};

// Copies on the context's stream. to_device returns when the host memory may be
// reused; to_host returns when the values have arrived.
DeviceBuffer to_device(Context& context, const void* values, size_t bytes);
DeviceBuffer to_device(Context& context, const std::vector<float>& values);
void to_host(Context& context, const DeviceBuffer& buffer, void* values, size_t bytes);
std::vector<float> to_host_floats(Context& context, const DeviceBuffer& buffer, size_t count);
// The same between raw pointers (views inside a buffer): host to device and
// device to host return as above; device to device is only queued.
void copy_to_device(Context& context, const void* host, void* device, size_t bytes);
void copy_to_host(Context& context, const void* device, void* host, size_t bytes);
void copy_device(Context& context, const void* from, void* to, size_t bytes);

}  // namespace attnlab::device
