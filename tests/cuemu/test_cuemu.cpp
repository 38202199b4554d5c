// Tests only the emulation can run: the emulated model itself (barriers and
// thread order, shuffles, launch limits, NaN-filled memory), and error paths
// that need a failure injected: a cuBLAS call failing while a Context is made
// (nothing may leak), and a fault inside a kernel (reported naming the kernel's
// entry point, not the next copy). Linked into test_cuda_emu only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "cuda_runtime.h"
#include "autograd/device/context.h"
#include "autograd/member_rows.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "cuemu.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab::cuemu_test {
namespace {

using cuda_test::DeviceTest;

// ---- the model ----

// Thread t writes slot t and reads slot n-1-t, with or without a barrier
// between: without it, whichever thread runs first reads an unwritten (NaN)
// slot, in either order.
__global__ void mirror_kernel(bool barrier, float* out) {
    float* slots = reinterpret_cast<float*>(cuemu::dynamic_shared());
    const unsigned t = threadIdx.x, n = blockDim.x;
    slots[t] = float(t);
    if (barrier) __syncthreads();
    out[t] = slots[n - 1 - t];
}

std::vector<float> mirror(bool barrier) {
    std::vector<float> out(64);
    cuemu::launch("mirror_kernel", mirror_kernel, cuemu::config(1, 64, 64 * sizeof(float)), barrier, out.data());
    return out;
}

TEST(CuemuModel, ABarrierOrdersSharedMemoryAndItsAbsenceShows) {
    const std::vector<float> with = mirror(true);
    for (unsigned t = 0; t < 64; ++t) EXPECT_EQ(with[t], float(63 - t));
    const std::vector<float> without = mirror(false);
    size_t stale = 0;
    for (float x : without) stale += std::isnan(x);
    EXPECT_GT(stale, 0u) << "in thread order " << (cuemu::thread_order() == cuemu::Order::forward ? "forward" : "reverse");
}

__global__ void lane_sum_kernel(float* out) {
    float value = float(threadIdx.x % 32);
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    out[threadIdx.x] = value;
}

TEST(CuemuModel, ShufflesExchangeWithinEachWarp) {
    std::vector<float> out(96);
    cuemu::launch("lane_sum_kernel", lane_sum_kernel, cuemu::config(1, 96), out.data());
    for (float x : out) EXPECT_EQ(x, 496.0f);  // 0 + 1 + ... + 31
}

__global__ void divergent_barrier_kernel() {
    if (threadIdx.x < 16) __syncthreads();
}
__global__ void partial_warp_shuffle_kernel() { __shfl_xor_sync(0xffffffffu, 1.0f, 1); }

TEST(CuemuModelDeathTest, MisuseAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(cuemu::launch("divergent_barrier_kernel", divergent_barrier_kernel, cuemu::config(1, 32)),
                 "__syncthreads reached after 16 of 32 threads returned");
    EXPECT_DEATH(cuemu::launch("partial_warp_shuffle_kernel", partial_warp_shuffle_kernel, cuemu::config(1, 40)),
                 "a shuffle with 8 live lanes");
}

__global__ void empty_kernel() {}

TEST(CuemuModel, LaunchesOverTheLimitsAreRefusedAsOnAnH200) {
    cudaGetLastError();
    cuemu::launch("empty_kernel", empty_kernel, cuemu::config(dim3(1, 65536), 32));
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    cuemu::launch("empty_kernel", empty_kernel, cuemu::config(1, 1025));
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    cuemu::launch("empty_kernel", empty_kernel, cuemu::config(1, 32, 48 * 1024 + 4));  // above 48 KiB: opt in first
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    ASSERT_EQ(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024), cudaSuccess);
    cuemu::launch("empty_kernel", empty_kernel, cuemu::config(1, 32, 64 * 1024));
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
              cudaErrorInvalidValue);  // 227 KiB at most
}

