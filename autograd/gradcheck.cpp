#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/rng.h"
#include "autograd/tensor_impl.h"

namespace attnlab {

Tensor gradcheck_input(Rng& rng, const Shape& shape, double low, double high) {
    return rng.uniform(shape, low, high, DType::f64).set_requires_grad(true);
}

namespace {

// Row k of the analytic Jacobian for every checked input: d output[k] / d input.
std::vector<std::vector<double>> analytic_row(const GradcheckCase& c, size_t k, size_t outputs) {
    Tensor y = c.fn(c.inputs);
    std::vector<double> seed_values(outputs, 0.0);
    seed_values[k] = 1.0;
    for (const Tensor& in : c.inputs) in.impl().grad.reset();
    std::vector<std::vector<double>> rows;
    if (y.requires_grad()) y.backward(Tensor::from_values(seed_values, y.shape(), DType::f64));
    for (const Tensor& in : c.inputs) {
        if (!in.requires_grad()) continue;
        Tensor g = in.grad();
        rows.push_back(g.defined() ? g.values() : std::vector<double>(in.numel(), 0.0));
        in.impl().grad.reset();
    }
    return rows;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckCase& c, const GradcheckOptions& options) {
    GradcheckResult result;
    for (const Tensor& in : c.inputs)
        if (in.dtype() != DType::f64) fail("gradcheck", c.op + ": inputs must be float64");

    Tensor y0;
    {
        NoGradGuard no_grad;
        y0 = c.fn(c.inputs);
    }
    const size_t outputs = y0.numel();

    // analytic[k][i][e] = d y[k] / d input_i[e]
    std::vector<std::vector<std::vector<double>>> analytic;
    for (size_t k = 0; k < outputs; ++k) analytic.push_back(analytic_row(c, k, outputs));

    size_t checked = 0;
    for (const Tensor& in : c.inputs) {
        if (!in.requires_grad()) continue;
        auto& data = in.impl().array<double>();
        for (size_t e = 0; e < data.size(); ++e) {
            const double original = data.data()[e];
            std::vector<double> plus, minus;
            {
                NoGradGuard no_grad;
                data.data()[e] = original + options.eps;
                plus = c.fn(c.inputs).values();
                data.data()[e] = original - options.eps;
                minus = c.fn(c.inputs).values();
                data.data()[e] = original;
            }
            for (size_t k = 0; k < outputs; ++k) {
                const double numeric = (plus[k] - minus[k]) / (2.0 * options.eps);
                const double exact = analytic[k][checked][e];
                const double err = std::abs(exact - numeric);
                result.max_abs_error = std::max(result.max_abs_error, err);
                result.max_rel_error = std::max(result.max_rel_error, err / std::max(std::abs(numeric), options.atol));
                if (err > options.atol + options.rtol * std::abs(numeric) && result.passed) {
                    result.passed = false;
                    std::ostringstream msg;
                    msg << "input " << checked << " element " << e << ", output " << k
                        << ": analytic " << exact << " vs numeric " << numeric;
                    result.failure = msg.str();
                }
            }
        }
        ++checked;
    }
    return result;
}

std::vector<GradcheckCase> gradcheck_registry() {
    std::vector<GradcheckCase> cases;
    add_elementwise_cases(cases);
    add_pointwise_cases(cases);
    add_reduce_cases(cases);
    add_shape_cases(cases);
    add_matmul_cases(cases);
    add_nn_cases(cases);
    add_attention_cases(cases);
    add_position_cases(cases);
    return cases;
}

}  // namespace attnlab
