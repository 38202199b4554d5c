// Turning CUDA runtime and cuBLAS status codes into attnlab::Error. Included by
// .cu files only (it includes CUDA headers).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "autograd/tensor.h"
#include "autograd/device/attention.h"

namespace attnlab::device {

inline void check_cuda(cudaError_t status, const std::string& where) {
    if (status == cudaSuccess) return;
    cudaGetLastError();  // clear a sticky-free error so the next call does not see it again
    fail("cuda", where + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

inline void check_cublas(cublasStatus_t status, const std::string& where) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fail("cuda", where + ": cuBLAS " + cublasGetStatusName(status) + ": " + cublasGetStatusString(status));
}

// After a kernel launch: a bad configuration (too much shared memory, too many
// threads) is reported here; faults inside the kernel surface at the next sync.
inline void check_launch(const std::string& where) { check_cuda(cudaGetLastError(), where); }

// The resources of one kernel (KernelResources, autograd/device/attention.h), at a launch
// of `threads` per block with `dynamic_shared_bytes` (raised first where above 48 KiB).
template <class Kernel>
KernelResources resources_of(const char* name, Kernel* kernel, int threads, size_t dynamic_shared_bytes) {
    const std::string where = std::string("kernel_resources: ") + name;
    cudaFuncAttributes attributes{};
    check_cuda(cudaFuncGetAttributes(&attributes, kernel), where);
    if (dynamic_shared_bytes > 48 * 1024)
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic_shared_bytes)),
                   where);
    int blocks = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, dynamic_shared_bytes), where);
    return {name, attributes.numRegs, attributes.localSizeBytes, attributes.sharedSizeBytes, dynamic_shared_bytes,
            threads, blocks};
}

}  // namespace attnlab::device
