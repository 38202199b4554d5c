// train.device = "cuda": the attention kernel a model's layers get, by head
// width. (The whole device step is tested in test_device_step.cpp and
// test_device_trainer.cpp; the attention-only hybrid op it replaced is gone.)
#include <gtest/gtest.h>

#include "autograd/device/attention.h"

namespace attnlab::cuda_test {
namespace {

using device::AttentionKernel;

TEST(DeviceAttentionKernel, FlashForHeadWidthsItsTilesHold) {
    EXPECT_EQ(device::kernel_for_head_width(64), AttentionKernel::flash);
    EXPECT_EQ(device::kernel_for_head_width(device::flash_max_head_width), AttentionKernel::flash);
    EXPECT_EQ(device::kernel_for_head_width(device::flash_max_head_width + 1), AttentionKernel::dense);
}

}  // namespace
}  // namespace attnlab::cuda_test
