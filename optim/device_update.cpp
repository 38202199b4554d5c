// The optimisers on the device: a model moved with Module::to keeps its
// parameters, gradients and (made here) the optimiser's state in flat blocks,
// so that one kernel updates a run of parameters that lie one after another in
// all of them with the same step count: in the usual case the whole model, one
// launch per step. The element-wise rules are the CPU loops' (optimizer.cpp),
// written once more in autograd/device/kernels.h's adam_update and sgd_update.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/device_ops.h"
#include "optim/optimizer.h"

namespace attnlab {

namespace {

float* values_of(const Tensor& t) { return t.impl().device_data; }

// Indices of the parameters that `keep` keeps, in the order of their values' addresses.
template <class Keep>
std::vector<size_t> by_address(const NamedTensors& params, Keep keep) {
    std::vector<size_t> order;
    for (size_t i = 0; i < params.size(); ++i)
        if (keep(i)) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values_of(params[a].second) < values_of(params[b].second); });
    return order;
}

// The parameters with a gradient, by address.
std::vector<size_t> with_grad(const NamedTensors& params) {
    return by_address(params, [&](size_t i) { return params[i].second.grad().defined(); });
}

// Runs of `order` over which every pointer of parallel(i) (the parameter's
// values, gradient, state) continues the previous parameter's, and same(i, j) holds.
template <class Pointers, class Same>
std::vector<std::vector<size_t>> runs(const NamedTensors& params, const std::vector<size_t>& order, Pointers parallel, Same same) {
    std::vector<std::vector<size_t>> out;
    for (size_t i : order) {
        if (!out.empty()) {
            const size_t last = out.back().back();
            const auto a = parallel(last), b = parallel(i);
            bool next = same(last, i);
            for (size_t k = 0; k < a.size() && next; ++k) next = a[k] + params[last].second.numel() == b[k];
            if (next) {
                out.back().push_back(i);
                continue;
            }
        }
        out.push_back({i});
    }
    return out;
}

size_t count_of(const NamedTensors& params, const std::vector<size_t>& run) {
    size_t n = 0;
    for (size_t i : run) n += params[i].second.numel();
    return n;
}

// Two doubles of zero: the update kernels' [loss, squared norm] (clipping and
// the finite check happen before the step here, as on the CPU).
const double* no_stats() {
    static const device::DeviceBuffer stats = [] {
        device::DeviceBuffer b = device_context().allocate(2 * sizeof(double));
        device::fill_zero(device_context(), b.data(), b.bytes());
        return b;
    }();
    return static_cast<const double*>(stats.data());
}

}  // namespace

bool on_device(const NamedTensors& params) {
    bool any = false, all = true;
    for (const auto& [name, p] : params) {
        any = any || p.device() == Device::cuda;
        all = all && p.device() == Device::cuda;
    }
    if (any && !all) fail("optimizer", "the parameters are on different devices; move the whole model (Module::to)");
    return any;
}

std::vector<Tensor> device_zeros_like(const NamedTensors& params) {
    const std::vector<size_t> order = by_address(params, [](size_t) { return true; });
    size_t total = 0;
    for (const auto& [name, p] : params) total += p.numel();
    auto block = std::make_shared<device::DeviceBuffer>(device_context().allocate_floats(std::max<size_t>(total, 1)));
    device::fill_zero(device_context(), block->data(), total * sizeof(float));
    std::vector<Tensor> out(params.size());
    size_t offset = 0;
    for (size_t i : order) {
        out[i] = device_view(block, block->floats() + offset, params[i].second.shape());
        offset += params[i].second.numel();
    }
    return out;
}

void device_zero_grad(const NamedTensors& params) {
    // every parameter's gradient becomes its home in the flat block, zeroed run by run
    for (const auto& [name, p] : params) {
        TensorImpl& impl = p.impl();
        impl.grad = impl.grad_home;  // none without a home: undefined, as on the CPU
    }
    const std::vector<size_t> order = with_grad(params);
    for (const auto& run : runs(params, order, [&](size_t i) { return std::array<float*, 1>{params[i].second.impl().grad->device_data}; },
                                [](size_t, size_t) { return true; }))
        device::fill_zero(device_context(), params[run[0]].second.impl().grad->device_data, count_of(params, run) * sizeof(float));
}

