// The device branches of linear (and linears), add, gelu and relu, reshape, slice and concat
// (autograd/ops.h has each op's contract; the op itself validates its inputs
// and calls the branch here when they are on the device). Forward beside backward.
#include <algorithm>

#include "autograd/device_ops.h"
#include "autograd/ops.h"
#include "autograd/shape.h"

namespace attnlab {

// y (rows, out) = x (rows, in) W^T + b: the bias starts y, one GEMM adds onto it.
Tensor linear_device(const Tensor& x, const Tensor& weight, const Tensor& bias, const Shape& out_shape) {
    const size_t in = weight.size(1), out_features = weight.size(0), rows = x.numel() / std::max<size_t>(in, 1);
    Tensor out = device_tensor(out_shape);
    device::linear_forward(device_context(), rows, out_features, in, device_in(x), device_in(weight), device_in(bias),
                         device_out(out));
    return record_device("linear", out, {x, weight, bias}, [x, weight, bias, rows, in, out_features](const Tensor& g, const float*) {
        // dX (+)= g W; dW += g^T X; db += column sums of g (the kernel adds into both)
        const GradTarget gx = grad_target(x);
        Tensor unwanted;
        float* gw = grad_to_add_or_scratch(weight, unwanted);
        device::linear_backward(device_context(), rows, out_features, in, device_in(x), device_in(weight), device_in(g),
                              gx.data, gx.accumulate, gw, grad_to_add(bias));
    });
}

// Stacked members: block m of x's rows (member_rows[m] of them) through weight m
// (K, out, in) and bias m. Equal blocks are one batched GEMM each way for every
// member; blocks of different sizes take one GEMM each.
Tensor linear_members_device(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const std::vector<size_t>& member_rows, const Shape& out_shape) {
    const size_t members = weight.size(0), out_features = weight.size(1), in = weight.size(2);
    const bool equal = std::all_of(member_rows.begin(), member_rows.end(), [&](size_t n) { return n == member_rows.front(); });
    // each call's (first member, members, rows of each): one for equal blocks, else one per nonempty block
    struct Call { size_t member, count, rows, first_row; };
    std::vector<Call> calls;
    if (equal) {
        if (member_rows.front() > 0) calls.push_back({0, members, member_rows.front(), 0});
    } else {
        for (size_t m = 0, first = 0; m < members; first += member_rows[m], ++m)
            if (member_rows[m] > 0) calls.push_back({m, 1, member_rows[m], first});
    }
    const auto weight_of = [=](auto* W, const Call& c) { return W + c.member * out_features * in; };
    const auto bias_of = [=](auto* b, const Call& c) { return b ? b + c.member * out_features : b; };
    Tensor out = device_tensor(out_shape);
    for (const Call& c : calls)
        device::linear_members_forward(device_context(), c.count, c.rows, out_features, in, device_in(x) + c.first_row * in,
                                       weight_of(device_in(weight), c), bias_of(device_in(bias), c),
                                       device_out(out) + c.first_row * out_features);
    return record_device("linear", out, {x, weight, bias}, [=](const Tensor& g, const float*) {
        // dX_m (+)= g_m W_m; dW_m += g_m^T X_m; db_m += column sums of g_m
        const GradTarget gx = grad_target(x);
        Tensor unwanted;
        float* gw = grad_to_add_or_scratch(weight, unwanted);
        float* gb = grad_to_add(bias);
        for (const Call& c : calls)
            device::linear_members_backward(device_context(), c.count, c.rows, out_features, in, device_in(x) + c.first_row * in,
                                            weight_of(device_in(weight), c), device_in(g) + c.first_row * out_features,
                                            gx ? gx.data + c.first_row * in : nullptr, gx.accumulate, weight_of(gw, c),
                                            bias_of(gb, c));
    });
}

namespace {

// Whether projection j can join the run that projection i (= j - 1) ends: the
// same weight shape, the weight (and bias) right after i's in the same block,
// the same gradient wants.
bool follows(const std::vector<Tensor>& weights, const std::vector<Tensor>& biases, size_t i, size_t j) {
    const auto next_to = [](const Tensor& a, const Tensor& b) {
        return a.impl().device_block == b.impl().device_block && a.impl().device_data + a.numel() == b.impl().device_data &&
               a.requires_grad() == b.requires_grad();
    };
    if (weights[i].shape() != weights[j].shape() || !next_to(weights[i], weights[j])) return false;
    if (biases[i].defined() != biases[j].defined()) return false;
    return !biases[i].defined() || next_to(biases[i], biases[j]);
}

// The gradient slots of a run's parameters when they lie side by side (the
// flat gradient block of Module::to), else null: the run's backward then goes
// one projection at a time.
float* run_grads(const std::vector<Tensor>& params, size_t first, size_t count, std::vector<Tensor>& scratch,
                 bool scratch_if_unwanted) {
    std::vector<float*> slots;
    for (size_t i = first; i < first + count; ++i) {
        scratch.emplace_back();
        slots.push_back(scratch_if_unwanted ? grad_to_add_or_scratch(params[i], scratch.back()) : grad_to_add(params[i]));
    }
    for (size_t i = 1; i < count; ++i)
        if (slots[i] == nullptr || slots[i] != slots[0] + i * params[first].numel()) return nullptr;
    return slots[0];
}

// The sizes of a run of G projections: W_g (N, in), x (rows, in); with stacked
// members (members > 1) W_g (members, N, in) and x's rows members equal blocks.
struct Run {
    size_t first, G, rows, in, N, members = 1;
};

// The backward of a run from y's gradient g (G, rows, N): dx (+)= sum_g g_g W_g,
// dW_g += g_g^T x, db_g += column sums of g_g, in one batched call when the
// parameters' gradient slots lie side by side (else one projection at a time).
void run_backward(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases, const Run& r,
                  std::vector<bool>& written, const Tensor& g) {
    device::Context& context = device_context();
    const size_t part = r.rows * r.N;
    for (size_t i = 0; i < r.G; ++i)  // a part nothing depended on has no gradient written: zero
        if (!written[i]) device::fill_zero(context, device_out(g) + i * part, part * sizeof(float));
    std::fill(written.begin(), written.end(), false);
    const GradTarget gx = grad_target(x);
    if (r.members > 1) {  // stacked: each projection batched over the members, dx summed in the solo run's order
        for (size_t i = 0; i < r.G; ++i) {
            Tensor unwanted;
            device::linear_members_backward(context, r.members, r.rows / r.members, r.N, r.in, device_in(x),
                                            device_in(weights[r.first + i]), device_in(g) + i * part, gx.data,
                                            gx.accumulate || i > 0, grad_to_add_or_scratch(weights[r.first + i], unwanted),
                                            grad_to_add(biases[r.first + i]));
        }
        return;
    }
    std::vector<Tensor> scratch;
    float* gw = run_grads(weights, r.first, r.G, scratch, true);
    float* gb = biases[r.first].defined() ? run_grads(biases, r.first, r.G, scratch, false) : nullptr;
    const bool bias_apart = biases[r.first].defined() && biases[r.first].requires_grad() && gb == nullptr;
    if (gw != nullptr && !bias_apart)
        return device::linear_backward(context, r.rows, r.N, r.in, device_in(x), device_in(weights[r.first]), device_in(g),
                                     gx.data, gx.accumulate, gw, gb, r.G);
    for (size_t i = 0; i < r.G; ++i) {
        Tensor unwanted;
        device::linear_backward(context, r.rows, r.N, r.in, device_in(x), device_in(weights[r.first + i]),
                              device_in(g) + i * part, gx.data, gx.accumulate || i > 0,
                              grad_to_add_or_scratch(weights[r.first + i], unwanted), grad_to_add(biases[r.first + i]));
    }
}

// y_g = x W_g^T + b_g for the run [first, first + G): one tensor y (G, rows, N)
// from one batched GEMM, and each y_g a view of it whose gradient is written in
// place into y's (its grad_home), so that one batched backward reads them all.
// Stacked members' weights (members, N, in): a batched GEMM over the members for
// each projection, and the backward sums dx in the order of a member's solo run
// (q, then k, then v), so each member's gradients are its solo pass's.
std::vector<Tensor> linear_run_device(const Tensor& x, const std::vector<Tensor>& weights,
                                      const std::vector<Tensor>& biases, size_t first, size_t G) {
    const Tensor& W = weights[first];
    const size_t members = W.dim() == 3 ? W.size(0) : 1, N = W.size(W.dim() - 2), in = W.size(W.dim() - 1);
    const Run run{first, G, x.numel() / std::max<size_t>(in, 1), in, N, members};
    const size_t part_size = run.rows * run.N;
    Shape part_shape = x.shape();
    part_shape.back() = run.N;
    Tensor y = device_tensor({G, run.rows, run.N});
    if (members == 1)
        device::linear_forward(device_context(), run.rows, run.N, run.in, device_in(x), device_in(W), device_in(biases[first]),
                               device_out(y), G);
    else
        for (size_t i = 0; i < G; ++i)
            device::linear_members_forward(device_context(), members, run.rows / members, N, in, device_in(x),
                                           device_in(weights[first + i]), device_in(biases[first + i]),
                                           device_out(y) + i * part_size);
    std::vector<Tensor> inputs{x};
    for (size_t i = first; i < first + G; ++i) inputs.insert(inputs.end(), {weights[i], biases[i]});
    auto written = std::make_shared<std::vector<bool>>(G, false);  // which parts received a gradient
    y = record_device("linear", y, inputs, [x, weights, biases, run, written](const Tensor& g, const float*) {
        run_backward(x, weights, biases, run, *written, g);
    });
    std::vector<Tensor> parts;
    if (y.requires_grad()) y.impl().grad_home = device_tensor(y.shape()).impl_ptr();  // the parts' gradients live here
    for (size_t i = 0; i < G; ++i) {
        Tensor part = device_view(y.impl().device_block, device_out(y) + i * part_size, part_shape);
        if (y.requires_grad()) {
            const TensorImpl& home = *y.impl().grad_home;
            float* slot = home.device_data + i * part_size;
            part = record_device("linear", part, {y}, [y, written, i, slot, part_size](const Tensor& g, const float*) {
                // written in place, in y's gradient (grad_target), unless it was set apart (a root's seed)
                if (device_in(g) != slot) device::copy_device(device_context(), device_in(g), slot, part_size * sizeof(float));
                (*written)[i] = true;
                grad_target(y);  // y's backward now runs
            });
            part.impl().grad_home = device_view(home.device_block, slot, part_shape).impl_ptr();
        }
        parts.push_back(part);
    }
    return parts;
}

// Stacked members' projection j can join i's run: the same weight shape over
// equal blocks of x's rows, the same bias and gradient wants (they need not lie
// side by side: the run takes one launch per projection).
bool stacks_with(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases, size_t i, size_t j) {
    const Tensor& W = weights[i];
    if (W.dim() != 3 || weights[j].shape() != W.shape() || x.dim() == 0 || x.shape().back() != W.size(2)) return false;
    if (x.numel() / std::max<size_t>(W.size(2), 1) % W.size(0) != 0) return false;
    if (weights[j].requires_grad() != W.requires_grad() || biases[i].defined() != biases[j].defined()) return false;
    return !biases[i].defined() ||
           (biases[i].shape() == Shape{W.size(0), W.size(1)} && biases[j].shape() == biases[i].shape() &&
            biases[i].requires_grad() == biases[j].requires_grad());
}

}  // namespace

std::vector<Tensor> linears_device(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases) {
    const bool stacked = !weights.empty() && weights.front().dim() == 3;  // then all are (linears)
    std::vector<Tensor> out;
    for (size_t first = 0; first < weights.size();) {
        size_t count = 1;
        while (first + count < weights.size() && (stacked ? stacks_with(x, weights, biases, first, first + count)
                                                          : follows(weights, biases, first + count - 1, first + count)))
            ++count;
        if (count == 1 && stacked) {
            out.push_back(linear(x, weights[first], biases[first]));  // checks the stacked weight itself
        } else if (count == 1) {
            Shape shape = x.shape();
            shape.back() = weights[first].size(0);
            out.push_back(linear_device(x, weights[first], biases[first], shape));
        } else {
            for (Tensor& part : linear_run_device(x, weights, biases, first, count)) out.push_back(std::move(part));
        }
        first += count;
    }
    return out;
}

// a + b: one kernel where one operand's shape ends the other's (same shapes, a
// row of a table, a scalar), else the broadcasting primitive (binary_device).
Tensor add_device(const Tensor& a, const Tensor& b, const Shape& out_shape) {
    const bool b_repeats = is_trailing(b.shape(), a.shape());
    if (!b_repeats && !is_trailing(a.shape(), b.shape())) return binary_device("add", device::BinaryOp::add, a, b, out_shape);
    const Tensor& whole = b_repeats ? a : b;
    const Tensor& part = b_repeats ? b : a;
    Tensor out = device_tensor(whole.shape());
    device::add_broadcast(device_context(), whole.numel(), part.numel(), device_in(whole), device_in(part), device_out(out));
    return record_device("add", out, {whole, part}, [whole, part](const Tensor& g, const float*) {
        send_device_grad(whole, g);
        if (part.numel() == whole.numel()) return send_device_grad(part, g);
        // the repeated operand receives the sum over its repeats
        const GradTarget target = grad_target(part);
        if (target)
            device::column_sums(device_context(), whole.numel() / std::max<size_t>(part.numel(), 1), part.numel(),
                              device_in(g), target.data, target.accumulate);
    });
}

// gelu (exact) or relu, elementwise.
Tensor activation_device(const char* op, device::DeviceActivation activation, const Tensor& x) {
    Tensor out = device_tensor(x.shape());
    device::activation_forward(device_context(), activation, x.numel(), device_in(x), device_out(out));
    return record_device(op, out, {x}, [x, activation](const Tensor& g, const float*) {
        write_device_grad(x, [&](float* dx) {  // dx = g f'(x)
            device::activation_backward(device_context(), activation, x.numel(), device_in(x), device_in(g), dx);
        });
    });
}

// The same values under another shape: a view, no copy either way.
Tensor reshape_device(const Tensor& x, const Shape& shape) {
    Tensor out = device_view(x.impl().device_block, x.impl().device_data, shape);
    const Shape in_shape = x.shape();
    return record_device("reshape", out, {x}, [x, in_shape](const Tensor& g, const float*) {
        send_device_grad(x, device_view(g.impl().device_block, g.impl().device_data, in_shape));
    });
}

// Rows [start, stop) of the first axis: a view; the backward adds into those rows.
Tensor slice_rows_device(const Tensor& x, size_t start, size_t stop, const Shape& out_shape) {
    const size_t row = x.numel() / std::max<size_t>(x.size(0), 1);
    Tensor out = device_view(x.impl().device_block, x.impl().device_data + start * row, out_shape);
    return record_device("slice", out, {x}, [x, start, stop, row](const Tensor& g, const float*) {
        float* gx = grad_to_add(x);
        if (gx != nullptr) device::add_into(device_context(), (stop - start) * row, device_in(g), gx + start * row);
    });
}

// The parts side by side along `axis`: each part's rows (outer, n_i inner) copied
// into the output's (outer, n inner) at its offset; the backward copies them back out.
Tensor concat_device(const std::vector<Tensor>& parts, size_t axis, const Shape& out_shape) {
    const AxisSplit split = split_at_axis(out_shape, axis);
    const size_t out_row = split.n * split.inner;
    Tensor out = device_tensor(out_shape);
    std::vector<size_t> offsets;  // along the axis
    size_t offset = 0;
    for (const Tensor& p : parts) {
        const size_t row = p.shape()[axis] * split.inner;
        device::copy_rows(device_context(), split.outer, row, device_in(p), row, device_out(out) + offset * split.inner, out_row, false);
        offsets.push_back(offset);
        offset += p.shape()[axis];
    }
    return record_device("concat", out, parts, [parts, offsets, split, out_row, axis](const Tensor& g, const float*) {
        for (size_t i = 0; i < parts.size(); ++i) {
            const GradTarget target = grad_target(parts[i]);
            const size_t row = parts[i].shape()[axis] * split.inner;
            if (target)
                device::copy_rows(device_context(), split.outer, row, device_in(g) + offsets[i] * split.inner, out_row,
                                target.data, row, target.accumulate);
        }
    });
}

}  // namespace attnlab
