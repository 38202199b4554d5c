// The analyses on a model moved to the device (Module::to): each against the
// same analysis of the same model on the CPU. Compiled into test_cuda (skipped
// without a GPU) and test_device_host (the device seam on the host).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "device_context_test.h"
#include "experiments/analysis/ablate.h"
#include "experiments/analysis/audit.h"
#include "experiments/analysis/generate.h"
#include "experiments/analysis/lens.h"
#include "experiments/analysis/patching.h"
#include "experiments/config/config.h"
#include "experiments/run/evaluate.h"
#include "experiments/run/model_factory.h"

namespace attnlab::device_analysis_test {
namespace {

using DeviceAnalysis = cuda_test::DeviceTest;

// A small decoder on the default task (recall), its copy on the device, and a few batches.
struct Pair {
    Config config = default_config();
    std::unique_ptr<TaskModel> cpu, gpu;
    std::vector<Batch> data;
    Pair() {
        for (const char* o : {"model.width=32", "model.heads=4", "model.layers=2", "model.ffn=64", "train.batch=8"})
            apply_override(config, o);
        validate(config);
        const size_t max_len = make_batch_source(config, 0, 0)->max_sequence_length();
        Rng a(3), b(3);
        cpu = std::make_unique<TaskModel>(config, max_len, a, nullptr);
        gpu = std::make_unique<TaskModel>(config, max_len, b, nullptr);
        cpu->module().eval();
        gpu->module().eval();
        gpu->module().to(Device::cuda);
        const auto source = make_batch_source(config, 0, 2);
        for (int i = 0; i < 2; ++i) data.push_back(source->next(8));
    }
};

void expect_near_all(const std::vector<double>& gpu, const std::vector<double>& cpu, double tolerance, const std::string& what) {
    ASSERT_EQ(gpu.size(), cpu.size()) << what;
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], tolerance) << what << " [" << i << "]";
}

// Analysis is written on hook points and the ops: the same code runs on a model
// on the device, with recorded activations read on the host and replacements
// made with CPU ops (Hooks).
TEST_F(DeviceAnalysis, EvaluationAndAblationMatchTheCpu) {
    Pair p;
    const Score cpu = evaluate(*p.cpu, p.data), gpu = evaluate(*p.gpu, p.data);
    EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5);
    EXPECT_EQ(gpu.token_acc, cpu.token_acc);
    const Ablation a_cpu = ablate(*p.cpu, p.data, {}), a_gpu = ablate(*p.gpu, p.data, {});
    ASSERT_EQ(a_gpu.rows.size(), a_cpu.rows.size());
    ASSERT_FALSE(a_cpu.rows.empty());
    for (size_t i = 0; i < a_cpu.rows.size(); ++i) {  // sorted by effect: compare by head
        const AblationRow& c = a_cpu.rows[i];
        const auto same = std::find_if(a_gpu.rows.begin(), a_gpu.rows.end(), [&](const AblationRow& g) {
            return g.kind == c.kind && g.layer == c.layer && g.head == c.head;
        });
        ASSERT_NE(same, a_gpu.rows.end());
        EXPECT_NEAR(same->zero.loss, c.zero.loss, 1e-5) << c.layer << "." << c.head;
        EXPECT_NEAR(same->mean.loss, c.mean.loss, 1e-5) << c.layer << "." << c.head;
    }
}

TEST_F(DeviceAnalysis, TheAuditsLiveTestsPassThere) {
    Pair p;
    Rng a(1), b(1);
    for (const LiveTest& t : {causal_perturbation(*p.gpu, p.data[0], a), padding_invariance(*p.gpu, p.data[0], b),
                              kv_cache_agreement(*p.gpu, p.data[0]), masked_row_policy(*p.gpu, p.data[0])})
        EXPECT_TRUE(t.pass) << t.name << ": " << t.figure_name << " " << t.figure << " (" << t.detail << ")";
}

TEST_F(DeviceAnalysis, LensPatchingAndGenerationMatchTheCpu) {
    Pair p;
    const Indices tokens({1, 4}, {5, 6, 7, 8});
    const LensResult l_cpu = logit_lens(*p.cpu, tokens), l_gpu = logit_lens(*p.gpu, tokens);
    expect_near_all(l_gpu.target_logprob, l_cpu.target_logprob, 1e-4, "lens log p(target)");
    expect_near_all(l_gpu.head_logit, l_cpu.head_logit, 1e-4, "direct logit attribution per head");

    PromptPairs pairs;
    pairs.clean = {{5, 6, 7, 8}};
    pairs.corrupt = {{5, 9, 7, 8}};
    const auto patch = [&](const TaskModel& model) {
        PromptPairs q = pairs;
        resolve_answers(model, q, PatchMetric::prob);
        PatchOptions o;
        o.metric = PatchMetric::prob;
        o.hooks = {parse_patch_hook(model, "z"), parse_patch_hook(model, "resid_pre")};
        return activation_patching(model, q, o);
    };
    const PatchResult pc = patch(*p.cpu), pg = patch(*p.gpu);
    ASSERT_EQ(pg.grids.size(), pc.grids.size());
    for (size_t i = 0; i < pc.grids.size(); ++i) expect_near_all(pg.grids[i].values, pc.grids[i].values, 1e-4, "patch " + pc.grids[i].hook);

    GenerateOptions g;
    g.max_new = 6;
    g.check_cache = true;  // the cached decode (concat on the device) against full passes
    const Generation gen_cpu = generate(*p.cpu, {5, 6, 7}, g), gen_gpu = generate(*p.gpu, {5, 6, 7}, g);
    EXPECT_EQ(gen_gpu.generated, gen_cpu.generated);
    for (double d : gen_gpu.step_diffs) EXPECT_LE(d, g.tolerance);
}

}  // namespace
}  // namespace attnlab::device_analysis_test