std::vector<double> device_clip_grad_norms(const std::vector<const NamedTensors*>& models, double max_norm) {
    device::Context& context = device_context();
    struct Model {
        const NamedTensors* params;
        std::vector<std::vector<size_t>> runs;  // its gradients' contiguous runs
        size_t first = 0;                       // its runs' sums in the shared buffer
    };
    std::vector<Model> plan;
    size_t sums_needed = 0;
    for (const NamedTensors* params : models) {
        for (const auto& [name, p] : *params) writable_grad(p);  // scaled in place below
        auto grad_of = [params](size_t i) { return std::array<float*, 1>{(*params)[i].second.impl().grad->device_data}; };
        plan.push_back({params, runs(*params, with_grad(*params), grad_of, [](size_t, size_t) { return true; }), sums_needed});
        sums_needed += plan.back().runs.size();
    }
    auto grad_of = [](const Model& m, size_t run) { return (*m.params)[m.runs[run][0]].second.impl().grad->device_data; };
    const device::DeviceBuffer sums = context.allocate(std::max<size_t>(sums_needed, 1) * sizeof(double));
    const device::DeviceBuffer partials = context.allocate(device::reduce_partials * sizeof(double));
    for (const Model& m : plan)
        for (size_t r = 0; r < m.runs.size(); ++r)
            device::sum_to_double(context, count_of(*m.params, m.runs[r]), grad_of(m, r), true,
                                  static_cast<double*>(sums.data()) + m.first + r, static_cast<double*>(partials.data()));
    std::vector<double> host(sums_needed);
    device::copy_to_host(context, sums.data(), host.data(), host.size() * sizeof(double));  // every model's sums, one copy
    std::vector<double> norms;
    for (const Model& m : plan) {
        double total = 0.0;
        for (size_t r = 0; r < m.runs.size(); ++r) total += host[m.first + r];
        total = std::sqrt(total);
        const double factor = max_norm / (total + 1e-6);  // torch's clip_grad_norm_
        if (factor < 1.0)
            for (size_t r = 0; r < m.runs.size(); ++r)
                device::scale(context, count_of(*m.params, m.runs[r]), grad_of(m, r), float(factor), nullptr, grad_of(m, r), false);
        norms.push_back(total);
    }
    return norms;
}

void Adam::step_on_device() {
    const std::vector<size_t> order = with_grad(params_);
    for (size_t i : order) ++steps_[i];
    auto pointers = [&](size_t i) {
        return std::array<float*, 4>{values_of(params_[i].second), params_[i].second.impl().grad->device_data,
                                     values_of(m_[i]), values_of(v_[i])};
    };
    // one step count per run, and its decaying parameters before the others
    auto same = [&](size_t a, size_t b) { return steps_[a] == steps_[b] && (decay[a] || !decay[b]); };
    for (const auto& run : runs(params_, order, pointers, same)) {
        const double step = static_cast<double>(steps_[run[0]]);
        const double correction1 = 1.0 - std::pow(beta1, step), correction2 = 1.0 - std::pow(beta2, step);
        size_t n_decay = 0;
        for (size_t i : run) n_decay += decay[i] ? params_[i].second.numel() : 0;
        device::AdamScalars a{};
        a.beta1 = static_cast<float>(beta1);
        a.beta2 = static_cast<float>(beta2);
        a.one_minus_beta1 = static_cast<float>(1 - beta1);
        a.one_minus_beta2 = static_cast<float>(1 - beta2);
        a.step_size = static_cast<float>(lr / correction1);
        a.sqrt_c2 = static_cast<float>(std::sqrt(correction2));
        a.eps = static_cast<float>(eps);
        a.weight_decay = static_cast<float>(weight_decay);
        a.shrink = 1.0f - static_cast<float>(lr) * static_cast<float>(weight_decay);
        a.decoupled = decoupled;
        a.max_norm = std::numeric_limits<double>::infinity();
        const auto p = pointers(run[0]);
        device::adam_update(device_context(), count_of(params_, run), n_decay, p[0], p[1], p[2], p[3], a, no_stats());
    }
}

void SGD::step_on_device() {
    const std::vector<size_t> order = with_grad(params_);
    auto pointers = [&](size_t i) {
        return std::array<float*, 3>{values_of(params_[i].second), params_[i].second.impl().grad->device_data,
                                     values_of(velocity_[i])};
    };
    auto same = [&](size_t a, size_t b) { return started_[a] == started_[b]; };
    for (const auto& run : runs(params_, order, pointers, same)) {
        const device::SgdScalars scalars{static_cast<float>(lr), static_cast<float>(momentum), static_cast<float>(weight_decay),
                                       nesterov, bool(started_[run[0]]), std::numeric_limits<double>::infinity()};
        const auto p = pointers(run[0]);
        device::sgd_update(device_context(), count_of(params_, run), p[0], p[1], p[2], scalars, no_stats());
    }
    if (momentum != 0.0)
        for (size_t i : order) started_[i] = true;
}

}  // namespace attnlab
