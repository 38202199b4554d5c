// Compiled in place of backend.cu when attnlab is configured without CUDA
// (-DATTNLAB_CUDA=OFF, the default): every device request is refused, saying why.
#include "autograd/device/backend.h"

#include "autograd/tensor.h"

namespace attnlab::device {

bool built_with_cuda() { return false; }

DeviceInfo probe() {
    DeviceInfo info;
    info.reason = "attnlab was built without CUDA (configure with -DATTNLAB_CUDA=ON)";
    return info;
}

void require_device(const std::string& where) {
    const DeviceInfo info = probe();
    if (!info.available) fail("cuda", where + ": " + info.reason);
}

}  // namespace attnlab::device
