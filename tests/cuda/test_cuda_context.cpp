// The Context and its caching allocator. Without a device (or without CUDA) a
// Context is refused with the probe's reason; with one, buffers are reused by
// rounded size and copies round-trip exactly.
#include "attention_reference.h"

namespace attnlab::cuda_test {
namespace {

using device::DeviceAllocator;

TEST(CudaContext, RefusedWithoutADeviceNamingTheReason) {
    const device::DeviceInfo info = device::probe();
    if (info.available) GTEST_SKIP() << "a CUDA device is present: " << info.name;
    try {
        device::Context context;
        FAIL() << "a Context was made without a device";
    } catch (const Error& error) {
        EXPECT_EQ(std::string(error.what()), "[cuda] Context: " + info.reason);
    }
}

TEST(CudaContext, SizesAreRoundedToGranules) {
    EXPECT_EQ(DeviceAllocator::rounded_size(1), 512u);
    EXPECT_EQ(DeviceAllocator::rounded_size(512), 512u);
    EXPECT_EQ(DeviceAllocator::rounded_size(513), 1024u);
    EXPECT_EQ(DeviceAllocator::rounded_size((1u << 20) + 1), 2u << 20);
}

using CudaAllocator = DeviceTest;

TEST_F(CudaAllocator, ReusesFreedBlocksOfTheSameRoundedSize) {
    if (!context->caching_memory()) GTEST_SKIP() << "ATTNLAB_NO_CUDA_CACHING is set: every buffer is its own block";
    const size_t allocations_before = context->memory_stats().device_allocations;
    {
        device::DeviceBuffer a = context->allocate(1000);  // 1024 bytes
        EXPECT_EQ(a.bytes(), 1000u);
        EXPECT_EQ(context->memory_stats().bytes_in_use, 1024u);
    }
    EXPECT_EQ(context->memory_stats().bytes_in_use, 0u);
    EXPECT_EQ(context->memory_stats().bytes_cached, 1024u);
    {
        device::DeviceBuffer b = context->allocate(900);  // same granule: from the cache
        EXPECT_EQ(context->memory_stats().bytes_cached, 0u);
        device::DeviceBuffer c = context->allocate(3000);  // a new block
        EXPECT_EQ(context->memory_stats().peak_bytes_in_use, 1024u + 3072u);
    }
    EXPECT_EQ(context->memory_stats().device_allocations, allocations_before + 2);
    context->empty_cache();
    EXPECT_EQ(context->memory_stats().bytes_cached, 0u);
}

TEST_F(CudaAllocator, CopiesRoundTrip) {
    const std::vector<float> values{1.5f, -2.0f, 3.25f, 1e-30f, 7.0f};
    const device::DeviceBuffer buffer = device::to_device(*context, values);
    EXPECT_EQ(device::to_host_floats(*context, buffer, values.size()), values);
    std::vector<float> too_many(6);
    EXPECT_THROW(device::to_host(*context, buffer, too_many.data(), 6 * sizeof(float)), Error);
}

}  // namespace
}  // namespace attnlab::cuda_test
