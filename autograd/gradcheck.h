// Float64 central-difference gradient checking, with PyTorch gradcheck's
// defaults, and the registry of cases that `attnlab gradcheck` runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

class Rng;

struct GradcheckCase {
    std::string op;    // the op under test, as named in its "[op]" messages
    std::string name;  // what the case covers, e.g. "broadcast (2,3) + (3)"
    std::vector<Tensor> inputs;  // float64 leaves; those requiring grad are checked
    std::function<Tensor(const std::vector<Tensor>&)> fn;
};

struct GradcheckOptions {
    double eps = 1e-6;
    double atol = 1e-5;
    double rtol = 1e-3;
};

struct GradcheckResult {
    double max_abs_error = 0.0;
    double max_rel_error = 0.0;
    bool passed = true;
    std::string failure;  // first failing entry: input, element, analytic vs numeric
};

// Compares the full analytic Jacobian (one backward pass per output element)
// with central differences: |analytic - numeric| <= atol + rtol * |numeric|.
GradcheckResult gradcheck(const GradcheckCase& c, const GradcheckOptions& options = {});

// A float64 leaf with values uniform in [low, high) that requires grad.
Tensor gradcheck_input(Rng& rng, const Shape& shape, double low = -1.0, double high = 1.0);

// Every op's cases. Each op file contributes its own list (defined beside its ops).
std::vector<GradcheckCase> gradcheck_registry();
void add_elementwise_cases(std::vector<GradcheckCase>& cases);
void add_pointwise_cases(std::vector<GradcheckCase>& cases);
void add_reduce_cases(std::vector<GradcheckCase>& cases);
void add_shape_cases(std::vector<GradcheckCase>& cases);
void add_matmul_cases(std::vector<GradcheckCase>& cases);
void add_nn_cases(std::vector<GradcheckCase>& cases);
void add_attention_cases(std::vector<GradcheckCase>& cases);
void add_position_cases(std::vector<GradcheckCase>& cases);

}  // namespace attnlab
