#include "experiments/distributed/gradients.h"

#include <algorithm>
#include <string>

#include "autograd/tensor_impl.h"

namespace attnlab {

namespace {

size_t total_values(const NamedTensors& params) {
    size_t n = 0;
    for (const auto& [name, p] : params) {
        if (p.device() != Device::cpu || p.dtype() != DType::f32)
            throw Error("[gradients] " + name + ": only float32 parameters on the cpu are summed across ranks");
        n += p.numel();
    }
    return n;
}

}  // namespace

std::vector<float> pack_gradients(const NamedTensors& params) {
    const size_t values = total_values(params);
    std::vector<float> flat(values + params.size(), 0.0f);
    size_t at = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        const Tensor& p = params[i].second;
        if (const Tensor g = p.grad(); g.defined()) {
            const float* data = g.impl().array<float>().data();
            std::copy(data, data + p.numel(), flat.begin() + static_cast<std::ptrdiff_t>(at));
            flat[values + i] = 1.0f;
        }
        at += p.numel();
    }
    return flat;
}

void unpack_gradients(const NamedTensors& params, const std::vector<float>& flat) {
    const size_t values = total_values(params);
    if (flat.size() != values + params.size())
        throw Error("[gradients] a buffer of " + std::to_string(flat.size()) + " values for " + std::to_string(params.size()) +
                    " parameters of " + std::to_string(values) + " values");
    size_t at = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        Tensor p = params[i].second;
        const auto from = flat.begin() + static_cast<std::ptrdiff_t>(at);
        at += p.numel();
        if (flat[values + i] <= 0.0f) {
            p.zero_grad();
            continue;
        }
        if (!p.grad().defined()) p.impl().grad = Tensor::zeros(p.shape()).impl_ptr();
        std::copy(from, from + static_cast<std::ptrdiff_t>(p.numel()), p.grad().impl().array<float>().data());
    }
}

void add_into(std::vector<float>& left, const std::vector<float>& right) {
    for (size_t i = 0; i < left.size(); ++i) left[i] += right[i];
}

void add_into(std::vector<double>& left, const std::vector<double>& right) {
    for (size_t i = 0; i < left.size(); ++i) left[i] += right[i];
}

}  // namespace attnlab
