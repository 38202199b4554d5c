// attnlab._core: the C++ half of the Python module (python/attnlab/__init__.py
// is the public face). A loaded checkpoint's model runs on token arrays with
// hooks that record, replace (a Python function's result) or take gradients at
// named hook points (layers/hooks.h), all through the same forward the CLI runs.
//
// Arrays: a recorded activation, a gradient and a CPU parameter cross into
// numpy without a copy (the array keeps the tensor alive); logits and token
// inputs are copied once (the input into the engine's int32 layout), and so is
// a replacement a hook returns.
//
// Errors: every attnlab error (Error, ConfigError, a bad token) becomes a
// ValueError holding the CLI's message; a hook pattern that names no point, a
// KeyError; a missing file, FileNotFoundError; a call into a model from a hook
// of that model's own forward, RuntimeError. Exceptions raised by a hook
// function pass through unchanged. The arguments' types and ranges are checked
// before they get here (python/attnlab/inputs.py); the checks here are the last
// line, for a caller of _core itself.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/cpu/memory.h"
#include "autograd/ops.h"
#include "autograd/tensor_impl.h"
#include "data/quoted.h"
#include "data/text_task.h"
#include "experiments/config/config.h"
#include "experiments/run/load_checkpoint.h"
#include "experiments/run/model_factory.h"
#include "layers/hooks.h"

namespace py = pybind11;

namespace attnlab {
namespace {

struct KeyError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// A forward entered while one of the same model is running (from a hook function).
struct ReentryError : std::logic_error {
    using std::logic_error::logic_error;
};

// ---- arrays ----

// A CPU tensor as a numpy array over its own storage (kept alive by the array).
py::array to_numpy(const Tensor& tensor) {
    const Tensor t = tensor.device() == Device::cpu ? tensor : tensor.detach().to(Device::cpu);
    auto* keep = new Tensor(t);
    py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
    const std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
    if (t.dtype() == DType::f32) return py::array_t<float>(shape, t.impl().array<float>().data(), owner);
    return py::array_t<double>(shape, t.impl().array<double>().data(), owner);
}

// A numpy array as a new tensor of its own dtype (float32 or float64; anything
// else is refused naming `what`).
Tensor from_numpy(const py::array& a, const std::string& what) {
    const Shape shape(a.shape(), a.shape() + a.ndim());
    if (py::isinstance<py::array_t<float>>(a)) {
        const auto c = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
        Array<float> values = make_array<float>(shape);
        std::memcpy(values.data(), c.data(), values.size() * sizeof(float));
        return wrap(std::move(values));
    }
    if (py::isinstance<py::array_t<double>>(a)) {
        const auto c = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
        Array<double> values = make_array<double>(shape);
        std::memcpy(values.data(), c.data(), values.size() * sizeof(double));
        return wrap(std::move(values));
    }
    throw Error(what + ": expected a float32 or float64 array, got dtype " + std::string(py::str(a.dtype())));
}

// A numpy array of real numbers (integers or floats) as a new tensor of `dtype`,
// cast as numpy casts; anything else is refused naming `what`.
Tensor from_numpy_as(const py::array& a, DType dtype, const std::string& what) {
    const char kind = a.dtype().kind();
    if (kind != 'f' && kind != 'i' && kind != 'u')
        throw Error(what + ": expected an array of numbers, got dtype " + std::string(py::str(a.dtype())));
    if (dtype == DType::f32) {
        if (py::isinstance<py::array_t<double>>(a)) {  // a float64 value beyond float32's range would turn into inf
            const auto wide = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
            for (py::ssize_t i = 0; i < wide.size(); ++i)
                if (std::isfinite(wide.data()[i]) && std::abs(wide.data()[i]) > std::numeric_limits<float>::max()) {
                    std::ostringstream value;
                    value << wide.data()[i];
                    throw Error(what + ": " + value.str() + " (at flat index " + std::to_string(i) +
                                ") is beyond float32's range, the logits' dtype");
                }
        }
        return from_numpy(py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a), what);
    }
    return from_numpy(py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a), what);
}

template <class T>
void check_finite(const T* values, size_t n, const std::string& what) {
    for (size_t i = 0; i < n; ++i)
        if (!std::isfinite(values[i])) throw Error(what + ": holds a non-finite value (" + std::to_string(values[i]) + ")");
}

// A CPU tensor's values read where they lie.
void check_finite(const Tensor& t, const std::string& what) {
    if (t.dtype() == DType::f32) check_finite(t.impl().array<float>().data(), t.numel(), what);
    else check_finite(t.impl().array<double>().data(), t.numel(), what);
}

