// Turning CUDA runtime and cuBLAS status codes into attnlab::Error. Included by
// .cu files only (it includes CUDA headers).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "autograd/tensor.h"

namespace attnlab::cuda {

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

}  // namespace attnlab::cuda
