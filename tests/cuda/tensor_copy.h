// Float32 host Tensors to and from device buffers, over the copies of
// context.h, for the tests. Plain C++, compiled into test_cuda in both builds,
// test_device_host and the emulated suite.
#pragma once

#include "autograd/tensor.h"
#include "autograd/device/context.h"

namespace attnlab::device {

// A float32 tensor's values (row-major) in a new buffer of the context.
DeviceBuffer upload(Context& context, const Tensor& t);
// The buffer's first numel(shape) floats as a new tensor without a graph.
Tensor download(Context& context, const DeviceBuffer& buffer, const Shape& shape);

}  // namespace attnlab::device
