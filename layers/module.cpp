#include "layers/module.h"

#include <cstring>
#include <map>
#include <sstream>

#include "layers/hooks.h"

namespace attnlab {

Tensor Module::register_parameter(const std::string& name, Tensor value) {
    value.set_requires_grad(true);
    parameters_.emplace_back(name, value);
    return value;
}

void Module::register_module(const std::string& name, Module& child) { children_.emplace_back(name, &child); }

void Module::declare_hook_points(std::initializer_list<HookPointDeclaration> points) {
    hook_points_.insert(hook_points_.end(), points.begin(), points.end());
}

std::vector<std::string> Module::hook_points() const {
    std::vector<std::string> out;
    collect_hook_points("", out);
    return out;
}

// The names alone, in described_hook_points' order, without reading the axes
// (HookScope lists them on every hooked forward).
void Module::collect_hook_points(const std::string& prefix, std::vector<std::string>& out) const {
    for (const HookPointDeclaration& point : hook_points_) out.push_back(prefix + point.name);
    for (const auto& [name, child] : children_) child->collect_hook_points(prefix + name + ".", out);
}

std::vector<Module::HookPoint> Module::described_hook_points() const {
    std::vector<HookPoint> out;
    for (const HookPointDeclaration& point : hook_points_) {
        HookPoint described{point.name, {}};
        std::istringstream axes(point.axes);
        for (std::string axis; axes >> axis;) described.axes.push_back(axis);
        out.push_back(std::move(described));
    }
    for (const auto& [name, child] : children_)
        for (HookPoint point : child->described_hook_points()) {
            point.name = name + "." + point.name;
            out.push_back(std::move(point));
        }
    return out;
}

std::string Module::hook_point_axes(const std::string& name) const {
    for (const HookPoint& point : described_hook_points())
        if (point.name == name) {
            std::string text;
            for (const std::string& axis : point.axes) text += (text.empty() ? "" : " ") + axis;
            return text;
        }
    return "";
}

void Module::attach(Hooks* hooks, const std::string& path) const {
    hooks_ = hooks;
    path_ = hooks ? path : std::string();
    for (const auto& [name, child] : children_) child->attach(hooks, path + name + ".");
}

Tensor Module::hook_slow(const char* point, const Tensor& value) const {
    HookValues allowed = HookValues::finite;
    for (const HookPointDeclaration& declared : hook_points_)
        if (std::strcmp(declared.name, point) == 0) allowed = declared.values;
    return hooks_->at(path_ + point, value, allowed);
}

bool Module::hooked_slow(const char* point, bool replace) const {
    const std::string name = path_ + point;
    return replace ? hooks_->replaces(name) : hooks_->wants(name);
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
    for (const auto& [name, p] : parameters_) out.emplace_back(prefix + name, p);
    for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
    NamedTensors out;
    collect("", out);
    return out;
}

std::vector<Tensor> Module::parameters() const {
    std::vector<Tensor> out;
    for (auto& [name, p] : named_parameters()) out.push_back(p);
    return out;
}

size_t Module::parameter_count() const {
    size_t n = 0;
    for (auto& [name, p] : named_parameters()) n += p.numel();
    return n;
}

void Module::zero_grad() {
    for (auto& [name, p] : named_parameters()) p.zero_grad();
}

void Module::to(DType dtype) {
    for (auto [name, p] : named_parameters()) p.convert_(dtype);
}

void Module::to(Device device) {
    move_to(parameters(), device);
    std::vector<Tensor> buffers;  // a block of their own: the parameters' stays one run for the optimiser
    collect_buffers(buffers);
    move_to(buffers, device);
}

void Module::collect_buffers(std::vector<Tensor>& out) const {
    out.insert(out.end(), buffers_.begin(), buffers_.end());
    for (const auto& [name, child] : children_) child->collect_buffers(out);
}

Tensor Module::register_buffer(Tensor value) {
    buffers_.push_back(value);
    return value;
}

void Module::stack_members(size_t members) {
    if (members_ != 1) fail("stack_members", "the module is stacked already");
    for (auto [name, p] : named_parameters()) p.stack_(members);  // each tensor once (a tied one is listed once)
    const auto mark = [members](auto&& self, Module& m) -> void {
        m.members_ = members;
        for (auto& [name, child] : m.children_) self(self, *child);
    };
    mark(mark, *this);
}

void Module::train(bool training) {
    training_ = training;
    for (auto& [name, child] : children_) child->train(training);
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
    std::map<std::string, Tensor> given(state.begin(), state.end());
    std::vector<std::string> missing, unexpected, conflicts;
    const NamedTensors own = named_parameters();
    std::map<std::string, Tensor> own_by_name(own.begin(), own.end());
    for (const auto& [name, p] : own) {
        auto it = given.find(name);
        if (it == given.end()) missing.push_back(name);
        else if (it->second.shape() != p.shape())
            conflicts.push_back(name + " (checkpoint " + shape_str(it->second.shape()) + ", model " + shape_str(p.shape()) + ")");
    }
    for (const auto& [name, t] : state)
        if (!own_by_name.count(name)) unexpected.push_back(name);
    auto join = [](const std::vector<std::string>& names) {
        std::string s;
        for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
        return s;
    };
    std::string problems;
    if (strict && !missing.empty()) problems += "missing: " + join(missing) + "; ";
    if (strict && !unexpected.empty()) problems += "unexpected: " + join(unexpected) + "; ";
    if (!conflicts.empty()) problems += "shape mismatch: " + join(conflicts) + "; ";
    if (!problems.empty()) fail("load_state_dict", problems.substr(0, problems.size() - 2));
    for (auto [name, p] : own) {  // handles: assigning writes into the model
        auto it = given.find(name);
        if (it != given.end()) p.assign(it->second);
    }
}

}  // namespace attnlab
