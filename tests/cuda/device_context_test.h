// A test that needs a cuda::Context: a GPU's in test_cuda, the host's in
// test_device_host (tests/device_host/); skipped, with the reason, where no
// Context can be made (no GPU, or the stub of a CPU build).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "autograd/tensor.h"
#include "cuda/context.h"

namespace attnlab::device_test {

class WithDeviceContext : public ::testing::Test {
protected:
    void SetUp() override {
        try {
            context = std::make_unique<cuda::Context>();
        } catch (const Error& e) {
            GTEST_SKIP() << e.what();
        }
    }
    std::unique_ptr<cuda::Context> context;
};

}  // namespace attnlab::device_test
