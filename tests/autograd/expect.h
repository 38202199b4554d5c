// Small assertion helpers shared by the autograd suites.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab::testing {

// Every value of `t` (row-major) is within `tol` of `expected`, and the counts agree.
inline void expect_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
    const std::vector<double> got = t.values();
    ASSERT_EQ(got.size(), expected.size()) << "tensor of shape " << shape_str(t.shape());
    for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], expected[i], tol) << "element " << i << " of " << shape_str(t.shape());
}

// Runs `f`, which must throw attnlab::Error; returns its message ("" if it did not throw).
template <class F> std::string error_message(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "threw a non-attnlab exception: " << e.what();
        return "";
    }
    ADD_FAILURE() << "did not throw";
    return "";
}

inline bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The message starts with `prefix` (e.g. "[add]") and contains every string in `parts`.
template <class F>
void expect_error(F&& f, const std::string& prefix, const std::vector<std::string>& parts = {}) {
    const std::string message = error_message(f);
    EXPECT_TRUE(starts_with(message, prefix)) << "message: \"" << message << "\" should start with " << prefix;
    for (const std::string& part : parts)
        EXPECT_NE(message.find(part), std::string::npos) << "message: \"" << message << "\" lacks " << part;
}

}  // namespace attnlab::testing
