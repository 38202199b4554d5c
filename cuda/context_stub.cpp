// Compiled in place of context.cu without CUDA: no Context can be made, so no
// buffer is ever allocated; the other definitions exist only to link.
#include "autograd/device/backend.h"
#include "autograd/device/context.h"
#include "autograd/tensor.h"

namespace attnlab::device {

namespace {
[[noreturn]] void refuse(const std::string& where) { fail("cuda", where + ": " + probe().reason); }
}  // namespace

DeviceBuffer DeviceAllocator::allocate(size_t bytes) {
    if (bytes == 0) return {};
    refuse("allocate");
}
void DeviceAllocator::recycle(void*, size_t) {}
void DeviceAllocator::empty_cache() {}
DeviceAllocator::~DeviceAllocator() = default;

Context::Context(int device) : device_(device) { refuse("Context"); }
Context::~Context() = default;
void Context::synchronize(const char*) const {}

DeviceBuffer to_device(Context&, const void*, size_t) { refuse("to_device"); }
DeviceBuffer to_device(Context&, const std::vector<float>&) { refuse("to_device"); }
void to_host(Context&, const DeviceBuffer&, void*, size_t) { refuse("to_host"); }
std::vector<float> to_host_floats(Context&, const DeviceBuffer&, size_t) { refuse("to_host"); }
void copy_to_device(Context&, const void*, void*, size_t) { refuse("copy_to_device"); }
void copy_to_host(Context&, const void*, void*, size_t) { refuse("copy_to_host"); }
void copy_device(Context&, const void*, void*, size_t) { refuse("copy_device"); }

}  // namespace attnlab::device
