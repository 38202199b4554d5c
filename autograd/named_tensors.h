// Tensors by name, in order: a module's parameters ("blocks.0.attn.q_proj.weight"),
// an optimiser's state, a checkpoint's datasets. Here, below layers/, so that
// optim/ and the file readers need no layer.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;  // in registration order

}  // namespace attnlab
