#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <vector>

#include "autograd/tensor_impl.h"
#include "optim/device_update.h"
#include "autograd/cpu/threads.h"

namespace attnlab {

namespace {

// Calls f(param, grad, index) on the raw (mutable) arrays of every parameter that has a gradient.
template <class F>
void for_each_with_grad(const NamedTensors& params, F&& f) {
    for (size_t i = 0; i < params.size(); ++i) {
        const Tensor& p = params[i].second;
        if (!p.grad().defined()) continue;
        dispatch(p.dtype(), [&]<class T>() { f(p.impl().array<T>(), p.grad().impl().array<T>(), i); });
    }
}

Tensor zeros_like(const Tensor& p) { return Tensor::zeros(p.shape(), p.dtype()); }

}  // namespace

void zero_grads(const std::vector<const NamedTensors*>& models) {
    std::vector<const NamedTensors*> device;
    for (const NamedTensors* params : models) {
        if (on_device(*params)) {
            device.push_back(params);
            continue;
        }
        for (auto& [name, p] : *params) {
            Tensor handle = p;
            handle.zero_grad();
        }
    }
    if (!device.empty()) device_zero_grads(device);
}

void zero_grad(const NamedTensors& params) { zero_grads({&params}); }

void step_together(const std::vector<Optimizer*>& optimizers) {
    std::vector<Adam*> device_adams;
    for (Optimizer* o : optimizers) {
        auto* adam = dynamic_cast<Adam*>(o);
        if (adam != nullptr && on_device(adam->params_)) device_adams.push_back(adam);
        else o->step();
    }
    if (!device_adams.empty()) Adam::step_on_device(device_adams);
}

void Optimizer::zero_grad() { attnlab::zero_grad(params_); }

SGD::SGD(NamedTensors params, double lr_, double momentum_, bool nesterov_, double weight_decay_)
    : Optimizer(std::move(params), lr_), momentum(momentum_), weight_decay(weight_decay_), nesterov(nesterov_) {
    if (on_device(params_)) velocity_ = device_zeros_like(params_);
    else
        for (auto& [name, p] : params_) velocity_.push_back(zeros_like(p));
    started_.assign(params_.size(), false);
}

void SGD::step() {
    if (on_device(params_)) return step_on_device();
    for_each_with_grad(params_, [&]<class T>(Array<T>& p, const Array<T>& g, size_t i) {
        Array<T> d = g + static_cast<T>(weight_decay) * p;  // gradient with L2 term
        if (momentum != 0.0) {
            Array<T>& v = velocity_[i].impl().array<T>();
            // torch: the first step sets v = d (no dampening of a zero buffer)
            v = started_[i] ? Array<T>(static_cast<T>(momentum) * v + d) : d;
            started_[i] = true;
            d = nesterov ? Array<T>(d + static_cast<T>(momentum) * v) : v;
        }
        p -= static_cast<T>(lr) * d;
    });
}

NamedTensors SGD::state() const {
    NamedTensors s;
    for (size_t i = 0; i < params_.size(); ++i) {
        s.emplace_back("velocity." + params_[i].first, velocity_[i]);
        s.emplace_back("started." + params_[i].first, Tensor::scalar(started_[i] ? 1.0 : 0.0, DType::f64));
    }
    return s;
}

namespace {

// A saved counter or flag: one finite whole number in [0, most] (a float-to-integer
// cast of anything else would be undefined), else an Error naming the entry.
long long saved_count(const std::string& name, const Tensor& t, double most) {
    if (t.numel() != 1) fail("optimizer", name + ": expected one value, got " + std::to_string(t.numel()));
    const double value = t.item();
    if (!(value >= 0 && value <= most) || value != std::floor(value))
        fail("optimizer", name + ": expected a whole number in [0, " + std::to_string(static_cast<long long>(most)) + "], got " +
                              std::to_string(value));
    return static_cast<long long>(value);
}

// Saved state `name` (the checkpoint's /optimizer/<name>) into the buffer of
// parameter `param`: the shapes must agree, and the message names both.
void assign_saved(Tensor& buffer, const std::string& name, const std::string& param, const Tensor& saved) {
    if (saved.shape() != buffer.shape())
        fail("optimizer", "/optimizer/" + name + " has shape " + shape_str(saved.shape()) + ", but parameter " + param +
                              " is " + shape_str(buffer.shape()));
    buffer.assign(saved);
}

}  // namespace

void SGD::load_state(const NamedTensors& state) {
    for (const auto& [name, t] : state)
        for (size_t i = 0; i < params_.size(); ++i) {
            if (name == "velocity." + params_[i].first) assign_saved(velocity_[i], name, params_[i].first, t);
            if (name == "started." + params_[i].first) started_[i] = saved_count(name, t, 1) != 0;
        }
}

Adam::Adam(NamedTensors params, double lr_, double beta1_, double beta2_, double eps_, double weight_decay_, bool decoupled_)
    : Optimizer(std::move(params), lr_), beta1(beta1_), beta2(beta2_), eps(eps_), weight_decay(weight_decay_), decoupled(decoupled_) {
    const bool device = on_device(params_);
    if (device) {
        m_ = device_zeros_like(params_);
        v_ = device_zeros_like(params_);
    }
    for (auto& [name, p] : params_) {
        if (!device) {
            m_.push_back(zeros_like(p));
            v_.push_back(zeros_like(p));
        }
        decay.push_back(true);
    }
    steps_.assign(params_.size(), 0);
}

std::unique_ptr<Adam> make_adamw(NamedTensors params, double lr, double beta1, double beta2, double eps, double weight_decay) {
    auto opt = std::make_unique<Adam>(std::move(params), lr, beta1, beta2, eps, weight_decay, true);
    for (size_t i = 0; i < opt->params().size(); ++i) opt->decay[i] = opt->params()[i].second.dim() >= 2;
    return opt;
}

void Adam::step() {
    if (on_device(params_)) return step_on_device({this});
    // Each parameter's update as a loop over a range of its elements, placed at an
    // offset in one flat range over all parameters, which the pool splits evenly:
    // a model of many small tensors still gets every thread.
    struct Update {
        size_t offset, size;
        std::function<void(size_t, size_t)> run;  // elements [e0, e1) of this parameter
    };
    std::vector<Update> updates;
    size_t total = 0;
    for_each_with_grad(params_, [&]<class T>(Array<T>& p, const Array<T>& g_in, size_t i) {
        const double step = static_cast<double>(++steps_[i]);
        const double correction1 = 1.0 - std::pow(beta1, step);
        const double correction2 = 1.0 - std::pow(beta2, step);
        const T wd = decay[i] ? static_cast<T>(weight_decay) : T(0);
        const T shrink = T(1) - static_cast<T>(lr) * wd;  // AdamW: p -= lr wd p
        const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
        const T one_minus_b1 = static_cast<T>(1 - beta1), one_minus_b2 = static_cast<T>(1 - beta2);
        // p -= lr * m_hat / (sqrt(v_hat) + eps), written as torch does
        const T step_size = static_cast<T>(lr / correction1);
        const T sqrt_c2 = static_cast<T>(std::sqrt(correction2));
        const T epsilon = static_cast<T>(eps);
        T* P = p.data();
        T* M = m_[i].impl().array<T>().data();
        T* V = v_[i].impl().array<T>().data();
        const T* G = g_in.data();
        const bool decoupled_ = decoupled;
        // One element at a time, with torch's operations in torch's order (so
        // that float32 results match torch.optim bitwise).
        updates.push_back({total, p.size(), [=](size_t e0, size_t e1) {
            for (size_t e = e0; e < e1; ++e) {
                if (decoupled_) P[e] *= shrink;
                const T g = decoupled_ ? G[e] : G[e] + wd * P[e];
                M[e] = b1 * M[e] + one_minus_b1 * g;
                V[e] = b2 * V[e] + one_minus_b2 * g * g;
                P[e] -= step_size * M[e] / (std::sqrt(V[e]) / sqrt_c2 + epsilon);
            }
        }});
        total += p.size();
    });
    parallel_for(total, [&](size_t begin, size_t end) {
        for (const Update& u : updates) {
            const size_t from = std::max(begin, u.offset), to = std::min(end, u.offset + u.size);
            if (from < to) u.run(from - u.offset, to - u.offset);
        }
    }, kElementGrain);
}

NamedTensors Adam::state() const {
    NamedTensors s;
    for (size_t i = 0; i < params_.size(); ++i) {
        s.emplace_back("step." + params_[i].first, Tensor::scalar(static_cast<double>(steps_[i]), DType::f64));
        s.emplace_back("m." + params_[i].first, m_[i]);
        s.emplace_back("v." + params_[i].first, v_[i]);
    }
    return s;
}

void Adam::load_state(const NamedTensors& state) {
    for (const auto& [name, t] : state) {
        for (size_t i = 0; i < params_.size(); ++i) {
            if (name == "step." + params_[i].first) steps_[i] = saved_count(name, t, 9007199254740991.0);
            if (name == "m." + params_[i].first) assign_saved(m_[i], name, params_[i].first, t);
            if (name == "v." + params_[i].first) {
                // a second moment below 0 would put NaN into sqrt(v) at the next step
                const std::vector<double> values = t.values();
                const auto negative = std::find_if(values.begin(), values.end(), [](double x) { return x < 0; });
                if (negative != values.end())
                    fail("optimizer", name + ": element " + std::to_string(negative - values.begin()) + " is " +
                                          std::to_string(*negative) + "; a second moment is never negative");
                assign_saved(v_[i], name, params_[i].first, t);
            }
        }
    }
}

double clip_grad_norm(const NamedTensors& params, double max_norm) {
    if (on_device(params)) return device_clip_grad_norms({&params}, max_norm)[0];
    // The sum of squares in eight lanes (element k into lane k mod 8 of each
    // tensor, the lanes added in order at the end): one long chain of dependent
    // additions was 6% of a small model's step; in double, the lanes' order moves
    // the norm by rounding only (about 1e-16 of it).
    constexpr size_t kLanes = 8;
    double lanes[kLanes] = {};
    for_each_with_grad(params, [&]<class T>(Array<T>&, const Array<T>& g, size_t) {
        const T* x = g.data();
        const size_t n = g.size(), whole = n - n % kLanes;
        for (size_t k = 0; k < whole; k += kLanes)
            for (size_t j = 0; j < kLanes; ++j) lanes[j] += static_cast<double>(x[k + j]) * static_cast<double>(x[k + j]);
        for (size_t k = whole; k < n; ++k) lanes[k - whole] += static_cast<double>(x[k]) * static_cast<double>(x[k]);
    });
    double total = 0.0;
    for (double lane : lanes) total += lane;
    total = std::sqrt(total);
    const double factor = max_norm / (total + 1e-6);  // torch's clip_grad_norm_
    if (factor < 1.0)
        for_each_with_grad(params, [&]<class T>(Array<T>&, Array<T>& g, size_t) { g *= static_cast<T>(factor); });
    return total;
}

std::vector<double> clip_grad_norms(const std::vector<const NamedTensors*>& models, double max_norm) {
    size_t on = 0;
    for (const NamedTensors* params : models) on += on_device(*params);
    if (on != 0 && on != models.size()) fail("clip_grad_norms", "the models are on different devices");
    if (on != 0) return device_clip_grad_norms(models, max_norm);
    std::vector<double> norms;
    for (const NamedTensors* params : models) norms.push_back(clip_grad_norm(*params, max_norm));
    return norms;
}

Schedule parse_schedule(const std::string& name) {
    if (name == "constant") return Schedule::constant;
    if (name == "linear") return Schedule::linear;
    if (name == "cosine") return Schedule::cosine;
    fail("schedule", "must be \"constant\", \"linear\" or \"cosine\", got \"" + name + "\"");
}

double scheduled_lr(double base_lr, Schedule schedule, long long step, long long warmup, long long total, double min_lr) {
    if (warmup > 0 && step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (schedule == Schedule::constant || total <= warmup) return base_lr;
    const double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
    // (grouped as before min_lr existed: with min_lr = 0 the same bits)
    if (schedule == Schedule::linear) return min_lr + (base_lr - min_lr) * (1.0 - progress);
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace attnlab