// Marks a model as running a forward for the guard's lifetime: a hook function
// that calls back into the same model (m.run inside a hook of m) would run the
// forward with the caller's hooks still attached, into itself again.
class Running {
public:
    Running(bool& running, const char* call) : running_(running) {
        if (running_)
            throw ReentryError(std::string(call) + ": called from a hook function while this model's forward is running; "
                               "a hook may not run the model it hooks (attnlab.load the checkpoint a second time for that)");
        running_ = true;
    }
    ~Running() { running_ = false; }
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;

private:
    bool& running_;
};

// ---- the model ----

class Model {
public:
    Model(const std::string& path, const std::string& device) {
        if (device != "cpu" && device != "cuda") throw Error("device: must be \"cpu\" or \"cuda\", got " + quoted_bytes(device));
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) throw std::filesystem::filesystem_error("[checkpoint] " + path + ": no such file", ec);
        loaded_ = load_checkpoint(path, device == "cpu" ? Device::cpu : Device::cuda);
        path_ = path;
    }

    const std::string& path() const { return path_; }
    int64_t step() const { return loaded_.checkpoint.step; }
    std::string config_toml() const { return to_toml(loaded_.config); }
    size_t positions() const { return loaded_.loaded.max_len; }
    bool encoder_decoder() const { return model().encoder_decoder(); }

    py::dict params() const {
        py::dict out;
        for (const auto& [name, p] : model().module().named_parameters()) out[py::str(name)] = to_numpy(p);
        return out;
    }

    std::vector<std::pair<std::string, std::vector<std::string>>> hook_points() const {
        std::vector<std::pair<std::string, std::vector<std::string>>> out;
        for (const Module::HookPoint& p : model().module().described_hook_points()) out.emplace_back(p.name, p.axes);
        return out;
    }

    std::vector<int32_t> to_tokens(const std::string& text) const {
        if (loaded_.config.task.name != "text") throw Error("to_tokens: task \"" + loaded_.config.task.name + "\" has no text (give token ids)");
        return text_to_tokens(text, loaded_.config.task.alphabet, "to_tokens");
    }

    std::string to_text(const std::vector<int32_t>& ids) const {
        if (loaded_.config.task.name != "text") throw Error("to_text: task \"" + loaded_.config.task.name + "\" has no text");
        check_ids(ids, "to_text");
        return tokens_to_text(ids, loaded_.config.task.alphabet);
    }

    // logits (B, T, V) and every point matching `record`.
    std::pair<py::array, py::dict> run(const py::array_t<int32_t>& tokens, const std::vector<size_t>& lengths,
                                       const std::vector<std::string>& record,
                                       const std::vector<std::pair<std::string, py::function>>& replace,
                                       const py::object& src, const std::vector<size_t>& src_lengths) const {
        const Running running(running_, "run");
        const Batch batch = make_batch(tokens, lengths, src, src_lengths);
        Hooks hooks;
        for (const std::string& pattern : record) hooks.record(pattern);
        // Hooks::at checks what the forward goes on with (shape, dtype, values),
        // whether the function returned it or edited its input in place
        for (const auto& [pattern, fn] : replace)
            hooks.replace(pattern, [fn](const std::string& name, const Tensor& value) {
                py::object out = fn(to_numpy(value), name);
                if (out.is_none()) return value;  // observed, or edited in place
                const py::array array = py::array::ensure(out);  // null when `out` is no array (its __array__ raised)
                if (!array)
                    throw Error("hook " + name + ": the replacement: expected an array, got " +
                                std::string(py::str(py::type::of(out).attr("__name__"))));
                return from_numpy(array, "hook " + name + ": the replacement").to(value.device());
            });
        ForwardInput input = forward_input(batch);
        input.tables = recorded_attention_tables(model(), hooks);
        check_table_fits("tokens", forward_tables(model(), input));
        NoGradGuard no_grad;
        if (record.empty() && replace.empty()) return {to_numpy(model().forward(batch)), py::dict()};  // no hooks to attach
        check_patterns(hooks);
        const Tensor logits = model().forward(batch, hooks);
        return {to_numpy(logits), recorded(hooks)};
    }

    // d(sum(logits * seed))/d(activation) at every point matching `names`, and
    // that sum: the gradient of any scalar metric of the logits whose own
    // gradient with respect to the logits is `seed` (B, T, V).
    std::pair<double, py::dict> grad(const py::array_t<int32_t>& tokens, const std::vector<size_t>& lengths, const py::array& seed,
                                     const std::vector<std::string>& names, const py::object& src,
                                     const std::vector<size_t>& src_lengths) const {
        const Running running(running_, "grad");
        const Batch batch = make_batch(tokens, lengths, src, src_lengths);
        // each point's value continues as value + zero, the zero a leaf whose gradient is the point's
        std::vector<std::pair<std::string, Tensor>> zeros;
        Hooks hooks;
        for (const std::string& pattern : names)
            hooks.replace(pattern, [&zeros](const std::string& name, const Tensor& value) {
                Tensor zero = Tensor::zeros(value.shape(), value.dtype(), true);
                if (value.device() != Device::cpu) move_to({zero}, value.device());
                zeros.emplace_back(name, zero);
                return value + zero;
            });
        check_patterns(hooks);
        ForwardInput input = forward_input(batch);
        input.tables = 2 * recorded_attention_tables(model(), hooks);  // a replaced table's value and its gradient
        input.graph = true;
        check_table_fits("tokens", forward_tables(model(), input));
        const Tensor logits = model().forward(batch, hooks);
        // any real array, cast to the logits' dtype (float64 W for a float32 model: rounded)
        Tensor w = from_numpy_as(seed, logits.dtype(), "grad: the metric's gradient");
        if (w.shape() != logits.shape())
            throw Error("grad: the metric's gradient must have the logits' shape " + shape_str(logits.shape()) + ", got " +
                        shape_str(w.shape()));
        check_finite(w, "grad: the metric's gradient (as " + to_string(logits.dtype()) + ")");
        w = w.to(logits.device());
        const double value = sum(logits.detach() * w).item();
        logits.backward(w);
        py::dict out;
        for (const auto& [name, zero] : zeros) {
            if (out.contains(name)) throw Error("grad: " + name + " was reached twice in one forward");
            out[py::str(name)] = to_numpy(zero.grad());
        }
        for (const auto& [name, p] : model().module().named_parameters()) Tensor(p).zero_grad();
        return {value, out};
    }

    // Seconds per forward pass of the engine alone (no hooks, no arrays), the
    // mean of `repeats`: what a call through the module adds is measured against it (bench/).
    double forward_seconds(const py::array_t<int32_t>& tokens, const std::vector<size_t>& lengths, int repeats) const {
        if (repeats < 1) throw Error("forward_seconds: repeats must be >= 1");
        const Running running(running_, "forward_seconds");
        const Batch batch = make_batch(tokens, lengths, py::none(), {});
        NoGradGuard no_grad;
        model().forward(batch);  // warm
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < repeats; ++i) model().forward(batch);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
    }

