// Float32 arrays as other tools lay out a model's matrices, and the moves between
// their layouts and attnlab's: what export.cpp writes and import.cpp reads.
// Row-major (C order) throughout.
#pragma once

#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab::interop {

struct Array {
    Shape shape;
    std::vector<float> values;
};

Array array_of(const Tensor& t);  // a float32 parameter's values, exactly
Tensor tensor_of(const Array& a);  // float32
Array zeros(const Shape& shape);
Array filled(const Shape& shape, float value);
bool all_zero(const Array& a);

// The same values under another shape of the same size.
Array reshaped(Array a, const Shape& shape);
// (r, c) -> (c, r): nn.Linear's [out, in] as GPT-2's Conv1D and TransformerLens's [in, out], and back.
Array transposed(const Array& a);
// Arrays stacked along their first axis: q, k, v [D, D] each -> [3D, D]; biases [D] -> [3D].
Array stacked(const std::vector<Array>& parts);
// Rows [begin, end) of the first axis (the inverse of stacked).
Array rows(const Array& a, size_t begin, size_t end);
// Columns [begin, end) of a matrix (r, c) -> (r, end - begin): GPT-2's c_attn [D, 3D] split into q, k, v.
Array columns(const Array& a, size_t begin, size_t end);

// A projection [h d_h, D] (head h's outputs are rows h d_h .. h d_h + d_h - 1, as
// attnlab splits them) as [h, D, d_h]: TransformerLens's W_Q, W_K, W_V; and back.
Array per_head_inputs(const Array& w, size_t heads, size_t d_head);
Array from_per_head_inputs(const Array& w);  // [h, D, d_h] -> [h d_h, D]

}  // namespace attnlab::interop
