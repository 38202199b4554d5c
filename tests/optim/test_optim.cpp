// Optimisers against PyTorch: SGD (momentum, Nesterov, weight decay), Adam (with
// and without L2 weight decay) and AdamW (make_adamw: decoupled decay, none on
// vectors) step by step against torch.optim from the same parameters and
// gradients; clip_grad_norm against torch.nn.utils.clip_grad_norm_; scheduled_lr
// against its documented formulas (computed in Python). Then: state()/load_state()
// resumes exactly, and parse_schedule rejects unknown names.
//
// Tolerances (never loosen one to make a case pass):
//   float32 runs  absolute 1e-6 on parameters and gradients (all of order 1);
//                 relative 1e-6 on the total gradient norm (about 4.8).
//   float64 runs  absolute 1e-10 on everything, schedules included.
//
// The fixtures come from tests/reference/torch_optim_fixtures.py (its docstring
// gives the file layout); CTest runs it first and passes the file in
// ATTNLAB_OPTIM_FIXTURES. Without the file the OptimTorch.* tests FAIL, never skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "optim/optimizer.h"
#include "tests/reference/compare.h"
#include "tests/reference/h5_reader.h"

namespace attnlab {
namespace {

constexpr double kAbsTolerance32 = 1e-6;   // float32 parameters and gradients, absolute
constexpr double kRelTolerance32 = 1e-6;   // float32 total norm, relative
constexpr double kAbsTolerance64 = 1e-10;  // float64, absolute
constexpr const char* kFormat = "attnlab-torch-optim-fixtures";
constexpr const char* kHowToGenerate =
    "generate the fixtures with\n"
    "    /usr/bin/python3 tests/reference/torch_optim_fixtures.py build/torch_optim_fixtures.h5\n"
    "    export ATTNLAB_OPTIM_FIXTURES=$PWD/build/torch_optim_fixtures.h5\n"
    "(needs python3-torch, python3-h5py, python3-numpy), or run the suite through ctest, which does both:\n"
    "    ctest --test-dir build -L optim --output-on-failure";

const char* dtype_name(DType dtype) { return dtype == DType::f32 ? "float32" : "float64"; }

// The file named by ATTNLAB_OPTIM_FIXTURES; on any problem, a test failure saying
// what is missing and how to make it, and nullptr.
std::unique_ptr<FixtureFile> open_fixtures() {
    const char* path = std::getenv("ATTNLAB_OPTIM_FIXTURES");
    if (path == nullptr || *path == '\0') {
        ADD_FAILURE() << "ATTNLAB_OPTIM_FIXTURES is not set; " << kHowToGenerate;
        return nullptr;
    }
    if (!std::filesystem::is_regular_file(path)) {
        ADD_FAILURE() << "ATTNLAB_OPTIM_FIXTURES=" << path << " does not exist; " << kHowToGenerate;
        return nullptr;
    }
    try {
        auto file = std::make_unique<FixtureFile>(path);
        const std::string format = file->attr_string("/", "format");
        if (format != kFormat) {
            ADD_FAILURE() << path << " has format \"" << format << "\", expected \"" << kFormat << "\"; " << kHowToGenerate;
            return nullptr;
        }
        return file;
    } catch (const std::exception& e) {
        ADD_FAILURE() << e.what() << "; " << kHowToGenerate;
        return nullptr;
    }
}

// Row `index` of a stacked tensor: (N, ...) -> (...).
Tensor row(const Tensor& stacked, size_t index) {
    const Shape shape(stacked.shape().begin() + 1, stacked.shape().end());
    const size_t n = numel_of(shape);
    const std::vector<double> all = stacked.values();
    const std::vector<double> part(all.begin() + static_cast<std::ptrdiff_t>(index * n),
                                   all.begin() + static_cast<std::ptrdiff_t>((index + 1) * n));
    return Tensor::from_values(part, shape, stacked.dtype());
}

// Sets p.grad to exactly g: d sum(p * g) / dp = 1 * g, no rounding.
void set_grad(Tensor p, const Tensor& g) {
    p.zero_grad();
    sum(p * g).backward();
    ASSERT_EQ(p.grad().values(), g.values()) << "set_grad did not reproduce the gradient exactly";
}

double abs_tolerance(DType dtype) { return dtype == DType::f32 ? kAbsTolerance32 : kAbsTolerance64; }

// The two parameters of every fixture, "weight" (3,4) and "bias" (4,), as fresh leaves.
NamedTensors initial_params(const FixtureFile& file, DType dtype) {
    return {{"weight", file.tensor("initial/weight", true, dtype)}, {"bias", file.tensor("initial/bias", true, dtype)}};
}

// The optimiser a fixture group describes, with attnlab's constructors.
std::unique_ptr<Optimizer> make_optimizer(const FixtureFile& file, const std::string& group, NamedTensors params) {
    const std::string kind = file.attr_string(group, "optimizer");
    const double lr = file.attr_double(group, "lr"), weight_decay = file.attr_double(group, "weight_decay");
    if (kind == "SGD")
        return std::make_unique<SGD>(std::move(params), lr, file.attr_double(group, "momentum"),
                                     file.attr_int(group, "nesterov") != 0, weight_decay);
    const double beta1 = file.attr_double(group, "beta1"), beta2 = file.attr_double(group, "beta2"),
                 eps = file.attr_double(group, "eps");
    if (kind == "Adam") return std::make_unique<Adam>(std::move(params), lr, beta1, beta2, eps, weight_decay);
    if (kind == "AdamW") return make_adamw(std::move(params), lr, beta1, beta2, eps, weight_decay);
    ADD_FAILURE() << group << ": unknown optimizer \"" << kind << "\"";
    return nullptr;
}

// Runs the optimiser of optimizers/<name> for every stored step, in float32 and
// float64, and compares the parameters after each step with torch's.
void check_optimizer(const std::string& name) {
    std::unique_ptr<FixtureFile> file = open_fixtures();
    ASSERT_NE(file, nullptr);
    const std::string group = "optimizers/" + name;
    ASSERT_TRUE(file->has(group)) << "the fixture file has no " << group << "; regenerate it. " << kHowToGenerate;
    const size_t steps = static_cast<size_t>(file->attr_int("/", "steps"));
    for (DType dtype : {DType::f32, DType::f64}) {
        NamedTensors params = initial_params(*file, dtype);
        std::unique_ptr<Optimizer> opt = make_optimizer(*file, group, params);
        ASSERT_NE(opt, nullptr);
        for (const auto& [pname, p] : params) {
            const Tensor expected = file->tensor(group + "/" + dtype_name(dtype) + "/" + pname, false, dtype);
            ASSERT_EQ(expected.size(0), steps) << group << "/" << pname;
        }
        std::vector<double> worst(params.size(), 0.0);  // per parameter, over all steps
        for (size_t step = 0; step < steps; ++step) {
            for (const auto& [pname, p] : params) set_grad(p, row(file->tensor("grads/" + pname, false, dtype), step));
            opt->step();
            for (size_t i = 0; i < params.size(); ++i) {
                const auto& [pname, p] = params[i];
                const std::string what = group + "/" + dtype_name(dtype) + "/" + pname;
                const double diff = max_abs_difference(p, row(file->tensor(what, false, dtype), step), what);
                EXPECT_LE(diff, abs_tolerance(dtype)) << what << " after step " << step + 1
                                                      << ": attnlab and torch disagree (NaN: a NaN or a shape mismatch)";
                worst[i] = std::isnan(diff) || std::isnan(worst[i]) ? NAN : std::max(worst[i], diff);
            }
        }
        for (size_t i = 0; i < params.size(); ++i)
            std::printf("[optim agreement] %-20s %-8s %-7s max |attnlab - torch| over %zu steps = %.3e\n", name.c_str(),
                        dtype_name(dtype), params[i].first.c_str(), steps, worst[i]);
    }
    std::fflush(stdout);
}

TEST(OptimTorch, SGD) { check_optimizer("sgd"); }
TEST(OptimTorch, SGDMomentum) { check_optimizer("sgd_momentum"); }
TEST(OptimTorch, SGDNesterovWeightDecay) { check_optimizer("sgd_nesterov_decay"); }
TEST(OptimTorch, Adam) { check_optimizer("adam"); }
TEST(OptimTorch, AdamWeightDecay) { check_optimizer("adam_decay"); }
// make_adamw leaves vectors undecayed; the fixture puts the bias in a torch param group with weight_decay 0
TEST(OptimTorch, AdamWNoDecayOnVectors) { check_optimizer("adamw"); }

// clip_grad_norm on clip/<name>/grads against torch's returned norm and clipped gradients.
void check_clip(const std::string& name) {
    std::unique_ptr<FixtureFile> file = open_fixtures();
    ASSERT_NE(file, nullptr);
    const std::string group = "clip/" + name;
    ASSERT_TRUE(file->has(group)) << "the fixture file has no " << group << "; regenerate it. " << kHowToGenerate;
    const double max_norm = file->attr_double(group, "max_norm");
    for (DType dtype : {DType::f32, DType::f64}) {
        const std::string results = group + "/" + dtype_name(dtype);
        NamedTensors params = {{"weight", Tensor::zeros({3, 4}, dtype, true)}, {"bias", Tensor::zeros({4}, dtype, true)}};
        for (const auto& [pname, p] : params) set_grad(p, file->tensor(group + "/grads/" + pname, false, dtype));

        const double norm = clip_grad_norm(params, max_norm);
        const double torch_norm = file->tensor(results + "/total_norm", false, DType::f64).item();
        const double norm_diff = std::abs(norm - torch_norm);
        if (dtype == DType::f32)
            EXPECT_LE(norm_diff, kRelTolerance32 * std::abs(torch_norm)) << results << "/total_norm: " << norm << " vs torch " << torch_norm;
        else
            EXPECT_LE(norm_diff, kAbsTolerance64) << results << "/total_norm: " << norm << " vs torch " << torch_norm;
        std::printf("[optim agreement] clip/%-15s %-8s total_norm %.7f  |attnlab - torch| = %.3e (max_norm %g)\n",
                    name.c_str(), dtype_name(dtype), norm, norm_diff, max_norm);
        for (const auto& [pname, p] : params) {
            const std::string what = results + "/" + pname;
            const double diff = max_abs_difference(p.grad(), file->tensor(what, false, dtype), what);
            EXPECT_LE(diff, abs_tolerance(dtype)) << what << ": clipped gradients disagree (NaN: a NaN or a shape mismatch)";
            std::printf("[optim agreement] clip/%-15s %-8s %-7s max |attnlab - torch| = %.3e\n", name.c_str(),
                        dtype_name(dtype), pname.c_str(), diff);
        }
    }
    std::fflush(stdout);
}

TEST(OptimTorch, ClipGradNormAboveMaxNorm) { check_clip("above"); }
TEST(OptimTorch, ClipGradNormBelowMaxNorm) { check_clip("below"); }

// scheduled_lr at every stored step of every schedules/<case>, against the
// documented formulas as evaluated in Python.
TEST(OptimTorch, ScheduledLrMatchesDocumentedFormulas) {
    std::unique_ptr<FixtureFile> file = open_fixtures();
    ASSERT_NE(file, nullptr);
    const std::vector<std::string> cases = {"constant_no_warmup", "constant_warmup", "linear_no_warmup",
                                            "linear_warmup",      "cosine_no_warmup", "cosine_warmup",
                                            "linear_floor",       "cosine_floor"};
    for (const std::string& name : cases) {
        const std::string group = "schedules/" + name;
        ASSERT_TRUE(file->has(group)) << "the fixture file has no " << group << "; regenerate it. " << kHowToGenerate;
        const Schedule schedule = parse_schedule(file->attr_string(group, "schedule"));
        const double base_lr = file->attr_double(group, "base_lr"), min_lr = file->attr_double(group, "min_lr");
        const long long warmup = file->attr_int(group, "warmup"), total = file->attr_int(group, "total");
        const std::vector<long long> steps = file->integers(group + "/step");
        const std::vector<double> expected = file->tensor(group + "/lr", false, DType::f64).values();
        ASSERT_EQ(steps.size(), expected.size()) << group;
        double worst = 0.0;
        for (size_t i = 0; i < steps.size(); ++i) {
            const double ours = scheduled_lr(base_lr, schedule, steps[i], warmup, total, min_lr);
            EXPECT_NEAR(ours, expected[i], kAbsTolerance64)
                << group << " at step " << steps[i] << " (warmup " << warmup << ", total " << total << ")";
            worst = std::max(worst, std::abs(ours - expected[i]));
        }
        std::printf("[optim agreement] %-27s max |attnlab - formula| over %zu steps = %.3e\n", group.c_str(),
                    steps.size(), worst);
    }
    std::fflush(stdout);
}

// ---- resuming from state() ----

// A deterministic gradient for parameter `which` at `step` (no fixture needed).
Tensor made_up_grad(const Shape& shape, size_t which, size_t step) {
    std::vector<double> values(numel_of(shape));
    for (size_t k = 0; k < values.size(); ++k)
        values[k] = std::sin(0.7 * static_cast<double>(k) + 1.3 * static_cast<double>(step) + 0.4 * static_cast<double>(which));
    return Tensor::from_values(values, shape);
}

void step_with_made_up_grads(Optimizer& opt, size_t step) {
    for (size_t i = 0; i < opt.params().size(); ++i) {
        const Tensor& p = opt.params()[i].second;
        set_grad(p, made_up_grad(p.shape(), i, step));
    }
    opt.step();
}

NamedTensors copies(const NamedTensors& params) {
    NamedTensors out;
    for (const auto& [name, p] : params) {
        Tensor copy = p.clone();
        copy.set_requires_grad(true);
        out.emplace_back(name, copy);
    }
    return out;
}

bool bitwise_equal(const NamedTensors& a, const NamedTensors& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        // float -> double is exact and one-to-one, so equal doubles bytes <=> equal float bytes
        const std::vector<double> x = a[i].second.values(), y = b[i].second.values();
        if (x.size() != y.size() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) != 0) return false;
    }
    return true;
}

