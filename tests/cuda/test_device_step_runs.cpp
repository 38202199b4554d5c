// The device step over several steps against the CPU: SGD's velocity across a
// download, a 30-step loss curve, and download then a fresh upload continuing
// the same run (what a checkpoint and a resume do). Compiled into test_cuda and
// test_device_host, as test_device_step.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "autograd/rng.h"
#include "device_step_test.h"
#include "experiments/run/device_training.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab::device_step_test {
namespace {

// SGD's second step reads the velocity of the first (torch: the first sets v = d).
TEST_F(DeviceStep, SgdWithMomentumOverThreeStepsAndADownload) {
    const Variant v{"sgd", tiny(), "sgd"};
    Pair<DecoderLM> models(v.config);
    auto cpu_opt = optimizer_for(v, models.cpu);
    auto gpu_opt = optimizer_for(v, models.gpu);
    Rng data(15);
    std::vector<Batch> batches;
    for (int i = 0; i < 3; ++i) batches.push_back(random_batch(data, 3, 8, v.config.vocab));
    auto device = std::make_unique<DeviceTraining>(*context, models.gpu, *gpu_opt);
    for (int i = 0; i < 3; ++i) {
        cpu_step(models.cpu, batches[i], 1.0);
        cpu_opt->step();
        cpu_opt->zero_grad();
        device->step(batches[i], 0.1, 1.0);
        if (i == 0) {  // the velocity and "started" go to the host and back
            device->download();
            device = std::make_unique<DeviceTraining>(*context, models.gpu, *gpu_opt);
        }
    }
    device->download();
    const NamedTensors cpu_params = models.cpu.named_parameters(), gpu_params = models.gpu.named_parameters();
    for (size_t i = 0; i < gpu_params.size(); ++i)
        expect_close(gpu_params[i].second, cpu_params[i].second, 1e-5, 1e-3, "after 3 SGD steps: " + gpu_params[i].first);
}

// 30 AdamW steps at torch's eps on fixed random batches: the device curve
// follows the CPU's within 1e-3 per step, and the model learns.
TEST_F(DeviceStep, FollowsTheCpuLossCurve) {
    const Variant v{"curve", tiny()};
    Pair<DecoderLM> models(v.config);
    auto cpu_opt = optimizer_for(v, models.cpu, 1e-8);
    auto gpu_opt = optimizer_for(v, models.gpu, 1e-8);
    DeviceTraining device(*context, models.gpu, *gpu_opt);
    Rng data(11);
    std::vector<Batch> batches;
    for (int i = 0; i < 4; ++i) batches.push_back(random_batch(data, 4, 10, v.config.vocab));
    std::vector<double> cpu, gpu;
    for (int step = 0; step < 30; ++step) {
        const Batch& b = batches[step % batches.size()];
        cpu.push_back(cpu_step(models.cpu, b, 1.0).first);
        cpu_opt->step();
        cpu_opt->zero_grad();
        gpu.push_back(device.step(b, 1e-2, 1.0).loss);
    }
    for (size_t s = 0; s < cpu.size(); ++s) EXPECT_NEAR(gpu[s], cpu[s], 1e-3) << "step " << s;
    EXPECT_LT(cpu.back(), cpu.front() - 0.5) << "the model did not learn: the comparison would be vacuous";
}

// What a checkpoint and a resume do: download after 3 steps, a new DeviceTraining
// from the host model and optimiser, 2 more steps: the losses of one run of 5.
TEST_F(DeviceStep, DownloadAndAFreshUploadContinueTheRun) {
    const Variant v{"resume", tiny()};
    Pair<DecoderLM> models(v.config);
    auto straight_opt = optimizer_for(v, models.cpu, 1e-8);
    auto split_opt = optimizer_for(v, models.gpu, 1e-8);
    Rng data(12);
    std::vector<Batch> batches;
    for (int i = 0; i < 5; ++i) batches.push_back(random_batch(data, 3, 9, v.config.vocab));
    std::vector<double> straight, split;
    {
        DeviceTraining device(*context, models.cpu, *straight_opt);
        for (const Batch& b : batches) straight.push_back(device.step(b, 1e-2, no_clip).loss);
    }
    {
        DeviceTraining first(*context, models.gpu, *split_opt);
        for (int i = 0; i < 3; ++i) split.push_back(first.step(batches[i], 1e-2, no_clip).loss);
        first.download();
    }
    DeviceTraining second(*context, models.gpu, *split_opt);
    for (int i = 3; i < 5; ++i) split.push_back(second.step(batches[i], 1e-2, no_clip).loss);
    for (size_t s = 0; s < straight.size(); ++s) EXPECT_NEAR(split[s], straight[s], 1e-6) << "step " << s;
}

}  // namespace
}  // namespace attnlab::device_step_test
