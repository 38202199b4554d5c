// The real Context and allocator (nvcc, -DATTNLAB_CUDA=ON).
#include "autograd/device/context.h"

#include "autograd/device/backend.h"
#include "cuda/check.cuh"

namespace attnlab::device {

DeviceBuffer DeviceAllocator::allocate(size_t bytes) {
    if (bytes == 0) return {};
    const size_t size = rounded_size(bytes);
    void* block = nullptr;
    if (!caching_) {  // ATTNLAB_NO_CUDA_CACHING: exact size, never reused
        check_cuda(cudaMalloc(&block, bytes), "allocate " + std::to_string(bytes) + " bytes (caching off)");
        ++stats_.device_allocations;
        stats_.bytes_in_use += size;
        if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
        return DeviceBuffer(this, block, bytes);
    }
    auto cached = free_blocks_.find(size);
    if (cached != free_blocks_.end() && !cached->second.empty()) {
        block = cached->second.back();
        cached->second.pop_back();
        stats_.bytes_cached -= size;
    } else {
        cudaError_t status = cudaMalloc(&block, size);
        if (status == cudaErrorMemoryAllocation && stats_.bytes_cached > 0) {
            cudaGetLastError();
            empty_cache();
            status = cudaMalloc(&block, size);
        }
        check_cuda(status, "allocate " + std::to_string(size) + " bytes (" + std::to_string(stats_.bytes_in_use) +
                               " in use)");
        ++stats_.device_allocations;
    }
    stats_.bytes_in_use += size;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
    return DeviceBuffer(this, block, bytes);
}

void DeviceAllocator::recycle(void* block, size_t bytes) {
    const size_t size = rounded_size(bytes);
    if (!caching_) {
        cudaFree(block);  // implicitly waits for the device
        stats_.bytes_in_use -= size;
        return;
    }
    free_blocks_[size].push_back(block);
    stats_.bytes_in_use -= size;
    stats_.bytes_cached += size;
}

void DeviceAllocator::empty_cache() {
    for (auto& [size, blocks] : free_blocks_)
        for (void* block : blocks) cudaFree(block);  // implicitly waits for the device
    free_blocks_.clear();
    stats_.bytes_cached = 0;
}

DeviceAllocator::~DeviceAllocator() { empty_cache(); }

Context::Context(int device) : device_(device) {
    require_device("Context");
    check_cuda(cudaSetDevice(device), "Context: cudaSetDevice(" + std::to_string(device) + ")");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "Context: cudaStreamCreate");
    // A constructor that throws runs no destructor: what exists so far is released here.
    try {
        cublasHandle_t handle = nullptr;
        check_cublas(cublasCreate(&handle), "Context: cublasCreate");
        blas_ = handle;
        check_cublas(cublasSetStream(blas_, stream_), "Context: cublasSetStream");
        // Plain fp32 GEMMs, never TF32 tensor cores: results must agree with the CPU op to 1e-4.
        check_cublas(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "Context: cublasSetMathMode");
    } catch (...) {
        if (blas_ != nullptr) cublasDestroy(blas_);
        cudaStreamDestroy(stream_);
        throw;
    }
}

Context::~Context() {
    cudaStreamSynchronize(stream_);
    allocator_.empty_cache();
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
}

void Context::synchronize(const char* where) const { check_cuda(cudaStreamSynchronize(stream_), where); }

DeviceBuffer to_device(Context& context, const void* values, size_t bytes) {
    DeviceBuffer buffer = context.allocate(bytes);
    if (bytes == 0) return buffer;
    check_cuda(cudaMemcpyAsync(buffer.data(), values, bytes, cudaMemcpyHostToDevice, context.stream()), "to_device");
    // The host memory may be pageable and reused as soon as we return.
    context.synchronize("to_device");
    return buffer;
}

DeviceBuffer to_device(Context& context, const std::vector<float>& values) {
    return to_device(context, values.data(), values.size() * sizeof(float));
}

void to_host(Context& context, const DeviceBuffer& buffer, void* values, size_t bytes) {
    if (bytes > buffer.bytes())
        fail("cuda", "to_host: " + std::to_string(bytes) + " bytes asked from a buffer of " + std::to_string(buffer.bytes()));
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(values, buffer.data(), bytes, cudaMemcpyDeviceToHost, context.stream()), "to_host");
    context.synchronize("to_host");
}

void copy_to_device(Context& context, const void* host, void* device, size_t bytes) {
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, context.stream()), "copy_to_device");
    context.synchronize("copy_to_device");
}

void copy_to_host(Context& context, const void* device, void* host, size_t bytes) {
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, context.stream()), "copy_to_host");
    context.synchronize("copy_to_host");
}

void copy_device(Context& context, const void* from, void* to, size_t bytes) {
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, context.stream()), "copy_device");
}

std::vector<float> to_host_floats(Context& context, const DeviceBuffer& buffer, size_t count) {
    std::vector<float> values(count);
    to_host(context, buffer, values.data(), count * sizeof(float));
    return values;
}

}  // namespace attnlab::device
