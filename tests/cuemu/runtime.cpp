// The CUDA runtime calls attnlab makes, on the host: one device with an H200's
// limits; streams that only count (work runs at once, in order); device memory
// as exact-size malloc blocks filled with 0xff bytes (NaN floats), so that ASan
// sees any access past a buffer and a read of unwritten memory gives NaN; the
// per-kernel shared-memory attribute; last-error and asynchronous-fault
// reporting. Failures can be injected for the tests of error paths.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "internal.h"

namespace cuemu {
namespace {

cudaError_t last_error = cudaSuccess;     // a launch refused: returned (and cleared) by cudaGetLastError
cudaError_t pending_fault = cudaSuccess;  // a fault "inside" a kernel: returned by the next synchronising call
std::map<const void*, size_t> dynamic_shared_limit;  // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize
std::string failing_call, faulting_kernel;
int streams = 0, blas_handles = 0;

// A synchronising call reports an earlier kernel's fault, once.
cudaError_t take_pending_fault() {
    const cudaError_t fault = pending_fault;
    pending_fault = cudaSuccess;
    return fault;
}

}  // namespace

WorkCounts work_counts() { return internal::counts(); }
WorkCounts& internal::counts() {
    static WorkCounts counts;
    return counts;
}

void fail_next_call(const char* function) { failing_call = function; }
void fault_in_kernel(const char* name) { faulting_kernel = name; }
int live_streams() { return streams; }
int live_blas_handles() { return blas_handles; }
void count_blas_handle(int change) { blas_handles += change; }

cudaError_t set_max_dynamic_shared(const void* kernel, cudaFuncAttribute attribute, int value) {
    if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        size_t(value) > internal::max_dynamic_shared_optin)
        return cudaErrorInvalidValue;
    dynamic_shared_limit[kernel] = size_t(value);
    return cudaSuccess;
}

cudaError_t function_attributes(const void* kernel, cudaFuncAttributes* attributes) {
    *attributes = {};
    attributes->maxThreadsPerBlock = int(internal::max_threads_per_block);
    attributes->maxDynamicSharedSizeBytes = int(internal::max_dynamic_shared(kernel));
    return cudaSuccess;
}

cudaError_t max_active_blocks(const void* kernel, int* blocks, int threads, size_t dynamic_shared_bytes) {
    if (threads <= 0 || unsigned(threads) > internal::max_threads_per_block) return cudaErrorInvalidValue;
    constexpr size_t shared_per_multiprocessor = 228 * 1024, reserved_per_block = 1024;
    const size_t by_threads = 2048 / size_t(threads), by_count = 32,
                 by_shared = shared_per_multiprocessor / (dynamic_shared_bytes + reserved_per_block);
    *blocks = dynamic_shared_bytes > internal::max_dynamic_shared(kernel)
                  ? 0
                  : int(std::min(std::min(by_threads, by_count), by_shared));
    return cudaSuccess;
}

namespace internal {
void set_last_error(cudaError_t error) { last_error = error; }
void set_pending_fault(cudaError_t error) { pending_fault = error; }
bool take_injected_failure(const char* function) {
    if (failing_call != function) return false;
    failing_call.clear();
    return true;
}
bool take_injected_fault(const std::string& kernel_name) {
    // launch names are source text: "flash_forward_kernel<D>" matches "flash_forward_kernel"
    if (faulting_kernel.empty() || kernel_name.substr(0, kernel_name.find('<')) != faulting_kernel) return false;
    faulting_kernel.clear();
    return true;
}
size_t max_dynamic_shared(const void* kernel) {
    const auto it = dynamic_shared_limit.find(kernel);
    return it == dynamic_shared_limit.end() ? default_dynamic_shared : it->second;
}
}  // namespace internal

}  // namespace cuemu

using cuemu::internal::take_injected_failure;

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidValue;
    *prop = {};
    std::snprintf(prop->name, sizeof prop->name, "cuemu (the CUDA model on the CPU, H200 limits)");
    prop->sharedMemPerBlock = cuemu::internal::default_dynamic_shared;
    prop->sharedMemPerBlockOptin = cuemu::internal::max_dynamic_shared_optin;
    prop->multiProcessorCount = cuemu::internal::multiprocessors;
    prop->maxThreadsPerBlock = int(cuemu::internal::max_threads_per_block);
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
    if (take_injected_failure("cudaStreamCreateWithFlags")) return cudaErrorMemoryAllocation;
    *stream = new CUstream_st{++cuemu::streams};
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream == nullptr) return cudaErrorInvalidResourceHandle;
    delete stream;
    --cuemu::streams;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cuemu::take_pending_fault(); }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    if (take_injected_failure("cudaMalloc")) return cudaErrorMemoryAllocation;
    *ptr = std::malloc(bytes == 0 ? 1 : bytes);
    if (*ptr == nullptr) return cudaErrorMemoryAllocation;
    std::memset(*ptr, 0xff, bytes);
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    std::free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
    if (const cudaError_t fault = cuemu::take_pending_fault(); fault != cudaSuccess) return fault;
    std::memcpy(dst, src, bytes);
    cuemu::WorkCounts& counts = cuemu::internal::counts();
    (kind == cudaMemcpyHostToDevice ? counts.copies_in : kind == cudaMemcpyDeviceToHost ? counts.copies_out : counts.device_copies)++;
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
    std::memset(dst, value, bytes);
    ++cuemu::internal::counts().memsets;
    return cudaSuccess;
}

cudaError_t cudaGetLastError() {
    const cudaError_t error = cuemu::last_error;
    cuemu::last_error = cudaSuccess;
    return error;
}

const char* cudaGetErrorName(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    }
    return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        default: return cudaGetErrorName(error);
    }
}
