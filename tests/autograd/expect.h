// Small assertion helpers shared by the autograd suites.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/attention.h"
#include "autograd/composed.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
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

// Fused op against its composition of ops (autograd/composed.h).
using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// The output and every input's gradient of sum(output * direction), on fresh leaves.
struct Run {
    std::vector<double> out;
    std::vector<std::vector<double>> grads;
};
inline Run run(const Op& op, const std::vector<Tensor>& inputs, Rng& rng) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : inputs) leaves.push_back(t.detach().set_requires_grad(true));
    const Tensor out = op(leaves);
    const Tensor direction = gradcheck_input(rng, out.shape()).detach();
    sum(out * direction).backward();
    Run r{out.values(), {}};
    for (const Tensor& leaf : leaves) r.grads.push_back(leaf.grad().values());
    return r;
}

inline void expect_same(const std::string& what, const Op& fused, const Op& composed, const std::vector<Tensor>& inputs) {
    Rng a(99), b(99);  // one direction for both
    const Run f = run(fused, inputs, a), c = run(composed, inputs, b);
    ASSERT_EQ(f.out.size(), c.out.size()) << what;
    for (size_t i = 0; i < f.out.size(); ++i) EXPECT_NEAR(f.out[i], c.out[i], 1e-12) << what << ": value " << i;
    for (size_t k = 0; k < inputs.size(); ++k)
        for (size_t i = 0; i < f.grads[k].size(); ++i)
            EXPECT_NEAR(f.grads[k][i], c.grads[k][i], 1e-10) << what << ": gradient of input " << k << ", element " << i;
}

// An eligibility rule on the fused op's dense and blockwise paths, at the rule tests'
// settings (2 query heads over 1 K/V head, scale 0.7, policy "zero"): values and
// every gradient equal attention composed of ops; float64 central differences on
// the paths in `gradchecked` (one backward per output element: slow at long T);
// the context is finite (an empty item gives zeros, never NaN).
inline void expect_rule_on_fused_paths(const std::string& what, const AttentionMask& mask, const std::vector<Tensor>& in,
                                       const std::vector<AttentionPath>& gradchecked) {
    for (const AttentionPath path : {AttentionPath::dense, AttentionPath::blockwise}) {
        AttentionOptions options;
        options.scale = 0.7;
        options.masked_rows = MaskedRows::zero;
        options.path = path;
        const Op fused = [&](const std::vector<Tensor>& t) { return attention_packed(t[0], t[1], t[2], 2, 1, mask, options).context; };
        expect_same(what, fused,
                    [&](const std::vector<Tensor>& t) { return composed::attention(t[0], t[1], t[2], 2, 1, mask, 0.7, MaskedRows::zero); },
                    in);
        if (std::find(gradchecked.begin(), gradchecked.end(), path) == gradchecked.end()) continue;
        const GradcheckResult r = gradcheck({"attention", what, in, fused});
        EXPECT_TRUE(r.passed) << what << ": " << r.failure;
    }
    AttentionOptions options;
    options.masked_rows = MaskedRows::zero;
    for (const double x : attention_packed(in[0], in[1], in[2], 2, 1, mask, options).context.values())
        ASSERT_TRUE(std::isfinite(x)) << what;
}

}  // namespace attnlab::testing
