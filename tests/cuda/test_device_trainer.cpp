// `attnlab train` with train.device = "cuda": the same trainer and model with the
// model moved to the device (its metrics, evaluations and checkpoints read it
// from there) against the same run on the CPU.
// Compiled into test_cuda (skipped without a GPU) and test_device_host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "autograd/device/backend.h"
#include "device_context_test.h"
#include "experiments/files/checkpoint.h"
#include "experiments/config/config.h"
#include "data/h5file.h"
#include "experiments/run/trainer.h"
#include "tests/temp_dir.h"

namespace attnlab::device_trainer_test {
namespace {

namespace fs = std::filesystem;

struct Finished {
    RunSummary summary;
    CheckpointData last;
    std::vector<std::vector<double>> attention;  // per kind: entropy, then score_std, of every logged row
    std::vector<double> loss;                    // train/loss at every log step
};

// What a run folder holds at its end: its summary, last checkpoint, train/loss and
// the attention metrics of `kinds`.
Finished read_run(const fs::path& dir, const RunSummary& summary, const std::vector<std::string>& kinds = {}) {
    Finished r{summary, read_checkpoint(list_checkpoints((dir / "checkpoints").string()).back()), {}, {}};
    const h5::File metrics = h5::File::open((dir / "metrics.h5").string(), "metrics", h5::File::Access::read);
    r.loss = metrics.dataset("train/loss").read<double>();
    for (const std::string& kind : kinds) {
        std::vector<double> series = metrics.dataset("attention/" + kind + "/entropy").read<double>();
        const std::vector<double> score_std = metrics.dataset("attention/" + kind + "/score_std").read<double>();
        series.insert(series.end(), score_std.begin(), score_std.end());
        r.attention.push_back(series);
    }
    return r;
}

// A short recall run's config (the default task, a small model); checkpoints at 30 and 60.
Config short_run(const std::string& device, const std::vector<std::string>& overrides) {
    Config config = default_config();
    for (const char* o : {"model.width=32", "model.heads=4", "model.layers=2", "model.ffn=64", "train.steps=60",
                          "train.batch=16", "train.log_every=20", "train.eval_every=30", "train.checkpoint_every=30",
                          "train.eval_batches=2", "train.threads=1", "optim.lr=3e-3", "optim.clip=1.0",
                          "optim.eps=1e-3"})  // smooth in near-zero gradients: see DeviceStep's optimizer_for
        apply_override(config, o);
    apply_override(config, "train.device=" + device);
    for (const std::string& o : overrides) apply_override(config, o);
    validate(config);
    return config;
}

Finished train(const std::string& device, const std::vector<std::string>& kinds,
               const std::vector<std::string>& overrides = {}) {
    static const test::TempDir root("attnlab_device_trainer_");  // removed when the binary exits
    static int runs = 0;
    const Config config = short_run(device, overrides);
    const fs::path dir = root.path() / ("run" + std::to_string(runs++));
    std::unique_ptr<Trainer> trainer = Trainer::start(config, dir.string());
    EXPECT_EQ(trainer->run(), 0);
    Finished r = read_run(dir, trainer->summary(), kinds);
    fs::remove_all(dir);
    return r;
}

double largest_difference(const NamedTensors& a, const NamedTensors& b, const std::string& name) {
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].first != name) continue;
        const std::vector<double> x = a[i].second.values(), y = b[i].second.values();
        double worst = 0;
        for (size_t e = 0; e < x.size(); ++e) worst = std::max(worst, std::abs(x[e] - y[e]));
        return worst;
    }
    ADD_FAILURE() << "no " << name;
    return 0;
}

// The folders a train.seeds group wrote, one per member, in the members' order.
std::vector<fs::path> member_folders(const fs::path& group) {
    std::vector<fs::path> folders;
    for (const auto& entry : fs::directory_iterator(group))
        if (entry.is_directory()) folders.push_back(entry.path());
    std::sort(folders.begin(), folders.end());
    return folders;
}

// Skipped without a device; the trainer makes its own Context.
using DeviceTrainer = cuda_test::DeviceTest;

