// Module: named parameters in PyTorch's dotted style, kept in registration
// order; train/eval; state_dict / load_state_dict (strict by default).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;  // in registration order

class Module {
public:
    Module() = default;
    Module(const Module&) = delete;  // children are registered by address
    Module& operator=(const Module&) = delete;
    virtual ~Module() = default;

    NamedTensors named_parameters() const;  // "blocks.0.attn.q_proj.weight", ...
    std::vector<Tensor> parameters() const;
    size_t parameter_count() const;         // number of scalars
    void zero_grad();

    // Converts every parameter in place (float64 for gradient checks, float32 to train).
    void to(DType dtype);

    void train(bool training = true);       // this module and every child
    void eval() { train(false); }
    bool is_training() const { return training_; }

    // The parameters themselves (handles sharing storage), by name.
    NamedTensors state_dict() const { return named_parameters(); }
    // Copies values in by name. Strict: every missing and unexpected name and every
    // shape conflict (with both shapes) is listed in one "[load_state_dict]" error.
    // Not strict: names absent on either side are skipped; shape conflicts still throw.
    void load_state_dict(const NamedTensors& state, bool strict = true);

    // Registers a child by address under `name` (public, as torch's register_module).
    void register_module(const std::string& name, Module& child);

protected:
    // Marks `value` as requiring grad and registers it; returns the same handle.
    Tensor register_parameter(const std::string& name, Tensor value);

private:
    void collect(const std::string& prefix, NamedTensors& out) const;

    std::vector<std::pair<std::string, Tensor>> parameters_;
    std::vector<std::pair<std::string, Module*>> children_;
    bool training_ = true;
};

}  // namespace attnlab
