// Matrix products through OpenBLAS GEMM; no naive loops on this path.
#include "autograd/blas.h"
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
    cases.push_back({"matmul", "size-1 axes (1,4) @ (4,1)", {in({1, 4}), in({4, 1})}, [](V t) { return matmul(t[0], t[1]); }});
}

}  // namespace attnlab
