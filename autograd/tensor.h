// Tensor: an n-dimensional float32/float64 array with an optional place in a
// define-by-run autograd graph. This header is deliberately free of xtensor so
// that code using tensors compiles fast; the storage lives in tensor_impl.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnlab {

enum class DType { f32, f64 };
enum class Device { cpu, cuda };

using Shape = std::vector<size_t>;

std::string to_string(DType dtype);   // "float32" | "float64"
std::string to_string(Device device); // "cpu" | "cuda"
std::string shape_str(const Shape& shape);  // "(2,3)"; "()" for a scalar
size_t numel_of(const Shape& shape);

// Every misuse of an op (shapes, dtypes, indices) throws this; the message
// starts with the op's name in brackets, e.g. "[matmul] (2,3) @ (4,5): ...".
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& op, const std::string& message);

struct TensorImpl;
class Tensor;

// Moves leaves (a model's parameters) to `device` in place, every handle seeing
// it; their gradients are dropped. To the cuda device they go as one flat block
// of values and one of gradients, matrices first, so that an optimiser updates
// them all with one kernel (optim/optimizer.h). float32 only.
void move_to(const std::vector<Tensor>& leaves, Device device);

class Tensor {
public:
    Tensor() = default;  // undefined: no storage (used for "no gradient", "no bias")
    explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

    static Tensor zeros(const Shape& shape, DType dtype = DType::f32, bool requires_grad = false);
    static Tensor ones(const Shape& shape, DType dtype = DType::f32, bool requires_grad = false);
    static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                       bool requires_grad = false);
    static Tensor scalar(double value, DType dtype = DType::f32);
    // values in row-major order; their count must equal the shape's element count
    static Tensor from_values(const std::vector<double>& values, const Shape& shape,
                              DType dtype = DType::f32, bool requires_grad = false);

    bool defined() const { return impl_ != nullptr; }
    const Shape& shape() const;
    size_t dim() const { return shape().size(); }
    size_t size(int axis) const;  // negative axes count from the end
    size_t numel() const;
    DType dtype() const;
    Device device() const;

    bool requires_grad() const;
    Tensor& set_requires_grad(bool requires_grad);
    bool is_leaf() const;           // not produced by a recorded op
    const char* op_name() const;    // the op that produced it, or nullptr for a leaf
    Tensor grad() const;            // undefined until a backward pass reaches it
    void zero_grad();               // drops the accumulated gradient

    // Reverse-mode pass from this tensor. A non-scalar needs `seed` (same shape).
    // The graph is freed afterwards unless `retain_graph`.
    void backward(const Tensor& seed = Tensor(), bool retain_graph = false) const;

    std::vector<double> values() const;     // row-major copy, converted to double
    double item() const;                    // the value of a one-element tensor
    double at(std::initializer_list<size_t> index) const;
    Tensor detach() const;                  // same values, no graph, no grad
    Tensor clone() const;                   // a copy of the values, no graph
    Tensor to(DType dtype) const;           // a converted copy, no graph
    // A copy on `device`, no graph (only float32 goes to the cuda device); this
    // tensor itself when it is there already.
    Tensor to(Device device) const;
    // Overwrites this tensor's values with src's (same shape; dtype converted), in
    // place: every handle to this tensor sees them. Not recorded in the graph.
    void assign(const Tensor& src);
    // Converts the storage of this leaf in place (every handle sees the new dtype);
    // drops its gradient. For moving a model's parameters to float64 and back.
    void convert_(DType dtype);
    // Gives this leaf (on the cpu) a leading axis of `members` copies of its values,
    // in place: every handle sees the (members, ...) tensor; drops its gradient. How
    // a module becomes stacked members (Module::stack_members).
    void stack_(size_t members);

    TensorImpl& impl() const;
    const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
    bool same(const Tensor& other) const { return impl_ == other.impl_; }

private:
    std::shared_ptr<TensorImpl> impl_;
};

// Stacked members (train.seeds): row m of a stacked leaf (members, ...) and one
// member's own tensor of the row's shape. set_member_values copies the member's values
// into the row; add_member_grad adds the row's gradient (if any) to the member's, as a
// backward pass would. Both on the cpu or both on the device.
void set_member_values(const Tensor& stacked, size_t m, const Tensor& member);
void add_member_grad(const Tensor& stacked, size_t m, const Tensor& member);

// Integer tensors that are inputs only (token ids, class targets): they never
// carry gradients, so they are plain row-major vectors with a shape.
struct Indices {
    Shape shape;
    std::vector<int32_t> values;
    Indices() = default;
    Indices(Shape shape_, std::vector<int32_t> values_);
};

// Boolean tensors (masks). What `true` means is fixed by each op that takes one:
// masked_fill fills where true; attention masks use true = eligible key.
struct Mask {
    Shape shape;
    std::vector<uint8_t> values;
    Mask() = default;
    Mask(Shape shape_, std::vector<uint8_t> values_);
    static Mask filled(const Shape& shape, bool value);
    bool operator()(size_t flat_index) const { return values[flat_index] != 0; }
};

// Turns recording off for its lifetime (evaluation, optimiser updates).
class NoGradGuard {
public:
    NoGradGuard();
    ~NoGradGuard();
    NoGradGuard(const NoGradGuard&) = delete;
    NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
    bool previous_;
};
bool grad_enabled();

}  // namespace attnlab