private:
    const TaskModel& model() const { return *loaded_.loaded.model; }

    void check_ids(const std::vector<int32_t>& ids, const std::string& what) const {
        const auto vocab = static_cast<int64_t>(loaded_.config.task.vocab);
        for (int32_t id : ids)
            if (id < 0 || id >= vocab)
                throw Error(what + ": token " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }

    Batch make_batch(const py::array_t<int32_t>& tokens, const std::vector<size_t>& lengths, const py::object& src,
                     const std::vector<size_t>& src_lengths) const {
        if (tokens.ndim() != 2) throw Error("tokens: expected a (batch, positions) array, got " + std::to_string(tokens.ndim()) + " axes");
        const auto B = static_cast<size_t>(tokens.shape(0)), T = static_cast<size_t>(tokens.shape(1));
        if (B == 0 || T == 0) throw Error("tokens: empty (" + std::to_string(B) + " x " + std::to_string(T) + ")");
        Batch batch;
        batch.inputs = Indices({B, T}, std::vector<int32_t>(tokens.data(), tokens.data() + B * T));
        check_ids(batch.inputs.values, "tokens");
        batch.lengths = lengths.empty() ? std::vector<size_t>(B, T) : lengths;
        check_lengths(batch.lengths, B, T, "lengths");
        const ModelConfig shape = model_config(loaded_.config, loaded_.loaded.max_len);
        if (shape.position_table() && T > shape.max_len)
            throw Error("tokens: " + std::to_string(T) + " positions exceed the model's " + std::to_string(shape.max_len));
        if (model().encoder_decoder()) {
            if (src.is_none()) throw Error("src: an encoder-decoder needs the source tokens (src=...)");
            const auto s = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(src);
            if (!s || s.ndim() != 2 || static_cast<size_t>(s.shape(0)) != B)
                throw Error("src: expected a (" + std::to_string(B) + ", source positions) integer array");
            const auto S = static_cast<size_t>(s.shape(1));
            batch.src = Indices({B, S}, std::vector<int32_t>(s.data(), s.data() + B * S));
            check_ids(batch.src.values, "src");
            batch.src_lengths = src_lengths.empty() ? std::vector<size_t>(B, S) : src_lengths;
            check_lengths(batch.src_lengths, B, S, "src_lengths");
        } else if (!src.is_none()) {
            throw Error("src: a decoder model takes no source tokens");
        }
        return batch;
    }

    // The batch's sizes, for refusing a forward that cannot fit in memory before
    // it runs (forward_tables, check_table_fits naming `tokens`).
    ForwardInput forward_input(const Batch& batch) const {
        return {.rows = batch.inputs.shape[0], .positions = batch.inputs.shape[1],
                .sources = model().encoder_decoder() ? batch.src.shape[1] : 0};
    }

    static void check_lengths(const std::vector<size_t>& lengths, size_t B, size_t T, const std::string& what) {
        if (lengths.size() != B)
            throw Error(what + ": " + std::to_string(lengths.size()) + " lengths for " + std::to_string(B) + " sequences");
        for (size_t n : lengths)
            if (n < 1 || n > T) throw Error(what + ": " + std::to_string(n) + " is not in [1, " + std::to_string(T) + "]");
    }

    // A pattern that names no point is a KeyError before anything runs (HookScope's
    // message); a pattern once found good is not checked again.
    void check_patterns(Hooks& hooks) const {
        std::vector<std::string> unchecked;
        for (const std::string& pattern : hooks.patterns())
            if (!good_patterns_.count(pattern)) unchecked.push_back(pattern);
        if (unchecked.empty()) return;
        Hooks probe;
        for (const std::string& pattern : unchecked) probe.record(pattern);
        try {
            HookScope scope(model().module(), probe);
        } catch (const Error& e) {
            throw KeyError(e.what());
        }
        good_patterns_.insert(unchecked.begin(), unchecked.end());
    }

    // name -> the last activation recorded there
    static py::dict recorded(const Hooks& hooks) {
        py::dict out;
        for (const std::string& name : hooks.recorded_names()) out[py::str(name)] = to_numpy(hooks.last(name));
        return out;
    }

    std::string path_;
    LoadedCheckpoint loaded_;
    mutable std::set<std::string> good_patterns_;
    mutable bool running_ = false;  // a forward is under way (Running)
};

}  // namespace
}  // namespace attnlab

