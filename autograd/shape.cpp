#include "autograd/shape.h"

#include <algorithm>

namespace attnlab {

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
    const size_t rank = std::max(a.size(), b.size());
    Shape out(rank);
    for (size_t i = 0; i < rank; ++i) {
        // align from the right
        const size_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const size_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
            fail(op, shape_str(a) + " and " + shape_str(b) + ": cannot broadcast");
        out[i] = da == 1 ? db : da;
    }
    return out;
}

size_t normalize_axis(const char* op, int axis, const Shape& shape) {
    const int rank = static_cast<int>(shape.size());
    const int a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        fail(op, "axis " + std::to_string(axis) + " out of range for " + shape_str(shape));
    return static_cast<size_t>(a);
}

std::vector<size_t> normalize_axes(const char* op, const std::vector<int>& axes, const Shape& shape) {
    std::vector<size_t> out;
    if (axes.empty()) {
        for (size_t i = 0; i < shape.size(); ++i) out.push_back(i);
        return out;
    }
    for (int axis : axes) out.push_back(normalize_axis(op, axis, shape));
    std::sort(out.begin(), out.end());
    if (std::adjacent_find(out.begin(), out.end()) != out.end())
        fail(op, "repeated axis for " + shape_str(shape));
    return out;
}

bool is_trailing(const Shape& inner, const Shape& outer) {
    return inner.size() <= outer.size() && std::equal(inner.begin(), inner.end(), outer.end() - static_cast<long>(inner.size()));
}

template <class T> void sum_rows(const T* x, size_t rows, size_t n, T* out) {
    sum_rows_of(rows, n, out, [x](size_t e) { return x[e]; });
}

template void sum_rows(const float*, size_t, size_t, float*);
template void sum_rows(const double*, size_t, size_t, double*);

template <class T> Array<T> unbroadcast(Array<T> grad, const Shape& shape) {
    const Shape grad_shape = to_shape(grad.shape());
    if (grad_shape == shape) return grad;
    if (is_trailing(shape, grad_shape)) {  // only leading axes to sum: rows of `shape` added in order
        Array<T> summed = make_array<T>(shape);
        const size_t n = summed.size(), rows = grad.size() / std::max<size_t>(n, 1);
        sum_rows<T>(grad.data(), rows, n, summed.data());
        return summed;
    }
    // Axes to sum: the leading ones the input lacks, and those where it has size 1.
    const size_t lead = grad_shape.size() - shape.size();
    std::vector<size_t> axes;
    for (size_t i = 0; i < grad_shape.size(); ++i)
        if (i < lead || (shape[i - lead] == 1 && grad_shape[i] != 1)) axes.push_back(i);
    Array<T> summed = xt::sum(grad, axes);  // evaluated here, never kept lazy
    summed.reshape(shape);
    return summed;
}

template Array<float> unbroadcast(Array<float>, const Shape&);
template Array<double> unbroadcast(Array<double>, const Shape&);

AxisSplit split_at_axis(const Shape& shape, size_t axis) {
    AxisSplit s;
    for (size_t i = 0; i < axis; ++i) s.outer *= shape[i];
    s.n = shape[axis];
    for (size_t i = axis + 1; i < shape.size(); ++i) s.inner *= shape[i];
    return s;
}

}  // namespace attnlab
