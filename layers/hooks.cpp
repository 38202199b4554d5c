#include "layers/hooks.h"

#include <fnmatch.h>
#include <locale.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <variant>

#include "autograd/tensor_impl.h"
#include "layers/module.h"

namespace attnlab {

bool hook_pattern_matches(const std::string& pattern, const std::string& name) {
    if (pattern.find_first_of("*?[") == std::string::npos) return pattern == name;
    // Byte by byte, in the C locale whatever the process's: under a UTF-8 locale
    // (Python sets one) glibc's fnmatch first converts both strings to wide
    // characters, which was a third of a hooked forward's hook matching. Hook
    // names are ASCII, so the two ways agree on every name.
    static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
    const locale_t previous = c_locale ? uselocale(c_locale) : nullptr;
    const bool match = fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
    if (previous) uselocale(previous);
    return match;
}

Hooks& Hooks::record(const std::string& pattern) {
    records_.push_back(pattern);
    return *this;
}

Hooks& Hooks::replace(const std::string& pattern, Replace fn) {
    replacements_.push_back({pattern, std::move(fn)});
    return *this;
}

const std::vector<Tensor>& Hooks::recorded(const std::string& name) const {
    auto it = recorded_.find(name);
    if (it == recorded_.end()) fail("hooks", "nothing was recorded at " + name);
    return it->second;
}

bool Hooks::wants(const std::string& name) const {
    for (const std::string& p : records_)
        if (hook_pattern_matches(p, name)) return true;
    return replaces(name);
}

bool Hooks::replaces(const std::string& name) const {
    for (const Replacement& r : replacements_)
        if (hook_pattern_matches(r.pattern, name)) return true;
    return false;
}

namespace {

// The first value of `t` outside `allowed` as (flat index, value), or index
// numel() for none; read on the host (a device tensor is copied there first).
std::pair<size_t, double> first_outside(const Tensor& t, HookValues allowed) {
    const Tensor host = t.device() == Device::cpu ? t : t.detach().to(Device::cpu);
    return std::visit(
        [&](const auto& values) -> std::pair<size_t, double> {
            const auto* v = values.data();
            const size_t n = values.size();
            for (size_t i = 0; i < n; ++i) {
                if (std::isfinite(v[i])) continue;
                if (allowed == HookValues::finite_or_minus_inf && std::isinf(v[i]) && v[i] < 0) continue;
                return {i, static_cast<double>(v[i])};
            }
            return {n, 0.0};
        },
        host.impl().data);
}

// "(b, h, i, j)" of a flat index into `shape`
std::string index_str(size_t flat, const Shape& shape) {
    std::vector<size_t> index(shape.size());
    for (size_t a = shape.size(); a-- > 0;) {
        index[a] = flat % shape[a];
        flat /= shape[a];
    }
    std::string out = "(";
    for (size_t a = 0; a < index.size(); ++a) out += (a ? ", " : "") + std::to_string(index[a]);
    return out + ")";
}

// A replacement computed with CPU ops on an activation on the device: without a
// graph to keep, it sees a CPU copy and its result goes back to the device (with
// one, it sees the device tensor, so that gradients flow through it). Its shape,
// dtype and values are checked, in place edits of its input included: what it
// returns is checked after the call, whether or not it is the tensor it was given.
Tensor replaced(const Hooks::Replace& fn, const std::string& name, const Tensor& current, HookValues allowed) {
    const bool on_host = current.device() == Device::cpu || (grad_enabled() && current.requires_grad());
    const Tensor given = on_host ? current : current.to(Device::cpu);
    const bool allowed_before = first_outside(given, allowed).first == given.numel();
    const Tensor next = fn(name, given);
    if (!next.defined() || next.shape() != current.shape() || next.dtype() != current.dtype())
        fail("hooks", name + ": a replacement must keep shape " + shape_str(current.shape()) + " and dtype " +
                          to_string(current.dtype()) +
                          (next.defined() ? ", got " + shape_str(next.shape()) + " " + to_string(next.dtype())
                                          : ", got an undefined tensor"));
    if (allowed_before) {
        const auto [at, value] = first_outside(next, allowed);
        if (at != next.numel()) {
            std::ostringstream v;
            v << value;  // nan, inf, -inf
            fail("hooks", name + ": after the hook it holds a non-finite value, " + v.str() + " at " + index_str(at, next.shape()) +
                              (allowed == HookValues::finite ? " (only finite values may follow a hook here)"
                                                             : " (scores may be -inf, a key not attended to, but not NaN or +inf)"));
        }
    }
    return on_host || next.device() != Device::cpu ? next : next.to(current.device());
}

}  // namespace

Tensor Hooks::at(const std::string& name, const Tensor& value, HookValues allowed) {
    Tensor current = value;
    for (const Replacement& r : replacements_) {
        if (!hook_pattern_matches(r.pattern, name)) continue;
        current = replaced(r.fn, name, current, allowed);
    }
    for (const std::string& p : records_)
        if (hook_pattern_matches(p, name)) {
            if (!current.same(last_source_)) {
                last_source_ = current;
                last_copy_ = current.detach().to(Device::cpu);  // read on the host, whichever device ran
            }
            recorded_[name].push_back(last_copy_);
            break;
        }
    return current;
}

std::vector<std::string> Hooks::patterns() const {
    std::vector<std::string> out = records_;
    for (const Replacement& r : replacements_) out.push_back(r.pattern);
    return out;
}

std::string nearest_names(const std::string& pattern, const std::vector<std::string>& names) {
    auto common = [&](const std::string& p) {
        size_t n = 0;
        while (n < p.size() && n < pattern.size() && p[n] == pattern[n]) ++n;
        return n;
    };
    std::vector<std::string> sorted = names;
    std::stable_sort(sorted.begin(), sorted.end(), [&](const auto& a, const auto& b) { return common(a) > common(b); });
    std::string out;
    for (size_t i = 0; i < std::min<size_t>(3, sorted.size()); ++i) out += (i ? ", " : "") + sorted[i];
    return out;
}

HookScope::HookScope(const Module& model, Hooks& hooks) : model_(model) {
    const std::vector<std::string> points = model.hook_points();
    for (const std::string& pattern : hooks.patterns()) {
        const bool any = std::any_of(points.begin(), points.end(),
                                     [&](const std::string& p) { return hook_pattern_matches(pattern, p); });
        if (!any)
            fail("hooks", "no hook point matches \"" + pattern + "\" (nearest: " + nearest_names(pattern, points) + ")");
    }
    model_.attach_hooks(&hooks);
}

HookScope::~HookScope() { model_.attach_hooks(nullptr); }

}  // namespace attnlab
