// The optimisers on the device: a model moved with Module::to keeps its
// parameters, gradients and (made here) the optimiser's state in flat blocks,
// so that one kernel updates a run of parameters that lie one after another in
// all of them with the same step count: in the usual case the whole model, one
// launch per step. The element-wise rules are the CPU loops' (optimizer.cpp),
// written once more in autograd/device/kernels.h's adam_update and sgd_update.
// Several models (stacked members) are clipped, zeroed and stepped by Adam in
// one launch each: every model's runs are pieces of one table.
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

// The runs of the parameters' gradients that lie one after another, appended to
// `pieces` (factor 1).
void add_grad_runs(const NamedTensors& params, std::vector<device::ScalePiece>& pieces) {
    const auto grad_of = [&](size_t i) { return std::array<float*, 1>{params[i].second.impl().grad->device_data}; };
    for (const auto& run : runs(params, with_grad(params), grad_of, [](size_t, size_t) { return true; }))
        pieces.push_back({count_of(params, run), grad_of(run[0])[0], 1.0f});
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

void device_zero_grads(const std::vector<const NamedTensors*>& models) {
    std::vector<device::ScalePiece> pieces;  // every model's gradient runs
    for (const NamedTensors* params : models) {
        // every gradient becomes its home in the flat block (none without a home: undefined, as on the CPU)
        for (const auto& [name, p] : *params) {
            TensorImpl& impl = p.impl();
            impl.grad = impl.grad_home;
        }
        add_grad_runs(*params, pieces);
    }
    device::zero_pieces(device_context(), pieces);
}

std::vector<double> device_clip_grad_norms(const std::vector<const NamedTensors*>& models, double max_norm) {
    device::Context& context = device_context();
    std::vector<device::ScalePiece> pieces;  // every model's gradient runs, model by model
    std::vector<size_t> first;               // each model's first piece
    for (const NamedTensors* params : models) {
        for (const auto& [name, p] : *params) writable_grad(p);  // scaled in place below
        first.push_back(pieces.size());
        add_grad_runs(*params, pieces);
    }
    first.push_back(pieces.size());
    const size_t n = std::max<size_t>(pieces.size(), 1);
    const device::DeviceBuffer sums = context.allocate(n * sizeof(double));
    const device::DeviceBuffer partials = context.allocate(n * device::reduce_partials * sizeof(double));
    std::vector<device::SumPiece> squares;
    for (size_t i = 0; i < pieces.size(); ++i) squares.push_back({pieces[i].n, pieces[i].x, static_cast<double*>(sums.data()) + i});
    device::sums_to_double(context, squares, true, static_cast<double*>(partials.data()));
    std::vector<double> host(pieces.size());
    device::copy_to_host(context, sums.data(), host.data(), host.size() * sizeof(double));  // every model's sums, one copy
    std::vector<double> norms;
    std::vector<device::ScalePiece> clipped;
    for (size_t m = 0; m < models.size(); ++m) {
        double total = 0.0;
        for (size_t i = first[m]; i < first[m + 1]; ++i) total += host[i];
        total = std::sqrt(total);
        const double factor = max_norm / (total + 1e-6);  // torch's clip_grad_norm_
        if (factor < 1.0)
            for (size_t i = first[m]; i < first[m + 1]; ++i) clipped.push_back({pieces[i].n, pieces[i].x, float(factor)});
        norms.push_back(total);
    }
    device::scale_pieces(context, clipped);  // every clipped model's gradients, one launch
    return norms;
}

void Adam::step_on_device(const std::vector<Adam*>& optimizers) {
    std::vector<device::AdamRun> all;  // every optimiser's runs
    for (Adam* adam : optimizers) {
        const NamedTensors& params = adam->params_;
        const std::vector<size_t> order = with_grad(params);
        for (size_t i : order) ++adam->steps_[i];
        auto pointers = [&](size_t i) {
            return std::array<float*, 4>{values_of(params[i].second), params[i].second.impl().grad->device_data,
                                         values_of(adam->m_[i]), values_of(adam->v_[i])};
        };
        // one step count per run, and its decaying parameters before the others
        auto same = [&](size_t a, size_t b) { return adam->steps_[a] == adam->steps_[b] && (adam->decay[a] || !adam->decay[b]); };
        for (const auto& run : runs(params, order, pointers, same)) {
            const double step = static_cast<double>(adam->steps_[run[0]]);
            const double correction1 = 1.0 - std::pow(adam->beta1, step), correction2 = 1.0 - std::pow(adam->beta2, step);
            size_t n_decay = 0;
            for (size_t i : run) n_decay += adam->decay[i] ? params[i].second.numel() : 0;
            device::AdamScalars a{};
            a.beta1 = static_cast<float>(adam->beta1);
            a.beta2 = static_cast<float>(adam->beta2);
            a.one_minus_beta1 = static_cast<float>(1 - adam->beta1);
            a.one_minus_beta2 = static_cast<float>(1 - adam->beta2);
            a.step_size = static_cast<float>(adam->lr / correction1);
            a.sqrt_c2 = static_cast<float>(std::sqrt(correction2));
            a.eps = static_cast<float>(adam->eps);
            a.weight_decay = static_cast<float>(adam->weight_decay);
            a.shrink = 1.0f - static_cast<float>(adam->lr) * static_cast<float>(adam->weight_decay);
            a.decoupled = adam->decoupled;
            a.max_norm = std::numeric_limits<double>::infinity();
            const auto p = pointers(run[0]);
            all.push_back({count_of(params, run), n_decay, p[0], p[1], p[2], p[3], a});
        }
    }
    device::adam_update(device_context(), all, no_stats());
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