TEST(CuemuModel, DeviceMemoryStartsAsNan) {
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 3 * sizeof(float)), cudaSuccess);
    for (int e = 0; e < 3; ++e) EXPECT_TRUE(std::isnan(static_cast<float*>(p)[e]));
    cudaFree(p);
}

// ---- error paths ----

// cuda/context.cu: a failure after the stream (and the handle) exist releases them.
TEST(CuemuContext, NothingLeaksWhenCublasSetupFails) {
    for (const char* call : {"cublasCreate", "cublasSetStream", "cublasSetMathMode"}) {
        const int streams = cuemu::live_streams(), handles = cuemu::live_blas_handles();
        cuemu::fail_next_call(call);
        try {
            device::Context context;
            ADD_FAILURE() << call << " failed, yet a Context was made";
        } catch (const Error& error) {
            EXPECT_EQ(std::string(error.what()).rfind(std::string("[cuda] Context: ") + call + ": cuBLAS", 0), 0u)
                << error.what();
        }
        EXPECT_EQ(cuemu::live_streams(), streams) << call;
        EXPECT_EQ(cuemu::live_blas_handles(), handles) << call;
    }
}

struct Fault {
    device::AttentionKernel kernel;
    const char* faulting_kernel;  // the launch that faults
    bool in_backward;
    const char* reported;  // how the error must begin
};

void PrintTo(const Fault& f, std::ostream* os) { *os << f.faulting_kernel; }

class CuemuKernelFault : public DeviceTest, public ::testing::WithParamInterface<Fault> {};

// The fault is reported by the synchronisation after the pass, naming its entry point.
TEST_P(CuemuKernelFault, IsReportedByTheKernelsName) {
    const Fault& f = GetParam();
    const device::AttentionDims dims{1, 2, 2, 70, 70, 16, 16};
    const cuda_test::Inputs in = cuda_test::random_inputs(dims, 3);
    AttentionOptions options;
    options.scale = 0.25;
    try {
        if (!f.in_backward) cuemu::fault_in_kernel(f.faulting_kernel);
        const device::DeviceAttentionPass pass(*context, f.kernel, in.q, in.k, in.v, {}, options);
        if (f.in_backward) cuemu::fault_in_kernel(f.faulting_kernel);
        if (f.in_backward) pass.backward(in.dcontext);
        else pass.result(false);
        ADD_FAILURE() << "no error";
    } catch (const Error& error) {
        EXPECT_EQ(std::string(error.what()), std::string(f.reported) + ": cudaErrorIllegalAddress: an illegal memory "
                                                                       "access was encountered");
    }
}

INSTANTIATE_TEST_SUITE_P(
    Passes, CuemuKernelFault,
    ::testing::Values(Fault{device::AttentionKernel::flash, "flash_forward_kernel", false, "[cuda] flash_attention_forward"},
                      Fault{device::AttentionKernel::dense, "masked_softmax_kernel", false, "[cuda] dense_attention_forward"},
                      Fault{device::AttentionKernel::flash, "flash_backward_q_kernel", true, "[cuda] flash_attention_backward"},
                      Fault{device::AttentionKernel::dense, "softmax_backward_kernel", true,
                            "[cuda] dense_attention_backward"}),
    [](const ::testing::TestParamInfo<Fault>& info) { return std::string(info.param.faulting_kernel); });

// The decoder whose steps CuemuWork counts: 4 pre-norm layers, width 32, 4 heads, vocabulary 16.
ModelConfig four_layer_decoder() {
    ModelConfig c;
    c.vocab = 16;
    c.layers = 4;
    c.max_len = 16;
    c.block.attention.width = 32;
    c.block.attention.heads = 4;
    c.block.ffn = 64;
    return c;
}

