// Comparing attnlab's tensors with a reference's (PyTorch fixtures).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/tensor.h"

namespace attnlab {

// Largest |ours - theirs| over all elements (NaN if either holds a NaN), after
// checking that attnlab produced a tensor and that the shapes agree.
inline double max_abs_difference(const Tensor& ours, const Tensor& theirs, const std::string& what) {
    if (!ours.defined()) {
        ADD_FAILURE() << what << ": attnlab produced no tensor (gradient never reached it?)";
        return NAN;
    }
    if (ours.shape() != theirs.shape()) {
        ADD_FAILURE() << what << ": attnlab shape " << shape_str(ours.shape()) << ", reference " << shape_str(theirs.shape());
        return NAN;
    }
    const std::vector<double> a = ours.values(), b = theirs.values();
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::abs(a[i] - b[i]);
        if (std::isnan(d)) return NAN;
        worst = std::max(worst, d);
    }
    return worst;
}

}  // namespace attnlab
