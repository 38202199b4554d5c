// The one model on the device over several steps against the CPU: SGD's
// velocity across a copy of the run out to the host and back, a 30-step loss
// curve, and a checkpoint-like copy out then a fresh model and optimiser on the
// device continuing the same run (what a checkpoint and a resume do). Compiled
// into test_cuda and test_device_host, as test_device_step.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "autograd/rng.h"
#include "device_step_test.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab::device_step_test {
namespace {

// A step as the trainer takes it: forward, backward, clipping, update, zeroed gradients.
double train_step(DecoderLM& model, Optimizer& opt, const Batch& b, double max_norm) {
    const double loss = cpu_step(model, b, max_norm).first;
    opt.step();
    opt.zero_grad();
    return loss;
}

// What a checkpoint holds, on the host: the parameters and the optimiser's state.
struct Saved {
    NamedTensors params, state;
};
Saved save(const DecoderLM& model, const Optimizer& opt) {
    Saved s;
    for (const auto& [name, p] : model.named_parameters()) s.params.emplace_back(name, p.to(Device::cpu));
    for (const auto& [name, t] : opt.state()) s.state.emplace_back(name, t.to(Device::cpu));
    return s;
}

// A fresh model and optimiser on the device, from what was saved (a resume).
struct Resumed {
    DecoderLM model;
    std::unique_ptr<Optimizer> opt;
    Resumed(const Variant& v, const Saved& s, double eps) : model(Pair<DecoderLM>::make(v.config)) {
        model.to(Device::cuda);
        opt = optimizer_for(v, model, eps);
        model.load_state_dict(s.params);
        opt->load_state(s.state);
    }
};

// SGD's second step reads the velocity of the first (torch: the first sets v = d).
TEST_F(DeviceStep, SgdWithMomentumOverThreeStepsAndADownload) {
    const Variant v{"sgd", tiny(), "sgd"};
    Pair<DecoderLM> models(v.config);
    models.gpu.to(Device::cuda);
    auto cpu_opt = optimizer_for(v, models.cpu);
    auto gpu_opt = optimizer_for(v, models.gpu);
    Rng data(15);
    std::vector<Batch> batches;
    for (int i = 0; i < 3; ++i) batches.push_back(random_batch(data, 3, 8, v.config.vocab));
    train_step(models.cpu, *cpu_opt, batches[0], 1.0);
    train_step(models.gpu, *gpu_opt, batches[0], 1.0);
    Resumed resumed(v, save(models.gpu, *gpu_opt), 1e-2);  // the velocity and "started" go to the host and back
    for (int i = 1; i < 3; ++i) {
        train_step(models.cpu, *cpu_opt, batches[i], 1.0);
        train_step(resumed.model, *resumed.opt, batches[i], 1.0);
    }
    const NamedTensors cpu_params = models.cpu.named_parameters(), gpu_params = resumed.model.named_parameters();
    for (size_t i = 0; i < gpu_params.size(); ++i)
        expect_close(gpu_params[i].second.to(Device::cpu), cpu_params[i].second, 1e-5, 1e-3,
                     "after 3 SGD steps: " + gpu_params[i].first);
}

// 30 AdamW steps at torch's eps on fixed random batches: the device curve
// follows the CPU's within 1e-3 per step, and the model learns.
TEST_F(DeviceStep, FollowsTheCpuLossCurve) {
    const Variant v{"curve", tiny()};
    Pair<DecoderLM> models(v.config);
    models.gpu.to(Device::cuda);
    auto cpu_opt = optimizer_for(v, models.cpu, 1e-8);
    auto gpu_opt = optimizer_for(v, models.gpu, 1e-8);
    Rng data(11);
    std::vector<Batch> batches;
    for (int i = 0; i < 4; ++i) batches.push_back(random_batch(data, 4, 10, v.config.vocab));
    std::vector<double> cpu, gpu;
    for (int step = 0; step < 30; ++step) {
        const Batch& b = batches[step % batches.size()];
        cpu.push_back(train_step(models.cpu, *cpu_opt, b, 1.0));
        gpu.push_back(train_step(models.gpu, *gpu_opt, b, 1.0));
    }
    for (size_t s = 0; s < cpu.size(); ++s) EXPECT_NEAR(gpu[s], cpu[s], 1e-3) << "step " << s;
    EXPECT_LT(cpu.back(), cpu.front() - 0.5) << "the model did not learn: the comparison would be vacuous";
}

// What a checkpoint and a resume do: the run copied to the host after 3 steps, a
// new model and optimiser on the device from it, 2 more steps: the losses of one run of 5.
TEST_F(DeviceStep, DownloadAndAFreshUploadContinueTheRun) {
    const Variant v{"resume", tiny()};
    Pair<DecoderLM> models(v.config);
    models.cpu.to(Device::cuda);  // both on the device: one runs straight through
    models.gpu.to(Device::cuda);
    auto straight_opt = optimizer_for(v, models.cpu, 1e-8);
    auto split_opt = optimizer_for(v, models.gpu, 1e-8);
    Rng data(12);
    std::vector<Batch> batches;
    for (int i = 0; i < 5; ++i) batches.push_back(random_batch(data, 3, 9, v.config.vocab));
    std::vector<double> straight, split;
    for (const Batch& b : batches) straight.push_back(train_step(models.cpu, *straight_opt, b, no_clip));
    for (int i = 0; i < 3; ++i) split.push_back(train_step(models.gpu, *split_opt, batches[i], no_clip));
    Resumed second(v, save(models.gpu, *split_opt), 1e-8);
    for (int i = 3; i < 5; ++i) split.push_back(train_step(second.model, *second.opt, batches[i], no_clip));
    for (size_t s = 0; s < straight.size(); ++s) EXPECT_NEAR(split[s], straight[s], 1e-6) << "step " << s;
}

}  // namespace
}  // namespace attnlab::device_step_test
