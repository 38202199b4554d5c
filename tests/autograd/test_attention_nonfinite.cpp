// The attention op's policy for non-finite inputs (autograd/attention.h), on
// both CPU paths (dense and blockwise), in float32 and float64:
//   - a NaN among a row's eligible scores makes that row's context NaN, also
//     when every eligible score of the row (or of one key block) is NaN;
//   - keys past a batch item's key length are never read: inf or NaN in those
//     K/V rows leaves the context and every gradient as with zeros there.
// tests/cuda/test_cuda_attention_nonfinite.cpp holds the same cases for the
// CUDA kernels (run on a GPU and in the host emulation, tests/cuemu/).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "autograd/attention.h"
#include "autograd/rng.h"

namespace attnlab {
namespace {

constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_value = std::numeric_limits<double>::infinity();

struct Case {
    AttentionPath path;
    DType dtype;
};

std::string name_of(const Case& c) {
    return std::string(c.path == AttentionPath::dense ? "dense" : "blockwise") + "_" + to_string(c.dtype);
}

void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

class AttentionNonFinite : public ::testing::TestWithParam<Case> {
protected:
    Tensor random(const Shape& shape) { return rng.normal(shape, 0.0, 1.0, GetParam().dtype); }
    // t (B, H, T, w) with rows [from, to) of head (b, h) set to `value`.
    Tensor with_rows(const Tensor& t, size_t b, size_t h, size_t from, size_t to, double value) {
        std::vector<double> values = t.values();
        const size_t H = t.size(1), T = t.size(2), w = t.size(3);
        for (size_t row = from; row < to; ++row)
            for (size_t c = 0; c < w; ++c) values[((b * H + h) * T + row) * w + c] = value;
        return Tensor::from_values(values, t.shape(), GetParam().dtype);
    }
    AttentionOptions options() const {
        AttentionOptions o;
        o.scale = 0.3;
        o.path = GetParam().path;
        return o;
    }
    Rng rng{17};
};

// Which query rows of a (1, 1, Tq, w) context hold a NaN.
std::vector<bool> nan_rows(const Tensor& context) {
    const std::vector<double> values = context.values();
    const size_t w = context.size(3);
    std::vector<bool> rows(values.size() / w, false);
    for (size_t e = 0; e < values.size(); ++e) rows[e / w] = rows[e / w] || std::isnan(values[e]);
    return rows;
}

TEST_P(AttentionNonFinite, NanQueryRowGivesANanRow) {
    const Tensor q = with_rows(random({1, 1, 4, 8}), 0, 0, 2, 3, nan_value), k = random({1, 1, 4, 8}),
                 v = random({1, 1, 4, 8});
    EXPECT_EQ(nan_rows(attention(q, k, v, {}, options()).context), (std::vector<bool>{false, false, true, false}));
}

// Keys 0..127 (the whole first key block of the blockwise path) are NaN.
TEST_P(AttentionNonFinite, NanKeyBlockGivesNanRows) {
    const Tensor q = random({1, 1, 3, 8}), k = with_rows(random({1, 1, 300, 8}), 0, 0, 0, 128, nan_value),
                 v = random({1, 1, 300, 8});
    EXPECT_EQ(nan_rows(attention(q, k, v, {}, options()).context), std::vector<bool>(3, true));
}

// Every eligible score of row 1 is NaN and its first key is masked (-inf):
// not a row without eligible keys (that would be a zero row).
TEST_P(AttentionNonFinite, AllEligibleScoresNanBehindAMaskedKey) {
    const Tensor q = random({1, 1, 3, 8}), k = with_rows(random({1, 1, 4, 8}), 0, 0, 1, 4, nan_value),
                 v = random({1, 1, 4, 8});
    AttentionMask mask;
    mask.eligible = Mask::filled({3, 4}, true);
    mask.eligible.values[1 * 4 + 0] = 0;
    EXPECT_EQ(nan_rows(attention(q, k, v, mask, options()).context), std::vector<bool>(3, true));
}

// K and V rows at or past each item's key length hold inf and NaN (an
// unwritten cache tail): context and gradients as with zeros there, the padded
// keys' gradients exactly 0. Tk = 300 crosses the blockwise path's key blocks.
TEST_P(AttentionNonFinite, PaddedKeysMayHoldInfAndNan) {
    const size_t B = 2, H = 2, Tq = 50, Tk = 300, d = 8;
    const std::vector<size_t> lengths{140, 37};
    Tensor q = random({B, H, Tq, d}), k = random({B, 1, Tk, d}), v = random({B, 1, Tk, d}), dcontext = random({B, H, Tq, d});
    Tensor dirty_k = k, dirty_v = v;
    for (size_t b = 0; b < B; ++b) {
        k = with_rows(k, b, 0, lengths[b], Tk, 0.0);
        v = with_rows(v, b, 0, lengths[b], Tk, 0.0);
        dirty_k = with_rows(dirty_k, b, 0, lengths[b], Tk, b == 0 ? inf_value : nan_value);
        dirty_v = with_rows(dirty_v, b, 0, lengths[b], Tk, b == 0 ? nan_value : -inf_value);
    }
    for (bool causal : {false, true}) {
        SCOPED_TRACE(causal ? "causal and padding" : "padding");
        AttentionMask mask;
        mask.key_lengths = lengths;
        mask.causal = causal;
        std::vector<std::vector<double>> results[2];  // clean, dirty: context, dq, dk, dv
        for (int dirty = 0; dirty < 2; ++dirty) {
            Tensor qg = q.clone().set_requires_grad(true);
            Tensor kg = (dirty ? dirty_k : k).clone().set_requires_grad(true);
            Tensor vg = (dirty ? dirty_v : v).clone().set_requires_grad(true);
            const Tensor context = attention(qg, kg, vg, mask, options()).context;
            context.backward(dcontext);
            results[dirty] = {context.values(), qg.grad().values(), kg.grad().values(), vg.grad().values()};
        }
        const char* names[] = {"context", "dq", "dk", "dv"};
        for (size_t t = 0; t < 4; ++t)
            for (size_t e = 0; e < results[0][t].size(); ++e) {
                ASSERT_TRUE(std::isfinite(results[1][t][e])) << names[t] << " element " << e;
                ASSERT_EQ(results[1][t][e], results[0][t][e]) << names[t] << " element " << e;
            }
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, AttentionNonFinite,
                         ::testing::Values(Case{AttentionPath::dense, DType::f32}, Case{AttentionPath::dense, DType::f64},
                                           Case{AttentionPath::blockwise, DType::f32},
                                           Case{AttentionPath::blockwise, DType::f64}),
                         [](const ::testing::TestParamInfo<Case>& info) { return name_of(info.param); });

}  // namespace
}  // namespace attnlab
