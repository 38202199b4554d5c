// The resource probe: registers, spills, shared memory and blocks per
// multiprocessor of every attention kernel as compiled for this device,
// printed as a table for the GPU check's log (scripts/gpu_check.sh); each must
// fit at least one block on a multiprocessor. Skipped without a device (in the
// host emulation, registers and spills are unknown and print as 0).
#include <cstdio>

#include "attention_reference.h"

namespace attnlab::cuda_test {
namespace {

using CudaKernelResources = DeviceTest;

TEST_F(CudaKernelResources, EveryAttentionKernelFitsOnAMultiprocessor) {
    std::vector<device::KernelResources> kernels = device::flash_kernel_resources(*context);
    for (device::KernelResources& k : device::dense_kernel_resources(*context)) kernels.push_back(std::move(k));
    std::printf("%-32s %9s %11s %13s %14s %8s %14s\n", "kernel", "registers", "local bytes", "static shared",
                "dynamic shared", "threads", "blocks per SM");
    for (const device::KernelResources& k : kernels) {
        std::printf("%-32s %9d %11zu %13zu %14zu %8d %14d\n", k.name.c_str(), k.registers, k.local_bytes,
                    k.static_shared_bytes, k.dynamic_shared_bytes, k.threads, k.blocks_per_multiprocessor);
        EXPECT_GE(k.blocks_per_multiprocessor, 1) << k.name;
    }
}

}  // namespace
}  // namespace attnlab::cuda_test
