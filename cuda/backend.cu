// The real backend (compiled by nvcc when -DATTNLAB_CUDA=ON). A CUDA build
// must still run on a machine without a GPU, so nothing here assumes a device:
// probe() turns every runtime failure into a reason string.
#include "autograd/device/backend.h"

#include <cuda_runtime.h>

#include "autograd/tensor.h"

namespace attnlab::device {

bool built_with_cuda() { return true; }

DeviceInfo probe() {
    DeviceInfo info;
    int count = 0;
    // cudaErrorNoDevice, cudaErrorInsufficientDriver (no driver installed), ...
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count < 1) {
        // Reset the runtime's last error so a later cudaGetLastError() does not report this one.
        cudaGetLastError();
        std::string what = status != cudaSuccess ? cudaGetErrorString(status)
                                                 : "the runtime reports 0 devices";
        // Without any NVIDIA driver the runtime says "driver version is insufficient",
        // which sends people looking for the wrong fix; say both possibilities.
        if (status == cudaErrorInsufficientDriver)
            what += " (no NVIDIA driver loaded, or one older than this build's CUDA " +
                    std::to_string(CUDART_VERSION / 1000) + "." +
                    std::to_string(CUDART_VERSION % 1000 / 10) + " runtime)";
        info.reason = "no CUDA device present: " + what;
        return info;
    }
    cudaDeviceProp props{};
    const cudaError_t props_status = cudaGetDeviceProperties(&props, 0);
    if (props_status != cudaSuccess) {
        cudaGetLastError();
        info.reason = std::string("cannot query CUDA device 0: ") + cudaGetErrorString(props_status);
        return info;
    }
    info.available = true;
    info.device_count = count;
    info.name = props.name;
    return info;
}

void require_device(const std::string& where) {
    const DeviceInfo info = probe();
    if (!info.available) fail("cuda", where + ": " + info.reason);
}

}  // namespace attnlab::device
