// train.device = "cuda", first step: the attention core as an autograd op on the
// device (cuda/attention_op.h), inside MultiHeadAttention and a whole training
// run. Against the CPU op and the CPU loss curve; skipped without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "autograd/ops.h"
#include "cuda/attention_op.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab::cuda_test {
namespace {

using cuda::AttentionDevice;

TEST(DeviceAttentionOp, RefusesWithoutAContext) {
    Rng rng(1);
    const Tensor q = random_tensor(rng, {1, 1, 2, 4});
    try {
        cuda::attention_on_device(AttentionDevice{}, q, q, q, AttentionMask{}, AttentionOptions{});
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "[attention] attention_on_device needs a CUDA context");
    }
}

TEST(DeviceAttentionOp, FlashForHeadWidthsItsTilesHold) {
    EXPECT_EQ(cuda::kernel_for_head_width(64), AttentionKernel::flash);
    EXPECT_EQ(cuda::kernel_for_head_width(cuda::flash_max_head_width), AttentionKernel::flash);
    EXPECT_EQ(cuda::kernel_for_head_width(cuda::flash_max_head_width + 1), AttentionKernel::dense);
}

class DeviceAttentionOpAgreement : public DeviceTest, public ::testing::WithParamInterface<AttentionKernel> {};

// Through autograd: the op's context and the gradients backward() sends to q, k, v.
TEST_P(DeviceAttentionOpAgreement, MatchesTheCpuOpThroughBackward) {
    const AttentionDims dims{2, 4, 2, 37, 37, 16, 16};  // grouped K/V, a ragged tile edge
    const Inputs in = random_inputs(dims, 7);
    AttentionMask mask;
    mask.causal = true;
    mask.key_lengths = {37, 29};
    AttentionOptions options;
    options.scale = 0.25;
    const Reference cpu = cpu_reference(in, mask, options);

    Tensor q = in.q.clone().set_requires_grad(true), k = in.k.clone().set_requires_grad(true),
           v = in.v.clone().set_requires_grad(true);
    const Tensor context = cuda::attention_on_device({this->context.get(), GetParam()}, q, k, v, mask, options);
    context.backward(in.dcontext);
    expect_close(context.detach(), cpu.context, "context");
    expect_close(q.grad(), cpu.dq, "dq");
    expect_close(k.grad(), cpu.dk, "dk");
    expect_close(v.grad(), cpu.dv, "dv");
}

INSTANTIATE_TEST_SUITE_P(Kernels, DeviceAttentionOpAgreement,
                         ::testing::Values(AttentionKernel::dense, AttentionKernel::flash),
                         [](const auto& info) { return cuda::to_string(info.param); });

ModelConfig tiny_decoder() {
    ModelConfig c;
    c.vocab = 16;
    c.layers = 2;
    c.max_len = 24;
    c.block.attention.width = 32;
    c.block.attention.heads = 4;
    c.block.ffn = 64;
    return c;
}

// Loss of each of `steps` AdamW steps on fixed random batches.
std::vector<double> loss_curve(cuda::Context* device, int steps) {
    Rng init(3), data(4);
    DecoderLM model(tiny_decoder(), init, nullptr);
    model.set_attention_device(device);
    auto optimizer = make_adamw(model.named_parameters(), 3e-3);
    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) {
        std::vector<int32_t> tokens(8 * 24), targets(8 * 24);
        for (int32_t& t : tokens) t = static_cast<int32_t>(data.integer(0, 16));
        for (size_t i = 0; i < tokens.size(); ++i) targets[i] = tokens[(i / 24) * 24 + (i % 24 + 23) % 24];
        Tensor loss = cross_entropy(model.forward(Indices({8, 24}, tokens), {24, 20, 24, 17, 24, 24, 9, 24}),
                                    Indices({8, 24}, targets));
        losses.push_back(loss.item());
        loss.backward();
        optimizer->step();
        optimizer->zero_grad();
    }
    return losses;
}

// The check: a tiny model trained with its attention on the device
// follows the CPU loss curve. Tolerance: 1e-3 absolute per step over 40 steps
// (fp32 kernels differ from the CPU op by about 1e-6 per element; AdamW
// compounds it slowly). Also checks that the device did the work.
TEST_F(DeviceTest, TinyDecoderTrainedOnTheDeviceFollowsTheCpuLossCurve) {
    const std::vector<double> cpu = loss_curve(nullptr, 40);
    const std::vector<double> gpu = loss_curve(context.get(), 40);  // head width 8: the flash kernel
    EXPECT_GT(context->memory_stats().device_allocations, 0u) << "the attention never ran on the device";
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t s = 0; s < cpu.size(); ++s) EXPECT_NEAR(gpu[s], cpu[s], 1e-3) << "step " << s;
    EXPECT_LT(cpu.back(), cpu.front() - 0.1) << "the model did not learn: the comparison would be vacuous";
}

}  // namespace
}  // namespace attnlab::cuda_test
