// Optimisers over named parameters, with the update rules of PyTorch's
// torch.optim (same defaults), gradient clipping by global norm, and LR schedules.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/named_tensors.h"

namespace attnlab {

class Optimizer {
public:
    explicit Optimizer(NamedTensors params, double lr) : params_(std::move(params)), lr(lr) {}
    virtual ~Optimizer() = default;
    // One update from the parameters' current .grad (parameters without a grad are
    // skipped). On the device (a model moved with Module::to, before the optimiser
    // is made): the state lives there too, and a step is one kernel per run of
    // parameters that lie together in memory (optim/device_update.cpp).
    virtual void step() = 0;
    // On the device the gradients become zeros in the flat gradient block rather than undefined.
    void zero_grad();
    const NamedTensors& params() const { return params_; }
    // Everything an exact resume needs, as named tensors (moments, step counts).
    virtual NamedTensors state() const = 0;
    virtual void load_state(const NamedTensors& state) = 0;

protected:
    NamedTensors params_;

public:
    double lr;
};

// v = momentum v + (g + wd p);  p -= lr (nesterov ? g + momentum v : v)   (torch.optim.SGD)
class SGD : public Optimizer {
public:
    SGD(NamedTensors params, double lr, double momentum = 0.0, bool nesterov = false, double weight_decay = 0.0);
    void step() override;
    NamedTensors state() const override;
    void load_state(const NamedTensors& state) override;
    double momentum, weight_decay;
    bool nesterov;

private:
    void step_on_device();  // device_update.cpp
    std::vector<Tensor> velocity_;
    std::vector<bool> started_;
};

// Adam (torch.optim.Adam; weight_decay adds wd p to the gradient) and AdamW
// (torch.optim.AdamW; decoupled: p -= lr wd p before the Adam step).
class Adam : public Optimizer {
public:
    Adam(NamedTensors params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
         double weight_decay = 0.0, bool decoupled = false);
    void step() override;
    NamedTensors state() const override;
    void load_state(const NamedTensors& state) override;
    double beta1, beta2, eps, weight_decay;
    bool decoupled;
    // AdamW's default: decay matrices (Linear weights, embeddings) only, never
    // biases or LayerNorm weights, i.e. parameters with fewer than 2 axes.
    std::vector<bool> decay;

private:
    friend void step_together(const std::vector<Optimizer*>& optimizers);
    static void step_on_device(const std::vector<Adam*>& optimizers);  // device_update.cpp: every run of them, one launch
    std::vector<Tensor> m_, v_;
    std::vector<long long> steps_;  // per parameter, counting only steps that had its gradient (as torch)
};

std::unique_ptr<Adam> make_adamw(NamedTensors params, double lr, double beta1 = 0.9, double beta2 = 0.999,
                                 double eps = 1e-8, double weight_decay = 0.01);

// Scales every gradient by min(1, max_norm / total_norm); returns total_norm (before clipping).
double clip_grad_norm(const NamedTensors& params, double max_norm);
// clip_grad_norm of each model, each by its own norm; on the device their norms come
// back to the host in one copy (stacked members: one wait a step, not one a member).
std::vector<double> clip_grad_norms(const std::vector<const NamedTensors*>& models, double max_norm);
// Every parameter's gradient zeroed: on the cpu dropped (Tensor::zero_grad); on the
// device its slot of the flat gradient block, zeroed (one launch), which the next
// backward adds into (what Optimizer::zero_grad does).
void zero_grad(const NamedTensors& params);
// Several models' (stacked members'): on the device one launch for all of them.
void zero_grads(const std::vector<const NamedTensors*>& models);
// Every optimiser's step(); on the device every Adam among them in one launch, all
// their runs in it (stacked members: one launch a step, not one a member).
void step_together(const std::vector<Optimizer*>& optimizers);

// Learning rate at a step: linear warm-up from 0 over `warmup` steps, then
// constant, or a linear or cosine decay from base_lr to min_lr at `total` steps
// (min_lr after it): with p = (step - warmup) / (total - warmup) in [0, 1],
// min_lr + (base_lr - min_lr) (1 - p), or min_lr + (base_lr - min_lr) (1 + cos(pi p)) / 2.
enum class Schedule { constant, linear, cosine };
Schedule parse_schedule(const std::string& name);  // "constant" | "linear" | "cosine"
double scheduled_lr(double base_lr, Schedule schedule, long long step, long long warmup, long long total, double min_lr = 0.0);

}  // namespace attnlab
