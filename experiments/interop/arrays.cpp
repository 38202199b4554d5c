#include "experiments/interop/arrays.h"

#include <algorithm>

namespace attnlab::interop {

Array array_of(const Tensor& t) {
    const std::vector<double> v = t.values();  // float32 storage: each value comes back exactly
    return {t.shape(), std::vector<float>(v.begin(), v.end())};
}

Tensor tensor_of(const Array& a) {
    return Tensor::from_values(std::vector<double>(a.values.begin(), a.values.end()), a.shape, DType::f32);
}

Array zeros(const Shape& shape) { return filled(shape, 0.0f); }

Array filled(const Shape& shape, float value) { return {shape, std::vector<float>(numel_of(shape), value)}; }

bool all_zero(const Array& a) {
    return std::all_of(a.values.begin(), a.values.end(), [](float v) { return v == 0.0f; });
}

Array reshaped(Array a, const Shape& shape) {
    if (numel_of(shape) != a.values.size()) fail("interop", "cannot view " + shape_str(a.shape) + " as " + shape_str(shape));
    a.shape = shape;
    return a;
}

Array transposed(const Array& a) {
    const size_t r = a.shape[0], c = a.shape[1];
    Array t{{c, r}, std::vector<float>(r * c)};
    for (size_t i = 0; i < r; ++i)
        for (size_t j = 0; j < c; ++j) t.values[j * r + i] = a.values[i * c + j];
    return t;
}

Array stacked(const std::vector<Array>& parts) {
    Array out{parts[0].shape, {}};
    out.shape[0] = 0;
    for (const Array& p : parts) {
        out.shape[0] += p.shape[0];
        out.values.insert(out.values.end(), p.values.begin(), p.values.end());
    }
    return out;
}

Array rows(const Array& a, size_t begin, size_t end) {
    const size_t row = a.values.size() / a.shape[0];
    Array out{a.shape, std::vector<float>(a.values.begin() + static_cast<std::ptrdiff_t>(begin * row),
                                          a.values.begin() + static_cast<std::ptrdiff_t>(end * row))};
    out.shape[0] = end - begin;
    return out;
}

Array columns(const Array& a, size_t begin, size_t end) {
    const size_t r = a.shape[0], c = a.shape[1], n = end - begin;
    Array out{{r, n}, std::vector<float>(r * n)};
    for (size_t i = 0; i < r; ++i)
        for (size_t j = 0; j < n; ++j) out.values[i * n + j] = a.values[i * c + begin + j];
    return out;
}

Array per_head_inputs(const Array& w, size_t heads, size_t d_head) {
    const size_t D = w.shape[1];
    Array out{{heads, D, d_head}, std::vector<float>(w.values.size())};
    for (size_t h = 0; h < heads; ++h)
        for (size_t c = 0; c < d_head; ++c)
            for (size_t i = 0; i < D; ++i) out.values[(h * D + i) * d_head + c] = w.values[(h * d_head + c) * D + i];
    return out;
}

Array from_per_head_inputs(const Array& w) {
    const size_t heads = w.shape[0], D = w.shape[1], d_head = w.shape[2];
    Array out{{heads * d_head, D}, std::vector<float>(w.values.size())};
    for (size_t h = 0; h < heads; ++h)
        for (size_t c = 0; c < d_head; ++c)
            for (size_t i = 0; i < D; ++i) out.values[(h * d_head + c) * D + i] = w.values[(h * D + i) * d_head + c];
    return out;
}

}  // namespace attnlab::interop
