#include "autograd/tensor.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "autograd/device_ops.h"
#include "autograd/tensor_impl.h"

namespace attnlab {

namespace {
thread_local bool grad_mode = true;
}

std::string to_string(DType dtype) { return dtype == DType::f32 ? "float32" : "float64"; }
std::string to_string(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

std::string shape_str(const Shape& shape) {
    std::ostringstream out;
    out << '(';
    for (size_t i = 0; i < shape.size(); ++i) out << (i ? "," : "") << shape[i];
    out << ')';
    return out.str();
}

size_t numel_of(const Shape& shape) {
    size_t n = 1;
    for (size_t s : shape) n *= s;
    return n;
}

void fail(const std::string& op, const std::string& message) {
    throw Error("[" + op + "] " + message);
}

Shape to_shape(const Array<float>::shape_type& shape) { return Shape(shape.begin(), shape.end()); }

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
    if (a.dtype() != b.dtype())
        fail(op, "dtypes differ: " + to_string(a.dtype()) + " vs " + to_string(b.dtype()));
}

void check_defined(const char* op, const Tensor& t, const char* what) {
    if (!t.defined()) fail(op, std::string(what) + " is an undefined tensor");
}

// ---- construction ----

Tensor Tensor::full(const Shape& shape, double value, DType dtype, bool requires_grad) {
    return dispatch(dtype, [&]<class T>() {
        Array<T> a = make_array<T>(shape);
        a.fill(static_cast<T>(value));
        return wrap<T>(std::move(a), requires_grad);
    });
}
Tensor Tensor::zeros(const Shape& shape, DType dtype, bool requires_grad) {
    return full(shape, 0.0, dtype, requires_grad);
}
Tensor Tensor::ones(const Shape& shape, DType dtype, bool requires_grad) {
    return full(shape, 1.0, dtype, requires_grad);
}
Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::from_values(const std::vector<double>& values, const Shape& shape, DType dtype,
                           bool requires_grad) {
    if (values.size() != numel_of(shape))
        fail("from_values", std::to_string(values.size()) + " values for shape " + shape_str(shape));
    return dispatch(dtype, [&]<class T>() {
        Array<T> a = make_array<T>(shape);
        std::transform(values.begin(), values.end(), a.begin(),
                       [](double v) { return static_cast<T>(v); });
        return wrap<T>(std::move(a), requires_grad);
    });
}

// ---- graph teardown ----

// Freeing the last handle to a long chain would release parent after parent
// recursively and overflow the stack; instead unlink the nodes we own the last
// reference to and free them one at a time. Backward closures capture only
// tensors that are also in `parents`, so dropping a closure frees no node itself.
TensorImpl::~TensorImpl() {
    backward = nullptr;
    std::vector<Tensor> pending = std::move(parents);
    while (!pending.empty()) {
        Tensor node = std::move(pending.back());
        pending.pop_back();
        if (node.defined() && node.impl_ptr().use_count() == 1) {
            TensorImpl& impl = node.impl();
            impl.backward = nullptr;
            for (Tensor& p : impl.parents) pending.push_back(std::move(p));
            impl.parents.clear();
        }
    }
}

// ---- accessors ----

TensorImpl& Tensor::impl() const {
    if (!impl_) throw Error("[tensor] use of an undefined tensor");
    return *impl_;
}
const Shape& Tensor::shape() const { return impl().shape; }
size_t Tensor::numel() const { return numel_of(shape()); }
DType Tensor::dtype() const { return impl().dtype(); }
Device Tensor::device() const { return impl().device; }
bool Tensor::requires_grad() const { return impl().requires_grad; }
bool Tensor::is_leaf() const { return impl().op == nullptr; }
const char* Tensor::op_name() const { return impl().op; }

size_t Tensor::size(int axis) const {
    const int rank = static_cast<int>(dim());
    const int a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) fail("size", "axis " + std::to_string(axis) + " out of range for " + shape_str(shape()));
    return shape()[static_cast<size_t>(a)];
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
    if (!is_leaf() && !requires_grad)
        fail("set_requires_grad", "cannot turn off gradients of a non-leaf tensor; use detach()");
    impl().requires_grad = requires_grad;
    return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
void Tensor::zero_grad() { impl().grad.reset(); }

std::vector<double> Tensor::values() const {
    if (device() == Device::cuda) return device_values(impl());
    return std::visit([](const auto& a) { return std::vector<double>(a.begin(), a.end()); }, impl().data);
}

double Tensor::item() const {
    if (numel() != 1) fail("item", "tensor of shape " + shape_str(shape()) + " has " + std::to_string(numel()) + " elements, not 1");
    if (device() == Device::cuda) return values()[0];
    return std::visit([](const auto& a) { return static_cast<double>(*a.begin()); }, impl().data);
}

double Tensor::at(std::initializer_list<size_t> index) const {
    const Shape& s = shape();
    if (index.size() != s.size())
        fail("at", std::to_string(index.size()) + " indices for shape " + shape_str(s));
    size_t flat = 0, k = 0;
    for (size_t i : index) {
        if (i >= s[k]) fail("at", "index " + std::to_string(i) + " out of range for axis " + std::to_string(k) + " of " + shape_str(s));
        flat = flat * s[k] + i;
        ++k;
    }
    if (device() == Device::cuda) return values()[flat];
    return std::visit([flat](const auto& a) { return static_cast<double>(a.data()[flat]); }, impl().data);
}

Tensor Tensor::clone() const {
    if (device() == Device::cuda) return device_clone(impl());
    return std::visit([](const auto& a) {
        using A = std::decay_t<decltype(a)>;
        return wrap<typename A::value_type>(A(a));
    }, impl().data);
}

Tensor Tensor::detach() const { return clone(); }

Tensor Tensor::to(DType dtype) const {
    if (device() == Device::cuda) {
        if (dtype != DType::f32) fail("to", "tensors on the cuda device are float32 only");
        return clone();
    }
    return dispatch(dtype, [&]<class T>() {
        return std::visit([](const auto& a) { return wrap<T>(Array<T>(xt::cast<T>(a))); }, impl().data);
    });
}

void Tensor::assign(const Tensor& src) {
    if (src.shape() != shape())
        fail("assign", "source " + shape_str(src.shape()) + " does not match destination " + shape_str(shape()));
    if (device() == Device::cuda) return device_assign(impl(), src);
    const Tensor from = src.to(Device::cpu);
    std::visit([&](auto& dst) {
        using T = typename std::decay_t<decltype(dst)>::value_type;
        std::visit([&](const auto& s) { std::transform(s.begin(), s.end(), dst.begin(), [](auto v) { return static_cast<T>(v); }); },
                   from.impl().data);
    }, impl().data);
}

void Tensor::convert_(DType dtype) {
    if (!is_leaf()) fail("convert_", "only leaf tensors can change dtype in place");
    if (dtype == this->dtype()) return;
    if (device() == Device::cuda) fail("convert_", "tensors on the cuda device are float32 only");
    impl().data = to(dtype).impl().data;
    impl().grad.reset();
}

void Tensor::stack_(size_t members) {
    if (!is_leaf()) fail("stack_", "only leaf tensors can be stacked in place");
    if (device() == Device::cuda) fail("stack_", "stack the tensor on the cpu, then move it to the device");
    if (members == 0) fail("stack_", "no members");
    Shape shape{members};
    shape.insert(shape.end(), this->shape().begin(), this->shape().end());
    dispatch(dtype(), [&]<class T>() {
        const Array<T>& one = impl().array<T>();
        Array<T> stacked = make_array<T>(shape);
        for (size_t m = 0; m < members; ++m) std::copy(one.begin(), one.end(), stacked.data() + m * one.size());
        impl().data = std::move(stacked);
        return 0;
    });
    impl().shape = shape;
    impl().grad.reset();
}

namespace {

// The checks of set_member_values and add_member_grad: row m of `stacked` has member's shape.
size_t member_row_size(const char* op, const Tensor& stacked, size_t m, const Tensor& member) {
    const Shape& s = stacked.shape();
    if (s.empty() || m >= s[0] || Shape(s.begin() + 1, s.end()) != member.shape() || stacked.dtype() != member.dtype())
        fail(op, "member " + std::to_string(m) + " " + shape_str(member.shape()) + " " + to_string(member.dtype()) +
                     " is not a row of " + shape_str(s) + " " + to_string(stacked.dtype()));
    if (stacked.device() != member.device()) fail(op, "the stacked tensor and member " + std::to_string(m) + " are on different devices");
    return member.numel();
}

}  // namespace

void set_member_values(const Tensor& stacked, size_t m, const Tensor& member) {
    const size_t n = member_row_size("set_member_values", stacked, m, member);
    if (stacked.device() == Device::cuda) return device_set_member_values(stacked, m, member);
    dispatch(member.dtype(), [&]<class T>() {
        const T* src = member.impl().array<T>().data();
        std::copy(src, src + n, stacked.impl().array<T>().data() + m * n);
        return 0;
    });
}

void add_member_grad(const Tensor& stacked, size_t m, const Tensor& member) {
    const size_t n = member_row_size("add_member_grad", stacked, m, member);
    if (!stacked.impl().grad || !member.requires_grad()) return;
    if (stacked.device() == Device::cuda) return device_add_member_grad(stacked, m, member);
    dispatch(member.dtype(), [&]<class T>() {
        const T* row = stacked.impl().grad->array<T>().data() + m * n;
        Array<T> grad = make_array<T>(member.shape());
        std::copy(row, row + n, grad.data());
        accumulate_grad<T>(member, std::move(grad));
        return 0;
    });
}

// ---- backward ----

namespace {

// Reverse topological order of the graph below `root` (iterative: deep graphs
// such as long training chains must not overflow the stack). Holds owning
// pointers: freeing a node's parents during the pass must not free a node
// still waiting its turn.
std::vector<std::shared_ptr<TensorImpl>> reverse_topological(const std::shared_ptr<TensorImpl>& root) {
    std::vector<std::shared_ptr<TensorImpl>> order;
    std::unordered_set<TensorImpl*> visited;
    std::vector<std::pair<std::shared_ptr<TensorImpl>, size_t>> stack{{root, 0}};
    visited.insert(root.get());
    while (!stack.empty()) {
        auto& [node, next_parent] = stack.back();
        if (next_parent < node->parents.size()) {
            const Tensor& parent = node->parents[next_parent++];
            if (!parent.defined()) continue;
            const std::shared_ptr<TensorImpl>& p = parent.impl_ptr();
            if (p->requires_grad && visited.insert(p.get()).second) stack.push_back({p, 0});
        } else {
            order.push_back(node);
            stack.pop_back();
        }
    }
    std::reverse(order.begin(), order.end());
    return order;
}

}  // namespace

void Tensor::backward(const Tensor& seed, bool retain_graph) const {
    TensorImpl& root = impl();
    if (!root.requires_grad)
        fail("backward", "tensor of shape " + shape_str(root.shape) + " does not require grad");
    if (!seed.defined() && numel() != 1)
        fail("backward", "backward from a non-scalar of shape " + shape_str(root.shape) +
                             " needs a seed gradient of the same shape");
    if (seed.defined()) {
        if (seed.shape() != root.shape)
            fail("backward", "seed gradient " + shape_str(seed.shape()) + " for tensor " + shape_str(root.shape));
        check_same_dtype("backward", seed, *this);
    }
    if (root.device == Device::cuda) {
        // the seed to the device as it is, or ones
        const Tensor g = seed.defined() ? seed.to(Device::cuda).clone() : Tensor::ones(root.shape).to(Device::cuda);
        root.grad = g.impl_ptr();
    } else dispatch(root.dtype(), [&]<class T>() {
        Array<T> g = seed.defined() ? Array<T>(seed.impl().array<T>()) : Array<T>(make_array<T>(root.shape));
        if (!seed.defined()) g.fill(T(1));
        accumulate_grad<T>(*this, std::move(g));
    });

    NoGradGuard no_grad;  // gradients are values, not new graph
    for (const std::shared_ptr<TensorImpl>& node : reverse_topological(impl_ptr())) {
        if (!node->grad || node->op == nullptr) continue;  // leaves keep their gradient
        if (!node->backward)
            fail("backward", std::string("the graph through '") + node->op +
                                 "' was freed by an earlier backward(); pass retain_graph=true to it");
        node->backward(*node);
        if (!retain_graph) {
            node->backward = nullptr;
            node->parents.clear();
        }
        // Gradients of intermediate results are not kept (as in PyTorch), which
        // frees them as soon as they have been passed on.
        node->grad.reset();
    }
}

// ---- small value types ----

Indices::Indices(Shape shape_, std::vector<int32_t> values_) : shape(std::move(shape_)), values(std::move(values_)) {
    if (values.size() != numel_of(shape))
        fail("indices", std::to_string(values.size()) + " values for shape " + shape_str(shape));
}

Mask::Mask(Shape shape_, std::vector<uint8_t> values_) : shape(std::move(shape_)), values(std::move(values_)) {
    if (values.size() != numel_of(shape))
        fail("mask", std::to_string(values.size()) + " values for shape " + shape_str(shape));
}

Mask Mask::filled(const Shape& shape, bool value) {
    return Mask(shape, std::vector<uint8_t>(numel_of(shape), value ? 1 : 0));
}

// ---- grad mode ----

NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }
bool grad_enabled() { return grad_mode; }

}  // namespace attnlab
