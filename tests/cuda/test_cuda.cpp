// The CUDA backend's plain C++ interface, in all three situations it meets:
// built without CUDA (the stub), built with CUDA on a machine without a GPU
// (CI, development machines), and built with CUDA on a GPU machine.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "autograd/tensor.h"
#include "autograd/device/backend.h"

namespace {

using attnlab::device::built_with_cuda;
using attnlab::device::probe;
using attnlab::device::require_device;

bool starts_with(const std::string& text, const std::string& prefix) {
    return text.rfind(prefix, 0) == 0;
}

// The one #ifdef: it checks that CMake linked the backend its definition says it did.
#ifdef ATTNLAB_HAS_CUDA
constexpr bool configured_with_cuda = true;
#else
constexpr bool configured_with_cuda = false;
#endif

TEST(CudaBackend, LinkedBackendMatchesConfiguration) {
    EXPECT_EQ(built_with_cuda(), configured_with_cuda);
}

TEST(CudaBackend, StubRefusesAndSaysHowToEnable) {
    if (built_with_cuda()) GTEST_SKIP() << "built with CUDA; the stub is not linked";
    const auto info = probe();
    EXPECT_FALSE(info.available);
    EXPECT_EQ(info.device_count, 0);
    EXPECT_TRUE(info.name.empty());
    EXPECT_EQ(info.reason, "attnlab was built without CUDA (configure with -DATTNLAB_CUDA=ON)");
}

TEST(CudaBackend, UnavailableDeviceHasAReason) {
    const auto info = probe();
    if (info.available) GTEST_SKIP() << "a CUDA device is present: " << info.name;
    EXPECT_EQ(info.device_count, 0);
    EXPECT_FALSE(info.reason.empty());
    if (built_with_cuda()) {
        EXPECT_TRUE(starts_with(info.reason, "no CUDA device present: ")) << info.reason;
    } else {
        EXPECT_NE(info.reason.find("-DATTNLAB_CUDA=ON"), std::string::npos) << info.reason;
    }
}

TEST(CudaBackend, RequireDeviceThrowsNamingCallerAndReason) {
    const auto info = probe();
    if (info.available) GTEST_SKIP() << "a CUDA device is present: " << info.name;
    try {
        require_device("train.device");
        FAIL() << "require_device did not throw without a device";
    } catch (const attnlab::Error& error) {
        const std::string message = error.what();
        EXPECT_TRUE(starts_with(message, "[cuda] train.device: ")) << message;
        EXPECT_EQ(message, "[cuda] train.device: " + info.reason);
    }
}

// Needs a GPU: skipped with the probe's reason elsewhere.
TEST(CudaDevice, ProbeNamesTheDevice) {
    const auto info = probe();
    if (!info.available) GTEST_SKIP() << info.reason;
    EXPECT_TRUE(built_with_cuda());
    EXPECT_GE(info.device_count, 1);
    EXPECT_FALSE(info.name.empty());
    EXPECT_TRUE(info.reason.empty()) << info.reason;
    std::cout << "CUDA device 0: " << info.name << " (" << info.device_count << " device(s))\n";
}

TEST(CudaDevice, RequireDevicePasses) {
    const auto info = probe();
    if (!info.available) GTEST_SKIP() << info.reason;
    EXPECT_NO_THROW(require_device("test_cuda"));
}

}  // namespace
