// Named hook points (after TransformerLens's HookPoint): every activation a
// researcher asks about passes through a point with a dotted name in the style
// of the parameter names, e.g. "blocks.1.attn.pattern". A Hooks object
// attached to a model (HookScope) records those activations or replaces them;
// metrics, inspect, audit, ablate and generate are written on it and never
// reach into a layer's fields. The README lists every point and its shape.
//
// Patterns name points exactly or with '*' wildcards ("blocks.*.attn.pattern",
// "*.z"), matched as shell globs over the whole name. A pattern that matches
// none of the model's points is an error when the scope is opened, so a typo
// never records nothing silently.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

class Module;

// What a hook point's activation may hold after a hook, whichever way the hook
// changed it (a replacement it returned, or its input edited in place): finite
// values everywhere, or (the attention scores) finite values or -inf, -inf being
// a key its query may not attend to (a mask's, or a knockout). A hook may not
// bring NaN or +inf, nor -inf anywhere else; a point that held such values before
// the hook (a diverged model's) is not the hook's doing and is not refused.
enum class HookValues { finite, finite_or_minus_inf };

class Hooks {
public:
    // (name, value) -> the value the forward continues with: same shape and dtype,
    // and values the point allows (HookValues; checked after every call).
    using Replace = std::function<Tensor(const std::string& name, const Tensor& value)>;

    // Keeps a copy (no graph, on the CPU) of every activation whose name matches,
    // one per forward call that reaches it (a KV-cached decode adds one per step).
    Hooks& record(const std::string& pattern);
    // Calls `fn` on every activation whose name matches; the forward goes on with
    // what it returns, in the graph (gradients flow through a replacement). On the
    // device, with no graph to keep (no_grad, or an input that wants none), `fn`
    // gets a CPU copy and its result is moved back: analysis written with CPU ops
    // runs on a model on either device.
    Hooks& replace(const std::string& pattern, Replace fn);

    // What was recorded under `name` (exact), oldest first; throws when nothing was.
    const std::vector<Tensor>& recorded(const std::string& name) const;
    const Tensor& last(const std::string& name) const { return recorded(name).back(); }
    bool has_recorded(const std::string& name) const { return recorded_.count(name) > 0; }
    // Every name something was recorded under, in name order.
    std::vector<std::string> recorded_names() const {
        std::vector<std::string> names;
        for (const auto& [name, values] : recorded_) names.push_back(name);
        return names;
    }
    void clear_recorded() {
        recorded_.clear();
        last_source_ = last_copy_ = Tensor();
    }

    // For the layers: whether any hook wants this point (so that an activation that
    // costs something to form is formed only then), whether one may change it, and
    // the point itself, whose values a replacement must keep within `allowed`.
    bool wants(const std::string& name) const;
    bool replaces(const std::string& name) const;
    Tensor at(const std::string& name, const Tensor& value, HookValues allowed = HookValues::finite);

    // Every pattern given, for the scope's check.
    std::vector<std::string> patterns() const;

private:
    struct Replacement {
        std::string pattern;
        Replace fn;
    };
    std::vector<std::string> records_;
    std::vector<Replacement> replacements_;
    std::map<std::string, std::vector<Tensor>> recorded_;
    // The last activation recorded and its copy: a point that passes on the very
    // tensor the point before it recorded (self-attention's in and in_kv) records
    // the same copy, so the two stay one tensor (Tensor::same) for whoever reads them.
    Tensor last_source_, last_copy_;
};

// Whether `name` matches `pattern` (exact, or a glob with '*' and '?').
bool hook_pattern_matches(const std::string& pattern, const std::string& name);
// The (at most three) names sharing the longest prefix with `pattern`,
// comma-separated: what an error about a pattern that names nothing suggests.
std::string nearest_names(const std::string& pattern, const std::vector<std::string>& names);

// Attaches `hooks` to every module of `model` for its lifetime and detaches
// them after, whatever happens in between. Throws "[hooks] no hook point
// matches \"...\"" (with the nearest names) for a pattern that names nothing.
class HookScope {
public:
    HookScope(const Module& model, Hooks& hooks);
    ~HookScope();
    HookScope(const HookScope&) = delete;
    HookScope& operator=(const HookScope&) = delete;

private:
    const Module& model_;
};

}  // namespace attnlab
