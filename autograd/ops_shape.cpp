// Shape ops. Every result is a contiguous row-major copy, so later ops never
// see strides; a transposed tensor is simply a permuted copy.
#include <algorithm>

#include "autograd/device_ops.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/shape.h"

namespace attnlab {

Tensor reshape(const Tensor& x, const Shape& shape) {
    constexpr const char* op = "reshape";
    check_defined(op, x, "input");
    if (numel_of(shape) != x.numel())
        fail(op, shape_str(x.shape()) + " -> " + shape_str(shape) + ": element counts differ");
    if (on_device(x)) return reshape_device(x, shape);
    const Shape in_shape = x.shape();
    return dispatch(x.dtype(), [&]<class T>() {
        Array<T> out = values_of<T>(x);
        out.reshape(shape);
        return record<T>(op, std::move(out), {x}, [x, in_shape](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] { Array<T> gx = g; gx.reshape(in_shape); return gx; });
        });
    });
}

namespace {

// out (batch, cols, rows) = in (batch, rows, cols) transposed per batch item, in
// 32 x 32 tiles so that reads and writes both stay in cache (xtensor's generic
// strided assignment took ~3 ns per element here, more than the GEMM it fed).
template <class T>
void transpose_last_two(const T* in, T* out, size_t batch, size_t rows, size_t cols) {
    constexpr size_t tile = 32;
    for (size_t b = 0; b < batch; ++b, in += rows * cols, out += rows * cols)
        for (size_t r0 = 0; r0 < rows; r0 += tile)
            for (size_t c0 = 0; c0 < cols; c0 += tile)
                for (size_t r = r0; r < std::min(rows, r0 + tile); ++r)
                    for (size_t c = c0; c < std::min(cols, c0 + tile); ++c) out[c * rows + r] = in[r * cols + c];
}

// Whether `order` swaps the last two axes and keeps the others in place.
bool swaps_last_two(const std::vector<size_t>& order) {
    const size_t n = order.size();
    if (n < 2 || order[n - 2] != n - 1 || order[n - 1] != n - 2) return false;
    for (size_t i = 0; i + 2 < n; ++i)
        if (order[i] != i) return false;
    return true;
}

// x permuted by `order`, as a contiguous array.
template <class T>
Array<T> permuted(const Array<T>& x, const std::vector<size_t>& order) {
    if (!swaps_last_two(order)) return Array<T>(xt::transpose(x, order));
    const Shape in = to_shape(x.shape());
    Shape out_shape = in;
    std::swap(out_shape[in.size() - 1], out_shape[in.size() - 2]);
    Array<T> out = make_array<T>(out_shape);
    const size_t rows = in[in.size() - 2], cols = in.back();
    transpose_last_two(x.data(), out.data(), x.size() / std::max<size_t>(rows * cols, 1), rows, cols);
    return out;
}

}  // namespace

Tensor permute(const Tensor& x, const std::vector<int>& order_in) {
    constexpr const char* op = "permute";
    check_defined(op, x, "input");
    const Shape& s = x.shape();
    if (order_in.size() != s.size())
        fail(op, std::to_string(order_in.size()) + " axes given for " + shape_str(s));
    std::vector<size_t> order;
    for (int a : order_in) order.push_back(normalize_axis(op, a, s));
    std::vector<size_t> inverse(order.size(), order.size());
    for (size_t i = 0; i < order.size(); ++i) {
        if (inverse[order[i]] != order.size()) fail(op, "repeated axis in permutation of " + shape_str(s));
        inverse[order[i]] = i;
    }
    if (on_device(x)) return permute_device(x, order);
    return dispatch(x.dtype(), [&]<class T>() {
        Array<T> out = permuted(values_of<T>(x), order);
        return record<T>(op, std::move(out), {x}, [x, inverse](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] { return permuted(g, inverse); });
        });
    });
}

Tensor transpose(const Tensor& x, int axis_a, int axis_b) {
    check_defined("transpose", x, "input");
    std::vector<int> order(x.dim());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::swap(order[normalize_axis("transpose", axis_a, x.shape())], order[normalize_axis("transpose", axis_b, x.shape())]);
    return permute(x, order);
}

Tensor slice(const Tensor& x, int axis_in, size_t start, size_t stop) {
    constexpr const char* op = "slice";
    check_defined(op, x, "input");
    const size_t axis = normalize_axis(op, axis_in, x.shape());
    const Shape in_shape = x.shape();
    if (start > stop || stop > in_shape[axis])
        fail(op, "[" + std::to_string(start) + ", " + std::to_string(stop) + ") out of range for axis " +
                     std::to_string(axis) + " of " + shape_str(in_shape));
    const AxisSplit split = split_at_axis(in_shape, axis);
    const size_t width = stop - start;
    Shape out_shape = in_shape;
    out_shape[axis] = width;
    if (on_device(x))  // along the first axis a view, else a copy
        return axis == 0 ? slice_rows_device(x, start, stop, out_shape) : slice_device(x, axis, start, stop, out_shape);
    return dispatch(x.dtype(), [&]<class T>() {
        // Each outer index owns one contiguous block of `width * inner` values.
        const Array<T>& X = values_of<T>(x);
        Array<T> out = make_array<T>(out_shape);
        for (size_t o = 0; o < split.outer; ++o)
            std::copy_n(X.data() + (o * split.n + start) * split.inner, width * split.inner,
                        out.data() + o * width * split.inner);
        return record<T>(op, std::move(out), {x}, [x, split, start, width, in_shape](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] {
                Array<T> gx = make_array<T>(in_shape);
                gx.fill(T(0));
                for (size_t o = 0; o < split.outer; ++o)
                    std::copy_n(g.data() + o * width * split.inner, width * split.inner,
                                gx.data() + (o * split.n + start) * split.inner);
                return gx;
            });
        });
    });
}

