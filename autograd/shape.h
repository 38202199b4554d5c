// Shape rules shared by forward and backward passes: broadcasting, reducing a
// broadcast gradient back to its input's shape, and axis normalisation.
#pragma once

#include <algorithm>
#include <vector>

#include "autograd/tensor_impl.h"

namespace attnlab {

// NumPy broadcasting of two shapes; throws "[op] (2,3) and (4,3): cannot broadcast".
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// Maps a possibly negative axis into [0, rank); throws "[op] axis 3 out of range for (2,3)".
size_t normalize_axis(const char* op, int axis, const Shape& shape);

// Sorted, unique, normalised axes; empty `axes` means every axis.
std::vector<size_t> normalize_axes(const char* op, const std::vector<int>& axes, const Shape& shape);

// Sums `grad` (of a broadcast result's shape) down to `shape`: the one function
// every broadcasting op uses for its backward. Returns grad itself (moved) when
// the shapes already agree.
template <class T> Array<T> unbroadcast(Array<T> grad, const Shape& shape);

// out[i] = sum over r of term(r * n + i), for i < n: a (rows, n) array's rows
// added in order, each element given by term (its flat index -> value). Blocks
// of 16 columns keep their sums in registers across the rows.
template <class T, class Term> void sum_rows_of(size_t rows, size_t n, T* out, Term term) {
    constexpr size_t kBlock = 16;
    for (size_t i0 = 0; i0 < n; i0 += kBlock) {
        const size_t width = std::min(kBlock, n - i0);
        T acc[kBlock] = {};
        if (width == kBlock) {  // constant bounds: the compiler keeps acc in vector registers
            for (size_t r = 0; r < rows; ++r)
                for (size_t j = 0; j < kBlock; ++j) acc[j] += term(r * n + i0 + j);
        } else {
            for (size_t r = 0; r < rows; ++r)
                for (size_t j = 0; j < width; ++j) acc[j] += term(r * n + i0 + j);
        }
        std::copy(acc, acc + width, out + i0);
    }
}

// out[i] = sum over r of x[r * n + i]: the rows of x (rows, n) added in order,
// which is what summing leading axes is (a bias's gradient, unbroadcast).
template <class T> void sum_rows(const T* x, size_t rows, size_t n, T* out);

// True when `inner` is `outer` with some leading axes removed: (T,D) in (B,T,D), () in anything.
bool is_trailing(const Shape& inner, const Shape& outer);

// (outer, n, inner) view of a shape around one axis, for loops over that axis.
struct AxisSplit {
    size_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at_axis(const Shape& shape, size_t axis);

}  // namespace attnlab
