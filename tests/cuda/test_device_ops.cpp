// Each device op of autograd/device/kernels.h against its CPU reference, the autograd op
// (forward, and the gradients backward() gives for a random upstream gradient),
// so that a failing whole-step test on a GPU points at one kernel. Tolerance:
// 1e-5 + 1e-4 |cpu| (float32 in another order). Compiled into test_cuda (the
// kernels; skipped without a GPU) and test_device_host (the host loops).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/device/context.h"
#include "tensor_copy.h"
#include "autograd/device/kernels.h"
#include "device_context_test.h"
#include "optim/optimizer.h"

namespace attnlab::device_ops_test {
namespace {

using device::DeviceBuffer;

class DeviceOps : public cuda_test::DeviceTest {
protected:
    DeviceBuffer up(const Tensor& t) { return device::upload(*context, t); }
    DeviceBuffer up(const std::vector<int32_t>& ids) {
        return device::to_device(*context, ids.data(), ids.size() * sizeof(int32_t));
    }
    DeviceBuffer zeros(size_t n) {
        DeviceBuffer b = context->allocate_floats(n);
        device::fill_zero(*context, b.data(), n * sizeof(float));
        return b;
    }
    Tensor down(const DeviceBuffer& b, const Shape& shape) { return device::download(*context, b, shape); }
    Rng rng{21};
};

void expect_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
    ASSERT_EQ(actual.shape(), expected.shape()) << what;
    const std::vector<double> a = actual.values(), e = expected.values();
    for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], e[i], 1e-5 + 1e-4 * std::abs(e[i])) << what << " element " << i;
}

Tensor leaf(Rng& rng, const Shape& shape, double scale = 1.0) {
    return rng.normal(shape, 0.0, scale).set_requires_grad(true);
}

TEST_F(DeviceOps, EmbeddingWithPositions) {
    const size_t B = 3, T = 5, D = 7, V = 6;
    const Tensor E = leaf(rng, {V, D}), P = leaf(rng, {T + 2, D}), dy = rng.normal({B, T, D}, 0, 1);
    std::vector<int32_t> ids(B * T);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 5) % 4);  // rows repeat; 4, 5 unused
    const Tensor y = embedding(E, Indices({B, T}, ids)) + slice(P, 0, 0, T);
    y.backward(dy);
    const DeviceBuffer dE_in = up(E), dP_in = up(P), tokens = up(ids), x = zeros(B * T * D);
    device::embedding_forward(*context, B, T, D, static_cast<const int32_t*>(tokens.data()), dE_in.floats(),
                            dP_in.floats(), x.floats());
    expect_close(down(x, {B, T, D}), y.detach(), "x");
    const DeviceBuffer gE = zeros(V * D), gP = zeros((T + 2) * D), g = up(dy);
    device::embedding_backward(*context, B, T, D, static_cast<const int32_t*>(tokens.data()), g.floats(), gE.floats(),
                             gP.floats());
    expect_close(down(gE, {V, D}), E.grad(), "dE");
    expect_close(down(gP, {T + 2, D}), P.grad(), "dP");
}

TEST_F(DeviceOps, LayerNormForwardAndBackward) {
    for (const size_t D : {16, 45, 200}) {  // under a warp, ragged, several passes per lane
        const size_t rows = 11;
        const Tensor x = leaf(rng, {rows, D}, 3.0), w = leaf(rng, {D}), b = leaf(rng, {D}),
                     dy = rng.normal({rows, D}, 0, 1);
        const Tensor y = layer_norm(x, w, b, 1e-5);
        y.backward(dy);
        const DeviceBuffer X = up(x), W = up(w), Bi = up(b), Y = zeros(rows * D), mean = zeros(rows),
                           rstd = zeros(rows);
        device::layer_norm_forward(*context, rows, D, X.floats(), W.floats(), Bi.floats(), 1e-5f, Y.floats(),
                                 mean.floats(), rstd.floats());
        expect_close(down(Y, {rows, D}), y.detach(), "y, D = " + std::to_string(D));
        const DeviceBuffer G = up(dy), dX = up(x), dW = zeros(D), dB = zeros(D), scratch = zeros(rows * D);
        // accumulate onto x's own values: dX ends as x + the gradient
        device::layer_norm_backward(*context, rows, D, X.floats(), W.floats(), mean.floats(), rstd.floats(), G.floats(),
                                  dX.floats(), true, dW.floats(), dB.floats(), scratch.floats());
        expect_close(down(dX, {rows, D}), x.detach() + x.grad(), "x + dx, D = " + std::to_string(D));
        expect_close(down(dW, {D}), w.grad(), "dgamma");
        expect_close(down(dB, {D}), b.grad(), "dbeta");
    }
}

