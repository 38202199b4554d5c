// Matrix products through OpenBLAS GEMM; no naive loops on this path.
#include <algorithm>

#include "autograd/cpu/blas.h"
#include "autograd/cpu/threads.h"
#include "autograd/device_ops.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/shape.h"

namespace attnlab {

namespace {

// C[b] (+)= op(A[b]) op(B[b]) for every batch item; stride 0 reuses one matrix.
template <class T>
void batched_gemm(size_t batch, bool trans_a, bool trans_b, size_t M, size_t N, size_t K, const T* A, size_t stride_a,
                  const T* B, size_t stride_b, T beta, T* C, size_t stride_c) {
    for (size_t i = 0; i < batch; ++i)
        gemm<T>(trans_a, trans_b, M, N, K, T(1), A + i * stride_a, B + i * stride_b, beta, C + i * stride_c);
}

// f(m) for every stacked member m, whose product is at most `work` multiply-adds:
// below kParallelWork a member's GEMM runs whole on one thread (as in its solo run,
// where gemm would not split it), so the members share the pool, several to a
// chunk when small; above it each GEMM splits itself (blas.cpp), members in turn.
template <class F>
void for_each_member(size_t members, size_t work, F&& f) {
    if (work >= kParallelWork) {
        for (size_t m = 0; m < members; ++m) f(m);
        return;
    }
    parallel_for(members, [&](size_t begin, size_t end) {
        for (size_t m = begin; m < end; ++m) f(m);
    }, std::max<size_t>(1, kParallelWork / std::max<size_t>(work, 1)));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
    constexpr const char* op = "matmul";
    check_defined(op, a, "first operand");
    check_defined(op, b, "second operand");
    const Shape sa = a.shape(), sb = b.shape();
    const std::string shapes = shape_str(sa) + " @ " + shape_str(sb);
    if (sa.size() < 2 || sb.size() < 2) fail(op, shapes + ": both operands need at least 2 axes");
    check_same_dtype(op, a, b);
    const size_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
    if (sb[sb.size() - 2] != K) fail(op, shapes + ": inner sizes differ");
    // Batch axes: b 2-D (a weight shared by every batch item) or equal to a's.
    const Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
    const bool shared_b = sb.size() == 2;
    if (!shared_b && batch_a != batch_b) fail(op, shapes + ": batch axes differ");
    const size_t batch = numel_of(batch_a);
    Shape out_shape = batch_a;
    out_shape.push_back(M);
    out_shape.push_back(N);
    check_same_device(op, {&a, &b});
    if (on_device(a)) return matmul_device(a, b, batch, M, N, K, shared_b, out_shape);

    return dispatch(a.dtype(), [&]<class T>() {
        const Array<T>& A = values_of<T>(a);
        const Array<T>& B = values_of<T>(b);
        Array<T> out = make_array<T>(out_shape);
        if (shared_b)  // (batch*M, K) @ (K, N) as one GEMM
            gemm<T>(false, false, batch * M, N, K, T(1), A.data(), B.data(), T(0), out.data());
        else
            batched_gemm<T>(batch, false, false, M, N, K, A.data(), M * K, B.data(), K * N, T(0), out.data(), M * N);
        return record<T>(op, std::move(out), {a, b}, [a, b, batch, M, N, K, shared_b](const Array<T>& g, const Array<T>&) {
            const Array<T>& A = values_of<T>(a);
            const Array<T>& B = values_of<T>(b);
            // dA = dC B^T   (batch, M, K)
            send_grad<T>(a, [&] {
                Array<T> ga = make_array<T>(a.shape());
                if (shared_b)
                    gemm<T>(false, true, batch * M, K, N, T(1), g.data(), B.data(), T(0), ga.data());
                else
                    batched_gemm<T>(batch, false, true, M, K, N, g.data(), M * N, B.data(), K * N, T(0), ga.data(), M * K);
                return ga;
            });
            // dB = A^T dC   (batch, K, N), or summed over the batch when B is shared
            send_grad<T>(b, [&] {
                Array<T> gb = make_array<T>(b.shape());
                if (shared_b)
                    gemm<T>(true, false, K, N, batch * M, T(1), A.data(), g.data(), T(0), gb.data());
                else
                    batched_gemm<T>(batch, true, false, K, N, M, A.data(), M * K, g.data(), M * N, T(0), gb.data(), K * N);
                return gb;
            });
        });
    });
}

namespace {

// linear's checks of x (..., in), weight (out, in) and bias (out); returns (..., out).
Shape linear_shape(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    constexpr const char* op = "linear";
    check_defined(op, x, "input");
    check_defined(op, weight, "weight");
    const Shape sx = x.shape(), sw = weight.shape();
    if (sw.size() != 2 || sx.empty() || sx.back() != sw[1])
        fail(op, "input " + shape_str(sx) + " with weight " + shape_str(sw) + ": weight must be (out, " +
                     (sx.empty() ? std::string("in") : std::to_string(sx.back())) + ")");
    check_same_dtype(op, x, weight);
    if (bias.defined()) {
        check_same_dtype(op, x, bias);
        if (bias.shape() != Shape{sw[0]}) fail(op, "bias " + shape_str(bias.shape()) + " for weight " + shape_str(sw));
    }
    check_same_device(op, {&x, &weight, &bias});
    Shape out_shape = sx;
    out_shape.back() = sw[0];
    return out_shape;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    constexpr const char* op = "linear";
    if (weight.defined() && weight.dim() == 3 && x.defined() && x.dim() > 0) {  // stacked members: K equal blocks of rows
        const size_t members = weight.size(0), rows = x.numel() / std::max<size_t>(x.shape().back(), 1);
        if (members == 0 || rows % members != 0)
            fail(op, "input " + shape_str(x.shape()) + " has " + std::to_string(rows) + " rows, not a multiple of the " +
                         std::to_string(members) + " members of weight " + shape_str(weight.shape()));
        return linear_members(x, weight, bias, std::vector<size_t>(members, rows / members));
    }
    const Shape out_shape = linear_shape(x, weight, bias);
    const size_t in = weight.size(1), out_features = weight.size(0), rows = x.numel() / std::max<size_t>(in, 1);
    if (on_device(x)) return linear_device(x, weight, bias, out_shape);
    return dispatch(x.dtype(), [&]<class T>() {
        Array<T> out = make_array<T>(out_shape);  // (rows, out) = X (rows, in) W^T (in, out) + b
        // With a bias, every row starts as b and the GEMM adds to it (beta = 1): one
        // pass over the output instead of BLAS zeroing it and a second pass adding b.
        if (bias.defined()) {
            const T* b = values_of<T>(bias).data();
            for (size_t r = 0; r < rows; ++r) std::copy(b, b + out_features, out.data() + r * out_features);
        }
        gemm<T>(false, true, rows, out_features, in, T(1), values_of<T>(x).data(), values_of<T>(weight).data(),
                bias.defined() ? T(1) : T(0), out.data());
        return record<T>(op, std::move(out), {x, weight, bias}, [x, weight, bias, rows, in, out_features](const Array<T>& g, const Array<T>&) {
            // dX = g W   (rows, in)
            send_grad<T>(x, [&] {
                Array<T> gx = make_array<T>(x.shape());
                gemm<T>(false, false, rows, in, out_features, T(1), g.data(), values_of<T>(weight).data(), T(0), gx.data());
                return gx;
            });
            // dW = g^T X   (out, in)
            send_grad<T>(weight, [&] {
                Array<T> gw = make_array<T>(weight.shape());
                gemm<T>(true, false, out_features, in, rows, T(1), g.data(), values_of<T>(x).data(), T(0), gw.data());
                return gw;
            });
            // db = sum over rows of g   (out)
            send_grad<T>(bias, [&] {
                Array<T> gb = make_array<T>({out_features});
                sum_rows<T>(g.data(), rows, out_features, gb.data());
                return gb;
            });
        });
    });
}

Tensor linear_members(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::vector<size_t>& member_rows) {
    constexpr const char* op = "linear";
    check_defined(op, x, "input");
    check_defined(op, weight, "weight");
    const Shape sx = x.shape(), sw = weight.shape();
    if (sw.size() != 3 || sx.empty() || sx.back() != sw[2])
        fail(op, "input " + shape_str(sx) + " with stacked weight " + shape_str(sw) + ": weight must be (members, out, " +
                     (sx.empty() ? std::string("in") : std::to_string(sx.back())) + ")");
    const size_t members = sw[0], out_features = sw[1], in = sw[2], rows = x.numel() / std::max<size_t>(in, 1);
    check_same_dtype(op, x, weight);
    if (bias.defined()) {
        check_same_dtype(op, x, bias);
        if (bias.shape() != Shape{members, out_features})
            fail(op, "bias " + shape_str(bias.shape()) + " for stacked weight " + shape_str(sw));
    }
    size_t counted = 0;
    for (size_t n : member_rows) counted += n;
    if (member_rows.size() != members || counted != rows)
        fail(op, "input " + shape_str(sx) + ": " + std::to_string(rows) + " rows given to " + std::to_string(member_rows.size()) +
                     " blocks adding up to " + std::to_string(counted) + ", for " + std::to_string(members) + " members");
    check_same_device(op, {&x, &weight, &bias});
    Shape out_shape = sx;
    out_shape.back() = out_features;
    if (on_device(x)) return linear_members_device(x, weight, bias, member_rows, out_shape);
    std::vector<size_t> first(members + 1, 0);  // member m's rows are [first[m], first[m + 1])
    for (size_t m = 0; m < members; ++m) first[m + 1] = first[m] + member_rows[m];
    // a member's product, the largest: each of the forward's and the backward's GEMMs
    const size_t work = members == 0 ? 0 : *std::max_element(member_rows.begin(), member_rows.end()) * out_features * in;
    return dispatch(x.dtype(), [&]<class T>() {
        const T* X = values_of<T>(x).data();
        const T* W = values_of<T>(weight).data();
        Array<T> out = make_array<T>(out_shape);  // block m: X_m W_m^T + b_m, what linear does for member m alone
        for_each_member(members, work, [&](size_t m) {
            const size_t n = member_rows[m];
            T* Y = out.data() + first[m] * out_features;
            if (bias.defined()) {
                const T* b = values_of<T>(bias).data() + m * out_features;
                for (size_t r = 0; r < n; ++r) std::copy(b, b + out_features, Y + r * out_features);
            }
            if (n > 0)
                gemm<T>(false, true, n, out_features, in, T(1), X + first[m] * in, W + m * out_features * in,
                        bias.defined() ? T(1) : T(0), Y);
        });
        return record<T>(op, std::move(out), {x, weight, bias}, [x, weight, bias, first, members, in, out_features, work](const Array<T>& g, const Array<T>&) {
            const T* X = values_of<T>(x).data();
            const T* W = values_of<T>(weight).data();
            // dX_m = g_m W_m   (rows_m, in)
            send_grad<T>(x, [&] {
                Array<T> gx = make_array<T>(x.shape());
                for_each_member(members, work, [&](size_t m) {
                    if (const size_t n = first[m + 1] - first[m]; n > 0)
                        gemm<T>(false, false, n, in, out_features, T(1), g.data() + first[m] * out_features, W + m * out_features * in,
                                T(0), gx.data() + first[m] * in);
                });
                return gx;
            });
            // dW_m = g_m^T X_m   (out, in)
            send_grad<T>(weight, [&] {
                Array<T> gw = make_array<T>(weight.shape());
                gw.fill(T(0));
                for_each_member(members, work, [&](size_t m) {
                    if (const size_t n = first[m + 1] - first[m]; n > 0)
                        gemm<T>(true, false, out_features, in, n, T(1), g.data() + first[m] * out_features, X + first[m] * in, T(0),
                                gw.data() + m * out_features * in);
                });
                return gw;
            });
            // db_m = sum over member m's rows of g   (out)
            send_grad<T>(bias, [&] {
                Array<T> gb = make_array<T>(bias.shape());
                for (size_t m = 0; m < members; ++m)
                    sum_rows<T>(g.data() + first[m] * out_features, first[m + 1] - first[m], out_features, gb.data() + m * out_features);
                return gb;
            });
        });
    });
}

void add_matmul_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(14);
    auto in = [&](const Shape& s) { return gradcheck_input(rng, s); };
    using V = const std::vector<Tensor>&;
    cases.push_back({"matmul", "2-D (3,4) @ (4,2)", {in({3, 4}), in({4, 2})}, [](V t) { return matmul(t[0], t[1]); }});
    cases.push_back({"matmul", "batched (2,3,4) @ (2,4,5)", {in({2, 3, 4}), in({2, 4, 5})},
                     [](V t) { return matmul(t[0], t[1]); }});
    cases.push_back({"matmul", "shared weight (2,2,3,4) @ (4,2)", {in({2, 2, 3, 4}), in({4, 2})},
                     [](V t) { return matmul(t[0], t[1]); }});
    cases.push_back({"matmul", "transposed operand (2,3,4) @ (2,5,4)^T", {in({2, 3, 4}), in({2, 5, 4})},
                     [](V t) { return matmul(t[0], transpose(t[1], -1, -2)); }});
    cases.push_back({"linear", "(2,3,4) with weight (5,4) and bias", {in({2, 3, 4}), in({5, 4}), in({5})},
                     [](V t) { return linear(t[0], t[1], t[2]); }});
    cases.push_back({"linear", "(3,4) without bias", {in({3, 4}), in({2, 4})}, [](V t) { return linear(t[0], t[1], Tensor()); }});
    cases.push_back({"linear", "stacked: (4,3,4) with weight (2,5,4) and bias (2,5)", {in({4, 3, 4}), in({2, 5, 4}), in({2, 5})},
                     [](V t) { return linear(t[0], t[1], t[2]); }});
    cases.push_back({"linear", "stacked, blocks of 2, 0 and 3 rows, no bias", {in({5, 4}), in({3, 2, 4})},
                     [](V t) { return linear_members(t[0], t[1], Tensor(), {2, 0, 3}); }});
    cases.push_back({"matmul", "size-1 axes (1,4) @ (4,1)", {in({1, 4}), in({4, 1})}, [](V t) { return matmul(t[0], t[1]); }});
}

std::vector<Tensor> linears(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases) {
    if (weights.size() != biases.size())
        fail("linear", std::to_string(weights.size()) + " weights with " + std::to_string(biases.size()) + " biases");
    const bool stacked = std::any_of(weights.begin(), weights.end(), [](const Tensor& w) { return w.defined() && w.dim() == 3; });
    if (!stacked)  // (linear checks stacked members' weights itself; linears_device leaves a weight it cannot run to it)
        for (size_t i = 0; i < weights.size(); ++i) linear_shape(x, weights[i], biases[i]);
    const bool all_stacked = std::all_of(weights.begin(), weights.end(), [](const Tensor& w) { return w.defined() && w.dim() == 3; });
    if (on_device(x) && (!stacked || all_stacked)) return linears_device(x, weights, biases);
    std::vector<Tensor> out;
    for (size_t i = 0; i < weights.size(); ++i) out.push_back(linear(x, weights[i], biases[i]));
    return out;
}

}  // namespace attnlab
