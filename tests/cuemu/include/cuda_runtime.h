// cuemu's stand-in for the CUDA runtime API: the calls attnlab makes, with the
// same signatures and error codes. Device memory is host memory (exact-size,
// NaN-filled); streams are ordered by construction (everything is synchronous),
// but a fault injected into a kernel is reported only at the next
// synchronising call, as an asynchronous fault is on a GPU.
#pragma once

#include <cstddef>

#include "cuemu.h"

#define CUDART_VERSION 13000

struct CUstream_st {
    int id;
};
typedef CUstream_st* cudaStream_t;

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
};
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaStreamNonBlocking 0x01

struct cudaDeviceProp {
    char name[256];
    size_t sharedMemPerBlock, sharedMemPerBlockOptin;
    int multiProcessorCount, maxThreadsPerBlock;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);

// Registers and local memory are the compiler's: unknown here (0). Occupancy
// counts the limits the emulation knows: 2048 threads, 32 blocks and 228 KiB of
// shared memory per multiprocessor (1 KiB of it reserved per block).
struct cudaFuncAttributes {
    size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, maxDynamicSharedSizeBytes;
};

namespace cuemu {
cudaError_t set_max_dynamic_shared(const void* kernel, cudaFuncAttribute attribute, int value);
cudaError_t function_attributes(const void* kernel, cudaFuncAttributes* attributes);
cudaError_t max_active_blocks(const void* kernel, int* blocks, int threads, size_t dynamic_shared_bytes);
}  // namespace cuemu
template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attribute, int value) {
    return cuemu::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), attribute, value);
}
template <class Kernel>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, Kernel* kernel) {
    return cuemu::function_attributes(reinterpret_cast<const void*>(kernel), attributes);
}
template <class Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel* kernel, int threads,
                                                          size_t dynamic_shared_bytes) {
    return cuemu::max_active_blocks(reinterpret_cast<const void*>(kernel), blocks, threads, dynamic_shared_bytes);
}
