// Module: named parameters in PyTorch's dotted style, kept in registration
// order; train/eval; state_dict / load_state_dict (strict by default); named
// hook points (layers/hooks.h) under the same dotted names.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "autograd/named_tensors.h"
#include "autograd/tensor.h"
#include "layers/hooks.h"

namespace attnlab {

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
    // Moves every parameter (and buffer) to `device` in place: to the cuda device as
    // one flat block of values and one of gradients (autograd/tensor.h, move_to).
    // Make the optimiser after the move. float32 only.
    void to(Device device);

    // Stacked members (train.seeds): every parameter becomes `members` copies along a
    // new leading axis, in place (Tensor::stack_), which the ops read as that many
    // models side by side, the batch's rows in as many blocks (autograd/ops.h). The
    // layers that compose ops on a parameter themselves take the stacked form where
    // they say so (the learned positions); the others refuse it. The cpu only.
    void stack_members(size_t members);
    size_t members() const { return members_; }  // 1 unless stacked

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

    // Every hook point of this module and its children, dotted ("blocks.0.attn.q"),
    // in registration order.
    std::vector<std::string> hook_points() const;
    // The same with the axes of each point's activation, outermost first
    // ({"blocks.0.attn.q", {"batch", "query_pos", "head", "d_head"}}): what an
    // analysis reads a layout from instead of knowing it (docs/hook_points.md).
    struct HookPoint {
        std::string name;
        std::vector<std::string> axes;
    };
    std::vector<HookPoint> described_hook_points() const;
    // One point's axes as text, "batch query_pos head d_head" ("" for no such point).
    std::string hook_point_axes(const std::string& name) const;
    // Attaches `hooks` (null: detaches) to this module and every child, each under
    // its dotted path. Prefer HookScope, which also detaches.
    void attach_hooks(Hooks* hooks) const { attach(hooks, ""); }

protected:
    // Names this module's hook points (relative: "q", "pattern") with the axes of
    // their activations, space-separated from one vocabulary: batch, pos (the
    // positions of the stream the point is on), query_pos, key_pos, head,
    // kv_head, d_head, d_model, d_ffn, vocab. E.g. {"q", "batch query_pos head d_head"};
    // and the values a hook may leave there (finite, unless the point says more).
    struct HookPointDeclaration {
        const char* name;
        const char* axes;
        HookValues values = HookValues::finite;
    };
    void declare_hook_points(std::initializer_list<HookPointDeclaration> points);
    // A hook point: `value` itself, or what an attached hook replaced it with
    // (within the values the point's declaration allows).
    Tensor hook(const char* point, const Tensor& value) const {
        return hooks_ == nullptr ? value : hook_slow(point, value);
    }
    // Whether an attached hook wants `point` at all (activations that cost
    // something to form are formed only then), and whether it may replace it.
    bool hooked(const char* point) const { return hooks_ != nullptr && hooked_slow(point, false); }
    bool hook_replaces(const char* point) const { return hooks_ != nullptr && hooked_slow(point, true); }
    // A point's full name while hooks are attached ("blocks.0.attn.scores"), for messages.
    std::string hook_point_name(const char* point) const { return path_ + point; }

    // Marks `value` as requiring grad and registers it; returns the same handle.
    Tensor register_parameter(const std::string& name, Tensor value);
    // A tensor that is not a parameter but moves with the module (a fixed table);
    // not in state_dict. Returns the same handle.
    Tensor register_buffer(Tensor value);

private:
    void collect(const std::string& prefix, NamedTensors& out) const;
    void collect_buffers(std::vector<Tensor>& out) const;
    void attach(Hooks* hooks, const std::string& path) const;
    void collect_hook_points(const std::string& prefix, std::vector<std::string>& out) const;
    Tensor hook_slow(const char* point, const Tensor& value) const;
    bool hooked_slow(const char* point, bool replace) const;

    std::vector<std::pair<std::string, Tensor>> parameters_;
    std::vector<std::pair<std::string, Module*>> children_;
    std::vector<Tensor> buffers_;
    bool training_ = true;
    size_t members_ = 1;
    std::vector<HookPointDeclaration> hook_points_;
    mutable Hooks* hooks_ = nullptr;  // attached for analysis; null in plain training
    mutable std::string path_;        // "blocks.0.attn." while hooks are attached
};

}  // namespace attnlab