// Tolerances: eval loss 1e-3 after 60 AdamW steps, parameters 1e-4 (measured
// on the host carrying out the device interface: 1.2e-7 for both).
// Kinds: the attention kinds whose metrics (entropy and score std per layer and
// head, at every log step) must match.
void expect_same_run(const std::vector<std::string>& kinds, const std::vector<std::string>& overrides) {
    const Finished cpu = train("cpu", kinds, overrides);
    const Finished gpu = train("cuda", kinds, overrides);
    ASSERT_EQ(gpu.attention.size(), cpu.attention.size());
    for (size_t k = 0; k < kinds.size(); ++k) {
        ASSERT_EQ(gpu.attention[k].size(), cpu.attention[k].size()) << kinds[k];
        ASSERT_GT(cpu.attention[k].size(), 0u) << kinds[k];
        for (size_t i = 0; i < cpu.attention[k].size(); ++i)
            EXPECT_NEAR(gpu.attention[k][i], cpu.attention[k][i], 1e-4 + 1e-4 * std::abs(cpu.attention[k][i]))
                << kinds[k] << " metric " << i;
    }
    EXPECT_EQ(gpu.last.step, 60);
    EXPECT_NEAR(gpu.summary.eval_loss, cpu.summary.eval_loss, 1e-3);
    EXPECT_NEAR(gpu.summary.eval_token_acc, cpu.summary.eval_token_acc, 0.02);
    ASSERT_EQ(gpu.last.params.size(), cpu.last.params.size());
    for (const auto& [name, p] : cpu.last.params)
        EXPECT_LT(largest_difference(gpu.last.params, cpu.last.params, name), 1e-4) << name;
    // the optimiser state in the checkpoint came from the device (moments are not zero)
    for (const auto& [name, t] : gpu.last.optimizer) {
        if (name.rfind("step.", 0) == 0) {
            EXPECT_EQ(t.item(), 60) << name;
        }
        if (name == "m.head.weight") {
            double largest = 0;
            for (double v : t.values()) largest = std::max(largest, std::abs(v));
            EXPECT_GT(largest, 1e-6);
            EXPECT_LT(largest_difference(gpu.last.optimizer, cpu.last.optimizer, name), 1e-3);
        }
    }
}

TEST_F(DeviceTrainer, TrainsAsTheCpuRunDoes) {
    expect_same_run({"self"}, {});
}

TEST_F(DeviceTrainer, TrainsAnEncoderDecoderAsTheCpuRunDoes) {
    expect_same_run({"enc_self", "dec_self", "cross"}, {"task.name=translate", "model.kind=encoder-decoder"});
}

// Dropout (embeddings, sublayer outputs, attention weights) runs on the device
// with masks of its own: the run is not the CPU's, but it is repeatable and
// learns about as much.
TEST_F(DeviceTrainer, WithDropoutTrainsOnTheDeviceRepeatably) {
    testing::internal::CaptureStderr();
    const Finished first = train("cuda", {"self"}, {"model.dropout=0.1", "model.attn_dropout=0.1"});
    const Finished second = train("cuda", {"self"}, {"model.dropout=0.1", "model.attn_dropout=0.1"});
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("attnlab train: train.device = \"cuda\": the whole training step runs on the GPU"),
              std::string::npos)
        << said;
    EXPECT_NEAR(first.summary.eval_loss, second.summary.eval_loss, 1e-5);
    const Finished cpu = train("cpu", {"self"}, {"model.dropout=0.1", "model.attn_dropout=0.1"});
    EXPECT_NEAR(first.summary.eval_loss, cpu.summary.eval_loss, 0.02);  // measured on the host: 3.3e-3
}

// Every architecture option runs on the device, RMSNorm included (its own kernels).
TEST_F(DeviceTrainer, TrainsAnRmsNormModelAsTheCpuRunDoes) {
    expect_same_run({"self"}, {"model.norm_type=rmsnorm"});
}

// Soft-capped scores (a score modifier) run attention composed of ops on the device.
TEST_F(DeviceTrainer, TrainsASoftcappedModelAsTheCpuRunDoes) {
    expect_same_run({"self"}, {"model.softcap=2"});
}

// A sliding window (an eligibility rule) reaches the fused kernels as a byte mask.
TEST_F(DeviceTrainer, TrainsASlidingWindowModelAsTheCpuRunDoes) {
    expect_same_run({"self"}, {"model.window=2"});
}

// The token rules (prefix-LM in packed documents) reach the fused kernels as a byte mask
// of what AttentionMask::allows says, read off each batch's tokens.
TEST_F(DeviceTrainer, TrainsPrefixLMInPackedDocumentsAsTheCpuRunDoes) {
    expect_same_run({"self"}, {"task.name=copy", "task.pack=24", "model.prefix_lm=true", "model.documents=true"});
}

// Attention sinks: a parameter per head and attention composed of ops on the device.
TEST_F(DeviceTrainer, TrainsAModelWithSinksAsTheCpuRunDoes) {
    expect_same_run({"self"}, {"model.sinks=true"});
}

// T5's relative bias: a table per layer, gathered by the embedding op on the device.
TEST_F(DeviceTrainer, TrainsAModelWithRelativeBiasAsTheCpuRunDoes) {
    expect_same_run({"self"}, {"model.rel_buckets=8", "model.rel_max_distance=16"});
}