// What one training step of a 4-layer pre-norm decoder (the one model moved
// with Module::to, as train.device = "cuda" runs it: forward with key padding,
// the loss read back, backward, clipping by the global norm, AdamW, zeroed
// gradients) queues on the device: kernel launches, cuBLAS GEMMs, memsets and
// device-to-device copies, and the copies in and out. The second step is
// counted (the first also makes the gradients' homes). Measured (2026-12-02):
// 112 kernels + 59 GEMMs + 1 memset = 172; 5 copies in (tokens, key lengths,
// targets, loss weights, the backward's seed of ones), 2 out (loss, norm). The
// device twin this model replaced queued 177 (125 + 51 + 1; one copy in, one
// out). Each attention's q, k and v are one batched GEMM each way (linears);
// with three projections apart it was 204. The bound keeps it from growing.
TEST(CuemuWork, OneTrainingStepOfAFourLayerDecoder) {
    const ModelConfig c = four_layer_decoder();
    Rng init(1), data(2);
    DecoderLM model(c, init, nullptr);
    model.to(Device::cuda);
    auto optimizer = make_adamw(model.named_parameters(), 1e-3);
    const NamedTensors params = model.named_parameters();
    std::vector<int32_t> tokens(2 * 16), targets(2 * 16);
    for (int32_t& t : tokens) t = int32_t(data.integer(0, 16));
    for (int32_t& t : targets) t = int32_t(data.integer(0, 16));
    const Indices inputs({2, 16}, tokens), outputs({2, 16}, targets);
    const auto step = [&] {
        Tensor loss = cross_entropy(model.forward(inputs, {16, 12}), outputs);
        EXPECT_TRUE(std::isfinite(loss.item()));
        loss.backward();
        EXPECT_TRUE(std::isfinite(clip_grad_norm(params, 1.0)));
        optimizer->step();
        optimizer->zero_grad();
    };
    step();
    const long launches_before = cuemu::launches();
    const cuemu::WorkCounts before = cuemu::work_counts();
    step();
    const cuemu::WorkCounts after = cuemu::work_counts();
    const long kernels = cuemu::launches() - launches_before, gemms = after.gemms - before.gemms,
               memsets = after.memsets - before.memsets, device_copies = after.device_copies - before.device_copies;
    const long total = kernels + gemms + memsets + device_copies;
    std::printf("one step: %ld kernels + %ld GEMMs + %ld memsets + %ld device copies = %ld; %ld copies in, %ld out\n",
                kernels, gemms, memsets, device_copies, total, after.copies_in - before.copies_in,
                after.copies_out - before.copies_out);
    EXPECT_LE(total, 172);
}

