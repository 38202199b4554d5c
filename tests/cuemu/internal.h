// State shared by the emulation's own files (not for the emulated sources).
#pragma once

#include <string>

#include "cuda_runtime.h"
#include "cuemu.h"

namespace cuemu::internal {

// A misuse of the programming model (divergent barrier, bad shuffle, deadlock):
// prints "[cuemu] <kernel> block (x,y,z): <what>" and aborts, as a kernel bug.
[[noreturn]] void model_error(const std::string& what);

void set_last_error(cudaError_t error);         // what the next cudaGetLastError returns
void set_pending_fault(cudaError_t error);      // what the next synchronising call returns
bool take_injected_failure(const char* function);  // fail_next_call(function) was armed: disarm, true
bool take_injected_fault(const std::string& kernel_name);
size_t max_dynamic_shared(const void* kernel);  // 48 KiB unless raised by cudaFuncSetAttribute
WorkCounts& counts();                           // work_counts() as the runtime and cuBLAS add to it

// H200 (sm_90) limits.
constexpr unsigned max_threads_per_block = 1024;
constexpr unsigned max_grid_x = 2147483647u, max_grid_yz = 65535;
constexpr size_t default_dynamic_shared = 48 * 1024, max_dynamic_shared_optin = 232448;  // 227 KiB
constexpr int multiprocessors = 132;

}  // namespace cuemu::internal