TEST_F(DeviceOps, Activations) {
    const size_t n = 1000;
    for (const auto activation : {device::DeviceActivation::gelu, device::DeviceActivation::relu}) {
        const Tensor x = leaf(rng, {n}, 3.0), dy = rng.normal({n}, 0, 1);
        const Tensor y = activation == device::DeviceActivation::gelu ? gelu(x) : relu(x);
        y.backward(dy);
        const DeviceBuffer X = up(x), Y = zeros(n), G = up(dy), dX = zeros(n);
        device::activation_forward(*context, activation, n, X.floats(), Y.floats());
        device::activation_backward(*context, activation, n, X.floats(), G.floats(), dX.floats());
        expect_close(down(Y, {n}), y.detach(), "y");
        expect_close(down(dX, {n}), x.grad(), "dx");
    }
}

// NaN stays NaN through ReLU, as in torch (fmaxf(NaN, 0) would give 0 and hide it
// from the trainer's NaN stop); the infinities and zeros go where max(x, 0) sends them.
TEST_F(DeviceOps, ReluKeepsNaN) {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const Tensor x = Tensor::from_values({nan, -1.0, 2.0, -inf, inf, 0.0}, {6}, DType::f32);
    const DeviceBuffer X = up(x), Y = zeros(6);
    device::activation_forward(*context, device::DeviceActivation::relu, 6, X.floats(), Y.floats());
    const std::vector<double> y = down(Y, {6}).values();
    EXPECT_TRUE(std::isnan(y[0])) << y[0];
    EXPECT_EQ(std::vector<double>(y.begin() + 1, y.end()), (std::vector<double>{0.0, 2.0, 0.0, inf, 0.0}));
}

// No CPU op to compare with (the masks are the device's own): the fraction
// dropped, the scale of the rest, the backward through the same mask, and the seed.
TEST_F(DeviceOps, DropoutDropsAFractionPAndScalesTheRest) {
    const size_t n = 200000;
    const float p = 0.3f;
    const DeviceBuffer ones = up(Tensor::ones({n})), y = zeros(n), dx = zeros(n), other = zeros(n);
    device::dropout_forward(*context, n, ones.floats(), p, 42, y.floats());
    device::dropout_backward(*context, n, ones.floats(), p, 42, dx.floats());
    device::dropout_forward(*context, n, ones.floats(), p, 43, other.floats());
    const std::vector<double> kept = down(y, {n}).values(), grad = down(dx, {n}).values(), again = down(other, {n}).values();
    size_t dropped = 0, differ = 0;
    for (size_t e = 0; e < n; ++e) {
        dropped += kept[e] == 0.0;
        ASSERT_TRUE(kept[e] == 0.0 || std::abs(kept[e] - 1.0 / 0.7) < 1e-6) << e;
        ASSERT_EQ(grad[e], kept[e]) << "the backward's mask at " << e;
        differ += (kept[e] == 0.0) != (again[e] == 0.0);
    }
    const double fraction = double(dropped) / double(n), sigma = std::sqrt(0.3 * 0.7 / double(n));
    EXPECT_NEAR(fraction, 0.3, 5 * sigma);
    EXPECT_NEAR(double(differ) / double(n), 2 * 0.3 * 0.7, 0.01) << "another seed, another mask";
}

TEST_F(DeviceOps, LinearForwardAndBackward) {
    const size_t M = 37, N = 19, K = 23;
    for (const bool bias : {true, false}) {
        const Tensor x = leaf(rng, {M, K}), W = leaf(rng, {N, K}), b = bias ? leaf(rng, {N}) : Tensor(),
                     dy = rng.normal({M, N}, 0, 1);
        const Tensor y = linear(x, W, b);
        y.backward(dy);
        const DeviceBuffer X = up(x), Wd = up(W), Bd = bias ? up(b) : DeviceBuffer(), Y = zeros(M * N);
        device::linear_forward(*context, M, N, K, X.floats(), Wd.floats(), bias ? Bd.floats() : nullptr, Y.floats());
        expect_close(down(Y, {M, N}), y.detach(), "y");
        const DeviceBuffer G = up(dy), dX = zeros(M * K), dW = zeros(N * K), dB = zeros(N);
        device::linear_backward(*context, M, N, K, X.floats(), Wd.floats(), G.floats(), dX.floats(), false, dW.floats(),
                              bias ? dB.floats() : nullptr);
        expect_close(down(dX, {M, K}), x.grad(), "dx");
        expect_close(down(dW, {N, K}), W.grad(), "dW");
        if (bias) expect_close(down(dB, {N}), b.grad(), "db");
    }
}

