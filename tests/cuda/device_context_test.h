// The fixture of every test that needs a device::Context: a GPU's in test_cuda,
// the host's in test_device_host (tests/device_host/, whose probe answers that
// the host is the device); skipped, with the probe's reason, where no device
// is present (no GPU, or the stub of a CPU build).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "autograd/device/backend.h"
#include "autograd/device/context.h"

namespace attnlab::cuda_test {

// Where the device interface runs deterministically (the host loops of
// test_device_host, the emulation of tests/cuemu/: ATTNLAB_EXACT_DEVICE), stacked
// members' passes are their solo passes bit for bit; on a GPU, batched and single
// GEMMs may take different cuBLAS kernels and the embedding's scatter-add is
// atomic, so they agree to float32 rounding.
#ifdef ATTNLAB_EXACT_DEVICE
constexpr bool exact_device = true;
#else
constexpr bool exact_device = false;
#endif

class DeviceTest : public ::testing::Test {
protected:
    void SetUp() override {
        const device::DeviceInfo info = device::probe();
        if (!info.available) GTEST_SKIP() << info.reason;
        context = std::make_unique<device::Context>();
    }
    std::unique_ptr<device::Context> context;
};

}  // namespace attnlab::cuda_test