// 2 steps; a fresh optimiser over copies of the parameters loads the first one's
// state(); 3 more steps on both must give bitwise equal parameters. A third
// optimiser that skips load_state must NOT match (the state carries something).
template <class Make>
void check_resume(Make make) {
    NamedTensors params = {{"weight", Tensor::from_values({0.5, -1.0, 0.25, 2.0, -0.75, 1.5, 0.1, -0.2, 0.3, 1.0, -1.25, 0.6},
                                                          {3, 4}, DType::f32, true)},
                           {"bias", Tensor::from_values({0.2, -0.4, 0.6, -0.8}, {4}, DType::f32, true)}};
    std::unique_ptr<Optimizer> original = make(params);
    for (size_t step = 0; step < 2; ++step) step_with_made_up_grads(*original, step);

    std::unique_ptr<Optimizer> resumed = make(copies(params));
    resumed->load_state(original->state());
    std::unique_ptr<Optimizer> fresh = make(copies(params));  // same parameters, no state
    for (size_t step = 2; step < 5; ++step) {
        step_with_made_up_grads(*original, step);
        step_with_made_up_grads(*resumed, step);
        step_with_made_up_grads(*fresh, step);
    }
    EXPECT_TRUE(bitwise_equal(original->params(), resumed->params()))
        << "parameters after resuming from state() differ from the uninterrupted run";
    EXPECT_FALSE(bitwise_equal(original->params(), fresh->params()))
        << "a fresh optimiser matched without load_state: this check cannot see lost state";
}