// Three projections of one x in one call: W (3, N, K), b (3, N), y (3, M, N).
TEST_F(DeviceOps, LinearForwardAndBackwardInGroups) {
    const size_t G = 3, M = 21, N = 19, K = 23;
    const Tensor x = leaf(rng, {M, K}), W = leaf(rng, {G * N, K}), b = leaf(rng, {G * N}), dy = rng.normal({G, M, N}, 0, 1);
    std::vector<Tensor> ys;
    for (size_t g = 0; g < G; ++g) ys.push_back(linear(x, slice(W, 0, g * N, (g + 1) * N), slice(b, 0, g * N, (g + 1) * N)));
    const Tensor y = reshape(concat(ys, 0), {G, M, N});
    y.backward(dy);
    const DeviceBuffer X = up(x), Wd = up(W), Bd = up(b), Y = zeros(G * M * N);
    device::linear_forward(*context, M, N, K, X.floats(), Wd.floats(), Bd.floats(), Y.floats(), G);
    expect_close(down(Y, {G, M, N}), y.detach(), "y");
    const DeviceBuffer D = up(dy), dX = up(Tensor::ones({M, K})), dW = zeros(G * N * K), dB = zeros(G * N);
    device::linear_backward(*context, M, N, K, X.floats(), Wd.floats(), D.floats(), dX.floats(), true, dW.floats(), dB.floats(), G);
    expect_close(down(dX, {M, K}), x.grad() + 1.0, "1 + dx, summed over the groups");
    expect_close(down(dW, {G * N, K}), W.grad(), "dW");
    expect_close(down(dB, {G * N}), b.grad(), "db");
}

TEST_F(DeviceOps, CrossEntropyWithALossMask) {
    const size_t M = 9, V = 40;  // V above a warp
    const Tensor z = leaf(rng, {M, V}, 2.0);
    std::vector<int32_t> targets(M);
    std::vector<uint8_t> counted(M);
    for (size_t i = 0; i < M; ++i) {
        targets[i] = static_cast<int32_t>((i * 7) % V);
        counted[i] = i % 4 != 1;
    }
    const Mask mask({M}, counted);
    const Tensor loss = cross_entropy(z, Indices({M}, targets), mask);
    loss.backward();
    size_t count = 0;
    for (uint8_t c : counted) count += c;
    std::vector<float> weight(M);
    for (size_t i = 0; i < M; ++i) weight[i] = counted[i] ? 1.0f / float(count) : 0.0f;
    const DeviceBuffer Z = up(z), T = up(targets), Wt = device::to_device(*context, weight), rows = zeros(M),
                       dZ = zeros(M * V);
    device::cross_entropy_forward_backward(*context, M, V, Z.floats(), static_cast<const int32_t*>(T.data()),
                                         Wt.floats(), rows.floats(), dZ.floats());
    DeviceBuffer total = context->allocate(sizeof(double)), partials = context->allocate(device::reduce_partials * 8);
    device::sum_to_double(*context, M, rows.floats(), false, static_cast<double*>(total.data()),
                        static_cast<double*>(partials.data()));
    double value = 0;
    device::to_host(*context, total, &value, sizeof value);
    EXPECT_NEAR(value, loss.item(), 1e-5);
    expect_close(down(dZ, {M, V}), z.grad(), "dlogits");
}

TEST_F(DeviceOps, LayoutsAreThePermutationsOfReshapeAndPermute) {
    const size_t B = 2, T = 5, H = 4, d = 3;
    const Tensor x = rng.normal({B, T, H * d}, 0, 1);
    const auto heads = [&](const Tensor& t, size_t n) { return permute(reshape(t, {B, T, n, d}), {0, 2, 1, 3}); };
    const DeviceBuffer q = up(heads(x, H));
    const DeviceBuffer merged = zeros(B * T * H * d), split_again = zeros(B * H * T * d);
    device::merge_heads(*context, B, H, T, d, q.floats(), merged.floats());
    expect_close(down(merged, {B, T, H * d}), x, "merge_heads");
    device::split_heads(*context, B, H, T, d, merged.floats(), split_again.floats());
    expect_close(down(split_again, {B, H, T, d}), heads(x, H), "split_heads");
}