// train.seeds_mode = "stacked" on the device: what one step of eight members of
// that decoder queues when one stacked model runs their pass (the members' values
// in and gradients out one launch each, MemberRows; every member's loss in one
// cross_entropy_members, every member's gradient norm back in one copy; every
// member's clipping, AdamW and zeroing one launch each: step_together, zero_grads),
// against eight members stepping in turn. Measured (2026-12-06): in turn 904
// kernels + 472 GEMMs = 1376, 40 copies in and 16 out; stacked 148 kernels + 75
// GEMMs = 223 (6.2x fewer), 6 copies in and 2 out (with each member's clipping,
// AdamW and zeroing its own: 257; before the one-op loss and the one-copy norms:
// 278, 20 in, 16 out). The bounds keep them from growing.
TEST(CuemuWork, EightStackedMembersShareTheirPass) {
    constexpr size_t K = 8, B = 2, T = 16;
    const ModelConfig c = four_layer_decoder();
    Rng data(2);
    std::vector<std::unique_ptr<DecoderLM>> members;
    std::vector<std::unique_ptr<Optimizer>> optimizers;
    std::vector<NamedTensors> own;
    for (size_t m = 0; m < K; ++m) {
        Rng init(10 + m);
        members.push_back(std::make_unique<DecoderLM>(c, init, nullptr));
        members.back()->to(Device::cuda);
        own.push_back(members.back()->named_parameters());
        optimizers.push_back(make_adamw(own.back(), 1e-3));
    }
    Rng unused(0);
    DecoderLM stacked(c, unused, nullptr);
    stacked.stack_members(K);
    stacked.to(Device::cuda);
    const MemberRows rows(stacked.named_parameters(), own);
    ASSERT_TRUE(rows.one_launch());
    std::vector<int32_t> tokens(K * B * T), targets(K * B * T);
    for (int32_t& t : tokens) t = int32_t(data.integer(0, 16));
    for (int32_t& t : targets) t = int32_t(data.integer(0, 16));
    std::vector<size_t> lengths;
    for (size_t i = 0; i < K; ++i) lengths.insert(lengths.end(), {16, 12});
    const auto member_batch = [&](const std::vector<int32_t>& v, size_t m) {
        return Indices({B, T}, std::vector<int32_t>(v.begin() + m * B * T, v.begin() + (m + 1) * B * T));
    };
    const auto update = [&](size_t m) {
        EXPECT_TRUE(std::isfinite(clip_grad_norm(own[m], 1.0)));
        optimizers[m]->step();
        optimizers[m]->zero_grad();
    };
    const auto in_turn = [&] {
        for (size_t m = 0; m < K; ++m) {
            Tensor loss = cross_entropy(members[m]->forward(member_batch(tokens, m), {16, 12}), member_batch(targets, m));
            EXPECT_TRUE(std::isfinite(loss.item()));
            loss.backward();
            update(m);
        }
    };
    const NamedTensors stacked_params = stacked.named_parameters();
    const auto together = [&] {
        zero_grad(stacked_params);  // as StackedMembers::step: the gradients' homes zeroed, one memset
        rows.set_values();
        const Tensor logits = stacked.forward(Indices({K * B, T}, tokens), lengths);  // (K B, T, V)
        // every member's loss in one op, as StackedMembers::step
        const Tensor losses = cross_entropy_members(reshape(logits, {K * B * T, logits.size(2)}), Indices({K * B * T}, targets),
                                                    std::vector<size_t>(K, B * T));
        sum(losses).backward();
        for (double loss : losses.values()) EXPECT_TRUE(std::isfinite(loss));
        rows.add_grads();
        std::vector<const NamedTensors*> models;  // every member's norm in one copy, as the trainer's stacked step
        for (const NamedTensors& params : own) models.push_back(&params);
        for (double norm : clip_grad_norms(models, 1.0)) EXPECT_TRUE(std::isfinite(norm));
        std::vector<Optimizer*> stepping;  // every member's AdamW and zeroing in one launch each, as the trainer
        for (const auto& optimizer : optimizers) stepping.push_back(optimizer.get());
        step_together(stepping);
        zero_grads(models);
    };
    long waits = 0;  // copies to the host in the last step counted: each one waits for the stream
    const auto count = [&waits](const std::function<void()>& step, const char* what) {
        step();  // the first also makes the gradients' homes
        const long launches_before = cuemu::launches();
        const cuemu::WorkCounts before = cuemu::work_counts();
        step();
        const cuemu::WorkCounts after = cuemu::work_counts();
        const long kernels = cuemu::launches() - launches_before, gemms = after.gemms - before.gemms,
                   others = after.memsets - before.memsets + after.device_copies - before.device_copies;
        std::printf("eight members %s: %ld kernels + %ld GEMMs + %ld memsets and device copies = %ld; %ld copies in, %ld out\n",
                    what, kernels, gemms, others, kernels + gemms + others, after.copies_in - before.copies_in,
                    after.copies_out - before.copies_out);
        waits = after.copies_out - before.copies_out;
        return kernels + gemms + others;
    };
    const long apart = count(in_turn, "in turn"), shared = count(together, "stacked");
    EXPECT_LE(shared, 223);
    EXPECT_EQ(waits, 2);  // every member's loss in one copy, every member's gradient norm in one
    EXPECT_LT(4 * shared, apart);
}

}  // namespace
}  // namespace attnlab::cuemu_test
