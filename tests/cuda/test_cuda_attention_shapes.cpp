// Shapes at the edges of the kernels' tiling and launch configuration (from
// the kernel review, ../shared/tools/cuemu/REVIEW.md), each against the CPU op
// as in test_cuda_attention.cpp: single query and key; exactly one tile;
// head widths of 8, 65 and 128 with a different value width; 8 query heads over
// one K/V head; more queries than keys under "zero"; key lengths 0 and 1; long
// sequences; dense at head width 256; and the grid limits (B above 65535:
// refused for flash before any device work, run by dense). Skipped without a device.
#include <cmath>

#include "attention_reference.h"

namespace attnlab::cuda_test {
namespace {

std::vector<Case> cases() {
    //            B  H  H_kv Tq   Tk    d    d_v
    return {
        {"tq1_tk1", {1, 1, 1, 1, 1, 8, 8}, {}},
        {"tq1_tk200_causal", {2, 2, 1, 1, 200, 16, 16}, causal()},
        {"exactly_one_tile_64", {1, 2, 2, 64, 64, 64, 64}, causal()},
        {"t63_d8", {1, 1, 1, 63, 63, 8, 8}, causal()},
        {"t129_d128_dv8", {1, 2, 1, 129, 129, 128, 8}, causal()},
        {"t100_d8_dv128_padded", {1, 2, 2, 100, 100, 8, 128}, padded({77})},
        {"d65_dv65", {1, 1, 1, 70, 70, 65, 65}, causal()},
        {"group_8_over_1_causal_padded", {2, 8, 1, 70, 70, 16, 16}, padded({70, 5}, true)},
        {"tq_gt_tk_causal_zero", {1, 2, 2, 200, 70, 16, 16}, causal(), MaskedRows::zero},
        {"key_length_0_zero", {2, 2, 2, 66, 66, 16, 16}, padded({0, 66}), MaskedRows::zero},
        {"key_length_1", {2, 2, 2, 66, 130, 16, 16}, padded({1, 129})},
        {"long_1024_d64", {1, 1, 1, 1024, 1024, 64, 64}, causal()},
        {"long_700_d128_no_mask", {1, 1, 1, 700, 700, 128, 128}, {}},
    };
}

class CudaAttentionShapes : public DeviceTest, public ::testing::WithParamInterface<Param> {};

TEST_P(CudaAttentionShapes, ForwardAndGradientsMatchTheCpuOp) {
    const Case& c = GetParam().c;
    expect_agreement(*context, GetParam().kernel, c.dims, c.mask, c.masked_rows, 5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionShapes, ::testing::ValuesIn(params(cases())), param_name);

using CudaAttentionLimits = DeviceTest;

// Flash refuses head widths above 128; dense takes them.
TEST_F(CudaAttentionLimits, DenseAtHeadWidth256) {
    expect_agreement(*context, AttentionKernel::dense, {1, 2, 1, 70, 90, 256, 256}, causal(), MaskedRows::error, 9);
}

// gridDim.z = B is at most 65535: refused in check_attention, with one line,
// before any upload; the dense kernel (rows in gridDim.x, B H_kv as cuBLAS's
// batch count) runs it.
TEST_F(CudaAttentionLimits, BatchAboveTheGridLimit) {
    const AttentionDims dims{70000, 1, 1, 1, 2, 8, 8};
    const Inputs in = random_inputs(dims, 2);
    const size_t allocations = context->memory_stats().device_allocations;
    try {
        device::attention_host(*context, AttentionKernel::flash, in.q, in.k, in.v, {}, {});
        ADD_FAILURE() << "flash took B = 70000";
    } catch (const Error& error) {
        EXPECT_EQ(std::string(error.what()),
                  "[attention] (B, H, H_kv, Tq, Tk, d, d_v) = (70000, 1, 1, 1, 2, 8, 8): the flash kernel's grid takes "
                  "at most 65535 batch items and 65535 heads (gridDim.z, gridDim.y); split the batch");
    }
    EXPECT_EQ(context->memory_stats().device_allocations, allocations);  // nothing reached the device
    expect_agreement(*context, AttentionKernel::dense, dims, {}, MaskedRows::error, 2);
}

}  // namespace
}  // namespace attnlab::cuda_test