TEST_F(DeviceOps, ColumnSumsAndSumOfSquares) {
    const size_t rows = 300, cols = 70;
    const Tensor x = rng.normal({rows, cols}, 0, 1);
    const DeviceBuffer X = up(x), out = up(Tensor::ones({cols}));
    device::column_sums(*context, rows, cols, X.floats(), out.floats(), true);  // onto ones
    expect_close(down(out, {cols}), sum(x, {0}) + 1.0, "1 + column sums");
    const DeviceBuffer grouped = zeros(3 * cols);  // x as 3 groups of 100 rows
    device::column_sums(*context, rows / 3, cols, X.floats(), grouped.floats(), false, 3);
    expect_close(down(grouped, {3, cols}), sum(reshape(x, {3, rows / 3, cols}), {1}), "column sums of each group");
    DeviceBuffer total = context->allocate(sizeof(double)), partials = context->allocate(device::reduce_partials * 8);
    device::sum_to_double(*context, rows * cols, X.floats(), true, static_cast<double*>(total.data()),
                        static_cast<double*>(partials.data()));
    double value = 0;
    device::to_host(*context, total, &value, sizeof value);
    double expected = 0;  // in double, as the device sums
    for (double v : x.values()) expected += v * v;
    EXPECT_NEAR(value, expected, 1e-9 * expected);
}

// Two steps of AdamW (the first 60 elements decay) against Adam::step on the
// same parameter split in two, with a clip factor applied to the gradient.
TEST_F(DeviceOps, AdamUpdateIsAdamStep) {
    const size_t n_decay = 60, n = 100;
    Tensor decayed = rng.normal({6, 10}, 0, 1), kept = rng.normal({40}, 0, 1);
    const Tensor g_decayed = rng.normal({6, 10}, 0, 1), g_kept = rng.normal({40}, 0, 1);
    std::vector<double> all = decayed.values(), grads = g_decayed.values();
    for (double v : kept.values()) all.push_back(v);
    for (double v : g_kept.values()) grads.push_back(v);
    double squares = 0;
    for (double g : grads) squares += g * g;
    const double max_norm = 0.5 * std::sqrt(squares), factor = max_norm / (std::sqrt(squares) + 1e-6);

    NamedTensors params{{"w", decayed.set_requires_grad(true)}, {"b", kept.set_requires_grad(true)}};
    auto adamw = make_adamw(params, 1e-2, 0.9, 0.999, 1e-3, 0.1);
    const DeviceBuffer P = up(Tensor::from_values(all, {n})), G = up(Tensor::from_values(grads, {n})), M = zeros(n),
                       V = zeros(n);
    const double stats_host[2] = {1.0, squares};
    const DeviceBuffer stats = device::to_device(*context, stats_host, sizeof stats_host);
    for (int t = 1; t <= 2; ++t) {
        for (auto& [name, p] : params) p.zero_grad();
        (sum(params[0].second * (g_decayed * factor)) + sum(params[1].second * (g_kept * factor))).backward();
        adamw->step();
        device::AdamScalars s{};
        s.beta1 = 0.9f;
        s.beta2 = 0.999f;
        s.one_minus_beta1 = static_cast<float>(1 - 0.9);
        s.one_minus_beta2 = static_cast<float>(1 - 0.999);
        s.step_size = static_cast<float>(1e-2 / (1 - std::pow(0.9, t)));
        s.sqrt_c2 = static_cast<float>(std::sqrt(1 - std::pow(0.999, t)));
        s.eps = 1e-3f;
        s.weight_decay = 0.1f;
        s.shrink = 1.0f - 1e-2f * 0.1f;
        s.decoupled = true;
        s.max_norm = max_norm;
        device::adam_update(*context, {{n, n_decay, P.floats(), G.floats(), M.floats(), V.floats(), s}},
                            static_cast<const double*>(stats.data()));
    }
    const Tensor updated = down(P, {n});
    expect_close(slice(updated, 0, 0, n_decay), reshape(params[0].second.detach(), {n_decay}), "decayed");
    expect_close(slice(updated, 0, n_decay, n), params[1].second.detach(), "not decayed");
}