TEST(OptimState, SGDNesterovResumesBitwise) {
    check_resume([](NamedTensors p) { return std::make_unique<SGD>(std::move(p), 0.1, 0.9, true, 0.01); });
}
TEST(OptimState, AdamResumesBitwise) {
    check_resume([](NamedTensors p) { return std::make_unique<Adam>(std::move(p), 1e-2, 0.9, 0.999, 1e-8, 0.1); });
}
TEST(OptimState, AdamWResumesBitwise) {
    check_resume([](NamedTensors p) { return make_adamw(std::move(p), 1e-2, 0.9, 0.999, 1e-8, 0.1); });
}

TEST(OptimSchedule, ParseScheduleRejectsUnknownName) {
    EXPECT_EQ(parse_schedule("constant"), Schedule::constant);
    EXPECT_EQ(parse_schedule("linear"), Schedule::linear);
    EXPECT_EQ(parse_schedule("cosine"), Schedule::cosine);
    try {
        parse_schedule("bogus");
        ADD_FAILURE() << "parse_schedule(\"bogus\") did not throw";
    } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_EQ(message.rfind("[schedule]", 0), 0u) << message;
    }
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// A parameter without a gradient at some step keeps its own Adam step count (as
// torch does), so its bias correction is not advanced. Reference values from
// torch.optim.Adam(lr=0.1), float64, with b.grad = None at the second step:
//   w = [0.8109465562497774, -2.013044865706671], b = [0.30909133869743627]
TEST(OptimAdam, ParameterWithoutGradientKeepsItsOwnStepCount) {
    Tensor w = Tensor::from_values({1.0, -2.0}, {2}, DType::f64, true);
    Tensor b = Tensor::from_values({0.5}, {1}, DType::f64, true);
    Adam opt({{"w", w}, {"b", b}}, 0.1);
    const double gw[3][2] = {{0.3, -0.1}, {0.2, 0.4}, {-0.5, 0.1}}, gb[3] = {0.7, -0.2, 0.3};
    for (int s = 0; s < 3; ++s) {
        opt.zero_grad();
        sum(w * Tensor::from_values({gw[s][0], gw[s][1]}, {2}, DType::f64)).backward();
        if (s != 1) sum(b * Tensor::from_values({gb[s]}, {1}, DType::f64)).backward();
        opt.step();
    }
    EXPECT_NEAR(w.values()[0], 0.8109465562497774, 1e-12);
    EXPECT_NEAR(w.values()[1], -2.013044865706671, 1e-12);
    EXPECT_NEAR(b.values()[0], 0.30909133869743627, 1e-12);
}

}  // namespace
}  // namespace attnlab