// ScaleNorm has no kernel of its own: its ops' primitives run it on the device.
TEST_F(DeviceTrainer, TrainsAScaleNormModelAsTheCpuRunDoes) {
    expect_same_run({"self"}, {"model.norm_type=scalenorm", "model.norm=post"});
}

// train.seeds_mode = "stacked" on the device: the steps that do not log are one
// pass of a stacked model for every member (Module::stack_members; each kernel
// launched once for all of them, the GEMMs batched over the members), and each
// member's run is its solo device run's: train/loss at every log step, the final
// parameters and optimiser state, bit for bit where the device is deterministic
// (the host loops, the emulation: exact_device), else to rounding.
TEST_F(DeviceTrainer, StackedSeedsShareEachPassAndTrainAsTheirSoloRuns) {
    static const test::TempDir root("attnlab_device_seeds_");
    const Config config = short_run("cuda", {"train.seeds=[5,6,7]", "train.seeds_mode=stacked"});
    testing::internal::CaptureStderr();
    EXPECT_EQ(Trainer::train_members(config, (root.path() / "group").string()), 0);
    const std::string said = testing::internal::GetCapturedStderr();
    std::smatch stacked;  // all but the log steps and those whose members' batches differ in padded width
    ASSERT_TRUE(std::regex_search(said, stacked, std::regex("train\\.seeds: (\\d+) of 60 steps stacked"))) << said;
    EXPECT_GE(std::stoi(stacked[1]), 50) << said;
    const std::vector<fs::path> folders = member_folders(root.path() / "group");
    ASSERT_EQ(folders.size(), 3u);
    for (size_t m = 0; m < 3; ++m) {
        const std::string seed = std::to_string(5 + m);
        EXPECT_NE(folders[m].filename().string().find("run.seed=" + seed), std::string::npos) << folders[m];
        const Finished member = read_run(folders[m], {});
        const Finished solo = train("cuda", {}, {"run.seed=" + seed});
        ASSERT_EQ(member.loss.size(), solo.loss.size());
        double loss_gap = 0, param_gap = 0, moment_gap = 0;
        for (size_t i = 0; i < solo.loss.size(); ++i) loss_gap = std::max(loss_gap, std::abs(member.loss[i] - solo.loss[i]));
        for (const auto& [name, t] : solo.last.params) param_gap = std::max(param_gap, largest_difference(member.last.params, solo.last.params, name));
        for (const auto& [name, t] : solo.last.optimizer)
            if (t.numel() > 1) moment_gap = std::max(moment_gap, largest_difference(member.last.optimizer, solo.last.optimizer, name));
        std::printf("seed %s: largest difference from its solo run: train/loss %.3g, parameters %.3g, optimiser %.3g\n",
                    seed.c_str(), loss_gap, param_gap, moment_gap);
        // on a GPU, batched and single GEMMs may take different cuBLAS kernels, and the
        // embedding's scatter-add is atomic: rounding apart, as between two solo runs
        const double tolerance = cuda_test::exact_device ? 0.0 : 1e-4;
        EXPECT_LE(loss_gap, tolerance) << "seed " << seed;
        EXPECT_LE(param_gap, tolerance) << "seed " << seed;
        EXPECT_LE(moment_gap, tolerance) << "seed " << seed;
    }
}

// LayerNorm without a bias stacks on the device too (its kernel reads zeros), as exactly.
TEST_F(DeviceTrainer, StackedSeedsWithoutNormBiasesStackOnTheDevice) {
    static const test::TempDir root("attnlab_device_seeds_");
    const Config config = short_run("cuda", {"train.seeds=[1,2]", "train.seeds_mode=stacked", "model.norm_bias=false", "train.steps=20"});
    testing::internal::CaptureStderr();
    EXPECT_EQ(Trainer::train_members(config, (root.path() / "group").string()), 0);
    const std::string said = testing::internal::GetCapturedStderr();
    std::smatch stacked;
    ASSERT_TRUE(std::regex_search(said, stacked, std::regex("train\\.seeds: (\\d+) of 20 steps stacked"))) << said;
    EXPECT_GE(std::stoi(stacked[1]), 10) << said;
    const std::vector<fs::path> folders = member_folders(root.path() / "group");
    ASSERT_EQ(folders.size(), 2u);
    const Finished member = read_run(folders[1], {});
    const Finished solo = train("cuda", {}, {"run.seed=2", "model.norm_bias=false", "train.steps=20"});
    ASSERT_EQ(member.loss.size(), solo.loss.size());
    for (size_t i = 0; i < solo.loss.size(); ++i)
        EXPECT_NEAR(member.loss[i], solo.loss[i], cuda_test::exact_device ? 0.0 : 1e-4) << "log row " << i;
}

}  // namespace
}  // namespace attnlab::device_trainer_test