// The table launches (sums, clipping scales, zeroing, Adam) over 36 pieces of
// 1 to 70,000 floats, more than one launch's table, give each piece the bits it
// gets alone: stacked members clipped and updated together are each as alone.
TEST_F(DeviceOps, PiecesInOneLaunchAreEachAlone) {
    const std::vector<size_t> sizes = {1, 255, 256, 257, 3000, 70000, 5, 999};
    const size_t pieces = 36;
    std::vector<DeviceBuffer> together, alone, moments;  // piece i: in `together` and, a copy, in `alone`
    std::vector<size_t> n;
    for (size_t i = 0; i < pieces; ++i) {
        n.push_back(sizes[i % sizes.size()]);
        const Tensor x = rng.normal({n[i]}, 0, 1);
        together.push_back(up(x));
        alone.push_back(up(x));
        const Tensor r = rng.normal({n[i]}, 0, 0.1);
        moments.push_back(up(r * r));  // a second moment: v >= 0
    }
    // sums of squares
    DeviceBuffer sums = context->allocate(pieces * sizeof(double)), one = context->allocate(sizeof(double)),
                 partials = context->allocate(pieces * device::reduce_partials * sizeof(double));
    std::vector<device::SumPiece> table;
    for (size_t i = 0; i < pieces; ++i) table.push_back({n[i], together[i].floats(), static_cast<double*>(sums.data()) + i});
    device::sums_to_double(*context, table, true, static_cast<double*>(partials.data()));
    std::vector<double> all(pieces);
    device::to_host(*context, sums, all.data(), pieces * sizeof(double));
    for (size_t i = 0; i < pieces; ++i) {
        device::sum_to_double(*context, n[i], alone[i].floats(), true, static_cast<double*>(one.data()),
                              static_cast<double*>(partials.data()));
        double value = 0;
        device::to_host(*context, one, &value, sizeof value);
        EXPECT_EQ(all[i], value) << "sum of piece " << i << " (" << n[i] << " floats)";
    }
    const auto expect_same = [&](const char* what) {
        for (size_t i = 0; i < pieces; ++i) {
            const std::vector<double> a = down(together[i], {n[i]}).values(), b = down(alone[i], {n[i]}).values();
            ASSERT_EQ(a, b) << what << ", piece " << i;
        }
    };
    // clipping scales: every other piece, by its own factor
    std::vector<device::ScalePiece> clipped;
    for (size_t i = 0; i < pieces; i += 2) {
        const float factor = 0.25f + 0.01f * float(i);
        clipped.push_back({n[i], together[i].floats(), factor});
        device::scale(*context, n[i], alone[i].floats(), factor, nullptr, alone[i].floats(), false);
    }
    device::scale_pieces(*context, clipped);
    expect_same("scaled");
    // Adam: piece i's values updated with piece i + 1's as gradients, scalars by piece
    const double stats_host[2] = {0.0, 0.0};
    const DeviceBuffer stats = device::to_device(*context, stats_host, sizeof stats_host);
    std::vector<DeviceBuffer> m_alone, v_alone, m_together, v_together;
    std::vector<device::AdamRun> runs;
    for (size_t i = 0; i + 1 < pieces; i += 2) {
        const size_t count = std::min(n[i], n[i + 1]);
        for (auto* list : {&m_alone, &v_alone, &m_together, &v_together}) list->push_back(zeros(count));
        device::copy_device(*context, moments[i].data(), v_alone.back().data(), count * sizeof(float));
        device::copy_device(*context, moments[i].data(), v_together.back().data(), count * sizeof(float));
        device::AdamScalars s{};
        s.beta1 = 0.9f;
        s.beta2 = 0.999f;
        s.one_minus_beta1 = 0.1f;
        s.one_minus_beta2 = 0.001f;
        s.step_size = 1e-2f * float(1 + i);
        s.sqrt_c2 = 0.5f;
        s.eps = 1e-8f;
        s.weight_decay = 0.1f;
        s.shrink = 1.0f - 1e-3f;
        s.decoupled = i % 4 == 0;
        s.max_norm = std::numeric_limits<double>::infinity();
        runs.push_back({count, count / 2, together[i].floats(), together[i + 1].floats(), m_together.back().floats(),
                        v_together.back().floats(), s});
        device::adam_update(*context, {{count, count / 2, alone[i].floats(), alone[i + 1].floats(), m_alone.back().floats(),
                                        v_alone.back().floats(), s}},
                            static_cast<const double*>(stats.data()));
    }
    device::adam_update(*context, runs, static_cast<const double*>(stats.data()));
    expect_same("updated");
    for (size_t r = 0; r < runs.size(); ++r) {
        ASSERT_EQ(down(m_together[r], {runs[r].n}).values(), down(m_alone[r], {runs[r].n}).values()) << "m of run " << r;
        ASSERT_EQ(down(v_together[r], {runs[r].n}).values(), down(v_alone[r], {runs[r].n}).values()) << "v of run " << r;
    }
    // zeroing
    std::vector<device::ScalePiece> zeroed;
    for (size_t i = 0; i < pieces; ++i) zeroed.push_back({n[i], together[i].floats(), 1.0f});
    device::zero_pieces(*context, zeroed);
    for (size_t i = 0; i < pieces; ++i)
        for (double v : down(together[i], {n[i]}).values()) ASSERT_EQ(v, 0.0) << "zeroed piece " << i;
}

}  // namespace
}  // namespace attnlab::device_ops_test