PYBIND11_MODULE(_core, m) {
    using namespace attnlab;
    m.doc() = "attnlab's C++ core (use the package `attnlab`)";
    // freed tensors' memory (up to 64 MiB) stays in the process between calls (autograd/cpu/memory.h)
    keep_freed_memory(size_t(64) << 20);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const KeyError& e) {
            PyErr_SetString(PyExc_KeyError, e.what());
        } catch (const ReentryError& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        } catch (const std::filesystem::filesystem_error& e) {
            PyErr_SetString(PyExc_FileNotFoundError, e.what());
        } catch (const std::bad_alloc&) {
            PyErr_SetString(PyExc_MemoryError, "out of memory");
        } catch (const std::runtime_error& e) {  // Error, ConfigError: bad input, with the CLI's message
            PyErr_SetString(PyExc_ValueError, e.what());
        }
    });
    m.def("pattern_matches", &hook_pattern_matches, py::arg("pattern"), py::arg("name"),
          "whether a hook point pattern (an exact name, or a glob with * and ?) names `name`");
    py::class_<Model>(m, "Model")
        .def(py::init<const std::string&, const std::string&>(), py::arg("path"), py::arg("device") = "cpu")
        .def_property_readonly("path", &Model::path)
        .def_property_readonly("step", &Model::step)
        .def_property_readonly("config_toml", &Model::config_toml)
        .def_property_readonly("positions", &Model::positions)
        .def_property_readonly("encoder_decoder", &Model::encoder_decoder)
        .def("params", &Model::params)
        .def("hook_points", &Model::hook_points)
        .def("to_tokens", &Model::to_tokens)
        .def("to_text", &Model::to_text)
        .def("run", &Model::run, py::arg("tokens"), py::arg("lengths"), py::arg("record"), py::arg("replace"), py::arg("src"),
             py::arg("src_lengths"))
        .def("forward_seconds", &Model::forward_seconds, py::arg("tokens"), py::arg("lengths"), py::arg("repeats"))
        .def("grad", &Model::grad, py::arg("tokens"), py::arg("lengths"), py::arg("seed"), py::arg("names"), py::arg("src"),
             py::arg("src_lengths"));
}
