#include "tensor_copy.h"

#include "autograd/tensor_impl.h"

namespace attnlab::device {

DeviceBuffer upload(Context& context, const Tensor& t) {
    if (t.dtype() != DType::f32) fail("cuda", "upload: the device holds float32, got " + to_string(t.dtype()));
    return to_device(context, values_of<float>(t).data(), t.numel() * sizeof(float));
}

Tensor download(Context& context, const DeviceBuffer& buffer, const Shape& shape) {
    Array<float> values = make_array<float>(shape);
    to_host(context, buffer, values.data(), values.size() * sizeof(float));
    return wrap<float>(std::move(values));
}

}  // namespace attnlab::device
