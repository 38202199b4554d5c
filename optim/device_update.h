// The optimisers' device side (device_update.cpp), called by optimizer.cpp
// when the parameters are on the device. Internal to optim/.
#pragma once

#include <vector>

#include "autograd/named_tensors.h"

namespace attnlab {

// Whether the parameters are on the device; throws when only some are.
bool on_device(const NamedTensors& params);
// Zeros for the optimiser's state, one flat block laid out as the parameters' values.
std::vector<Tensor> device_zeros_like(const NamedTensors& params);
// Every gradient of every model becomes its parameter's slot in its flat gradient
// block, zeroed (one launch for all; torch's zero_grad(set_to_none=False)).
void device_zero_grads(const std::vector<const NamedTensors*>& models);
// clip_grad_norms on the device: every model's sums of squares, then one copy to the host for all of them.
std::vector<double> device_clip_grad_norms(const std::vector<const NamedTensors*>& models, double max_norm);

}  // namespace attnlab