Tensor concat(const std::vector<Tensor>& parts, int axis_in) {
    constexpr const char* op = "concat";
    if (parts.empty()) fail(op, "no tensors to concatenate");
    for (const Tensor& p : parts) check_defined(op, p, "part");
    const Shape& first = parts[0].shape();
    const size_t axis = normalize_axis(op, axis_in, first);
    Shape out_shape = first;
    out_shape[axis] = 0;
    for (const Tensor& p : parts) {
        check_same_dtype(op, parts[0], p);
        Shape a = p.shape(), b = first;
        if (a.size() != b.size()) fail(op, shape_str(first) + " and " + shape_str(p.shape()) + ": ranks differ");
        a[axis] = b[axis] = 0;
        if (a != b) fail(op, shape_str(first) + " and " + shape_str(p.shape()) + ": sizes differ off axis " + std::to_string(axis));
        out_shape[axis] += p.shape()[axis];
    }
    for (const Tensor& p : parts) check_same_device(op, {&parts[0], &p});
    if (on_device(parts[0])) return concat_device(parts, axis, out_shape);
    const AxisSplit out_split = split_at_axis(out_shape, axis);
    return dispatch(parts[0].dtype(), [&]<class T>() {
        Array<T> out = make_array<T>(out_shape);
        size_t offset = 0;  // along the axis
        std::vector<size_t> offsets;
        for (const Tensor& p : parts) {
            const size_t n = p.shape()[axis];
            const Array<T>& P = values_of<T>(p);
            for (size_t o = 0; o < out_split.outer; ++o)
                std::copy_n(P.data() + o * n * out_split.inner, n * out_split.inner,
                            out.data() + (o * out_split.n + offset) * out_split.inner);
            offsets.push_back(offset);
            offset += n;
        }
        return record<T>(op, std::move(out), parts, [parts, offsets, out_split, axis](const Array<T>& g, const Array<T>&) {
            for (size_t i = 0; i < parts.size(); ++i) {
                send_grad<T>(parts[i], [&] {
                    const size_t n = parts[i].shape()[axis];
                    Array<T> gp = make_array<T>(parts[i].shape());
                    for (size_t o = 0; o < out_split.outer; ++o)
                        std::copy_n(g.data() + (o * out_split.n + offsets[i]) * out_split.inner, n * out_split.inner,
                                    gp.data() + o * n * out_split.inner);
                    return gp;
                });
            }
        });
    });
}

std::vector<Tensor> split(const Tensor& x, const std::vector<size_t>& sizes, int axis_in) {
    check_defined("split", x, "input");
    const size_t axis = normalize_axis("split", axis_in, x.shape());
    size_t total = 0;
    for (size_t s : sizes) total += s;
    if (total != x.shape()[axis])
        fail("split", "sizes add up to " + std::to_string(total) + " but axis " + std::to_string(axis) + " of " +
                          shape_str(x.shape()) + " has " + std::to_string(x.shape()[axis]));
    std::vector<Tensor> parts;
    size_t start = 0;
    for (size_t s : sizes) {
        parts.push_back(slice(x, static_cast<int>(axis), start, start + s));
        start += s;
    }
    return parts;
}

void add_shape_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(13);
    auto in = [&](const Shape& s) { return gradcheck_input(rng, s); };
    using V = const std::vector<Tensor>&;
    cases.push_back({"reshape", "(2,3,4) -> (6,4)", {in({2, 3, 4})}, [](V t) { return reshape(t[0], {6, 4}); }});
    cases.push_back({"reshape", "(2,3) -> (3,1,2)", {in({2, 3})}, [](V t) { return reshape(t[0], {3, 1, 2}); }});
    cases.push_back({"permute", "(2,3,4) by (2,0,1)", {in({2, 3, 4})}, [](V t) { return permute(t[0], {2, 0, 1}); }});
    cases.push_back({"transpose", "(2,3,4) axes -1,-2", {in({2, 3, 4})}, [](V t) { return transpose(t[0], -1, -2); }});
    cases.push_back({"slice", "axis 1 [1,3) of (2,4,3)", {in({2, 4, 3})}, [](V t) { return slice(t[0], 1, 1, 3); }});
    cases.push_back({"slice", "transposed input, axis 0", {in({3, 4})},
                     [](V t) { return slice(transpose(t[0], 0, 1), 0, 1, 3); }});
    cases.push_back({"concat", "axis 1 of (2,1,3),(2,2,3)", {in({2, 1, 3}), in({2, 2, 3})},
                     [](V t) { return concat({t[0], t[1]}, 1); }});
    cases.push_back({"concat", "axis 0 with a transposed part", {in({2, 3}), in({3, 2})},
                     [](V t) { return concat({t[0], transpose(t[1], 0, 1)}, 0); }});
    cases.push_back({"split", "(5,2) into 2+3 along 0, recombined", {in({5, 2})}, [](V t) {
        std::vector<Tensor> p = split(t[0], {2, 3}, 0);
        return concat({mul(p[1], p[1]), p[0]}, 0);
    }});
}

}  // namespace attnlab
