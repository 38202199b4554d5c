// A model's gradients as one flat float32 buffer, for summing across ranks:
// every parameter's gradient in registration order (zeros where a parameter has
// none), then one presence count per parameter (1 where it has one), so that
// after a sum a parameter no rank reached stays without a gradient, as it would
// in a single process (an optimiser skips it; weight decay does not touch it).
#pragma once

#include <vector>

#include "layers/module.h"

namespace attnlab {

// [sum of numel] values, then [parameters] presence counts. CPU float32 parameters.
std::vector<float> pack_gradients(const NamedTensors& params);
// Sets each parameter's gradient to its values in `flat` where its count is > 0,
// and drops it where the count is 0 (the inverse of pack_gradients).
void unpack_gradients(const NamedTensors& params, const std::vector<float>& flat);
// left[i] += right[i]: one node of a summation tree (same lengths).
void add_into(std::vector<float>& left, const std::vector<float>& right);
void add_into(std::vector<double>& left, const std::vector<double>& right);

}  // namespace attnlab
